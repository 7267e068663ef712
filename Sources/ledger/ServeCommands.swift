import Foundation
import HTTPServer
import LedgerCommandLine
import LedgerService
import LedgerStore
import Synchronization

enum ServeCommand {
    static let help = """
    usage: ledger serve

    Serves the HTTP API on LEDGER_LISTEN (default 127.0.0.1:8080): Apple and WeChat webhooks,
    the query API, /healthz, /readyz and /metrics. Configuration: LEDGER_CONFIG and the LEDGER_*
    environment variables (README.md §Configuration). SIGTERM or SIGINT stops accepting
    connections, lets requests in flight finish (up to 10 s), then exits.
    """

    static func run(_ raw: [String]) async throws {
        _ = try parse(raw, command: "serve", help: help)
        let configuration = try loadConfiguration()
        let app = try LedgerApp(configuration: configuration)
        let server = HTTPServer(configuration: app.httpConfiguration(), router: app.makeRouter())
        server.observer = { app.observe($0) }
        do { try server.start() } catch {
            throw CommandFailure(message: "\(error)")
        }
        app.log.info("serving", ["listen": "\(configuration.listenHost):\(server.port ?? configuration.listenPort)",
                                 "pid": Int(getpid())])
        let stop = AsyncStream<Void>.makeStream()
        ShutdownSignals.install { stop.continuation.yield() }
        await app.startBackgroundWork()
        for await _ in stop.stream { break }
        app.log.info("shutting down: finishing requests in flight")
        await server.shutdown(gracePeriod: .seconds(10))
        await app.stopBackgroundWork()
        app.shutdown()
        app.log.info("stopped")
    }
}

enum MigrateCommand {
    static let help = """
    usage: ledger migrate [--status]

    Applies the pending migrations in Migrations/ (LEDGER_MIGRATIONS_DIR overrides where they are)
    to LEDGER_DATABASE_URL, in order, each exactly once, under an advisory lock. Refuses to run if a
    migration that has already been applied was edited. Run it as the database owner.

      --status   list applied and pending migrations without applying anything
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "migrate", boolean: ["status"], help: help)
        let configuration = try loadConfiguration()
        let migrator = Migrator(conninfo: configuration.databaseURL, directory: try Migrator.locateDirectory())
        do {
            if args.has("status") {
                let s = try migrator.status()
                for name in s.applied { print("applied  \(name)") }
                for name in s.pending { print("pending  \(name)") }
                for name in s.changed { print("CHANGED  \(name) (edited after it was applied)") }
                return
            }
            let applied = try migrator.migrate()
            if applied.isEmpty { print("migrations: up to date") }
            for name in applied { print("applied \(name)") }
        } catch {
            throw CommandFailure(message: "\(error)")
        }
    }
}

func loadConfiguration() throws -> LedgerConfiguration {
    do { return try LedgerConfiguration.load() } catch {
        throw CommandFailure(message: "configuration: \(error)", exitCode: 2)
    }
}

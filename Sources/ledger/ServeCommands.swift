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
    the query API, /healthz and /readyz (status only), /metrics and the detailed /readyz with the
    admin token — or without one on LEDGER_ADMIN_LISTEN when set. Beside it run the projection
    catch-up worker and the group-commit writer. Configuration: LEDGER_CONFIG and the LEDGER_*
    environment variables (README.md §Configuration). SIGTERM or SIGINT stops accepting
    connections, lets requests in flight finish (up to 10 s), stops the worker, commits what the
    writer holds, then exits.
    """

    static func run(_ raw: [String]) async throws {
        _ = try parse(raw, command: "serve", help: help)
        ProcessMemory.limitArenas()
        let configuration = try loadConfiguration()
        let app: LedgerApp
        do { app = try LedgerApp(configuration: configuration) } catch {
            throw CommandFailure(message: "\(error)", exitCode: 2)
        }
        let stop = AsyncStream<Void>.makeStream()
        ShutdownSignals.install {
            app.log.info("shutting down: finishing requests in flight")
            stop.continuation.yield()
        }
        do {
            try await app.serve(until: stop.stream) { listening in
                app.log.info("serving", ["listen": listening.joined(separator: ", "), "pid": Int(getpid())])
            }
        } catch {
            throw CommandFailure(message: "\(error)")
        }
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
        let directory: URL
        do { directory = try Migrator.locateDirectory() } catch { throw CommandFailure(message: "\(error)", exitCode: 2) }
        let store = Store(.init(databaseURL: configuration.databaseURL, poolSize: 1, liveProjections: false))
        defer { store.close() }
        let migrator = store.migrator(directory: directory)
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

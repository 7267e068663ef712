import Foundation
import HTTPServer
import LedgerCommandLine
import LedgerCore
import LedgerService
import LedgerStore

enum ProjectCommand {
    static let help = """
    usage: ledger project [--once]

    Runs the projection catch-up worker: for each projection, advances its checkpoint over events
    the live hook did not apply, one transaction per batch, coordinating with other workers
    through `SELECT … FOR UPDATE SKIP LOCKED` (run as many as you like; none double-applies).
    A failing event stops its projection with the error and position recorded (see /readyz);
    it is retried, never skipped. `serve` runs the same worker in the background.

      --once   catch up until nothing advances, print each projection's state, and exit
               (exit code 1 if a projection is stopped on a failing event)

    Without --once it runs until SIGINT/SIGTERM, woken by appends (NOTIFY) or every second.
    Database: LEDGER_DATABASE_URL.
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "project", boolean: ["once"], help: help)
        let configuration = try loadConfiguration()
        let catalog: ProductCatalog
        do { catalog = try configuration.catalog() } catch {
            throw CommandFailure(message: "configuration products: \(error)", exitCode: 2)
        }
        var storeConfiguration = Store.Configuration(databaseURL: configuration.databaseURL, poolSize: 2, catalog: catalog, liveProjections: false)
        // The webhook events must be derived as the service derives them.
        storeConfiguration.webhookExpirySettle = configuration.webhooks.expirySettleMillis
        let store = Store(storeConfiguration)
        defer { store.close() }
        let worker = store.worker
        if args.has("once") {
            do { _ = try await worker.catchUp() } catch { throw CommandFailure(message: "\(error)") }
            let statuses: [ProjectionStatus]
            do { statuses = try await store.projectionStatuses() } catch { throw CommandFailure(message: "\(error)") }
            for s in statuses {
                print("\(s.name): position \(s.position) of \(s.head) (lag \(s.lag)), \(s.status)\(s.lastError.map { ": \($0)" } ?? "")")
            }
            if statuses.contains(where: \.isFailed) { throw CommandFailure(message: "a projection is stopped on a failing event (see above)") }
            return
        }
        ShutdownSignals.install { worker.stop() }
        FileHandle.standardError.write(Data("ledger project: running; SIGINT or SIGTERM stops it\n".utf8))
        await worker.run(pollInterval: .seconds(1)) { error in
            FileHandle.standardError.write(Data("ledger project: \(error)\n".utf8))
        }
    }
}

import Foundation
import LedgerCommandLine
import LedgerCore
import LedgerService
import LedgerStore

enum RebuildCommand {
    static let help = """
    usage: ledger rebuild [--projection NAME] [--dry-run]

    Rebuilds projections from position 0 into fresh tables while ingestion continues, then swaps
    them in atomically (appends wait only for the swap) and sets their checkpoints to the head.
    Reads the decoded payload columns only, never the raw evidence. Works as the service role.

      --projection NAME   one of \(ProjectionName.allCases.map(\.rawValue).joined(separator: ", "))
                          (default: all of them; webhook events are recomputed with their ids and
                          positions, and a rebuild sends none again)
      --dry-run           change nothing: fold everything under the CURRENT product catalog
                          (configuration "products") and print who would gain and who would lose
                          which entitlement compared with the stored entitlements table

    On a terminal, a progress bar shows events/s and the ETA. Database: LEDGER_DATABASE_URL.
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "rebuild", valued: ["projection"], boolean: ["dry-run"], help: help)
        let configuration = try loadConfiguration()
        let catalog: ProductCatalog
        do { catalog = try configuration.catalog() } catch {
            throw CommandFailure(message: "configuration products: \(error)", exitCode: 2)
        }
        var projections = Set(ProjectionName.allCases)
        if let name = args.options["projection"] {
            do { projections = [try ProjectionName.parse(name)] } catch {
                throw CommandFailure(message: "\(error)", exitCode: 2)
            }
        }
        let dryRun = args.has("dry-run")
        if dryRun && args.options["projection"] != nil && projections != [.entitlements] {
            throw CommandFailure(message: "--dry-run compares entitlements only; drop --projection or use --projection entitlements", exitCode: 2)
        }
        // On the record first (by AdminActions), as the HTTP admin action is.
        var storeConfiguration = Store.Configuration(databaseURL: configuration.databaseURL, poolSize: 1, catalog: catalog, liveProjections: false)
        // The webhook events must be derived as the service derives them.
        storeConfiguration.webhookExpirySettle = configuration.webhooks.expirySettleMillis
        let store = Store(storeConfiguration)
        defer { store.close() }
        let bar = LazyProgressBar(label: dryRun ? "dry run" : "rebuild")
        let report: RebuildReport
        do {
            report = try await AdminActions(store: store).rebuild(RebuildRequest(projections: projections, dryRun: dryRun)) { done, total in
                bar.update(done, total)
            }
        } catch let error as StoreError {
            bar.finish()
            throw CommandFailure(message: "cannot record the rebuild in the event log (nothing was rebuilt): \(error)")
        } catch {
            bar.finish()
            throw CommandFailure(message: "\(error)")
        }
        bar.finish()
        print(report.description)
        if dryRun {
            print("evaluated at \(report.evaluatedAt) ms under the current catalog: \(report.gains.count) gained, \(report.losses.count) lost")
            for change in report.gains { print("+ \(line(change))") }
            for change in report.losses { print("- \(line(change))") }
        }
    }

    static func line(_ c: EntitlementChange) -> String {
        "customer \(c.customerId) \(c.entitlement) (product \(c.productId), subscription \(c.originalTransactionId))"
    }
}

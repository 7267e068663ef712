import Foundation
import LedgerCore
import LedgerStore

/// After a crash: do the live projection tables say what a rebuild from the event log says?
/// The catch-up worker first applies whatever the crash left unapplied (as `serve` would on
/// restart); then every subscription's state (re-evaluated at one fixed instant) and transactions
/// are read, the projections are rebuilt from position 0, and read again.
public enum ProjectionConsistency {
    public static func compareWithRebuild(conninfo: String, catalog: ProductCatalog = .productIds) async throws -> String? {
        let store = Store(.init(databaseURL: conninfo, poolSize: 2, catalog: catalog))
        defer { store.close() }
        _ = try await store.worker.catchUp()
        let queries = store.projections
        let now = LedgerClock.system.now()

        func snapshot() async throws -> [String: String] {
            var out: [String: String] = [:]
            for key in try await queries.subscriptionKeys() {
                let state = try await queries.subscription(key, now: now)
                let transactions = try await queries.transactions(key)
                out[key.text] = "\(String(describing: state))|\(transactions)"
            }
            return out
        }
        let live = try await snapshot()
        _ = try await store.rebuilder().run()
        let rebuilt = try await snapshot()
        if live == rebuilt { return nil }
        let missing = Set(rebuilt.keys).subtracting(live.keys).sorted().prefix(3)
        let extra = Set(live.keys).subtracting(rebuilt.keys).sorted().prefix(3)
        let differing = live.keys.filter { rebuilt[$0] != nil && rebuilt[$0] != live[$0] }.sorted().prefix(3)
        return "live \(live.count) vs rebuilt \(rebuilt.count) subscriptions; missing live: \(Array(missing)); only live: \(Array(extra)); differing: \(Array(differing))"
    }
}

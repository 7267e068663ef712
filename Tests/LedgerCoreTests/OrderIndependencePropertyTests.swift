import LedgerTesting
import XCTest
@testable import LedgerCore

/// The ordering rule tested directly: generated Apple lifecycles (`LifecycleGenerator`), decoded
/// by `FactDecoder` from the payloads the ledger stores, folded in delivery order and in shuffled
/// orders with duplicates must give identical states, transactions, entitlements and time-travel
/// answers; a stored state re-evaluated before its `validUntil` must equal a fresh fold; and the
/// status at each notification's signedDate must be the status Apple put in it.
/// LEDGER_PROPERTY_SEED explores other seeds; a failure prints the seed and customer.
final class OrderIndependencePropertyTests: XCTestCase {
    static let start: EpochMillis = 1_735_689_600_000
    static let day: EpochMillis = 86_400_000

    var seed: UInt64 {
        ProcessInfo.processInfo.environment["LEDGER_PROPERTY_SEED"].flatMap { UInt64($0) } ?? 0x5EED_2026
    }

    static let catalog = ProductCatalog(entitlementsByProduct: [
        "com.example.monthly": ["basic"], "com.example.yearly": ["basic"],
        "com.example.premium.monthly": ["basic", "premium"], "com.example.premium.yearly": ["basic", "premium"],
    ])

    struct Observation: Equatable {
        var state: SubscriptionState?
        var transactions: [TransactionRecord]
        var grants: [EntitlementGrant]
    }

    func observe(_ projection: SubscriptionProjection, _ key: SubscriptionKey, at time: EpochMillis) -> Observation {
        let view = projection.view(at: time)
        return Observation(state: view.subscription(key), transactions: view.transactions, grants: view.entitlements(catalog: Self.catalog))
    }

    func facts(_ life: SimulatedLifecycle) throws -> [Fact] {
        try life.notifications.enumerated().flatMap { i, n in try n.facts(position: Int64(i + 1), recordedAt: n.deliveredAt) }
    }

    func testThousandLifecyclesFoldTheSameInAnyOrderWithDuplicates() throws {
        let generator = LifecycleGenerator(customers: 1_000, days: 730, start: Self.start, seed: seed)
        var checkedFacts = 0
        var statusesSeen = Set<SubscriptionStatus>()
        for customer in 0..<generator.customers {
            let life = generator.lifecycle(customerIndex: customer)
            let facts = try facts(life)
            XCTAssertFalse(facts.contains { $0.kind == .unreadable }, "seed \(seed) customer \(customer): a generated notification did not decode")
            checkedFacts += facts.count
            let key = SubscriptionKey(environment: generator.environment, originalTransactionId: life.originalTransactionId)
            let first = life.notifications.map(\.signedDate).min()!
            var times = [first + Self.day, first + (life.end - first) / 3, first + 2 * (life.end - first) / 3,
                         life.end, life.end + 90 * Self.day]
            // Just after a few of the moments where the rules differ most.
            let turns: Set<String> = ["DID_FAIL_TO_RENEW", "REFUND", "REFUND_REVERSED", "DID_CHANGE_RENEWAL_PREF", "EXPIRED"]
            times += life.notifications.filter { turns.contains($0.notificationType) }.prefix(4).map { $0.signedDate + 60_000 }
            let inOrder = SubscriptionProjection(facts: facts)
            let reference = times.map { observe(inOrder, key, at: $0) }
            for r in reference { if let s = r.state?.status { statusesSeen.insert(s) } }
            let (businessT, recordedR) = (times[1], times[2])
            let refBitemporal = SubscriptionProjection.view(at: businessT, recordedBy: recordedR, facts: facts).subscription(key)
            let refRecorded = SubscriptionProjection.view(at: recordedR, recordedBy: recordedR, facts: facts).subscription(key)

            var rng = SplitMix64(seed: life.seed ^ 0xD1CE)
            for round in 0..<5 {
                var shuffled = facts
                // Duplicates: the same message delivered again, later, at a new position.
                for _ in 0..<Int(rng.int(in: 1...3)) {
                    var again = rng.pick(facts)
                    again.recordedAt += rng.int(in: 1...(3 * Self.day))
                    shuffled.append(again)
                }
                shuffled.shuffle(using: &rng)
                for i in shuffled.indices { shuffled[i].position = Int64(i + 1) }
                let folded = SubscriptionProjection(facts: shuffled)
                for (k, time) in times.enumerated() {
                    let got = observe(folded, key, at: time)
                    if got != reference[k] {
                        XCTFail("""
                            order-dependent fold: seed \(seed) customer \(customer) (lifecycle seed \(life.seed)) round \(round) at \(time)
                            in order: \(String(describing: reference[k].state))
                            shuffled: \(String(describing: got.state))
                            """)
                        return
                    }
                }
                // A duplicate is recorded after its original, so what was recorded by R states the same.
                let bitemporal = SubscriptionProjection.view(at: businessT, recordedBy: recordedR, facts: shuffled).subscription(key)
                if bitemporal != refBitemporal
                    || SubscriptionProjection.view(at: recordedR, recordedBy: recordedR, facts: shuffled).subscription(key) != refRecorded {
                    XCTFail("order-dependent time travel: seed \(seed) customer \(customer) round \(round)")
                    return
                }
            }
        }
        XCTAssertGreaterThan(checkedFacts, 10_000, "the lifecycles are too short to test anything")
        XCTAssertTrue(statusesSeen.isSuperset(of: [.active, .expired, .revoked, .billingRetry, .gracePeriod]),
                      "the generated lifecycles should reach every subscription status: \(statusesSeen)")
    }

    /// A projection row stores the state folded at one time; readers re-evaluate it at a later
    /// time. That must equal folding again, for every time before `validUntil`.
    func testAStoredStateReevaluatedBeforeValidUntilEqualsAFreshFold() throws {
        let generator = LifecycleGenerator(customers: 200, days: 540, start: Self.start, seed: seed ^ 0x5707)
        var compared = 0
        for customer in 0..<generator.customers {
            let life = generator.lifecycle(customerIndex: customer)
            let fold = SubscriptionFold(key: SubscriptionKey(environment: generator.environment, originalTransactionId: life.originalTransactionId),
                                        facts: try facts(life))
            var rng = SplitMix64(seed: life.seed ^ 0x7E57)
            for _ in 0..<20 {
                let t0 = rng.int(in: Self.start...(life.end + 120 * Self.day))
                guard let stored = fold.state(at: t0) else { continue }
                let horizon = min(stored.validUntil ?? .max, t0 + 200 * Self.day)
                guard horizon > t0 else { XCTFail("validUntil must lie after the evaluation time"); return }
                for t in [t0, t0 + 1, (t0 + horizon) / 2, horizon - 1] where t < horizon {
                    compared += 1
                    if stored.reevaluated(at: t) != fold.state(at: t) {
                        XCTFail("""
                            seed \(generator.seed) customer \(customer): stored at \(t0), valid until \(String(describing: stored.validUntil)), \
                            re-evaluated at \(t)
                            re-evaluated: \(stored.reevaluated(at: t))
                            fresh fold:   \(String(describing: fold.state(at: t)))
                            """)
                        return
                    }
                }
                if let until = stored.validUntil { XCTAssertTrue(stored.needsRefold(at: until)) }
            }
        }
        XCTAssertGreaterThan(compared, 5_000)
    }

    /// Apple's data.status is "the status as of signedDate" (apple.md §2.1): the fold's status at
    /// each notification's signedDate, knowing everything, must be it — except where a later fact
    /// rewrites that moment (a refund dated back before the notification, or the reversal of one).
    func testFoldedStatusAtEachSignedDateMatchesTheStatusApplePutInTheNotification() throws {
        let generator = LifecycleGenerator(customers: 250, days: 540, start: Self.start, seed: seed ^ 0xA11CE)
        var compared = 0
        var mismatches: [String] = []
        for customer in 0..<generator.customers {
            let life = generator.lifecycle(customerIndex: customer)
            let facts = try facts(life)
            let key = SubscriptionKey(environment: generator.environment, originalTransactionId: life.originalTransactionId)
            var seen = Set<String>()
            for n in life.notifications where seen.insert(n.notificationUUID).inserted {
                // What the ledger knew when Apple signed it: facts signed by then (a later refund
                // dated back would change the answer about that moment, rightly).
                let known = facts.filter { $0.signedAt <= n.signedDate }
                let state = SubscriptionProjection.view(at: n.signedDate, facts: known).subscription(key)
                compared += 1
                if state?.status.appleStatus != n.status {
                    mismatches.append("customer \(customer) (lifecycle seed \(life.seed)): \(n.notificationType)/\(n.subtype ?? "-") "
                                      + "signed \(n.signedDate) says \(n.status), the fold says \(String(describing: state?.status))")
                }
            }
        }
        XCTAssertGreaterThan(compared, 2_000)
        XCTAssertEqual(mismatches.count, 0, "seed \(generator.seed):\n" + mismatches.prefix(10).joined(separator: "\n"))
    }
}

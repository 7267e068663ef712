import XCTest
@testable import LedgerCore

/// The ordering rule tested directly (DESIGN.md §Ordering): generated lifecycles, folded in
/// delivery order and in shuffled orders with duplicates injected, must give identical
/// subscription states, transactions and entitlements at every evaluation time.
/// Set LEDGER_PROPERTY_SEED to explore other seeds; a failure prints the seed and customer.
final class OrderIndependencePropertyTests: XCTestCase {
    static let start: EpochMillis = 1_735_689_600_000
    static let day: EpochMillis = 86_400_000

    var seed: UInt64 {
        ProcessInfo.processInfo.environment["LEDGER_PROPERTY_SEED"].flatMap { UInt64($0) } ?? 0x5EED_2026
    }

    struct Observation: Equatable {
        var state: SubscriptionState?
        var transactions: [TransactionRecord]
        var grants: [EntitlementGrant]
    }

    func observe(_ projection: SubscriptionProjection, _ id: String, at time: EpochMillis) -> Observation {
        let view = projection.view(at: time)
        return Observation(state: view.subscription(id), transactions: view.transactions,
                           grants: view.entitlements(catalog: Fixture.catalogForGenerated))
    }

    func testThousandLifecyclesFoldTheSameInAnyOrderWithDuplicates() {
        let generator = LifecycleGenerator(customers: 1_000, days: 730, start: Self.start, seed: seed)
        var checkedFacts = 0
        var statusesSeen = Set<SubscriptionStatus>()
        for customer in 0..<generator.customers {
            let life = generator.lifecycle(customerIndex: customer)
            let facts = life.notifications.enumerated().map { i, n in n.fact(position: Int64(i + 1), recordedAt: n.deliveredAt) }
            checkedFacts += facts.count
            let first = life.notifications.map(\.signedDate).min()!
            var times = [first + Self.day, first + (life.end - first) / 3, first + 2 * (life.end - first) / 3,
                         life.end, life.end + 90 * Self.day]
            // Plus just after a few of the moments where the rules differ most.
            let turns: Set<String> = ["DID_FAIL_TO_RENEW", "REFUND", "REFUND_REVERSED", "DID_CHANGE_RENEWAL_PREF", "EXPIRED"]
            times += life.notifications.filter { turns.contains($0.notificationType) }.prefix(4).map { $0.signedDate + 60_000 }
            let inOrder = SubscriptionProjection(facts: facts)
            let reference = times.map { observe(inOrder, life.originalTransactionId, at: $0) }
            for r in reference { if let s = r.state?.status { statusesSeen.insert(s) } }
            let businessT = times[1]
            let recordedR = times[2]
            let refBusiness = SubscriptionProjection.asOfBusinessTime(businessT, facts: facts).subscription(life.originalTransactionId)
            let refRecorded = SubscriptionProjection.asKnownAt(recordedTime: recordedR, facts: facts).subscription(life.originalTransactionId)

            var rng = SplitMix64(seed: life.seed ^ 0xD1CE)
            for round in 0..<5 {
                var shuffled = facts
                // Inject duplicates: the same message delivered again, later, at a new position.
                for _ in 0..<Int(rng.int(in: 1...3)) {
                    var again = rng.pick(facts)
                    again.recordedAt += rng.int(in: 1...(3 * Self.day))
                    shuffled.append(again)
                }
                shuffled.shuffle(using: &rng)
                for i in shuffled.indices { shuffled[i].position = Int64(i + 1) }
                let folded = SubscriptionProjection(facts: shuffled)
                for (k, time) in times.enumerated() {
                    let got = observe(folded, life.originalTransactionId, at: time)
                    if got != reference[k] {
                        XCTFail("""
                            order-dependent fold: seed \(seed) customer \(customer) (lifecycle seed \(life.seed)) \
                            round \(round) at \(time)
                            in order: \(String(describing: reference[k].state))
                            shuffled: \(String(describing: got.state))
                            """)
                        return
                    }
                }
                let business = SubscriptionProjection.asOfBusinessTime(businessT, facts: shuffled).subscription(life.originalTransactionId)
                let recorded = SubscriptionProjection.asKnownAt(recordedTime: recordedR, facts: shuffled).subscription(life.originalTransactionId)
                if business != refBusiness || recorded != refRecorded {
                    XCTFail("order-dependent time travel: seed \(seed) customer \(customer) round \(round)")
                    return
                }
            }
        }
        XCTAssertGreaterThan(checkedFacts, 10_000, "the lifecycles are too short to test anything")
        XCTAssertEqual(statusesSeen, Set(SubscriptionStatus.allCases),
                       "the generated lifecycles should reach every status at some evaluation time")
    }

    /// The fold's status at each notification's signedDate (time travel at business time) must be
    /// the status Apple stated in that notification (`data.status`, "status as of signedDate").
    func testFoldedStatusAtEachSignedDateMatchesTheStatusApplePutInTheNotification() {
        let generator = LifecycleGenerator(customers: 250, days: 540, start: Self.start, seed: seed ^ 0xA11CE)
        var compared = 0
        for customer in 0..<generator.customers {
            let life = generator.lifecycle(customerIndex: customer)
            let facts = life.notifications.enumerated().map { i, n in n.fact(position: Int64(i + 1), recordedAt: n.deliveredAt) }
            var seen = Set<String>()
            for n in life.notifications where seen.insert(n.notificationUUID).inserted {
                let state = SubscriptionProjection.asOfBusinessTime(n.signedDate, facts: facts).subscription(life.originalTransactionId)
                compared += 1
                if state?.status.appleStatus != n.status {
                    XCTFail("""
                        seed \(generator.seed) customer \(customer) (lifecycle seed \(life.seed)): \
                        \(n.notificationType)/\(n.subtype ?? "-") signed \(n.signedDate) says status \(n.status), \
                        the fold says \(String(describing: state?.status))
                        """)
                    return
                }
            }
        }
        XCTAssertGreaterThan(compared, 2_000)
    }
}

extension Fixture {
    static let catalogForGenerated = ProductCatalog(entitlementsByProduct: [
        "com.example.monthly": ["basic"], "com.example.yearly": ["basic"],
        "com.example.premium.monthly": ["basic", "premium"], "com.example.premium.yearly": ["basic", "premium"],
    ])
}

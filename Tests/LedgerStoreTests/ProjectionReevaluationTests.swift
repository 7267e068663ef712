import LedgerCore
import LedgerTesting
import XCTest

/// `SubscriptionState.reevaluated(at:)` is what lets the stored rows answer for any time: it must
/// agree with folding the same facts and evaluating at that time, for every lifecycle shape.
final class ProjectionReevaluationTests: XCTestCase {
    func testReevaluatingAStoredStateEqualsEvaluatingTheFoldAtThatTime() throws {
        let seed: UInt64 = 2026
        let generator = LifecycleGenerator(customers: 300, days: 500, start: ProjectionFixture.start, seed: seed)
        var statuses = Set<SubscriptionStatus>()
        var checked = 0
        for lifecycle in generator.lifecycles() {
            let facts = try lifecycle.notifications.enumerated().flatMap { try $1.facts(position: Int64($0 + 1), recordedAt: $1.deliveredAt) }
            guard let key = facts.first(where: { $0.subscription != nil })?.subscription else { continue }
            XCTAssertEqual(key.originalTransactionId, lifecycle.originalTransactionId)
            let fold = SubscriptionFold(key: key, facts: facts)
            let foldedAt = lifecycle.notifications.map(\.signedDate).max() ?? ProjectionFixture.start
            var times = lifecycle.notifications.flatMap { n -> [EpochMillis] in
                [n.signedDate, n.transaction.purchaseDate?.millis, n.transaction.expiresDate?.millis,
                 n.renewal.gracePeriodExpiresDate?.millis, n.transaction.revocationDate?.millis].compactMap { $0 }
            }
            times += [foldedAt + 61 * ProjectionFixture.day, ProjectionFixture.start - 1]
            times = Array(Set(times.flatMap { [$0 - 1, $0, $0 + 1] })).sorted()
            // A row folded at t0 answers for every later t before its validUntil (the next known
            // change); from then on readers fold again, so that is all re-evaluation must cover.
            for t0 in times {
                guard let stored = fold.state(at: t0) else { continue }
                for time in times where time >= t0 && stored.validUntil.map({ time < $0 }) ?? true {
                    let expected = fold.state(at: time)
                    XCTAssertEqual(stored.reevaluated(at: time), expected, "seed \(seed) customer \(lifecycle.customerIndex) folded at \(t0), read at \(time)")
                    if let status = expected?.status { statuses.insert(status) }
                    checked += 1
                }
            }
        }
        XCTAssertGreaterThan(checked, 10_000)
        XCTAssertEqual(statuses, Set(SubscriptionStatus.allCases).subtracting([.purchased]),
                       "the generated lifecycles must reach every subscription status")
    }
}

import LedgerCore
import XCTest

/// `SubscriptionState.reevaluated(at:)` is what lets the stored rows answer for any time: it must
/// agree with folding the same facts and evaluating at that time, for every lifecycle shape.
final class ProjectionReevaluationTests: XCTestCase {
    func testReevaluatingAStoredStateEqualsEvaluatingTheFoldAtThatTime() {
        let seed: UInt64 = 2026
        let generator = LifecycleGenerator(customers: 300, days: 500, start: ProjectionFixture.start, seed: seed)
        var statuses = Set<SubscriptionStatus>()
        var checked = 0
        for lifecycle in generator.lifecycles() {
            let facts = lifecycle.notifications.enumerated().map { $1.fact(position: Int64($0 + 1), recordedAt: $1.deliveredAt) }
            let fold = SubscriptionFold(originalTransactionId: lifecycle.originalTransactionId, facts: facts)
            let foldedAt = lifecycle.notifications.map(\.signedDate).max() ?? ProjectionFixture.start
            guard let stored = fold.state(at: foldedAt) else { continue }
            var times = lifecycle.notifications.flatMap { n -> [EpochMillis] in
                [n.signedDate, n.transaction.expiresDate?.millis, n.renewal.gracePeriodExpiresDate?.millis,
                 n.transaction.revocationDate?.millis].compactMap { $0 }
            }
            times += [foldedAt + 61 * ProjectionFixture.day, ProjectionFixture.start - 1]
            for base in times {
                for time in [base - 1, base, base + 1] {
                    let expected = fold.state(at: time)
                    XCTAssertEqual(stored.reevaluated(at: time), expected, "seed \(seed) customer \(lifecycle.customerIndex) at \(time)")
                    if let status = expected?.status { statuses.insert(status) }
                    checked += 1
                }
            }
        }
        XCTAssertGreaterThan(checked, 10_000)
        XCTAssertEqual(statuses, Set(SubscriptionStatus.allCases), "the generated lifecycles must reach every status")
    }
}

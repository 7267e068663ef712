import LedgerTesting
import XCTest
@testable import LedgerCore

/// `AppleStatusCheck.check(_:foldOfEverythingUpTo:)` (the status checks' catch-up uses it on the
/// append's fold snapshots) against the oracle `checks(key:facts:)`, which folds the facts signed
/// by each statement: generated lifecycles delivered in order and shuffled, each statement
/// checked on the fold of everything recorded up to it. Where it answers, the answer must be the
/// oracle's; where a fact signed later is folded, it must decline, and both must occur.
final class AppleStatusFoldAnswerTests: XCTestCase {
    func testAnswersOnTheFoldEqualTheCheckOfTheFactsSignedByThen() throws {
        let generator = LifecycleGenerator(customers: 150, days: 540, start: 1_735_689_600_000, seed: 0xF01D)
        var answered = 0, declined = 0, differing: [String] = []
        for customer in 0..<generator.customers {
            let life = generator.lifecycle(customerIndex: customer)
            let key = SubscriptionKey(environment: generator.environment, originalTransactionId: life.originalTransactionId)
            var delivered = life.notifications
            var rng = SplitMix64(seed: life.seed ^ 0x5A7E)
            if customer % 2 == 1 { delivered.shuffle(using: &rng) }
            var facts: [Fact] = []
            var fold = SubscriptionFold(key: key, facts: [], catalogPeriods: ["com.example.monthly": 30 * 86_400_000])
            for (i, n) in delivered.enumerated() {
                let new = try n.facts(position: Int64(i + 1), recordedAt: n.deliveredAt)
                facts += new
                for fact in new { fold.apply(fact) }
                for s in new where s.kind == .appleStatus {
                    let oracle = AppleStatusCheck.checks(key: key, facts: facts) { $0.position == s.position && $0.ordinal == s.ordinal }.first
                    switch AppleStatusCheck.check(s, foldOfEverythingUpTo: fold) {
                    case .checked(let check):
                        answered += 1
                        if check != oracle {
                            differing.append("customer \(customer) notification \(i): \(String(describing: check)) vs \(String(describing: oracle))")
                        }
                    case .readFacts:
                        declined += 1
                        XCTAssertTrue(facts.contains { $0.kind != .appleStatus && $0.signedAt > s.signedAt },
                                      "declined only for a fact signed after the statement")
                    }
                }
            }
        }
        XCTAssertEqual(differing.count, 0, differing.prefix(5).joined(separator: "\n"))
        XCTAssertGreaterThan(answered, 1_000)
        XCTAssertGreaterThan(declined, 100, "shuffled deliveries fold facts signed after a statement")
    }
}

import LedgerTesting
import XCTest
@testable import LedgerCore

/// `AppleStatusCheck.check(_:foldOfEverythingUpTo:)` (the status checks' catch-up uses it on the
/// append's fold snapshots) against the oracle `checks(key:facts:)`, which folds the facts signed
/// by each statement: generated lifecycles delivered in order and shuffled, each statement
/// checked on the fold of everything recorded up to it. Where it answers, the answer must be the
/// oracle's; where a fact signed later is folded, it must decline, and both must occur.
final class AppleStatusFoldAnswerTests: XCTestCase {
    /// Customer `customer`'s lifecycle: its key and its notifications, shuffled (by a generator
    /// seeded from the lifecycle and `salt`, returned for the test's own draws) when `shuffled`.
    private func deliveries(_ generator: LifecycleGenerator, _ customer: Int, shuffled: Bool, salt: UInt64)
        -> (key: SubscriptionKey, notifications: [SimulatedNotification], rng: SplitMix64) {
        let life = generator.lifecycle(customerIndex: customer)
        var delivered = life.notifications
        var rng = SplitMix64(seed: life.seed ^ salt)
        if shuffled { delivered.shuffle(using: &rng) }
        return (SubscriptionKey(environment: generator.environment, originalTransactionId: life.originalTransactionId), delivered, rng)
    }

    func testAnswersOnTheFoldEqualTheCheckOfTheFactsSignedByThen() throws {
        let generator = LifecycleGenerator(customers: 150, days: 540, start: 1_735_689_600_000, seed: 0xF01D)
        var answered = 0, declined = 0, differing: [String] = []
        for customer in 0..<generator.customers {
            let (key, delivered, _) = deliveries(generator, customer, shuffled: customer % 2 == 1, salt: 0x5A7E)
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
    /// `checks(of:onto:foldPosition:facts:)`: a pass's range brings several statements of one
    /// subscription; from a fold up to some position (before the range, inside it or at its end)
    /// each is answered by folding forward. Where it answers, every answer must be the oracle's
    /// over the facts known at the range's end; it must decline where it cannot, and both occur.
    func testStatementsOfARangeFoldedForwardFromASnapshotEqualTheCheckOfTheFactsSignedByThen() throws {
        let generator = LifecycleGenerator(customers: 120, days: 540, start: 1_735_689_600_000, seed: 0xF02D)
        var answered = 0, declined = 0, several = 0, differing: [String] = []
        for customer in 0..<generator.customers {
            var (key, delivered, rng) = deliveries(generator, customer, shuffled: customer % 3 == 1, salt: 0x5A7F)
            // Every fourth notification states no status (a V1 one, or one without renewal info):
            // its facts follow statements without a statement of their own to decline.
            let facts = try delivered.enumerated().flatMap { i, n in
                try n.facts(position: Int64(i + 1), recordedAt: n.deliveredAt).filter { i % 4 != 3 || $0.kind != .appleStatus }
            }
            let count = Int64(delivered.count)
            guard count >= 2 else { continue }
            for _ in 0..<6 {
                // A range (low…high] and a snapshot at `at`, anywhere up to the range's end.
                let high = Int64.random(in: 1...count, using: &rng)
                let low = Int64.random(in: 0..<high, using: &rng)
                let at = Int64.random(in: 0...high, using: &rng)
                let known = facts.filter { $0.position <= high }
                var fold = SubscriptionFold(key: key, facts: known.filter { $0.position <= at },
                                            catalogPeriods: ["com.example.monthly": 30 * 86_400_000])
                let statements = known.filter { $0.kind == .appleStatus && $0.position > low }
                guard !statements.isEmpty else { continue }
                if statements.count > 1 { several += 1 }
                let oracle = AppleStatusCheck.checks(key: key, facts: known) { $0.position > low }
                let found = AppleStatusCheck.checks(of: statements, folding: &fold, from: at,
                                                    through: known.filter { $0.position > min(at, low) })
                let whole = SubscriptionFold(key: key, facts: known, catalogPeriods: ["com.example.monthly": 30 * 86_400_000])
                let t = known.map(\.signedAt).max()! + 86_400_000
                if fold.transactions != whole.transactions || fold.state(at: t) != whole.state(at: t) || fold.latestSignedAt != whole.latestSignedAt {
                    differing.append("customer \(customer) range \(low)…\(high) at \(at): the fold left is not the fold of every fact")
                }
                guard let found else {
                    declined += 1
                    continue
                }
                answered += 1
                if found != oracle { differing.append("customer \(customer) range \(low)…\(high) at \(at): \(found) vs \(oracle)") }
            }
        }
        XCTAssertEqual(differing.count, 0, differing.prefix(3).joined(separator: "\n"))
        XCTAssertGreaterThan(answered, 150)
        XCTAssertGreaterThan(several, 150, "ranges bring several statements")
        XCTAssertGreaterThan(declined, 50, "snapshots inside a range and shuffled deliveries must decline")
    }
    /// A notification delivered after the one Apple signed next, stating no status of its own:
    /// the next one's statement must then count its facts (signed by then), which a fold up to
    /// the statement lacks, so the forward check must decline rather than answer.
    func testAStatementFollowedByAFactSignedBeforeItIsNotAnsweredFromTheFoldUpToIt() throws {
        let generator = LifecycleGenerator(customers: 60, days: 540, start: 1_735_689_600_000, seed: 0xF03D)
        var biting = 0, answered = 0, differing: [String] = []
        for customer in 0..<generator.customers {
            let (key, notifications, _) = deliveries(generator, customer, shuffled: false, salt: 0)
            for late in notifications.indices.dropLast() {
                var delivered = Array(notifications.prefix(late + 2))
                delivered.swapAt(late, late + 1)
                let facts = try delivered.enumerated().flatMap { i, n in
                    try n.facts(position: Int64(i + 1), recordedAt: n.deliveredAt).filter { i != late + 1 || $0.kind != .appleStatus }
                }
                let before = Int64(late)
                var fold = SubscriptionFold(key: key, facts: facts.filter { $0.position <= before })
                let statements = facts.filter { $0.kind == .appleStatus && $0.position > before }
                let oracle = AppleStatusCheck.checks(key: key, facts: facts) { $0.position > before }
                if oracle.contains(where: { $0.ledgerStatus != $0.arrivalLedgerStatus }) { biting += 1 }
                guard let found = AppleStatusCheck.checks(of: statements, folding: &fold, from: before,
                                                          through: facts.filter { $0.position > before }) else { continue }
                answered += 1
                if found != oracle { differing.append("customer \(customer) late \(late): \(found) vs \(oracle)") }
            }
        }
        XCTAssertEqual(differing.count, 0, differing.prefix(3).joined(separator: "\n"))
        XCTAssertGreaterThan(biting, 5, "late facts change the status their next statement is checked against")
    }
}

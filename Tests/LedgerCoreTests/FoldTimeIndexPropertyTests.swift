import LedgerTesting
import XCTest
@testable import LedgerCore

/// The fold finds the transaction and the renewal state in effect at T, and the next change after
/// T, by halving its ordered slots and renewals. Checked against the documented rules worked out
/// by brute force from the facts themselves, over long random histories folded in random orders:
/// re-signed transactions whose purchase date moved, V1 transactions after Apple's latest signed
/// purchase, purchases at the same instant (ids compared as numbers), renewal states signed at the
/// same instant, tokens on some transactions only.
final class FoldTimeIndexPropertyTests: XCTestCase {
    typealias F = FoldFixture

    func testStatesOfALongRandomHistoryFollowTheRulesInEveryOrder() {
        for seed in UInt64(1)...12 {
            var rng = SplitMix64(seed: seed)
            let facts = Self.history(&rng)
            var times = Set<EpochMillis>()
            for f in facts { times.formUnion([f.signedAt - 1, f.signedAt, f.effectiveAt - 1, f.effectiveAt, f.effectiveAt + 1]) }
            let sampled = times.sorted().enumerated().filter { $0.offset % 3 == 0 }.map(\.element)
            for order in 0..<4 {
                let folded = order == 0 ? facts : facts.shuffled(using: &rng)
                let fold = SubscriptionFold(key: F.key, facts: folded)
                for t in sampled {
                    let state = fold.state(at: t)
                    let expected = Self.expected(facts, at: t)
                    XCTAssertEqual(state?.latestTransactionId, expected.transaction, "seed \(seed), order \(order), at \(t): transaction in effect")
                    XCTAssertEqual(state?.autoRenewProductId, expected.renewal, "seed \(seed), order \(order), at \(t): renewal state in effect")
                    XCTAssertEqual(state?.appAccountToken, expected.token, "seed \(seed), order \(order), at \(t): token")
                    if state != nil {
                        XCTAssertEqual(state?.validUntil, expected.next, "seed \(seed), order \(order), at \(t): next change")
                    }
                }
            }
        }
    }

    /// About 80 periods: each a transaction (some re-signed later with a moved purchase date, some
    /// V1 only, some sharing an instant with another) and one or two renewal states.
    static func history(_ rng: inout SplitMix64) -> [Fact] {
        var facts: [Fact] = []
        var id = 9_990
        for period in 0..<80 {
            id += Int.random(in: 1...3, using: &rng)
            let from = Double(period * 30) + Double(Int.random(in: 0...3, using: &rng)) / 4
            let token: String? = Bool.random(using: &rng) ? "token-\(period)" : nil
            var tx = F.tx(String(id), from: from, to: from + 30, signed: from, token: token)
            if Int.random(in: 0..<8, using: &rng) == 0 { tx = v1(tx) }
            facts.append(tx)
            if Int.random(in: 0..<5, using: &rng) == 0 {
                // Re-signed a day later with its purchase moved by hours: the later signing wins.
                let moved = from + Double(Int.random(in: -4...4, using: &rng)) / 24
                facts.append(F.tx(String(id), from: moved, to: moved + 30, signed: from + 1, token: token))
            }
            if Int.random(in: 0..<10, using: &rng) == 0 {
                // Another transaction bought at the same instant.
                facts.append(F.tx(String(id + 100_000), from: from, to: from + 30, signed: from, token: nil))
            }
            for k in 0..<Int.random(in: 1...2, using: &rng) {
                let signed = from + Double(Int.random(in: 0...20, using: &rng))
                var r = F.renewal(signed: signed, auto: k, next: "r\(period).\(k)")
                if Int.random(in: 0..<8, using: &rng) == 0 { r = v1(r) }
                facts.append(r)
            }
        }
        return facts
    }

    static func v1(_ f: Fact) -> Fact {
        Fact(subscription: f.subscription, kind: f.kind, origin: .appleV1, message: "V1/DID_RENEW", signedAt: f.signedAt,
             effectiveAt: f.effectiveAt, transactionId: f.transactionId, customerId: f.customerId, transaction: f.transaction,
             renewal: f.renewal)
    }

    struct Expected {
        var transaction: String?
        var renewal: String?
        var token: String?
        var next: EpochMillis?
    }

    /// The rules (SubscriptionFold's summary), by brute force: per transaction the snapshot signed
    /// last wins, V2 over V1; in effect at T, the latest purchased by T (ties: the greater id as a
    /// number), not a V1-only one after Apple's latest signed purchase; the renewal state Apple
    /// signed last by T, else V1's; the token of the transaction in effect, else of the latest
    /// purchased by T stating one; the next change is the next purchase or renewal signing.
    static func expected(_ facts: [Fact], at t: EpochMillis) -> Expected {
        var winners: [String: Fact] = [:]
        for f in facts where f.kind == .transaction {
            let id = f.transactionId!
            if let w = winners[id], !SubscriptionFold.snapshotPrecedes(w, f) { continue }
            winners[id] = f
        }
        let signedPurchase = facts.filter { $0.kind == .transaction && $0.origin == .appleV2 }.map(\.effectiveAt).max()
        func precedes(_ a: Fact, _ b: Fact) -> Bool {
            a.effectiveAt != b.effectiveAt ? a.effectiveAt < b.effectiveAt : TransactionIdOrder.precedes(a.transactionId!, b.transactionId!)
        }
        let begun = winners.values.filter { $0.effectiveAt <= t }
        let eligible = begun.filter { f in !(f.origin == .appleV1 && signedPurchase.map { f.effectiveAt > $0 } ?? false) }
        let current = eligible.max(by: precedes)
        let renewals = facts.filter { $0.kind == .renewal && $0.signedAt <= t }
        let renewal = renewals.filter { $0.origin != .appleV1 }.max(by: SubscriptionFold.renewalPrecedes)
            ?? renewals.filter { $0.origin == .appleV1 }.max(by: SubscriptionFold.renewalPrecedes)
        let token = current?.transaction?.appAccountToken
            ?? begun.filter { $0.transaction?.appAccountToken != nil }.max(by: precedes)?.transaction?.appAccountToken
        let later = winners.values.map(\.effectiveAt).filter { $0 > t } + facts.filter { $0.kind == .renewal && $0.signedAt > t }.map(\.signedAt)
        return Expected(transaction: current?.transactionId, renewal: renewal?.renewal?.autoRenewProductId, token: token, next: later.min())
    }
}

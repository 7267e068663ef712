import LedgerTesting
import XCTest
@testable import LedgerCore

/// Generated WeChat lifecycles (signing, free trials, paid periods, unsigning, re-signing after a
/// lapse, refunds that fail or succeed, of the current or an earlier period), decoded by
/// `FactDecoder` and folded in delivery order and in 3 shuffled orders with duplicates: every order
/// gives the same states, transactions, entitlements, contract state and time travel — and the
/// state at each time is what an oracle computed straight from the generated script says (seed 000:
/// signing opens the benefit, each charge is a delivery paying a period up to its RenewalDate,
/// unsigning turns auto-renew off for good for that period; a successful refund revokes its order's
/// period; the period in effect is the one begun last). LEDGER_PROPERTY_SEED picks another seed.
final class WeChatLifecyclePropertyTests: XCTestCase {
    var seed: UInt64 {
        ProcessInfo.processInfo.environment["LEDGER_PROPERTY_SEED"].flatMap { UInt64($0) } ?? 0x5EED_5C7A
    }

    /// A period as the script made it: begun at `start` (a signing's SignedTime or a delivery's
    /// PaidTime), ending at `end`; `order` nil for a signing.
    struct Period { var start: EpochMillis; var end: EpochMillis; var order: String? }
    /// A statement about auto-renew: when, for which period end, whether it is a contract change.
    struct Statement { var time: EpochMillis; var end: EpochMillis; var contract: Bool; var auto: Int }

    struct Lifecycle {
        var otid: String
        var openId: String
        var events: [RecordedEvent]
        var periods: [Period]
        var statements: [Statement]
        /// Successful refunds: order id → refund time (ms).
        var refunds: [String: EpochMillis]
        var turns: [EpochMillis]
    }

    /// One customer's history, deterministic from `rng`.
    func lifecycle(_ index: Int, _ rng: inout SplitMix64) -> Lifecycle {
        let otid = String(3_000_000_000 + index)
        let openId = "o\(index)"
        let period = Double(rng.pick([7, 30, 30, 365]))
        var payloads: [JSONValue] = []
        var periods: [Period] = []
        var statements: [Statement] = []
        var refunds: [String: EpochMillis] = [:]
        var turns: [EpochMillis] = []
        var start = Double(rng.int(in: 0...30)) + Double(rng.int(in: 0...86_399)) / 86_400
        var order = 0
        let runs = rng.chance(0.25) ? 2 : 1
        for run in 0..<runs {
            let periodsInRun = Int(rng.int(in: 1...6))
            let freeTrial = rng.chance(0.2)
            payloads.append(WX.signing(signed: start, renewal: start + period, otid: otid, openId: openId))
            periods.append(Period(start: WX.d(start), end: WX.d(start + period), order: nil))
            statements.append(Statement(time: WX.d(start), end: WX.d(start + period), contract: true, auto: 1))
            let unsignIn: Int? = rng.chance(0.5) ? Int(rng.int(in: 0...Int64(periodsInRun - 1))) : nil
            let lastPeriod = unsignIn ?? (periodsInRun - 1)
            for k in 0...lastPeriod {
                let begin = start + Double(k) * period
                let end = begin + period
                if k == 0 && freeTrial { continue }
                order += 1
                let id = "\(otid)-O\(order)"
                let paid = begin + 0.0001
                // Without WeChatPayInfo (Apple payments) now and then: no PaidTime, so the period
                // starts where the one before it ended (the signing's time for the first) — never
                // at CreateTime, which the fixture sends 0.002 days after `paid`.
                let payInfo = rng.chance(0.8)
                payloads.append(WX.deliver(order: id, paid: paid, renewal: end, otid: otid, openId: openId, payInfo: payInfo))
                // The period before it ends where the script ended it (a day count in Double: the
                // same instant can round to 1 ms apart when computed two ways).
                let before = periods.map(\.end).filter { $0 < WX.d(end) }.max() ?? .min
                let paidAt = payInfo ? WX.sec(paid) * 1000 : max(before, WX.d(start))
                periods.append(Period(start: paidAt, end: WX.d(end), order: id))
                statements.append(Statement(time: paidAt, end: WX.d(end), contract: false, auto: 1))
                if rng.chance(0.1) {
                    // A re-push of the same delivery days later (WeChat retries; CreateTime is new).
                    var again = WX.deliver(order: id, paid: paid, renewal: end, otid: otid, openId: openId, payInfo: payInfo).objectValue!
                    again["CreateTime"] = .integer(WX.sec(paid + Double(rng.int(in: 1...5))))
                    payloads.append(.object(again))
                }
                if rng.chance(0.25) {
                    let at = begin + Double(rng.int(in: 1...Int64(period * 10))) / 10
                    if rng.chance(0.3) { payloads.append(WX.refundNotify(order: id, at: at - 0.1, ok: false, openId: openId)) }
                    if rng.chance(0.8) {
                        payloads.append(WX.refundNotify(order: id, at: at, openId: openId))
                        refunds[id] = WX.sec(at) * 1000
                        turns.append(WX.sec(at) * 1000)
                    }
                }
            }
            if let u = unsignIn {
                let end = (start + Double(u) * period) + period
                let at = end - period * Double(rng.int(in: 1...9)) / 10
                payloads.append(WX.unsigning(unsigned: at, renewal: end, otid: otid, openId: openId))
                statements.append(Statement(time: WX.d(at), end: WX.d(end), contract: true, auto: 0))
                turns.append(WX.d(at))
            }
            if run == 0 {
                // Seed 000: a new signing only after the current period has ended.
                start += Double(lastPeriod + 1) * period + Double(rng.int(in: 10...120))
            }
        }
        let events = payloads.enumerated().map { i, p in
            // Delivered up to 3 days late, never before the push was sent.
            var e = WX.event(p, position: Int64(i + 1), stream: otid)
            e.recordedAt += rng.int(in: 0...(3 * WX.dayMs))
            return e
        }
        return Lifecycle(otid: otid, openId: openId, events: events, periods: periods, statements: statements, refunds: refunds, turns: turns)
    }

    /// Auto-renew: the statement about the latest period end, then a contract change over a
    /// delivery (a delivery re-pushed later speaks for its payment, not for the contract), then the latest.
    static func ranks(_ a: Statement, _ b: Statement) -> Bool {
        (a.end, a.contract ? 1 : 0, a.time) < (b.end, b.contract ? 1 : 0, b.time)
    }

    struct Expected: Equatable {
        var status: SubscriptionStatus?
        var expires: EpochMillis?
        var autoRenew: Int?
        var order: String?
    }

    /// The rules, straight from the script.
    func expected(_ life: Lifecycle, at t: EpochMillis) -> Expected {
        let begun = life.periods.filter { $0.start <= t }
        // Begun last; at the same instant a paid order over the signing.
        guard let current = begun.max(by: { ($0.start, $0.order == nil ? 0 : 1) < ($1.start, $1.order == nil ? 0 : 1) }) else {
            return Expected(status: nil, expires: nil, autoRenew: nil, order: nil)
        }
        let said = life.statements.filter { $0.time <= t }
            .max(by: Self.ranks)
        let status: SubscriptionStatus
        if let order = current.order, let refunded = life.refunds[order], refunded <= t {
            status = .revoked
        } else {
            status = t < current.end ? .active : .expired
        }
        return Expected(status: status, expires: current.end, autoRenew: said?.auto, order: current.order)
    }

    struct Observation: Equatable {
        var state: SubscriptionState?
        var transactions: [TransactionRecord]
        var grants: [EntitlementGrant]
    }

    func observe(_ p: SubscriptionProjection, _ life: Lifecycle, at t: EpochMillis) -> Observation {
        let view = p.view(at: t)
        let key = SubscriptionKey(environment: "Production", originalTransactionId: life.otid)
        return Observation(state: view.subscription(key), transactions: view.transactions, grants: view.entitlements(catalog: WX.catalog))
    }

    func testFiveHundredWeChatLifecyclesFoldTheSameInAnyOrderWithDuplicatesAndFollowTheScript() throws {
        var rng = SplitMix64(seed: seed)
        var statuses: [SubscriptionStatus: Int] = [:]
        var contractStates = Set<String>()
        var factsChecked = 0
        for index in 0..<500 {
            let life = lifecycle(index, &rng)
            let facts = WX.facts(life.events)
            factsChecked += facts.count
            let key = SubscriptionKey(environment: "Production", originalTransactionId: life.otid)
            let first = life.periods.map(\.start).min()!
            let latestEnd = life.periods.map(\.end).max()!
            var times = [first - 1, first, first + WX.dayMs / 2, first + (latestEnd - first) / 2, latestEnd - 1, latestEnd, latestEnd + WX.dayMs]
            times += life.turns.prefix(4).flatMap { [$0 - 1, $0, $0 + 60_000] }
            times += life.periods.prefix(4).flatMap { [$0.start - 1, $0.start, $0.end - 1, $0.end] }
            let reference = SubscriptionProjection(facts: facts)
            let refObs = times.map { observe(reference, life, at: $0) }
            let refContract = WeChatContractState.of(openId: life.openId, productId: WX.product, facts: facts)
            let refKnown = SubscriptionProjection.view(at: times[3], recordedBy: times[3], facts: facts).subscription(key)

            // The oracle.
            let describe = "seed \(seed) lifecycle \(index): \(life.events.map { $0.event.type })"
            let lastSaid = life.statements.max(by: Self.ranks)!
            XCTAssertEqual(refContract.authorizationState, lastSaid.auto == 1 ? .signed : .terminated, describe)
            XCTAssertEqual(refContract.appleSubscriptionInfo?.renewalDate, latestEnd, describe)
            contractStates.insert(refContract.authorizationState.rawValue)
            for (k, t) in times.enumerated() {
                let got = refObs[k].state
                let want = expected(life, at: t)
                let seen = Expected(status: got?.status, expires: got?.expiresDate, autoRenew: got?.autoRenewStatus, order: got?.latestTransactionId)
                if seen != want {
                    XCTFail("\(describe) at \(t):\n  expected \(want)\n  folded   \(seen)\n  periods \(life.periods)\n  transactions \(refObs[k].transactions.map { ($0.transactionId, $0.purchaseDate ?? -1, $0.expiresDate ?? -1) })")
                    return
                }
                if let got {
                    XCTAssertEqual(got.customerId, life.openId)
                    XCTAssertEqual(got.productId, WX.product)
                    statuses[got.status, default: 0] += 1
                }
            }
            XCTAssertEqual(refObs[0].transactions.count, life.periods.filter { $0.order != nil }.count, describe)
            XCTAssertEqual(Set(refObs[0].transactions.filter(\.isRevoked).map(\.transactionId)), Set(life.refunds.keys), describe)

            // Any order, with duplicates (a re-push recorded later at a new position).
            for round in 0..<3 {
                var shuffled = facts
                for _ in 0..<Int(rng.int(in: 1...3)) {
                    var again = rng.pick(facts)
                    again.recordedAt += rng.int(in: 1...(3 * WX.dayMs))
                    shuffled.append(again)
                }
                shuffled.shuffle(using: &rng)
                for i in shuffled.indices { shuffled[i].position = Int64(i + 1) }
                let folded = SubscriptionProjection(facts: shuffled)
                for (k, t) in times.enumerated() where observe(folded, life, at: t) != refObs[k] {
                    XCTFail("order-dependent fold: \(describe) round \(round) at \(t)\n"
                            + "in order: \(String(describing: refObs[k].state))\n"
                            + "shuffled: \(String(describing: observe(folded, life, at: t).state))")
                    return
                }
                XCTAssertEqual(WeChatContractState.of(openId: life.openId, productId: WX.product, facts: shuffled), refContract, describe)
                XCTAssertEqual(SubscriptionProjection.view(at: times[3], recordedBy: times[3], facts: shuffled).subscription(key), refKnown, describe)
            }
        }
        XCTAssertGreaterThan(factsChecked, 5_000, "lifecycles too short to test anything")
        XCTAssertEqual(Set(statuses.keys), [.active, .expired, .revoked], "every WeChat status should be reached: \(statuses)")
        XCTAssertEqual(contractStates, ["SIGNED", "TERMINATED"])
    }
}

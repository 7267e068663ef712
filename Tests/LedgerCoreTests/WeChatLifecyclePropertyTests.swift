import XCTest
@testable import LedgerCore

/// The ordering rule for WeChat contracts, tested directly: generated lifecycles (signing, paid
/// periods, unsigning, re-signing after a lapse, refunds that fail or succeed, of the current or an
/// earlier period) folded in delivery order and in 5 shuffled orders with duplicates must give the
/// same states, transactions, entitlements, contract state and time travel — and the state must be
/// what the rules say, computed here straight from the generated history (an oracle that does not
/// use the fold). LEDGER_PROPERTY_SEED picks another seed; failures print the lifecycle.
final class WeChatLifecyclePropertyTests: XCTestCase {
    var seed: UInt64 {
        ProcessInfo.processInfo.environment["LEDGER_PROPERTY_SEED"].flatMap { UInt64($0) } ?? 0x5EED_5C7A
    }

    struct Lifecycle {
        var otid: String
        var openId: String
        var events: [RecordedEvent]
        /// Every delivery: order id, period end (ms).
        var deliveries: [(order: String, end: EpochMillis)]
        /// Successful refunds: order id → refund time (ms).
        var refunds: [String: EpochMillis]
        var latestEnd: EpochMillis
        var autoRenewAtEnd: Int
        var turns: [EpochMillis]
    }

    /// One customer's history, deterministic from `rng`.
    func lifecycle(_ index: Int, _ rng: inout SplitMix64) -> Lifecycle {
        let otid = String(3_000_000_000 + index)
        let openId = "o\(index)"
        let period = Double(rng.pick([7, 30, 30, 365]))
        var payloads: [(PushValue, String)] = []
        var deliveries: [(String, EpochMillis)] = []
        var refunds: [String: EpochMillis] = [:]
        var turns: [EpochMillis] = []
        var start = Double(rng.int(in: 0...30)) + Double(rng.int(in: 0...86_399)) / 86_400
        var latestEnd: EpochMillis = .min
        var autoRenew = 1
        var order = 0
        let runs = rng.chance(0.25) ? 2 : 1
        for run in 0..<runs {
            let periods = Int(rng.int(in: 1...6))
            let freeTrial = rng.chance(0.2)
            payloads.append((WX.signing(signed: start, renewal: start + period, otid: otid, openId: openId), otid))
            let unsignIn: Int? = rng.chance(0.5) ? Int(rng.int(in: 0...Int64(periods - 1))) : nil
            var lastPeriod = periods - 1
            if let u = unsignIn { lastPeriod = u }
            for k in 0...lastPeriod {
                let begin = start + Double(k) * period
                let end = begin + period
                latestEnd = max(latestEnd, WX.d(end))
                if k == 0 && freeTrial { continue }
                order += 1
                let id = "\(otid)-O\(order)"
                payloads.append((WX.deliver(order: id, paid: begin + 0.0001, renewal: end, otid: otid, openId: openId), otid))
                deliveries.append((id, WX.d(end)))
                if rng.chance(0.25) {
                    let at = begin + Double(rng.int(in: 1...Int64(period * 10))) / 10
                    if rng.chance(0.3) {
                        payloads.append((WX.refundNotify(order: id, at: at - 0.1, ok: false), otid))
                    }
                    if rng.chance(0.8) {
                        payloads.append((WX.refundNotify(order: id, at: at), otid))
                        refunds[id] = WX.sec(at) * 1000
                        turns.append(WX.sec(at) * 1000)
                    }
                }
            }
            if let u = unsignIn {
                // The same arithmetic as the period's end above, so both messages carry the same RenewalDate.
                let end = (start + Double(u) * period) + period
                let at = end - period * Double(rng.int(in: 1...9)) / 10
                payloads.append((WX.unsigning(unsigned: at, renewal: end, otid: otid, openId: openId), otid))
                turns.append(WX.d(at))
                autoRenew = 0
            } else {
                autoRenew = 1
            }
            if run == 0 {
                start += Double(lastPeriod + 1) * period + Double(rng.int(in: 10...120))
            }
        }
        let events = payloads.enumerated().map { i, p in
            // Delivered up to 3 days late, never before the push was sent.
            var e = WX.event(p.0, position: Int64(i + 1), stream: p.1)
            e.recordedAt += rng.int(in: 0...(3 * WX.dayMs))
            return e
        }
        return Lifecycle(otid: otid, openId: openId, events: events, deliveries: deliveries, refunds: refunds,
                         latestEnd: latestEnd, autoRenewAtEnd: autoRenew, turns: turns)
    }

    /// The rules, straight from the history.
    func expectedStatus(_ life: Lifecycle, at t: EpochMillis) -> SubscriptionStatus {
        let paying = life.deliveries.filter { $0.end == life.latestEnd }
        if !paying.isEmpty, paying.allSatisfy({ life.refunds[$0.order] != nil }),
           paying.map({ life.refunds[$0.order]! }).max()! <= t {
            return .revoked
        }
        return t < life.latestEnd ? .active : .expired
    }

    struct Observation: Equatable {
        var state: SubscriptionState?
        var transactions: [TransactionRecord]
        var grants: [EntitlementGrant]
    }

    func testFiveHundredWeChatLifecyclesFoldTheSameInAnyOrderWithDuplicatesAndFollowTheRules() throws {
        var rng = SplitMix64(seed: seed)
        var statuses: [SubscriptionStatus: Int] = [:]
        var contractStates = Set<String>()
        var eventsChecked = 0
        for index in 0..<500 {
            let life = lifecycle(index, &rng)
            let facts = WX.facts(life.events)
            eventsChecked += facts.count
            let first = facts.map(\.signedDate).min()!
            var times = [first + WX.dayMs / 2, first + (life.latestEnd - first) / 2, life.latestEnd - 1,
                         life.latestEnd, life.latestEnd + WX.dayMs]
            times += life.turns.prefix(4).flatMap { [$0 - 1, $0, $0 + 60_000] }
            let reference = SubscriptionProjection(facts: facts)
            let refObs = times.map { observe(reference, life, at: $0) }
            let refContract = WeChatContractState.of(openId: life.openId, productId: WX.product, facts: facts)
            let refBusiness = SubscriptionProjection.asOfBusinessTime(times[1], facts: facts).subscription(life.otid)
            let refKnown = SubscriptionProjection.asKnownAt(recordedTime: times[1], facts: facts).subscription(life.otid)

            // The oracle.
            let describe = "seed \(seed) lifecycle \(index): \(life.events.map { $0.event.type })"
            XCTAssertEqual(refContract.authorizationState, life.autoRenewAtEnd == 1 ? .signed : .terminated, describe)
            XCTAssertEqual(refContract.appleSubscriptionInfo?.renewalDate, life.latestEnd, describe)
            contractStates.insert(refContract.authorizationState.rawValue)
            for (k, t) in times.enumerated() {
                let got = refObs[k].state
                XCTAssertEqual(got?.status, expectedStatus(life, at: t), "\(describe) at \(t)")
                XCTAssertEqual(got?.expiresDate, life.latestEnd, describe)
                XCTAssertEqual(got?.autoRenewStatus, life.autoRenewAtEnd, describe)
                XCTAssertEqual(got?.customerId, life.openId)
                if let s = got?.status { statuses[s, default: 0] += 1 }
                if got?.status != expectedStatus(life, at: t) { return }
            }
            XCTAssertEqual(refObs[0].transactions.count, life.deliveries.count, describe)
            XCTAssertEqual(Set(refObs[0].transactions.filter(\.isRevoked).map(\.transactionId)), Set(life.refunds.keys), describe)

            // Any order, with duplicates (a re-push recorded later at a new position).
            for round in 0..<5 {
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
                XCTAssertEqual(SubscriptionProjection.asOfBusinessTime(times[1], facts: shuffled).subscription(life.otid), refBusiness)
                XCTAssertEqual(SubscriptionProjection.asKnownAt(recordedTime: times[1], facts: shuffled).subscription(life.otid), refKnown)
            }
        }
        XCTAssertGreaterThan(eventsChecked, 2_500, "lifecycles too short to test anything")
        XCTAssertEqual(Set(statuses.keys), [.active, .expired, .revoked], "every WeChat status should be reached: \(statuses)")
        XCTAssertEqual(contractStates, ["SIGNED", "TERMINATED"])
    }

    func observe(_ p: SubscriptionProjection, _ life: Lifecycle, at t: EpochMillis) -> Observation {
        let view = p.view(at: t)
        return Observation(state: view.subscription(life.otid), transactions: view.transactions,
                           grants: view.entitlements(catalog: WX.catalog))
    }
}

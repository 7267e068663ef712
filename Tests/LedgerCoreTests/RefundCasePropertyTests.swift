import LedgerTesting
import XCTest
@testable import LedgerCore

/// Generated WeChat order histories (askings under any id of an order, refunds naming one or two of
/// its ids, some before their delivery, some linked, re-pushes stored twice), checked against the
/// generator's own model of which messages belong to which order — not against the fold.
final class RefundCasePropertyTests: XCTestCase {
    typealias W = WX

    /// One logical order: its ids and the positions of the messages the generator sent about it.
    struct Order {
        var outTradeNo: String
        var mch: String
        var tx: String
        var wx: String
        var otid: String
        var openId: String
        var delivered: Bool
        var inquiries: [Int64] = []
        var refunds: [Int64] = []
        var refunded = false
        var ids: Set<String> { [outTradeNo, mch, tx, wx] }
    }

    func history(seed: UInt64) -> (events: [RecordedEvent], orders: [Order]) {
        var rng = SplitMix64(seed: seed)
        var events: [RecordedEvent] = []
        var orders: [Order] = []
        var position: Int64 = 0
        func next() -> Int64 { position += 1; return position }
        for s in 0..<Int(rng.next() % 3 + 1) {
            let otid = "20000\(seed % 1000)\(s)"
            let openId = "o\(seed)-\(s)"
            events.append(W.event(W.signing(signed: 0, renewal: 30, otid: otid, openId: openId), position: next(), stream: otid))
            for o in 0..<Int(rng.next() % 4 + 1) {
                let name = "S\(seed)-\(s)-\(o)"
                var order = Order(outTradeNo: name, mch: "mch-" + name, tx: "tx-" + name, wx: "WX-" + name,
                                  otid: otid, openId: openId, delivered: rng.next() % 4 != 0)
                let day = Double(o * 30 + 1)
                let early = rng.next() % 2 == 0   // messages about the order before its delivery
                func deliver() {
                    guard order.delivered else { return }
                    events.append(W.event(W.deliver(order: name, paid: day, renewal: day + 30, otid: otid, openId: openId),
                                          position: next(), stream: otid))
                    if rng.next() % 3 == 0 {
                        events.append(W.ledger(W.link(order: name, to: otid), type: XPayEventName.orderLinked,
                                               position: next(), stream: otid, recorded: day))
                    }
                }
                if !early { deliver() }
                // Askings under one id of the order (the same id every time: one case per order).
                let askedId = [order.outTradeNo, order.mch, order.tx][Int(rng.next() % (order.delivered ? 3 : 1))]
                for k in 0..<Int(rng.next() % 3) {
                    let stream = early ? StreamId.wechatOrder(askedId).text : otid
                    let asking = W.event(W.inquiry(order: askedId, asked: day + 1 + Double(k) * 0.01), position: next(), stream: stream)
                    events.append(asking)
                    order.inquiries.append(asking.position)
                    if k == 0 {
                        events.append(W.ledger(W.answer(order: askedId, allow: rng.next() % 2 == 0), type: XPayEventName.refundInquiryAnswer,
                                               position: next(), stream: stream, recorded: day + 1.001))
                    }
                    if rng.next() % 5 == 0 {   // re-pushed after routing changed: stored again elsewhere
                        var copy = asking
                        copy.position = next()
                        copy.event.streamId = otid
                        events.append(copy)
                    }
                }
                // Refund notifies name OutTradeNo or MchOrderNo, and WeChat's own id.
                for k in 0..<Int(rng.next() % 3) {
                    let ok = rng.next() % 2 == 0
                    let named = order.delivered && rng.next() % 2 == 0 ? order.mch : order.outTradeNo
                    let refund = W.event(W.refundNotify(order: named, wxOrder: order.wx, at: day + 2 + Double(k), ok: ok,
                                                        refundId: "r-\(name)-\(k)", openId: openId),
                                         position: next(), stream: early ? StreamId.wechatOrder(named).text : otid)
                    events.append(refund)
                    order.refunds.append(refund.position)
                    order.refunded = order.refunded || ok
                }
                if early { deliver() }
                orders.append(order)
            }
        }
        return (events, orders)
    }

    /// What `RefundFactQueries.orderFacts` loads, in Swift: the WeChat/ledger facts naming the ids,
    /// followed through the ids they bring in, plus the WeChat facts of the subscriptions named.
    func closure(of start: String, in facts: [Fact]) -> [Fact] {
        var ids: Set<String> = [start]
        var found: [Fact] = []
        var taken = Set<Int>()
        var grew = true
        while grew {
            grew = false
            for (i, f) in facts.enumerated() where !taken.contains(i) && (f.origin == .wechat || f.origin == .ledger) {
                let named = [f.transactionId, f.orderAlias].compactMap { $0 }
                guard !ids.isDisjoint(with: named) else { continue }
                taken.insert(i)
                found.append(f)
                ids.formUnion(named)
                grew = true
            }
        }
        let subscriptions = Set(found.compactMap(\.subscription))
        return found + facts.filter { f in
            f.origin == .wechat && (f.kind == .transaction || f.kind == .renewal) && f.subscription.map(subscriptions.contains) == true
        }
    }

    func testGeneratedOrderHistoriesFormTheCasesTheirModelExpects() throws {
        var checkedCases = 0, checkedOrders = 0
        for seed in UInt64(1)...60 {
            let (events, orders) = history(seed: seed)
            let facts = W.facts(events)
            let cases = RefundCaseFold.cases(from: facts)
            var rng = SplitMix64(seed: seed &* 7919)
            var shuffled = facts + (0..<10).map { _ in rng.pick(facts) }
            shuffled.shuffle(using: &rng)
            XCTAssertEqual(RefundCaseFold.cases(from: shuffled), cases, "seed \(seed): order and duplicates change nothing")

            for order in orders where !order.inquiries.isEmpty || !order.refunds.isEmpty {
                checkedOrders += 1
                // Exactly one case holds every message about the order, and nothing else.
                let mine = cases.filter { !order.ids.isDisjoint(with: [$0.orderId]) }
                XCTAssertEqual(mine.count, 1, "seed \(seed) order \(order.outTradeNo): \(mine.map(\.caseId))")
                guard let c = mine.first else { continue }
                let held = Set(c.inquiries.map(\.position) + c.refundOutcomes.map(\.position))
                XCTAssertTrue(held.isSubset(of: Set(order.inquiries + order.refunds)), "seed \(seed) \(c.caseId) holds another order's message")
                XCTAssertTrue(Set(order.inquiries + order.refunds).isSubset(of: Set(c.links)), "seed \(seed) \(c.caseId) misses a message")
                XCTAssertEqual(c.outcome, order.refunded ? .refunded : order.refunds.isEmpty ? .pending : .refundFailed, "seed \(seed) \(c.caseId)")
                XCTAssertEqual(c.openId, order.delivered || !order.refunds.isEmpty ? order.openId : nil, "seed \(seed) \(c.caseId)")
                XCTAssertEqual(c.originalTransactionId, order.delivered ? order.otid : nil, "seed \(seed) \(c.caseId)")
                XCTAssertEqual(c.deliveryPosition != nil, order.delivered, "seed \(seed) \(c.caseId)")
                // The single-case read (the order's facts only) gives the same case.
                let alone = RefundCaseFold.cases(from: closure(of: c.orderId, in: facts)).first { $0.caseId == c.caseId }
                XCTAssertEqual(alone, c, "seed \(seed) \(c.caseId): the order's own facts make the same case")
                checkedCases += 1
            }
            XCTAssertEqual(cases.count, orders.filter { !$0.inquiries.isEmpty || !$0.refunds.isEmpty }.count, "seed \(seed)")
        }
        XCTAssertGreaterThan(checkedOrders, 100)
        print("RefundCasePropertyTests: \(checkedCases) cases of 60 seeded histories matched their model")
    }
}

import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// Every arrival order of one WeChat lifecycle — sign, deliver, renewal delivery, unsign, refund
/// inquiry, refund — through HTTP, in JSON secure mode and in XML plaintext mode (720 orders each),
/// each followed by a WeChat re-push of one of its messages. For every order the live tables, the
/// tables after a rebuild and `?at=` time travel are compared with states written by hand from the
/// spec (seed 000 §4, wechat.md §2), not with the fold.
///
/// The lifecycle (times from B = now − 40 days):
/// - signing at B, RenewalDate R1 = B + 30 d; delivery O1 paid at B + 2 s (WeChatPayInfo) → R1;
/// - renewal delivery O2 without WeChatPayInfo (an Apple charge; pushed at R1 + 30 s) → R2 = B + 60 d:
///   its period starts at R1, where the one before it ended;
/// - unsigning at R1 + 3 d (RenewalDate R2); refund inquiry about O2 asked at R1 + 1 d;
/// - refund of O2 (RetCode 0) at F = R1 + 5 d: the subscription is revoked from F.
final class WeChatEveryOrderTests: XCTestCase {
    static let day: EpochMillis = 86_400_000
    static let product = "vip_monthly"

    struct Lifecycle {
        var index: Int
        var mode: WeChatSide.Mode
        var order: [Int]
        var otid: String
        var openId: String
        var o1: String
        var o2: String
    }

    enum Message: Int, CaseIterable { case sign, deliver1, deliver2, unsign, inquiry, refund }

    func testEveryArrivalOrderInBothModesEndsInTheHandWrittenStates() async throws {
        let side = WeChatSide()
        let now = WeChatSide.nowSeconds() * 1000
        let base = now - 40 * Self.day
        let r1 = base + 30 * Self.day, r2 = base + 60 * Self.day
        let unsigned = r1 + 3 * Self.day, asked = r1 + Self.day, refunded = r1 + 5 * Self.day
        var lifecycles: [Lifecycle] = []
        for mode in [WeChatSide.Mode.jsonSecure, .xmlPlain] {
            for order in Self.permutations(Array(0..<6)) {
                let i = lifecycles.count
                lifecycles.append(Lifecycle(index: i, mode: mode, order: order, otid: String(7_100_000_000_000_000 + i),
                                            openId: "oEvery\(i)", o1: "EV\(i)-O1", o2: "EV\(i)-O2"))
            }
        }
        XCTAssertEqual(lifecycles.count, 1440)

        @Sendable func message(_ m: Message, _ l: Lifecycle) -> JSONValue {
            switch m {
            case .sign: WeChatSide.signing(otid: l.otid, openId: l.openId, product: Self.product, signed: base, renewal: r1)
            case .deliver1: WeChatSide.deliver(otid: l.otid, openId: l.openId, product: Self.product, order: l.o1, paid: base + 2000,
                                               create: base + 3000, renewal: r1, price: 990)
            case .deliver2: WeChatSide.deliver(otid: l.otid, openId: l.openId, product: Self.product, order: l.o2, paid: nil,
                                               create: r1 + 30_000, renewal: r2)
            case .unsign: WeChatSide.unsigning(otid: l.otid, openId: l.openId, product: Self.product, unsigned: unsigned, renewal: r2)
            case .inquiry: WeChatSide.inquiry(order: l.o2, asked: asked, orderTime: r1, product: Self.product)
            case .refund: WeChatSide.refund(openId: l.openId, mchOrderId: l.o2, wxOrderId: "WXO-" + l.o2, at: refunded, refundId: "WXR-" + l.o2)
            }
        }

        // The hand-written states: (time, status, latestTransactionId, expiresDate, autoRenewStatus).
        let checks: [(String, EpochMillis, String?, @Sendable (Lifecycle) -> String?, EpochMillis?, Int?)] = [
            ("before the signing", base - 1, nil, { _ in nil }, nil, nil),
            ("first period (O1 paid)", base + Self.day, "active", { $0.o1 }, r1, 1),
            ("renewed (O2 from R1)", r1 + Self.day / 2, "active", { $0.o2 }, r2, 1),
            ("unsigned, still paid", unsigned + 3_600_000, "active", { $0.o2 }, r2, 0),
            ("refunded", refunded + 3_600_000, "revoked", { $0.o2 }, r2, 0),
        ]

        try await withService(environment: WeChatSide.environment) { h in
            // Post every lifecycle (several at a time), remembering each inquiry's reply.
            let replies = try await Self.concurrently(lifecycles, width: 6) { l -> [String: String] in
                var inquiryReply: [String: String] = [:]
                for k in l.order {
                    let m = Message(rawValue: k)!
                    let r = try await side.push(h, message(m, l), l.mode)
                    if m == .inquiry { inquiryReply = r } else { XCTAssertEqual(r["ErrCode"], "0", "\(l.mode) \(l.order) \(m)") }
                }
                // WeChat re-pushes one message (a new nonce and ciphertext): nothing new is stored,
                // and a re-pushed asking gets its stored answer word for word.
                let again = Message(rawValue: l.order[l.index % 6])!
                let r = try await side.push(h, message(again, l), l.mode)
                if again == .inquiry { XCTAssertEqual(r, inquiryReply, "a re-pushed asking repeats its answer") }
                return inquiryReply
            }

            // The inquiry's answer, decided from what was known when it arrived.
            for (l, reply) in zip(lifecycles, replies) {
                let label = "\(l.mode.rawValue) order \(l.order.map { "\(Message(rawValue: $0)!)" })"
                XCTAssertEqual(reply["result_code"], "0", label)
                let evidence = try JSONValue(json: Data((reply["evidence"] ?? "").utf8))
                let position = { (m: Message) in l.order.firstIndex(of: m.rawValue)! }
                let deliveryKnown = position(.deliver2) < position(.inquiry)
                let placedKnown = position(.sign) < position(.inquiry) || position(.deliver1) < position(.inquiry)
                XCTAssertEqual(evidence.text("rule"), "short_use", label)
                if deliveryKnown {
                    XCTAssertEqual(evidence["facts"]?["ledger_delivery"]?.text("order_id"), l.o2, label)
                    XCTAssertEqual(evidence["facts"]?["ledger_delivery"]?.text("delivered_at_basis"), placedKnown ? "period_start" : "CreateTime", label)
                    XCTAssertEqual(evidence["facts"]?["ledger_delivery"]?.int64("delivered_at"), placedKnown ? r1 : r1 + 30_000, label)
                    XCTAssertEqual(evidence["facts"]?["usage"]?.text("basis"), "time_since_delivery", label)
                } else {
                    XCTAssertNil(evidence["facts"]?["ledger_delivery"], label)
                    XCTAssertEqual(evidence["facts"]?["usage"]?.text("basis"), "time_since_order_time", label)
                }
            }

            func compare(_ phase: String) async throws {
                let disagreements = try await Self.concurrently(lifecycles, width: 6) { l -> [String] in
                    var out: [String] = []
                    let label = "\(phase) \(l.mode.rawValue) order \(l.order.map { "\(Message(rawValue: $0)!)" })"
                    for (name, t, status, tx, expires, auto) in checks {
                        let s = try await h.state(l.otid, at: t)
                        let got = (s?["status"] as? String, s?["latestTransactionId"] as? String,
                                   (s?["expiresDate"] as? NSNumber)?.int64Value, (s?["autoRenewStatus"] as? NSNumber)?.intValue)
                        if got.0 != status || got.1 != tx(l) || got.2 != expires || got.3 != auto {
                            out.append("\(label) at \(name): got \(got), expected \((status, tx(l), expires, auto))")
                        }
                    }
                    let live = try await h.state(l.otid)
                    if live?["status"] as? String != "revoked" || (live?["revocationDate"] as? NSNumber)?.int64Value != refunded
                        || (live?["autoRenewStatus"] as? NSNumber)?.intValue != 0 {
                        out.append("\(label) live: \(String(describing: live))")
                    }
                    if try await h.entitlements(l.openId, at: r1 + Self.day / 2) != [Self.product] { out.append("\(label): no entitlement while renewed") }
                    if try await h.entitlements(l.openId) != [] { out.append("\(label): an entitlement after the refund") }
                    return out
                }.flatMap { $0 }
                XCTAssertEqual(disagreements.count, 0, disagreements.prefix(10).joined(separator: "\n"))
            }
            try await compare("live")

            // Every message stored once; the order streams linked to their subscription.
            let counts = try h.admin.query(
                """
                SELECT count(*) FILTER (WHERE source = 'wechat') AS pushes, count(*) FILTER (WHERE type = $1) AS answers
                FROM events WHERE stream_id LIKE 'wechat:order:EV%' OR stream_id LIKE '71%'
                """, [.text(XPayEventName.refundInquiryAnswer)], name: "counts").first!
            XCTAssertEqual(try counts.decode(Int64.self, "pushes"), Int64(6 * lifecycles.count), "each push stored once")
            XCTAssertEqual(try counts.decode(Int64.self, "answers"), Int64(lifecycles.count), "one answer per asking")
            for _ in 0..<100 {
                let orphans = try await h.app.store.wechat.orphans(recordedBefore: Clock.nowMillis() + 1, limit: 10)
                if orphans.isEmpty { break }
                try await Task.sleep(nanoseconds: 50_000_000)
            }
            let orphans = try await h.app.store.wechat.orphans(recordedBefore: Clock.nowMillis() + 1, limit: 10)
            XCTAssertEqual(orphans.map(\.stream), [], "every order stream is linked")

            try await h.rebuild()
            try await compare("after rebuild")
        }
    }

    static func permutations(_ items: [Int]) -> [[Int]] {
        if items.count <= 1 { return [items] }
        return items.indices.flatMap { i -> [[Int]] in
            var rest = items
            let head = rest.remove(at: i)
            return permutations(rest).map { [head] + $0 }
        }
    }

    /// `body` over `items`, `width` at a time; results in input order.
    static func concurrently<T: Sendable, R: Sendable>(_ items: [T], width: Int,
                                                         _ body: @escaping @Sendable (T) async throws -> R) async throws -> [R] {
        try await withThrowingTaskGroup(of: (Int, R).self) { group in
            var results = [R?](repeating: nil, count: items.count)
            var next = 0
            for _ in 0..<min(width, items.count) {
                let i = next
                group.addTask { (i, try await body(items[i])) }
                next += 1
            }
            while let (i, r) = try await group.next() {
                results[i] = r
                if next < items.count {
                    let j = next
                    group.addTask { (j, try await body(items[j])) }
                    next += 1
                }
            }
            return results.map { $0! }
        }
    }
}

import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// Order identity: refunds and inquiries name orders (by any of their ids) and live in the
/// order's own stream, tied to the subscription by a link as soon as the alias index connects
/// them — whichever arrives first, and when a delivery and a refund of one order race. Authentic
/// pushes the ledger cannot read, ordinary purchases and WeChat's sandbox are kept, visible and apart.
final class WeChatOrderTests: XCTestCase {
    let side = WeChatSide()
    static let day: EpochMillis = 86_400_000
    let product = "vip_monthly"

    /// A paid subscription: signed 10 days ago, period until 20 days from now.
    func subscribe(_ h: ServiceHarness, otid: String, openId: String, order: String, mchOrderNo: String? = nil,
                   transactionId: String? = nil, mode: WeChatSide.Mode = .jsonSecure) async throws -> (start: EpochMillis, end: EpochMillis) {
        let now = WeChatSide.nowSeconds() * 1000
        let start = now - 10 * Self.day, end = now + 20 * Self.day
        try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: start, renewal: end), mode)
        try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: product, order: order, paid: start + 1000,
                                                  create: start + 2000, renewal: end, mchOrderNo: mchOrderNo, transactionId: transactionId), mode)
        return (start, end)
    }

    /// A refund naming the delivery's WeChatPayInfo.MchOrderNo (not its OutTradeNo) arrives before
    /// the delivery: it waits in its order's stream, counts for nobody, and is linked the moment the
    /// delivery states that MchOrderNo; a later refund naming only WeChat's own order id is linked
    /// at once through the alias the first refund stated. Live, rebuild and `?at=` agree.
    func testAnAliasArrivingLaterLinksTheWaitingStream() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let otid = "7200000000000001", openId = "oAlias1"
            let now = WeChatSide.nowSeconds() * 1000
            let refundAt = now - Self.day
            try await side.push(h, WeChatSide.refund(openId: openId, mchOrderId: "MCH-A1", wxOrderId: "WXO-A1", at: refundAt, refundId: "R1"))
            let waiting = StreamId.wechatOrder("MCH-A1").text
            XCTAssertEqual(try h.events(stream: waiting).count, 1)
            XCTAssertEqual(try h.links(of: waiting), 0)
            let orphans = try await h.request("GET", "/v1/wechat/orphans?olderThanHours=0", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(orphans.status, 200, orphans.text)
            XCTAssertEqual((orphans.json["orphans"] as? [[String: Any]])?.compactMap { $0["stream"] as? String }, [waiting])
            XCTAssertEqual((orphans.json["orphans"] as? [[String: Any]])?.first?["openIds"] as? [String], [openId])
            XCTAssertEqual(Set((orphans.json["orphans"] as? [[String: Any]])?.first?["knownIds"] as? [String] ?? []), ["MCH-A1", "WXO-A1"])
            let awaited1 = try await h.state(otid)
            XCTAssertNil(awaited1)

            let (start, end) = try await subscribe(h, otid: otid, openId: openId, order: "OUT-A1", mchOrderNo: "MCH-A1")
            XCTAssertEqual(try h.links(of: waiting), 1, "linked when the delivery stated the alias")
            let orphansAfter = try await h.request("GET", "/v1/wechat/orphans?olderThanHours=0", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual((orphansAfter.json["orphans"] as? [Any])?.count, 0, orphansAfter.text)
            for phase in ["live", "rebuilt"] {
                if phase == "rebuilt" { try await h.rebuild() }
                let live = try await h.state(otid)
                XCTAssertEqual(live?["status"] as? String, "revoked", phase)
                XCTAssertEqual((live?["revocationDate"] as? NSNumber)?.int64Value, refundAt / 1000 * 1000, phase)
                let awaited2 = try await h.state(otid, at: refundAt - 1)
                XCTAssertEqual(awaited2?["status"] as? String, "active", phase)
                let awaited3 = try await h.state(otid, at: refundAt + 1)
                XCTAssertEqual(awaited3?["status"] as? String, "revoked", phase)
                let awaited4 = try await h.state(otid, at: start + Self.day)
                XCTAssertEqual(awaited4?["latestTransactionId"] as? String, "OUT-A1", phase)
                let awaited5 = try await h.entitlements(openId)
                XCTAssertEqual(awaited5, [], phase)
                let awaited6 = try await h.entitlements(openId, at: refundAt - 1)
                XCTAssertEqual(awaited6, [product], phase)
            }
            // A second refund names only WeChat's order id: tied through the first refund's pair.
            try await side.push(h, WeChatSide.refund(openId: openId, mchOrderId: "", wxOrderId: "WXO-A1", at: refundAt + 1000, refundId: "R2"))
            XCTAssertEqual(try h.links(of: StreamId.wechatOrder("WXO-A1").text), 1, "linked at once")
            // The auditor's view of the order: every id, the subscription, both streams linked.
            let order = try await h.request("GET", "/v1/wechat/orders/WXO-A1", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(order.status, 200, order.text)
            XCTAssertEqual(Set(order.json["ids"] as? [String] ?? []), ["MCH-A1", "OUT-A1", "WXO-A1", "4200-OUT-A1"])
            XCTAssertEqual((order.json["subscriptions"] as? [[String: Any]])?.first?["originalTransactionId"] as? String, otid)
            XCTAssertEqual((order.json["streams"] as? [[String: Any]])?.filter { $0["linked"] as? Bool == true }.count, 2)
            XCTAssertEqual(order.json["ordinaryPurchase"] as? Bool, false)
            // The subscription's timeline shows the linked streams' refunds with their raw evidence.
            let timeline = try await h.request("GET", "/v1/subscriptions/\(otid)/events", token: "auditor-token-for-tests-0123456789abcdef")
            let types = (timeline.json["events"] as? [[String: Any]] ?? []).compactMap { $0["type"] as? String }
            XCTAssertEqual(types.filter { $0 == XPayEventName.refundNotify }.count, 2, "\(types)")
            let awaited7 = try await h.state(otid, at: start + Self.day)
            XCTAssertEqual(end, (awaited7?["expiresDate"] as? NSNumber)?.int64Value)
            let forbidden = try await h.request("GET", "/v1/wechat/orders/WXO-A1", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(forbidden.status, 403)
            let unknown = try await h.request("GET", "/v1/wechat/orders/NOPE", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(unknown.status, 404, unknown.text)
        }
    }

    /// A delivery and a refund of one order posted at the same moment, many times over: every
    /// order ends linked and revoked, whichever commits first (each re-checks after its commit).
    func testConcurrentDeliveryAndRefundOfOneOrderAlwaysEndLinked() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let now = WeChatSide.nowSeconds() * 1000
            let start = now - 10 * Self.day, end = now + 20 * Self.day
            let rounds = 40
            let side = self.side, product = self.product
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<rounds {
                    let otid = String(7_300_000_000_000_000 + i), openId = "oRace\(i)", order = "RACE-\(i)"
                    // Half the refunds name the OutTradeNo, half the delivery's MchOrderNo.
                    let named = i % 2 == 0 ? order : "mch-" + order
                    let delivery = WeChatSide.deliver(otid: otid, openId: openId, product: product, order: order, paid: start,
                                                      create: start + 1000, renewal: end)
                    let refund = WeChatSide.refund(openId: openId, mchOrderId: named, wxOrderId: "WXO-" + order, at: now - Self.day,
                                                   refundId: "RR-\(i)")
                    group.addTask { try await side.push(h, delivery, i % 3 == 0 ? .xmlPlain : .jsonSecure) }
                    group.addTask { try await side.push(h, refund, i % 3 == 1 ? .xmlSecure : .jsonSecure) }
                }
                try await group.waitForAll()
            }
            for i in 0..<rounds {
                let order = "RACE-\(i)"
                let stream = StreamId.wechatOrder(i % 2 == 0 ? order : "mch-" + order).text
                XCTAssertEqual(try h.links(of: stream), 1, "round \(i): the refund's stream is linked")
                let awaited8 = try await h.state(String(7_300_000_000_000_000 + i))
                XCTAssertEqual(awaited8?["status"] as? String, "revoked", "round \(i)")
            }
            let orphans = try await h.app.store.wechat.orphans(recordedBefore: Clock.nowMillis() + 1, limit: 100)
            XCTAssertEqual(orphans.map(\.stream), [])
        }
    }

    /// A refund re-pushed after its delivery arrived lands where its first copy did: stored once.
    func testARePushIsStoredOnceWhicheverStreamItWouldLandInNow() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let now = WeChatSide.nowSeconds() * 1000
            let refund = WeChatSide.refund(openId: "oRe1", mchOrderId: "REP-1", wxOrderId: "WXO-REP-1", at: now - Self.day, refundId: "RRE-1")
            try await side.push(h, refund)
            _ = try await subscribe(h, otid: "7400000000000001", openId: "oRe1", order: "REP-1")
            for mode in WeChatSide.Mode.allCases { try await side.push(h, refund, mode) }
            let stored = try h.admin.query("SELECT count(*) AS n FROM events WHERE type = $1", [.text(XPayEventName.refundNotify)], name: "refunds")
            XCTAssertEqual(try stored.first!.decode(Int64.self, "n"), 1)
            let awaited9 = try await h.state("7400000000000001")
            XCTAssertEqual(awaited9?["status"] as? String, "revoked")
        }
    }

    /// An authentic push missing what the ledger needs is stored as evidence with the reason,
    /// answered 200 (so WeChat stops retrying) and counted in /metrics; its re-push is one event.
    func testAuthenticPushesTheLedgerCannotReadAreStoredAnsweredAndCounted() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let now = WeChatSide.nowSeconds() * 1000
            guard case .object(var delivery) = WeChatSide.deliver(otid: "7500000000000001", openId: "oU1", product: product, order: "U-1",
                                                                   paid: now, create: now, renewal: now + Self.day) else { return XCTFail() }
            delivery["OutTradeNo"] = nil
            for mode in WeChatSide.Mode.allCases {
                let r = try await side.push(h, .object(delivery), mode)
                XCTAssertEqual(r["ErrCode"], "0", "\(mode)")
            }
            let stream = StreamId.wechatUnreadable(event: XPayEventName.goodsDeliver).text
            XCTAssertEqual(try h.events(stream: stream).count, 1, "one piece of evidence, however often re-pushed")
            let facts = try await h.app.store.projections.facts(positions: [try h.admin.query(
                "SELECT position FROM events WHERE stream_id = $1", [.text(stream)], name: "p").first!.decode(Int64.self, "position")])
            XCTAssertEqual(facts.map(\.kind), [.unreadable])
            XCTAssertTrue(facts.first?.details["reason"]?.text?.contains("OutTradeNo") ?? false)
            let metrics = try await h.metricsText()
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_unreadable_events"), 1, metrics)
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_unreadable_pushes_total", "event=\"xpay_goods_deliver_notify\""), 3)
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_orphan_streams"), 0)
            let ready = try await h.request("GET", "/readyz")
            XCTAssertEqual(ready.status, 200, "unreadable evidence stops no projection")
        }
    }

    /// A delivery without AppleSubscriptionInfo is an ordinary purchase: a `purchase` fact an
    /// auditor sees on its order, in no subscription, never an orphan — even when refunded.
    func testOrdinaryPurchasesAreVisibleToAuditorsAndNeverOrphans() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let now = WeChatSide.nowSeconds() * 1000
            try await side.push(h, WeChatSide.deliver(otid: nil, openId: "oShop", product: "gems_100", order: "SHOP-1", paid: now - 1000,
                                                      create: now, renewal: 0, price: 600))
            try await side.push(h, WeChatSide.refund(openId: "oShop", mchOrderId: "SHOP-1", wxOrderId: "WXO-SHOP-1", at: now, refundId: "RS-1",
                                                     fee: 600))
            let order = try await h.request("GET", "/v1/wechat/orders/SHOP-1", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(order.status, 200, order.text)
            XCTAssertEqual(order.json["ordinaryPurchase"] as? Bool, true)
            XCTAssertEqual((order.json["subscriptions"] as? [Any])?.count, 0)
            let events = order.json["events"] as? [[String: Any]] ?? []
            XCTAssertEqual(events.count, 2)
            let purchase = events.first { $0["type"] as? String == XPayEventName.goodsDeliver }
            let fact = (purchase?["facts"] as? [[String: Any]])?.first
            XCTAssertEqual(fact?["kind"] as? String, "purchase")
            XCTAssertEqual((fact?["transaction"] as? [String: Any])?["price"] as? Int64, 6_000)
            XCTAssertEqual(fact?["customerId"] as? String, "oShop")
            XCTAssertFalse((purchase?["raw"] as? String ?? "").isEmpty)
            let orphans = try await h.request("GET", "/v1/wechat/orphans?olderThanHours=0", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual((orphans.json["orphans"] as? [Any])?.count, 0, orphans.text)
            let awaited10 = try await h.request("GET", "/v1/subscriptions/SHOP-1", token: "app-token-for-tests-0123456789abcdef").status
            XCTAssertEqual(awaited10, 400)
            let awaited11 = try await h.entitlements("oShop")
            XCTAssertEqual(awaited11, [])
        }
    }

    /// WeChat documents no sandbox for Apple payments; a delivery stating Env 1 is kept apart in
    /// Sandbox: it never grants a Production entitlement, and the Production contract (the signing,
    /// which states no Env) is untouched by it.
    func testEnvOneIsKeptApartFromProduction() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let otid = "7600000000000001", openId = "oEnv1"
            let now = WeChatSide.nowSeconds() * 1000
            try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "ENV-1", paid: now - Self.day,
                                                      create: now - Self.day, renewal: now + 29 * Self.day, env: 1))
            let awaited12 = try await h.state(otid)
            XCTAssertNil(awaited12, "nothing in Production")
            let awaited13 = try await h.state(otid, environment: "Sandbox")
            XCTAssertEqual(awaited13?["status"] as? String, "active")
            let awaited14 = try await h.entitlements(openId)
            XCTAssertEqual(awaited14, [])
            let awaited15 = try await h.entitlements(openId, environment: "Sandbox")
            XCTAssertEqual(awaited15, [product])
            // The signing (no Env) is Production's: its own period, untouched by the Sandbox payment.
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: now - Self.day, renewal: now + 6 * Self.day))
            let awaited16 = try await h.state(otid)
            XCTAssertEqual((awaited16?["expiresDate"] as? NSNumber)?.int64Value, now + 6 * Self.day)
            let awaited17 = try await h.state(otid)
            XCTAssertNil(awaited17?["latestTransactionId"] as? String, "no Production payment")
        }
    }
}

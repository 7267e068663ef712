import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// Senders' clocks ahead of the server's (issue 25 item 6): Apple notifications whose signedDate
/// (and purchase) is a few seconds or a day after the server's clock, and WeChat pushes whose
/// business times are, through the real HTTP service. An authentic message is never refused for
/// its clock: stored once, answered 200, and the state answers follow its own business times.
///
/// What each assertion rests on:
/// - `?at=` answers (documented, docs/api: the state at a business time): asserted exactly.
/// - the live answer once the skewed purchase time has passed on the server's clock: asserted
///   (a stored state re-evaluated at its validUntil, SubscriptionFold.nextChange).
/// - the live answer while the first purchase is still later than now (issue 20's rule): nothing
///   has begun, 404 with an error body, like `?at=` before the purchase.
final class ClockSkewTests: XCTestCase {
    static func nowMillis() -> EpochMillis { EpochMillis(Date().timeIntervalSince1970 * 1000) }
    static let day: EpochMillis = 86_400_000

    func appleBody(_ authority: AppleTestAuthority, otid: String, signed: EpochMillis, uuid: String = UUID().uuidString.lowercased()) throws -> Data {
        var sample = AppleTestAuthority.sample(type: "SUBSCRIBED", subtype: "INITIAL_BUY", uuid: uuid, environment: "Sandbox",
                                               originalTransactionId: otid, signedDate: signed, expiresDate: signed + 30 * Self.day)
        sample.notification.data?.signedTransactionInfo = try authority.sign(sample.transaction)
        sample.notification.data?.signedRenewalInfo = try authority.sign(sample.renewal)
        return try AppleTestAuthority.body(signedPayload: authority.sign(sample.notification))
    }

    func testAppleNotificationsSignedAheadOfTheServerClock() async throws {
        try await withService { h in
            for (n, skew) in [(1, EpochMillis(3000)), (2, Self.day)] {
                let otid = "300000000000000\(n)"
                let signed = Self.nowMillis() + skew
                // The sample's purchaseDate is signedDate - 1 s.
                let purchase = signed - 1000
                let uuid = UUID().uuidString.lowercased()
                let body = try appleBody(h.authority, otid: otid, signed: signed, uuid: uuid)
                let before = try h.eventCount()
                let first = try await h.post("/v1/apple/notifications", body)
                XCTAssertEqual(first.status, 200, "skew \(skew) ms: \(first.text)")
                XCTAssertEqual(try h.eventCount(), before + 1, "skew \(skew) ms: stored once")
                // Apple's retry of the same notification: a duplicate, not a second event.
                let again = try await h.post("/v1/apple/notifications", body)
                XCTAssertEqual(again.status, 200, again.text)
                XCTAssertEqual(try h.eventCount(), before + 1, "skew \(skew) ms: the retry is a duplicate")
                XCTAssertEqual(try h.events(stream: otid).map(\.dedupeKey), [uuid])

                // Documented: the state at a business time.
                let during = try await h.state(otid, at: purchase + 3_600_000, environment: "Sandbox")
                XCTAssertEqual(during?["status"] as? String, "active", "skew \(skew) ms: \(during ?? [:])")
                XCTAssertEqual(during?["expiresDate"] as? Int64, signed + 30 * Self.day)
                XCTAssertEqual(during?["productId"] as? String, "com.example.monthly")
                let expired = try await h.state(otid, at: signed + 31 * Self.day, environment: "Sandbox")
                XCTAssertEqual(expired?["status"] as? String, "expired", "skew \(skew) ms: \(expired ?? [:])")
                // Before its purchase nothing had begun: no state at that time.
                let beforePurchase = try await h.state(otid, at: purchase - 3_600_000, environment: "Sandbox")
                XCTAssertNil(beforePurchase, "skew \(skew) ms: a state before the purchase: \(beforePurchase ?? [:])")

                // Issue 20's rule: while the first purchase is later than now nothing has begun, so
                // the live answer is the same as `?at=` before the purchase: 404 with an error
                // body. (The few-seconds case may already have begun on a slow machine.)
                let live = try await h.request("GET", "/v1/subscriptions/\(otid)?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
                if skew >= Self.day || Self.nowMillis() < purchase - 500 {
                    XCTAssertEqual(live.status, 404, "live answer while the purchase is \(skew) ms ahead: \(live.text)")
                    XCTAssertNotNil(live.json["error"] as? String, live.text)
                } else {
                    XCTAssertTrue(live.status == 200 || live.status == 404, "\(live.status) \(live.text)")
                }
            }
            // Once the server's clock passes the few-seconds-ahead purchase, the live answer is
            // the subscription in effect (re-evaluated at its validUntil, not stuck at "nothing").
            let otid = "3000000000000001"
            try await Task.sleep(for: .seconds(4))
            let live = try await h.state(otid, environment: "Sandbox")
            // Issue 20's rule: the read path folds a subscription that has no row yet, so the
            // purchase becomes visible by itself once its time comes (found 404 before that rule).
            XCTAssertNotNil(live, "a future-dated first purchase must become live once its time passes")
            XCTAssertEqual(live?["status"] as? String, "active", "live after the purchase time passed: \(live ?? [:])")
        }
    }

    func testWeChatPushesWithBusinessTimesAheadOfTheServerClock() async throws {
        let side = WeChatSide()
        try await withService(environment: WeChatSide.environment) { h in
            var firstSigned: EpochMillis?
            for (n, skew) in [(1, EpochMillis(3000)), (2, Self.day)] {
                let otid = "400000000000000\(n)"
                let openId = "oSkew\(n)"
                let signed = Self.nowMillis() + skew
                let renewal = signed + 30 * Self.day
                let before = try h.eventCount()
                // Secure mode: the query timestamp is the transport's (now); the business times
                // in the message are the sender's clock, ahead.
                try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: "vip_monthly", signed: signed, renewal: renewal))
                try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: "vip_monthly", order: "SKEW-\(n)",
                                                          paid: signed + 2000, create: signed + 2000, renewal: renewal))
                XCTAssertEqual(try h.eventCount(), before + 2, "skew \(skew) ms: signing and delivery stored")
                // A re-push of the delivery: stored once.
                try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: "vip_monthly", order: "SKEW-\(n)",
                                                          paid: signed + 2000, create: signed + 2000, renewal: renewal), .xmlSecure)
                XCTAssertEqual(try h.eventCount(), before + 2, "skew \(skew) ms: the re-push is a duplicate")

                let during = try await h.state(otid, at: signed + 3_600_000)
                XCTAssertEqual(during?["status"] as? String, "active", "skew \(skew) ms: \(during ?? [:])")
                XCTAssertEqual(during?["productId"] as? String, "vip_monthly")
                XCTAssertEqual(during?["expiresDate"] as? Int64, renewal)
                let contract = try await h.request("GET", "/v1/wechat/contracts?openid=\(openId)&product_id=vip_monthly", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(contract.status, 200, contract.text)
                XCTAssertEqual((contract.json["apple_subscription_info"] as? [String: Any])?["original_transaction_id"] as? String, otid)
                // Issue 20's rule: nothing has begun while the signing is still ahead.
                let live = try await h.request("GET", "/v1/subscriptions/\(otid)", token: "app-token-for-tests-0123456789abcdef")
                if skew >= Self.day || Self.nowMillis() < signed - 500 {
                    XCTAssertEqual(live.status, 404, "live answer while the signing is \(skew) ms ahead: \(live.text)")
                    XCTAssertNotNil(live.json["error"] as? String, live.text)
                } else {
                    XCTAssertTrue(live.status == 200 || live.status == 404, "\(live.status) \(live.text)")
                }
                firstSigned = firstSigned ?? signed
            }
            // Once the server's clock passes the few-seconds-ahead delivery, the contract's
            // subscription is live by itself (no further push), like Apple's above.
            let paid = try XCTUnwrap(firstSigned) + 2000
            let wait = paid + 500 - Self.nowMillis()
            if wait > 0 { try await Task.sleep(for: .milliseconds(wait)) }
            let live = try await h.state("4000000000000001")
            XCTAssertEqual(live?["status"] as? String, "active", "live after the delivery time passed: \(live ?? [:])")
        }
    }

    /// Plaintext mode is different by design: its signature covers only the query string, so the
    /// transport timestamp must be fresh (±300 s). A few seconds ahead is accepted; a day ahead is
    /// refused with a clear error and stores nothing.
    func testWeChatPlaintextTimestampAheadAcceptedWithinTheWindowRefusedBeyond() async throws {
        let side = WeChatSide()
        try await withService(environment: WeChatSide.environment) { h in
            let now = Self.nowMillis()
            let message = WeChatSide.signing(otid: "4000000000000009", openId: "oSkewPlain", product: "vip_monthly", signed: now, renewal: now + 30 * Self.day)
            let before = try h.eventCount()
            let ahead = try await side.post(h, message, .xmlPlain, timestamp: WeChatSide.nowSeconds() + 86_400)
            XCTAssertTrue((400..<500).contains(ahead.status), "\(ahead.status) \(ahead.text)")
            XCTAssertEqual(ahead.errorCode != nil || !ahead.text.isEmpty, true, "a refusal says why: \(ahead.text)")
            XCTAssertEqual(try h.eventCount(), before, "a refused push stores nothing")
            let slightlyAhead = try await side.post(h, message, .xmlPlain, timestamp: WeChatSide.nowSeconds() + 3)
            XCTAssertEqual(slightlyAhead.status, 200, slightlyAhead.text)
            XCTAssertEqual(try h.eventCount(), before + 1)
        }
    }
}

import AppStore
import Crypto
import Foundation
import LedgerCore
import LedgerStore
@testable import LedgerService
import LedgerTesting
import XCTest

/// An expiry at a renewal boundary (auto-renew on) settles before it is announced
/// (`WebhookDerivation.expirySettle`, here 120 minutes): Apple's word on the renewal — a grace
/// period (`DID_FAIL_TO_RENEW`/`GRACE_PERIOD`), billing retry, the renewal itself — may be signed
/// after the expiry instant, and a backend must not revoke and re-grant a paying customer. Through
/// HTTP on real PostgreSQL, in every arrival order, the projections' clock at each arrival, every
/// event delivered to a loopback receiver; expectations written by hand from the rule.
/// (An extension of `WebhookDeliveryTests`, whose receiver, endpoint and delivery helpers it uses.)
extension WebhookDeliveryTests {
    var hour: Int64 { 3_600_000 }
    static let settleCatalog = #"{"products": {"com.example.monthly": {"entitlements": ["premium"]}, "vip_monthly": {"entitlements": ["vip"]}}}"#
    var helper: WebhookDeliveryTests { self }

    static func configure(_ c: inout LedgerConfiguration, clock: SettableClock) {
        WebhookDeliveryTests.configure(&c)
        c.webhooks.expirySettleMinutes = 120
        c.clock = clock.clock
    }

    /// A subscription bought at t0, period to E = t0 + 30 d, auto-renew on; `notice` (if any) is
    /// Apple's DID_FAIL_TO_RENEW signed at `signed`: grace period to E + 16 d, or billing retry.
    func settleLifecycle(_ h: ServiceHarness, otid: String, t0: Int64, notice: (signed: Int64, grace: Bool)?,
               restatements: [Int64] = []) throws -> [(at: Int64, path: String, body: Data)] {
        let e = t0 + 30 * day
        func message(_ type: String, _ subtype: String?, signed: Int64, edit: (inout AppleTestAuthority.Sample) -> Void = { _ in })
            throws -> (at: Int64, path: String, body: Data) {
            var s = AppleTestAuthority.sample(type: type, subtype: subtype, originalTransactionId: otid, transactionId: otid,
                                              signedDate: signed, expiresDate: e)
            s.transaction.purchaseDate = AppleTime(t0)
            s.transaction.originalPurchaseDate = AppleTime(t0)
            s.transaction.appAccountToken = "aaaaaaaa-0000-4000-8000-0000000000e1"
            s.renewal.recentSubscriptionStartDate = AppleTime(t0)
            edit(&s)
            return (signed, "/v1/apple/notifications", try h.authority.signSample(s))
        }
        var out = [try message("SUBSCRIBED", "INITIAL_BUY", signed: t0)]
        func failed(_ s: inout AppleTestAuthority.Sample) {
            guard let notice else { return }
            s.notification.data?.status = notice.grace ? 4 : 3
            s.renewal.isInBillingRetryPeriod = true
            s.renewal.expirationIntent = 2
            if notice.grace { s.renewal.gracePeriodExpiresDate = AppleTime(e + 16 * self.day) }
        }
        if let notice {
            out.append(try message("DID_FAIL_TO_RENEW", notice.grace ? "GRACE_PERIOD" : nil, signed: notice.signed, edit: failed))
        }
        for at in restatements {
            // Apple restating the renewal state as it stands (auto-renew still on): a fact that changes nothing.
            out.append(try message("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", signed: at, edit: failed))
        }
        return out
    }

    /// Posts `messages` in `order`, the clock at each one's signing (never going back).
    func postAt(_ h: ServiceHarness, _ clock: SettableClock, _ messages: [(at: Int64, path: String, body: Data)], order: [Int]) async throws {
        var at = Int64.min
        for k in order {
            at = max(at, messages[k].at + 1000)
            clock.set(at)
            let a = try await h.post(messages[k].path, messages[k].body)
            XCTAssertEqual(a.status, 200, a.text)
        }
    }

    func types(_ receiver: WebhookReceiver, _ otid: String) -> [String] { helper.delivered(receiver, otid).map { $0.type } }

    /// The notice signed an hour after the expiry, inside the window: the backend hears the
    /// billing issue, never `expired`/`revoked` then `granted`. Grace period: access never stops.
    /// Billing retry: one revocation, for the billing issue. Every order of the two messages.
    /// Before the window: `subscription.expired` and `entitlement.revoked` at E, then
    /// `subscription.billing_issue` and `entitlement.granted` an hour later.
    func testALateGraceOrRetryNoticeSupersedesTheExpiryInEveryOrder() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let clock = SettableClock(now)
        try await withService(environment: WebhookDeliveryTests.env, configJSON: Self.settleCatalog, configure: { Self.configure(&$0, clock: clock) }) { h in
            try await helper.addEndpoint(h, "backend", receiver, secret: secret)
            let t0 = now - 40 * day, e = t0 + 30 * day
            var cases: [(otid: String, expected: [String])] = []
            var n = 0
            for grace in [true, false] {
                for order in [[0, 1], [1, 0]] {
                    n += 1
                    let otid = String(1_000_000_000_070_000 + n)
                    try await postAt(h, clock, try settleLifecycle(h, otid: otid, t0: t0, notice: (e + hour, grace)), order: order)
                    cases.append((otid, grace ? ["subscription.started", "entitlement.granted", "subscription.billing_issue"]
                                               : ["subscription.started", "entitlement.granted", "subscription.billing_issue", "entitlement.revoked"]))
                }
            }
            try await helper.deliver([h.app], h)
            for (otid, expected) in cases {
                XCTAssertEqual(types(receiver, otid), expected, otid)
                XCTAssertEqual(helper.delivered(receiver, otid).map { $0.id }, try helper.stored(h, otid).map { $0.id }, "nothing else derived: \(otid)")
            }
            // GET still says what the facts say at each instant: expired between E and the notice.
            let between = try await h.request("GET", "/v1/subscriptions/\(cases[0].otid)?environment=Sandbox&at=\(e + hour / 2)",
                                              token: ServiceHarness.appToken)
            XCTAssertEqual((try JSONSerialization.jsonObject(with: between.body) as? [String: Any])?["status"] as? String, "expired", between.text)
            try helper.verifyWithReferenceLibrary(receiver, secret: secret)
        }
    }

    /// The notice signed before the expiry (on time): the grace period begins at E — no expiry,
    /// as before the window existed. No notice at all: the expiry waits while the window is open
    /// (a fact an hour after E derives nothing), and is announced at E by the first fact after
    /// the window; a notice signed after the window comes too late to supersede it.
    func testANoticeOnTimeAbsentOrAfterTheWindow() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let clock = SettableClock(now)
        try await withService(environment: WebhookDeliveryTests.env, configJSON: Self.settleCatalog, configure: { Self.configure(&$0, clock: clock) }) { h in
            try await helper.addEndpoint(h, "backend", receiver, secret: secret)
            let t0 = now - 40 * day, e = t0 + 30 * day
            let onTime = "1000000000080001", absent = "1000000000080002", tooLate = "1000000000080003"
            for order in [[0, 1], [1, 0]] {
                // A restatement 3 h after E walks past the expiry instant.
                try await postAt(h, clock, try settleLifecycle(h, otid: onTime + String(order[0]), t0: t0, notice: (e - hour, true),
                                                               restatements: [e + 3 * hour]), order: order + [2])
            }
            // Absent: Apple restates the renewal state an hour after E (window open), then 3 h after.
            let messages = try settleLifecycle(h, otid: absent, t0: t0, notice: nil, restatements: [e + hour, e + 3 * hour])
            try await postAt(h, clock, messages, order: [0, 1])
            XCTAssertEqual(try helper.stored(h, absent).map { $0.type }, ["subscription.started", "entitlement.granted"],
                           "the window is open: the expiry waits")
            try await postAt(h, clock, messages, order: [2])
            try await postAt(h, clock, try settleLifecycle(h, otid: tooLate, t0: t0, notice: (e + 3 * hour, true)), order: [0, 1])
            try await helper.deliver([h.app], h)
            for order in [[0, 1], [1, 0]] {
                XCTAssertEqual(types(receiver, onTime + String(order[0])),
                               ["subscription.started", "entitlement.granted", "subscription.billing_issue"], "\(order)")
            }
            XCTAssertEqual(types(receiver, absent), ["subscription.started", "entitlement.granted", "subscription.expired", "entitlement.revoked"])
            let expiry = receiver.deliveries.first { d in
                d.type == "subscription.expired" && String(decoding: d.body, as: UTF8.self).contains(absent)
            }
            let data = (try? JSONSerialization.jsonObject(with: expiry?.body ?? Data()) as? [String: Any])?["data"] as? [String: Any]
            XCTAssertEqual((data?["effectiveDate"] as? NSNumber)?.int64Value, e, "announced at the expiry instant")
            XCTAssertEqual(types(receiver, tooLate), ["subscription.started", "entitlement.granted", "subscription.expired", "entitlement.revoked",
                                                      "subscription.billing_issue", "entitlement.granted"])
            try helper.verifyWithReferenceLibrary(receiver, secret: secret)
        }
    }

    /// WeChat (seed 000 §4.3): a renewal charged ten minutes after RenewalDate R1 (PaidTime
    /// R1 + 10 min) is a renewal, not a lapse — every order of (signing, first delivery, renewal):
    /// renewed, the entitlement granted once; never expired then granted.
    func testAWeChatRenewalPaidMinutesAfterTheBoundaryIsNoLapseInEveryOrder() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        let now = WeChatSide.nowSeconds() * 1000
        let clock = SettableClock(now)
        let side = WeChatSide()
        try await withService(environment: WebhookDeliveryTests.env.merging(WeChatSide.environment) { $1 }, configJSON: Self.settleCatalog,
                              configure: { Self.configure(&$0, clock: clock) }) { h in
            try await helper.addEndpoint(h, "backend", receiver, secret: secret)
            let base = now - 40 * day, r1 = base + 30 * day, r2 = r1 + 30 * day
            var otids: [String] = []
            for (i, order) in WeChatEveryOrderTests.permutations([0, 1, 2]).enumerated() {
                let otid = String(7_380_000_000_000_000 + i), openId = "oSettle\(i)"
                otids.append(otid)
                let messages: [(at: Int64, JSONValue)] = [
                    (base, WeChatSide.signing(otid: otid, openId: openId, product: "vip_monthly", signed: base, renewal: r1)),
                    (base, WeChatSide.deliver(otid: otid, openId: openId, product: "vip_monthly", order: "ST\(i)-O1", paid: base,
                                              create: base + 1000, renewal: r1)),
                    (r1 + 600_000, WeChatSide.deliver(otid: otid, openId: openId, product: "vip_monthly", order: "ST\(i)-O2",
                                                      paid: r1 + 600_000, create: r1 + 601_000, renewal: r2)),
                ]
                var at = Int64.min
                for k in order {
                    at = max(at, messages[k].at + 2000)
                    clock.set(at)
                    _ = try await side.push(h, messages[k].1)
                }
            }
            try await helper.deliver([h.app], h)
            for otid in otids {
                let got = helper.delivered(receiver, otid).map { $0.type }
                XCTAssertEqual(got.sorted(), ["entitlement.granted", "subscription.renewed", "subscription.started"], otid)
            }
        }
    }
}

import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// WeChat rules of issue 20, each with states written by hand from the seed (seed 000, the xpay iOS
/// subscription document; section cited per test), delivered through HTTP in every order.
final class WeChatRuleTests: XCTestCase {
    let side = WeChatSide()
    static let day: EpochMillis = 86_400_000
    let product = "vip_monthly"

    func json(_ o: [String: Any]) -> Data { try! JSONSerialization.data(withJSONObject: o, options: [.sortedKeys]) }

    func contract(_ h: ServiceHarness, _ openId: String) async throws -> [String: Any] {
        let a = try await h.request("GET", "/v1/wechat/contracts?openid=\(openId)&product_id=\(product)", token: "app-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        return a.json
    }

    // MARK: rule 1 — every authenticated refund inquiry is answered with result_code and evidence

    /// Seed 000 §7.4: `IosRefundQueryResponse` has `result_code` and `evidence` (必填, required) — so
    /// an inquiry the ledger cannot read (no or 0 refund_time, a missing or over-long pay_order_id,
    /// refund_time in ms where seconds are expected) still gets the configured fallback (allow, rule
    /// `unreadable`), stored like any answer, repeated word for word to a re-push of the asking,
    /// whether the order's delivery arrived before it or after it.
    func testUnreadableRefundInquiriesGetTheFallbackAnswerStoredLikeAnyOther() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        func inquiry(_ i: Int, _ mutate: (inout [String: JSONValue]) -> Void) -> JSONValue {
            guard case .object(var o) = WeChatSide.inquiry(order: "UNR-\(i)", asked: now, orderTime: now - Self.day, product: product) else { fatalError() }
            mutate(&o)
            return .object(o)
        }
        let cases: [(String, JSONValue)] = [
            ("no refund_time", inquiry(0) { $0["refund_time"] = nil }),
            ("refund_time 0", inquiry(1) { $0["refund_time"] = "0" }),
            ("no pay_order_id", inquiry(2) { $0["pay_order_id"] = nil }),
            ("pay_order_id of 129 bytes", inquiry(3) { $0["pay_order_id"] = .string(String(repeating: "9", count: 129)) }),
            ("refund_time in ms", inquiry(4) { $0["refund_time"] = .string(String(now)) }),
        ]
        try await withService(environment: WeChatSide.environment) { h in
            for mode in [WeChatSide.Mode.jsonSecure, .xmlPlain] {
                for (n, (name, message)) in cases.enumerated() {
                    // Every order: the order's delivery before or after the inquiry changes nothing.
                    let deliverFirst = n % 2 == 0
                    let delivery = WeChatSide.deliver(otid: String(7_300_000_000_000_000 + n + (mode == .xmlPlain ? 100 : 0)),
                                                      openId: "oUnr\(n)", product: product, order: "UNR-\(n)",
                                                      paid: now - Self.day, create: now - Self.day, renewal: now + 29 * Self.day)
                    if deliverFirst { try await side.push(h, delivery, mode) }
                    let reply = try await side.push(h, message, mode)
                    if !deliverFirst { try await side.push(h, delivery, mode) }
                    let label = "\(mode.rawValue) \(name)"
                    XCTAssertEqual(reply["result_code"], "0", label)
                    XCTAssertNil(reply["ErrCode"], "an inquiry gets an IosRefundQueryResponse, not a push acknowledgement: \(label)")
                    let evidence = try JSONValue(json: Data((reply["evidence"] ?? "").utf8))
                    XCTAssertEqual(evidence.text("rule"), "unreadable", label)
                    XCTAssertEqual(evidence.text("decision"), "allow", label)
                    XCTAssertFalse(evidence["fallback"]?.text("detail")?.isEmpty ?? true, "the evidence names why: \(label)")
                    XCTAssertTrue(reply["result_info"]?.contains("could not read") ?? false, label)
                    let again = try await side.push(h, message, mode)
                    XCTAssertEqual(again, reply, "a re-push of the asking repeats its stored answer: \(label)")
                }
            }
            let rows = try h.admin.query(
                "SELECT count(*) AS n FROM events WHERE type = $1 AND stream_id LIKE 'wechat:unreadable:%' AND payload->>'rule' = 'unreadable'",
                [.text(XPayEventName.refundInquiryAnswer)], name: "unreadable answers").first!
            // The XML copy of an asking is the same message (the content hash is format-independent):
            // stored once, answered with the JSON copy's stored answer.
            XCTAssertEqual(try rows.decode(Int64.self, "n"), Int64(cases.count), "one stored answer per asking")
            let inquiries = try h.admin.query(
                "SELECT count(*) AS n FROM events WHERE type = $1 AND stream_id LIKE 'wechat:unreadable:%'",
                [.text(XPayEventName.refundInquiry)], name: "unreadable inquiries").first!
            XCTAssertEqual(try inquiries.decode(Int64.self, "n"), Int64(cases.count), "every asking kept as evidence")
            let metrics = try await h.metricsText()
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_refund_fallbacks_total", #"reason="unreadable""#), Double(cases.count))
        }
    }

    // MARK: rule 7 — sign-params

    /// Seed 000 §3 签约前提: a user who signed and then unsigned may sign again only once the current
    /// period has ended; §3.2: `attach` is required. Every order of (signing, delivery, unsigning):
    /// before the unsigning signing parameters are handed out; after it, 409 naming the period end;
    /// once the period has ended, handed out again.
    func testSignParamsRefusedWhileAnUnsignedContractsPeriodRunsAndWithoutAttach() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        try await withService(environment: WeChatSide.environment) { h in
            func ask(_ openId: String, attach: String? = "uid=1") async throws -> ServiceHarness.Answer {
                var body: [String: Any] = ["openid": openId, "productId": product, "goodsPrice": 3000, "sessionKey": "session-key"]
                if let attach { body["attach"] = attach }
                return try await h.request("POST", "/v1/wechat/sign-params", body: json(body), token: "app-token-for-tests-0123456789abcdef")
            }
            for missing in [nil, ""] as [String?] {
                let a = try await ask("oAttach", attach: missing)
                XCTAssertEqual(a.status, 400, a.text)
                XCTAssertEqual(a.json["error"] as? String, "invalid_sign_params")
                XCTAssertTrue((a.json["message"] as? String ?? "").hasPrefix("attach "), a.text)
            }
            let start = now - 5 * Self.day, end = now + 25 * Self.day
            let iso = WeChatPushDesk.iso(end)
            for (i, order) in WeChatEveryOrderTests.permutations([0, 1, 2]).enumerated() {
                let otid = String(7_310_000_000_000_000 + i), openId = "oResign\(i)"
                let messages = [
                    WeChatSide.signing(otid: otid, openId: openId, product: product, signed: start, renewal: end),
                    WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "RS-\(i)", paid: start, create: start, renewal: end),
                    WeChatSide.unsigning(otid: otid, openId: openId, product: product, unsigned: now - Self.day, renewal: end),
                ]
                for k in order {
                    try await side.push(h, messages[k])
                    let a = try await ask(openId)
                    let unsigned = order.firstIndex(of: 2)! <= order.firstIndex(of: k)!
                    if unsigned {
                        XCTAssertEqual(a.status, 409, "\(order) after \(k): \(a.text)")
                        XCTAssertEqual(a.json["error"] as? String, "contract_period_running")
                        XCTAssertTrue((a.json["message"] as? String ?? "").contains(iso), a.text)
                        XCTAssertTrue((a.json["message"] as? String ?? "").contains(String(end)), a.text)
                    } else {
                        XCTAssertEqual(a.status, 200, "\(order) after \(k): \(a.text)")
                    }
                }
            }
            // The period has ended: signing again is allowed.
            let otid = "7310000000000099", openId = "oResignLater"
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: now - 40 * Self.day, renewal: now - 10 * Self.day))
            try await side.push(h, WeChatSide.unsigning(otid: otid, openId: openId, product: product, unsigned: now - 20 * Self.day, renewal: now - 10 * Self.day))
            let later = try await ask(openId)
            XCTAssertEqual(later.status, 200, later.text)
        }
    }

    /// Seed 000 §6.3: `query_subscribe_contract` states `auto_renew_status`; the ledger's view does
    /// too, always — the latest statement, else the latest that states it, else 1 (a signed contract
    /// renews until unsigned, §4.2/§4.4) — and names the basis. In every order of the messages.
    func testContractsAlwaysStateAutoRenewWithItsBasis() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let start = now - 5 * Self.day, r1 = now + 25 * Self.day, r2 = now + 55 * Self.day
        func silent(_ m: JSONValue) -> JSONValue {
            guard case .object(var o) = m, case .object(var info)? = o["AppleSubscriptionInfo"] else { return m }
            info["AutoRenewStatus"] = nil
            o["AppleSubscriptionInfo"] = .object(info)
            return .object(o)
        }
        try await withService(environment: WeChatSide.environment) { h in
            // Only a delivery that does not state AutoRenewStatus: the default, named.
            try await side.push(h, silent(WeChatSide.deliver(otid: "7320000000000001", openId: "oAuto0", product: product, order: "AR-0",
                                                             paid: start, create: start, renewal: r1)))
            let only = try await contract(h, "oAuto0")
            let onlyInfo = only["apple_subscription_info"] as? [String: Any]
            XCTAssertEqual(only["authorization_state"] as? String, "SIGNED")
            XCTAssertEqual(onlyInfo?["auto_renew_status"] as? Int, 1)
            XCTAssertEqual(onlyInfo?["auto_renew_status_basis"] as? String, "default_signed")

            // An unsigning of R1, then a silent delivery of the next period R2 (its head): the latest
            // statement that states auto-renew is the unsigning's 0.
            for (i, order) in WeChatEveryOrderTests.permutations([0, 1, 2]).enumerated() {
                let otid = String(7_320_000_000_000_100 + i), openId = "oAuto\(i + 1)"
                let messages = [
                    WeChatSide.signing(otid: otid, openId: openId, product: product, signed: start, renewal: r1),
                    WeChatSide.unsigning(otid: otid, openId: openId, product: product, unsigned: start + Self.day, renewal: r1),
                    silent(WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "AR-\(i + 1)", paid: nil,
                                              create: r1 + 1000, renewal: r2)),
                ]
                for k in order { try await side.push(h, messages[k]) }
                let c = try await contract(h, openId)
                let info = c["apple_subscription_info"] as? [String: Any]
                XCTAssertEqual(info?["auto_renew_status"] as? Int, 0, "\(order)")
                XCTAssertEqual(info?["auto_renew_status_basis"] as? String, "latest_statement", "\(order)")
                XCTAssertEqual(c["authorization_state"] as? String, "TERMINATED", "\(order)")
            }
        }
    }

    // MARK: rule 4 — reconciliation

    func withFakeAndService(_ body: (FakeWeChatAPI, ServiceHarness) async throws -> Void) async throws {
        let fake = FakeWeChatAPI()
        try fake.start()
        var env = WeChatSide.environment
        env["LEDGER_WECHAT_APP_SECRET"] = fake.appSecret
        env["LEDGER_WECHAT_API_BASE_URL"] = fake.baseURL.absoluteString
        env["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK"] = "true"
        do {
            try await withService(environment: env) { h in try await body(fake, h) }
        } catch {
            await fake.shutdown()
            throw error
        }
        await fake.shutdown()
    }

    func reconcile(_ h: ServiceHarness) async throws -> WeChatReconcile.Summary {
        try await WeChatReconcile.run(configuration: h.app.configuration, dryRun: false, orphanAge: .zero, log: Log(minimum: .error))
    }

    func answers(_ h: ServiceHarness, _ otid: String) throws -> Int64 {
        try h.admin.query("SELECT count(*) AS n FROM events WHERE stream_id = $1 AND type = $2",
                          [.text(otid), .text(XPayEventName.contractQueryAnswer)], name: "answers").first!.decode(Int64.self, "n")
    }

    /// Seed 000 §6.1: WeChat's answer can trail Apple by up to 10 s, so a push may state a later
    /// RenewalDate (R2) than WeChat reports (R1). The answer is recorded once — it differs from the
    /// ledger's head statement — and not again while WeChat keeps saying the same (before: one new
    /// event per run, forever); once WeChat states R2 (the head's RenewalDate) it agrees.
    func testReconciliationRecordsAnAnswerOnlyWhenItDiffersFromTheLastOne() async throws {
        try await withFakeAndService { fake, h in
            let otid = "7330000000000001", openId = "oRecon1"
            let now = WeChatSide.nowSeconds() * 1000
            let start = now - 40 * Self.day, r1 = now - 10 * Self.day, r2 = now + 20 * Self.day
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: start, renewal: r1))
            try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "RC-1", paid: start, create: start, renewal: r1))
            try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "RC-2", paid: nil, create: r1 + 1000, renewal: r2))
            fake.setContract(openId: openId, productId: product, SubscribeContract(
                authorizationState: .signed,
                appleSubscriptionInfo: .init(originalTransactionId: otid, autoRenewStatus: 1, recentSubscriptionStartDate: start, renewalDate: r1)))
            let first = try await reconcile(h)
            XCTAssertEqual(first.recorded, 1, first.description)
            for run in 0..<3 {
                let again = try await reconcile(h)
                XCTAssertEqual(again.recorded, 0, "run \(run): \(again.description)")
                XCTAssertEqual(again.agreed + again.unchanged, 1, again.description)
            }
            XCTAssertEqual(try answers(h, otid), 1)
            // The renewal the push stated is still in effect (the answer's older period end does
            // not shorten a period a delivery paid).
            let s = try await h.state(otid)
            XCTAssertEqual(s?["status"] as? String, "active")
            XCTAssertEqual((s?["expiresDate"] as? NSNumber)?.int64Value, r2)
            // An unsigning newer than the recorded answer: the head is that push, WeChat (lagging)
            // still says what it said last time — nothing new to record.
            let unsigned = Clock.nowMillis() + 60_000
            try await side.push(h, WeChatSide.unsigning(otid: otid, openId: openId, product: product, unsigned: unsigned, renewal: r2))
            let stale = try await reconcile(h)
            XCTAssertEqual(stale.recorded, 0, stale.description)
            XCTAssertEqual(stale.unchanged, 1, stale.description)
            XCTAssertEqual(try answers(h, otid), 1)
            fake.setContract(openId: openId, productId: product, SubscribeContract(
                authorizationState: .terminated,
                appleSubscriptionInfo: .init(originalTransactionId: otid, autoRenewStatus: 0, recentSubscriptionStartDate: start, renewalDate: r2)))
            let caughtUp = try await reconcile(h)
            XCTAssertEqual(caughtUp.recorded, 0, caughtUp.description)
            XCTAssertEqual(caughtUp.agreed, 1, caughtUp.description)
        }
    }

    /// Seed 000 §6.3: `authorization_state` TERMINATED (已解约) means the contract was unsigned; an
    /// answer without `auto_renew_status` is read (auto-renew 0), recorded, and heals a missed
    /// unsigning: the contract reads TERMINATED with auto-renew 0.
    func testAnAnswerWithoutAutoRenewStatusHealsAMissedUnsigning() async throws {
        try await withFakeAndService { fake, h in
            let otid = "7330000000000002", openId = "oRecon2"
            let now = WeChatSide.nowSeconds() * 1000
            let start = now - 5 * Self.day, end = now + 25 * Self.day
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: start, renewal: end))
            try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "RC-3", paid: start, create: start, renewal: end))
            fake.setContract(openId: openId, productId: product, SubscribeContract(
                authorizationState: .terminated,
                appleSubscriptionInfo: .init(originalTransactionId: otid, autoRenewStatus: 0, recentSubscriptionStartDate: start,
                                             renewalDate: end, autoRenewStatusStated: false)))
            let run = try await reconcile(h)
            XCTAssertEqual(run.failures, [], run.description)
            XCTAssertEqual(run.recorded, 1, run.description)
            let c = try await contract(h, openId)
            XCTAssertEqual(c["authorization_state"] as? String, "TERMINATED")
            XCTAssertEqual((c["apple_subscription_info"] as? [String: Any])?["auto_renew_status"] as? Int, 0)
            let state = try await h.state(otid)
            XCTAssertEqual(state?["autoRenewStatus"] as? Int, 0)
            let twice = try await reconcile(h)
            XCTAssertEqual(twice.recorded, 0, twice.description)
        }
    }

    // MARK: rule 2 — a delivery without PaidTime after a lapse

    /// Seed 000 §4.3: a goods delivery is pushed after each successful charge; Apple payments carry
    /// no PaidTime, only RenewalDate (下次续费时间, the end of the period just paid). A renewal after
    /// a lapse (no signing push: §4.2 sends it only on the first signing) pays a period that ends
    /// at its RenewalDate and is at most the product's period long — here the 30-day period the
    /// first delivery states (PaidTime → RenewalDate), plus a day for month lengths — not one that
    /// starts at the old period's end 60 days earlier. Every order of (signing, first delivery,
    /// renewal after the lapse, refund inquiry about it), through HTTP:
    /// - B + 60 d (inside the lapse): expired; B + 95 d: active on O2 until R3;
    /// - the inquiry (asked 2 h after the charge) sees a short use from the placed start, basis named.
    func testARenewalAfterALapseIsNotBackdatedInEveryOrder() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let base = now - 100 * Self.day
        let r1 = base + 30 * Self.day, r3 = base + 120 * Self.day, charged = base + 90 * Self.day
        let asked = charged + 2 * 3_600_000
        let floor = r3 - 31 * Self.day
        try await withService(environment: WeChatSide.environment) { h in
            for (i, order) in WeChatEveryOrderTests.permutations([0, 1, 2, 3]).enumerated() {
                let otid = String(7_340_000_000_000_000 + i), openId = "oLapse\(i)", o2 = "LP\(i)-O2"
                let messages = [
                    WeChatSide.signing(otid: otid, openId: openId, product: product, signed: base, renewal: r1),
                    WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "LP\(i)-O1", paid: base, create: base + 1000, renewal: r1),
                    WeChatSide.deliver(otid: otid, openId: openId, product: product, order: o2, paid: nil, create: charged + 30_000, renewal: r3),
                    WeChatSide.inquiry(order: o2, asked: asked, orderTime: charged, product: product),
                ]
                var reply: [String: String] = [:]
                for k in order {
                    let r = try await side.push(h, messages[k])
                    if k == 3 { reply = r }
                }
                let label = "\(order)"
                let position = { (k: Int) in order.firstIndex(of: k)! }
                let evidence = try JSONValue(json: Data((reply["evidence"] ?? "").utf8))
                XCTAssertEqual(reply["result_code"], "0", label)
                XCTAssertEqual(evidence.text("rule"), "short_use", "hours after the charge, not 60 days: \(label)")
                if position(2) < position(3) {
                    let delivery = evidence["facts"]?["ledger_delivery"]
                    if position(0) < position(3) || position(1) < position(3) {
                        XCTAssertEqual(delivery?.text("delivered_at_basis"), "renewal_date_minus_stated_period", label)
                        XCTAssertEqual(delivery?.int64("delivered_at"), floor, label)
                    } else {
                        XCTAssertEqual(delivery?.text("delivered_at_basis"), "CreateTime", label)
                        XCTAssertEqual(delivery?.int64("delivered_at"), charged + 30_000, label)
                    }
                }
                let lapse = try await h.state(otid, at: base + 60 * Self.day)
                XCTAssertEqual(lapse?["status"] as? String, "expired", "inside the lapse: \(label)")
                let renewed = try await h.state(otid, at: charged + 5 * Self.day)
                XCTAssertEqual(renewed?["status"] as? String, "active", label)
                XCTAssertEqual(renewed?["latestTransactionId"] as? String, o2, label)
                XCTAssertEqual((renewed?["expiresDate"] as? NSNumber)?.int64Value, r3, label)
                let transactions = try await h.request("GET", "/v1/subscriptions/\(otid)", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(transactions.status, 200)
                let entitled = try await h.entitlements(openId, at: base + 60 * Self.day)
                XCTAssertEqual(entitled, [], "no entitlement inside the lapse: \(label)")
            }
        }
    }

    /// As above, the product's period taken from the catalog (`durationDays`, the rule's first
    /// basis). Seed 000 §4.3: Apple payments carry no PaidTime, and §4.2's signing push comes only
    /// on the first signing — so a yearly product without a signing push in the ledger has no
    /// period any message states. Catalog `vip_yearly` 366 days; deliveries without PaidTime:
    /// D1 sent at c1 → R1 = c1 + 365 d, a lapse, D2 sent at c2 = now − 10 d → R2 = c2 + 365 d.
    /// Every order of (D1, D2, an inquiry about D2 asked an hour after its charge):
    /// - c1 + 10 d: active on D1 (from its send time; without the catalog it started 31 days
    ///   before R1, 334 days late);
    /// - now − 60 d (inside the lapse): expired (without the catalog D2 started at R1: backdated);
    /// - now: active on D2 to R2, placed at R2 − 366 d, basis `renewal_date_minus_catalog_duration`;
    /// - the inquiry: a short use from that start.
    func testARenewalAfterALapseIsPlacedByTheCatalogsDurationInEveryOrder() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let c1 = now - 500 * Self.day, r1 = c1 + 365 * Self.day
        let c2 = now - 10 * Self.day, r2 = c2 + 365 * Self.day
        let asked = c2 + 3_600_000
        let catalog = #"{"products": {"vip_yearly": {"entitlements": ["vip"], "durationDays": 366}}}"#
        try await withService(environment: WeChatSide.environment, configJSON: catalog) { h in
            for (i, order) in WeChatEveryOrderTests.permutations([0, 1, 2]).enumerated() {
                let otid = String(7_390_000_000_000_000 + i), openId = "oYearly\(i)", o2 = "YR\(i)-O2"
                let messages = [
                    WeChatSide.deliver(otid: otid, openId: openId, product: "vip_yearly", order: "YR\(i)-O1", paid: nil, create: c1, renewal: r1),
                    WeChatSide.deliver(otid: otid, openId: openId, product: "vip_yearly", order: o2, paid: nil, create: c2, renewal: r2),
                    WeChatSide.inquiry(order: o2, asked: asked, orderTime: c2, product: "vip_yearly"),
                ]
                var reply: [String: String] = [:]
                for k in order {
                    let r = try await side.push(h, messages[k])
                    if k == 2 { reply = r }
                }
                let label = "\(order)"
                if order.firstIndex(of: 1)! < order.firstIndex(of: 2)! {
                    let evidence = try JSONValue(json: Data((reply["evidence"] ?? "").utf8))
                    XCTAssertEqual(evidence.text("rule"), "short_use", label)
                    let delivery = evidence["facts"]?["ledger_delivery"]
                    if order.firstIndex(of: 0)! < order.firstIndex(of: 2)! {
                        // R1 known: D2 would start there (a lapse earlier), the catalog's period bounds it.
                        XCTAssertEqual(delivery?.text("delivered_at_basis"), "renewal_date_minus_catalog_duration", label)
                        XCTAssertEqual(delivery?.int64("delivered_at"), r2 - 366 * Self.day, label)
                    } else {
                        // Nothing before D2 yet: its send time, within the catalog's period.
                        XCTAssertEqual(delivery?.text("delivered_at_basis"), "CreateTime", label)
                        XCTAssertEqual(delivery?.int64("delivered_at"), c2, label)
                    }
                }
                let first = try await h.state(otid, at: c1 + 10 * Self.day)
                XCTAssertEqual(first?["status"] as? String, "active", "the first year runs from its charge: \(label)")
                XCTAssertEqual(first?["latestTransactionId"] as? String, "YR\(i)-O1", label)
                let lapse = try await h.state(otid, at: now - 60 * Self.day)
                XCTAssertEqual(lapse?["status"] as? String, "expired", "inside the lapse: \(label)")
                let live = try await h.state(otid)
                XCTAssertEqual(live?["status"] as? String, "active", label)
                XCTAssertEqual((live?["expiresDate"] as? NSNumber)?.int64Value, r2, label)
                let entitled = try await h.entitlements(openId, at: now - 60 * Self.day)
                XCTAssertEqual(entitled, [], "no entitlement inside the lapse: \(label)")
                let now = try await h.entitlements(openId)
                XCTAssertEqual(now, ["vip"], label)
            }
            // A rebuild folds with the same catalog: the same answers.
            try await h.rebuild()
            let again = try await h.state(String(7_390_000_000_000_000), at: now - 60 * Self.day)
            XCTAssertEqual(again?["status"] as? String, "expired", "after a rebuild")
        }
    }

    // MARK: rule 3 — an unsigning after an early renewal charge

    /// Apple charges a renewal up to 24 h before the period ends (the delivery, seed 000 §4.3,
    /// already states the next RenewalDate R2); the user unsigns after that charge, and the
    /// unsigning states RenewalDate R1 (§4.4: 当前订阅周期的结束时间, the period WeChat still shows).
    /// By when each happened the unsigning is the later act: auto-renew is off for good, the paid
    /// period R1 → R2 still runs. Before: the delivery won on RenewalDate and the contract stayed
    /// SIGNED with auto-renew 1. Every order of (signing, first delivery, early renewal, unsigning).
    func testAnUnsigningAfterAnEarlyRenewalChargeTurnsAutoRenewOffInEveryOrder() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let base = now - 40 * Self.day
        let r1 = base + 30 * Self.day, r2 = r1 + 30 * Self.day
        let charged = r1 - 20 * 3_600_000, unsigned = r1 - 10 * 3_600_000
        try await withService(environment: WeChatSide.environment) { h in
            for (i, order) in WeChatEveryOrderTests.permutations([0, 1, 2, 3]).enumerated() {
                let otid = String(7_350_000_000_000_000 + i), openId = "oEarly\(i)"
                let messages = [
                    WeChatSide.signing(otid: otid, openId: openId, product: product, signed: base, renewal: r1),
                    WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "EA\(i)-O1", paid: base, create: base + 1000, renewal: r1),
                    WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "EA\(i)-O2", paid: charged, create: charged + 1000, renewal: r2),
                    WeChatSide.unsigning(otid: otid, openId: openId, product: product, unsigned: unsigned, renewal: r1),
                ]
                for k in order { try await side.push(h, messages[k]) }
                let label = "\(order)"
                let c = try await contract(h, openId)
                XCTAssertEqual(c["authorization_state"] as? String, "TERMINATED", label)
                XCTAssertEqual((c["apple_subscription_info"] as? [String: Any])?["auto_renew_status"] as? Int, 0, label)
                let live = try await h.state(otid)
                XCTAssertEqual(live?["autoRenewStatus"] as? Int, 0, label)
                XCTAssertEqual(live?["status"] as? String, "active", "the paid period R1 → R2 runs: \(label)")
                XCTAssertEqual((live?["expiresDate"] as? NSNumber)?.int64Value, r2, label)
                let beforeUnsigning = try await h.state(otid, at: unsigned - 3_600_000)
                XCTAssertEqual(beforeUnsigning?["autoRenewStatus"] as? Int, 1, "auto-renew was on until the unsigning: \(label)")
            }
        }
    }

    /// The same act in another shape: the early renewal's delivery carries no WeChatPayInfo (no
    /// PaidTime — Apple payments, seed 000 §4.3), so its period is placed at R1 and the ledger
    /// knows the charge only by the push's CreateTime (消息发送时间, seconds after the charge); the
    /// user unsigns 12 h after it. The unsigning is compared with the charge by when each happened
    /// — never by when the ledger happened to record the charge, which made the answer depend on
    /// arrival. Every order of (signing, first delivery, early renewal without PaidTime,
    /// unsigning), in every push format.
    func testAnUnsigningTwelveHoursAfterAnEarlyChargeWithoutPaidTimeTurnsAutoRenewOffInEveryOrderAndFormat() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let base = now - 40 * Self.day
        let r1 = base + 30 * Self.day, r2 = r1 + 30 * Self.day
        let charged = r1 - 20 * 3_600_000, unsigned = charged + 12 * 3_600_000
        try await withService(environment: WeChatSide.environment) { h in
            var i = 0
            for mode in WeChatSide.Mode.allCases {
                for order in WeChatEveryOrderTests.permutations([0, 1, 2, 3]) {
                    i += 1
                    let otid = String(7_355_000_000_000_000 + i), openId = "oEarlyNoPaid\(i)"
                    let messages = [
                        WeChatSide.signing(otid: otid, openId: openId, product: product, signed: base, renewal: r1),
                        WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "EN\(i)-O1", paid: nil, create: base + 1000, renewal: r1),
                        WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "EN\(i)-O2", paid: nil, create: charged + 1000, renewal: r2),
                        WeChatSide.unsigning(otid: otid, openId: openId, product: product, unsigned: unsigned, renewal: r1),
                    ]
                    for k in order { _ = try await side.push(h, messages[k], mode) }
                    let label = "\(mode) \(order)"
                    let c = try await contract(h, openId)
                    XCTAssertEqual(c["authorization_state"] as? String, "TERMINATED", label)
                    XCTAssertEqual((c["apple_subscription_info"] as? [String: Any])?["auto_renew_status"] as? Int, 0, label)
                    let live = try await h.state(otid)
                    XCTAssertEqual(live?["autoRenewStatus"] as? Int, 0, label)
                    XCTAssertEqual(live?["status"] as? String, "active", "the paid period R1 → R2 runs: \(label)")
                    XCTAssertEqual((live?["expiresDate"] as? NSNumber)?.int64Value, r2, label)
                    XCTAssertEqual(live?["latestTransactionId"] as? String, "EN\(i)-O2", label)
                    let beforeUnsigning = try await h.state(otid, at: unsigned - 3_600_000)
                    XCTAssertEqual(beforeUnsigning?["autoRenewStatus"] as? Int, 1, "auto-renew was on until the unsigning: \(label)")
                    XCTAssertEqual((beforeUnsigning?["expiresDate"] as? NSNumber)?.int64Value, r1, "the first period still runs: \(label)")
                    let afterUnsigning = try await h.state(otid, at: unsigned + 3_600_000)
                    XCTAssertEqual(afterUnsigning?["autoRenewStatus"] as? Int, 0, label)
                    let secondPeriod = try await h.state(otid, at: r1 + 5 * Self.day)
                    XCTAssertEqual(secondPeriod?["status"] as? String, "active", label)
                    XCTAssertEqual(secondPeriod?["autoRenewStatus"] as? Int, 0, "the early charge does not turn auto-renew back on: \(label)")
                    XCTAssertEqual(secondPeriod?["latestTransactionId"] as? String, "EN\(i)-O2", label)
                }
            }
        }
    }

    // MARK: contract pushes without their own time

    /// Seed 000 §4.2 / §4.4: a signing states SignedTime, an unsigning UnsignedTime; both also carry
    /// CreateTime (消息发送时间, seconds). A push missing its own time is placed at CreateTime (the
    /// fact names `time_basis: CreateTime`) and folded — before, it was evidence only and a lost
    /// unsigning left the contract SIGNED with auto-renew 1. Every order of (signing without
    /// SignedTime, delivery, unsigning without UnsignedTime): TERMINATED, auto-renew 0, the paid
    /// period still running.
    func testContractPushesWithoutTheirOwnTimeFallBackToCreateTimeInEveryOrder() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let base = now - 10 * Self.day, r1 = base + 30 * Self.day
        func without(_ message: JSONValue, _ field: String) -> JSONValue {
            guard case .object(var o) = message, case .object(var info)? = o["AppleSubscriptionInfo"] else { fatalError() }
            info[field] = nil
            o["AppleSubscriptionInfo"] = .object(info)
            return .object(o)
        }
        try await withService(environment: WeChatSide.environment) { h in
            for (i, order) in WeChatEveryOrderTests.permutations([0, 1, 2]).enumerated() {
                let otid = String(7_360_000_000_000_000 + i), openId = "oNoTime\(i)"
                let messages = [
                    without(WeChatSide.signing(otid: otid, openId: openId, product: product, signed: base, renewal: r1), "SignedTime"),
                    WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "NT\(i)-O1", paid: base, create: base + 1000, renewal: r1),
                    without(WeChatSide.unsigning(otid: otid, openId: openId, product: product, unsigned: base + 2 * Self.day, renewal: r1), "UnsignedTime"),
                ]
                for k in order { try await side.push(h, messages[k]) }
                let label = "\(order)"
                let c = try await contract(h, openId)
                XCTAssertEqual(c["authorization_state"] as? String, "TERMINATED", label)
                XCTAssertEqual((c["apple_subscription_info"] as? [String: Any])?["auto_renew_status"] as? Int, 0, label)
                let live = try await h.state(otid)
                XCTAssertEqual(live?["status"] as? String, "active", "the paid period runs to R1: \(label)")
                XCTAssertEqual(live?["autoRenewStatus"] as? Int, 0, label)
                // Unsigned at its CreateTime (UnsignedTime + 1 s in the fixture): still on a day before.
                let before = try await h.state(otid, at: base + Self.day)
                XCTAssertEqual(before?["autoRenewStatus"] as? Int, 1, label)
            }
            let rows = try h.admin.query(
                "SELECT count(*) AS n FROM facts WHERE schema_version = $1 AND origin = 'wechat' AND kind = 'renewal' AND detail::jsonb->>'time_basis' = 'CreateTime'",
                [.int64(Int64(FactDecoder.schemaVersion))], name: "placed at CreateTime").first!
            XCTAssertEqual(try rows.decode(Int64.self, "n"), 12, "6 orders × (signing + unsigning), each naming its basis")
        }
    }

    // MARK: conflicting re-pushes

    /// Seed 000 §4.3: a delivery is keyed by OutTradeNo (the ledger's dedupe key `deliver:<OutTradeNo>`);
    /// WeChat re-pushes the same message until acknowledged. A re-push with *different* content
    /// under the same key is not the same message: the first copy stays in force (the log is
    /// append-only), the other is counted and kept as evidence — never dropped without a trace.
    /// Both arrival orders of two differing copies; an ordinary re-push (same content, new
    /// CreateTime) counts nothing.
    func testAConflictingRePushIsCountedAndKeptAsEvidence() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let paid = now - Self.day, rA = now + 29 * Self.day, rB = now + 59 * Self.day
        try await withService(environment: WeChatSide.environment) { h in
            for (i, first) in [rA, rB].enumerated() {
                let second = first == rA ? rB : rA
                let otid = String(7_370_000_000_000_000 + i), openId = "oConflict\(i)"
                func copy(_ renewal: EpochMillis, create: EpochMillis) -> JSONValue {
                    WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "CF\(i)", paid: paid, create: create, renewal: renewal)
                }
                try await side.push(h, copy(first, create: paid + 1000))
                try await side.push(h, copy(first, create: paid + 60_000))   // ordinary re-push
                try await side.push(h, copy(second, create: paid + 120_000))  // conflicting
                try await side.push(h, copy(second, create: paid + 180_000))  // the same conflict again: kept once
                let live = try await h.state(otid)
                XCTAssertEqual((live?["expiresDate"] as? NSNumber)?.int64Value, first, "the first copy stays in force (first \(first))")
            }
            let metrics = try await h.metricsText()
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_conflicting_repushes_total", #"event="xpay_goods_deliver_notify""#), 4,
                           "each conflicting push counted (two per order, the repeat too); identical re-pushes not at all")
            let kept = try h.admin.query(
                "SELECT count(*) AS n FROM events WHERE stream_id = $1 AND dedupe_key LIKE 'conflict:deliver:CF%'",
                [.text(StreamId.wechatUnreadable(event: XPayEventName.goodsDeliver).text)], name: "conflicts kept").first!
            XCTAssertEqual(try kept.decode(Int64.self, "n"), 2, "each different copy kept once as evidence")
            let reason = try h.admin.query(
                "SELECT detail::jsonb->>'reason' AS r FROM facts WHERE kind = 'unreadable' AND stream_id = $1 LIMIT 1",
                [.text(StreamId.wechatUnreadable(event: XPayEventName.goodsDeliver).text)], name: "conflict reason").first!
            XCTAssertTrue((try reason.decode(String.self, "r")).contains("differs from the copy first stored under deliver:CF"))
        }
    }

    // MARK: a subscription product delivered without AppleSubscriptionInfo

    /// Seed 000 §4.3: AppleSubscriptionInfo is carried by Apple subscription deliveries only
    /// (苹果订阅场景携带；安卓订阅 / 普通支付不携带). A delivery of a product the catalog lists (it
    /// grants entitlements: auto-renewing, or for durationDays) without it grants nothing — so it
    /// is counted and logged for the operator. A product the catalog does not list is an ordinary
    /// purchase and alerts nobody; with the default catalog nothing alerts.
    func testACatalogSubscriptionProductDeliveredWithoutInfoIsCounted() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let catalog = #"{"products": {"vip_monthly": {"entitlements": ["vip"]}, "vip_season": {"entitlements": ["vip"], "durationDays": 90}}}"#
        try await withService(environment: WeChatSide.environment, configJSON: catalog) { h in
            for (n, product) in ["vip_monthly", "coins_100", "vip_season", "vip_monthly"].enumerated() {
                try await side.push(h, WeChatSide.deliver(otid: nil, openId: "oNoInfo", product: product, order: "NI-\(n)",
                                                          paid: now - 60_000, create: now, renewal: now))
            }
            let metrics = try await h.metricsText()
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_subscription_deliveries_without_info_total"), 3,
                           "vip_monthly twice and vip_season; coins_100 is not listed")
            let e = try await h.entitlements("oNoInfo")
            XCTAssertEqual(e, [], "an ordinary purchase grants nothing")
        }
        try await withService(environment: WeChatSide.environment) { h in
            try await side.push(h, WeChatSide.deliver(otid: nil, openId: "oNoInfo", product: "vip_monthly", order: "NI-default",
                                                      paid: now - 60_000, create: now, renewal: now))
            let metrics = try await h.metricsText()
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_subscription_deliveries_without_info_total") ?? 0, 0,
                           "the default catalog says nothing about which products grant access")
        }
    }

    // MARK: relink after every inquiry

    /// Seed 000 §7.2/§7.3: Apple asks three times in a row, each answer due within 3 s, and the
    /// asking may arrive while the order's own delivery (§4.3) is being stored. Both posted at the
    /// same moment, many times over: every inquiry's order stream ends linked to its subscription
    /// (the inquiry relinks after its commit whatever its decision's read saw; the delivery
    /// relinks after its own), and the refund case of the order joins the subscription.
    func testAnInquiryRacingItsDeliveryAlwaysEndsLinked() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let start = now - 2 * Self.day, end = now + 28 * Self.day
        let rounds = 40
        try await withService(environment: WeChatSide.environment) { h in
            let side = self.side, product = self.product
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<rounds {
                    let otid = String(7_380_000_000_000_000 + i), order = "IRACE-\(i)"
                    // Half the inquiries name the OutTradeNo, half the delivery's MchOrderNo.
                    let named = i % 2 == 0 ? order : "mch-" + order
                    let delivery = WeChatSide.deliver(otid: otid, openId: "oIRace\(i)", product: product, order: order, paid: start,
                                                      create: start + 1000, renewal: end)
                    let inquiry = WeChatSide.inquiry(order: named, asked: now - 60_000, orderTime: start, product: product)
                    group.addTask { try await side.push(h, delivery, i % 3 == 0 ? .xmlPlain : .jsonSecure) }
                    group.addTask {
                        let reply = try await side.push(h, inquiry, i % 3 == 1 ? .xmlSecure : .jsonSecure)
                        XCTAssertNotNil(reply["result_code"], "round \(i): answered")
                    }
                }
                try await group.waitForAll()
            }
            for i in 0..<rounds {
                let order = "IRACE-\(i)"
                let stream = StreamId.wechatOrder(i % 2 == 0 ? order : "mch-" + order).text
                XCTAssertEqual(try h.links(of: stream), 1, "round \(i): the inquiry's stream is linked")
            }
            let orphans = try await h.app.store.wechat.orphans(recordedBefore: Clock.nowMillis() + 1, limit: 100)
            XCTAssertEqual(orphans.map(\.stream), [])
        }
    }
}

import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// The documented scenarios (`Documented.all()`, the table below — the same table
/// `Tests/LedgerCoreTests/DocumentedScenarioTests.swift` folds in every arrival order) through the
/// real path: each Apple message signed by the test authority and each WeChat push encrypted in
/// secure mode, POSTed over HTTP to a real service on real PostgreSQL, then every check asked of
/// `GET /v1/subscriptions/{id}` (`?at=`, `?recordedAt=`, `?environment=`) and
/// `GET /v1/customers/{id}/entitlements`, and the scenario's `now` check asked without parameters
/// (the live projection tables). Each scenario's days are placed so that its `now` is the real now.
/// Messages are posted in the table's order (stories list late arrivals where they arrive) and, on
/// a second ledger, in the reverse order; then every message is posted again (a retry: stored once).
final class DocumentedScenarioTests: XCTestCase {
    let sender = PushReceiver(config: try! WeChatPushConfig(
        appId: WeChatWebhookTests.appId, token: WeChatWebhookTests.token,
        aesKey: try! EncodingAESKey(WeChatWebhookTests.keyText)))

    /// The table must be the one the core suite folds: one statement of the expectations.
    func testTheTableIsTheOneTheCoreSuiteFolds() throws {
        let here = URL(fileURLWithPath: #filePath)
        let core = here.deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("LedgerCoreTests").appendingPathComponent("DocumentedScenarioTests.swift")
        func section(_ url: URL) throws -> String {
            let text = try String(contentsOf: url, encoding: .utf8)
            // Split so that these lines are not themselves taken for the markers.
            guard let start = text.range(of: "// BEGIN " + "DOCUMENTED SCENARIOS"), let end = text.range(of: "// END " + "DOCUMENTED SCENARIOS") else {
                XCTFail("\(url.path) has no documented-scenarios section")
                return ""
            }
            return String(text[start.lowerBound..<end.upperBound])
        }
        let mine = try section(here)
        XCTAssertFalse(mine.isEmpty)
        XCTAssertEqual(mine, try section(core), "copy the section between the markers from one file to the other")
    }

    func testDocumentedScenariosThroughTheService() async throws {
        try await withService(environment: WeChatWebhookTests.environment) { h in
            var asked = 0
            for scenario in Documented.all() {
                asked += try await run(scenario, h, reversed: false)
            }
            print("documented scenarios, table order: \(Documented.all().count) scenarios, \(asked) answers compared")
            XCTAssertGreaterThan(asked, 100)
        }
    }

    /// The same stories delivered in the opposite order (late arrivals first), on a fresh ledger.
    func testDocumentedScenariosDeliveredInReverseThroughTheService() async throws {
        try await withService(environment: WeChatWebhookTests.environment) { h in
            var asked = 0
            for scenario in Documented.all() {
                asked += try await run(scenario, h, reversed: true)
            }
            print("documented scenarios, reversed: \(Documented.all().count) scenarios, \(asked) answers compared")
            XCTAssertGreaterThan(asked, 100)
        }
    }

    /// Seed 001: Apple renews within the 24 hours before expiry, so a renewal is signed before its
    /// period starts. The live answer (projection tables, no parameters) must switch product at the
    /// renewal's purchaseDate — not when it was signed, and not only after another event.
    func testAnEarlySignedRenewalSwitchesTheLiveAnswerAtItsPurchaseDate() async throws {
        try await withService { h in
            let otid = "7200000000000001", customer = "5eed0c0d-0000-4a00-8000-00000000e001"
            let clock = Documented.Clock(base: Self.nowMillis())
            let switchAt = 3.0 / 86_400  // 3 seconds from now
            let buy = Documented.Apple(type: "SUBSCRIBED", subtype: "INITIAL_BUY", signed: -10,
                                       tx: .init(id: otid, product: Documented.monthly, purchase: -10, expires: switchAt, token: customer),
                                       renewal: .init(auto: 1, product: Documented.monthly, next: Documented.yearly), uuid: UUID().uuidString)
            let renew = Documented.Apple(type: "DID_RENEW", subtype: nil, signed: -1.0 / 86_400,
                                         tx: .init(id: otid + "2", product: Documented.yearly, purchase: switchAt, expires: 365, token: customer),
                                         renewal: .init(auto: 1, product: Documented.yearly), uuid: UUID().uuidString)
            for spec in [renew, buy] {
                let (n, tx, r) = Documented.appleModels(spec, otid: otid, clock: clock)
                let answer = try await h.post("/v1/apple/notifications", try h.authority.signNotification(n, transaction: tx, renewal: r))
                XCTAssertEqual(answer.status, 200, answer.text)
            }
            let before = try await h.request("GET", "/v1/subscriptions/\(otid)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(before.json["productId"] as? String, Documented.monthly, before.text)
            XCTAssertEqual(before.json["status"] as? String, "active")
            while Self.nowMillis() <= clock.ms(switchAt) + 200 { try await Task.sleep(nanoseconds: 100_000_000) }
            let after = try await h.request("GET", "/v1/subscriptions/\(otid)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(after.json["productId"] as? String, Documented.yearly, after.text)
            XCTAssertEqual(after.json["latestTransactionId"] as? String, otid + "2")
            XCTAssertEqual((after.json["expiresDate"] as? NSNumber)?.int64Value, clock.ms(365))
            let grants = try await h.request("GET", "/v1/customers/\(customer)/entitlements", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual((grants.json["entitlements"] as? [[String: Any]])?.compactMap { $0["entitlement"] as? String }, [Documented.yearly],
                           grants.text)
        }
    }

    /// Issue 20 rule 4: a first purchase dated a few seconds after the server's clock (Apple's and
    /// the server's clocks differ; apple.md §2.3 SUBSCRIBED/INITIAL_BUY grants from purchaseDate)
    /// is answered "not yet" (404, no entitlements) until its purchaseDate, and then active by
    /// itself: no second event for it arrives. The clock is the real one, moved by waiting.
    func testAFirstPurchaseDatedAfterNowShowsByItselfOnceItsTimeComes() async throws {
        try await withService { h in
            let otid = "7200000000000002", customer = "5eed0c0d-0000-4a00-8000-00000000e002"
            let clock = Documented.Clock(base: Self.nowMillis())
            let startsAt = 3.0 / 86_400  // 3 seconds from now
            let buy = Documented.Apple(type: "SUBSCRIBED", subtype: "INITIAL_BUY", signed: -1.0 / 86_400,
                                       tx: .init(id: otid, product: Documented.monthly, purchase: startsAt, expires: 30, token: customer),
                                       renewal: .init(auto: 1, product: Documented.monthly), uuid: UUID().uuidString)
            let (n, tx, r) = Documented.appleModels(buy, otid: otid, clock: clock)
            let answer = try await h.post("/v1/apple/notifications", try h.authority.signNotification(n, transaction: tx, renewal: r))
            XCTAssertEqual(answer.status, 200, answer.text)
            let before = try await h.request("GET", "/v1/subscriptions/\(otid)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(before.status, 404, "nothing had begun yet: \(before.text)")
            let none = try await h.request("GET", "/v1/customers/\(customer)/entitlements", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual((none.json["entitlements"] as? [[String: Any]])?.count, 0, none.text)
            while Self.nowMillis() <= clock.ms(startsAt) + 200 { try await Task.sleep(nanoseconds: 100_000_000) }
            let after = try await h.request("GET", "/v1/subscriptions/\(otid)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(after.status, 200, after.text)
            XCTAssertEqual(after.json["status"] as? String, "active")
            XCTAssertEqual(after.json["productId"] as? String, Documented.monthly)
            let grants = try await h.request("GET", "/v1/customers/\(customer)/entitlements", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual((grants.json["entitlements"] as? [[String: Any]])?.compactMap { $0["entitlement"] as? String }, [Documented.monthly],
                           grants.text)
        }
    }

    static func nowMillis() -> EpochMillis { EpochMillis((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// Posts the scenario and asks every check; returns how many answers were compared.
    func run(_ s: Documented.Scenario, _ h: ServiceHarness, reversed: Bool) async throws -> Int {
        // Whole seconds, so WeChat's second-resolution times land on the table's days.
        let base = (Self.nowMillis() - EpochMillis((s.now * 86_400_000).rounded())) / 1000 * 1000
        let clock = Documented.Clock(base: base)
        let knownSets = Set(s.checks.compactMap { $0.knownOnly.map { Set($0) } })
        XCTAssertLessThanOrEqual(knownSets.count, 1, "\(s.name): the service suite records one prefix per scenario")
        let known = knownSets.first ?? []
        var recordedBy: EpochMillis?
        let messages = reversed ? s.messages.reversed() : s.messages
        for m in messages where known.contains(m.label) { try await post(m, s, clock, h, again: false) }
        if !known.isEmpty {
            try await Task.sleep(nanoseconds: 30_000_000)
            recordedBy = Self.nowMillis()
            try await Task.sleep(nanoseconds: 30_000_000)
        }
        for m in messages where !known.contains(m.label) { try await post(m, s, clock, h, again: false) }
        for m in messages { try await post(m, s, clock, h, again: true) }

        var asked = 0
        for check in s.checks {
            let env = check.environment ?? s.environment
            let otid = check.otid ?? s.otid
            var query = "environment=\(env)"
            if check.knownOnly != nil {
                guard let r = recordedBy else { XCTFail("\(s.name): no recording time"); continue }
                query += "&recordedAt=\(r)"
                if check.at != s.now { query += "&at=\(clock.ms(check.at))" }
            } else {
                query += "&at=\(clock.ms(check.at))"
            }
            var queries = [query]
            // The live tables: the un-parameterised answer is the check at `now`.
            if check.at == s.now, check.knownOnly == nil, check.otid == nil, check.environment == nil, env == "Production" { queries.append("") }
            for q in queries {
                asked += 1
                let label = "\(s.name) at day \(check.at)\(check.knownOnly.map { " knowing only \($0)" } ?? "") [\(q.isEmpty ? "live, no parameters" : q)]"
                let state = try await h.request("GET", "/v1/subscriptions/\(otid)\(q.isEmpty ? "" : "?" + q)", token: "app-token-for-tests-0123456789abcdef")
                var entitlements: ServiceHarness.Answer?
                if let customer = check.expect.customer {
                    let asking = (check.askAs ?? customer).addingPercentEncoding(withAllowedCharacters: .urlPathAllowed)!
                    entitlements = try await h.request("GET", "/v1/customers/\(asking)/entitlements\(q.isEmpty ? "" : "?" + q)", token: "app-token-for-tests-0123456789abcdef")
                }
                let diffs = compare(check, env: env, otid: otid, clock, state, entitlements)
                if !diffs.isEmpty { XCTFail("\(label): \(diffs.joined(separator: "; "))\n  answer: \(state.text)\n  entitlements: \(entitlements?.text ?? "-")") }
            }
        }
        return asked
    }

    func post(_ m: Documented.Message, _ s: Documented.Scenario, _ clock: Documented.Clock, _ h: ServiceHarness, again: Bool) async throws {
        switch m.body {
        case .apple(let spec):
            let (n, tx, renewal) = Documented.appleModels(spec, otid: s.otid, clock: clock)
            let answer = try await h.post("/v1/apple/notifications", try h.authority.signNotification(n, transaction: tx, renewal: renewal))
            XCTAssertEqual(answer.status, 200, "\(s.name) \(m.label): \(answer.text)")
            // Re-signed (new ECDSA signature), same notificationUUID: a retry, stored once.
            XCTAssertEqual(answer.json["status"] as? String, again ? "duplicate" : "stored", "\(s.name) \(m.label)")
        case .wechat(let push):
            let (path, body) = try secure(push.value(otid: s.otid, clock: clock))
            let answer = try await h.post(path, body)
            XCTAssertEqual(answer.status, 200, "\(s.name) \(m.label): \(answer.text)")
        }
    }

    func sha1(_ parts: [String]) -> String {
        Hex.encode(Digest.sha1(Array(parts.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }.joined().utf8)))
    }

    /// A secure-mode JSON push: (path with query, body), as WeChat sends it.
    func secure(_ message: JSONValue) throws -> (String, Data) {
        let nonce = UUID().uuidString, ts = "1775226065"
        let sealed = try sender.encryptReply(Array(message.canonicalJSON()), format: .json, timestamp: 1775226065, nonce: nonce)
        let encrypt = (try JSONSerialization.jsonObject(with: sealed) as! [String: Any])["Encrypt"] as! String
        let token = WeChatWebhookTests.token
        let q = "signature=\(sha1([token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(sha1([token, ts, nonce, encrypt]))"
        let body = try JSONSerialization.data(withJSONObject: ["ToUserName": "gh_97417a04a28d", "Encrypt": encrypt], options: [.sortedKeys])
        return ("/v1/wechat/notifications?" + q.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed)!, body)
    }

    /// What differs between the answers and the check's expectation.
    func compare(_ check: Documented.Check, env: String, otid: String, _ c: Documented.Clock,
                 _ state: ServiceHarness.Answer, _ entitlements: ServiceHarness.Answer?) -> [String] {
        let e = check.expect
        guard let status = e.status else {
            var diffs = state.status == 404 ? [] : ["expected 404 (nothing known then), got \(state.status)"]
            if let entitlements {
                let names = (entitlements.json["entitlements"] as? [[String: Any]] ?? []).compactMap { $0["entitlement"] as? String }
                if entitlements.status != 200 || names.sorted() != e.entitlements.sorted() {
                    diffs.append("entitlements: got \(entitlements.status) \(names), expected \(e.entitlements)")
                }
            }
            return diffs
        }
        guard state.status == 200 else { return ["expected 200, got \(state.status)"] }
        let j = state.json
        var diffs: [String] = []
        func int(_ v: Any?) -> Int64? { (v as? NSNumber)?.int64Value }
        func differ<T: Equatable>(_ name: String, _ got: T, _ want: T) {
            if got != want { diffs.append("\(name): got \(got), expected \(want)") }
        }
        differ("status", j["status"] as? String, status.rawValue)
        differ("productId", j["productId"] as? String, e.product)
        differ("expiresDate", int(j["expiresDate"]), e.expires.map(c.ms))
        differ("autoRenewStatus", int(j["autoRenewStatus"]), e.autoRenew.map(Int64.init))
        differ("customer", (j["customer"] as? [String: Any])?["id"] as? String, e.customer)
        differ("environment", j["environment"] as? String, env)
        differ("originalTransactionId", j["originalTransactionId"] as? String, otid)
        // The representation may not carry the revocation (then only the status says it).
        if j.keys.contains("revocationDate") { differ("revocationDate", int(j["revocationDate"]), e.revokedAt.map(c.ms)) }
        var entitledUntil: EpochMillis?? = nil
        for d in e.details {
            switch d {
            case .grace(let g): differ("gracePeriodExpiresDate", int(j["gracePeriodExpiresDate"]), g.map(c.ms))
            case .nextProduct(let p): differ("autoRenewProductId", j["autoRenewProductId"] as? String, p)
            case .transaction(let t): differ("latestTransactionId", j["latestTransactionId"] as? String, t)
            case .retry(let r): differ("isInBillingRetryPeriod", j["isInBillingRetryPeriod"] as? Bool, r)
            case .intent(let i): differ("expirationIntent", int(j["expirationIntent"]), i.map(Int64.init))
            case .entitledUntil(let u): entitledUntil = .some(u.map(c.ms))
            case .productType(let t): differ("productType", j["productType"] as? String, t)
            }
        }
        if let entitlements {
            guard entitlements.status == 200 else { return diffs + ["entitlements: expected 200, got \(entitlements.status)"] }
            let grants = entitlements.json["entitlements"] as? [[String: Any]] ?? []
            differ("entitlements", grants.compactMap { $0["entitlement"] as? String }.sorted(), e.entitlements.sorted())
            for g in grants where g["originalTransactionId"] as? String == otid {
                differ("entitlement environment", g["environment"] as? String, env)
                if let until = entitledUntil { differ("entitlement expiresDate", int(g["expiresDate"]), until) }
            }
        }
        return diffs
    }
}

// BEGIN DOCUMENTED SCENARIOS — this section is identical in Tests/LedgerCoreTests/DocumentedScenarioTests.swift
// and Tests/LedgerServiceTests/DocumentedScenarioTests.swift (the service suite compares them).

/// Subscription stories whose expected states were written by hand from the documentation —
/// `shared/seeds/001` (Apple: handling subscriptions), `003` (groups, notifications, grace), `004`
/// (auto_renew_status, expiration_intent), `000` (WeChat xpay iOS subscriptions),
/// `shared/reference/apple.md` §2.2–2.6 (status values, notification table, transaction and renewal
/// fields), `wechat.md` §2 — and from issue 9's definitions (the transaction in effect is the latest
/// purchased one not superseded by an upgrade; a transaction is revoked iff its latest REFUND/REVOKE
/// is signed later than its latest REFUND_REVERSED; renewal info ranks by its own signedDate;
/// `?at=T` = every fact known, each in effect from its business time; `?recordedAt=R` = only what was
/// recorded by R). Never from reading the fold.
///
/// Times are days from a base instant (`Clock`); the service suite puts `now` at the real clock.
enum Documented {
    static let bundleId = "com.example"
    static let appAppleId: Int64 = 1234
    static let monthly = "com.example.monthly"
    static let yearly = "com.example.yearly"
    static let premium = "com.example.premium.monthly"
    static let addon = "com.example.addon.monthly"
    static let lifetime = "com.example.lifetime"
    static let coins = "com.example.coins"
    static let vip = "vip_monthly"

    struct Clock {
        var base: EpochMillis
        func ms(_ day: Double) -> EpochMillis { base + EpochMillis((day * 86_400_000).rounded()) }
        func sec(_ day: Double) -> Int64 { ms(day) / 1000 }
    }

    /// A signed transaction (JWSTransaction). `original` defaults to the scenario's id.
    struct Tx {
        var id: String
        var product: String
        var purchase: Double
        var expires: Double?
        /// nil: signed with the notification.
        var signed: Double? = nil
        var type = "Auto-Renewable Subscription"
        var token: String? = nil
        var revoked: Double? = nil
        var revocationType: String? = nil
        var upgraded = false
        var ownership = "PURCHASED"
        var offerType: Int? = nil
        var offer: String? = nil
        var original: String? = nil
    }

    /// A signed renewal info (JWSRenewalInfo). `next` (autoRenewProductId) defaults to `product`.
    struct Renewal {
        var auto: Int
        var product: String
        var next: String? = nil
        /// nil: signed with the notification.
        var signed: Double? = nil
        var retry: Bool? = nil
        var grace: Double? = nil
        var intent: Int? = nil
        var renewalDate: Double? = nil
        var original: String? = nil
    }

    struct Apple {
        var type: String
        var subtype: String?
        var signed: Double
        var tx: Tx?
        var renewal: Renewal?
        var environment = "Production"
        var uuid: String
    }

    /// A WeChat push (wechat.md §2, seed 000 §4), decrypted.
    enum WeChat {
        case signing(signed: Double, renewal: Double, openId: String)
        /// `payInfo` false: no WeChatPayInfo (expected for Apple payments, wechat.md §2.2), so
        /// the payment time is only the push's CreateTime (`create`, default `paid`).
        case deliver(order: String, paid: Double, renewal: Double, openId: String, payInfo: Bool = true, create: Double? = nil)
        case unsigning(at: Double, renewal: Double, openId: String)
        /// `ok` false: a refund that did not succeed (RetCode ≠ 0, no success time).
        case refund(order: String, at: Double, openId: String, ok: Bool = true)

        func value(otid: String, clock c: Clock) -> JSONValue {
            func header(_ event: String, _ create: Double) -> [String: JSONValue] {
                ["ToUserName": .string("gh_97417a04a28d"), "FromUserName": .string("o_wechat_official"),
                 "CreateTime": .integer(c.sec(create)), "MsgType": .string("event"), "Event": .string(event)]
            }
            switch self {
            case .signing(let signed, let renewal, let openId):
                var o = header(XPayEventName.signingResult, signed)
                o["OpenId"] = .string(openId)
                o["Attach"] = .string("uid=1")
                o["AppleSubscriptionInfo"] = .object([
                    "OriginalTransactionId": .string(otid), "ProductId": .string(Documented.vip), "AutoRenewStatus": .integer(1),
                    "RenewalDate": .integer(c.ms(renewal)), "SignedTime": .integer(c.ms(signed))])
                return .object(o)
            case .deliver(let order, let paid, let renewal, let openId, let payInfo, let create):
                var o = header(XPayEventName.goodsDeliver, create ?? paid)
                o["OpenId"] = .string(openId)
                o["OutTradeNo"] = .string(order)
                o["Env"] = .integer(0)
                o["GoodsInfo"] = .object(["ProductId": .string(Documented.vip), "Quantity": .integer(1), "OrigPrice": .integer(3000),
                                          "ActualPrice": .integer(3000), "Attach": .string("uid=1")])
                if payInfo {
                    o["WeChatPayInfo"] = .object(["MchOrderNo": .string("mch-" + order), "TransactionId": .string("wxpay-" + order),
                                                  "PaidTime": .integer(c.sec(paid))])
                }
                o["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(otid), "AutoRenewStatus": .integer(1),
                                                      "RenewalDate": .integer(c.ms(renewal))])
                return .object(o)
            case .unsigning(let at, let renewal, let openId):
                var o = header(XPayEventName.unsigning, at)
                o["OpenId"] = .string(openId)
                o["Attach"] = .string("uid=1")
                o["Action"] = .string("unsubscribe")
                o["AppleSubscriptionInfo"] = .object([
                    "OriginalTransactionId": .string(otid), "ProductId": .string(Documented.vip), "AutoRenewStatus": .integer(0),
                    "RenewalDate": .integer(c.ms(renewal)), "UnsignedTime": .integer(c.ms(at))])
                return .object(o)
            case .refund(let order, let at, let openId, let ok):
                var o = header(XPayEventName.refundNotify, at)
                o["OpenId"] = .string(openId)
                o["WxRefundId"] = .string("wxrefund-" + order + (ok ? "" : "-failed"))
                o["MchRefundId"] = .string("")
                o["WxOrderId"] = .string("wx-" + order)
                o["MchOrderId"] = .string(order)
                o["RefundFee"] = .integer(3000)
                o["RetCode"] = .integer(ok ? 0 : 268_490_001)
                o["RetMsg"] = .string(ok ? "" : "refund failed")
                o["RefundStartTimestamp"] = .integer(c.sec(at) - 3600)
                o["RefundSuccTimestamp"] = .integer(ok ? c.sec(at) : 0)
                o["RetryTimes"] = .integer(0)
                return .object(o)
            }
        }
    }

    enum Body {
        case apple(Apple)
        case wechat(WeChat)
    }

    struct Message {
        var label: String
        var body: Body
    }

    /// Fields a check may add to the required ones.
    enum Detail {
        case grace(Double?)
        case nextProduct(String?)
        case transaction(String)
        case retry(Bool)
        case intent(Int?)
        /// Until when access lasts (the grace end in grace); entitlements carry it as expiresDate.
        case entitledUntil(Double?)
        case productType(String?)
    }

    /// The state expected at one time. `status` nil: no subscription is known then (404).
    /// `entitlements`: the names the customer holds in the check's environment, over all their
    /// subscriptions (the default catalog: each product grants its own productId).
    struct Expect {
        var status: SubscriptionStatus?
        var product: String?
        var expires: Double?
        var autoRenew: Int?
        var customer: String?
        var entitlements: [String]
        var revokedAt: Double?
        var details: [Detail] = []
    }

    struct Check {
        var at: Double
        /// `?recordedAt=`: only these messages had been recorded (the check's `at` is also asked,
        /// unless it is the scenario's `now`: then `recordedAt` alone, evaluated at R).
        var knownOnly: [String]? = nil
        var otid: String? = nil
        var environment: String? = nil
        /// The customer id as the app asks for entitlements (e.g. uppercase).
        var askAs: String? = nil
        var expect: Expect
    }

    struct Scenario {
        var name: String
        /// Where the expected behaviour is documented.
        var documented: String
        var story: String
        var otid: String
        var environment = "Production"
        /// The day the service suite maps to the real "now" (its un-parameterised answer is compared
        /// with the check at `now`).
        var now: Double
        var messages: [Message]
        var checks: [Check]
    }

    /// The notification, transaction and renewal info of one Apple message (consistent, as Apple signs them).
    static func appleModels(_ a: Apple, otid: String, clock c: Clock) -> (AppleNotification, AppleTransaction?, AppleRenewalInfo?) {
        var n = AppleNotification()
        n.notificationType = a.type
        n.subtype = a.subtype
        n.notificationUUID = a.uuid
        n.version = "2.0"
        n.signedDate = AppleTime(c.ms(a.signed))
        var d = AppleNotification.NotificationData()
        d.appAppleId = appAppleId
        d.bundleId = bundleId
        d.bundleVersion = "1"
        d.environment = a.environment
        n.data = d
        let tx = a.tx.map { s -> AppleTransaction in
            var t = AppleTransaction()
            t.transactionId = s.id
            t.originalTransactionId = s.original ?? otid
            t.webOrderLineItemId = s.type == "Auto-Renewable Subscription" ? "9" + s.id : nil
            t.bundleId = bundleId
            t.productId = s.product
            t.purchaseDate = AppleTime(c.ms(s.purchase))
            t.originalPurchaseDate = AppleTime(c.ms(0))
            t.expiresDate = s.expires.map { AppleTime(c.ms($0)) }
            t.quantity = 1
            t.type = s.type
            t.appAccountToken = s.token
            t.inAppOwnershipType = s.ownership
            t.signedDate = AppleTime(c.ms(s.signed ?? a.signed))
            t.revocationDate = s.revoked.map { AppleTime(c.ms($0)) }
            t.revocationReason = s.revoked == nil ? nil : 0
            t.revocationType = s.revoked == nil ? nil : (s.revocationType ?? "REFUND_FULL")
            t.isUpgraded = s.upgraded ? true : nil
            t.offerType = s.offerType
            t.offerIdentifier = s.offer
            t.environment = a.environment
            t.transactionReason = s.purchase == 0 ? "PURCHASE" : "RENEWAL"
            t.storefront = "USA"
            t.price = 9990
            t.currency = "USD"
            return t
        }
        let renewal = a.renewal.map { s -> AppleRenewalInfo in
            var r = AppleRenewalInfo()
            r.originalTransactionId = s.original ?? otid
            r.productId = s.product
            r.autoRenewProductId = s.next ?? s.product
            r.autoRenewStatus = s.auto
            r.expirationIntent = s.intent
            r.isInBillingRetryPeriod = s.retry
            r.gracePeriodExpiresDate = s.grace.map { AppleTime(c.ms($0)) }
            r.signedDate = AppleTime(c.ms(s.signed ?? a.signed))
            r.environment = a.environment
            r.recentSubscriptionStartDate = AppleTime(c.ms(0))
            r.renewalDate = (s.renewalDate ?? a.tx?.expires).map { AppleTime(c.ms($0)) }
            return r
        }
        return (n, tx, renewal)
    }

    // MARK: the table

    static func all() -> [Scenario] {
        var out: [Scenario] = []
        var scenarioNumber = 0
        /// Scenario n: originalTransactionId 71000000000000nn, customer token …00nn, uuids …nnmm.
        func ids() -> (otid: String, token: String) {
            scenarioNumber += 1
            let n = String(format: "%02d", scenarioNumber)
            return ("710000000000000" + n, "5eed0c0d-0000-4a00-8000-0000000000" + n)
        }
        func apple(_ label: String, _ type: String, _ subtype: String?, signed: Double, tx: Tx?, renewal: Renewal?,
                   environment: String = "Production") -> Message {
            let uuid = String(format: "d0c5ce0a-0000-4000-8000-%08d%04d", scenarioNumber, label.utf8.reduce(0) { ($0 &* 31 &+ Int($1)) % 10_000 })
            return Message(label: label, body: .apple(Apple(type: type, subtype: subtype, signed: signed, tx: tx, renewal: renewal,
                                                            environment: environment, uuid: uuid)))
        }
        func wechat(_ label: String, _ push: WeChat) -> Message { Message(label: label, body: .wechat(push)) }
        func expect(_ status: SubscriptionStatus?, _ product: String?, expires: Double?, auto: Int?, customer: String?,
                    _ entitlements: [String], revoked: Double? = nil, _ details: Detail...) -> Expect {
            Expect(status: status, product: product, expires: expires, autoRenew: auto, customer: customer,
                   entitlements: entitlements, revokedAt: revoked, details: details)
        }
        let M = monthly, Y = yearly, P = premium

        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "initial buy", documented: "apple.md §2.3 SUBSCRIBED/INITIAL_BUY: grant until tx.expiresDate; §2.2 status 1/2",
                story: "SUBSCRIBED/INITIAL_BUY signed day 0: monthly purchased day 0, expires day 30, auto-renew on.",
                otid: otid, now: 10,
                messages: [apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0,
                                 tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c), renewal: Renewal(auto: 1, product: M))],
                checks: [
                    Check(at: -1, expect: expect(nil, nil, expires: nil, auto: nil, customer: nil, [])),
                    Check(at: 10, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M], .transaction(otid), .entitledUntil(30),
                                                 .productType("Auto-Renewable Subscription"))),
                    Check(at: 31, expect: expect(.expired, M, expires: 30, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t2 = otid + "2"
            out.append(Scenario(
                name: "renewal", documented: "apple.md §2.3 DID_RENEW: extend to the new expiresDate; seed 001 (status at past dates)",
                story: "Bought day 0 (expires 30); DID_RENEW signed day 30: the renewal transaction runs day 30 → 60.",
                otid: otid, now: 45,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("renew", "DID_RENEW", nil, signed: 30, tx: Tx(id: t2, product: M, purchase: 30, expires: 60, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 15, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M], .transaction(otid))),
                    Check(at: 45, expect: expect(.active, M, expires: 60, auto: 1, customer: c, [M], .transaction(t2))),
                    Check(at: 61, expect: expect(.expired, M, expires: 60, auto: 1, customer: c, [])),
                    // Before the renewal was recorded the ledger knew a period that ended on day 30.
                    Check(at: 45, knownOnly: ["buy"], expect: expect(.expired, M, expires: 30, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let tx = Tx(id: otid, product: M, purchase: 0, expires: 30, token: c)
            out.append(Scenario(
                name: "auto-renew off, then expiry",
                documented: "apple.md §2.3 DID_CHANGE_RENEWAL_STATUS: no access change; EXPIRED/VOLUNTARY: revoke access; seed 004 (auto_renew_status 0 ≠ expired, CANCELED_BUT_ACTIVE; expiration_intent 1)",
                story: "Bought day 0 (expires 30); auto-renew turned off day 10; EXPIRED/VOLUNTARY signed day 30.",
                otid: otid, now: 40,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: tx, renewal: Renewal(auto: 1, product: M)),
                    apple("off", "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 10, tx: tx, renewal: Renewal(auto: 0, product: M)),
                    apple("expired", "EXPIRED", "VOLUNTARY", signed: 30, tx: tx, renewal: Renewal(auto: 0, product: M, intent: 1)),
                ],
                checks: [
                    Check(at: 5, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M])),
                    Check(at: 15, expect: expect(.active, M, expires: 30, auto: 0, customer: c, [M], .intent(nil))),
                    Check(at: 40, expect: expect(.expired, M, expires: 30, auto: 0, customer: c, [], .intent(1))),
                ]))
        }
        do {
            let (otid, c) = ids()
            let tx = Tx(id: otid, product: M, purchase: 0, expires: 30, token: c)
            out.append(Scenario(
                name: "billing retry without grace, then expiry",
                documented: "apple.md §2.2 status 3 BILLING_RETRY (not entitled); §2.3 DID_FAIL_TO_RENEW (no subtype): stop access; EXPIRED/BILLING_RETRY; seed 001 (retry up to 60 days)",
                story: "Bought day 0 (expires 30); DID_FAIL_TO_RENEW day 30 (retrying, intent 2); EXPIRED/BILLING_RETRY day 90.",
                otid: otid, now: 50,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: tx, renewal: Renewal(auto: 1, product: M)),
                    apple("fail", "DID_FAIL_TO_RENEW", nil, signed: 30, tx: tx, renewal: Renewal(auto: 1, product: M, retry: true, intent: 2)),
                    apple("expired", "EXPIRED", "BILLING_RETRY", signed: 90, tx: tx, renewal: Renewal(auto: 0, product: M, retry: false, intent: 2)),
                ],
                checks: [
                    Check(at: 20, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M], .retry(false))),
                    Check(at: 50, expect: expect(.billingRetry, M, expires: 30, auto: 1, customer: c, [], .retry(true), .intent(2))),
                    Check(at: 91, expect: expect(.expired, M, expires: 30, auto: 0, customer: c, [], .retry(false), .intent(2))),
                    // Without the EXPIRED message: Apple retries for at most 60 days (seed 001), so by day 91 it has expired.
                    Check(at: 89, knownOnly: ["buy", "fail"], expect: expect(.billingRetry, M, expires: 30, auto: 1, customer: c, [])),
                    Check(at: 91, knownOnly: ["buy", "fail"], expect: expect(.expired, M, expires: 30, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t1 = Tx(id: otid, product: M, purchase: 0, expires: 30, token: c)
            let t2 = otid + "2"
            out.append(Scenario(
                name: "grace period, then recovery",
                documented: "apple.md §2.2 status 4 (entitled until gracePeriodExpiresDate); §2.3 DID_FAIL_TO_RENEW/GRACE_PERIOD, DID_RENEW/BILLING_RECOVERY: clear retry/grace; seed 003 §三",
                story: "Bought day 0 (expires 30); billing fails day 30 with grace to day 46; recovered day 35: new period 35 → 65.",
                otid: otid, now: 40,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: t1, renewal: Renewal(auto: 1, product: M)),
                    apple("fail", "DID_FAIL_TO_RENEW", "GRACE_PERIOD", signed: 30, tx: t1,
                          renewal: Renewal(auto: 1, product: M, retry: true, grace: 46, intent: 2)),
                    apple("recover", "DID_RENEW", "BILLING_RECOVERY", signed: 35, tx: Tx(id: t2, product: M, purchase: 35, expires: 65, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 32, expect: expect(.gracePeriod, M, expires: 30, auto: 1, customer: c, [M], .grace(46), .entitledUntil(46), .retry(true))),
                    Check(at: 40, expect: expect(.active, M, expires: 65, auto: 1, customer: c, [M], .grace(nil), .retry(false), .intent(nil),
                                                 .transaction(t2), .entitledUntil(65))),
                    // Known before the recovery was recorded: in grace at R, then billing retry once grace ended.
                    Check(at: 40, knownOnly: ["buy", "fail"], expect: expect(.gracePeriod, M, expires: 30, auto: 1, customer: c, [M], .grace(46))),
                    Check(at: 47, knownOnly: ["buy", "fail"], expect: expect(.billingRetry, M, expires: 30, auto: 1, customer: c, [], .retry(true))),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t1 = Tx(id: otid, product: M, purchase: 0, expires: 30, token: c)
            out.append(Scenario(
                name: "grace period expired",
                documented: "apple.md §2.3 GRACE_PERIOD_EXPIRED: revoke access (→ status 3), retry continues; forum 735343",
                story: "Bought day 0 (expires 30); billing fails day 30 with grace to day 46; GRACE_PERIOD_EXPIRED day 46.",
                otid: otid, now: 50,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: t1, renewal: Renewal(auto: 1, product: M)),
                    apple("fail", "DID_FAIL_TO_RENEW", "GRACE_PERIOD", signed: 30, tx: t1,
                          renewal: Renewal(auto: 1, product: M, retry: true, grace: 46, intent: 2)),
                    apple("graceEnded", "GRACE_PERIOD_EXPIRED", nil, signed: 46, tx: t1,
                          renewal: Renewal(auto: 1, product: M, retry: true, grace: 46, intent: 2)),
                ],
                checks: [
                    Check(at: 40, expect: expect(.gracePeriod, M, expires: 30, auto: 1, customer: c, [M], .grace(46), .entitledUntil(46))),
                    Check(at: 50, expect: expect(.billingRetry, M, expires: 30, auto: 1, customer: c, [], .retry(true))),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t2 = otid + "2"
            out.append(Scenario(
                name: "upgrade is immediate",
                documented: "apple.md §2.3 DID_CHANGE_RENEWAL_PREF/UPGRADE: switch product now (old tx isUpgraded); seed 001 (升级立即生效); seed 003 §二",
                story: "Monthly bought day 0 (expires 30); upgraded to premium day 10 (new transaction 10 → 40); Apple later states the monthly transaction isUpgraded.",
                otid: otid, now: 20,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("upgrade", "DID_CHANGE_RENEWAL_PREF", "UPGRADE", signed: 10,
                          tx: Tx(id: t2, product: P, purchase: 10, expires: 40, token: c), renewal: Renewal(auto: 1, product: P)),
                    // The replaced transaction as Apple reports it after the upgrade (refund evidence about it).
                    apple("oldUpgraded", "REFUND_DECLINED", nil, signed: 12,
                          tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c, upgraded: true), renewal: Renewal(auto: 1, product: P)),
                ],
                checks: [
                    Check(at: 5, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M], .transaction(otid))),
                    Check(at: 20, expect: expect(.active, P, expires: 40, auto: 1, customer: c, [P], .transaction(t2))),
                    Check(at: 41, expect: expect(.expired, P, expires: 40, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t1 = Tx(id: otid, product: P, purchase: 0, expires: 30, token: c)
            let t2 = otid + "2"
            out.append(Scenario(
                name: "downgrade at the next renewal",
                documented: "apple.md §2.3 DID_CHANGE_RENEWAL_PREF/DOWNGRADE: only pending autoRenewProductId changes; seed 001 (降级在下一个续订日期生效)",
                story: "Premium bought day 0 (expires 30); downgrade to monthly chosen day 10; renewed day 30 into monthly (30 → 60).",
                otid: otid, now: 15,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: t1, renewal: Renewal(auto: 1, product: P)),
                    apple("downgrade", "DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", signed: 10, tx: t1, renewal: Renewal(auto: 1, product: P, next: M)),
                    apple("renew", "DID_RENEW", nil, signed: 30, tx: Tx(id: t2, product: M, purchase: 30, expires: 60, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 5, expect: expect(.active, P, expires: 30, auto: 1, customer: c, [P], .nextProduct(P))),
                    Check(at: 15, expect: expect(.active, P, expires: 30, auto: 1, customer: c, [P], .nextProduct(M))),
                    Check(at: 45, expect: expect(.active, M, expires: 60, auto: 1, customer: c, [M], .nextProduct(M), .transaction(t2))),
                ]))
        }
        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "refund of the current period revokes",
                documented: "apple.md §2.2 status 5 REVOKED; §2.3 REFUND: revoke what the tx granted (revocationDate); seed 001 (检测退款)",
                story: "Yearly bought day 0 (expires 365); REFUND signed day 22 with revocationDate day 20.",
                otid: otid, now: 25,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c),
                          renewal: Renewal(auto: 1, product: Y)),
                    apple("refund", "REFUND", nil, signed: 22, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c, revoked: 20),
                          renewal: Renewal(auto: 1, product: Y)),
                ],
                checks: [
                    Check(at: 19, expect: expect(.active, Y, expires: 365, auto: 1, customer: c, [Y])),
                    // As known now, the refund is in effect from its revocationDate, before Apple signed it.
                    Check(at: 21, expect: expect(.revoked, Y, expires: 365, auto: 1, customer: c, [], revoked: 20)),
                    Check(at: 25, expect: expect(.revoked, Y, expires: 365, auto: 1, customer: c, [], revoked: 20)),
                    Check(at: 25, knownOnly: ["buy"], expect: expect(.active, Y, expires: 365, auto: 1, customer: c, [Y])),
                    Check(at: 21, knownOnly: ["buy"], expect: expect(.active, Y, expires: 365, auto: 1, customer: c, [Y])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t2 = otid + "2"
            out.append(Scenario(
                name: "refund of an earlier period does not revoke",
                documented: "apple.md §2.3 REFUND revokes what *that* tx granted; issue 9 §3 (the transaction in effect decides)",
                story: "Bought day 0 (expires 30), renewed day 30 (→ 60); REFUND of the first period signed day 40 (revocationDate 38).",
                otid: otid, now: 45,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("renew", "DID_RENEW", nil, signed: 30, tx: Tx(id: t2, product: M, purchase: 30, expires: 60, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("refundFirst", "REFUND", nil, signed: 40, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c, revoked: 38),
                          renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 20, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M], .transaction(otid))),
                    Check(at: 45, expect: expect(.active, M, expires: 60, auto: 1, customer: c, [M], .transaction(t2))),
                    Check(at: 61, expect: expect(.expired, M, expires: 60, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "refund, then REFUND_REVERSED",
                documented: "apple.md §2.3 REFUND_REVERSED: reinstate what REFUND revoked; issue 9 §3 (revoked iff the refund is signed later than the reversal)",
                story: "Yearly bought day 0; REFUND signed day 20 (revocationDate 20); REFUND_REVERSED signed day 30.",
                otid: otid, now: 35,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c),
                          renewal: Renewal(auto: 1, product: Y)),
                    apple("refund", "REFUND", nil, signed: 20, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c, revoked: 20),
                          renewal: Renewal(auto: 1, product: Y)),
                    apple("reversed", "REFUND_REVERSED", nil, signed: 30, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c),
                          renewal: Renewal(auto: 1, product: Y)),
                ],
                checks: [
                    Check(at: 25, expect: expect(.revoked, Y, expires: 365, auto: 1, customer: c, [], revoked: 20)),
                    Check(at: 35, expect: expect(.active, Y, expires: 365, auto: 1, customer: c, [Y])),
                    Check(at: 35, knownOnly: ["buy", "refund"], expect: expect(.revoked, Y, expires: 365, auto: 1, customer: c, [], revoked: 20)),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t2 = otid + "2"
            out.append(Scenario(
                name: "refund, then resubscribe to monthly in the same group",
                documented: "apple.md §2.3 SUBSCRIBED/RESUBSCRIBE (same or other product in the group, same originalTransactionId): grant until tx.expiresDate; issue 9 §3 (latest purchase, not greatest expiresDate)",
                story: "Yearly bought day 0 (expires 365), refunded day 10; SUBSCRIBED/RESUBSCRIBE to monthly day 20 (20 → 50).",
                otid: otid, now: 25,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c),
                          renewal: Renewal(auto: 1, product: Y)),
                    apple("refund", "REFUND", nil, signed: 10, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c, revoked: 10),
                          renewal: Renewal(auto: 0, product: Y)),
                    apple("resubscribe", "SUBSCRIBED", "RESUBSCRIBE", signed: 20, tx: Tx(id: t2, product: M, purchase: 20, expires: 50, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 15, expect: expect(.revoked, Y, expires: 365, auto: 0, customer: c, [], revoked: 10)),
                    Check(at: 25, expect: expect(.active, M, expires: 50, auto: 1, customer: c, [M], .transaction(t2))),
                    Check(at: 51, expect: expect(.expired, M, expires: 50, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t1 = Tx(id: otid, product: M, purchase: 0, expires: 30, token: c)
            let t2 = otid + "2"
            out.append(Scenario(
                name: "renewal signed hours before its period",
                documented: "seed 001 (续订在到期前 24 小时内开始尝试; 跨级在下一个续订日期生效); issue 9 §3 (an early-signed renewal takes effect at its purchaseDate)",
                story: "Monthly bought day 0 (expires 30); crossgrade to yearly chosen day 5; the renewal is signed day 29.75 for the yearly period 30 → 395.",
                otid: otid, now: 29.9,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: t1, renewal: Renewal(auto: 1, product: M)),
                    apple("crossgrade", "DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", signed: 5, tx: t1, renewal: Renewal(auto: 1, product: M, next: Y)),
                    apple("earlyRenew", "DID_RENEW", nil, signed: 29.75, tx: Tx(id: t2, product: Y, purchase: 30, expires: 395, token: c),
                          renewal: Renewal(auto: 1, product: Y)),
                ],
                checks: [
                    Check(at: 29.9, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M], .transaction(otid), .nextProduct(Y))),
                    Check(at: 30.1, expect: expect(.active, Y, expires: 395, auto: 1, customer: c, [Y], .transaction(t2))),
                ]))
        }
        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "RENEWAL_EXTENDED",
                documented: "apple.md §2.3 RENEWAL_EXTENDED: move expiresDate",
                story: "Bought day 0 (expires 30); Apple extends the renewal date to day 37 (signed day 20).",
                otid: otid, now: 33,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("extended", "RENEWAL_EXTENDED", nil, signed: 20, tx: Tx(id: otid, product: M, purchase: 0, expires: 37, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 33, expect: expect(.active, M, expires: 37, auto: 1, customer: c, [M])),
                    Check(at: 38, expect: expect(.expired, M, expires: 37, auto: 1, customer: c, [])),
                    Check(at: 33, knownOnly: ["buy"], expect: expect(.expired, M, expires: 30, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "REVOKE of a family-shared subscription",
                documented: "apple.md §2.3 REVOKE: Family-Sharing entitlement withdrawn, revoke for the FAMILY_SHARED holder; §2.5 inAppOwnershipType, revocationType FAMILY_REVOKE",
                story: "A family member gets the shared monthly day 0 (expires 30); the purchaser stops sharing day 10.",
                otid: otid, now: 12,
                messages: [
                    apple("shared", "SUBSCRIBED", "INITIAL_BUY", signed: 0,
                          tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c, ownership: "FAMILY_SHARED"), renewal: Renewal(auto: 1, product: M)),
                    apple("revoke", "REVOKE", nil, signed: 10,
                          tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c, revoked: 10, revocationType: "FAMILY_REVOKE",
                                 ownership: "FAMILY_SHARED"), renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 5, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M])),
                    Check(at: 12, expect: expect(.revoked, M, expires: 30, auto: 1, customer: c, [], revoked: 10)),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t1 = Tx(id: otid, product: M, purchase: 0, expires: 30, token: c)
            let t2 = otid + "2"
            out.append(Scenario(
                name: "OFFER_REDEEMED after expiry",
                documented: "apple.md §2.3 OFFER_REDEEMED/RESUBSCRIBE: as the matching SUBSCRIBED case; §2.5 offerType 3 (offer code)",
                story: "Bought day 0, auto-renew off, EXPIRED/VOLUNTARY day 30; a win-back offer code redeemed day 50 (50 → 80).",
                otid: otid, now: 60,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: t1, renewal: Renewal(auto: 1, product: M)),
                    apple("expired", "EXPIRED", "VOLUNTARY", signed: 30, tx: t1, renewal: Renewal(auto: 0, product: M, intent: 1)),
                    apple("offer", "OFFER_REDEEMED", "RESUBSCRIBE", signed: 50,
                          tx: Tx(id: t2, product: M, purchase: 50, expires: 80, token: c, offerType: 3, offer: "COMEBACK"),
                          renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 40, expect: expect(.expired, M, expires: 30, auto: 0, customer: c, [], .intent(1))),
                    Check(at: 60, expect: expect(.active, M, expires: 80, auto: 1, customer: c, [M], .intent(nil), .transaction(t2))),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t1 = Tx(id: otid, product: M, purchase: 0, expires: 30, token: c)
            out.append(Scenario(
                name: "REFUND_DECLINED changes nothing",
                documented: "apple.md §2.3 REFUND_DECLINED: evidence only",
                story: "Bought day 0 (expires 30); a refund request is declined day 10.",
                otid: otid, now: 15,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: t1, renewal: Renewal(auto: 1, product: M)),
                    apple("declined", "REFUND_DECLINED", nil, signed: 10, tx: t1, renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 15, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M])),
                    Check(at: 31, expect: expect(.expired, M, expires: 30, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t1 = Tx(id: otid, product: M, purchase: 0, expires: 30, token: c)
            let t2 = otid + "2"
            out.append(Scenario(
                name: "same-instant ties",
                documented: "issue 9 §3 (revoked iff the refund is signed *later* than the reversal; the transaction in effect has purchaseDate ≤ T); apple.md §2.5 expiresDate (the period ends then)",
                story: "Bought day 0 (expires 30); a REFUND and its REFUND_REVERSED both signed at day 20 exactly; the renewal's period starts exactly at day 30 (→ 60).",
                otid: otid, now: 40,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: t1, renewal: Renewal(auto: 1, product: M)),
                    apple("refund", "REFUND", nil, signed: 20, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c, revoked: 20),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("reversed", "REFUND_REVERSED", nil, signed: 20, tx: t1, renewal: Renewal(auto: 1, product: M)),
                    apple("renew", "DID_RENEW", nil, signed: 30, tx: Tx(id: t2, product: M, purchase: 30, expires: 60, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                ],
                checks: [
                    Check(at: 20, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M], .transaction(otid))),
                    Check(at: 30, expect: expect(.active, M, expires: 60, auto: 1, customer: c, [M], .transaction(t2))),
                    Check(at: 40, expect: expect(.active, M, expires: 60, auto: 1, customer: c, [M])),
                    Check(at: 60, expect: expect(.expired, M, expires: 60, auto: 1, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t2 = otid + "2", t3 = otid + "3"
            out.append(Scenario(
                name: "newer renewal info on a message about an older transaction",
                documented: "apple.md §2.7 (per originalTransactionId keep the newest signedDate of renewal info); §2.6 gracePeriodExpiresDate; issue 9 §3 (renewal info by its own signedDate, from any notification, can clear fields)",
                story: "Bought day 0, renewed day 30 (→ 60); billing fails day 60 with grace to 76; recovered day 66 (66 → 96, grace cleared); a REFUND_DECLINED about the first transaction signed day 70 carries renewal info with auto-renew off.",
                otid: otid, now: 72,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("renew", "DID_RENEW", nil, signed: 30, tx: Tx(id: t2, product: M, purchase: 30, expires: 60, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("fail", "DID_FAIL_TO_RENEW", "GRACE_PERIOD", signed: 60, tx: Tx(id: t2, product: M, purchase: 30, expires: 60, token: c),
                          renewal: Renewal(auto: 1, product: M, retry: true, grace: 76, intent: 2)),
                    apple("recover", "DID_RENEW", "BILLING_RECOVERY", signed: 66, tx: Tx(id: t3, product: M, purchase: 66, expires: 96, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("declinedOld", "REFUND_DECLINED", nil, signed: 70, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 0, product: M, renewalDate: 96)),
                ],
                checks: [
                    Check(at: 62, expect: expect(.gracePeriod, M, expires: 60, auto: 1, customer: c, [M], .grace(76), .entitledUntil(76),
                                                 .retry(true), .intent(2), .transaction(t2))),
                    Check(at: 68, expect: expect(.active, M, expires: 96, auto: 1, customer: c, [M], .grace(nil), .retry(false), .intent(nil),
                                                 .transaction(t3))),
                    Check(at: 72, expect: expect(.active, M, expires: 96, auto: 0, customer: c, [M], .grace(nil), .transaction(t3))),
                ]))
        }
        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "Sandbox and Production with the same id are two subscriptions",
                documented: "apple.md §1.1 (a verifier is bound to one environment; handle them separately), §2.1 data.environment; issue 9 §7",
                story: "Production monthly bought day 0; a Sandbox (TestFlight) yearly with the same originalTransactionId and token bought day 0 and refunded day 5.",
                otid: otid, now: 10,
                messages: [
                    apple("production", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("sandbox", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c),
                          renewal: Renewal(auto: 1, product: Y), environment: "Sandbox"),
                    apple("sandboxRefund", "REFUND", nil, signed: 5, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c, revoked: 5),
                          renewal: Renewal(auto: 1, product: Y), environment: "Sandbox"),
                ],
                checks: [
                    Check(at: 10, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M])),
                    Check(at: 10, environment: "Sandbox", expect: expect(.revoked, Y, expires: 365, auto: 1, customer: c, [], revoked: 5)),
                    Check(at: 3, environment: "Sandbox", expect: expect(.active, Y, expires: 365, auto: 1, customer: c, [Y])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let t2 = otid + "2"
            out.append(Scenario(
                name: "upgrade, then the upgrade refunded",
                documented: "issue 9 §3 (if the transaction in effect is revoked the subscription is revoked: an older, unexpired period does not take over); apple.md §2.3 UPGRADE, REFUND",
                story: "Monthly bought day 0 (expires 30); upgraded to premium day 10 (10 → 40); the premium transaction refunded day 15.",
                otid: otid, now: 20,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("upgrade", "DID_CHANGE_RENEWAL_PREF", "UPGRADE", signed: 10,
                          tx: Tx(id: t2, product: P, purchase: 10, expires: 40, token: c), renewal: Renewal(auto: 1, product: P)),
                    apple("refund", "REFUND", nil, signed: 15, tx: Tx(id: t2, product: P, purchase: 10, expires: 40, token: c, revoked: 15),
                          renewal: Renewal(auto: 1, product: P)),
                ],
                checks: [
                    Check(at: 12, expect: expect(.active, P, expires: 40, auto: 1, customer: c, [P], .transaction(t2))),
                    Check(at: 20, expect: expect(.revoked, P, expires: 40, auto: 1, customer: c, [], revoked: 15, .transaction(t2))),
                ]))
        }
        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "a Sandbox purchase is no Production subscription",
                documented: "apple.md §1.1 (environments handled separately), §2.1 data.environment; issue 9 §7 (a Sandbox event never changes Production; Sandbox with ?environment=Sandbox)",
                story: "A TestFlight (Sandbox) monthly bought day 0 with a real customer's token; nothing in Production.",
                otid: otid, environment: "Sandbox", now: 5,
                messages: [
                    apple("sandbox", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M), environment: "Sandbox"),
                ],
                checks: [
                    Check(at: 5, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M])),
                    Check(at: 5, environment: "Production", expect: expect(nil, nil, expires: nil, auto: nil, customer: c, [])),
                ]))
        }
        do {
            let (otid, c) = ids()
            let other = "72" + otid.dropFirst(2)
            out.append(Scenario(
                name: "appAccountToken in any case names one customer",
                documented: "apple.md §2.5 appAccountToken (a UUID); issue 9 §8 (compared case-insensitively); Swift's uuidString is uppercase",
                story: "Monthly bought day 0 with the token in lowercase; an add-on of another group bought day 1 with the same token in uppercase; the app asks with the uppercase form.",
                otid: otid, now: 10,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("addon", "SUBSCRIBED", "INITIAL_BUY", signed: 1,
                          tx: Tx(id: other, product: addon, purchase: 1, expires: 31, token: c.uppercased(), original: other),
                          renewal: Renewal(auto: 1, product: addon, original: other)),
                ],
                checks: [
                    Check(at: 10, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M, addon])),
                    Check(at: 10, askAs: c.uppercased(), expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M, addon])),
                    Check(at: 10, otid: other, askAs: c.uppercased(), expect: expect(.active, addon, expires: 31, auto: 1, customer: c, [M, addon])),
                ]))
        }
        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "non-consumable: lifetime until refunded",
                documented: "apple.md §2.3 ONE_TIME_CHARGE: grant one-time entitlement; REFUND (any product type); issue 9 §3 (non-consumables grant a lifetime entitlement until refunded)",
                story: "A non-consumable bought day 0 (no expiry); refunded day 500.",
                otid: otid, now: 600,
                messages: [
                    apple("buy", "ONE_TIME_CHARGE", nil, signed: 0,
                          tx: Tx(id: otid, product: lifetime, purchase: 0, expires: nil, type: "Non-Consumable", token: c), renewal: nil),
                    apple("refund", "REFUND", nil, signed: 500,
                          tx: Tx(id: otid, product: lifetime, purchase: 0, expires: nil, type: "Non-Consumable", token: c, revoked: 500), renewal: nil),
                ],
                checks: [
                    Check(at: 400, expect: expect(.active, lifetime, expires: nil, auto: nil, customer: c, [lifetime], .productType("Non-Consumable"))),
                    Check(at: 600, expect: expect(.revoked, lifetime, expires: nil, auto: nil, customer: c, [], revoked: 500)),
                    Check(at: 600, knownOnly: ["buy"], expect: expect(.active, lifetime, expires: nil, auto: nil, customer: c, [lifetime])),
                ]))
        }
        do {
            let (otid, c) = ids()
            out.append(Scenario(
                name: "consumable: purchased, nothing lasting",
                documented: "apple.md §2.3 ONE_TIME_CHARGE (consumable); issue 9 §3 (consumables grant nothing lasting, never an expired subscription)",
                story: "100 coins bought day 0.",
                otid: otid, now: 5,
                messages: [
                    apple("buy", "ONE_TIME_CHARGE", nil, signed: 0,
                          tx: Tx(id: otid, product: coins, purchase: 0, expires: nil, type: "Consumable", token: c), renewal: nil),
                ],
                checks: [
                    Check(at: 5, expect: expect(.purchased, coins, expires: nil, auto: nil, customer: c, [], .productType("Consumable"))),
                    Check(at: 400, expect: expect(.purchased, coins, expires: nil, auto: nil, customer: c, [])),
                ]))
        }
        do {
            let (otid, _) = ids()
            let user = "oDocWeChat1"
            out.append(Scenario(
                name: "WeChat: sign, deliver, renew, unsign, refund of the renewal order",
                documented: "seed 000 §4.2–4.4 (signing, xpay_goods_deliver_notify per charge, unsigning: AutoRenewStatus 0, RenewalDate = end of the current period), §7.5 + wechat.md §2.4 (xpay_refund_notify RetCode 0 = Apple's final refund approval)",
                story: "Signed day 0 (→ 30) and order O1 paid day 0; renewal order O2 paid day 30 (→ 60); unsigned day 40; O2 refunded day 45.",
                otid: otid, now: 50,
                messages: [
                    wechat("sign", .signing(signed: 0, renewal: 30, openId: user)),
                    wechat("deliver1", .deliver(order: "\(otid)-O1", paid: 0, renewal: 30, openId: user)),
                    wechat("deliver2", .deliver(order: "\(otid)-O2", paid: 30, renewal: 60, openId: user)),
                    wechat("unsign", .unsigning(at: 40, renewal: 60, openId: user)),
                    wechat("refund2", .refund(order: "\(otid)-O2", at: 45, openId: user)),
                ],
                checks: [
                    Check(at: 10, expect: expect(.active, vip, expires: 30, auto: 1, customer: user, [vip])),
                    Check(at: 35, expect: expect(.active, vip, expires: 60, auto: 1, customer: user, [vip])),
                    Check(at: 42, expect: expect(.active, vip, expires: 60, auto: 0, customer: user, [vip])),
                    Check(at: 50, expect: expect(.revoked, vip, expires: 60, auto: 0, customer: user, [], revoked: 45)),
                    Check(at: 61, expect: expect(.revoked, vip, expires: 60, auto: 0, customer: user, [], revoked: 45)),
                ]))
        }
        do {
            let (otid, _) = ids()
            let user = "oDocWeChat2"
            out.append(Scenario(
                name: "WeChat: the refund arrives before its delivery",
                documented: "wechat.md §2.4 (the refund names only orders: MchOrderId, WxOrderId), §1.7 (re-pushes, late delivery); seed 000 §7.5",
                story: "Signed day 0 (→ 30), O1 paid day 0; the refund of O2 (day 45) reaches the ledger before O2's delivery (paid day 30, → 60).",
                otid: otid, now: 50,
                messages: [
                    wechat("sign", .signing(signed: 0, renewal: 30, openId: user)),
                    wechat("deliver1", .deliver(order: "\(otid)-O1", paid: 0, renewal: 30, openId: user)),
                    wechat("refund2", .refund(order: "\(otid)-O2", at: 45, openId: user)),
                    wechat("deliver2", .deliver(order: "\(otid)-O2", paid: 30, renewal: 60, openId: user)),
                ],
                checks: [
                    Check(at: 35, expect: expect(.active, vip, expires: 60, auto: 1, customer: user, [vip])),
                    Check(at: 50, expect: expect(.revoked, vip, expires: 60, auto: 1, customer: user, [], revoked: 45)),
                    // Before O2's delivery was recorded the refund named an order of nobody known.
                    Check(at: 50, knownOnly: ["sign", "deliver1", "refund2"],
                          expect: expect(.expired, vip, expires: 30, auto: 1, customer: user, [])),
                ]))
        }
        do {
            let (otid, _) = ids()
            let user = "oDocWeChat3"
            out.append(Scenario(
                name: "WeChat: a delivery re-pushed after unsigning does not turn auto-renew back on",
                documented: "wechat.md §1.7 (xpay re-pushes up to 15 times; CreateTime not stated stable), §2.2 (WeChatPayInfo may be absent for Apple payments); seed 000 §4.4 (unsigning: AutoRenewStatus 0)",
                story: "Signed day 0 (→ 30); O1 delivered day 0 without WeChatPayInfo; unsigned day 10; WeChat re-pushes O1's delivery on day 12 (new CreateTime, AutoRenewStatus 1 as at payment).",
                otid: otid, now: 15,
                messages: [
                    wechat("sign", .signing(signed: 0, renewal: 30, openId: user)),
                    wechat("deliver1", .deliver(order: "\(otid)-O1", paid: 0, renewal: 30, openId: user, payInfo: false)),
                    wechat("unsign", .unsigning(at: 10, renewal: 30, openId: user)),
                    wechat("repush1", .deliver(order: "\(otid)-O1", paid: 0, renewal: 30, openId: user, payInfo: false, create: 12)),
                ],
                checks: [
                    Check(at: 5, expect: expect(.active, vip, expires: 30, auto: 1, customer: user, [vip])),
                    Check(at: 15, expect: expect(.active, vip, expires: 30, auto: 0, customer: user, [vip])),
                    Check(at: 31, expect: expect(.expired, vip, expires: 30, auto: 0, customer: user, [])),
                    // Only the re-push reached the ledger (the original push is then a duplicate of
                    // its order and not stored): the signing still opened the period on day 0.
                    Check(at: 5, knownOnly: ["sign", "unsign", "repush1"],
                          expect: expect(.active, vip, expires: 30, auto: 1, customer: user, [vip])),
                    Check(at: 15, knownOnly: ["sign", "unsign", "repush1"],
                          expect: expect(.active, vip, expires: 30, auto: 0, customer: user, [vip])),
                ]))
        }
        do {
            let (otid, _) = ids()
            let user = "oDocWeChat4"
            out.append(Scenario(
                name: "WeChat: free trial, then the first charge; a failed refund changes nothing",
                documented: "seed 000 §2 (免费试用: 首开 0 元), §4.2 (signing opens the benefit), §4.3 (a delivery per successful charge); wechat.md §2.4 + §5 (a refund is final only on RetCode 0)",
                story: "Signed day 0 with a free week (RenewalDate day 7, no charge, no delivery); first charge O1 paid day 7 (→ 37); a refund of O1 fails on day 10.",
                otid: otid, now: 12,
                messages: [
                    wechat("sign", .signing(signed: 0, renewal: 7, openId: user)),
                    wechat("deliver1", .deliver(order: "\(otid)-O1", paid: 7, renewal: 37, openId: user)),
                    wechat("refundFailed", .refund(order: "\(otid)-O1", at: 10, openId: user, ok: false)),
                ],
                checks: [
                    Check(at: 3, expect: expect(.active, vip, expires: 7, auto: 1, customer: user, [vip], .entitledUntil(7))),
                    Check(at: 12, expect: expect(.active, vip, expires: 37, auto: 1, customer: user, [vip], .transaction("\(otid)-O1"))),
                    Check(at: 38, expect: expect(.expired, vip, expires: 37, auto: 1, customer: user, [])),
                ]))
        }
        do {
            let (otid, _) = ids()
            let user = "oDocWeChat5"
            out.append(Scenario(
                name: "WeChat: unsigned, lapsed, signed again",
                documented: "seed 000 Step 3 (after unsigning, a new signing only once the current period has ended), §4.2 (OriginalTransactionId stays the same for the account and product)",
                story: "Signed day 0, O1 paid day 0 (→ 30), unsigned day 10; lapsed day 30; signed again day 40 with O2 paid day 40 (→ 70).",
                otid: otid, now: 45,
                messages: [
                    wechat("sign", .signing(signed: 0, renewal: 30, openId: user)),
                    wechat("deliver1", .deliver(order: "\(otid)-O1", paid: 0, renewal: 30, openId: user)),
                    wechat("unsign", .unsigning(at: 10, renewal: 30, openId: user)),
                    wechat("sign2", .signing(signed: 40, renewal: 70, openId: user)),
                    wechat("deliver2", .deliver(order: "\(otid)-O2", paid: 40, renewal: 70, openId: user)),
                ],
                checks: [
                    Check(at: 20, expect: expect(.active, vip, expires: 30, auto: 0, customer: user, [vip])),
                    Check(at: 35, expect: expect(.expired, vip, expires: 30, auto: 0, customer: user, [])),
                    Check(at: 45, expect: expect(.active, vip, expires: 70, auto: 1, customer: user, [vip], .transaction("\(otid)-O2"))),
                ]))
        }
        do {
            // Issue 20 rule 1.
            let (otid, c) = ids()
            out.append(Scenario(
                name: "lost REFUND, read from the next notification's transaction",
                documented: "developer.apple.com/documentation/appstoreservernotifications/revocationdate (\"the App Store refunded the transaction or revoked it\"); forum 757986 (look for the revocation fields' presence in the signed transaction); issue 20 rule 1",
                story: "Yearly bought day 0 (expires 365); the REFUND (revocationDate 20) never arrives; DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED signed day 25 carries the transaction with revocationDate 20.",
                otid: otid, now: 30,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c),
                          renewal: Renewal(auto: 1, product: Y)),
                    apple("off", "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 25,
                          tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c, revoked: 20), renewal: Renewal(auto: 0, product: Y)),
                ],
                checks: [
                    Check(at: 15, expect: expect(.active, Y, expires: 365, auto: 1, customer: c, [Y])),
                    Check(at: 22, expect: expect(.revoked, Y, expires: 365, auto: 1, customer: c, [], revoked: 20)),
                    Check(at: 30, expect: expect(.revoked, Y, expires: 365, auto: 0, customer: c, [], revoked: 20)),
                    Check(at: 30, knownOnly: ["buy"], expect: expect(.active, Y, expires: 365, auto: 1, customer: c, [Y])),
                ]))
        }
        do {
            // Issue 20 rule 1, the guard.
            let (otid, c) = ids()
            out.append(Scenario(
                name: "an older snapshot delivered late cannot undo a newer refund",
                documented: "apple.md §2.3 REFUND; issue 9 §3 (revoked iff the refund is signed later than the reversal); issue 20 rule 1 (an older snapshot, by signedDate, cannot undo a newer refund)",
                story: "Yearly bought day 0; auto-renew turned off day 10 (its transaction not revoked then); REFUND signed day 20 (revocationDate 20); the day-10 notification is delivered last.",
                otid: otid, now: 30,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c),
                          renewal: Renewal(auto: 1, product: Y)),
                    apple("refund", "REFUND", nil, signed: 20, tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c, revoked: 20),
                          renewal: Renewal(auto: 0, product: Y)),
                    apple("offLate", "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 10,
                          tx: Tx(id: otid, product: Y, purchase: 0, expires: 365, token: c), renewal: Renewal(auto: 0, product: Y)),
                ],
                checks: [
                    Check(at: 5, expect: expect(.active, Y, expires: 365, auto: 1, customer: c, [Y])),
                    Check(at: 15, expect: expect(.active, Y, expires: 365, auto: 0, customer: c, [Y])),
                    Check(at: 30, expect: expect(.revoked, Y, expires: 365, auto: 0, customer: c, [], revoked: 20)),
                ]))
        }
        do {
            // Issue 20 rule 2.
            let (otid, c) = ids()
            let renewal = otid + "2", upgrade = otid + "3"
            out.append(Scenario(
                name: "upgrade inside the pre-charge window",
                documented: "seed 001 (Apple renews within the 24 hours before expiry); apple.md §2.3 DID_CHANGE_RENEWAL_PREF/UPGRADE (takes effect immediately); issue 20 rule 2",
                story: "Monthly bought day 0 (expires 30); Apple charges the renewal day 29.5 (period 30 → 60); the customer upgrades to premium day 29.75 (29.75 → 59.75).",
                otid: otid, now: 35,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("preCharged", "DID_RENEW", nil, signed: 29.5, tx: Tx(id: renewal, product: M, purchase: 30, expires: 60, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("upgrade", "DID_CHANGE_RENEWAL_PREF", "UPGRADE", signed: 29.75,
                          tx: Tx(id: upgrade, product: P, purchase: 29.75, expires: 59.75, token: c), renewal: Renewal(auto: 1, product: P)),
                ],
                checks: [
                    Check(at: 10, expect: expect(.active, M, expires: 30, auto: 1, customer: c, [M], .transaction(otid))),
                    Check(at: 29.8, expect: expect(.active, P, expires: 59.75, auto: 1, customer: c, [P], .transaction(upgrade))),
                    Check(at: 35, expect: expect(.active, P, expires: 59.75, auto: 1, customer: c, [P], .transaction(upgrade))),
                    Check(at: 59, expect: expect(.active, P, expires: 59.75, auto: 1, customer: c, [P], .transaction(upgrade))),
                ]))
        }
        do {
            // Issue 20 rule 2, `?at=`.
            let (otid, c) = ids()
            let t2 = otid + "2", t3 = otid + "3"
            out.append(Scenario(
                name: "?at= inside a period later upgraded",
                documented: "apple.md §2.3 DID_CHANGE_RENEWAL_PREF/UPGRADE (the replaced transaction isUpgraded); issue 20 rule 2 (`?at=` inside a superseded period answers the period in effect then)",
                story: "Monthly bought day 0 (→ 30), renewed day 30 (→ 60); upgraded to premium day 40 (40 → 70); Apple later states the renewal isUpgraded.",
                otid: otid, now: 45,
                messages: [
                    apple("buy", "SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: Tx(id: otid, product: M, purchase: 0, expires: 30, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("renew", "DID_RENEW", nil, signed: 30, tx: Tx(id: t2, product: M, purchase: 30, expires: 60, token: c),
                          renewal: Renewal(auto: 1, product: M)),
                    apple("upgrade", "DID_CHANGE_RENEWAL_PREF", "UPGRADE", signed: 40,
                          tx: Tx(id: t3, product: P, purchase: 40, expires: 70, token: c), renewal: Renewal(auto: 1, product: P)),
                    apple("renewalUpgraded", "REFUND_DECLINED", nil, signed: 42,
                          tx: Tx(id: t2, product: M, purchase: 30, expires: 60, token: c, upgraded: true), renewal: Renewal(auto: 1, product: P)),
                ],
                checks: [
                    Check(at: 35, expect: expect(.active, M, expires: 60, auto: 1, customer: c, [M], .transaction(t2))),
                    Check(at: 45, expect: expect(.active, P, expires: 70, auto: 1, customer: c, [P], .transaction(t3))),
                ]))
        }
        return out
    }
}

// END DOCUMENTED SCENARIOS

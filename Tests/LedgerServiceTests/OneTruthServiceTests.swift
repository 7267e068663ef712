import Foundation
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import Postgres
import XCTest

/// Issue "One truth" through the real service: environments kept apart, the default catalog,
/// catalogs on record for `?recordedAt=`, customer ties, bitemporal questions.
final class OneTruthServiceTests: XCTestCase {
    let day: EpochMillis = 86_400_000

    /// A purchase signed `daysAgo` days ago lasting `days` days.
    func purchase(_ h: ServiceHarness, otid: String, environment: String, token: String?, product: String = "com.example.monthly",
                  signed: EpochMillis, days: EpochMillis = 30) throws -> Data {
        var s = AppleTestAuthority.sample(environment: environment, originalTransactionId: otid, signedDate: signed,
                                          expiresDate: signed + days * day)
        s.transaction.appAccountToken = token
        s.transaction.productId = product
        s.renewal.productId = product
        s.renewal.autoRenewProductId = product
        return try h.authority.signSample(s)
    }

    func testSandboxAndProductionWithOneIdAreTwoSubscriptions() async throws {
        try await withService { h in
            let now = LedgerApp.nowMillis()
            let token = "6F0C1B2A-0000-4000-8000-00000000AAAA"  // uppercase: Apple sends lowercase
            let prod = try purchase(h, otid: "7000000000000001", environment: "Production", token: token.lowercased(), signed: now - day)
            let sandbox = try purchase(h, otid: "7000000000000001", environment: "Sandbox", token: token, product: "com.example.yearly",
                                       signed: now - day, days: 365)
            for body in [sandbox, prod] {
                let a = try await h.post("/v1/apple/notifications", body)
                XCTAssertEqual(a.status, 200, a.text)
            }
            let p = try await h.request("GET", "/v1/subscriptions/7000000000000001", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(p.status, 200, p.text)
            XCTAssertEqual(p.json["environment"] as? String, "Production")
            XCTAssertEqual(p.json["productId"] as? String, "com.example.monthly", "a Sandbox event never changes a Production subscription")
            let s = try await h.request("GET", "/v1/subscriptions/7000000000000001?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(s.json["environment"] as? String, "Sandbox")
            XCTAssertEqual(s.json["productId"] as? String, "com.example.yearly")

            // The customer asked for in uppercase is the same customer (UUIDs compare case-insensitively).
            let ents = try await h.request("GET", "/v1/customers/\(token)/entitlements", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(ents.status, 200, ents.text)
            XCTAssertEqual(ents.json["customerId"] as? String, token.lowercased())
            let list = ents.json["entitlements"] as? [[String: Any]] ?? []
            XCTAssertEqual(list.map { $0["entitlement"] as? String }, ["com.example.monthly"],
                           "Production only by default, and the default catalog names the entitlement after the product: \(ents.text)")
            XCTAssertEqual(list.first?["environment"] as? String, "Production")
            let sandboxEnts = try await h.request("GET", "/v1/customers/\(token)/entitlements?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
            let sandboxList = sandboxEnts.json["entitlements"] as? [[String: Any]] ?? []
            XCTAssertEqual(sandboxList.map { $0["entitlement"] as? String }, ["com.example.yearly"])
            XCTAssertEqual(sandboxList.first?["environment"] as? String, "Sandbox")

            // Events of the stream are filtered by environment too.
            let events = try await h.request("GET", "/v1/subscriptions/7000000000000001/events?environment=Sandbox", token: "auditor-token-for-tests-0123456789abcdef")
            let stored = events.json["events"] as? [[String: Any]] ?? []
            XCTAssertEqual(stored.count, 1)
            XCTAssertEqual((stored.first?["facts"] as? [[String: Any]])?.first?["subscription"] as? String, "Sandbox:7000000000000001")

            let ready = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            let catalog = ready.json["catalog"] as? [String: Any]
            XCTAssertEqual(catalog?["default"] as? Bool, true, ready.text)
            XCTAssertNotNil(catalog?["note"])
        }
    }

    func testCatalogsAreRecordedAndRecordedAtUsesTheCatalogOfItsTime() async throws {
        let first = #"{"products": {"com.example.monthly": {"entitlements": ["basic"]}}}"#
        let second = #"{"products": {"com.example.monthly": {"entitlements": ["basic", "extra"]}}}"#
        let database = try TestDatabase.create()
        defer { try? database.drop() }
        let token = "6f0c1b2a-0000-4000-8000-00000000bbbb"
        var recordedBetween: EpochMillis = 0
        try await withService(environment: ["LEDGER_DATABASE_URL": database.serviceConninfo], configJSON: first) { h in
            let recorded = try await h.app.recordCatalogIfChanged()
            XCTAssertTrue(recorded)
            let again = try await h.app.recordCatalogIfChanged()
            XCTAssertFalse(again, "the same catalog is recorded once")
            let a = try await h.post("/v1/apple/notifications",
                                     purchase(h, otid: "7000000000000002", environment: "Production", token: token,
                                              signed: LedgerApp.nowMillis() - day))
            XCTAssertEqual(a.status, 200, a.text)
            try await Task.sleep(for: .milliseconds(20))
            recordedBetween = LedgerApp.nowMillis()
            try await Task.sleep(for: .milliseconds(20))
        }
        try await withService(environment: ["LEDGER_DATABASE_URL": database.serviceConninfo], configJSON: second) { h in
            let recorded = try await h.app.recordCatalogIfChanged()
            XCTAssertTrue(recorded, "a different catalog is recorded")
            let ready = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertNil((ready.json["catalog"] as? [String: Any])?["mismatch"], ready.text)
            // Live tables use the current catalog once rebuilt; the recorded one answers for its time.
            let rebuilt = try await h.request("POST", "/v1/admin/rebuild", body: Data("{}".utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(rebuilt.status, 200, rebuilt.text)
            let now = try await h.request("GET", "/v1/customers/\(token)/entitlements", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(Set((now.json["entitlements"] as? [[String: Any]] ?? []).compactMap { $0["entitlement"] as? String }),
                           ["basic", "extra"], now.text)
            let then = try await h.request("GET", "/v1/customers/\(token)/entitlements?recordedAt=\(recordedBetween)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual((then.json["entitlements"] as? [[String: Any]] ?? []).compactMap { $0["entitlement"] as? String },
                           ["basic"], "what the ledger knew then, under the catalog of then: \(then.text)")
            let catalogEvents = try database.connect().query(
                "SELECT type FROM events WHERE stream_id = $1 ORDER BY position", [.text(StreamId.ledgerConfig.text)])
                .rows.map { try $0.decode(String.self, "type") }
            XCTAssertEqual(catalogEvents, [LedgerEventType.catalog, LedgerEventType.catalog])
        }
        // An instance still running the first catalog says so.
        try await withService(environment: ["LEDGER_DATABASE_URL": database.serviceConninfo], configJSON: first) { h in
            let ready = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertNotNil((ready.json["catalog"] as? [String: Any])?["mismatch"], ready.text)
            // An active product the catalog does not list is counted.
            let b = try await h.post("/v1/apple/notifications",
                                     purchase(h, otid: "7000000000000003", environment: "Production", token: token,
                                              product: "com.example.unlisted", signed: LedgerApp.nowMillis() - day))
            XCTAssertEqual(b.status, 200, b.text)
            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertTrue(metrics.text.contains("ledger_unmapped_products 1"), metrics.text)
        }
    }

    func testExplicitTiesWinOverTokensAndAreRecordedWithTheirRequester() async throws {
        try await withService { h in
            let now = LedgerApp.nowMillis()
            let untokened = try purchase(h, otid: "7000000000000010", environment: "Production", token: nil, signed: now - day)
            let tokened = try purchase(h, otid: "7000000000000011", environment: "Production",
                                       token: "6f0c1b2a-0000-4000-8000-00000000cccc", signed: now - day)
            for body in [untokened, tokened] {
                let a = try await h.post("/v1/apple/notifications", body)
                XCTAssertEqual(a.status, 200, a.text)
            }
            func entitlements(_ customer: String) async throws -> [String] {
                let a = try await h.request("GET", "/v1/customers/\(customer)/entitlements", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 200, a.text)
                return (a.json["entitlements"] as? [[String: Any]] ?? []).compactMap { $0["originalTransactionId"] as? String }
            }
            let got1 = try await entitlements("user-42")
            XCTAssertEqual(got1, [])

            let tie = try await h.request("POST", "/v1/customers/user-42/subscriptions",
                                          body: Data(#"{"originalTransactionId": "7000000000000010"}"#.utf8), token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(tie.status, 200, tie.text)
            XCTAssertEqual(tie.json["status"] as? String, "tied")
            XCTAssertEqual(((tie.json["subscription"] as? [String: Any])?["customer"] as? [String: Any])?["source"] as? String, "tie")
            let got2 = try await entitlements("user-42")
            XCTAssertEqual(got2, ["7000000000000010"])
            // The same tie again (a retry, an app's loop) is answered as it stands and records nothing.
            let tiedBefore = try h.events(stream: "7000000000000010").filter { $0.type.hasPrefix("customer/") }.count
            for _ in 0..<3 {
                let again = try await h.request("POST", "/v1/customers/user-42/subscriptions",
                                                body: Data(#"{"originalTransactionId": "7000000000000010"}"#.utf8), token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(again.status, 200, again.text)
                XCTAssertEqual(again.json["status"] as? String, "tied")
                XCTAssertEqual((again.json["position"] as? NSNumber)?.int64Value, (tie.json["position"] as? NSNumber)?.int64Value,
                               "the answer names the tie in force")
            }
            XCTAssertEqual(try h.events(stream: "7000000000000010").filter { $0.type.hasPrefix("customer/") }.count, tiedBefore)

            // A tie over a token naming someone else wins, and the answer says so.
            let over = try await h.request("POST", "/v1/customers/user-42/subscriptions",
                                           body: Data(#"{"originalTransactionId": "7000000000000011", "environment": "Production"}"#.utf8),
                                           token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(over.status, 200, over.text)
            let state = try await h.request("GET", "/v1/subscriptions/7000000000000011", token: "app-token-for-tests-0123456789abcdef")
            let customer = state.json["customer"] as? [String: Any]
            XCTAssertEqual(customer?["id"] as? String, "user-42")
            XCTAssertEqual(customer?["overrides"] as? String, "6f0c1b2a-0000-4000-8000-00000000cccc", state.text)
            let got3 = try await entitlements("user-42")
            XCTAssertEqual(got3, ["7000000000000010", "7000000000000011"])
            let got4 = try await entitlements("6f0c1b2a-0000-4000-8000-00000000cccc")
            XCTAssertEqual(got4, [])

            // Only the tied customer can untie; then the token counts again.
            let wrong = try await h.request("DELETE", "/v1/customers/someone-else/subscriptions/7000000000000011", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(wrong.status, 404, wrong.text)
            let untie = try await h.request("DELETE", "/v1/customers/user-42/subscriptions/7000000000000011", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(untie.status, 200, untie.text)
            let got5 = try await entitlements("6f0c1b2a-0000-4000-8000-00000000cccc")
            XCTAssertEqual(got5, ["7000000000000011"])
            let got6 = try await entitlements("user-42")
            XCTAssertEqual(got6, ["7000000000000010"])

            let recorded = try h.events(stream: "7000000000000011").filter { $0.type.hasPrefix("customer/") }
            XCTAssertEqual(recorded.map(\.type), [LedgerEventType.customerTied, LedgerEventType.customerUntied])
            let raw = String(decoding: recorded[0].raw, as: UTF8.self)
            XCTAssertTrue(raw.contains("\"role\":\"app\""), raw)
            XCTAssertFalse(raw.contains("app-token-for-tests-0123456789abcdef"), "the token itself is never recorded")

            // Hostile inputs: nothing stored.
            let before = try h.eventCount()
            for body in [#"{"originalTransactionId": "ledger:admin"}"#, #"{"originalTransactionId": 7000000000000010}"#,
                         #"{"originalTransactionId": "7000000000000010", "environment": "PROD"}"#, "[]", "not json", ""] {
                let a = try await h.request("POST", "/v1/customers/user-42/subscriptions", body: Data(body.utf8), token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 400, body)
                XCTAssertNotNil(a.errorCode)
            }
            let forbidden = try await h.request("POST", "/v1/customers/user-42/subscriptions",
                                                body: Data(#"{"originalTransactionId": "7000000000000010"}"#.utf8))
            XCTAssertEqual(forbidden.status, 401)
            XCTAssertEqual(try h.eventCount(), before)
        }
    }

    /// A loop of ties and unties on one subscription stops at the day's cap with 429, Retry-After
    /// and a message naming the setting; nothing more is recorded; other subscriptions tie as usual,
    /// and repeating the tie in force stays free.
    func testTiesPerSubscriptionPerDayAreCapped() async throws {
        try await withService(configure: { $0.limits.tiesPerSubscriptionPerDay = 4 }) { h in
            let now = LedgerApp.nowMillis()
            let token = "app-token-for-tests-0123456789abcdef"
            for otid in ["7000000000000020", "7000000000000021"] {
                let a = try await h.post("/v1/apple/notifications", try purchase(h, otid: otid, environment: "Production", token: nil, signed: now - day))
                XCTAssertEqual(a.status, 200, a.text)
            }
            let tieBody = Data(#"{"originalTransactionId": "7000000000000020"}"#.utf8)
            for _ in 0..<2 {
                let tie = try await h.request("POST", "/v1/customers/loop/subscriptions", body: tieBody, token: token)
                XCTAssertEqual(tie.status, 200, tie.text)
                let untie = try await h.request("DELETE", "/v1/customers/loop/subscriptions/7000000000000020", token: token)
                XCTAssertEqual(untie.status, 200, untie.text)
            }
            let recorded = try h.events(stream: "7000000000000020").filter { $0.type.hasPrefix("customer/") }.count
            XCTAssertEqual(recorded, 4)
            let refused = try await h.request("POST", "/v1/customers/loop/subscriptions", body: tieBody, token: token)
            XCTAssertEqual(refused.status, 429, refused.text)
            XCTAssertEqual(refused.errorCode, "too_many_ties")
            XCTAssertTrue((refused.json["message"] as? String ?? "").contains("LEDGER_TIES_PER_SUBSCRIPTION_PER_DAY"), refused.text)
            let retryAfter = Int(refused.headers["retry-after"] ?? "") ?? 0
            XCTAssertTrue((86_000...86_400).contains(retryAfter), "the oldest of the day's ties leaves the window in about a day: \(retryAfter)")
            XCTAssertEqual(try h.events(stream: "7000000000000020").filter { $0.type.hasPrefix("customer/") }.count, recorded, "nothing recorded")
            // Another subscription is not held by this one's loop.
            let other = try await h.request("POST", "/v1/customers/loop/subscriptions",
                                            body: Data(#"{"originalTransactionId": "7000000000000021"}"#.utf8), token: token)
            XCTAssertEqual(other.status, 200, other.text)
            // The tie in force may be asked again at any rate: it records nothing.
            let again = try await h.request("POST", "/v1/customers/loop/subscriptions",
                                            body: Data(#"{"originalTransactionId": "7000000000000021"}"#.utf8), token: token)
            XCTAssertEqual(again.status, 200, again.text)
        }
    }

    func testBitemporalQuestions() async throws {
        try await withService { h in
            let t0: EpochMillis = 1_767_225_600_000
            var buy = AppleTestAuthority.sample(environment: "Production", originalTransactionId: "7000000000000020", signedDate: t0,
                                                expiresDate: t0 + 30 * day)
            buy.transaction.appAccountToken = "6f0c1b2a-0000-4000-8000-00000000dddd"
            let a = try await h.post("/v1/apple/notifications", h.authority.signSample(buy))
            XCTAssertEqual(a.status, 200)
            let afterBuy = LedgerApp.nowMillis()
            try await Task.sleep(for: .milliseconds(20))
            var refund = buy
            refund.notification.notificationType = "REFUND"
            refund.notification.subtype = nil
            refund.notification.notificationUUID = UUID().uuidString.lowercased()
            refund.notification.signedDate = AppleTime(t0 + 10 * day)
            refund.transaction.signedDate = AppleTime(t0 + 10 * day)
            refund.transaction.revocationDate = AppleTime(t0 + 10 * day)
            let b = try await h.post("/v1/apple/notifications", h.authority.signSample(refund))
            XCTAssertEqual(b.status, 200)
            let path = "/v1/subscriptions/7000000000000020"
            // What was true on day 15 as known now: revoked since day 10.
            let known = try await h.request("GET", path + "?at=\(t0 + 15 * day)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(known.json["status"] as? String, "revoked", known.text)
            // What was true on day 15 as the ledger knew it before the refund arrived: active.
            let then = try await h.request("GET", path + "?at=\(t0 + 15 * day)&recordedAt=\(afterBuy)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(then.json["status"] as? String, "active", then.text)
            // Day 5, as known now: the refund took effect on day 10, so still active then.
            let before = try await h.request("GET", path + "?at=\(t0 + 5 * day)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(before.json["status"] as? String, "active", before.text)
        }
    }
}

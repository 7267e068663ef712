import AppStore
import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Postgres
import XCTest

/// The Apple webhooks over a real socket against real PostgreSQL: 200 only after the commit,
/// duplicates stored once, and every hostile body refused with its status and reason and
/// nothing stored.
final class AppleWebhookTests: XCTestCase {
    func testStoresOnceAndAnswersDuplicatesWith200() async throws {
        try await withService { h in
            let body = try h.authority.signSample(AppleTestAuthority.sample(originalTransactionId: "7000000000000001"))
            let first = try await h.post("/v1/apple/notifications", body)
            XCTAssertEqual(first.status, 200, first.text)
            XCTAssertEqual(first.json["status"] as? String, "stored")
            let again = try await h.post("/v1/apple/notifications", body)
            XCTAssertEqual(again.status, 200)
            XCTAssertEqual(again.json["status"] as? String, "duplicate")
            XCTAssertEqual(again.json["position"] as? Int, first.json["position"] as? Int)
            let stored = try h.events(stream: "7000000000000001")
            XCTAssertEqual(stored.count, 1)
            XCTAssertEqual(stored[0].raw, body, "raw must be the exact bytes received")
            XCTAssertEqual(stored[0].type, "SUBSCRIBED/INITIAL_BUY")
        }
    }

    func testTwentyConcurrentPostsOfOneNotificationStoreOneEvent() async throws {
        try await withService { h in
            let body = try h.authority.signSample(AppleTestAuthority.sample(originalTransactionId: "7000000000000002"))
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<20 { group.addTask { try await h.post("/v1/apple/notifications", body).status } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            XCTAssertEqual(statuses, Array(repeating: 200, count: 20))
            XCTAssertEqual(try h.eventCount(), 1)
        }
    }

    func testTestNotificationGoesToItsDocumentedStream() async throws {
        try await withService { h in
            var n = AppleTestAuthority.sample().notification
            n.notificationType = "TEST"
            n.subtype = nil
            let answer = try await h.post("/v1/apple/notifications", try h.authority.signNotification(n))
            XCTAssertEqual(answer.status, 200, answer.text)
            XCTAssertEqual(try h.events(stream: StreamId.appleTest.text).count, 1)
        }
    }

    func testV1WithTheSharedSecretIsStoredWithoutIt() async throws {
        try await withService { h in
            let answer = try await h.post("/v1/apple/notifications/v1", Self.v1Body(password: "v1-shared-secret"))
            XCTAssertEqual(answer.status, 200, answer.text)
            let stored = try h.events(stream: "1000000000000001")
            XCTAssertEqual(stored.count, 1)
            XCTAssertFalse(String(decoding: stored[0].raw, as: UTF8.self).contains("v1-shared-secret"))
            XCTAssertEqual(try h.payloadKeys(stream: "1000000000000001"), ["responseBodyV1"])
        }
    }

    /// A V1 notification answered "stored" is projected: the subscription it is about answers
    /// its state (it used to be 404), in Production for V1's `PROD`.
    func testV1IsProjected() async throws {
        try await withService { h in
            let body = Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: Self.bRenewals(2))
            let answer = try await h.post("/v1/apple/notifications/v1", body)
            XCTAssertEqual(answer.status, 200, answer.text)
            XCTAssertEqual(answer.json["status"] as? String, "stored")
            let state = try await h.request("GET", "/v1/subscriptions/\(Self.groupB)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(state.status, 200, state.text)
            XCTAssertEqual(state.json["environment"] as? String, "Production")
            XCTAssertEqual(state.json["status"] as? String, "active", state.text)
            XCTAssertEqual(state.json["productId"] as? String, "com.example.pro")
            XCTAssertEqual(state.json["latestTransactionId"] as? String, "2000000000000002")
            XCTAssertEqual(state.json["expiresDate"] as? Int64, Self.bExpires(2))
            XCTAssertEqual(state.json["autoRenewStatus"] as? Int, 1)
            XCTAssertEqual(state.json["bundleId"] as? String, "com.example")
            // Production only; and the other group of the account is not what it was about.
            let sandbox = try await h.request("GET", "/v1/subscriptions/\(Self.groupB)?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(sandbox.status, 404, sandbox.text)
            let other = try await h.request("GET", "/v1/subscriptions/\(Self.groupA)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(other.status, 404, other.text)
            // A cancellation (refund) of the latest transaction revokes it.
            var cancelled = Self.bRenewals(2)
            cancelled[1]["cancellation_date_ms"] = String(Self.bPurchase(2) + 60_000)
            cancelled[1]["cancellation_reason"] = "0"
            let refund = try await h.post("/v1/apple/notifications/v1", Self.v1Account(type: "REFUND", environment: "PROD", bEntries: cancelled))
            XCTAssertEqual(refund.status, 200, refund.text)
            let revoked = try await h.request("GET", "/v1/subscriptions/\(Self.groupB)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(revoked.json["status"] as? String, "revoked", revoked.text)
            let events = try await h.request("GET", "/v1/subscriptions/\(Self.groupB)/events", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual((events.json["events"] as? [Any])?.count, 2, events.text)
        }
    }

    /// Two renewals of an account's second subscription group used to share a dedupe key (it
    /// hashed the account's entry with the greatest expiry, in the other group): the second was
    /// answered "duplicate" and lost.
    func testTwoV1RenewalsOfASecondGroupAreBothStored() async throws {
        try await withService { h in
            let first = try await h.post("/v1/apple/notifications/v1", Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: Self.bRenewals(2)))
            let second = try await h.post("/v1/apple/notifications/v1", Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: Self.bRenewals(3)))
            XCTAssertEqual(first.json["status"] as? String, "stored", first.text)
            XCTAssertEqual(second.json["status"] as? String, "stored", second.text)
            XCTAssertNotEqual(first.json["position"] as? Int, second.json["position"] as? Int)
            // A retry of the first (a new latest_receipt, same state) is a duplicate.
            let retry = try await h.post("/v1/apple/notifications/v1",
                                         Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: Self.bRenewals(2), latestReceipt: "MIIretry"))
            XCTAssertEqual(retry.json["status"] as? String, "duplicate", retry.text)
            XCTAssertEqual(retry.json["position"] as? Int, first.json["position"] as? Int)
            XCTAssertEqual(try h.events(stream: Self.groupB).count, 2)
            XCTAssertEqual(try h.events(stream: Self.groupA).count, 0)
            let state = try await h.request("GET", "/v1/subscriptions/\(Self.groupB)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(state.json["latestTransactionId"] as? String, "2000000000000003", state.text)
            XCTAssertEqual(state.json["expiresDate"] as? Int64, Self.bExpires(3))
        }
    }

    func testHostileV1BodiesAreRefusedAndNothingIsStored() async throws {
        try await withService { h in
            func entries(otid: String) -> [[String: String]] {
                [["transaction_id": "1", "original_transaction_id": otid, "purchase_date_ms": "1650000000000",
                  "expires_date_ms": "1900000000000", "product_id": "com.example.pro"]]
            }
            let raw = String(decoding: Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: Self.bRenewals(2)), as: UTF8.self)
            let many = (0..<1_001).map { i in
                ["transaction_id": "\(i)", "original_transaction_id": Self.groupB, "purchase_date_ms": "\(1_650_000_000_000 + i)",
                 "cancellation_date_ms": "1660000000000", "product_id": "com.example.pro"]
            }
            let cases: [(String, Int, String, Data)] = [
                ("stream ledger:admin", 400, "invalid_original_transaction_id", Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: entries(otid: "ledger:admin"))),
                ("stream wechat:order:*", 400, "invalid_original_transaction_id", Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: entries(otid: "wechat:order:42"))),
                ("21 digits", 400, "invalid_original_transaction_id", Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: entries(otid: "123456789012345678901"))),
                ("secret echoed in another member", 400, "malformed", Data(raw.replacingOccurrences(of: "\"bvrs\":\"1\"", with: "\"bvrs\":\"v1-shared-secret\"").utf8)),
                ("a number where Apple sends a string", 400, "malformed", Data(raw.replacingOccurrences(of: "\"product_id\":\"com.example.pro\"", with: "\"product_id\":5").utf8)),
                ("1,001 entries", 400, "malformed", Self.v1Account(type: "REFUND", environment: "PROD", bEntries: many)),
                // It used to be stored, and then every projection update failed on PostgreSQL's
                // btree entry limit: nothing after it was projected.
                ("a 4,000-byte transaction_id", 400, "malformed", Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: [
                    ["transaction_id": String(repeating: "7", count: 4_000), "original_transaction_id": Self.groupB,
                     "purchase_date_ms": "1700000000000", "expires_date_ms": "1900000000000", "product_id": "com.example.pro"]])),
                ("no transaction_id", 400, "missing_field", Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: [["original_transaction_id": Self.groupB, "purchase_date_ms": "1650000000000", "product_id": "com.example.pro"]], aEntries: [])),
                ("no latest_receipt_info", 400, "missing_field", Self.v1Account(type: "DID_RENEW", environment: "PROD", bEntries: [], aEntries: [])),
                ("environment not accepted", 422, "environment_mismatch", Self.v1Account(type: "DID_RENEW", environment: "Xcode", bEntries: Self.bRenewals(2))),
                ("another app", 422, "app_mismatch", Data(raw.replacingOccurrences(of: "\"bid\":\"com.example\"", with: "\"bid\":\"com.evil\"").utf8)),
                ("wrong password", 401, "bad_shared_secret", Data(raw.replacingOccurrences(of: "v1-shared-secret", with: "v1-shared-secreT").utf8)),
            ]
            for (name, status, code, body) in cases {
                let answer = try await h.post("/v1/apple/notifications/v1", body)
                XCTAssertEqual(answer.status, status, "\(name): \(answer.text)")
                XCTAssertEqual(answer.errorCode, code, "\(name): \(answer.text)")
                XCTAssertFalse(answer.text.contains("v1-shared-secret"), "\(name): the answer must not echo the secret")
                XCTAssertEqual(try h.eventCount(), 0, "\(name): nothing may be stored")
            }
            // The refusal names the field.
            let named = try await h.post("/v1/apple/notifications/v1", cases[0].3)
            XCTAssertTrue((named.json["message"] as? String ?? "").contains("original_transaction_id"), named.text)

            // Only the shared secret is needed to post V1: V2 keys in a V1 body are stored as V1
            // members and never read as verified V2 data (they used to grant until 2100).
            let customer = "6f0c1b2a-0000-4000-8000-0000000000aa"
            let forged = raw.replacingOccurrences(of: "\"bvrs\":\"1\"", with: #""bvrs":"1","notificationType":"SUBSCRIBED","signedDate":1650000000000,"transactionInfo":{"transactionId":"4000000000000002","originalTransactionId":"4000000000000001","productId":"com.example.pro","purchaseDate":1650000000000,"expiresDate":4102444800000,"appAccountToken":"\#(customer)","environment":"Production","bundleId":"com.example","type":"Auto-Renewable Subscription"},"renewalInfo":{"originalTransactionId":"4000000000000001","autoRenewProductId":"com.example.pro","autoRenewStatus":1,"appAccountToken":"\#(customer)"}"#)
            let stored = try await h.post("/v1/apple/notifications/v1", Data(forged.utf8))
            XCTAssertEqual(stored.status, 200, stored.text)
            XCTAssertEqual(try h.events(stream: Self.groupB).count, 1)
            let fake = try await h.request("GET", "/v1/subscriptions/4000000000000001", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(fake.status, 404, fake.text)
            let grants = try await h.request("GET", "/v1/customers/\(customer)/entitlements", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(grants.status, 200, grants.text)
            XCTAssertEqual((grants.json["entitlements"] as? [Any])?.count, 0, grants.text)
            let real = try await h.request("GET", "/v1/subscriptions/\(Self.groupB)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(real.json["expiresDate"] as? Int64, Self.bExpires(2), real.text)
        }
    }

    func testV1RefusedWhenNoSecretIsConfigured() async throws {
        try await withService(environment: ["LEDGER_APPLE_SHARED_SECRET": ""]) { h in
            // An empty variable leaves the secret unset.
            let answer = try await h.post("/v1/apple/notifications/v1", Self.v1Body(password: "anything"))
            XCTAssertEqual(answer.status, 422)
            XCTAssertEqual(answer.errorCode, "shared_secret_not_configured")
            XCTAssertEqual(try h.eventCount(), 0)
        }
    }

    func testHostileBodiesAreRefusedWithReasonAndNothingIsStored() async throws {
        let stranger = try AppleTestAuthority.mint(.init())
        let wrongLeafOID = try AppleTestAuthority.mint({ var o = AppleTestAuthority.ChainOptions(); o.leafOID = "1.2.840.113635.100.6.11.2"; return o }())
        let wrongIntermediateOID = try AppleTestAuthority.mint({ var o = AppleTestAuthority.ChainOptions(); o.intermediateOID = "1.2.840.113635.100.6.2.2"; return o }())
        let expiredLeaf = try AppleTestAuthority.mint({ var o = AppleTestAuthority.ChainOptions(); o.leafValidity = 1_577_836_800...1_609_459_200; return o }())
        // The bad chains' roots are trusted on purpose, so only the defect under test can refuse them.
        try await withService(extraRoots: [wrongLeafOID.root, wrongIntermediateOID.root, expiredLeaf.root]) { h in
            let auth = h.authority
            let sample = AppleTestAuthority.sample(originalTransactionId: "7000000000000009")
            func signed(_ edit: (inout AppleTestAuthority.NotificationOptions) -> Void) throws -> Data {
                var o = AppleTestAuthority.NotificationOptions()
                edit(&o)
                return try auth.signSample(sample, options: o)
            }
            func withSegment(_ index: Int, _ change: (String) -> String) throws -> Data {
                let good = (try JSONSerialization.jsonObject(with: auth.signSample(sample)) as! [String: Any])["signedPayload"] as! String
                var parts = good.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
                parts[index] = change(parts[index])
                return try AppleTestAuthority.body(signedPayload: parts.joined(separator: "."))
            }
            var prod = AppleTestAuthority.sample(appAppleId: 999, environment: "Production")
            prod.transaction.environment = "Production"
            prod.renewal.environment = "Production"
            var xcodeEnv = sample
            xcodeEnv.notification.data?.environment = "Xcode"
            xcodeEnv.transaction.environment = "Xcode"
            xcodeEnv.renewal.environment = "Xcode"
            var nestedBundle = sample
            nestedBundle.transaction.bundleId = "com.other"
            var nestedEnv = sample
            nestedEnv.transaction.environment = "Production"
            var nestedOriginal = sample
            nestedOriginal.renewal.originalTransactionId = "999"
            let good = try auth.signSample(sample)
            let goodJWS = (try JSONSerialization.jsonObject(with: good) as! [String: Any])["signedPayload"] as! String
            let deep = Data(("{\"signedPayload\":" + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}").utf8)

            let cases: [(String, String, Int, String, Data)] = [
                ("alg none", "/v1/apple/notifications", 401, "unsupported_algorithm", try signed { $0.outer.alg = "none" }),
                ("HS256 keyed by the public key", "/v1/apple/notifications", 401, "unsupported_algorithm", try signed { $0.outer.alg = "HS256" }),
                ("nested alg none", "/v1/apple/notifications", 401, "unsupported_algorithm", try signed { $0.transaction.alg = "none" }),
                ("x5c of 2", "/v1/apple/notifications", 401, "invalid_chain_length", try signed { $0.outer.x5c = .leafAndIntermediate }),
                ("x5c of 4", "/v1/apple/notifications", 401, "invalid_chain_length", try signed { $0.outer.x5c = .withExtra(auth.root) }),
                ("no x5c", "/v1/apple/notifications", 400, "missing_field", try signed { $0.outer.x5c = .absent }),
                ("self-made root sent in x5c", "/v1/apple/notifications", 401, "untrusted_chain", try signed { $0.outer.authority = stranger }),
                ("stranger's chain with our root in slot 3", "/v1/apple/notifications", 401, "untrusted_chain", try signed {
                    $0.outer.x5c = .custom([stranger.leaf, stranger.intermediate, auth.root]); $0.outer.signingKey = stranger.leafKey }),
                ("root in the intermediate slot", "/v1/apple/notifications", 401, "missing_apple_oid", try signed { $0.outer.x5c = .custom([auth.leaf, auth.root, auth.root]) }),
                ("wrong OID on the leaf", "/v1/apple/notifications", 401, "missing_apple_oid", try wrongLeafOID.signSample(sample)),
                ("wrong OID on the intermediate", "/v1/apple/notifications", 401, "missing_apple_oid", try wrongIntermediateOID.signSample(sample)),
                ("leaf expired at signedDate", "/v1/apple/notifications", 401, "certificate_not_valid_at_signing_time", try expiredLeaf.signSample(sample)),
                ("outer signed by another key", "/v1/apple/notifications", 401, "bad_signature", try signed { $0.outer.signingKey = stranger.leafKey }),
                ("corrupted signature", "/v1/apple/notifications", 401, "bad_signature", try signed { $0.outer.corruptSignature = true }),
                ("nested transaction signed by another key", "/v1/apple/notifications", 401, "bad_signature", try signed { $0.transaction.signingKey = stranger.leafKey }),
                ("nested renewal from a stranger's chain", "/v1/apple/notifications", 401, "untrusted_chain", try signed { $0.renewal.authority = stranger }),
                ("nested bundleId disagrees", "/v1/apple/notifications", 422, "nested_mismatch", try auth.signSample(nestedBundle)),
                ("nested environment disagrees", "/v1/apple/notifications", 422, "nested_mismatch", try auth.signSample(nestedEnv)),
                ("nested originalTransactionId disagrees", "/v1/apple/notifications", 422, "nested_mismatch", try auth.signSample(nestedOriginal)),
                ("truncated JWS", "/v1/apple/notifications", 400, "malformed", try AppleTestAuthority.body(signedPayload: String(goodJWS.prefix(goodJWS.count / 2)))),
                ("non-base64url payload segment", "/v1/apple/notifications", 400, "malformed", try withSegment(1) { $0 + "+/" }),
                ("signature segment cut short", "/v1/apple/notifications", 400, "malformed", try withSegment(2) { String($0.dropLast(4)) }),
                ("10,000-deep JSON", "/v1/apple/notifications", 400, "json_too_deep", deep),
                ("empty body", "/v1/apple/notifications", 400, "malformed", Data()),
                ("form-encoded body", "/v1/apple/notifications", 400, "malformed", Data("signedPayload=abc".utf8)),
                ("signedPayload not a string", "/v1/apple/notifications", 400, "missing_field", Data("{\"signedPayload\": 42}".utf8)),
                ("wrong bundleId", "/v1/apple/notifications", 422, "app_mismatch", try auth.signSample(AppleTestAuthority.sample(bundleId: "com.evil"))),
                ("wrong appAppleId in Production", "/v1/apple/notifications", 422, "app_mismatch", try auth.signSample(prod)),
                ("environment not accepted", "/v1/apple/notifications", 422, "environment_mismatch", try auth.signSample(xcodeEnv)),
                ("2 MiB body", "/v1/apple/notifications", 413, "body_too_large", Data(repeating: 0x20, count: 2 << 20)),
                // Authentic (the outer signature holds) but unreadable bodies are stored as evidence:
                // UnreadableEvidenceTests.
                ("V1 wrong password", "/v1/apple/notifications/v1", 401, "bad_shared_secret", Self.v1Body(password: "guess")),
                ("V1 without password", "/v1/apple/notifications/v1", 401, "bad_shared_secret", Self.v1Body(password: nil)),
            ]
            XCTAssertGreaterThanOrEqual(cases.count, 30)
            for (name, path, status, code, body) in cases {
                let answer = try await h.post(path, body)
                XCTAssertEqual(answer.status, status, "\(name): \(answer.text)")
                XCTAssertEqual(answer.errorCode, code, "\(name): \(answer.text)")
                XCTAssertFalse((answer.json["message"] as? String ?? "").isEmpty, "\(name): the error must say what to fix")
                XCTAssertEqual(try h.eventCount(), 0, "\(name): nothing may be stored")
            }
            // The baseline the hostile cases were derived from is accepted.
            let ok = try await h.post("/v1/apple/notifications", good)
            XCTAssertEqual(ok.status, 200, ok.text)
            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
            XCTAssertTrue(metrics.contains("ledger_notifications_total{outcome=\"bad_signature\",source=\"apple_v2\"} 3"), metrics)
        }
    }

    static func v1Body(password: String?) -> Data {
        let pw = password.map { "\"password\":\"\($0)\"," } ?? ""
        return Data("""
        {"notification_type":"DID_RENEW",\(pw)"environment":"Sandbox","auto_renew_product_id":"com.example.monthly",
        "unified_receipt":{"status":0,"environment":"Sandbox","latest_receipt":"MIIabc",
         "latest_receipt_info":[
          {"transaction_id":"1000000000000011","original_transaction_id":"1000000000000001","web_order_line_item_id":"1001","purchase_date_ms":"1654681683000","expires_date_ms":"1654681863000","product_id":"com.example.monthly"},
          {"transaction_id":"1000000000000012","original_transaction_id":"1000000000000001","web_order_line_item_id":"1002","purchase_date_ms":"1654681800000","expires_date_ms":"1654681900000","product_id":"com.example.monthly"}],
         "pending_renewal_info":[{"auto_renew_status":"1","original_transaction_id":"1000000000000001","is_in_billing_retry_period":"0"}]},
        "bvrs":"1","bid":"com.example","auto_renew_status":"true"}
        """.utf8)
    }

    // An account with two subscription groups: A (monthly, bought most recently) and B (pro),
    // which the notifications are about. B's periods start in 2023 and run ten years, so the
    // subscription is active whenever the test runs.
    static let groupA = "1000000000000001"
    static let groupB = "2000000000000001"
    static let day: Int64 = 86_400_000
    static func bPurchase(_ n: Int) -> Int64 { 1_700_000_000_000 + Int64(n - 1) * 30 * day }
    static func bExpires(_ n: Int) -> Int64 { bPurchase(n) + 3_650 * day }

    /// B's first `count` periods (transaction ids 2000000000000001…).
    static func bRenewals(_ count: Int) -> [[String: String]] {
        (1...count).map { n in
            ["transaction_id": "200000000000000\(n)", "original_transaction_id": groupB, "web_order_line_item_id": "200\(n)",
             "purchase_date_ms": String(bPurchase(n)), "expires_date_ms": String(bExpires(n)), "product_id": "com.example.pro"]
        }
    }

    static let aDefault: [[String: String]] = [
        ["transaction_id": "1000000000000002", "original_transaction_id": groupA, "purchase_date_ms": "1750000000000",
         "expires_date_ms": "2400000000000", "product_id": "com.example.monthly"],
    ]

    /// A V1 body about group B of the account (every value a string, as Apple sends them).
    static func v1Account(type: String, environment: String, bEntries: [[String: String]], aEntries: [[String: String]] = aDefault,
                          latestReceipt: String = "MIIabc") -> Data {
        func object(_ o: [String: String]) -> String {
            "{" + o.keys.sorted().map { "\"\($0)\":\"\(o[$0]!)\"" }.joined(separator: ",") + "}"
        }
        return Data("""
        {"notification_type":"\(type)","password":"v1-shared-secret","environment":"\(environment)","auto_renew_product_id":"com.example.pro",
        "unified_receipt":{"status":0,"environment":"Production","latest_receipt":"\(latestReceipt)",
         "latest_receipt_info":[\((aEntries + bEntries).map(object).joined(separator: ","))],
         "pending_renewal_info":[{"auto_renew_status":"1","original_transaction_id":"\(groupA)","auto_renew_product_id":"com.example.monthly"},
          {"auto_renew_status":"1","original_transaction_id":"\(groupB)","auto_renew_product_id":"com.example.pro","is_in_billing_retry_period":"0"}]},
        "bvrs":"1","bid":"com.example","auto_renew_status":"true"}
        """.utf8)
    }
}

extension ServiceHarness {
    /// The top-level member names of the stored payloads of a stream.
    func payloadKeys(stream: String) throws -> [String] {
        try admin.query("SELECT DISTINCT jsonb_object_keys(payload) AS k FROM events WHERE stream_id = $1 ORDER BY 1",
                        [.text(stream)], name: "payload keys").rows.map { try $0.decode(String.self, "k") }
    }
}

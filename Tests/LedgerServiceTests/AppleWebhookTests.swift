import AppStore
import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
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
            XCTAssertEqual(try h.events(stream: StreamNames.appleTest).count, 1)
        }
    }

    func testV1WithTheSharedSecretIsStoredWithoutIt() async throws {
        try await withService { h in
            let answer = try await h.post("/v1/apple/notifications/v1", Self.v1Body(password: "v1-shared-secret"))
            XCTAssertEqual(answer.status, 200, answer.text)
            let stored = try h.events(stream: "ot1")
            XCTAssertEqual(stored.count, 1)
            XCTAssertFalse(String(decoding: stored[0].raw, as: UTF8.self).contains("v1-shared-secret"))
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
                ("payload not JSON", "/v1/apple/notifications", 400, "malformed", try AppleTestAuthority.body(signedPayload: auth.sign(payload: Data("not json".utf8)))),
                ("10,000-deep JSON", "/v1/apple/notifications", 400, "json_too_deep", deep),
                ("empty body", "/v1/apple/notifications", 400, "malformed", Data()),
                ("form-encoded body", "/v1/apple/notifications", 400, "malformed", Data("signedPayload=abc".utf8)),
                ("signedPayload not a string", "/v1/apple/notifications", 400, "missing_field", Data("{\"signedPayload\": 42}".utf8)),
                ("wrong bundleId", "/v1/apple/notifications", 422, "app_mismatch", try auth.signSample(AppleTestAuthority.sample(bundleId: "com.evil"))),
                ("wrong appAppleId in Production", "/v1/apple/notifications", 422, "app_mismatch", try auth.signSample(prod)),
                ("environment not accepted", "/v1/apple/notifications", 422, "environment_mismatch", try auth.signSample(xcodeEnv)),
                ("2 MiB body", "/v1/apple/notifications", 413, "body_too_large", Data(repeating: 0x20, count: 2 << 20)),
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
            let metrics = try await h.request("GET", "/metrics").text
            XCTAssertTrue(metrics.contains("ledger_notifications_total{outcome=\"bad_signature\",source=\"apple_v2\"} 3"), metrics)
        }
    }

    static func v1Body(password: String?) -> Data {
        let pw = password.map { "\"password\":\"\($0)\"," } ?? ""
        return Data("""
        {"notification_type":"DID_RENEW",\(pw)"environment":"Sandbox","auto_renew_product_id":"com.example.monthly",
        "unified_receipt":{"status":0,"environment":"Sandbox","latest_receipt":"MIIabc",
         "latest_receipt_info":[
          {"transaction_id":"t1","original_transaction_id":"ot1","web_order_line_item_id":"w1","purchase_date_ms":"1654681683000","expires_date_ms":"1654681863000","product_id":"com.example.monthly"},
          {"transaction_id":"t2","original_transaction_id":"ot1","web_order_line_item_id":"w2","purchase_date_ms":"1654681800000","expires_date_ms":"1654681900000","product_id":"com.example.monthly"}],
         "pending_renewal_info":[{"auto_renew_status":"1","original_transaction_id":"ot1","is_in_billing_retry_period":"0"}]},
        "bvrs":"1","bid":"com.example","auto_renew_status":"true"}
        """.utf8)
    }
}

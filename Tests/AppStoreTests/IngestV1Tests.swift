import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import AppStore

final class IngestV1Tests: XCTestCase {
    let secret = "0123456789abcdef0123456789abcdef"
    let prod = try! AppleAcceptance(bundleIds: ["com.example"], appAppleIds: [1234], environments: ["Production"])

    /// A V1 body like seed 002's, with the newest transaction deliberately NOT first.
    func body(password: String? = nil, environment: String = "PROD", bid: String = "com.example", type: String = "DID_RENEW",
              latestReceipt: String = "MIIabc", newestExpires: String = "1654682095000", autoRenew: String = "true",
              extra: String = "") -> Data {
        let pw = password.map { "\"password\":\"\($0)\"," } ?? ""
        return Data("""
        {"notification_type":"\(type)",\(pw)"environment":"\(environment)","auto_renew_product_id":"com.example.monthly",
        "unified_receipt":{"status":0,"environment":"Production","latest_receipt":"\(latestReceipt)",
         "latest_receipt_info":[
          {"transaction_id":"t1","original_transaction_id":"ot1","web_order_line_item_id":"w1","purchase_date_ms":"1654681683000","expires_date_ms":"1654681863000","product_id":"com.example.monthly"},
          {"transaction_id":"t3","original_transaction_id":"ot1","web_order_line_item_id":"w3","purchase_date_ms":"1654681915000","expires_date_ms":"\(newestExpires)","product_id":"com.example.monthly"},
          {"transaction_id":"t2","original_transaction_id":"ot1","web_order_line_item_id":"w2","purchase_date_ms":"1654681800000","expires_date_ms":"1654681900000","product_id":"com.example.monthly"}],
         "pending_renewal_info":[{"auto_renew_status":"1","original_transaction_id":"ot1","is_in_billing_retry_period":"0"}]},
        "bvrs":"1","bid":"\(bid)","auto_renew_status":"\(autoRenew)"\(extra)}
        """.utf8)
    }

    var ingestor: AppleNotificationIngestor { Fixtures.ingestor(prod) }

    func testBuildsEventFromTheLatestExpiringEntryAndRedactsTheSecret() throws {
        let b = body(password: secret)
        let e = try ingestor.ingestV1(body: b, sharedSecret: secret)
        XCTAssertEqual(e.streamId, "ot1")
        XCTAssertEqual(e.type, "V1/DID_RENEW")
        XCTAssertEqual(e.environment, "Production")
        XCTAssertEqual(e.expiresAt, 1_654_682_095_000)
        XCTAssertEqual(e.signedAt, 1_654_681_915_000)
        XCTAssertTrue(e.dedupeKey.hasPrefix("v1:"))
        XCTAssertEqual(e.dedupeKey.count, 3 + 64)
        let p = try jsonObject(e.payload)
        XCTAssertEqual((p["selectedReceiptInfo"] as? [String: Any])?["transaction_id"] as? String, "t3")
        XCTAssertEqual(p["autoRenewStatus"] as? Bool, true)
        XCTAssertEqual(p["password"] as? String, "<redacted>")
        // Neither stored column contains the secret; raw is otherwise byte-identical.
        let rawText = String(decoding: e.raw, as: UTF8.self)
        XCTAssertFalse(rawText.contains(secret))
        XCTAssertFalse(String(decoding: e.payload, as: UTF8.self).contains(secret))
        XCTAssertEqual(rawText, String(decoding: b, as: UTF8.self).replacingOccurrences(of: "\"\(secret)\"", with: "\"<redacted>\""))
    }

    func testDedupeKeyIgnoresReceiptAndPasswordButNotState() throws {
        let a = try ingestor.ingestV1(body: body(password: secret, latestReceipt: "AAAA"), sharedSecret: secret)
        let b = try ingestor.ingestV1(body: body(password: secret, latestReceipt: "BBBB", extra: ",\"request_date_ms\":\"1\""), sharedSecret: secret)
        XCTAssertEqual(a.dedupeKey, b.dedupeKey, "retries differing only in latest_receipt are one notification")
        let renewed = try ingestor.ingestV1(body: body(password: secret, newestExpires: "1654682400000"), sharedSecret: secret)
        XCTAssertNotEqual(a.dedupeKey, renewed.dedupeKey)
        let toggled = try ingestor.ingestV1(body: body(password: secret, type: "DID_CHANGE_RENEWAL_STATUS", autoRenew: "false"), sharedSecret: secret)
        XCTAssertNotEqual(a.dedupeKey, toggled.dedupeKey)
        XCTAssertEqual((try jsonObject(toggled.payload))["autoRenewStatus"] as? Bool, false)
    }

    func testSecretUnsetIsRefused() {
        assertRefused("shared_secret_not_configured", .notAccepted) { try ingestor.ingestV1(body: body(password: secret), sharedSecret: nil) }
        assertRefused("shared_secret_not_configured", .notAccepted) { try ingestor.ingestV1(body: body(password: ""), sharedSecret: "") }
    }

    func testWrongOrMissingPassword() {
        assertRefused("bad_shared_secret", .unauthenticated) { try ingestor.ingestV1(body: body(password: secret + "x"), sharedSecret: secret) }
        assertRefused("bad_shared_secret", .unauthenticated) { try ingestor.ingestV1(body: body(password: String(secret.dropLast())), sharedSecret: secret) }
        assertRefused("bad_shared_secret", .unauthenticated) { try ingestor.ingestV1(body: body(password: nil), sharedSecret: secret) }
        assertRefused("bad_shared_secret", .unauthenticated) { try ingestor.ingestV1(body: body(password: ""), sharedSecret: secret) }
        // The refusal never echoes the secret.
        do { _ = try ingestor.ingestV1(body: body(password: "guess"), sharedSecret: secret) } catch {
            XCTAssertFalse(error.description.contains(secret))
            XCTAssertFalse(error.description.contains("guess"))
        }
    }

    func testWrongBundleAndEnvironment() {
        assertRefused("app_mismatch", .notAccepted) { try ingestor.ingestV1(body: body(password: secret, bid: "com.other"), sharedSecret: secret) }
        assertRefused("environment_mismatch", .notAccepted) { try ingestor.ingestV1(body: body(password: secret, environment: "Sandbox"), sharedSecret: secret) }
        let sandbox = Fixtures.ingestor(Fixtures.sandbox)
        XCTAssertEqual(try sandbox.ingestV1(body: body(password: secret, environment: "Sandbox"), sharedSecret: secret).environment, "Sandbox")
        assertRefused("environment_mismatch", .notAccepted) { try sandbox.ingestV1(body: body(password: secret), sharedSecret: secret) }
    }

    func testMalformedV1Bodies() {
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: Data("password=x".utf8), sharedSecret: secret) }
        let deep = Data(("{\"password\":\"\(secret)\",\"x\":" + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}").utf8)
        assertRefused("json_too_deep", .malformed) { try ingestor.ingestV1(body: deep, sharedSecret: secret) }
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: body(password: secret, autoRenew: "1"), sharedSecret: secret) }
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: body(password: secret, newestExpires: "soon"), sharedSecret: secret) }
        let noReceipt = Data("{\"password\":\"\(secret)\",\"notification_type\":\"CANCEL\",\"environment\":\"PROD\",\"bid\":\"com.example\"}".utf8)
        assertRefused("missing_field", .malformed) { try ingestor.ingestV1(body: noReceipt, sharedSecret: secret) }
    }

    func testRedactionHandlesEscapedKeysAndDuplicates() {
        let tricky = Data("{\"pass\\u0077ord\" : \"\(secret)\", \"a\":{\"password\":\"inner\"}, \"password\":\"\(secret)\"}".utf8)
        let out = String(decoding: V1Redaction.redact(body: tricky, secret: secret), as: UTF8.self)
        XCTAssertFalse(out.contains(secret))
        XCTAssertTrue(out.contains("\"inner\""), "only top-level members are the shared secret")
        // A secret echoed elsewhere (escaped) forces the re-encoded fallback rather than leaking.
        let echoed = Data("{\"password\":\"\(secret)\",\"note\":\"\(secret)\"}".utf8)
        XCTAssertFalse(String(decoding: V1Redaction.redact(body: echoed, secret: secret), as: UTF8.self).contains(secret))
    }
}

import AppStore
import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Postgres
import WeChatPay
import XCTest

/// An authentic notification the ledger cannot read is stored as evidence, never refused: Apple
/// and WeChat may give up after a 4xx, so a refusal would lose it. Through HTTP on real PostgreSQL:
/// 200 only after the commit, the exact bytes kept once (a retry is a duplicate), an `unreadable`
/// fact naming why, counted; what is not authentic, or is another app's, is still refused.
final class UnreadableEvidenceTests: XCTestCase {
    static let path = "/v1/apple/notifications"

    /// A notification document signed by `authority` as Apple signs one (the outer JWS).
    static func signed(_ authority: AppleTestAuthority, _ json: String) throws -> Data {
        try AppleTestAuthority.body(signedPayload: authority.sign(payload: Data(json.utf8)))
    }

    static let now = Int64(Date().timeIntervalSince1970 * 1000)

    func kept(_ h: ServiceHarness, position: Int) throws -> (kind: String, reason: String) {
        let row = try h.admin.query("SELECT kind, detail FROM facts WHERE position = $1", [.int64(Int64(position))], name: "unreadable fact").first!
        return (try row.decode(String.self, "kind"), try row.decode(String.self, "detail"))
    }

    func testAuthenticButUnreadableAppleNotificationsAreStoredAsEvidenceOnce() async throws {
        try await withService { h in
            let auth = h.authority
            let sample = AppleTestAuthority.sample(originalTransactionId: "7100000000000001")
            var swapped = sample.notification
            swapped.data?.signedTransactionInfo = try auth.sign(sample.renewal)
            swapped.data?.signedRenewalInfo = try auth.sign(sample.transaction)
            let data = #""data":{"bundleId":"com.example","environment":"Sandbox"}"#
            let cases: [(String, String, Data)] = [
                ("payload not JSON", "malformed", try AppleTestAuthority.body(signedPayload: auth.sign(payload: Data("not json".utf8)))),
                ("no notificationUUID", "missing_field", try Self.signed(auth, #"{"notificationType":"SUBSCRIBED","signedDate":\#(Self.now),\#(data)}"#)),
                ("no notificationType", "missing_field", try Self.signed(auth, #"{"notificationUUID":"u-2","signedDate":\#(Self.now),\#(data)}"#)),
                ("a section this build does not know", "malformed",
                 try Self.signed(auth, #"{"notificationUUID":"u-3","notificationType":"NEW_KIND","signedDate":\#(Self.now),"futureSection":{"bundleId":"com.example"}}"#)),
                ("a number where Apple sends a string", "malformed",
                 try Self.signed(auth, #"{"notificationUUID":"u-4","notificationType":"TEST","subtype":5,"signedDate":\#(Self.now),\#(data)}"#)),
                ("a 2,000-byte notificationUUID", "malformed",
                 try Self.signed(auth, #"{"notificationUUID":"\#(String(repeating: "u", count: 2_000))","notificationType":"TEST","signedDate":\#(Self.now),\#(data)}"#)),
                ("a NUL escape in the payload", "malformed",
                 try Self.signed(auth, #"{"notificationUUID":"u-6\u0000","notificationType":"TEST","signedDate":\#(Self.now),\#(data)}"#)),
                ("renewal info in signedTransactionInfo", "wrong_nested_type", try auth.signNotification(swapped)),
                ("transaction without a purchaseDate", "wrong_nested_type", try auth.signNotification(
                    sample.notification, transaction: sample.transaction, renewal: sample.renewal, editTransaction: { $0["purchaseDate"] = nil })),
                ("renewal info with a transactionId", "wrong_nested_type", try auth.signNotification(
                    sample.notification, transaction: sample.transaction, renewal: sample.renewal, editRenewal: { $0["transactionId"] = "7100000000000009" })),
                ("originalTransactionId ledger:admin", "invalid_original_transaction_id",
                 try auth.signSample(AppleTestAuthority.sample(originalTransactionId: "ledger:admin"))),
                ("renewal originalTransactionId wechat:order:1", "invalid_original_transaction_id", try auth.signNotification(
                    sample.notification, renewal: sample.renewal, editRenewal: { $0["originalTransactionId"] = "wechat:order:1" })),
            ]
            var positions: Set<Int> = []
            for (name, code, body) in cases {
                let first = try await h.post(Self.path, body)
                XCTAssertEqual(first.status, 200, "\(name): \(first.text)")
                XCTAssertEqual(first.json["status"] as? String, "stored", "\(name): \(first.text)")
                let position = try XCTUnwrap(first.json["position"] as? Int, name)
                positions.insert(position)
                // Apple's retry of the same bytes: the same event, nothing new.
                let again = try await h.post(Self.path, body)
                XCTAssertEqual(again.status, 200, name)
                XCTAssertEqual(again.json["status"] as? String, "duplicate", name)
                XCTAssertEqual(again.json["position"] as? Int, position, name)
                let row = try h.admin.query("SELECT stream_id, type, dedupe_key, raw, payload::text AS payload FROM events WHERE position = $1",
                                            [.int64(Int64(position))], name: "evidence").first!
                XCTAssertEqual(try row.decode(String.self, "stream_id"), "apple:unreadable", name)
                XCTAssertEqual(try row.decode(String.self, "type"), "unreadable", name)
                XCTAssertEqual(try row.decode(Data.self, "raw"), body, "\(name): the exact bytes are the evidence")
                XCTAssertEqual(try row.decode(String.self, "dedupe_key"), "sha256:" + Hex.encode(Digest.sha256(body)), name)
                let payload = try row.decode(String.self, "payload")
                XCTAssertTrue(payload.contains("\"code\": \"\(code)\""), "\(name): \(payload)")
                let fact = try kept(h, position: position)
                XCTAssertEqual(fact.kind, "unreadable", name)
                XCTAssertTrue(fact.reason.contains("could not be read"), "\(name): \(fact.reason)")
            }
            XCTAssertEqual(positions.count, cases.count, "each notification is its own evidence")
            XCTAssertEqual(try h.eventCount(), Int64(cases.count))
            // Nothing of it reaches a subscription.
            let subscriptions = try h.admin.query("SELECT count(*) AS n FROM facts WHERE subscription IS NOT NULL", name: "no subscription facts")
            XCTAssertEqual(try subscriptions.first!.decode(Int64.self, "n"), 0)
            let metrics = try await h.request("GET", "/metrics", token: ServiceHarness.adminToken).text
            XCTAssertTrue(metrics.contains("ledger_unreadable_notifications_total{code=\"missing_field\",source=\"apple_v2\"} 2"), metrics)
            XCTAssertTrue(metrics.contains("ledger_unreadable_notifications_total{code=\"wrong_nested_type\",source=\"apple_v2\"} 3"), metrics)
        }
    }

    func testWhatIsNotAuthenticOrNotOursIsStillRefused() async throws {
        let stranger = try AppleTestAuthority.mint(.init())
        try await withService { h in
            let cases: [(String, Int, String, Data)] = [
                ("unreadable and signed by a stranger", 401, "untrusted_chain",
                 try Self.signed(stranger, #"{"notificationType":"SUBSCRIBED","signedDate":\#(Self.now),"data":{"bundleId":"com.example"}}"#)),
                ("not JSON and signed by a stranger", 401, "untrusted_chain",
                 try AppleTestAuthority.body(signedPayload: stranger.sign(payload: Data("not json".utf8)))),
                ("unreadable and another developer's app", 422, "app_mismatch",
                 try Self.signed(h.authority, #"{"notificationType":"SUBSCRIBED","signedDate":\#(Self.now),"data":{"bundleId":"com.evil","environment":"Sandbox"}}"#)),
                ("unreadable and an environment not accepted", 422, "environment_mismatch",
                 try Self.signed(h.authority, #"{"notificationType":"SUBSCRIBED","signedDate":\#(Self.now),"data":{"bundleId":"com.example","environment":"Xcode"}}"#)),
                ("unreadable, Production, another appAppleId", 422, "app_mismatch",
                 try Self.signed(h.authority, #"{"notificationType":"SUBSCRIBED","signedDate":\#(Self.now),"data":{"bundleId":"com.example","environment":"Production","appAppleId":999}}"#)),
                ("nested transaction signed by a stranger", 401, "bad_signature", try h.authority.signSample(
                    AppleTestAuthority.sample(originalTransactionId: "7100000000000002"), options: { var o = AppleTestAuthority.NotificationOptions(); o.transaction.signingKey = stranger.leafKey; return o }())),
                ("no signedPayload", 400, "missing_field", Data(#"{"signed": "x"}"#.utf8)),
            ]
            for (name, status, code, body) in cases {
                let answer = try await h.post(Self.path, body)
                XCTAssertEqual(answer.status, status, "\(name): \(answer.text)")
                XCTAssertEqual(answer.errorCode, code, "\(name): \(answer.text)")
                XCTAssertEqual(try h.eventCount(), 0, "\(name): nothing may be stored")
            }
        }
    }

    /// A flood of unreadable evidence is deferred (503 + Retry-After: the sender retries), never
    /// refused for good; readable notifications are not held back by it.
    func testUnreadableEvidenceIsRateLimitedPerSourceWith503() async throws {
        try await withService(environment: ["LEDGER_UNREADABLE_PER_MINUTE": "2"]) { h in
            for n in 1...2 {
                let body = try Self.signed(h.authority, #"{"notificationType":"TEST","signedDate":\#(Self.now + Int64(n)),"data":{"bundleId":"com.example"}}"#)
                let answer = try await h.post(Self.path, body)
                XCTAssertEqual(answer.status, 200, answer.text)
            }
            let third = try await h.post(Self.path, try Self.signed(h.authority, #"{"notificationType":"TEST","signedDate":\#(Self.now + 3),"data":{"bundleId":"com.example"}}"#))
            XCTAssertEqual(third.status, 503, third.text)
            XCTAssertEqual(third.errorCode, "unreadable_deferred")
            XCTAssertNotNil(third.headers["retry-after"], "the sender is told when to retry")
            XCTAssertEqual(try h.eventCount(), 2)
            let readable = try await h.post(Self.path, try h.authority.signSample(AppleTestAuthority.sample(originalTransactionId: "7100000000000003")))
            XCTAssertEqual(readable.status, 200, readable.text)
            XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_UNREADABLE_PER_MINUTE": "0"]))
        }
    }

    // MARK: WeChat

    /// A secure-mode push whose `msg_signature` holds (the sender knows the token) carrying
    /// `inner` sealed under `key`.
    static func sealed(_ inner: [UInt8], key: String = WeChatWebhookTests.keyText, nonce: String = UUID().uuidString,
                       token: String = WeChatWebhookTests.token) throws -> (path: String, body: Data) {
        let sender = PushReceiver(config: try WeChatPushConfig(appId: WeChatWebhookTests.appId, token: token, aesKey: try EncodingAESKey(key)))
        let ts = String(WeChatSide.nowSeconds())
        let sealed = try sender.encryptReply(inner, format: .json, timestamp: Int64(ts)!, nonce: nonce)
        let encrypt = (try JSONSerialization.jsonObject(with: sealed) as! [String: Any])["Encrypt"] as! String
        let q = "signature=\(PushSignature.compute([token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes"
            + "&msg_signature=\(PushSignature.compute([token, ts, nonce, encrypt]))"
        let body = JSONValue.object(["ToUserName": "gh_97417a04a28d", "Encrypt": .string(encrypt)]).canonicalJSON()
        return ("/v1/wechat/notifications?" + q.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed)!, body)
    }

    func testAuthenticWeChatPushesThatCannotBeOpenedAreStoredAsEvidence() async throws {
        let rotated = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
        let message = WeChatSide.signing(otid: "7200000000000001", openId: "oKept", product: "vip_monthly",
                                         signed: Self.now, renewal: Self.now + 30 * 86_400_000)
        try await withService(environment: WeChatSide.environment) { h in
            let cases: [(String, String, String, (path: String, body: Data))] = [
                ("sealed under a key the ledger does not hold (rotated)", "wechat:unreadable:undecryptable", "bad_padding",
                 try Self.sealed(Array(message.canonicalJSON()), key: rotated)),
                ("a message that is not JSON or XML", "wechat:unreadable:unparsable", "invalid_json",
                 try Self.sealed(Array("not a message".utf8))),
                ("a message nested 10,000 deep", "wechat:unreadable:unparsable", "nesting_too_deep",
                 try Self.sealed(Array(("{\"a\":" + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}").utf8))),
            ]
            for (name, stream, code, request) in cases {
                let first = try await h.post(request.path, request.body)
                XCTAssertEqual(first.status, 200, "\(name): \(first.text)")
                XCTAssertEqual(first.body, Data(), "\(name): WeChat's empty success (there may be no key to encrypt a reply with)")
                let again = try await h.post(request.path, request.body)
                XCTAssertEqual(again.status, 200, "\(name): the re-push")
                let stored = try h.events(stream: stream).filter { $0.type == "unreadable" && RawPush.body(of: $0.raw) == Array(request.body) }
                XCTAssertEqual(stored.count, 1, "\(name): stored once, the exact body in raw")
                let payload = try h.admin.query("SELECT payload::text AS p FROM events WHERE stream_id = $1 AND dedupe_key = $2",
                                                [.text(stream), .text(stored.first?.dedupeKey ?? "")], name: "evidence payload").first
                XCTAssertTrue(try payload?.decode(String.self, "p").contains("\"code\": \"\(code)\"") ?? false, name)
            }
            XCTAssertEqual(try h.eventCount(), Int64(cases.count))
            let facts = try h.admin.query("SELECT count(*) AS n FROM facts WHERE kind = 'unreadable'", name: "facts").first!
            XCTAssertEqual(try facts.decode(Int64.self, "n"), Int64(cases.count))

            // Not authentic (msg_signature under another token) or plaintext (the signature does
            // not cover the body): refused, nothing stored.
            let forged = try Self.sealed(Array(message.canonicalJSON()), key: rotated, token: "someone-else")
            let refused = try await h.post(forged.path, forged.body)
            XCTAssertEqual(refused.status, 401, refused.text)
            let (plainPath, _) = try WeChatSide().request(message, .xmlPlain)
            let plain = try await h.post(plainPath, Data("<xml><a>".utf8))
            XCTAssertEqual(plain.status, 400, plain.text)
            XCTAssertEqual(try h.eventCount(), Int64(cases.count))
        }
    }
}

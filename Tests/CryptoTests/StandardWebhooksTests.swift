import Crypto
import Foundation
import XCTest

/// Standard Webhooks 1.0 signing, checked by the reference library (PyPI `standardwebhooks`,
/// unchanged, in the git-ignored .venv that `make test` prepares with scripts/webhooks-venv.sh).
final class StandardWebhooksTests: XCTestCase {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The reference library's verdict on one request: its output line and exit status.
    static func referenceVerify(secret: String, headers: [(String, String)], body: Data) throws -> (String, Int32) {
        let python = root.appendingPathComponent(".venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else {
            XCTFail("the reference library is missing: run scripts/webhooks-venv.sh (make test does)")
            return ("", -1)
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: python)
        var object: [String: String] = [:]
        for (k, v) in headers { object[k] = v }
        let headersJSON = String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
        p.arguments = [root.appendingPathComponent("scripts/verify-webhook.py").path, secret, headersJSON]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        try p.run()
        input.fileHandleForWriting.write(body)
        try input.fileHandleForWriting.close()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (String(decoding: out, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines), p.terminationStatus)
    }

    let body = Data(#"{"data":{"note":"ünïcode and \"quotes\""},"id":"evt_0123","timestamp":"2026-01-01T00:00:00.000Z","type":"subscription.renewed"}"#.utf8)

    func testTheReferenceLibraryVerifiesOurSignature() throws {
        let secret = WebhookSecret.generate()
        let now = Int64(Date().timeIntervalSince1970)
        let headers = StandardWebhooks.headers(id: "evt_0123", timestamp: now, body: body, secrets: [secret])
        let (line, status) = try Self.referenceVerify(secret: secret.text, headers: headers, body: body)
        XCTAssertEqual(status, 0, line)
        XCTAssertEqual(line, "evt_0123 subscription.renewed")
        XCTAssertNoThrow(try StandardWebhooks.verify(
            id: "evt_0123", timestamp: String(now), signatures: headers[2].1, body: body, secrets: [secret], now: now))
    }

    func testDuringARotationBothSecretsVerify() throws {
        let old = WebhookSecret.generate(), new = WebhookSecret.generate()
        let now = Int64(Date().timeIntervalSince1970)
        let headers = StandardWebhooks.headers(id: "evt_rot", timestamp: now, body: body, secrets: [new, old])
        XCTAssertEqual(headers[2].1.split(separator: " ").count, 2, "one signature per secret, space-separated")
        for secret in [old, new] {
            let (line, status) = try Self.referenceVerify(secret: secret.text, headers: headers, body: body)
            XCTAssertEqual(status, 0, line)
        }
        let stranger = WebhookSecret.generate()
        XCTAssertNotEqual(try Self.referenceVerify(secret: stranger.text, headers: headers, body: body).1, 0)
    }

    /// Hostile: the reference library refuses a changed body, a changed id, an old timestamp; so do we.
    func testTamperingIsRefusedByTheReferenceLibraryAndByUs() throws {
        let secret = WebhookSecret.generate()
        let now = Int64(Date().timeIntervalSince1970)
        let headers = StandardWebhooks.headers(id: "evt_1", timestamp: now, body: body, secrets: [secret])
        var changed = body
        changed[changed.startIndex + 10] ^= 1
        XCTAssertEqual(try Self.referenceVerify(secret: secret.text, headers: headers, body: changed).1, 1)
        let otherId = [("webhook-id", "evt_2"), headers[1], headers[2]]
        XCTAssertEqual(try Self.referenceVerify(secret: secret.text, headers: otherId, body: body).1, 1)
        let old = StandardWebhooks.headers(id: "evt_1", timestamp: now - 600, body: body, secrets: [secret])
        XCTAssertEqual(try Self.referenceVerify(secret: secret.text, headers: old, body: body).1, 1)

        XCTAssertThrowsError(try StandardWebhooks.verify(
            id: "evt_1", timestamp: String(now), signatures: headers[2].1, body: changed, secrets: [secret], now: now)) {
            XCTAssertEqual($0 as? WebhookSignatureError, .noMatchingSignature)
        }
        XCTAssertThrowsError(try StandardWebhooks.verify(
            id: "evt_1", timestamp: String(now - 600), signatures: old[2].1, body: body, secrets: [secret], now: now)) {
            XCTAssertEqual($0 as? WebhookSignatureError, .timestampOutOfTolerance(skewSeconds: -600))
        }
        XCTAssertThrowsError(try StandardWebhooks.verify(
            id: "evt_1", timestamp: "soon", signatures: headers[2].1, body: body, secrets: [secret], now: now))
        XCTAssertThrowsError(try StandardWebhooks.verify(
            id: nil, timestamp: String(now), signatures: headers[2].1, body: body, secrets: [secret], now: now)) {
            XCTAssertEqual($0 as? WebhookSignatureError, .missingHeader("webhook-id"))
        }
        // A v2 (unknown) signature equal to ours is not read as v1.
        let v2 = headers[2].1.replacingOccurrences(of: "v1,", with: "v2,")
        XCTAssertThrowsError(try StandardWebhooks.verify(
            id: "evt_1", timestamp: String(now), signatures: v2, body: body, secrets: [secret], now: now))
    }

    /// The published example of the reference libraries: a fixed secret, id, timestamp and body.
    func testAKnownVector() throws {
        let secret = try WebhookSecret(text: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let body = Data(#"{"test": 2432232314}"#.utf8)
        XCTAssertEqual(StandardWebhooks.signature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1614265330, body: body, secret: secret),
                       "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    func testSecretsParseOnlyInTheirFormAndNeverPrint() throws {
        XCTAssertThrowsError(try WebhookSecret(text: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")) { XCTAssertEqual($0 as? WebhookSignatureError, .secretFormat) }
        XCTAssertThrowsError(try WebhookSecret(text: "whsec_not base64!")) { XCTAssertEqual($0 as? WebhookSignatureError, .secretFormat) }
        XCTAssertThrowsError(try WebhookSecret(text: "whsec_" + Data(repeating: 1, count: 8).base64EncodedString())) {
            XCTAssertEqual($0 as? WebhookSignatureError, .secretSize(8))
        }
        let s = WebhookSecret.generate()
        XCTAssertEqual(try WebhookSecret(text: s.text), s)
        XCTAssertFalse("\(s)".contains(Data(s.key).base64EncodedString()))
        XCTAssertFalse(String(reflecting: s).contains(Data(s.key).base64EncodedString()))
    }

    func testMessageIdsAreShortStableAndHeaderSafe() {
        let a = StandardWebhooks.messageId(for: "Production:1|subscription.renewed|2")
        XCTAssertEqual(a, StandardWebhooks.messageId(for: "Production:1|subscription.renewed|2"))
        XCTAssertNotEqual(a, StandardWebhooks.messageId(for: "Production:1|subscription.renewed|3"))
        XCTAssertTrue(a.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") })
    }
}

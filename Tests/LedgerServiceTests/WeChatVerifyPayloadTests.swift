import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// `ledger verify-payload` on stored WeChat evidence, as an auditor runs it: the raw column of a
/// stored push, or a whole timeline from the API, re-verified offline with the key history.
final class WeChatVerifyPayloadTests: XCTestCase {
    let side = WeChatSide()

    func testStoredPushesReVerifyOfflineWithTheKeyHistory() async throws {
        let binary = try XCTUnwrap(LedgerBinary.path, "the ledger executable is built beside the tests")
        try await withService(environment: WeChatSide.environment) { h in
            let now = WeChatSide.nowSeconds() * 1000
            let otid = "7950000000000001"
            try await side.push(h, WeChatSide.signing(otid: otid, openId: "oVerify", product: "p", signed: now - 1000, renewal: now + 86_400_000), .jsonSecure)
            try await side.push(h, WeChatSide.deliver(otid: otid, openId: "oVerify", product: "p", order: "VER-1", paid: now, create: now,
                                                      renewal: now + 86_400_000), .xmlPlain)
            let raws = try h.admin.query("SELECT raw FROM events WHERE stream_id = $1 ORDER BY position", [.text(otid)], name: "raws")
                .rows.map { try $0.decode(Data.self, "raw") }
            XCTAssertEqual(raws.count, 2)
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("verify-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            let secureFile = dir.appendingPathComponent("secure.json"), plainFile = dir.appendingPathComponent("plain.json")
            try raws[0].write(to: secureFile)
            try raws[1].write(to: plainFile)
            var env = WeChatSide.environment
            env["LEDGER_DATABASE_URL"] = "host=/nonexistent dbname=unused"

            let secure = try LedgerBinary.run(binary, ["verify-payload", secureFile.path], environment: env)
            XCTAssertEqual(secure.status, 0, secure.output)
            XCTAssertTrue(secure.output.contains("push: verified (secure mode, json)"), secure.output)
            XCTAssertTrue(secure.output.contains(WeChatKeyFingerprint.token(WeChatWebhookTests.token)), secure.output)
            XCTAssertTrue(secure.output.contains("the same key"), secure.output)
            XCTAssertTrue(secure.output.contains(otid), "the decrypted message is printed")
            XCTAssertFalse(secure.output.contains(WeChatWebhookTests.keyText), "never a key")

            let plain = try LedgerBinary.run(binary, ["verify-payload", plainFile.path], environment: env)
            XCTAssertEqual(plain.status, 1, plain.output)
            XCTAssertTrue(plain.output.contains("unsigned_body"), plain.output)
            XCTAssertTrue(plain.output.contains("NOT authenticated"), plain.output)

            // A timeline from the API, on standard input: every WeChat push in it.
            let timeline = try await h.request("GET", "/v1/subscriptions/\(otid)/events", token: "auditor-token-for-tests-0123456789abcdef")
            let both = try LedgerBinary.run(binary, ["verify-payload", "-"], environment: env, input: timeline.body)
            XCTAssertEqual(both.status, 1, both.output)
            XCTAssertTrue(both.output.contains("verified") && both.output.contains("unsigned_body"), both.output)

            // Keys rotated since: the current configuration no longer opens it; the history file does.
            var rotated = env
            rotated["LEDGER_WECHAT_AES_KEY"] = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
            let refused = try LedgerBinary.run(binary, ["verify-payload", secureFile.path], environment: rotated)
            XCTAssertEqual(refused.status, 1, refused.output)
            XCTAssertTrue(refused.output.contains("add the keys of its time"), refused.output)
            let history = dir.appendingPathComponent("keys.json")
            try Data("""
            {"keys": [{"appId": "\(WeChatWebhookTests.appId)", "token": "\(WeChatWebhookTests.token)", "aesKey": "\(WeChatWebhookTests.keyText)", "label": "before the rotation"}]}
            """.utf8).write(to: history)
            let opened = try LedgerBinary.run(binary, ["verify-payload", "--wechat-key-history", history.path, secureFile.path], environment: rotated)
            XCTAssertEqual(opened.status, 0, opened.output)
            XCTAssertTrue(opened.output.contains("before the rotation"), opened.output)
        }
    }
}

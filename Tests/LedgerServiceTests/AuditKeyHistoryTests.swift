import Foundation
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import WeChatPay
import XCTest

/// WeChat pushes stored under keys since rotated out of the configuration: `ledger verify` and
/// the timeline's verification status re-verify them with the key history (`WeChatPushEvidence`,
/// the same code as `ledger verify-payload`), and only with it.
extension AuditChainTests {
    static let rotatedToken = "n3wT0kenAfterRotation"
    static let rotatedKey = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"

    func testPushesUnderARotatedKeyVerifyOnlyWithTheKeyHistory() async throws {
        let binary = try XCTUnwrap(LedgerBinary.path, "the ledger executable is built beside the tests")
        try await withService(environment: WeChatSide.environment) { h in
            try await populate(h)
            // A plaintext-mode push too: its signature covers the token, timestamp and nonce, not the body.
            let now = WeChatSide.nowSeconds() * 1000
            try await WeChatSide().push(h, WeChatSide.deliver(otid: "7950000000000002", openId: "oPlain", product: "p", order: "PLAIN-1",
                                                              paid: now, create: now, renewal: now + 86_400_000), .xmlPlain)
            let wechat = try h.admin.query("SELECT position FROM events WHERE source = 'wechat' ORDER BY position", name: "pushes")
                .rows.map { try $0.decode(Int64.self, "position") }
            XCTAssertEqual(wechat.count, 3, "a delivery and an inquiry in secure mode, a plaintext delivery")
            let (secure, plaintext) = (Array(wechat.prefix(2)), wechat[2])

            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("key-history-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            let root = dir.appendingPathComponent("root.pem")
            try Data(h.authority.root.pem.utf8).write(to: root)
            let history = dir.appendingPathComponent("keys.json")
            try Data("""
            {"keys": [{"appId": "\(WeChatTestSender.appId)", "token": "\(WeChatTestSender.token)", "aesKey": "\(WeChatTestSender.keyText)", "label": "until the 2026 rotation"}]}
            """.utf8).write(to: history)
            // Token and EncodingAESKey both rotated: the configuration holds only the new ones.
            let rotated = ["LEDGER_DATABASE_URL": h.database.serviceConninfo, "LEDGER_APPLE_ROOT_CERTS": root.path,
                           "LEDGER_WECHAT_APPID": WeChatTestSender.appId, "LEDGER_WECHAT_TOKEN": Self.rotatedToken,
                           "LEDGER_WECHAT_AES_KEY": Self.rotatedKey]

            let without = try LedgerBinary.run(binary, ["verify"], environment: rotated)
            XCTAssertEqual(without.status, 1, without.output)
            XCTAssertTrue(without.output.contains("first broken position \(secure[0]): signature: WeChat push: no key of the history opens it"),
                          without.output)
            XCTAssertTrue(without.output.contains("also position \(secure[1]): signature"), without.output)
            XCTAssertTrue(without.output.contains("add the keys of its time to the key history file"), "says how to fix it")
            XCTAssertTrue(without.output.contains("also position \(plaintext): signature"), "the plaintext push's query signature needs the old token too")

            let with = try LedgerBinary.run(binary, ["verify", "--wechat-key-history", history.path], environment: rotated)
            XCTAssertEqual(with.status, 0, with.output)
            XCTAssertTrue(with.output.contains("intact"), with.output)
            let counts = try XCTUnwrap(with.output.split(separator: "\n").first { $0.hasPrefix("checked") })
            XCTAssertTrue(counts.contains("5 signatures re-verified, 3 unsigned"),
                          "3 Apple + 2 WeChat verified; the answer, the order link and the plaintext push unsigned: \(counts)")
            XCTAssertFalse(with.output.contains(WeChatTestSender.keyText) || with.output.contains(WeChatTestSender.token), "never a key")
            // The variable does the same as the option.
            var viaEnvironment = rotated
            viaEnvironment["LEDGER_WECHAT_KEY_HISTORY_FILE"] = history.path
            XCTAssertEqual(try LedgerBinary.run(binary, ["verify"], environment: viaEnvironment).status, 0)

            // A history file that cannot be used stops the command before it walks (exit 2), saying why.
            let broken = dir.appendingPathComponent("broken.json")
            try Data(#"{"keys": [{"appId": "wx1", "token": "t", "aesKey": "short"}]}"#.utf8).write(to: broken)
            let bad = try LedgerBinary.run(binary, ["verify", "--wechat-key-history", broken.path], environment: rotated)
            XCTAssertEqual(bad.status, 2, bad.output)
            XCTAssertTrue(bad.output.contains("keys[0].aesKey"), bad.output)
            let missing = try LedgerBinary.run(binary, ["verify", "--wechat-key-history", dir.appendingPathComponent("nope.json").path],
                                               environment: rotated)
            XCTAssertEqual(missing.status, 2, missing.output)
            XCTAssertTrue(missing.output.contains("cannot read the WeChat key history"), missing.output)

            // The timeline's verification status: the same history, from the service's configuration.
            let events = try await h.app.store.events.events(positions: wechat)
            var configuration = try LedgerConfiguration.load(environment: rotated)
            let desk = AuditDesk(configuration: configuration)
            XCTAssertTrue(desk.check(events[0]).isRefused, "\(desk.check(events[0]))")
            configuration.wechat.keyHistoryFile = history.path
            let withHistory = AuditDesk(configuration: configuration)
            guard case .verified(let detail) = withHistory.check(events[0]) else {
                return XCTFail("\(withHistory.check(events[0]))")
            }
            XCTAssertTrue(detail.contains("until the 2026 rotation"), "names the history entry that opened it: \(detail)")
            XCTAssertFalse(detail.contains("NOT the key"), "the key recorded at ingestion: \(detail)")
            guard case .unsigned(let why) = withHistory.check(events[2]) else { return XCTFail("\(withHistory.check(events[2]))") }
            XCTAssertTrue(why.contains("NOT authenticated"), why)
            configuration.wechat.keyHistoryFile = broken.path
            let unusable = AuditDesk(configuration: configuration)
            XCTAssertNotNil(unusable.evidenceProblem)
            guard case .refused(let reason) = unusable.check(events[0]) else { return XCTFail("\(unusable.check(events[0]))") }
            XCTAssertTrue(reason.contains("keys[0].aesKey"), "the page says why nothing was re-verified: \(reason)")
        }
    }
}

import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import Postgres
import WeChatPay
import XCTest

/// WeChat pushes from the test side (the service decrypts; a mismatch fails the tests).
struct WeChatTestSender {
    static let appId = "wxba5fad812f8e6fb9"
    static let token = "t0kenForTests"
    static let keyText = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"
    static let environment = ["LEDGER_WECHAT_APPID": appId, "LEDGER_WECHAT_TOKEN": token, "LEDGER_WECHAT_AES_KEY": keyText]
    let sender = PushReceiver(config: try! WeChatPushConfig(appId: appId, token: token, aesKey: try! EncodingAESKey(keyText)))

    func sha1(_ parts: [String]) -> String {
        Hex.encode(Digest.sha1(Array(parts.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }.joined().utf8)))
    }

    func json(_ o: [String: Any]) -> Data { try! JSONSerialization.data(withJSONObject: o, options: [.sortedKeys]) }

    func secure(_ message: [String: Any], nonce: String = UUID().uuidString) throws -> (String, Data) {
        let ts = "1775226065"
        let sealed = try sender.encryptReply(Array(json(message)), format: .json, timestamp: 1775226065, nonce: nonce)
        let encrypt = (try JSONSerialization.jsonObject(with: sealed) as! [String: Any])["Encrypt"] as! String
        let q = "signature=\(sha1([Self.token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(sha1([Self.token, ts, nonce, encrypt]))"
        return ("/v1/wechat/notifications?" + q.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed)!,
                json(["ToUserName": "gh_97417a04a28d", "Encrypt": encrypt]))
    }

    func header(_ event: String, _ createTime: Int) -> [String: Any] {
        ["ToUserName": "gh_97417a04a28d", "FromUserName": "o_wechat_official", "CreateTime": createTime, "MsgType": "event", "Event": event]
    }

    func deliver(order: String, otid: String, openId: String = "oUser1", at: Int = 1775226066) -> [String: Any] {
        header(XPayEventName.goodsDeliver, at).merging(["OpenId": openId, "OutTradeNo": order, "Env": 0,
            "GoodsInfo": ["ProductId": "vip_monthly", "Quantity": 1, "OrigPrice": 3000, "ActualPrice": 990, "Attach": "uid=1"],
            "AppleSubscriptionInfo": ["OriginalTransactionId": otid, "AutoRenewStatus": 1, "RenewalDate": 1_777_818_065_000]]) { $1 }
    }

    func inquiry(order: String, refundTime: String = "1775300000", reason: String = "UNINTENDED_PURCHASE") -> [String: Any] {
        var o = header(XPayEventName.refundInquiry, Int(refundTime) ?? 1775300000)
        for (k, v) in [("refund_time", refundTime), ("order_time", "1775226066"), ("channel_bill", "510001234567890"),
                       ("bundleid", "com.tencent.xin"), ("product_id", "vip_monthly"), ("p_count", "1"),
                       ("refund_request_reason", reason), ("provide_status", "1"),
                       ("pay_order_id", order), ("service_type", "unipdt"), ("consumption_status", "0")] { o[k] = v }
        return o
    }

    func refundNotify(order: String, wxOrder: String, at: Int, ok: Bool = true, openId: String = "oUser1") -> [String: Any] {
        header(XPayEventName.refundNotify, at).merging(["OpenId": openId, "WxRefundId": "wxr-\(order)-\(ok ? 0 : 1)",
            "MchRefundId": "", "WxOrderId": wxOrder, "MchOrderId": order, "RefundFee": 990, "RetCode": ok ? 0 : 268_490_001,
            "RetMsg": ok ? "" : "refund failed", "RefundStartTimestamp": at - 60, "RefundSuccTimestamp": ok ? at : 0,
            "RetryTimes": 0]) { $1 }
    }

    func push(_ h: ServiceHarness, _ messages: [[String: Any]], file: StaticString = #filePath, line: UInt = #line) async throws {
        for m in messages {
            let (path, body) = try secure(m)
            let a = try await h.post(path, body)
            XCTAssertEqual(a.status, 200, a.text, file: file, line: line)
        }
    }
}

/// The hash chain and `ledger verify`: the chain is written by append_events() and recomputed
/// independently in Swift; an edit made with the triggers off is named by position; a chain
/// recomputed after the edit is caught by a kept anchor; an altered JWS by re-verification.
final class AuditChainTests: XCTestCase {
    let wx = WeChatTestSender()

    /// Three Apple notifications, a WeChat delivery and refund inquiry (with the ledger's answer).
    func populate(_ h: ServiceHarness) async throws {
        for (i, otid) in ["7100000000000001", "7100000000000002", "7100000000000003"].enumerated() {
            let body = try h.authority.signSample(AppleTestAuthority.sample(
                originalTransactionId: otid, signedDate: 1_767_225_600_000 + Int64(i) * 1000))
            let a = try await h.post("/v1/apple/notifications", body)
            XCTAssertEqual(a.status, 200, a.text)
        }
        try await wx.push(h, [wx.deliver(order: "ORDER-C1", otid: "2000001147426510"), wx.inquiry(order: "ORDER-C1")])
        // The inquiry's order stream is linked to the subscription off the answer's deadline, after
        // the reply (WeChatPushDesk): wait for that link so the log is complete before it is checked.
        for _ in 0..<100 {
            let links = try h.admin.query("SELECT count(*) AS n FROM events WHERE type = 'ledger_wechat_order_linked'", name: "links")
                .first!.decode(Int64.self, "n")
            if links > 0 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTFail("the inquiry's order stream was never linked")
    }

    func verifier(_ h: ServiceHarness) throws -> LogVerifier {
        LogVerifier(store: h.app.store, evidence: try XCTUnwrap(h.app.audit.evidence))
    }

    /// The superuser's view of the log with what the chain covers.
    func rows(_ h: ServiceHarness) throws -> [(EventChainHash.Fields, [UInt8])] {
        try h.admin.query(
            """
            SELECT e.position, e.stream_id, e.dedupe_key, e.type, e.source, (extract(epoch FROM e.recorded_at) * 1000000)::bigint AS us,
                   e.raw, c.hash FROM events e JOIN event_chain c ON c.position = e.position ORDER BY e.position
            """, name: "chain rows").rows.map { r in
            (EventChainHash.Fields(position: try r.decode(Int64.self, "position"), streamId: try r.decode(String.self, "stream_id"),
                                   dedupeKey: try r.decode(String.self, "dedupe_key"), type: try r.decode(String.self, "type"),
                                   source: try r.decode(String.self, "source"), recordedAtMicros: try r.decode(Int64.self, "us"),
                                   raw: try r.decode(Data.self, "raw")),
             [UInt8](try r.decode(Data.self, "hash")))
        }
    }

    /// What someone holding the superuser does to hide an edit: recompute every link from `from` on.
    func rewriteChain(_ h: ServiceHarness, from: Int64) throws {
        try h.admin.execute(script: """
            ALTER TABLE event_chain DISABLE TRIGGER event_chain_no_update_delete;
            DO $$
            DECLARE r record; v_prev bytea;
            BEGIN
              SELECT hash INTO v_prev FROM event_chain WHERE position = \(from - 1);
              IF v_prev IS NULL THEN v_prev := '\\x0000000000000000000000000000000000000000000000000000000000000000'::bytea; END IF;
              FOR r IN SELECT * FROM events WHERE position >= \(from) ORDER BY position LOOP
                v_prev := event_chain_hash(v_prev, r.position, r.stream_id, r.dedupe_key, r.type, r.source, r.recorded_at, r.raw);
                UPDATE event_chain SET hash = v_prev WHERE position = r.position;
              END LOOP;
            END $$;
            ALTER TABLE event_chain ENABLE TRIGGER event_chain_no_update_delete;
            """, name: "rewrite chain")
    }

    func edit(_ h: ServiceHarness, _ statement: String) throws {
        try h.admin.execute(script: """
            ALTER TABLE events DISABLE TRIGGER events_no_update_delete;
            \(statement);
            ALTER TABLE events ENABLE TRIGGER events_no_update_delete;
            """, name: "tamper")
    }

    func testTheChainIsWrittenOnAppendAndRecomputesIndependently() async throws {
        try await withService(environment: WeChatTestSender.environment) { h in
            try await populate(h)
            let stored = try rows(h)
            XCTAssertEqual(stored.count, 7, "3 Apple, a delivery, an inquiry, its answer and the order link")
            var previous = EventChainHash.genesis
            for (fields, hash) in stored {
                let recomputed = EventChainHash.hash(previous: previous, fields)
                XCTAssertEqual(Hex.encode(recomputed), Hex.encode(hash), "position \(fields.position): Swift and SQL disagree")
                previous = hash
            }
            // The layout is pinned: a change to it is a change to docs/hash-chain.md.
            let m = EventChainHash.message(previous: EventChainHash.genesis, EventChainHash.Fields(
                position: 1, streamId: "s", dedupeKey: "dk", type: "t", source: "apple", recordedAtMicros: 1, raw: Data()))
            XCTAssertEqual(Hex.encode(m), String(repeating: "00", count: 32) + "0000000000000001" + "00000001" + "73" + "00000002" + "646b"
                           + "00000001" + "74" + "00000005" + "6170706c65" + "0000000000000001"
                           + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")

            let report = try await verifier(h).verify()
            XCTAssertTrue(report.isIntact, "\(report.breaks)")
            XCTAssertEqual(report.eventsChecked, stored.count)
            XCTAssertEqual(report.signaturesVerified, 5, "3 Apple notifications and 2 WeChat pushes re-verified")
            XCTAssertEqual(report.unsigned, 2, "the ledger's own answer and order link")
            XCTAssertEqual(report.headAnchor.hash, stored.last?.1)

            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertTrue(metrics.text.contains("ledger_chain_head_position \(stored.count)\n"), metrics.text)
            XCTAssertTrue(metrics.text.contains("hash=\"\(Hex.encode(stored.last!.1))\""))

            // The chain is append-only like the log, for the service role and the superuser alike.
            XCTAssertThrowsError(try h.admin.query("UPDATE event_chain SET hash = hash WHERE position = 1", name: "update link"))
            XCTAssertThrowsError(try h.admin.query("DELETE FROM event_chain", name: "delete links"))
            XCTAssertThrowsError(try h.admin.query("TRUNCATE event_chain CASCADE", name: "truncate links"))
            let service = try h.database.connect(as: .service)
            XCTAssertThrowsError(try service.query("INSERT INTO event_chain VALUES (99, sha256('x'))", name: "insert link"))
        }
    }

    func testAnEditedRowIsNamedByItsPosition() async throws {
        try await withService(environment: WeChatTestSender.environment) { h in
            try await populate(h)
            try edit(h, "UPDATE events SET dedupe_key = dedupe_key || '-edited' WHERE position = 2")
            let report = try await verifier(h).verify()
            XCTAssertEqual(report.breaks.map(\.position), [2], "\(report.breaks)")
            XCTAssertEqual(report.breaks.first?.kind, .hashMismatch)
            // --from past the edit: the rest still holds.
            let later = try await verifier(h).verify(from: 3)
            XCTAssertTrue(later.isIntact, "\(later.breaks)")
            // A removed event: the gap and the orphan link are both named.
            try h.admin.execute(script: "SET session_replication_role = replica; DELETE FROM events WHERE position = 4; SET session_replication_role = origin;",
                                name: "remove event")
            let removed = try await verifier(h).verify(from: 3)
            XCTAssertEqual(removed.breaks.first?.position, 4, "\(removed.breaks)")
            XCTAssertTrue(removed.breaks.contains { $0.kind == .gap } && removed.breaks.contains { $0.kind == .missingLink }, "\(removed.breaks)")
        }
    }

    func testARewrittenChainIsCaughtByAKeptAnchor() async throws {
        try await withService(environment: WeChatTestSender.environment) { h in
            try await populate(h)
            let clean = try await verifier(h).verify()
            XCTAssertTrue(clean.isIntact)
            let anchor = clean.headAnchor
            let middle = ChainAnchor(position: 3, hash: try rows(h)[2].1)
            // The ledger's own answer changed, then every link after it recomputed: the walk holds.
            let answer = try XCTUnwrap(try h.admin.query("SELECT position FROM events WHERE source = 'ledger'", name: "answer").first?
                .decode(Int64.self, "position"))
            try edit(h, "UPDATE events SET type = type || '-rewritten' WHERE position = \(answer)")
            try rewriteChain(h, from: answer)
            let walk = try await verifier(h).verify()
            XCTAssertTrue(walk.isIntact, "a consistent rewrite passes the walk alone: that is what anchors are for")
            let checked = try await verifier(h).verify(anchors: [middle, anchor])
            XCTAssertEqual(checked.breaks.map(\.position), [anchor.position], "\(checked.breaks)")
            XCTAssertEqual(checked.breaks.first?.kind, .anchor)
            XCTAssertEqual(checked.anchorsChecked, 2, "the anchor before the edit still holds")
            // An anchor beyond the head: events were cut off.
            let beyond = try await verifier(h).verify(anchors: [ChainAnchor(position: anchor.position + 10, hash: anchor.hash)])
            XCTAssertEqual(beyond.breaks.first?.kind, .anchor)
        }
    }

    func testAnAlteredJWSIsCaughtByReverification() async throws {
        try await withService(environment: WeChatTestSender.environment) { h in
            try await populate(h)
            // One character of the outer JWS payload changed, then the chain recomputed over it.
            let raw = try XCTUnwrap(try h.admin.query("SELECT raw FROM events WHERE position = 2", name: "raw").first?.decode(Data.self, "raw"))
            var text = String(decoding: raw, as: UTF8.self)
            let dot = try XCTUnwrap(text.firstIndex(of: "."))
            let target = text.index(dot, offsetBy: 10)
            text.replaceSubrange(target...target, with: text[target] == "A" ? "B" : "A")
            try edit(h, "UPDATE events SET raw = convert_to('\(text.replacingOccurrences(of: "'", with: "''"))', 'UTF8') WHERE position = 2")
            try rewriteChain(h, from: 2)
            let report = try await verifier(h).verify()
            XCTAssertEqual(report.breaks.map(\.position), [2], "\(report.breaks)")
            XCTAssertEqual(report.breaks.first?.kind, .signature)
            // A WeChat push whose body was changed fails its msg_signature the same way.
            let wechat = try XCTUnwrap(try h.admin.query("SELECT position FROM events WHERE source = 'wechat' ORDER BY position LIMIT 1",
                                                         name: "push").first?.decode(Int64.self, "position"))
            try edit(h, "UPDATE events SET raw = convert_to(replace(convert_from(raw, 'UTF8'), 'Encrypt', 'Encrypt '), 'UTF8') WHERE position = \(wechat)")
            try rewriteChain(h, from: 2)
            let again = try await verifier(h).verify()
            XCTAssertEqual(again.breaks.map(\.position), [2, wechat], "\(again.breaks)")
        }
    }

    /// The binary: exit status, the anchor line, --anchor-file.
    func testTheCommandExitsNonZeroOnABreakAndPrintsAnAnchor() async throws {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("ledger").path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw XCTSkip("the ledger executable is not built next to the tests (\(binary)); swift build builds it")
        }
        try await withService(environment: WeChatTestSender.environment) { h in
            try await populate(h)
            let root = FileManager.default.temporaryDirectory.appendingPathComponent("verify-root-\(UUID().uuidString).pem")
            try Data(h.authority.root.pem.utf8).write(to: root)
            defer { try? FileManager.default.removeItem(at: root) }
            let env = ["LEDGER_DATABASE_URL": h.database.serviceConninfo, "LEDGER_APPLE_ROOT_CERTS": root.path,
                       "LEDGER_WECHAT_APPID": WeChatTestSender.appId, "LEDGER_WECHAT_TOKEN": WeChatTestSender.token,
                       "LEDGER_WECHAT_AES_KEY": WeChatTestSender.keyText, "PATH": "/usr/bin:/bin"]
            let clean = try run(binary, ["verify", "--anchor"], env)
            XCTAssertEqual(clean.status, 0, clean.err)
            let line = clean.out.trimmingCharacters(in: .whitespacesAndNewlines)
            let anchor = try XCTUnwrap(ChainAnchor(line: line), "one line <position> <hex>: \(clean.out)")
            XCTAssertEqual(anchor.position, try h.eventCount())
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("anchors-\(UUID().uuidString).txt")
            try Data("# kept elsewhere\n\(line)\n".utf8).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            XCTAssertEqual(try run(binary, ["verify", "--anchor-file", file.path], env).status, 0)
            try edit(h, "UPDATE events SET type = 'X' WHERE position = 3")
            let broken = try run(binary, ["verify"], env)
            XCTAssertEqual(broken.status, 1)
            XCTAssertTrue(broken.err.contains("first broken position 3"), broken.err)
            try rewriteChain(h, from: 3)
            XCTAssertEqual(try run(binary, ["verify"], env).status, 0)
            let anchored = try run(binary, ["verify", "--anchor-file", file.path], env)
            XCTAssertEqual(anchored.status, 1, anchored.err)
            XCTAssertTrue(anchored.err.contains("anchor"), anchored.err)
            XCTAssertEqual(try run(binary, ["verify", "--from", "zero"], env).status, 2)
        }
    }

    func run(_ binary: String, _ arguments: [String], _ environment: [String: String]) throws -> (status: Int32, out: String, err: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = arguments
        p.environment = environment
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
    }
}

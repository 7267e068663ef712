import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Postgres
import WeChatPay
import XCTest

/// The mutation fuzzer's inputs sent through HTTP to a real service, the database checked around
/// every request (issue 25 item 6): the parser-level fuzzers (AppStoreTests / WeChatPayTests
/// FuzzTests) prove each input ends as an event or a typed refusal; this proves what the service
/// does with that outcome — a refusal (4xx) stores nothing, a 200 is stored exactly once (a
/// retry of the same bytes adds nothing), never a 5xx, and no notification lands under two streams.
///
/// `LEDGER_HTTP_FUZZ_ITERATIONS` (default 150 per kind) and `LEDGER_FUZZ_SEED` replay a run.
final class FuzzThroughHTTPTests: XCTestCase {
    static let iterations = Int(ProcessInfo.processInfo.environment["LEDGER_HTTP_FUZZ_ITERATIONS"] ?? "") ?? 150

    /// Tallies of one run and the violations found (each with its seed, iteration and input).
    final class Audit {
        var statuses: [Int: Int] = [:]
        var stored = 0
        var duplicates = 0
        var violations: [String] = []
        let label: String
        let seed: UInt64
        init(_ label: String, seed: UInt64) { self.label = label; self.seed = seed }

        func violation(_ iteration: Int, _ input: [UInt8], _ what: String) {
            if violations.count < 10 {
                violations.append("\(label) seed=\(String(seed, radix: 16)) input #\(iteration) (seeds first, then mutation iteration #-seeds): \(what); input \(MutationFuzzer.hex(input, limit: 96))")
            }
        }
    }

    func count(_ h: ServiceHarness) throws -> Int64 {
        // Links are bookkeeping a WeChat push may add beside its own event; the push itself is what
        // must be stored once.
        try h.admin.query("SELECT count(*) AS n FROM events WHERE dedupe_key NOT LIKE 'link:%'", name: "fuzz: events").first!.decode(Int64.self, "n")
    }

    func rows(_ h: ServiceHarness, dedupeKey: String) throws -> Int64 {
        try h.admin.query("SELECT count(*) AS n FROM events WHERE dedupe_key = $1", [.text(dedupeKey)], name: "fuzz: rows of a key").first!.decode(Int64.self, "n")
    }

    /// Whether `body` is in the log exactly once: as evidence of an authentic notification the
    /// ledger could not read (`apple:unreadable`, keyed by the body's digest), else under the
    /// notification's own key. (A mutation may keep a stored notification's UUID and become
    /// unreadable: that is other bytes, kept as their own evidence.)
    func storedOnce(_ h: ServiceHarness, dedupeKey: String, body: Data) throws -> Bool {
        let evidence = try rows(h, dedupeKey: "sha256:" + Hex.encode(Digest.sha256(body)))
        return try evidence == 1 || (evidence == 0 && rows(h, dedupeKey: dedupeKey) == 1)
    }

    /// Posts each input (built by `request` from the mutated bytes) and checks the log around it.
    /// `key` names the dedupe key an accepted input must be stored under, when it can be read.
    func drive(_ h: ServiceHarness, _ audit: Audit, corpus: [[UInt8]],
               request: ([UInt8]) throws -> (path: String, body: Data), key: ([UInt8]) -> String? = { _ in nil }) async throws {
        // The seeds themselves first (the 200 path is always exercised), then the mutations.
        let inputs = corpus + (0..<Self.iterations).map { MutationFuzzer.input(corpus: corpus, seed: audit.seed, iteration: $0, maxLength: 16 * 1024) }
        for (i, input) in inputs.enumerated() {
            let (path, body) = try request(input)
            let before = try count(h)
            let answer = try await h.post(path, body)
            let after = try count(h)
            audit.statuses[answer.status, default: 0] += 1
            switch answer.status {
            case 200:
                if after - before == 1 {
                    audit.stored += 1
                } else if after == before {
                    // A duplicate of an input accepted earlier: that one must be in the log once.
                    audit.duplicates += 1
                    if let k = key(input), try !storedOnce(h, dedupeKey: k, body: body) {
                        audit.violation(i, input, "200 stored nothing, yet \(k) is not in the log exactly once")
                    }
                } else {
                    audit.violation(i, input, "200 added \(after - before) events")
                }
                // The sender's retry of the same bytes: 200, nothing new.
                let retry = try await h.post(path, body)
                let afterRetry = try count(h)
                if retry.status != 200 || afterRetry != after {
                    audit.violation(i, input, "the retry answered \(retry.status) and added \(afterRetry - after) events")
                }
                if let k = key(input), try !storedOnce(h, dedupeKey: k, body: body) {
                    audit.violation(i, input, "accepted, but neither \(k) nor the body's evidence is in the log exactly once (\(try rows(h, dedupeKey: k)) under \(k))")
                }
            case 400..<500:
                if after != before { audit.violation(i, input, "refused \(answer.status) but \(after - before) events stored") }
                if answer.errorCode == nil { audit.violation(i, input, "refused \(answer.status) without {\"error\",\"message\"}: \(answer.text.prefix(200))") }
            default:
                audit.violation(i, input, "answered \(answer.status): \(answer.text.prefix(200)) (\(after - before) events stored)")
            }
        }
        let twice = try h.admin.query("""
            SELECT dedupe_key, count(*) AS n FROM events WHERE dedupe_key NOT LIKE 'link:%' GROUP BY dedupe_key HAVING count(*) > 1
            """, name: "fuzz: keys stored twice").rows.map { try $0.decode(String.self, "dedupe_key") }
        if !twice.isEmpty { audit.violations.append("\(audit.label): stored under more than one stream: \(twice.prefix(5))") }
        print("\(audit.label): \(inputs.count) inputs (\(corpus.count) seeds first), statuses \(audit.statuses.sorted { $0.key < $1.key }), \(audit.stored) stored, \(audit.duplicates) duplicates")
        XCTAssertEqual(audit.violations, [], audit.violations.joined(separator: "\n"))
    }

    // MARK: Apple

    /// Signed notification payloads of the harness's test authority (nested JWS signed once).
    func applePayloads(_ authority: AppleTestAuthority) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        for (n, (type, subtype)) in [("SUBSCRIBED", "INITIAL_BUY"), ("DID_RENEW", nil), ("REFUND", nil), ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED")].enumerated() {
            var sample = AppleTestAuthority.sample(type: type, subtype: subtype, originalTransactionId: "500000000000000\(n)")
            sample.notification.data?.signedTransactionInfo = try authority.sign(sample.transaction)
            sample.notification.data?.signedRenewalInfo = try authority.sign(sample.renewal)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            out.append(Array(try encoder.encode(sample.notification)))
        }
        return out
    }

    static func uuid(ofPayload bytes: [UInt8]) -> String? {
        ((try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any])?["notificationUUID"] as? String
    }

    /// The notification payload mutated, then signed by the trusted authority: inputs reach JSON
    /// decoding, identity checks, nested agreement and storage, so both answers are exercised.
    func testAppleResignedPayloadsThroughHTTP() async throws {
        try await withService { h in
            let audit = Audit("apple payload (re-signed) via HTTP", seed: MutationFuzzer.seed(default: 0x4775_0001))
            try await drive(h, audit, corpus: try applePayloads(h.authority), request: { input in
                ("/v1/apple/notifications", try AppleTestAuthority.body(signedPayload: h.authority.sign(payload: Data(input))))
            }, key: Self.uuid(ofPayload:))
            XCTAssertGreaterThan(audit.stored, 0, "no mutated payload was accepted: the 200 path is not exercised")
            XCTAssertGreaterThan(audit.statuses.filter { (400..<500).contains($0.key) }.values.reduce(0, +), 0, "no refusal exercised")
        }
    }

    /// Whole bodies mutated after signing (envelope, JWS segments): refusals, mostly; any accepted
    /// body must carry an authentic payload and be stored once.
    func testAppleMutatedBodiesThroughHTTP() async throws {
        try await withService { h in
            let bodies = try applePayloads(h.authority).map { Array(try AppleTestAuthority.body(signedPayload: h.authority.sign(payload: Data($0)))) }
            let audit = Audit("apple body via HTTP", seed: MutationFuzzer.seed(default: 0x4775_0002))
            try await drive(h, audit, corpus: bodies, request: { ("/v1/apple/notifications", Data($0)) })
            XCTAssertGreaterThan(audit.statuses.filter { (400..<500).contains($0.key) }.values.reduce(0, +), 0, "no refusal exercised")
        }
    }

    // MARK: WeChat

    /// WeChat's messages (JSON) mutated, then sealed in secure mode with the configured token and
    /// EncodingAESKey: authentic pushes with hostile content. An authentic push is stored (as
    /// evidence when unreadable) or refused with a clear error — never half of both.
    func testWeChatSealedMessagesThroughHTTP() async throws {
        let side = WeChatSide()
        let now: EpochMillis = EpochMillis(Date().timeIntervalSince1970 * 1000)
        let messages: [JSONValue] = [
            WeChatSide.signing(otid: "6000000000000001", openId: "oFuzz1", product: "vip_monthly", signed: now, renewal: now + 30 * 86_400_000),
            WeChatSide.deliver(otid: "6000000000000001", openId: "oFuzz1", product: "vip_monthly", order: "FUZZ-1", paid: now, create: now,
                               renewal: now + 30 * 86_400_000),
            WeChatSide.unsigning(otid: "6000000000000001", openId: "oFuzz1", product: "vip_monthly", unsigned: now, renewal: now + 30 * 86_400_000),
            WeChatSide.refund(openId: "oFuzz1", mchOrderId: "mch-FUZZ-1", wxOrderId: "4200-FUZZ-1", at: now, refundId: "RF-1"),
        ]
        try await withService(environment: WeChatSide.environment) { h in
            let audit = Audit("wechat message (sealed) via HTTP", seed: MutationFuzzer.seed(default: 0x4775_0003))
            try await drive(h, audit, corpus: messages.map { Array($0.canonicalJSON()) }, request: { input in
                try Self.sealed(side, input, nonce: UUID().uuidString)
            })
            XCTAssertGreaterThan(audit.stored, 0, "no mutated message was stored: the 200 path is not exercised")
        }
    }

    /// Plaintext XML bodies mutated under a valid (fresh) query signature.
    func testWeChatPlaintextXMLThroughHTTP() async throws {
        let side = WeChatSide()
        let now: EpochMillis = EpochMillis(Date().timeIntervalSince1970 * 1000)
        let messages: [JSONValue] = [
            WeChatSide.signing(otid: "6000000000000002", openId: "oFuzz2", product: "vip_monthly", signed: now, renewal: now + 30 * 86_400_000),
            WeChatSide.deliver(otid: "6000000000000002", openId: "oFuzz2", product: "vip_monthly", order: "FUZZ-2", paid: now, create: now,
                               renewal: now + 30 * 86_400_000),
        ]
        try await withService(environment: WeChatSide.environment) { h in
            let audit = Audit("wechat plaintext XML via HTTP", seed: MutationFuzzer.seed(default: 0x4775_0004))
            try await drive(h, audit, corpus: messages.map { Array(WeChatSide.xml($0).utf8) }, request: { input in
                let (path, _) = try side.request(messages[0], .xmlPlain)
                return (path, Data(input))
            })
        }
    }

    /// A secure-mode JSON push carrying exactly `inner` (any bytes) as its decrypted message.
    static func sealed(_ side: WeChatSide, _ inner: [UInt8], nonce: String) throws -> (path: String, body: Data) {
        let ts = String(WeChatSide.nowSeconds())
        let signature = PushSignature.compute([WeChatWebhookTests.token, ts, nonce])
        let sealed = try side.sender.encryptReply(inner, format: .json, timestamp: Int64(ts)!, nonce: nonce)
        let encrypt = (try JSONSerialization.jsonObject(with: sealed) as! [String: Any])["Encrypt"] as! String
        let msgSignature = PushSignature.compute([WeChatWebhookTests.token, ts, nonce, encrypt])
        let q = "signature=\(signature)&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(msgSignature)"
        let body = JSONValue.object(["ToUserName": "gh_97417a04a28d", "Encrypt": .string(encrypt)]).canonicalJSON()
        return ("/v1/wechat/notifications?" + q.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed)!, body)
    }
}

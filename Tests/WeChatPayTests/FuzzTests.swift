import Crypto
import Foundation
import LedgerCore
import LedgerTesting
@testable import WeChatPay
import XCTest

/// Seeded mutation fuzzing of every WeChat parser that reads untrusted bytes: the XML and JSON push
/// codecs, the secure-mode AES frame (unpadding, length field, appid), the base64 `Encrypt` text
/// and the URL check. The contract under test: every input ends as a parsed message or a typed
/// `WeChatPushError` of a request status (never a crash, a hang, or a 500-class refusal), and a
/// parsed push keeps its exact bytes as evidence.
///
/// Each run prints its seed; `LEDGER_FUZZ_SEED=0x… swift test --filter WeChatPayTests.FuzzTests`
/// replays it, `LEDGER_FUZZ_ITERATIONS` changes the count (default 100,000 per parser).
final class FuzzTests: XCTestCase {
    static let iterations = Int(ProcessInfo.processInfo.environment["LEDGER_FUZZ_ITERATIONS"] ?? "") ?? 100_000
    static let timestamp = "1775226065"
    static let nonce = "987654321"
    /// A fixed random prefix keeps the frames (and so every mutated input) reproducible.
    static let prefix = [UInt8](repeating: 0x5A, count: 16)
    static let plainSignature = PushFixture.sha1Hex([PushFixture.token, timestamp, nonce])

    static let corpusDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/corpus/wechat")

    func corpus(_ ext: String) throws -> [[UInt8]] { try Self.corpus(ext) }

    static func corpus(_ ext: String) throws -> [[UInt8]] {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.corpusDirectory.path)
            .filter { $0.hasSuffix("." + ext) }.sorted()
        XCTAssertFalse(names.isEmpty, "no *.\(ext) seeds in \(Self.corpusDirectory.path)")
        return try names.map { [UInt8](try Data(contentsOf: Self.corpusDirectory.appendingPathComponent($0))) }
    }

    let receiver = PushFixture.receiver(allowPlaintext: true)
    let plainQuery = PushQuery(signature: PushFixture.sha1Hex([PushFixture.token, FuzzTests.timestamp, FuzzTests.nonce]),
                               timestamp: FuzzTests.timestamp, nonce: FuzzTests.nonce)

    // MARK: the parsers

    func testXMLPushParsing() throws {
        let tally = Tally()
        lastTally = tally
        try fuzz("XML push", corpus: try corpus("xml"), seed: 0x5EED_0001) { input in
            try tally.outcome(self.receiver, input) { try self.receiver.open(query: self.plainQuery, body: Data(input)) }
        }
        XCTAssertGreaterThan(tally["parsed"], Self.iterations / 50, "mutations should leave many XML pushes parseable: \(tally)")
        XCTAssertGreaterThan(tally["invalid_xml"], 0, "\(tally)")
        XCTAssertGreaterThan(tally["xml_declaration_forbidden"], 0, "\(tally)")
        XCTAssertGreaterThan(tally["nesting_too_deep"], 0, "\(tally)")
    }

    func testJSONPushParsing() throws {
        let tally = Tally()
        lastTally = tally
        try fuzz("JSON push", corpus: try corpus("json"), seed: 0x5EED_0002) { input in
            try tally.outcome(self.receiver, input) { try self.receiver.open(query: self.plainQuery, body: Data(input)) }
        }
        XCTAssertGreaterThan(tally["parsed"], Self.iterations / 50, "\(tally)")
        XCTAssertGreaterThan(tally["invalid_json"], 0, "\(tally)")
        XCTAssertGreaterThan(tally["nesting_too_deep"], 0, "\(tally)")
    }

    /// The decrypted frame `random16 | len4 | msg | appid | PKCS#7(32)` is what is mutated; it is then
    /// encrypted with the real key and signed, so every input reaches unpadding, the length field,
    /// the appid check and the inner parser.
    func testSecureModeFrame() throws {
        let messages = try corpus("json") + corpus("xml")
        let frames = messages.map { Self.frame($0) }
        let key = PushFixture.key
        let tally = Tally()
        lastTally = tally
        try fuzz("secure frame", corpus: frames, seed: 0x5EED_0003) { input in
            var plain = input.isEmpty ? [0] : input
            // Mostly whole 32-byte blocks (WeChat's), sometimes 16 (AES's own block, which WeChat refuses).
            let block = plain.count % 7 == 0 ? 16 : 32
            let pad = (block - plain.count % block) % block
            plain += [UInt8](repeating: UInt8(pad), count: pad)
            let encrypt = Data(try AES256CBC.encrypt(key: key.key, iv: key.iv, plaintext: plain)).base64EncodedString()
            let (query, body) = Self.secure(encrypt: encrypt)
            try tally.outcome(self.receiver, body) { try self.receiver.open(query: query, body: Data(body)) }
        }
        for code in ["parsed", "bad_padding", "bad_message_length", "appid_mismatch", "invalid_ciphertext_length"] {
            XCTAssertGreaterThan(tally[code], 0, "the secure-mode path '\(code)' was never reached: \(tally)")
        }
        XCTAssertGreaterThan(tally["invalid_json"] + tally["invalid_xml"], 0, "the inner parser was never reached: \(tally)")
    }

    /// The base64 `Encrypt` text is what is mutated (signed after mutation): base64 decoding and
    /// ciphertext length checks, and AES over arbitrary blocks.
    func testSecureModeEncryptText() throws {
        let messages = try corpus("json") + corpus("xml")
        let key = PushFixture.key
        let texts = try messages.map {
            Array(try MessageCipher.encrypt($0, appId: PushFixture.appId, key: key, random: Self.prefix).utf8)
        }
        let tally = Tally()
        lastTally = tally
        try fuzz("Encrypt text", corpus: texts, seed: 0x5EED_0004) { input in
            let (query, body) = Self.secure(encrypt: String(decoding: input, as: UTF8.self))
            try tally.outcome(self.receiver, body) { try self.receiver.open(query: query, body: Data(body)) }
        }
        for code in ["parsed", "invalid_base64", "invalid_ciphertext_length", "bad_padding"] {
            XCTAssertGreaterThan(tally[code], 0, "the path '\(code)' was never reached: \(tally)")
        }
    }

    /// The GET URL check's query. A `signature` of `@SIGN@` in a seed is replaced by the correct
    /// signature over the (mutated) timestamp and nonce, so the echostr checks are reached too.
    func testURLCheck() throws {
        let tally = Tally()
        lastTally = tally
        try fuzz("URL check", corpus: try corpus("query"), seed: 0x5EED_0005) { input in
            let query = Self.query(input)
            do {
                let echo = try self.receiver.verifyURL(query)
                guard echo == query.echostr, echo.utf8.count <= 512, echo.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                    throw FuzzViolation("verifyURL answered an echostr that is not the checked one")
                }
                tally.count("parsed")
            } catch let error as WeChatPushError {
                try Tally.checkRefusal(error)
                tally.count(error.code)
            }
        }
        for code in ["parsed", "bad_signature", "invalid_parameter", "missing_parameter"] {
            XCTAssertGreaterThan(tally[code], 0, "\(code) never reached: \(tally)")
        }
    }

    // MARK: harness

    override func tearDown() {
        if let tally = lastTally { print("outcomes: \(tally)") }
        lastTally = nil
        super.tearDown()
    }

    private var lastTally: Tally?

    func fuzz(_ name: String, corpus: [[UInt8]], seed fallback: UInt64, body: ([UInt8]) throws -> Void) throws {
        let seed = MutationFuzzer.seed(default: fallback)
        let report = MutationFuzzer.run(corpus: corpus, iterations: Self.iterations, seed: seed, timeBudget: .seconds(2),
                                        extraTokens: Self.tokens, body: body)
        print("fuzz \(name): \(report)")
        XCTAssertTrue(report.failures.isEmpty, "\(name): \(report)")
        XCTAssertEqual(report.iterations, Self.iterations)
    }

    static let tokens: [[UInt8]] = ["<Encrypt>", "</Encrypt>", "\"Encrypt\":\"", "AppleSubscriptionInfo", "OutTradeNo",
                                    "xpay_goods_deliver_notify", "xpay_subscribe_ios_refund_query_notify", PushFixture.appId,
                                    "==", "=", "+/", "@SIGN@", "&echostr=", "&timestamp=", "&nonce=", "&signature="]
        .map { Array($0.utf8) }

    static func frame(_ message: [UInt8]) -> [UInt8] {
        let n = UInt32(message.count)
        var full = prefix + [UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]
        full += message + Array(PushFixture.appId.utf8)
        let pad = 32 - full.count % 32
        return full + [UInt8](repeating: UInt8(pad), count: pad)
    }

    /// A JSON secure-mode envelope with a correct msg_signature over exactly this Encrypt text.
    static func secure(encrypt: String) -> (PushQuery, [UInt8]) {
        let query = PushQuery(signature: plainSignature, timestamp: timestamp,
                              nonce: nonce, encryptType: "aes",
                              msgSignature: PushSignature.compute([PushFixture.token, timestamp, nonce, encrypt]))
        var body = Array(#"{"ToUserName":"gh_97417a04a28d","Encrypt":""#.utf8)
        jsonEscape(encrypt, into: &body)
        body += Array(#""}"#.utf8)
        return (query, body)
    }

    /// Over a raw buffer with a fast path: per-byte Array iteration in a debug build made this
    /// harness step cost as much as opening the push.
    static func jsonEscape(_ s: String, into out: inout [UInt8]) {
        let bytes = Array(s.utf8)
        let plain = bytes.withUnsafeBufferPointer { b in
            var i = 0
            while i < b.count { let c = b[i]; if c < 0x20 || c == 0x22 || c == 0x5C { return false }; i += 1 }
            return true
        }
        if plain { out.append(contentsOf: bytes); return }
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        for b in bytes {
            switch b {
            case 0x22, 0x5C: out += [0x5C, b]
            case 0..<0x20: out += [0x5C, 0x75, 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 0xF)]]
            default: out.append(b)
            }
        }
    }

    /// `a=b&c=d` without percent-decoding (the HTTP layer decodes; here every byte is hostile).
    static func query(_ input: [UInt8]) -> PushQuery {
        var params: [String: String] = [:]
        for pair in input.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            params[String(decoding: parts[0], as: UTF8.self)] = parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : ""
        }
        var query = PushQuery(params)
        if query.signature == "@SIGN@" {
            query.signature = PushSignature.compute([PushFixture.token, query.timestamp ?? "", query.nonce ?? ""])
        }
        return query
    }
}

struct FuzzViolation: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Counts outcomes by error code ("parsed" for success), and checks each outcome against the contract.
final class Tally: CustomStringConvertible {
    private var counts: [String: Int] = [:]

    subscript(code: String) -> Int { counts[code, default: 0] }
    func count(_ code: String) { counts[code, default: 0] += 1 }
    var description: String { counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") }

    /// A push either opens — and then its payload is JSON, its raw evidence gives back the exact
    /// body, and the xpay decoding answers a notification or a typed refusal — or is refused with
    /// a request-class WeChatPushError whose message reveals no secret.
    func outcome(_ receiver: PushReceiver, _ body: [UInt8], _ open: () throws -> ReceivedPush) throws {
        let push: ReceivedPush
        do {
            push = try open()
        } catch let error as WeChatPushError {
            try Self.checkRefusal(error)
            count(error.code)
            return
        }
        guard case .object = push.message else { throw FuzzViolation("opened a push whose message is not an object") }
        guard RawPush.body(of: push.raw) == body else { throw FuzzViolation("raw evidence does not give back the exact body") }
        // Dedupe hashes and XML payloads are the canonical JSON of the message: it must encode
        // (a non-finite number would make every such message hash alike).
        guard push.message.canonicalJSON() != Data("null".utf8) else {
            throw FuzzViolation("the parsed message has no canonical JSON (a non-finite number?)")
        }
        // The stored payload must read back as the message that was parsed (XML is converted).
        guard let back = try? JSONDecoder().decode(JSONValue.self, from: push.payload), back == push.message else {
            throw FuzzViolation("payload does not decode to the parsed message: \(String(decoding: push.payload.prefix(200), as: UTF8.self))")
        }
        // Never refused after authentication: readable, or kept as unreadable evidence.
        let notification = XPayNotification(push)
        let event = notification.event()
        let facts = FactDecoder.facts(of: event)
        if let reason = notification.unreadableReason {
            guard facts.map(\.kind) == [.unreadable] else { throw FuzzViolation("unreadable push (\(reason)) decodes to \(facts.map(\.kind))") }
            count("unreadable")
        } else if notification.asking != nil {
            let f = try RefundEvidence.facts(for: RefundEvidence.inquiry(in: facts), known: [], customerRefundCases: [])
            _ = RefundInquiryAnswer.event(RefundPolicy.default.decide(f), for: notification, decidedInMs: 1, budgetMs: 2500, policyDigest: nil)
        }
        count("parsed")
    }

    static let secrets = [PushFixture.token, PushFixture.keyText].map { Array($0.utf8) }

    static func checkRefusal(_ error: WeChatPushError) throws {
        guard [400, 401, 413, 422].contains(error.kind.httpStatus) else {
            throw FuzzViolation("a request was refused as \(error.kind.httpStatus) (\(error)); only the server's settings may be a 500")
        }
        let text = Array(error.description.utf8)
        for secret in secrets where contains(text, secret) {
            throw FuzzViolation("error message reveals a secret: \(error.code)")
        }
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] {
            if haystack[i..<(i + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}

/// The fuzzer's own promises: reproducible inputs, and failures reported with what reproduces them.
final class MutationFuzzerTests: XCTestCase {
    let corpus: [[UInt8]] = [Array(#"{"a":[1,2,{"b":"c"}]}"#.utf8), Array("<xml><A>1</A></xml>".utf8)]

    func testSameSeedSameInputsAndEachIterationReproducible() {
        var first: [[UInt8]] = [], second: [[UInt8]] = []
        _ = MutationFuzzer.run(corpus: corpus, iterations: 300, seed: 42) { first.append($0) }
        _ = MutationFuzzer.run(corpus: corpus, iterations: 300, seed: 42) { second.append($0) }
        XCTAssertEqual(first, second)
        for i in [0, 7, 299] {
            XCTAssertEqual(MutationFuzzer.input(corpus: corpus, seed: 42, iteration: i), first[i], "iteration \(i)")
        }
        var other: [[UInt8]] = []
        _ = MutationFuzzer.run(corpus: corpus, iterations: 300, seed: 43) { other.append($0) }
        XCTAssertNotEqual(first, other)
        // Mutations, not copies: most inputs differ from every seed.
        XCTAssertGreaterThan(first.filter { !corpus.contains($0) }.count, 250)
    }

    func testFailuresCarrySeedIterationAndInput() {
        struct Refused: Error {}
        let report = MutationFuzzer.run(corpus: corpus, iterations: 1_000, seed: 0xF00D, maxFailures: 3) { input in
            if input.contains(UInt8(ascii: "<")) { throw Refused() }
        }
        XCTAssertEqual(report.failures.count, 3)
        XCTAssertLessThan(report.iterations, 1_000, "the run stops at maxFailures")
        for f in report.failures {
            XCTAssertEqual(f.seed, 0xF00D)
            XCTAssertEqual(MutationFuzzer.input(corpus: corpus, seed: 0xF00D, iteration: f.iteration), f.input)
            XCTAssertTrue(f.description.contains("seed=0xf00d iteration=\(f.iteration)"), f.description)
            XCTAssertTrue(f.description.contains(MutationFuzzer.hex(Array(f.input.prefix(8)), limit: 8)), f.description)
        }
    }

    func testAnInputOverTheTimeBudgetIsAFailure() {
        let report = MutationFuzzer.run(corpus: corpus, iterations: 5, seed: 1, timeBudget: .milliseconds(20),
                                        hangLimit: .seconds(30)) { _ in Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertEqual(report.failures.count, 5)
        XCTAssertTrue(report.failures[0].reason.contains("budget"), report.failures[0].reason)
        XCTAssertGreaterThanOrEqual(report.slowest, .milliseconds(50))
    }

    func testInputsRespectMaxLength() {
        let report = MutationFuzzer.run(corpus: corpus, iterations: 2_000, seed: 9, maxLength: 100) { input in
            if input.count > 100 { throw FuzzViolation("\(input.count) bytes") }
        }
        XCTAssertTrue(report.failures.isEmpty, "\(report)")
    }
}

/// What the fuzzer found, pinned as plain regression tests.
final class FuzzFindingTests: XCTestCase {
    let receiver = PushFixture.receiver(allowPlaintext: true)
    let query = PushQuery(signature: FuzzTests.plainSignature, timestamp: FuzzTests.timestamp, nonce: FuzzTests.nonce)

    func open(_ body: [UInt8]) throws -> ReceivedPush { try receiver.open(query: query, body: Data(body)) }

    /// Seconds × 1000 overflowed Int64 and trapped the process (seed 0x5eed0002, iteration 2256).
    func testTimestampsBeyondMillisecondRangeDoNotTrap() throws {
        guard case .object(var o) = PushFixture.refundNotify() else { return XCTFail("fixture is an object") }
        o["RefundSuccTimestamp"] = .integer(6_479_066_520_700_676_582)
        let notify = XPayNotification(try open(PushFixture.encode(.object(o), .json)))
        XCTAssertEqual(notify.event().signedAt, 1_776_200_000_000, "an impossible time falls back to CreateTime")

        o = PushFixture.header("some_other_event", createTime: .max).merging(["MsgId": .string("1")]) { a, _ in a }
        XCTAssertNil(XPayNotification(try open(PushFixture.encode(.object(o), .xml))).event().signedAt)

        let inquiry = XPayNotification(try open(PushFixture.encode(
            PushFixture.refundInquiry(refundTime: "9223372036854775807"), .json)))
        XCTAssertNotNil(inquiry.unreadableReason, "a refund_time beyond milliseconds is kept as unreadable evidence")
        XCTAssertNil(inquiry.asking)
    }

    /// FoundationXML trapped on an element name that is not UTF-8 (seed 0x5eed0001, iteration 9).
    func testXMLThatIsNotUTF8IsRefused() {
        let body = Array("<xml><E".utf8) + [0xDA] + Array("F>1</E".utf8) + [0xDA] + Array("F></xml>".utf8)
        XCTAssertEqual(pushError { try open(body) }, .invalidXML("body is not valid UTF-8"))
        XCTAssertEqual(pushError { try open(Array("<xml><A>".utf8) + [0xFF] + Array("</A></xml>".utf8)) }?.code, "invalid_xml")
        XCTAssertNoThrow(try open(Array("<xml><A>中文</A></xml>".utf8)))
    }

    /// JSONDecoder accepts `\u0000`; jsonb cannot store it, so the append would fail after parsing.
    func testNULEscapeIsRefusedButAnEscapedBackslashIsNot() throws {
        XCTAssertEqual(pushError { try open(Array(#"{"MsgType":"event","A":"x\u0000"}"#.utf8)) }?.code, "invalid_json")
        let ok = try open(Array(#"{"MsgType":"event","A":"\\u0000"}"#.utf8))
        XCTAssertEqual(ok.message.text("A"), #"\u0000"#)
    }

    /// JSONDecoder keeps the first of two equal member names and jsonb the last: refused, however spelled.
    func testDuplicateMemberNamesAreRefused() throws {
        for body in [#"{"OutTradeNo":"A","MsgType":"event","OutTradeNo":"B"}"#, #"{"a":1,"\u0061":2}"#,
                     #"{"x":[{"k":1,"k":1}]}"#, #"{"x":{"y":{"z":1,"z":2}}}"#] {
            XCTAssertEqual(pushError { try open(Array(body.utf8)) }?.code, "invalid_json", body)
        }
        let nested = try open(Array(#"{"a":{"a":{"a":"a:b"}},"b":[{"a":1},{"a":2}],"c":"{\"a\":1}"}"#.utf8))
        XCTAssertEqual(nested.message["b"], .array([.object(["a": .integer(1)]), .object(["a": .integer(2)])]))
    }
}

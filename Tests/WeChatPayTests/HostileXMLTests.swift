import Foundation
import LedgerCore
@testable import WeChatPay
import XCTest

/// Issue 22 item 3: no XML parser runs on bytes an unauthenticated sender chose — `Encrypt` is
/// taken from the envelope by a strict scanner, and `msg_signature` checked, before any parser —
/// and the scanner refuses `<!` and `<?` wherever they are not inside a CDATA section it verified.
final class HostileXMLTests: XCTestCase {
    let r = PushFixture.receiver()

    func pushError(_ body: () throws -> Any) -> WeChatPushError? {
        do { _ = try body(); return nil } catch { return error as? WeChatPushError }
    }

    func parserRuns() -> Int { PushCodec.xmlParserRuns.load(ordering: .relaxed) }

    /// The pre-check this replaced skipped from any `<![CDATA[` to the next `]]>`; a processing
    /// instruction can hold `<![CDATA[`, so the DOCTYPE after the instruction's `?>` reached the
    /// parser unseen (an external DTD reference parsed fine, only a Foundation internal kept it
    /// from being fetched).
    func testAProcessingInstructionOpeningACDATASectionSmugglesNoDoctype() throws {
        let smuggled = #"<?x <![CDATA[ ?><!DOCTYPE xml SYSTEM "http://attacker.example/x.dtd"><xml><Event>x</Event></xml><!-- ]]> -->"#
        let q = PushFixture.plaintext(.object([:]), .xml).0
        let before = parserRuns()
        XCTAssertEqual(pushError { try r.open(query: q, body: Data(smuggled.utf8)) }, .forbiddenXMLDeclaration("<?x"))
        XCTAssertEqual(parserRuns(), before, "the parser must not see it")
        // The same inside an authentic encrypted message: refused before the parser too.
        let encrypt = try MessageCipher.encrypt(Array(smuggled.utf8), appId: PushFixture.appId, key: PushFixture.key)
        let (sq, sbody) = PushFixture.secureEnvelope(encrypt: encrypt, format: .xml)
        XCTAssertEqual(pushError { try r.open(query: sq, body: sbody) }, .forbiddenXMLDeclaration("<?x"))
        // And inside the envelope: refused before the signature is even computed.
        let envelope = #"<?x <![CDATA[ ?><!DOCTYPE xml SYSTEM "http://attacker.example/x.dtd"><xml><Encrypt>AAAA</Encrypt></xml><!-- ]]> -->"#
        XCTAssertEqual(pushError { try r.open(query: sq, body: Data(envelope.utf8)) }, .forbiddenXMLDeclaration("<?x"))
        XCTAssertEqual(parserRuns(), before)
    }

    func testAnEncryptedEnvelopeIsNeverParsedBeforeItsSignatureHolds() throws {
        let message = PushFixture.encode(.object(PushFixture.header("xpay_subscribe_ios_deliver_notify")), .xml)
        let encrypt = try MessageCipher.encrypt(message, appId: PushFixture.appId, key: PushFixture.key)
        let (q, body) = PushFixture.secureEnvelope(encrypt: encrypt, format: .xml)
        var forged = q
        forged.msgSignature = String(repeating: "0", count: 40)
        let before = parserRuns()
        XCTAssertEqual(pushError { try r.open(query: forged, body: body) }, .badMsgSignature)
        XCTAssertEqual(parserRuns(), before, "a forged push's envelope must not reach the XML parser")
        // Envelopes no signature can rescue are refused by the scanner, still without a parser.
        let hostile = [
            (#"<xml><!DOCTYPE x><Encrypt>\#(encrypt)</Encrypt></xml>"#, WeChatPushError.forbiddenXMLDeclaration("<!DOCTYPE")),
            (#"<xml><!-- hi --><Encrypt>\#(encrypt)</Encrypt></xml>"#, .forbiddenXMLDeclaration("<!--")),
            (#"<xml><Encrypt a="1">\#(encrypt)</Encrypt></xml>"#, nil),
            (#"<![CDATA[x]]><xml><Encrypt>\#(encrypt)</Encrypt></xml>"#, .forbiddenXMLDeclaration("a markup declaration")),
            (#"<xml><Encrypt><![CDATA[\#(encrypt)</Encrypt></xml>"#, .invalidXML("unterminated CDATA section")),
            (#"<xml><Encrypt>\#(encrypt)</Encrypt></xml><xml/>"#, .invalidXML("more than one root element")),
            (#"<root><Encrypt>\#(encrypt)</Encrypt></root>"#, .invalidXML("root element must be <xml>")),
            (#"<xml><Encrypt>\#(encrypt)</Encrypt>"#, nil),
        ]
        for (text, expected) in hostile {
            let error = pushError { try r.open(query: q, body: Data(text.utf8)) }
            if let expected { XCTAssertEqual(error, expected, text) } else { XCTAssertEqual(error?.code, "invalid_xml", text) }
        }
        XCTAssertEqual(parserRuns(), before)
        // The authentic push opens: one parser run, for the decrypted message only.
        let opened = try r.open(query: q, body: body)
        XCTAssertEqual(opened.event, "xpay_subscribe_ios_deliver_notify")
        XCTAssertEqual(opened.mode, .secure)
        XCTAssertEqual(parserRuns(), before + 1)
    }

    /// `Encrypt` read by the scanner is what WeChat signs: as CDATA, as plain text, between
    /// blanks; a compatible-mode envelope's other members still mark it compatible.
    func testTheScannerReadsEncryptAsWeChatWritesIt() throws {
        let message = PushFixture.encode(.object(PushFixture.header("xpay_subscribe_ios_deliver_notify")), .xml)
        let encrypt = try MessageCipher.encrypt(message, appId: PushFixture.appId, key: PushFixture.key)
        let (q, _) = PushFixture.secureEnvelope(encrypt: encrypt, format: .xml)
        for text in [
            "<xml><ToUserName><![CDATA[gh_97417a04a28d]]></ToUserName><Encrypt><![CDATA[\(encrypt)]]></Encrypt></xml>",
            "\u{FEFF}<xml>\n  <Encrypt>\(encrypt)</Encrypt>\n</xml>\n",
        ] {
            XCTAssertEqual(try r.open(query: q, body: Data(text.utf8)).mode, .secure, text)
        }
        let compatible = "<xml><ToUserName>gh</ToUserName><MsgType>event</MsgType><Encrypt>\(encrypt)</Encrypt></xml>"
        XCTAssertEqual(try r.open(query: q, body: Data(compatible.utf8)).mode, .compatible)
        XCTAssertEqual(pushError { try r.open(query: q, body: Data("<xml><Other>x</Other></xml>".utf8)) }, .missingEncrypt)
    }

    /// WeChat JSON gets every rule of `JSONGuard`: what jsonb cannot store (trailing comma, huge
    /// number, NUL) is a 400 now instead of a 500 after the push was accepted.
    func testJSONPushesPassTheSharedGuard() {
        let q = PushFixture.plaintext(.object([:]), .json).0
        for (body, expected) in [
            (#"{"Event":"x","MsgType":"event",}"#, "comma before a closing bracket"),
            (#"{"Event":"x","Amount":1\#(String(repeating: "9", count: 1001))}"#, "more than 1000 digits"),
            (#"{"Event":"x","Amount":1e99999}"#, "exponent beyond"),
            (#"{"Event":"x\u0000"}"#, "\\u0000"),
            (#"{"Event":"x","Event":"y"}"#, "same member name twice"),
        ] {
            let error = pushError { try r.open(query: q, body: Data(body.utf8)) }
            XCTAssertEqual(error?.code, "invalid_json", body)
            XCTAssertTrue(error?.message.contains(expected) ?? false, "\(body): \(error?.message ?? "accepted")")
        }
    }
}

import Crypto
import Foundation
import LedgerCore
@testable import WeChatPay
import XCTest

/// Hostile and broken pushes: each is refused with a clear error before anything is produced.
final class TransportTests: XCTestCase {
    let r = PushFixture.receiver()

    func testBadMsgSignatureRefused() {
        var (q, body) = PushFixture.secure(PushFixture.deliver(), .json)
        q.msgSignature = String(q.msgSignature!.dropLast()) + (q.msgSignature!.hasSuffix("0") ? "1" : "0")
        let e = pushError { try r.open(query: q, body: body) }
        XCTAssertEqual(e, .badMsgSignature)
        XCTAssertEqual(e?.kind.httpStatus, 401)
        // A valid plain `signature` does not stand in for msg_signature.
        q.msgSignature = nil
        XCTAssertEqual(pushError { try r.open(query: q, body: body) }, .missingParameter("msg_signature"))
    }

    func testMsgSignatureCoversEncrypt() throws {
        // Signature computed for one ciphertext, body carrying another: refused.
        let (q, _) = PushFixture.secure(PushFixture.deliver(order: "A"), .json)
        let (_, otherBody) = PushFixture.secure(PushFixture.deliver(order: "B"), .json)
        XCTAssertEqual(pushError { try r.open(query: q, body: otherBody) }, .badMsgSignature)
    }

    func testBadPlaintextSignatureRefused() {
        var (q, body) = PushFixture.plaintext(PushFixture.deliver(), .xml)
        q.signature = PushFixture.sha1Hex(["wrong-token", q.timestamp!, q.nonce!])
        let e = pushError { try r.open(query: q, body: body) }
        XCTAssertEqual(e, .badSignature)
        XCTAssertEqual(e?.kind, .unauthenticated)
        q.signature = nil
        XCTAssertEqual(pushError { try r.open(query: q, body: body) }, .missingParameter("signature"))
    }

    func testPlaintextRefusedUnlessEnabled() {
        let strict = PushFixture.receiver(allowPlaintext: false)
        let (q, body) = PushFixture.plaintext(PushFixture.deliver(), .json)
        let e = pushError { try strict.open(query: q, body: body) }
        XCTAssertEqual(e, .plaintextRefused)
        XCTAssertEqual(e?.kind.httpStatus, 422)
        let (sq, sbody) = PushFixture.secure(PushFixture.deliver(), .json)
        XCTAssertNoThrow(try strict.open(query: sq, body: sbody))
    }

    func testWrongAppIdInsideCiphertext() {
        let (q, body) = PushFixture.secure(PushFixture.deliver(), .json, appId: "wx0000000000000bad")
        let e = pushError { try r.open(query: q, body: body) }
        XCTAssertEqual(e, .appIdMismatch)
        // A prefix of our appid is not our appid either.
        let (q2, body2) = PushFixture.secure(PushFixture.deliver(), .json, appId: String(PushFixture.appId.dropLast()))
        XCTAssertEqual(pushError { try r.open(query: q2, body: body2) }, .appIdMismatch)
        let (q3, body3) = PushFixture.secure(PushFixture.deliver(), .json, appId: PushFixture.appId + "x")
        XCTAssertEqual(pushError { try r.open(query: q3, body: body3) }, .appIdMismatch)
    }

    /// Ciphertext whose plaintext we choose, so the padding can be wrong in controlled ways.
    func encryptRaw(_ full: [UInt8]) -> String {
        let k = PushFixture.key
        return Data(try! AES256CBC.encrypt(key: k.key, iv: k.iv, plaintext: full)).base64EncodedString()
    }

    func validFull(_ msg: String) -> [UInt8] {
        let m = Array(msg.utf8)
        var full = [UInt8](repeating: 7, count: 16) + [0, 0, UInt8(m.count >> 8), UInt8(m.count & 0xFF)] + m + Array(PushFixture.appId.utf8)
        let pad = 32 - full.count % 32
        full += [UInt8](repeating: UInt8(pad), count: pad)
        return full
    }

    func testBadPadding() {
        var full = validFull(#"{"Event":"x"}"#)
        let n = full.count
        // Pad byte 0, pad byte 33 (more than the 32-byte block), inconsistent pad bytes.
        for mutate in [{ (f: inout [UInt8]) in f[n - 1] = 0 }, { f in f[n - 1] = 33 },
                       { f in f[n - 2] = f[n - 2] &+ 1 }] {
            var f = full
            mutate(&f)
            let (q, body) = PushFixture.secureEnvelope(encrypt: encryptRaw(f), format: .json)
            XCTAssertEqual(pushError { try r.open(query: q, body: body) }, .badPadding)
        }
        // The unmodified plaintext opens: the mutations, not the builder, caused the refusals.
        let (q, body) = PushFixture.secureEnvelope(encrypt: encryptRaw(full), format: .json)
        XCTAssertEqual(try r.open(query: q, body: body).event, "x")
        // A length field pointing past the end.
        full[18] = 0xFF
        let (q2, body2) = PushFixture.secureEnvelope(encrypt: encryptRaw(full), format: .json)
        XCTAssertEqual(pushError { try r.open(query: q2, body: body2) }, .badMessageLength)
    }

    func testPadOf32Accepted() throws {
        // A FullStr that is already a multiple of 32 carries a whole block of padding (pad = 32),
        // which a 16-byte PKCS#7 unpadder would refuse.
        let appLen = PushFixture.appId.utf8.count
        let msgLen = 64 - 20 - appLen
        let msg = #"{"Event":""# + String(repeating: "a", count: msgLen - 12) + #""}"#
        XCTAssertEqual(msg.utf8.count, msgLen)
        let full = validFull(msg)
        XCTAssertEqual(full.count, 96)
        XCTAssertEqual(full.last, 32)
        let (q, body) = PushFixture.secureEnvelope(encrypt: encryptRaw(full), format: .json)
        XCTAssertEqual(try r.open(query: q, body: body).event?.count, msgLen - 12)
    }

    func testTruncatedBase64() throws {
        let (q0, body0) = PushFixture.secure(PushFixture.deliver(), .json)
        let push = try r.open(query: q0, body: body0)
        XCTAssertEqual(push.event, XPayEventName.goodsDeliver)
        let encrypt = try JSONDecoder().decode(JSONValue.self, from: body0).text("Encrypt")!
        // Not a multiple of 4: not base64 at all.
        let (q1, body1) = PushFixture.secureEnvelope(encrypt: String(encrypt.dropLast(3)), format: .json)
        let e1 = pushError { try r.open(query: q1, body: body1) }
        XCTAssertEqual(e1, .invalidBase64)
        XCTAssertEqual(e1?.kind.httpStatus, 400)
        // Valid base64 of a truncated ciphertext: not a multiple of 32 bytes.
        let cut = Data(Data(base64Encoded: encrypt)!.dropLast(5)).base64EncodedString()
        let (q2, body2) = PushFixture.secureEnvelope(encrypt: cut, format: .json)
        XCTAssertEqual(pushError { try r.open(query: q2, body: body2) }, .invalidCiphertextLength(Data(base64Encoded: encrypt)!.count - 5))
        // Whole blocks cut off the end: the padding or the appid no longer checks out.
        let blockCut = Data(Data(base64Encoded: encrypt)!.dropLast(32)).base64EncodedString()
        let (q3, body3) = PushFixture.secureEnvelope(encrypt: blockCut, format: .json)
        XCTAssertEqual(pushError { try r.open(query: q3, body: body3) }?.kind, .unauthenticated)
    }

    func testDoctypeAndExternalEntityRefused() {
        let xxe = #"<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><xml><Event>&xxe;</Event></xml>"#
        let q = PushFixture.plaintext(.object([:]), .xml).0
        // The XML declaration is a processing instruction: refused before the DOCTYPE is reached.
        XCTAssertEqual(pushError { try r.open(query: q, body: Data(xxe.utf8)) }, .forbiddenXMLDeclaration("<?xml"))
        let lower = #"<!doctype xml SYSTEM "http://attacker.example/x.dtd"><xml><Event>x</Event></xml>"#
        XCTAssertEqual(pushError { try r.open(query: q, body: Data(lower.utf8)) }, .forbiddenXMLDeclaration("<!DOCTYPE"))
        let entity = #"<xml><!ENTITY a "b"><Event>x</Event></xml>"#
        XCTAssertEqual(pushError { try r.open(query: q, body: Data(entity.utf8)) }, .forbiddenXMLDeclaration("<!ENTITY"))
        // Billion laughs never reaches the parser either.
        let laughs = #"<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]><xml><a>&lol2;</a></xml>"#
        XCTAssertEqual(pushError { try r.open(query: q, body: Data(laughs.utf8)) }?.code, "xml_declaration_forbidden")
        // An undeclared entity reference is simply malformed XML.
        XCTAssertEqual(pushError { try r.open(query: q, body: Data("<xml><Event>&xxe;</Event></xml>".utf8)) }?.code, "invalid_xml")
    }

    func testDoctypeInsideEncryptedMessageRefused() {
        let inner = #"<!DOCTYPE xml [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><xml><Event>&xxe;</Event></xml>"#
        let encrypt = try! MessageCipher.encrypt(Array(inner.utf8), appId: PushFixture.appId, key: PushFixture.key)
        let (q, body) = PushFixture.secureEnvelope(encrypt: encrypt, format: .xml)
        XCTAssertEqual(pushError { try r.open(query: q, body: body) }, .forbiddenXMLDeclaration("<!DOCTYPE"))
    }

    func testCDATAMentioningDoctypeAccepted() throws {
        let msg = JSONValue.object(["MsgType": .string("text"), "Content": .string("<!DOCTYPE is just text here"),
                                    "MsgId": .string("1")])
        let (q, body) = PushFixture.plaintext(msg, .xml)
        let push = try r.open(query: q, body: body)
        XCTAssertEqual(push.message.text("Content"), "<!DOCTYPE is just text here")
    }

    func testTenMegabyteBodyRefusedBeforeParsing() {
        // Ten megabytes of '[' would be a nesting bomb if anything parsed it.
        let huge = Data(repeating: UInt8(ascii: "["), count: 10 * 1024 * 1024)
        let (q, _) = PushFixture.secure(PushFixture.deliver(), .json)
        let start = Date()
        let e = pushError { try r.open(query: q, body: huge) }
        XCTAssertEqual(e, .bodyTooLarge(limit: 256 * 1024, actual: 10 * 1024 * 1024))
        XCTAssertEqual(e?.kind.httpStatus, 413)
        XCTAssertLessThan(Date().timeIntervalSince(start), 0.5)
        // One byte over a configured limit is refused; at the limit it is parsed.
        let small = PushReceiver(config: PushFixture.config(maxBodyBytes: 10))
        XCTAssertEqual(pushError { try small.open(query: q, body: Data(repeating: 0x20, count: 11)) }, .bodyTooLarge(limit: 10, actual: 11))
        XCTAssertEqual(pushError { try small.open(query: q, body: Data(repeating: 0x20, count: 10)) }, .unknownBodyFormat)
    }

    func testNestingBounded() {
        let (q, _) = PushFixture.plaintext(.object([:]), .json)
        let deepJSON = String(repeating: #"{"a":"#, count: 40) + "1" + String(repeating: "}", count: 40)
        XCTAssertEqual(pushError { try r.open(query: q, body: Data(deepJSON.utf8)) }, .nestingTooDeep(limit: 16))
        // Brackets inside strings do not count.
        let inString = #"{"MsgType":"text","Content":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[","MsgId":"2"}"#
        XCTAssertNoThrow(try r.open(query: q, body: Data(inString.utf8)))
        let deepXML = "<xml>" + String(repeating: "<a>", count: 40) + "x" + String(repeating: "</a>", count: 40) + "</xml>"
        XCTAssertEqual(pushError { try r.open(query: q, body: Data(deepXML.utf8)) }, .nestingTooDeep(limit: 16))
    }

    func testMalformedBodies() {
        let (q, _) = PushFixture.plaintext(.object([:]), .json)
        for (body, code) in [("", "unknown_body_format"), ("hello", "unknown_body_format"), ("{\"a\":", "invalid_json"),
                             ("[1,2]", "unknown_body_format"), ("<xml><a></xml>", "invalid_xml"),
                             ("<root><a>1</a></root>", "invalid_xml"), ("<xml>text</xml>", "not_an_object"),
                             ("<xml><a>1</a>loose<b>2</b></xml>", "invalid_xml")] {
            XCTAssertEqual(pushError { try r.open(query: q, body: Data(body.utf8)) }?.code, code, body)
        }
        // encrypt_type=aes without an Encrypt member.
        var sq = PushFixture.secure(PushFixture.deliver(), .json).0
        XCTAssertEqual(pushError { try r.open(query: sq, body: Data(#"{"ToUserName":"gh"}"#.utf8)) }, .missingEncrypt)
        sq.encryptType = "rsa"
        XCTAssertEqual(pushError { try r.open(query: sq, body: Data(#"{"Encrypt":"x"}"#.utf8)) }?.code, "invalid_parameter")
        var noTs = q
        noTs.timestamp = nil
        XCTAssertEqual(pushError { try r.open(query: noTs, body: Data("{}".utf8)) }, .missingParameter("timestamp"))
        var badTs = q
        badTs.timestamp = "12a"
        XCTAssertEqual(pushError { try r.open(query: badTs, body: Data("{}".utf8)) }?.code, "invalid_parameter")
    }

    func testEncryptedPushWithoutConfiguredKey() {
        let keyless = PushFixture.receiver(key: nil)
        let (q, body) = PushFixture.secure(PushFixture.deliver(), .json)
        XCTAssertEqual(pushError { try keyless.open(query: q, body: body) }, .encryptedPushWithoutKey)
    }

    func testKeyRotation() throws {
        let rotated = PushFixture.receiver(key: PushFixture.otherKey, previous: PushFixture.key)
        // Sent with the previous key (WeChat has not switched yet).
        let (q, body) = PushFixture.secure(PushFixture.deliver(), .xml, key: PushFixture.key)
        let push = try rotated.open(query: q, body: body)
        XCTAssertTrue(push.usedPreviousKey)
        XCTAssertEqual(push.event, XPayEventName.goodsDeliver)
        // The reply goes back under the key that worked: the old-key receiver can open it.
        let reply = try rotated.reply(.success, to: push)
        XCTAssertEqual(try PushFixture.receiver().openReply(reply, format: .xml),
                       Array("<xml><ErrCode>0</ErrCode><ErrMsg><![CDATA[success]]></ErrMsg></xml>".utf8))
        // Sent with the new key.
        let (q2, body2) = PushFixture.secure(PushFixture.deliver(), .xml, key: PushFixture.otherKey)
        XCTAssertFalse(try rotated.open(query: q2, body: body2).usedPreviousKey)
        // Without the previous key configured, old-key pushes fail authentication.
        let newOnly = PushFixture.receiver(key: PushFixture.otherKey)
        XCTAssertEqual(pushError { try newOnly.open(query: q, body: body) }?.kind, .unauthenticated)
        // A third key is refused even with both configured.
        let third = try EncodingAESKey("jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C")
        let (q3, body3) = PushFixture.secure(PushFixture.deliver(), .xml, key: third)
        XCTAssertEqual(pushError { try rotated.open(query: q3, body: body3) }?.kind, .unauthenticated)
    }

    func testRepliesRoundTrip() throws {
        for format in [PushFormat.json, .xml] {
            let (q, body) = PushFixture.secure(PushFixture.deliver(), format)
            let push = try r.open(query: q, body: body)
            for reply in [PushReply.success, .failure(code: 1, message: "db down ]]> retry")] {
                let sent = try r.reply(reply, to: push)
                let env = try PushCodec.parse([UInt8](sent), format: format, maxDepth: 4)
                XCTAssertNotNil(env.text("Encrypt"))
                XCTAssertNotNil(env.int64("TimeStamp"))
                let plain = try r.openReply(sent, format: format)
                XCTAssertEqual(plain, [UInt8](reply.plaintext(format: format)))
                let decoded = try PushCodec.parse(plain, format: format, maxDepth: 4)
                if case .failure = reply {
                    XCTAssertEqual(decoded.int64("ErrCode"), 1)
                    XCTAssertEqual(decoded.text("ErrMsg"), "db down ]]> retry")
                } else {
                    XCTAssertEqual(decoded.int64("ErrCode"), 0)
                }
            }
            // Two replies to the same push differ (fresh random prefix) yet both verify; the nonce
            // is the request's unless another is given.
            let a = try r.reply(.success, to: push), b = try r.reply(.success, to: push)
            XCTAssertNotEqual(a, b)
            XCTAssertEqual(try PushCodec.parse([UInt8](a), format: format, maxDepth: 4).text("Nonce"), q.nonce)
            let own = try r.reply(.success, to: push, timestamp: 1_800_000_000, nonce: "424242")
            let ownEnv = try PushCodec.parse([UInt8](own), format: format, maxDepth: 4)
            XCTAssertEqual(ownEnv.text("Nonce"), "424242")
            XCTAssertEqual(ownEnv.int64("TimeStamp"), 1_800_000_000)
            XCTAssertNoThrow(try r.openReply(own, format: format))
            // A reply whose Encrypt was altered fails its MsgSignature.
            var env = try PushCodec.parse([UInt8](a), format: format, maxDepth: 4).objectValue!
            let enc = env["Encrypt"]!.text!
            env["Encrypt"] = .string((enc.first == "A" ? "B" : "A") + enc.dropFirst())
            let tampered = PushFixture.encode(.object(env), format)
            XCTAssertEqual(pushError { try r.openReply(Data(tampered), format: format) }, .badMsgSignature)
        }
        // Plaintext pushes get plaintext replies; the empty reply is never encrypted.
        let (pq, pbody) = PushFixture.plaintext(PushFixture.deliver(), .json)
        let plainPush = try r.open(query: pq, body: pbody)
        XCTAssertEqual(String(decoding: try r.reply(.success, to: plainPush), as: UTF8.self), #"{"ErrCode":0,"ErrMsg":"success"}"#)
        let (sq, sbody) = PushFixture.secure(PushFixture.deliver(), .json)
        XCTAssertEqual(try r.reply(.empty, to: r.open(query: sq, body: sbody)), Data())
    }

    func testURLVerification() throws {
        let ts = "1714036504", nonce = "1514711492"
        let q = PushQuery(signature: PushFixture.sha1Hex([PushFixture.token, ts, nonce]), timestamp: ts, nonce: nonce, echostr: "4375120948345356249")
        XCTAssertEqual(try r.verifyURL(q), "4375120948345356249")
        var noEcho = q
        noEcho.echostr = nil
        XCTAssertEqual(pushError { try r.verifyURL(noEcho) }, .missingParameter("echostr"))
        var injected = q
        injected.echostr = "1\r\nSet-Cookie: x"
        XCTAssertEqual(pushError { try r.verifyURL(injected) }?.code, "invalid_parameter")
    }

    func testConfigurationChecks() {
        XCTAssertEqual(pushError { try EncodingAESKey("short") }?.kind, .configuration)
        XCTAssertEqual(pushError { try EncodingAESKey(String(repeating: "A", count: 42) + "!") }?.kind, .configuration)
        XCTAssertEqual(pushError { try EncodingAESKey(String(repeating: "A", count: 44)) }?.kind, .configuration)
        XCTAssertEqual(pushError { try WeChatPushConfig(appId: "", token: "t") }?.kind, .configuration)
        XCTAssertEqual(pushError { try WeChatPushConfig(appId: "wx1", token: "") }?.kind, .configuration)
    }

    /// No error, and no printed configuration, ever contains the token or the key.
    func testSecretsNeverInMessages() throws {
        let config = PushFixture.config()
        XCTAssertFalse(String(describing: config).contains(PushFixture.token))
        XCTAssertFalse(String(describing: config).contains(PushFixture.keyText))
        XCTAssertFalse(String(describing: PushFixture.key).contains(PushFixture.keyText))
        var messages: [String] = []
        var (q, body) = PushFixture.secure(PushFixture.deliver(), .json)
        q.msgSignature = "0"
        messages.append(pushError { try r.open(query: q, body: body) }!.description)
        (q, body) = PushFixture.secure(PushFixture.deliver(), .json, appId: "wxother")
        messages.append(pushError { try r.open(query: q, body: body) }!.description)
        (q, body) = PushFixture.plaintext(PushFixture.deliver(), .json)
        q.signature = "0"
        messages.append(pushError { try r.open(query: q, body: body) }!.description)
        for m in messages {
            XCTAssertFalse(m.contains(PushFixture.token), m)
            XCTAssertFalse(m.contains(PushFixture.keyText), m)
            XCTAssertFalse(m.contains("ORDER-0001"), "decrypted content stays out of errors: \(m)")
        }
    }
}

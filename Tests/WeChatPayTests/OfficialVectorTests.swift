import Crypto
import Foundation
import LedgerCore
@testable import WeChatPay
import XCTest

/// Every vector of reference/wechat.md §6.
final class OfficialVectorTests: XCTestCase {
    // §6.1: official message-push doc (mini program, JSON, secure mode)
    let docKey = String(repeating: "A", count: 43)
    let docAppId = "wxba5fad812f8e6fb9"

    func docReceiver() throws -> PushReceiver {
        PushReceiver(config: try WeChatPushConfig(appId: docAppId, token: "AAAAA", aesKey: EncodingAESKey(docKey)))
    }

    func testDocURLVerification() throws {
        let r = try docReceiver()
        let q = PushQuery(signature: "f464b24fc39322e44b38aa78f5edd27bd1441696", timestamp: "1714036504",
                          nonce: "1514711492", echostr: "4375120948345356249")
        XCTAssertEqual(try r.verifyURL(q), "4375120948345356249")
        XCTAssertEqual(PushSignature.compute(["AAAAA", "1714036504", "1514711492"]), "f464b24fc39322e44b38aa78f5edd27bd1441696")
        var bad = q
        bad.signature = "f464b24fc39322e44b38aa78f5edd27bd1441697"
        XCTAssertEqual(pushError { try r.verifyURL(bad) }, .badSignature)
        var badNonce = q
        badNonce.nonce = "1514711493"
        XCTAssertEqual(pushError { try r.verifyURL(badNonce) }, .badSignature)
    }

    func testDocPlaintextSignature() {
        XCTAssertEqual(PushSignature.compute(["AAAAA", "1714037059", "486452656"]), "899cf89e464efb63f54ddac96b0a0a235f53aa78")
    }

    let docEncrypt = "+qdx1OKCy+5JPCBFWw70tm0fJGb2Jmeia4FCB7kao+/Q5c/ohsOzQHi8khUOb05JCpj0JB4RvQMkUyus8TPxLKJGQqcvZqzDpVzazhZv6JsXUnnR8XGT740XgXZUXQ7vJVnAG+tE8NUd4yFyjPy7GgiaviNrlCTj+l5kdfMuFUPpRSrfMZuMcp3Fn2Pede2IuQrKEYwKSqFIZoNqJ4M8EajAsjLY2km32IIjdf8YL/P50F7mStwntrA2cPDrM1kb6mOcfBgRtWygb3VIYnSeOBrebufAlr7F9mFUPAJGj04="
    let docMsg = #"{"ToUserName":"gh_97417a04a28d","FromUserName":"o9AgO5Kd5ggOC-bXrbNODIiE3bGY","CreateTime":1714112445,"MsgType":"event","Event":"debug_demo","debug_str":"hello world"}"#

    func testDocSecurePost() throws {
        let r = try docReceiver()
        // JSON escapes '/' as '\/' in transit: the signature is over the decoded value.
        let escaped = docEncrypt.replacingOccurrences(of: "/", with: "\\/")
        let body = Data(#"{"ToUserName":"gh_97417a04a28d","Encrypt":"\#(escaped)"}"#.utf8)
        let q = PushQuery(signature: "6c5c811b55cc85e0e1b54100749188c20beb3f5d", timestamp: "1714112445", nonce: "415670741",
                          encryptType: "aes", msgSignature: "046e02f8204d34f8ba5fa3b1db94908f3df2e9b3",
                          openid: "o9AgO5Kd5ggOC-bXrbNODIiE3bGY")
        XCTAssertEqual(PushSignature.compute(["AAAAA", "1714112445", "415670741"]), "6c5c811b55cc85e0e1b54100749188c20beb3f5d")
        let push = try r.open(query: q, body: body)
        XCTAssertEqual(push.mode, .secure)
        XCTAssertEqual(push.format, .json)
        XCTAssertEqual(String(decoding: push.payload, as: UTF8.self), docMsg)
        XCTAssertEqual(push.event, "debug_demo")
        XCTAssertEqual(push.message.text("debug_str"), "hello world")
        XCTAssertEqual(RawPush.body(of: push.raw), [UInt8](body))

        // Layout: 224 bytes of ciphertext, pad 19, random, msg_len 167, appid.
        let cipher = [UInt8](Data(base64Encoded: docEncrypt)!)
        XCTAssertEqual(cipher.count, 224)
        let key = try EncodingAESKey(docKey)
        let full = try AES256CBC.decrypt(key: key.key, iv: key.iv, ciphertext: cipher)
        XCTAssertEqual(full.last, 19)
        XCTAssertEqual(String(decoding: full[0..<16], as: UTF8.self), "a8eedb185eb2fecf")
        XCTAssertEqual(Array(full[16..<20]), [0, 0, 0, 167])

        // The unknown event is stored verbatim under the documented stream.
        let n = try XPayNotification(push)
        XCTAssertEqual(n.event().streamId, "wechat:other:debug_demo")
    }

    func testDocEncryptedReply() throws {
        let r = try docReceiver()
        let body = try r.encryptReply(Array(#"{"demo_resp":"good luck"}"#.utf8), format: .json, timestamp: 1713424427,
                                      nonce: "415670741", random: Array("707722b803182950".utf8))
        let v = try JSONDecoder().decode(JSONValue.self, from: body)
        XCTAssertEqual(v.text("Encrypt"), "ELGduP2YcVatjqIS+eZbp80MNLoAUWvzzyJxgGzxZO/5sAvd070Bs6qrLARC9nVHm48Y4hyRbtzve1L32tmxSQ==")
        XCTAssertEqual(v.text("MsgSignature"), "1b9339964ed2e271e7c7b6ff2b0ef902fc94dea1")
        XCTAssertEqual(v["TimeStamp"], .integer(1713424427))
        XCTAssertEqual(v.text("Nonce"), "415670741")
        XCTAssertEqual(try r.openReply(body, format: .json), Array(#"{"demo_resp":"good luck"}"#.utf8))
    }

    // §6.2: official sample code
    let sampleKey = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"

    func testA1Encrypt() throws {
        let enc = try MessageCipher.encrypt(Array("我是中文abcd123".utf8), appId: "wxb11529c136998cb6",
                                            key: EncodingAESKey(sampleKey), random: Array("aaaabbbbccccdddd".utf8))
        XCTAssertEqual(enc, "jn1L23DB+6ELqJ+6bruv21Y6MD7KeIfP82D6gU39rmkgczbWwt5+3bnyg5K55bgVtVzd832WzZGMhkP72vVOfg==")
        XCTAssertEqual(try MessageCipher.decrypt(enc, appId: "wxb11529c136998cb6", key: EncodingAESKey(sampleKey)),
                       Array("我是中文abcd123".utf8))
        XCTAssertEqual(PushSignature.compute(["pamtest", "1409304348", "xxxxxx"]), "76480565cbe296026c53aaacd1ad523a1ddba24f")
    }

    func testA2Encrypt() throws {
        let msg = "<xml><ToUserName><![CDATA[oia2Tj我是中文jewbmiOUlr6X-1crbLOvLw]]></ToUserName><FromUserName><![CDATA[gh_7f083739789a]]></FromUserName><CreateTime>1407743423</CreateTime><MsgType><![CDATA[video]]></MsgType><Video><MediaId><![CDATA[eYJ1MbwPRJtOvIEabaxHs7TX2D-HV71s79GUxqdUkjm6Gs2Ed1KF3ulAOA9H1xG0]]></MediaId><Title><![CDATA[testCallBackReplyVideo]]></Title><Description><![CDATA[testCallBackReplyVideo]]></Description></Video></xml>"
        let enc = try MessageCipher.encrypt(Array(msg.utf8), appId: "wxb11529c136998cb6", key: EncodingAESKey(sampleKey),
                                            random: Array("aaaabbbbccccdddd".utf8))
        XCTAssertEqual(enc, "jn1L23DB+6ELqJ+6bruv23M2GmYfkv0xBh2h+XTBOKVKcgDFHle6gqcZ1cZrk3e1qjPQ1F4RsLWzQRG9udbKWesxlkupqcEcW7ZQweImX9+wLMa0GaUzpkycA8+IamDBxn5loLgZpnS7fVAbExOkK5DYHBmv5tptA9tklE/fTIILHR8HLXa5nQvFb3tYPKAlHF3rtTeayNf0QuM+UW/wM9enGIDIJHF7CLHiDNAYxr+r+OrJCmPQyTy8cVWlu9iSvOHPT/77bZqJucQHQ04sq7KZI27OcqpQNSto2OdHCoTccjggX5Z9Mma0nMJBU+jLKJ38YB1fBIz+vBzsYjrTmFQ44YfeEuZ+xRTQwr92vhA9OxchWVINGC50qE/6lmkwWTwGX9wtQpsJKhP+oS7rvTY8+VdzETdfakjkwQ5/Xka042OlUb1/slTwo4RscuQ+RdxSGvDahxAJ6+EAjLt9d8igHngxIbf6YyqqROxuxqIeIch3CssH/LqRs+iAcILvApYZckqmA7FNERspKA5f8GoJ9sv8xmGvZ9Yrf57cExWtnX8aCMMaBropU/1k+hKP5LVdzbWCG0hGwx/dQudYR/eXp3P0XxjlFiy+9DMlaFExWUZQDajPkdPrEeOwofJb")
        // The same message parses as a nested XML object (Video is a child object).
        let v = try PushCodec.parseXML(Array(msg.utf8), maxDepth: 8)
        XCTAssertEqual(v["Video"]?.text("Title"), "testCallBackReplyVideo")
        XCTAssertEqual(v.int64("CreateTime"), 1407743423)
    }

    func testBWeComURLVerify() throws {
        let echostr = "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
        XCTAssertEqual(PushSignature.compute(["QDG6eK", "1409659589", "263014780", echostr]), "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3")
        let key = try EncodingAESKey("jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C")
        XCTAssertEqual(String(decoding: try MessageCipher.decrypt(echostr, appId: "wx5823bf96d3bd56c7", key: key), as: UTF8.self),
                       "1616140317555161061")
        let full = try AES256CBC.decrypt(key: key.key, iv: key.iv, ciphertext: Array(Data(base64Encoded: echostr)!))
        XCTAssertEqual(full.last, 7)
    }

    let cEncrypt = "hyzAe4OzmOMbd6TvGdIOO6uBmdJoD0Fk53REIHvxYtJlE2B655HuD0m8KUePWB3+LrPXo87wzQ1QLvbeUgmBM4x6F8PGHQHFVAFmOD2LdJF9FrXpbUAh0B5GIItb52sn896wVsMSHGuPE328HnRGBcrS7C41IzDWyWNlZkyyXwon8T332jisa+h6tEDYsVticbSnyU8dKOIbgU6ux5VTjg3yt+WGzjlpKn6NPhRjpA912xMezR4kw6KWwMrCVKSVCZciVGCgavjIQ6X8tCOp3yZbGpy0VxpAe+77TszTfRd5RJSVO/HTnifJpXgCSUdUue1v6h0EIBYYI1BD1DlD+C0CR8e6OewpusjZ4uBl9FyJvnhvQl+q5rv1ixrcpCumEPo5MJSgM9ehVsNPfUM669WuMyVWQLCzpu9GhglF2PE="

    func testCCompatibleModeXML() throws {
        let r = PushReceiver(config: try WeChatPushConfig(appId: "wx2c2769f8efd9abc2", token: "spamtest", aesKey: EncodingAESKey(sampleKey)))
        let body = "<xml><ToUserName><![CDATA[gh_10f6c3c3ac5a]]></ToUserName>\n<FromUserName><![CDATA[oyORnuP8q7ou2gfYjqLzSIWZf0rs]]></FromUserName>\n<CreateTime>1409735668</CreateTime>\n<MsgType><![CDATA[text]]></MsgType>\n<Content><![CDATA[abcdteT]]></Content>\n<MsgId>6054768590064713728</MsgId>\n<Encrypt><![CDATA[\(cEncrypt)]]></Encrypt>\n</xml>"
        let q = PushQuery(timestamp: "1409735669", nonce: "1320562132", encryptType: "aes",
                          msgSignature: "5d197aaffba7e9b25a30732f161a50dee96bd5fa")
        let push = try r.open(query: q, body: Data(body.utf8))
        XCTAssertEqual(push.mode, .compatible)
        XCTAssertEqual(push.format, .xml)
        XCTAssertEqual(push.message.text("Content"), "abcdteT")
        XCTAssertEqual(push.message.text("MsgId"), "6054768590064713728")
        XCTAssertEqual(push.message.text("FromUserName"), "oyORnuP8q7ou2gfYjqLzSIWZf0rs")
        let inner = try MessageCipher.decrypt(cEncrypt, appId: "wx2c2769f8efd9abc2", key: EncodingAESKey(sampleKey))
        XCTAssertEqual(inner.count, 280)
        XCTAssertTrue(inner.contains(0x0A), "multi-line XML is kept byte for byte")
        let k = try EncodingAESKey(sampleKey)
        XCTAssertEqual(try AES256CBC.decrypt(key: k.key, iv: k.iv, ciphertext: Array(Data(base64Encoded: cEncrypt)!)).last, 2)
        // A text message (not xpay) is kept under the "other" stream, keyed by MsgId.
        let n = try XPayNotification(push)
        XCTAssertEqual(n.dedupeKey, "msg:6054768590064713728")
        XCTAssertEqual(n.event().streamId, "wechat:other:text")
    }

    func testDDecrypt() throws {
        let enc = "mfBCs65c67CeJw22u4VT2TD73q5H06+ocrAIxswCaeZ/d/Lw0msSZFHY0teqgSYiI1zR2gD2DKrB3TIrmX/liNSDrGqS8jSI/WPeKB5VPr7Ezr7gomZAyGCwJSgT1TRFWPfONGJMxuj2nk4faTuspAuVIFQ6SHwZuJBZC7mcJp7Cgr9cUhATQWDbOPaE7ukZBTV2YqyzH+UI2AK+J1S47cE79k1RX8t0hcTz/O0hlK8DGXKnvYv88qKQcI7z4iaajqHfRVZKBNyOODabs+It+ZfM3dWTeFcPgDbGtIEnpt/EDtuuA/zMvtkaKdHdswPnVZQ+xdwbYr3ldGvfT8HlEYEgkgKaThxTFobVlwzu2ZkXCjicbP3xdr15Iq48ObgzPpqYuZ3IEoyggZDKClquk0u0orMck4GTF/XyE8yGzc4="
        let r = PushReceiver(config: try WeChatPushConfig(appId: "wx2c2769f8efd9abc2", token: "spamtest", aesKey: EncodingAESKey(sampleKey)))
        let body = "<xml><Encrypt><![CDATA[\(enc)]]></Encrypt></xml>"
        let q = PushQuery(timestamp: "1410349438", nonce: "298025754", encryptType: "aes",
                          msgSignature: "003fee52ecc56afb46c00b5c7721be87860ce785")
        let push = try r.open(query: q, body: Data(body.utf8))
        XCTAssertEqual(push.mode, .secure)
        XCTAssertEqual(push.message.int64("CreateTime"), 1410349438)
        XCTAssertEqual(push.message.text("MsgId"), "6057404712141979648")
        XCTAssertEqual(push.msgType, "text")
    }

    let eEncrypt = "D7yzvUNAL930rd28wf21s4hvXhz0L6Uit/p2Di6C5DHyYGpEgdBRnKjBec34JwoQXicwaZC7fOVihW80F4VtsdvE//1vr7oAbqjDv8KenVp+ajKYpJnyQ4zMRhIC+a31fCVOMC03FfzV/QuC94kBP55a+Za3sJgvAn+ZbsNqZI5DkyuzkhQN8OBqCzFhizGmy0xpM0MEA4agpvE+RuNO1rhHTtuJB5yltw1FiYzecSXJ+y/D2r81VkRn2eYjh2ltsoyfbDR7Is6ookXIFxTfyeNyeHxMeT4KN5WpCDmSbTcUYrbBUlkGLJ9n/rU8YOywma6G7aTb7KZKOqCxgfoUlYEZPk4FUL/TK7ShriFDMVCLyjQJ15Ob++agDWtcxhfUfe6HIoIpRW8mKNBQiY/Jd1svvuskA1wLef1RTtzKfMpagSCX/laZINmdnX4zrF6kIaR9P4xQrWXbsTFHTYe0Mg=="

    func testEThirdPartyPlatformXML() throws {
        let platform = try PushReceiver(config: WeChatPushConfig(appId: "wx134c8103faa5a59e", token: "AAAAA", aesKey: EncodingAESKey(docKey)))
        let body = "<xml><ToUserName><![CDATA[gh_97417a04a28d]]></ToUserName><Encrypt><![CDATA[\(eEncrypt)]]></Encrypt></xml>"
        let q = PushQuery(signature: "cc0c594499c1634947d5b502f158ee518947db27", timestamp: "1715943329", nonce: "1590219412",
                          encryptType: "aes", msgSignature: "6c12a4205838198b8fa631b3220723bb07f1015c")
        XCTAssertEqual(PushSignature.compute(["AAAAA", "1715943329", "1590219412"]), "cc0c594499c1634947d5b502f158ee518947db27")
        let push = try platform.open(query: q, body: Data(body.utf8))
        XCTAssertEqual(push.format, .xml)
        XCTAssertEqual(push.event, "debug_demo")
        let inner = try MessageCipher.decrypt(eEncrypt, appId: "wx134c8103faa5a59e", key: EncodingAESKey(docKey))
        XCTAssertEqual(inner.count, 292)
        let k = try EncodingAESKey(docKey)
        let full = try AES256CBC.decrypt(key: k.key, iv: k.iv, ciphertext: Array(Data(base64Encoded: eEncrypt)!))
        XCTAssertEqual(full.count, 352)
        XCTAssertEqual(full.last, 22)
        XCTAssertEqual(String(decoding: full[0..<16], as: UTF8.self), "1205899eaf019bbd")

        // The trailing id is the platform's: the authorised mini program's appid does not match.
        let miniProgram = try PushReceiver(config: WeChatPushConfig(appId: docAppId, token: "AAAAA", aesKey: EncodingAESKey(docKey)))
        XCTAssertEqual(pushError { try miniProgram.open(query: q, body: Data(body.utf8)) }, .appIdMismatch)

        let reply = try platform.encryptReply(Array("<xml><demo_resp>[CDATA[good luck]]</demo_resp></xml>".utf8), format: .xml,
                                              timestamp: 1713424427, nonce: "415670741", random: Array("999951349e8ee746".utf8))
        let env = try PushCodec.parseXML([UInt8](reply), maxDepth: 4)
        XCTAssertEqual(env.text("Encrypt"), "hE8R6mGXHkJJjU72KxzKUd1GEkKJaEZq7vRL8XgK3o+00k8JGq6+pZJUIlTSyhsX+bxIBQ72g3GyvDdIZcr6+3HAZbSvPT9t/o11MI7d6WELwqrGd7jMnV0zv3Zc9Nq7")
        XCTAssertEqual(env.text("MsgSignature"), "03e0812039325c2712ef5f0f980fd14c70d6e307")
    }

    // §6.3: wechatpy tests (WeCom crypto, same algorithm)
    let wpKey = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"
    let wpId = "wx49f0ab532d5d035a"

    func testWechatpyEncrypt() throws {
        let msg = ["<xml>", "<MsgType><![CDATA[text]]></MsgType>", "<Content><![CDATA[test]]></Content>",
                   "<FromUserName><![CDATA[wx49f0ab532d5d035a]]></FromUserName>", "<ToUserName><![CDATA[messense]]></ToUserName>",
                   "<AgentID>1</AgentID>", "<CreateTime>1411525903</CreateTime>", "</xml>"].joined(separator: "\n")
        XCTAssertEqual(msg.utf8.count, 247)
        let r = PushReceiver(config: try WeChatPushConfig(appId: wpId, token: "123456", aesKey: EncodingAESKey(wpKey)))
        let reply = try r.encryptReply(Array(msg.utf8), format: .xml, timestamp: 1411525903, nonce: "461056294",
                                       random: Array("1234567890123456".utf8))
        let env = try PushCodec.parseXML([UInt8](reply), maxDepth: 4)
        XCTAssertEqual(env.text("Encrypt"), "9s4gMv99m88kKTh/H8IdkOiMg6bisoy3ypwy9H4hvSPe9nsGaqyw5hhSjdYbcrKk+j3nba4HMOTzHrluLBYqxgNcBqGsL8GqxlhZgURnAtObvesEl5nZ+uBE8bviY0LWke8Zy9V/QYKxNV2FqllNXcfmstttyIkMKCCmVbCFM2JTF5wY0nFhHZSjPUL2Q1qvSUCUld+/WIXrx0oyKQmpB6o8NRrrNrsDf03oxI1p9FxUgMnwKKZeOA/uu+2IEvEBtb7muXsVbwbgX05UPPJvFurDXafG0RQyPR+mf1nDnAtQmmNOuiR5MIkdQ39xn1vWwi1O5oazPoQJz0nTYjxxEE8kv3kFxtAGVRe3ypD3WeK2XeFYFMNMpatF9XiKzHo3")
        XCTAssertEqual(env.text("MsgSignature"), "407518b7649e86ef23978113f92d27afa9296533")
        XCTAssertEqual(try r.openReply(reply, format: .xml), Array(msg.utf8))
    }

    func testWechatpyDecrypt() throws {
        let enc = "RgqEoJj5A4EMYlLvWO1F86ioRjZfaex/gePD0gOXTxpsq5Yj4GNglrBb8I2BAJVODGajiFnXBu7mCPatfjsu6IHCrsTyeDXzF6Bv283dGymzxh6ydJRvZsryDyZbLTE7rhnus50qGPMfp2wASFlzEgMW9z1ef/RD8XzaFYgm7iTdaXpXaG4+BiYyolBug/gYNx410cvkKR2/nPwBiT+P4hIiOAQqGp/TywZBtDh1yCF2KOd0gpiMZ5jSw3e29mTvmUHzkVQiMS6td7vXUaWOMZnYZlF3So2SjHnwh4jYFxdgpkHHqIrH/54SNdshoQgWYEvccTKe7FS709/5t6NMxuGhcUGAPOQipvWTT4dShyqio7mlsl5noTrb++x6En749zCpQVhDpbV6GDnTbcX2e8K9QaNWHp91eBdCRxthuL0="
        let r = PushReceiver(config: try WeChatPushConfig(appId: wpId, token: "123456", aesKey: EncodingAESKey(wpKey)))
        let q = PushQuery(timestamp: "1411525903", nonce: "461056294", encryptType: "aes",
                          msgSignature: "74d92dfeb87ba7c714f89d98870ae5eb62dff26d")
        let push = try r.open(query: q, body: Data("<xml><Encrypt><![CDATA[\(enc)]]></Encrypt></xml>".utf8))
        XCTAssertEqual(push.message.text("Content"), "test")
        XCTAssertEqual(push.message.text("FromUserName"), "messense")
        XCTAssertEqual(push.message.text("MsgId"), "4363689963896700987")
    }

    func testWechatpyURLCheck() throws {
        let echostr = "4ByGGj+sVCYcvGeQYhaKIk1o0pQRNbRjxybjTGblXrBaXlTXeOo1+bXFXDQQb1o6co6Yh9Bv41n7hOchLF6p+Q=="
        XCTAssertEqual(PushSignature.compute(["123456", "1411443780", "437374425", echostr]), "dd6b9c95b495b3f7e2901bfbc76c664930ffdb96")
        XCTAssertEqual(String(decoding: try MessageCipher.decrypt(echostr, appId: wpId, key: EncodingAESKey(wpKey)), as: UTF8.self),
                       "5927782489442352469")
    }

    // §6.4 / §3.1: xpay signing
    func testPaySigAndUserSignature() {
        let body = Array(#"{"openid": "xxx", "user_ip": "127.0.0.1", "env": 0}"#.utf8)
        XCTAssertEqual(XPaySignature.paySig(appKey: "12345", uri: "/xpay/query_user_balance", body: body),
                       "c37809f27c6d7fd1837ad2500a04512b66b34fd793a39a385fade56dca89a4b5")
        XCTAssertEqual(XPaySignature.userSignature(sessionKey: "9hAb/NEYUlkaMBEsmFgzig==", body: body),
                       "089d9e8dc5d308977360c4b79ec600a93d736802802a807d634192328032f6c7")
        XCTAssertNotEqual(XPaySignature.paySig(appKey: "12345", uri: "xpay/query_user_balance", body: body),
                          "c37809f27c6d7fd1837ad2500a04512b66b34fd793a39a385fade56dca89a4b5")
        // Re-serialising without the spaces is a different body and a different signature.
        XCTAssertNotEqual(XPaySignature.paySig(appKey: "12345", uri: "/xpay/query_user_balance",
                                               body: Array(#"{"openid":"xxx","user_ip":"127.0.0.1","env":0}"#.utf8)),
                          "c37809f27c6d7fd1837ad2500a04512b66b34fd793a39a385fade56dca89a4b5")
    }
}

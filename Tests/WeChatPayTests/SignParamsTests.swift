import Crypto
import Foundation
@testable import WeChatPay
import XCTest

final class SignParamsTests: XCTestCase {
    let signer = try! AppleSubscribeSigner(offerId: "1450032323", appKey: "appKeyForTests")

    func testSignDataMatchesTheSeedExamples() throws {
        let original = try signer.sign(.init(openid: "oUser1", productId: "subscription_vip_monthly", goodsPrice: 3000,
                                             attach: "uid=12345"), sessionKey: "9hAb/NEYUlkaMBEsmFgzig==")
        XCTAssertEqual(original.signData, #"{"offerId":"1450032323","productId":"subscription_vip_monthly","goodsPrice":3000,"attach":"uid=12345"}"#)
        let intro = try signer.sign(.init(openid: "oUser1", productId: "subscription_vip_monthly", goodsPrice: 3000,
                                          activitySellingPrice: 990, attach: "uid=12345"), sessionKey: "s")
        XCTAssertEqual(intro.signData, #"{"offerId":"1450032323","productId":"subscription_vip_monthly","goodsPrice":3000,"activitySellingPrice":990,"attach":"uid=12345"}"#)
        let trial = try signer.sign(.init(openid: "oUser1", productId: "subscription_vip_monthly", goodsPrice: 3000,
                                          activitySellingPrice: 0, attach: "uid=12345"), sessionKey: "s")
        XCTAssertTrue(trial.signData.contains(#""activitySellingPrice":0,"#))
        // signData is valid JSON with the expected members (what JSON.stringify would give).
        let obj = try JSONSerialization.jsonObject(with: Data(intro.signData.utf8)) as? [String: Any]
        XCTAssertEqual(obj?["goodsPrice"] as? Int, 3000)
        XCTAssertEqual(obj?["attach"] as? String, "uid=12345")
    }

    func testSignaturesOverExactSignData() throws {
        let p = try signer.sign(.init(openid: "oUser1", productId: "vip", goodsPrice: 3000, attach: "uid=1"), sessionKey: "9hAb/NEYUlkaMBEsmFgzig==")
        let body = Array(p.signData.utf8)
        let expectedPaySig = Hex.encode(Digest.hmacSHA256(key: Array("appKeyForTests".utf8), Array(("requestAppleSubscribeSign&" + p.signData).utf8)))
        XCTAssertEqual(p.paySig, expectedPaySig)
        XCTAssertEqual(p.signature, Hex.encode(Digest.hmacSHA256(key: Array("9hAb/NEYUlkaMBEsmFgzig==".utf8), body)))
        XCTAssertEqual(p.paySig.count, 64)
        // Another session key or app key changes the matching signature only.
        let q = try signer.sign(.init(openid: "oUser1", productId: "vip", goodsPrice: 3000, attach: "uid=1"), sessionKey: "other")
        XCTAssertEqual(q.paySig, p.paySig)
        XCTAssertNotEqual(q.signature, p.signature)
        let custom = try AppleSubscribeSigner(offerId: "1450032323", appKey: "appKeyForTests", uri: "requestVirtualPayment")
        XCTAssertNotEqual(try custom.sign(.init(openid: "o", productId: "vip", goodsPrice: 3000, attach: "uid=1"), sessionKey: "s").paySig, p.paySig)
        XCTAssertFalse(String(describing: signer).contains("appKeyForTests"))
    }

    func testValidation() {
        func fails(_ r: AppleSubscribeSignRequest, _ field: String, file: StaticString = #filePath, line: UInt = #line) {
            do {
                _ = try signer.sign(r, sessionKey: "s")
                XCTFail("accepted", file: file, line: line)
            } catch {
                guard case .invalid(let f, _) = error else { return XCTFail("\(error)", file: file, line: line) }
                XCTAssertEqual(f, field, file: file, line: line)
            }
        }
        let ok = AppleSubscribeSignRequest(openid: "o", productId: "vip", goodsPrice: 3000, attach: "uid=1")
        XCTAssertNoThrow(try signer.sign(ok, sessionKey: "s"))
        var r = ok; r.attach = String(repeating: "a", count: 201); fails(r, "attach")
        r = ok; r.attach = String(repeating: "a", count: 200); XCTAssertNoThrow(try signer.sign(r, sessionKey: "s"))
        r = ok; r.attach = #"uid=1","goodsPrice":1,"x":""#; fails(r, "attach")
        r = ok; r.attach = "uid=1\\"; fails(r, "attach")
        r = ok; r.attach = "uid=1\n"; fails(r, "attach")
        r = ok; r.attach = "uid 1"; fails(r, "attach")
        r = ok; r.attach = "用户"; fails(r, "attach")
        r = ok; r.goodsPrice = 0; fails(r, "goodsPrice")
        r = ok; r.goodsPrice = -5; fails(r, "goodsPrice")
        r = ok; r.activitySellingPrice = -1; fails(r, "activitySellingPrice")
        r = ok; r.activitySellingPrice = 3000; fails(r, "activitySellingPrice")
        r = ok; r.productId = "vip\"monthly"; fails(r, "productId")
        r = ok; r.productId = ""; fails(r, "productId")
        r = ok; r.openid = ""; fails(r, "openid")
        XCTAssertThrowsError(try signer.sign(ok, sessionKey: ""))
        XCTAssertThrowsError(try AppleSubscribeSigner(offerId: "14500\"", appKey: "k"))
        XCTAssertThrowsError(try AppleSubscribeSigner(offerId: "1450032323", appKey: ""))
    }
}

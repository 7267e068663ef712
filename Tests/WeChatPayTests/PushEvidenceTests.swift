import Crypto
import Foundation
import LedgerCore
import LedgerTesting
@testable import WeChatPay
import XCTest

/// Offline re-verification of stored pushes against the key history, the replay window's
/// arithmetic, and the server API client against the local fake of WeChat's API.
final class PushEvidenceTests: XCTestCase {
    let current = PushFixture.receiver()

    func history(file: URL? = nil, previous: EncodingAESKey? = nil) throws -> WeChatKeyHistory {
        try WeChatKeyHistory(appId: PushFixture.appId, token: PushFixture.token, aesKey: PushFixture.key, previousAESKey: previous, file: file)
    }

    func testAStoredSecurePushReVerifiesAndNamesTheKeyThatOpenedIt() throws {
        for format in [PushFormat.json, .xml] {
            let (q, body) = PushFixture.secure(PushFixture.deliver(), format)
            let raw = try current.open(query: q, body: body).raw
            let v = WeChatPushEvidence.verify(raw: raw, keys: try history())
            XCTAssertEqual(v.outcome, .verified, v.note)
            XCTAssertEqual(v.mode, .secure)
            XCTAssertEqual(v.format, format)
            XCTAssertEqual(v.tokenFingerprint, WeChatKeyFingerprint.token(PushFixture.token))
            XCTAssertEqual(v.aesKeyFingerprint, WeChatKeyFingerprint.aesKey(PushFixture.key))
            XCTAssertEqual(v.aesKeyLabel, "current")
            XCTAssertTrue(v.matchesRecording)
            XCTAssertEqual(try JSONValue(json: try XCTUnwrap(v.message)).text("OutTradeNo"), "ORDER-0001")
        }
    }

    /// A push from before a rotation: the old EncodingAESKey is only in the key-history file.
    func testOlderKeysComeFromTheKeyHistoryFile() throws {
        let old = PushReceiver(config: PushFixture.config(key: PushFixture.otherKey))
        let (q, body) = PushFixture.secure(PushFixture.signing(), .json, key: PushFixture.otherKey)
        let raw = try old.open(query: q, body: body).raw
        XCTAssertEqual(WeChatPushEvidence.verify(raw: raw, keys: try history()).outcome, .failed, "the current key cannot open it")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("wechat-keys-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data("""
        {"keys": [{"appId": "\(PushFixture.appId)", "token": "\(PushFixture.token)", "aesKey": "\(PushFixture.otherKeyText)", "label": "until 2026-03-01"}]}
        """.utf8).write(to: file)
        let v = WeChatPushEvidence.verify(raw: raw, keys: try history(file: file))
        XCTAssertEqual(v.outcome, .verified, v.note)
        XCTAssertEqual(v.aesKeyLabel, "until 2026-03-01")
        XCTAssertEqual(v.aesKeyFingerprint, WeChatKeyFingerprint.aesKey(PushFixture.otherKey))
        XCTAssertTrue(v.matchesRecording, "the raw recorded the same fingerprint at ingestion")
        // The configuration's previous key works too, labelled so.
        XCTAssertEqual(WeChatPushEvidence.verify(raw: raw, keys: try history(previous: PushFixture.otherKey)).aesKeyLabel, "previous")
        // A malformed history file says what is expected.
        try Data(#"{"keys": [{"appId": "wx1"}]}"#.utf8).write(to: file)
        XCTAssertThrowsError(try history(file: file)) { XCTAssertTrue("\($0)".contains("needs appId and token"), "\($0)") }
        try Data(#"{"keys": [{"appId": "wx1", "token": "t", "aesKey": "short"}]}"#.utf8).write(to: file)
        XCTAssertThrowsError(try history(file: file)) { XCTAssertTrue("\($0)".contains("43 characters"), "\($0)") }
    }

    func testPlaintextPushesAreOnlyUnsignedBodies() throws {
        let (q, body) = PushFixture.plaintext(PushFixture.deliver(), .xml)
        let raw = try current.open(query: q, body: body).raw
        let v = WeChatPushEvidence.verify(raw: raw, keys: try history())
        XCTAssertEqual(v.outcome, .unsignedBody)
        XCTAssertTrue(v.note.contains("NOT authenticated"), v.note)
        XCTAssertEqual(v.message, body, "the body as received")
        XCTAssertNil(v.aesKeyFingerprint)
    }

    func testTamperedOrForeignEvidenceFails() throws {
        let (q, body) = PushFixture.secure(PushFixture.deliver(), .json)
        let raw = try current.open(query: q, body: body).raw
        var o = try JSONValue(json: raw).objectValue!
        o["body"] = .string(String(decoding: body, as: UTF8.self).replacingOccurrences(of: "\"Encrypt\":\"", with: "\"Encrypt\":\"A"))
        let tampered = WeChatPushEvidence.verify(raw: JSONValue.object(o).canonicalJSON(), keys: try history())
        XCTAssertEqual(tampered.outcome, .failed)
        XCTAssertTrue(tampered.note.contains("no key of the history opens it"), tampered.note)
        let otherToken = try WeChatKeyHistory(appId: PushFixture.appId, token: "another-token", aesKey: PushFixture.key, previousAESKey: nil)
        XCTAssertEqual(WeChatPushEvidence.verify(raw: raw, keys: otherToken).outcome, .failed)
        XCTAssertEqual(WeChatPushEvidence.verify(raw: Data("{}".utf8), keys: try history()).outcome, .failed)
        XCTAssertEqual(WeChatPushEvidence.verify(raw: raw, keys: WeChatKeyHistory(keys: [])).outcome, .failed)
        // Fingerprints name keys without revealing them, and differ per key.
        XCTAssertNotEqual(WeChatKeyFingerprint.aesKey(PushFixture.key), WeChatKeyFingerprint.aesKey(PushFixture.otherKey))
        XCTAssertEqual(WeChatKeyFingerprint.token(PushFixture.token).count, 16)
    }

    func testTheReplayWindow() {
        let w = ReplayWindow(seconds: 300)
        XCTAssertNil(w.skew(of: 1_000, now: 1_300))
        XCTAssertNil(w.skew(of: 1_300, now: 1_000))
        XCTAssertEqual(w.skew(of: 1_000, now: 1_301), 301)
        XCTAssertEqual(w.skew(of: 1_301, now: 1_000), -301)
        XCTAssertEqual(w.skew(of: 0, now: .max), .max, "no overflow trap")
        XCTAssertEqual(w.skew(of: .min, now: 10), .max)
    }
}

/// The WeChat server API client against `FakeWeChatAPI` (a real HTTP server on loopback).
final class WeChatServerAPITests: XCTestCase {
    func withFake(_ body: (FakeWeChatAPI, WeChatServerAPI) async throws -> Void, secret: String? = nil, appKey: String? = nil) async throws {
        let fake = FakeWeChatAPI()
        try fake.start()
        let api = WeChatServerAPI(configuration: try WeChatServerAPIConfiguration(
            baseURL: fake.baseURL, appId: fake.appId, appSecret: secret ?? fake.appSecret, appKey: appKey ?? fake.appKey,
            allowsPlainHTTPLoopback: true))
        do { try await body(fake, api) } catch {
            await fake.shutdown()
            throw error
        }
        await fake.shutdown()
    }

    func testTokensAreCachedAndRefetchedOnceWhenWeChatSaysTheyExpired() async throws {
        try await withFake { fake, api in
            fake.setContract(openId: "o1", productId: "p", SubscribeContract(
                authorizationState: .signed, appleSubscriptionInfo: .init(originalTransactionId: "2000001", autoRenewStatus: 1,
                                                                           recentSubscriptionStartDate: 1, renewalDate: 2)))
            for _ in 0..<3 {
                let a = try await api.subscribeContract(openId: "o1", productId: "p")
                XCTAssertEqual(a.value.authorizationState, .signed)
                XCTAssertEqual(a.value.appleSubscriptionInfo?.renewalDate, 2)
                XCTAssertFalse(a.body.isEmpty)
            }
            XCTAssertEqual(api.calls["stable_token"], 1, "one stable token for every call while it is valid")
            fake.expireTokens()
            let unbound = try await api.subscribeContract(openId: "o2", productId: "p")
            XCTAssertEqual(unbound.value.authorizationState, .unbindUser)
            XCTAssertEqual(api.calls["stable_token"], 2, "42001: fetched again, call retried once")
            // WeChat busy (-1) and an HTTP 502 are retried.
            fake.enqueue(.init(path: "/xpay/query_subscribe_contract", errcode: -1))
            fake.enqueue(.init(path: "/xpay/query_subscribe_contract", status: 502))
            _ = try await api.subscribeContract(openId: "o1", productId: "p")
            // Every request was signed over its exact body.
            XCTAssertEqual(fake.seen.filter { $0.refusal != nil && $0.refusal != "scripted failure" && $0.refusal != "access_token is not the current one" }.count, 0,
                           "\(fake.seen.compactMap(\.refusal))")
        }
    }

    func testQueryOrderAndItsErrors() async throws {
        try await withFake { fake, api in
            fake.setOrder(openId: "o1", XPayOrder(orderId: "OUT-1", wxOrderId: "WXO-1", status: 8, orderType: 8, channelOrderId: "MCH-1"))
            let byWx = try await api.order(openId: "o1", .wxOrderId("WXO-1"))
            XCTAssertEqual(byWx.value.orderId, "OUT-1")
            XCTAssertEqual(byWx.value.channelOrderId, "MCH-1")
            // The answer recorded as an event gives the order's ids as alias facts.
            let event = WeChatAPIAnswer.order(openId: "o1", asked: .wxOrderId("WXO-1"), askedAt: byWx.askedAt, responseBody: byWx.body,
                                              stream: StreamId.wechatOrder("WXO-1").text)
            let facts = FactDecoder.facts(of: event)
            XCTAssertEqual(facts.map(\.kind), [.orderAlias, .orderAlias])
            XCTAssertEqual(Set(facts.compactMap(\.orderAlias)), ["MCH-1", "WXO-1"])
            XCTAssertEqual(Set(facts.compactMap(\.transactionId)), ["OUT-1"])
            do {
                _ = try await api.order(openId: "o1", .orderId("NOPE"))
                XCTFail("an unknown order answered")
            } catch let error as XPayClientError {
                XCTAssertEqual(error, .wechat(errcode: 268_490_002, errmsg: "order not exist"))
            }
        }
        // A wrong AppKey: WeChat refuses pay_sig, and the message says which setting.
        try await withFake({ _, api in
            do {
                _ = try await api.subscribeContract(openId: "o1", productId: "p")
                XCTFail("a wrong AppKey went unnoticed")
            } catch let error as XPayClientError {
                XCTAssertEqual(error.code, "wechat_errcode")
                XCTAssertTrue(error.message.contains("LEDGER_WECHAT_APP_KEY"), error.message)
            }
        }, appKey: "wrong-app-key")
        // A wrong AppSecret: the token is refused, never retried in a loop, never echoed.
        try await withFake({ fake, api in
            do {
                _ = try await api.subscribeContract(openId: "o1", productId: "p")
                XCTFail("a wrong AppSecret went unnoticed")
            } catch let error as XPayClientError {
                XCTAssertEqual(error, .accessToken(errcode: 40001, errmsg: "invalid credential, access_token is invalid or not latest"))
                XCTAssertTrue(error.message.contains("LEDGER_WECHAT_APP_SECRET"))
                XCTAssertFalse(error.message.contains("wrong-secret"))
            }
            XCTAssertEqual(fake.seen.count, 1)
        }, secret: "wrong-secret")
        XCTAssertThrowsError(try WeChatServerAPIConfiguration(baseURL: URL(string: "ftp://x")!, appId: "wx", appSecret: "s", appKey: "k"))
        XCTAssertFalse("\(try WeChatServerAPIConfiguration(baseURL: URL(string: "https://api.weixin.qq.com")!, appId: "wx", appSecret: "s3cr3t", appKey: "k3y"))"
            .contains("s3cr3t"))
    }
}

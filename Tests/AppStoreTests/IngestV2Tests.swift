import Crypto
import Dispatch
import Foundation
import LedgerCore
import LedgerTesting
import Synchronization
import XCTest
@testable import AppStore

final class IngestV2Tests: XCTestCase {
    let auth = Fixtures.authority

    func testBuildsTheEventAndKeepsUnknownFieldsVerbatim() throws {
        let s = AppleTestAuthority.sample(uuid: "6f1c…-uuid", originalTransactionId: "7000", transactionId: "7001",
                                          signedDate: 1_767_225_600_123, expiresDate: 1_769_904_000_000)
        let body = try auth.signNotification(
            s.notification, transaction: s.transaction, renewal: s.renewal,
            editTransaction: { $0["futureTxField"] = ["nested": [1, 2, 3]]; $0["expiresDate"] = 1_769_904_000_000.6 },
            editRenewal: { $0["commitmentInfo"] = ["commitmentAutoRenewStatus": 1] },
            editOuter: { $0["futureTopLevel"] = "kept"; var d = $0["data"] as! [String: Any]; d["futureDataField"] = true; $0["data"] = d })
        let event = try Fixtures.ingestor().ingestV2(body: body)
        XCTAssertEqual(event.source, .apple)
        XCTAssertEqual(event.streamId, "7000")
        XCTAssertEqual(event.dedupeKey, "6f1c…-uuid")
        XCTAssertEqual(event.type, "SUBSCRIBED/INITIAL_BUY")
        XCTAssertEqual(event.environment, "Sandbox")
        XCTAssertEqual(event.signedAt, 1_767_225_600_123)
        XCTAssertEqual(event.expiresAt, 1_769_904_000_001)  // fractional ms rounded to nearest
        XCTAssertEqual(event.raw, body)

        let p = try jsonObject(event.payload)
        XCTAssertEqual(p["futureTopLevel"] as? String, "kept")
        XCTAssertEqual((p["data"] as? [String: Any])?["futureDataField"] as? Bool, true)
        // The nested JWS live on in raw (the evidence); the payload holds them decoded, once.
        XCTAssertTrue((p["data"] as? [String: Any])?["signedTransactionInfo"] is NSNull)
        XCTAssertTrue((p["data"] as? [String: Any])?["signedRenewalInfo"] is NSNull)
        XCTAssertTrue(String(decoding: event.raw, as: UTF8.self).contains("signedPayload"))
        let tx = try XCTUnwrap(p["transactionInfo"] as? [String: Any])
        XCTAssertEqual(tx["transactionId"] as? String, "7001")
        XCTAssertEqual((tx["futureTxField"] as? [String: Any])?["nested"] as? [Int], [1, 2, 3])
        let ri = try XCTUnwrap(p["renewalInfo"] as? [String: Any])
        XCTAssertEqual((ri["commitmentInfo"] as? [String: Any])?["commitmentAutoRenewStatus"] as? Int, 1)
        // LedgerCore reads the stored payload with its model.
        let model = try JSONDecoder().decode(AppleEventPayload.self, from: event.payload)
        XCTAssertEqual(model.transactionInfo?.originalTransactionId, "7000")
        XCTAssertEqual(model.renewalInfo?.autoRenewStatus, 1)
        XCTAssertEqual(model.data?.status, 1)
    }

    func testUnknownTypesAndSubtypesAreStored() throws {
        let s = AppleTestAuthority.sample(type: "SOMETHING_APPLE_ADDS_IN_2027", subtype: "NEW_SUBTYPE")
        let e = try Fixtures.ingestor().ingestV2(body: auth.signSample(s))
        XCTAssertEqual(e.type, "SOMETHING_APPLE_ADDS_IN_2027/NEW_SUBTYPE")
        let noSub = AppleTestAuthority.sample(type: "REFUND", subtype: nil)
        XCTAssertEqual(try Fixtures.ingestor().ingestV2(body: auth.signSample(noSub)).type, "REFUND")
    }

    func testProductionIsAcceptedWithTheRightAppAppleId() throws {
        let s = AppleTestAuthority.sample(appAppleId: 1234, environment: "Production")
        let e = try Fixtures.ingestor(Fixtures.both).ingestV2(body: auth.signSample(s))
        XCTAssertEqual(e.environment, "Production")
    }

    func testStreamsForNotificationsWithoutATransaction() throws {
        var n = AppleTestAuthority.sample(type: "TEST", subtype: nil).notification
        XCTAssertEqual(try Fixtures.ingestor().ingestV2(body: auth.signNotification(n)).streamId, StreamId.appleTest.text)
        n.notificationType = "CONSUMPTION_REQUEST"
        XCTAssertEqual(try Fixtures.ingestor().ingestV2(body: auth.signNotification(n)).streamId, StreamId.appleApp(bundleId: "com.example").text)
        // Renewal info alone still names the subscription.
        let s = AppleTestAuthority.sample(originalTransactionId: "555")
        XCTAssertEqual(try Fixtures.ingestor().ingestV2(body: auth.signNotification(s.notification, renewal: s.renewal)).streamId, "555")
    }

    func testRetriesProduceTheSameKeys() throws {
        let s = AppleTestAuthority.sample()
        let a = try Fixtures.ingestor().ingestV2(body: auth.signSample(s))
        let b = try Fixtures.ingestor().ingestV2(body: auth.signSample(s))  // new signatures, same notification
        XCTAssertEqual(a.streamId, b.streamId)
        XCTAssertEqual(a.dedupeKey, b.dedupeKey)
        XCTAssertNotEqual(a.raw, b.raw)
    }

    // MARK: chain cache

    func testSecondVerificationOfTheSameChainSkipsChainValidation() throws {
        let verifier = auth.verifier()
        let ingestor = AppleNotificationIngestor(verifier: verifier, acceptance: Fixtures.sandbox)
        _ = try ingestor.ingestV2(body: auth.signSample(AppleTestAuthority.sample()))
        XCTAssertEqual(verifier.chainValidationCount, 1, "three JWS with one chain: one validation")
        XCTAssertEqual(verifier.cacheHitCount, 2)
        _ = try ingestor.ingestV2(body: auth.signSample(AppleTestAuthority.sample()))
        XCTAssertEqual(verifier.chainValidationCount, 1)
        XCTAssertEqual(verifier.cacheHitCount, 5)
        XCTAssertEqual(verifier.cachedChainCount, 1)
    }

    func testCachedChainIsRecheckedAgainstTheSigningTime() throws {
        let a = Fixtures.minted { $0.leafValidity = 1_700_000_000...1_800_000_000 }
        let verifier = SignedDataVerifier(trustedRoots: [a.root])
        let inside = try a.sign(AppleTestAuthority.sample(signedDate: 1_750_000_000_000).transaction)
        let outside = try a.sign(AppleTestAuthority.sample(signedDate: 1_850_000_000_000).transaction)
        XCTAssertNoThrow(try verifier.verify(inside, kind: .transaction))
        XCTAssertEqual(verifier.chainValidationCount, 1)
        assertRefused("certificate_not_valid_at_signing_time", .unauthenticated) { try verifier.verify(outside, kind: .transaction) }
        XCTAssertNoThrow(try verifier.verify(inside, kind: .transaction))
        XCTAssertEqual(verifier.chainValidationCount, 2, "outside the cached window the chain is validated again, inside it is not")
    }

    func testCacheIsBoundedAndDoesNotCacheFailures() throws {
        var o = SignedDataVerifierOptions()
        o.chainCacheCapacity = 2
        let authorities = (0..<3).map { i in Fixtures.minted { $0.name = "Cache \(i)" } }
        let verifier = SignedDataVerifier(trustedRoots: authorities.map(\.root), options: o)
        for a in authorities { _ = try verifier.verify(a.sign(AppleTestAuthority.sample().transaction), kind: .transaction) }
        XCTAssertEqual(verifier.cachedChainCount, 2)
        XCTAssertEqual(verifier.chainValidationCount, 3)
        _ = try verifier.verify(authorities[0].sign(AppleTestAuthority.sample().transaction), kind: .transaction)
        XCTAssertEqual(verifier.chainValidationCount, 4, "the oldest entry was evicted")
        let strangerJWS = try Fixtures.stranger.sign(AppleTestAuthority.sample().transaction)
        for _ in 0..<2 { assertRefused("untrusted_chain", .unauthenticated) { try verifier.verify(strangerJWS, kind: .transaction) } }
        XCTAssertEqual(verifier.chainValidationCount, 6, "a refused chain is never cached")
    }

    func testCachedChainStillNeedsAValidSignature() throws {
        let verifier = auth.verifier()
        _ = try verifier.verify(auth.sign(AppleTestAuthority.sample().transaction), kind: .transaction)
        var o = AppleTestAuthority.JWSOptions()
        o.signingKey = Fixtures.stranger.leafKey
        let forged = try auth.sign(AppleTestAuthority.sample().transaction, o)
        assertRefused("bad_signature", .unauthenticated) { try verifier.verify(forged, kind: .transaction) }
    }

    func testConcurrentIngestionSharesOneVerifier() throws {
        let verifier = auth.verifier()
        let ingestor = AppleNotificationIngestor(verifier: verifier, acceptance: Fixtures.sandbox)
        let bodies = try (0..<16).map { _ in try auth.signSample(AppleTestAuthority.sample()) }
        let failures = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: bodies.count) { i in
            if (try? ingestor.ingestV2(body: bodies[i])) == nil { failures.withLock { $0 += 1 } }
        }
        XCTAssertEqual(failures.withLock { $0 }, 0)
        XCTAssertLessThanOrEqual(verifier.chainValidationCount, 16)
        XCTAssertGreaterThanOrEqual(verifier.cacheHitCount, 16 * 3 - verifier.chainValidationCount)
    }

    func testNowIsUsedOnlyWhenThePayloadHasNoDate() throws {
        let a = Fixtures.minted { $0.leafValidity = 1_700_000_000...1_800_000_000 }
        var o = SignedDataVerifierOptions()
        o.now = { 1_900_000_000_000 }
        let verifier = SignedDataVerifier(trustedRoots: [a.root], options: o)
        var t = AppleTestAuthority.sample(signedDate: 1_750_000_000_000).transaction
        XCTAssertEqual(try verifier.verify(a.sign(t), kind: .transaction).validationTime, 1_750_000_000_000)
        t.signedDate = nil
        assertRefused("certificate_not_valid_at_signing_time", .unauthenticated) { try verifier.verify(try! a.sign(t), kind: .transaction) }
        var app = AppleAppTransaction()
        app.receiptCreationDate = AppleTime(1_760_000_000_000)
        app.signedDate = AppleTime(1_950_000_000_000)
        XCTAssertEqual(try verifier.verify(a.sign(app), kind: .appTransaction).validationTime, 1_760_000_000_000)
    }
}

import Crypto
import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import AppStore

final class InspectorAndEncodingTests: XCTestCase {
    // MARK: base64

    func testBase64URLIsStrict() {
        XCTAssertEqual(Base64.decodeURL(Array("".utf8)), [])
        XCTAssertEqual(Base64.decodeURL(Array("QQ".utf8)), [0x41])
        XCTAssertEqual(Base64.decodeURL(Array("QUI".utf8)), [0x41, 0x42])
        XCTAssertEqual(Base64.decodeURL(Array("QUJD".utf8)), [0x41, 0x42, 0x43])
        XCTAssertEqual(Base64.decodeURL(Array("-_8".utf8)), [0xFB, 0xFF])
        XCTAssertNil(Base64.decodeURL(Array("QQ==".utf8)), "JWS forbids padding")
        XCTAssertNil(Base64.decodeURL(Array("+/8".utf8)), "standard alphabet is not base64url")
        XCTAssertNil(Base64.decodeURL(Array("QUJD\n".utf8)))
        XCTAssertNil(Base64.decodeURL(Array("Q".utf8)), "length ≡ 1 (mod 4) encodes nothing")
        XCTAssertNil(Base64.decodeURL(Array("QR".utf8)), "non-zero unused bits are not canonical")
        XCTAssertNil(Base64.decodeURL([0x51, 0x80]), "non-ASCII bytes")
        XCTAssertEqual(Base64.decodeStandard(Array("+/8=".utf8)), [0xFB, 0xFF])
        XCTAssertNil(Base64.decodeStandard(Array("+/8".utf8)), "x5c requires padding")
        XCTAssertNil(Base64.decodeStandard(Array("QQ=A".utf8)))
        XCTAssertNil(Base64.decodeStandard(Array("Q===".utf8)))
        for n in 0..<70 {
            let bytes = SecureRandom.bytes(n)
            XCTAssertEqual(Base64.decodeURL(Array(Base64.encodeURL(bytes).utf8)), bytes)
            let std = Base64.encodeStandard(bytes)
            XCTAssertEqual(std, Data(bytes).base64EncodedString())
            XCTAssertEqual(Base64.decodeStandard(Array(std.utf8)), bytes)
        }
    }

    func testJSONDepthGuardIgnoresBracketsInStrings() {
        XCTAssertTrue(JSONGuard.depthWithinLimit(Array("{\"a\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[\"}".utf8), limit: 2))
        XCTAssertFalse(JSONGuard.depthWithinLimit(Array("[[[1]]]".utf8), limit: 2))
        XCTAssertTrue(JSONGuard.depthWithinLimit(Array("[[1],[2]]".utf8), limit: 2))
    }

    // MARK: inspector

    func testInspectsTheRealAppleJWSOffline() throws {
        let inspector = PayloadInspector(verifier: SignedDataVerifier(trustedRoots: [AppleTrustedRoots.bundledAppleRootCAG3]))
        let report = try inspector.inspect(AppleVectors.read("real-apple-signed/sandboxTransactionConsumable.jws"))
        XCTAssertEqual(report.kind, .jws)
        XCTAssertTrue(report.allVerified)
        XCTAssertEqual(report.outcomes.first?.validationTime, 1_739_161_772_561)
        XCTAssertEqual(try jsonObject(report.decodedJSON)["storefront"] as? String, "JPN")
        XCTAssertTrue(report.render().contains("jws: verified"))
    }

    func testInspectsAV2BodyWithNestedValuesAndReportsEachOutcome() throws {
        let auth = Fixtures.authority
        let s = AppleTestAuthority.sample(originalTransactionId: "42")
        var o = AppleTestAuthority.NotificationOptions()
        o.renewal.corruptSignature = true
        let body = try auth.signSample(s, options: o)
        let report = try PayloadInspector(verifier: auth.verifier()).inspect(body)
        XCTAssertEqual(report.kind, .v2Notification)
        XCTAssertEqual(report.outcomes.map(\.path), ["signedPayload", "data.signedTransactionInfo", "data.signedRenewalInfo"])
        XCTAssertEqual(report.outcomes.map(\.verified), [true, true, false])
        XCTAssertEqual(report.outcomes[2].error, .badSignature)
        XCTAssertFalse(report.allVerified)
        let decoded = try jsonObject(report.decodedJSON)
        XCTAssertEqual((decoded["transactionInfo"] as? [String: Any])?["originalTransactionId"] as? String, "42")
        XCTAssertEqual((decoded["renewalInfo"] as? [String: Any])?["originalTransactionId"] as? String, "42", "refused values are still shown")
        XCTAssertTrue(report.render().contains("REFUSED bad_signature"))
        // The same body from another trust store: nothing verifies.
        let elsewhere = try PayloadInspector(verifier: SignedDataVerifier(trustedRoots: [AppleTrustedRoots.bundledAppleRootCAG3])).inspect(body)
        // (The tampered renewal fails its signature, which is now checked before the chain.)
        XCTAssertEqual(elsewhere.outcomes.compactMap(\.error?.code), ["untrusted_chain", "untrusted_chain", "bad_signature"])
    }

    func testInspectsAStoredV1BodyWithoutSignatures() throws {
        let report = try PayloadInspector(verifier: Fixtures.authority.verifier()).inspect(
            Data("{\"notification_type\":\"CANCEL\",\"password\":\"s3cret\"}".utf8))
        XCTAssertEqual(report.kind, .v1Notification)
        XCTAssertTrue(report.outcomes.isEmpty)
        XCTAssertFalse(report.allVerified)
        XCTAssertFalse(report.render().contains("s3cret"))
        // A stored V1 payload (the body under responseBodyV1) reads the same way.
        let stored = try PayloadInspector(verifier: Fixtures.authority.verifier()).inspect(
            Data("{\"responseBodyV1\":{\"notification_type\":\"CANCEL\",\"password\":\"s3cret\"}}".utf8))
        XCTAssertEqual(stored.kind, .v1Notification)
        XCTAssertFalse(stored.render().contains("s3cret"))
        XCTAssertTrue(stored.render().contains("\"notification_type\" : \"CANCEL\""), stored.render())
    }

    func testInspectorRefusesGarbage() {
        let inspector = PayloadInspector(verifier: Fixtures.authority.verifier())
        assertRefused("malformed", .malformed) { try inspector.inspect(Data("   \n".utf8)) }
        assertRefused("malformed", .malformed) { try inspector.inspect(Data("{\"hello\":1}".utf8)) }
        assertRefused("malformed", .malformed) { try inspector.inspect(Data("not.a.jws".utf8)) }
    }

    // MARK: benchmark

    func testBenchmarkParsesOpenSSLAndMeasuresTheCachedPath() throws {
        let sample = """
                                      sign    verify    sign/s verify/s
         256 bits ecdsa (nistp256)   0.0000s   0.0001s  38123.4  12345.6
        """
        XCTAssertEqual(VerifierBenchmark.parseOpenSSLSpeed(sample), 12345.6)
        XCTAssertNil(VerifierBenchmark.parseOpenSSLSpeed("no such row"))
        let report = try VerifierBenchmark.run(seconds: 0.2, runOpenSSL: false)
        XCTAssertGreaterThan(report.verifications, 0)
        XCTAssertEqual(report.chainValidations, 1)
        XCTAssertTrue(report.description.contains("verifications/s"))
    }
}

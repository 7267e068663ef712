import Crypto
import CryptoTesting
import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import AppStore

/// Issue 22 item 7: a path OpenSSL accepts is not enough; the verified path must be exactly the
/// leaf, `x5c[1]` and one of the configured roots (reference/apple.md §1: leaf → Apple WWDR
/// intermediate → Apple Root CA - G3).
final class ChainShapeTests: XCTestCase {
    private let validity: Int64 = 1_577_836_800, until: Int64 = 2_366_841_600

    private func payload() throws -> Data {
        try JSONSerialization.data(withJSONObject: ["signedDate": 1_767_225_600_000, "notificationType": "TEST"])
    }

    func testTheAppleShapedChainIsAccepted() throws {
        let auth = try AppleTestAuthority.mint()
        XCTAssertNoThrow(try auth.verifier().verify(try auth.sign(payload: payload()), kind: .notification))
    }

    /// A leaf that the trusted root signed itself validates as leaf → root, so the marker-carrying
    /// intermediate in x5c[1] is never part of the path: refused.
    func testALeafSignedDirectlyByTheRootIsRefusedWhateverX5c1Carries() throws {
        let rootKey = try ECPrivateKey.generate(curve: .p256)
        let intKey = try ECPrivateKey.generate(curve: .p256)
        let leafKey = try ECPrivateKey.generate(curve: .p256)
        let root = try X509Certificate.mint(
            CertificateTemplate(role: .root, subject: [("O", "Shape"), ("CN", "Shape Root")], serial: 71,
                                notBefore: validity, notAfter: until),
            subjectKey: rootKey.publicKey, issuer: nil, issuerKey: rootKey)
        let intermediate = try X509Certificate.mint(
            CertificateTemplate(role: .intermediate, subject: [("O", "Shape"), ("CN", "Shape WWDR")], serial: 72,
                                notBefore: validity, notAfter: until, markerOIDs: [AppleOID.wwdrIntermediate]),
            subjectKey: intKey.publicKey, issuer: root, issuerKey: rootKey)
        let leaf = try X509Certificate.mint(
            CertificateTemplate(role: .leaf, subject: [("O", "Shape"), ("CN", "Shape Leaf")], serial: 73,
                                notBefore: validity, notAfter: until, markerOIDs: [AppleOID.receiptSigningLeaf]),
            subjectKey: leafKey.publicKey, issuer: root, issuerKey: rootKey)
        let auth = AppleTestAuthority(root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey)
        let jws = try auth.sign(payload: payload())
        XCTAssertThrowsError(try auth.verifier().verify(jws, kind: .notification)) { error in
            guard case AppleVerificationError.untrustedChain(let why)? = error as? AppleVerificationError else {
                return XCTFail("expected untrustedChain, got \(error)")
            }
            XCTAssertTrue(why.contains("leaf → x5c[1] → a trusted root"), why)
        }
    }
}

import CryptoTesting
import Foundation
import XCTest
@testable import Crypto

/// Apple's test vectors, committed in Tests/Fixtures/apple-vectors; a missing file fails with a clear message.
private func vector(_ path: String, file: String = #filePath) throws -> [UInt8] {
    let root = URL(fileURLWithPath: file).deletingLastPathComponent().deletingLastPathComponent()
    let url = root.appendingPathComponent("Fixtures/apple-vectors").appendingPathComponent(path)
    guard let d = FileManager.default.contents(atPath: url.path) else {
        XCTFail("test vector \(url.path) is missing: it is part of the repository (Tests/Fixtures/apple-vectors)")
        throw CryptoError.invalidInputLength("missing vector \(path)")
    }
    return [UInt8](d)
}

private let appleLeafOID = "1.2.840.113635.100.6.11.1"
private let appleIntermediateOID = "1.2.840.113635.100.6.2.1"

final class X509AndECDSATests: XCTestCase {
    func testParsesLibraryTestChainDERAndPEMWithLeadingText() throws {
        let ca = try X509Certificate(der: vector("library-test-chain/testCA.der"))
        let caPEM = try X509Certificate.parsePEM(vector("library-test-chain/testCA.pem"))
        XCTAssertEqual(caPEM.count, 1)
        XCTAssertEqual(caPEM[0], ca)
        XCTAssertEqual(ca.subject, "/C=US/ST=California/L=Cupertino")
        XCTAssertEqual(ca.notBefore, 1_672_954_222)  // Jan  5 21:30:22 2023 GMT (openssl x509 -dates)
        XCTAssertEqual(ca.notAfter, 1_988_314_222)   // Jan  2 21:30:22 2033 GMT
        let leaf = try X509Certificate.parsePEM(vector("library-test-chain/testLeaf.pem"))[0]
        XCTAssertTrue(leaf.subject.hasSuffix("O=Leaf"))
        XCTAssertTrue(leaf.hasExtension(oid: appleLeafOID))
        XCTAssertFalse(leaf.hasExtension(oid: appleIntermediateOID))
        XCTAssertFalse(leaf.hasExtension(oid: "not.an.oid"))
        XCTAssertEqual(try leaf.publicKey().curve, .p256)
        let badLeaf = try X509Certificate.parsePEM(vector("library-test-chain/testInvalidOIDLeaf.pem"))[0]
        XCTAssertFalse(badLeaf.hasExtension(oid: appleLeafOID))
        XCTAssertTrue(badLeaf.hasExtension(oid: "1.2.840.113635.100.6.11.2"))
    }

    func testRejectsGarbageAndTrailingBytes() throws {
        let der = try vector("library-test-chain/testCA.der")
        XCTAssertThrowsError(try X509Certificate(der: der + [0]))
        XCTAssertThrowsError(try X509Certificate(der: Array(der.prefix(100))))
        XCTAssertThrowsError(try X509Certificate(der: []))
        XCTAssertThrowsError(try X509Certificate.parsePEM(Array("no certificate here".utf8)))
        XCTAssertEqual(try X509Certificate.parseFile(bytes: der).count, 1)
    }

    func testRealAppleChainVerifiesOnlyWhileValid() throws {
        let root = try X509Certificate(der: vector("apple-pki/AppleRootCA-G3.der"))
        let wwdr = try X509Certificate(der: vector("apple-pki/AppleWWDRCA-G6.der"))
        let leaf = try X509Certificate(der: vector("apple-pki/AppleReceiptSigning-leaf-2025-2027.der"))
        XCTAssertEqual(Hex.encode(Digest.sha256(root.der)), "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179")
        let w = try X509ChainVerifier.verify(leaf: leaf, intermediates: [wwdr], roots: [root], atEpochSeconds: 1_767_225_600)  // 2026-01-01
        XCTAssertEqual(w.notBefore, leaf.notBefore)
        XCTAssertEqual(w.notAfter, leaf.notAfter)
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: leaf, intermediates: [wwdr], roots: [root], atEpochSeconds: 1_739_161_772)) {
            guard case CertificateChainError.notYetValid = $0 else { return XCTFail("\($0)") }
        }
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: leaf, intermediates: [wwdr], roots: [root], atEpochSeconds: 1_900_000_000)) {
            guard case CertificateChainError.expired = $0 else { return XCTFail("\($0)") }
        }
        // Without the intermediate, or with another root, the leaf has no path.
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: leaf, intermediates: [], roots: [root], atEpochSeconds: 1_767_225_600)) {
            guard case CertificateChainError.untrusted = $0 else { return XCTFail("\($0)") }
        }
        let testCA = try X509Certificate(der: vector("library-test-chain/testCA.der"))
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: leaf, intermediates: [wwdr], roots: [testCA], atEpochSeconds: 1_767_225_600)) {
            guard case CertificateChainError.untrusted = $0 else { return XCTFail("\($0)") }
        }
    }

    func testLibraryTestPKINeedsProfileToleranceUnderStrict() throws {
        let ca = try X509Certificate(der: vector("library-test-chain/testCA.der"))
        let int = try X509Certificate.parsePEM(vector("library-test-chain/testIntermediate.pem"))[0]
        let leaf = try X509Certificate.parsePEM(vector("library-test-chain/testLeaf.pem"))[0]
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: leaf, intermediates: [int], roots: [ca], atEpochSeconds: 1_700_000_000)) {
            guard case CertificateChainError.invalid = $0 else { return XCTFail("strict profile should refuse: \($0)") }
        }
        XCTAssertNoThrow(try X509ChainVerifier.verify(leaf: leaf, intermediates: [int], roots: [ca], atEpochSeconds: 1_700_000_000, tolerateProfileGaps: true))
        // Tolerance does not extend to validity.
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: leaf, intermediates: [int], roots: [ca], atEpochSeconds: 2_000_000_000, tolerateProfileGaps: true)) {
            guard case CertificateChainError.expired = $0 else { return XCTFail("\($0)") }
        }
    }

    func testMintedChainPassesStrictAndCarriesMarkers() throws {
        let rootKey = try ECPrivateKey.generate(curve: .p384)
        let intKey = try ECPrivateKey.generate(curve: .p384)
        let leafKey = try ECPrivateKey.generate(curve: .p256)
        let root = try X509Certificate.mint(.init(role: .root, subject: [("CN", "R")], serial: 1, notBefore: 1_600_000_000, notAfter: 1_900_000_000),
                                            subjectKey: rootKey.publicKey, issuer: nil, issuerKey: rootKey)
        let int = try X509Certificate.mint(.init(role: .intermediate, subject: [("CN", "I")], serial: 2, notBefore: 1_600_000_000, notAfter: 1_900_000_000,
                                                 markerOIDs: [appleIntermediateOID]),
                                           subjectKey: intKey.publicKey, issuer: root, issuerKey: rootKey)
        let leaf = try X509Certificate.mint(.init(role: .leaf, subject: [("CN", "L")], serial: 3, notBefore: 1_700_000_000, notAfter: 1_800_000_000,
                                                  markerOIDs: [appleLeafOID]),
                                            subjectKey: leafKey.publicKey, issuer: int, issuerKey: intKey)
        XCTAssertTrue(int.hasExtension(oid: appleIntermediateOID))
        XCTAssertTrue(leaf.hasExtension(oid: appleLeafOID))
        XCTAssertEqual(leaf.issuer, int.subject)
        XCTAssertEqual(leaf.notBefore, 1_700_000_000)
        let w = try X509ChainVerifier.verify(leaf: leaf, intermediates: [int], roots: [root], atEpochSeconds: 1_750_000_000)
        XCTAssertEqual(w.notBefore, 1_700_000_000)
        XCTAssertEqual(w.notAfter, 1_800_000_000)
        // The path OpenSSL built, leaf first, anchor last (the verifier asserts its shape).
        XCTAssertEqual(w.pathDER, [leaf.der, int.der, root.der])
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: leaf, intermediates: [int], roots: [root], atEpochSeconds: 1_650_000_000))
        // The root sent along as an "intermediate" is not a trust anchor.
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: leaf, intermediates: [int, root], roots: [], atEpochSeconds: 1_750_000_000))
        // A leaf whose issuer signature was made by another key does not chain.
        let otherKey = try ECPrivateKey.generate(curve: .p384)
        let forged = try X509Certificate.mint(.init(role: .leaf, subject: [("CN", "L")], serial: 4, notBefore: 1_700_000_000, notAfter: 1_800_000_000),
                                              subjectKey: leafKey.publicKey, issuer: int, issuerKey: otherKey)
        XCTAssertThrowsError(try X509ChainVerifier.verify(leaf: forged, intermediates: [int], roots: [root], atEpochSeconds: 1_750_000_000))
        // PEM round trip.
        XCTAssertEqual(try X509Certificate.parsePEM(Array(leaf.pem.utf8)).first, leaf)
    }

    func testES256SignVerifyRoundTripAndTamper() throws {
        let key = try ECPrivateKey.generate(curve: .p256)
        let msg = Array("header.payload".utf8)
        let sig = try key.signES256(msg)
        XCTAssertEqual(sig.count, 64)
        XCTAssertTrue(key.publicKey.verifyES256(signature: sig, message: msg))
        XCTAssertFalse(key.publicKey.verifyES256(signature: sig, message: Array("header.payloaD".utf8)))
        var bad = sig
        bad[10] ^= 1
        XCTAssertFalse(key.publicKey.verifyES256(signature: bad, message: msg))
        XCTAssertFalse(key.publicKey.verifyES256(signature: Array(sig.prefix(63)), message: msg))
        XCTAssertFalse(key.publicKey.verifyES256(signature: [UInt8](repeating: 0, count: 64), message: msg))
        XCTAssertFalse(try ECPrivateKey.generate(curve: .p256).publicKey.verifyES256(signature: sig, message: msg))
        // DER conversion round trip, and a P-384 key never verifies ES256.
        let der = try XCTUnwrap(ECDSASignature.der(fromRaw: sig))
        XCTAssertEqual(ECDSASignature.raw(fromDER: der, width: 32), sig)
        let p384 = try ECPrivateKey.generate(curve: .p384)
        XCTAssertEqual(p384.curve, .p384)
        XCTAssertThrowsError(try p384.signES256(msg))
    }

    func testLoadsSEC1AndPKCS8KeysAndVerifiesAppleMockJWS() throws {
        let leafKey = try ECPrivateKey(pem: vector("library-test-chain/testLeaf.key"))
        let leaf = try X509Certificate.parsePEM(vector("library-test-chain/testLeaf.pem"))[0]
        XCTAssertEqual(leafKey.publicKey.subjectPublicKeyInfoDER, try leaf.publicKey().subjectPublicKeyInfoDER)
        let p8 = try ECPrivateKey(pem: vector("library-test-chain/testSigningKey.p8"))
        XCTAssertEqual(p8.curve, .p256)
        let pem = try p8.pkcs8PEM()
        XCTAssertTrue(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        XCTAssertEqual(try ECPrivateKey(pem: Array(pem.utf8)).publicKey.subjectPublicKeyInfoDER, p8.publicKey.subjectPublicKeyInfoDER)
        XCTAssertThrowsError(try ECPrivateKey(pem: Array("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".utf8)))

        // Apple's renewalInfo vector is signed by testLeaf: verify the raw signature directly.
        let jws = try vector("library-mock-signed/renewalInfo")
        let text = String(decoding: jws, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        XCTAssertEqual(parts.count, 3)
        var b64 = String(parts[2]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.count % 4 != 0 { b64 += "=" }
        let sig = try XCTUnwrap(Data(base64Encoded: b64))
        let input = Array("\(parts[0]).\(parts[1])".utf8)
        XCTAssertTrue(try leaf.publicKey().verifyES256(signature: [UInt8](sig), message: input))
        XCTAssertFalse(try leaf.publicKey().verifyES256(signature: [UInt8](sig), message: input + [0x20]))
    }
}

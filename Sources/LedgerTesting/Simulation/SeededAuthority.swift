import AppStore
import Crypto
import CryptoTesting
import Foundation

extension AppleTestAuthority {
    /// A test authority whose keys, names, serials and validity follow from `seed` alone, so a
    /// service started with the root written by one `ledger-dev simulate` run keeps trusting the
    /// notifications of any later run with the same seed. (Certificate signatures are ECDSA and so
    /// differ byte for byte between runs; path validation only needs the same names and keys.)
    /// Anyone who knows the seed can sign as this authority: trust its root only in tests and demos.
    public static func seeded(_ seed: UInt64, name: String = "Ledger Simulator") throws -> AppleTestAuthority {
        let rootKey = try SeededECKey.make(seed: seed, label: "root", curve: .p384)
        let intKey = try SeededECKey.make(seed: seed, label: "intermediate", curve: .p384)
        let leafKey = try SeededECKey.make(seed: seed, label: "leaf", curve: .p256)
        let o = ChainOptions()
        // Serials must differ per issuer and stay stable per seed; 10 bits of room per role.
        let serialBase = Int(seed % 1_000_000_007) * 10 + 1
        let root = try X509Certificate.mint(
            CertificateTemplate(role: .root, subject: [("O", name), ("CN", "\(name) Root CA \(seed)")], serial: serialBase,
                                notBefore: o.caValidity.lowerBound, notAfter: o.caValidity.upperBound),
            subjectKey: rootKey.publicKey, issuer: nil, issuerKey: rootKey)
        let intermediate = try X509Certificate.mint(
            CertificateTemplate(role: .intermediate, subject: [("O", name), ("CN", "\(name) WWDR Intermediate \(seed)")],
                                serial: serialBase + 1, notBefore: o.caValidity.lowerBound, notAfter: o.caValidity.upperBound,
                                markerOIDs: [AppleOID.wwdrIntermediate]),
            subjectKey: intKey.publicKey, issuer: root, issuerKey: rootKey)
        let leaf = try X509Certificate.mint(
            CertificateTemplate(role: .leaf, subject: [("O", name), ("CN", "\(name) Receipt Signing \(seed)")],
                                serial: serialBase + 2, notBefore: o.leafValidity.lowerBound, notAfter: o.leafValidity.upperBound,
                                markerOIDs: [AppleOID.receiptSigningLeaf]),
            subjectKey: leafKey.publicKey, issuer: intermediate, issuerKey: intKey)
        return AppleTestAuthority(root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey)
    }
}

/// EC private keys derived from a seed: the scalar is SHA-256 output (two blocks for P-384) with
/// the top bit cleared, which keeps it below the group order of both curves and never zero in
/// practice; OpenSSL reads it as a SEC1 key and computes the public point itself.
enum SeededECKey {
    static func make(seed: UInt64, label: String, curve: ECCurve) throws -> ECPrivateKey {
        func block(_ i: Int) -> [UInt8] { Digest.sha256(Array("ledger-simulator/\(seed)/\(label)/\(i)".utf8)) }
        let curveOID: [UInt8]
        var scalar: [UInt8]
        switch curve {
        case .p256:
            curveOID = [0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07]  // prime256v1
            scalar = block(0)
        case .p384:
            curveOID = [0x06, 0x05, 0x2B, 0x81, 0x04, 0x00, 0x22]  // secp384r1
            scalar = block(0) + block(1).prefix(16)
        }
        scalar[0] &= 0x7F
        if scalar.allSatisfy({ $0 == 0 }) { scalar[scalar.count - 1] = 1 }
        // ECPrivateKey ::= SEQUENCE { version 1, privateKey OCTET STRING, [0] namedCurve } (RFC 5915);
        // every length is below 128, so short-form lengths suffice.
        let body: [UInt8] = [0x02, 0x01, 0x01, 0x04, UInt8(scalar.count)] + scalar + [0xA0, UInt8(curveOID.count)] + curveOID
        let der: [UInt8] = [0x30, UInt8(body.count)] + body
        let pem = "-----BEGIN EC PRIVATE KEY-----\n" + Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
            + "\n-----END EC PRIVATE KEY-----\n"
        return try ECPrivateKey(pem: Array(pem.utf8))
    }
}

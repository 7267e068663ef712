internal import COpenSSL
import Crypto
import Foundation

// Test PKIs only: nothing in the shipped `ledger` can mint a certificate, so no code path of the
// product can make itself a root that looks like Apple's. Linked by LedgerTesting, `ledger-dev`
// and the test targets (a test reads the package graph to keep it that way).

/// What to put in a certificate minted for a test PKI (the Apple test authority, hostile variants).
/// Defaults produce certificates that pass OpenSSL's X509_STRICT profile.
public struct CertificateTemplate: Sendable {
    public enum Role: Sendable { case root, intermediate, leaf }
    public var role: Role
    /// Relative distinguished names in order, e.g. [("O", "Test"), ("CN", "Leaf")].
    public var subject: [(String, String)]
    public var serial: Int
    /// Seconds since the epoch.
    public var notBefore: Int64
    public var notAfter: Int64
    /// Dotted OIDs added as non-critical marker extensions (value DER NULL), like Apple's.
    public var markerOIDs: [String]

    public init(role: Role, subject: [(String, String)], serial: Int, notBefore: Int64, notAfter: Int64, markerOIDs: [String] = []) {
        self.role = role
        self.subject = subject
        self.serial = serial
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.markerOIDs = markerOIDs
    }
}

extension X509Certificate {
    /// Mints a certificate for `subjectKey`, signed by `issuerKey` under `issuer` (nil: self-signed).
    /// CA certificates are signed with SHA-384 like Apple's; leaves with SHA-256.
    public static func mint(
        _ t: CertificateTemplate, subjectKey: ECPublicKey, issuer: X509Certificate?, issuerKey: ECPrivateKey
    ) throws(CryptoError) -> X509Certificate {
        guard let x = X509_new() else { throw .fromQueue("X509_new") }
        var owned = true
        defer { if owned { X509_free(x) } }
        guard X509_set_version(x, 2) == 1,
              ASN1_INTEGER_set(X509_get_serialNumber(x), t.serial) == 1,
              ASN1_TIME_set(X509_getm_notBefore(x), time_t(t.notBefore)) != nil,
              ASN1_TIME_set(X509_getm_notAfter(x), time_t(t.notAfter)) != nil,
              X509_set_pubkey(x, subjectKey.pkey) == 1
        else { throw .fromQueue("setting certificate fields") }

        guard let name = X509_NAME_new() else { throw .fromQueue("X509_NAME_new") }
        defer { X509_NAME_free(name) }
        for (field, value) in t.subject {
            guard X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, value, -1, -1, 0) == 1 else {
                throw .fromQueue("subject field \(field)")
            }
        }
        guard X509_set_subject_name(x, name) == 1,
              X509_set_issuer_name(x, issuer.map { X509_get_subject_name($0.x509) } ?? name) == 1
        else { throw .fromQueue("setting names") }

        var ctx = X509V3_CTX()
        X509V3_set_ctx(&ctx, issuer?.x509 ?? x, x, nil, nil, 0)
        var exts: [(Int32, String)] = []
        switch t.role {
        case .root: exts = [(NID_basic_constraints, "critical,CA:TRUE"), (NID_key_usage, "critical,keyCertSign,cRLSign")]
        case .intermediate: exts = [(NID_basic_constraints, "critical,CA:TRUE,pathlen:0"), (NID_key_usage, "critical,keyCertSign,cRLSign")]
        case .leaf: exts = [(NID_basic_constraints, "critical,CA:FALSE"), (NID_key_usage, "critical,digitalSignature")]
        }
        exts.append((NID_subject_key_identifier, "hash"))
        if issuer != nil { exts.append((NID_authority_key_identifier, "keyid:always")) }
        for (nid, value) in exts {
            guard let ext = X509V3_EXT_conf_nid(nil, &ctx, nid, value) else { throw .fromQueue("extension \(nid)") }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x, ext, -1) == 1 else { throw .fromQueue("X509_add_ext") }
        }
        for oid in t.markerOIDs {
            guard let obj = OBJ_txt2obj(oid, 1) else { throw .fromQueue("OID \(oid)") }
            defer { ASN1_OBJECT_free(obj) }
            guard let value = ASN1_OCTET_STRING_new() else { throw .fromQueue("ASN1_OCTET_STRING_new") }
            defer { ASN1_OCTET_STRING_free(value) }
            let null: [UInt8] = [0x05, 0x00]
            guard ASN1_OCTET_STRING_set(value, null, 2) == 1,
                  let ext = X509_EXTENSION_create_by_OBJ(nil, obj, 0, value)
            else { throw .fromQueue("marker extension \(oid)") }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x, ext, -1) == 1 else { throw .fromQueue("X509_add_ext") }
        }
        let md = t.role == .leaf ? EVP_sha256() : EVP_sha384()
        guard X509_sign(x, issuerKey.pkey, md) > 0 else { throw .fromQueue("X509_sign") }
        owned = false
        return X509Certificate(owning: x)
    }
}

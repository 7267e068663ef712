import AppStore
import Crypto
import CryptoTesting
import Foundation
import LedgerCore

/// Errors of the test authority; they describe test set-up mistakes.
public enum AppleTestAuthorityError: Error, CustomStringConvertible {
    case vectorsMissing(String)
    case crypto(String)
    case encoding(String)

    public var description: String {
        switch self {
        case .vectorsMissing(let why): return "Apple test vectors not found: \(why)"
        case .crypto(let why): return "test authority crypto failed: \(why)"
        case .encoding(let why): return "test authority could not encode a payload: \(why)"
        }
    }
}

/// Where Apple's test vectors are: `LEDGER_APPLE_VECTORS` when set, else the copy committed in
/// `Tests/Fixtures/apple-vectors` (byte-identical to the team's shared/apple-vectors, MIT, see its
/// README), else a `shared/apple-vectors` in a folder above the package. Never silently absent:
/// a missing folder throws.
public enum AppleVectors {
    public static func directory(from file: String = #filePath) throws(AppleTestAuthorityError) -> URL {
        if let env = ProcessInfo.processInfo.environment["LEDGER_APPLE_VECTORS"], !env.isEmpty {
            return try existing(URL(fileURLWithPath: env))
        }
        var dir = URL(fileURLWithPath: file).deletingLastPathComponent()
        while dir.path != "/" {
            for relative in ["Tests/Fixtures/apple-vectors", "shared/apple-vectors"] {
                let candidate = dir.appendingPathComponent(relative)
                if FileManager.default.fileExists(atPath: candidate.path) { return try existing(candidate) }
            }
            dir = dir.deletingLastPathComponent()
        }
        throw .vectorsMissing("no shared/apple-vectors in any folder above \(file); place a copy of shared/ beside the repository clone or set LEDGER_APPLE_VECTORS")
    }

    public static func read(_ relativePath: String, from file: String = #filePath) throws -> Data {
        let url = try directory(from: file).appendingPathComponent(relativePath)
        guard let d = FileManager.default.contents(atPath: url.path) else {
            throw AppleTestAuthorityError.vectorsMissing("\(url.path) does not exist; copy shared/apple-vectors beside the clone")
        }
        return d
    }

    private static func existing(_ url: URL) throws(AppleTestAuthorityError) -> URL {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDir), isDir.boolValue else {
            throw .vectorsMissing("\(url.path) is not a directory; place a copy of shared/ beside the repository clone")
        }
        return url
    }
}

/// A signing authority shaped like Apple's: root → intermediate (OID …100.6.2.1) → P-256 leaf
/// (OID …100.6.11.1). It signs V2 notification bodies with nested transaction / renewal / app
/// transaction JWS, and has a knob for every hostile variant the verifier must refuse. Used by the
/// test suites, `ledger-dev simulate` and `ledger-dev bench`. Never trust its root in production.
public final class AppleTestAuthority: Sendable {
    public let root: X509Certificate
    public let intermediate: X509Certificate
    public let leaf: X509Certificate
    public let leafKey: ECPrivateKey
    /// Apple's library test PKI lacks key identifiers and critical CA basicConstraints; a
    /// verifier for it must tolerate those strict-profile gaps (minted chains have none).
    public let needsProfileTolerance: Bool

    public init(root: X509Certificate, intermediate: X509Certificate, leaf: X509Certificate, leafKey: ECPrivateKey, needsProfileTolerance: Bool = false) {
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
        self.leafKey = leafKey
        self.needsProfileTolerance = needsProfileTolerance
    }

    /// Apple's published test chain from `library-test-chain/` (valid 2023-01-05 → 2033-01-01).
    public static func libraryTestChain(directory: URL? = nil, file: String = #filePath) throws -> AppleTestAuthority {
        let dir = try directory ?? AppleVectors.directory(from: file).appendingPathComponent("library-test-chain")
        func bytes(_ name: String) throws -> [UInt8] {
            guard let d = FileManager.default.contents(atPath: dir.appendingPathComponent(name).path) else {
                throw AppleTestAuthorityError.vectorsMissing("\(dir.path)/\(name) is missing")
            }
            return [UInt8](d)
        }
        return AppleTestAuthority(
            root: try X509Certificate(der: bytes("testCA.der")),
            intermediate: try X509Certificate.parsePEM(bytes("testIntermediate.pem"))[0],
            leaf: try X509Certificate.parsePEM(bytes("testLeaf.pem"))[0],
            leafKey: try ECPrivateKey(pem: bytes("testLeaf.key")),
            needsProfileTolerance: true)
    }

    /// How to mint a fresh chain; the defaults look like Apple's, the knobs make hostile chains.
    public struct ChainOptions: Sendable {
        public var name = "Ledger Test"
        /// nil: leave the marker extension out. Another OID: a look-alike chain.
        public var leafOID: String? = AppleOID.receiptSigningLeaf
        public var intermediateOID: String? = AppleOID.wwdrIntermediate
        /// Seconds since the epoch. Defaults 2020-01-01 → 2045-01-01.
        public var caValidity: ClosedRange<Int64> = 1_577_836_800...2_366_841_600
        public var leafValidity: ClosedRange<Int64> = 1_577_836_800...2_366_841_600
        /// Apple's CAs are P-384; P-256 mints faster when many chains are needed.
        public var caCurve: ECCurve = .p384
        public init() {}
    }

    public static func mint(_ o: ChainOptions = ChainOptions()) throws -> AppleTestAuthority {
        let rootKey = try ECPrivateKey.generate(curve: o.caCurve)
        let intKey = try ECPrivateKey.generate(curve: o.caCurve)
        let leafKey = try ECPrivateKey.generate(curve: .p256)
        let serialBase = Int(SecureRandom.bytes(3).reduce(0) { $0 << 8 | Int($1) }) * 10 + 1
        let root = try X509Certificate.mint(
            CertificateTemplate(role: .root, subject: [("O", o.name), ("CN", "\(o.name) Root CA")], serial: serialBase,
                                notBefore: o.caValidity.lowerBound, notAfter: o.caValidity.upperBound),
            subjectKey: rootKey.publicKey, issuer: nil, issuerKey: rootKey)
        let intermediate = try X509Certificate.mint(
            CertificateTemplate(role: .intermediate, subject: [("O", o.name), ("CN", "\(o.name) WWDR Intermediate")], serial: serialBase + 1,
                                notBefore: o.caValidity.lowerBound, notAfter: o.caValidity.upperBound,
                                markerOIDs: o.intermediateOID.map { [$0] } ?? []),
            subjectKey: intKey.publicKey, issuer: root, issuerKey: rootKey)
        let leaf = try X509Certificate.mint(
            CertificateTemplate(role: .leaf, subject: [("O", o.name), ("CN", "\(o.name) Receipt Signing")], serial: serialBase + 2,
                                notBefore: o.leafValidity.lowerBound, notAfter: o.leafValidity.upperBound,
                                markerOIDs: o.leafOID.map { [$0] } ?? []),
            subjectKey: leafKey.publicKey, issuer: intermediate, issuerKey: intKey)
        return AppleTestAuthority(root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey)
    }

    /// A verifier trusting only this authority's root.
    public func verifier(_ options: SignedDataVerifierOptions = SignedDataVerifierOptions()) -> SignedDataVerifier {
        var o = options
        if needsProfileTolerance { o.tolerateTestPKIProfileGaps = true }
        return SignedDataVerifier(trustedRoots: [root], options: o)
    }

    // MARK: signing

    /// What goes into `x5c`.
    public enum HeaderChain: Sendable {
        /// [leaf, intermediate, root], as Apple sends it.
        case standard
        case leafAndIntermediate
        /// [leaf, intermediate, root, extra]
        case withExtra(X509Certificate)
        case custom([X509Certificate])
        /// No `x5c` at all.
        case absent
    }

    /// Knobs for one JWS; defaults produce exactly what Apple would send.
    /// `alg` "HS256" signs with HMAC keyed by the leaf's public key (SPKI DER) — the classic
    /// algorithm-confusion attack; "none" or any other value leaves the signature empty.
    public struct JWSOptions: Sendable {
        public var alg = "ES256"
        public var x5c: HeaderChain = .standard
        /// Sign with another authority's leaf key while still sending this authority's chain
        /// (nil: this authority's key). Combined with `chainFrom` this mints whole foreign JWS.
        public var signingKey: ECPrivateKey? = nil
        /// Use another authority for both key and chain (e.g. a self-made root's chain).
        public var authority: AppleTestAuthority? = nil
        public var extraHeader: [String: String] = [:]
        /// Flip one bit of the signature after signing.
        public var corruptSignature = false
        public init() {}
    }

    /// Signs `payload` (JSON bytes) as a compact JWS.
    public func sign(payload: Data, _ o: JWSOptions = JWSOptions()) throws -> String {
        if let other = o.authority, other !== self {
            var rest = o
            rest.authority = nil
            return try other.sign(payload: payload, rest)
        }
        var header: [String: Any] = ["alg": o.alg]
        let b64 = { (c: X509Certificate) in Base64.encodeStandard(c.der) }
        switch o.x5c {
        case .standard: header["x5c"] = [leaf, intermediate, root].map(b64)
        case .leafAndIntermediate: header["x5c"] = [leaf, intermediate].map(b64)
        case .withExtra(let e): header["x5c"] = [leaf, intermediate, root, e].map(b64)
        case .custom(let certs): header["x5c"] = certs.map(b64)
        case .absent: break
        }
        for (k, v) in o.extraHeader { header[k] = v }
        let headerJSON = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys, .withoutEscapingSlashes])
        let signingInput = Base64.encodeURL([UInt8](headerJSON)) + "." + Base64.encodeURL([UInt8](payload))
        var signature: [UInt8]
        switch o.alg {
        case "ES256":
            signature = try (o.signingKey ?? leafKey).signES256(Array(signingInput.utf8))
        case "HS256":
            signature = Digest.hmacSHA256(key: try leaf.publicKey().subjectPublicKeyInfoDER, Array(signingInput.utf8))
        default:
            signature = []  // "none" and anything else: unsigned
        }
        if o.corruptSignature, !signature.isEmpty { signature[signature.count / 2] ^= 0x01 }
        return signingInput + "." + Base64.encodeURL(signature)
    }

    /// Signs an encodable model; `edit` changes the JSON before signing (unknown fields, wrong types…).
    public func sign<T: Encodable>(_ value: T, _ o: JWSOptions = JWSOptions(), edit: (inout [String: Any]) -> Void = { _ in }) throws -> String {
        try sign(payload: try Self.json(value, edit: edit), o)
    }

    /// Per-part knobs of a V2 notification body.
    public struct NotificationOptions: Sendable {
        public var outer = JWSOptions()
        public var transaction = JWSOptions()
        public var renewal = JWSOptions()
        public var appTransaction = JWSOptions()
        public init() {}
    }

    /// A V2 body `{"signedPayload": …}`: nested values are signed first and put in the right section
    /// (`data` for transaction/renewal, `appData` for the app transaction), then the notification.
    public func signNotification(
        _ notification: AppleNotification, transaction: AppleTransaction? = nil, renewal: AppleRenewalInfo? = nil,
        appTransaction: AppleAppTransaction? = nil, options: NotificationOptions = NotificationOptions(),
        editTransaction: (inout [String: Any]) -> Void = { _ in }, editRenewal: (inout [String: Any]) -> Void = { _ in },
        editOuter: (inout [String: Any]) -> Void = { _ in }
    ) throws -> Data {
        var n = notification
        if let transaction {
            if n.data == nil { n.data = .init() }
            n.data?.signedTransactionInfo = try sign(transaction, options.transaction, edit: editTransaction)
        }
        if let renewal {
            if n.data == nil { n.data = .init() }
            n.data?.signedRenewalInfo = try sign(renewal, options.renewal, edit: editRenewal)
        }
        if let appTransaction {
            if n.appData == nil { n.appData = .init() }
            n.appData?.signedAppTransactionInfo = try sign(appTransaction, options.appTransaction)
        }
        return try Self.body(signedPayload: sign(n, options.outer, edit: editOuter))
    }

    public static func body(signedPayload: String) throws -> Data {
        try JSONSerialization.data(withJSONObject: ["signedPayload": signedPayload], options: [.withoutEscapingSlashes])
    }

    static func json<T: Encodable>(_ value: T, edit: (inout [String: Any]) -> Void) throws -> Data {
        let encoded = try JSONEncoder().encode(value)
        guard var obj = try JSONSerialization.jsonObject(with: encoded) as? [String: Any] else {
            throw AppleTestAuthorityError.encoding("\(T.self) did not encode to a JSON object")
        }
        edit(&obj)
        return try JSONSerialization.data(withJSONObject: obj, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    // MARK: typical values

    /// A consistent subscription event: notification, transaction and renewal info that agree.
    public struct Sample: Sendable {
        public var notification: AppleNotification
        public var transaction: AppleTransaction
        public var renewal: AppleRenewalInfo
    }

    public static func sample(
        type: String = "SUBSCRIBED", subtype: String? = "INITIAL_BUY", uuid: String = UUID().uuidString.lowercased(),
        bundleId: String = "com.example", appAppleId: Int64 = 1234, environment: String = "Sandbox",
        originalTransactionId: String = "1000000000000001", transactionId: String? = nil,
        signedDate: EpochMillis = 1_767_225_600_000, expiresDate: EpochMillis = 1_769_904_000_000
    ) -> Sample {
        var n = AppleNotification()
        n.notificationType = type
        n.subtype = subtype
        n.notificationUUID = uuid
        n.version = "2.0"
        n.signedDate = AppleTime(signedDate)
        var d = AppleNotification.NotificationData()
        d.appAppleId = appAppleId
        d.bundleId = bundleId
        d.bundleVersion = "1"
        d.environment = environment
        d.status = 1
        n.data = d
        var t = AppleTransaction()
        t.transactionId = transactionId ?? originalTransactionId
        t.originalTransactionId = originalTransactionId
        t.webOrderLineItemId = "2000000000000001"
        t.bundleId = bundleId
        t.productId = "com.example.monthly"
        t.subscriptionGroupIdentifier = "21000001"
        t.purchaseDate = AppleTime(signedDate - 1000)
        t.originalPurchaseDate = AppleTime(signedDate - 1000)
        t.expiresDate = AppleTime(expiresDate)
        t.quantity = 1
        t.type = "Auto-Renewable Subscription"
        t.inAppOwnershipType = "PURCHASED"
        t.signedDate = AppleTime(signedDate)
        t.environment = environment
        t.transactionReason = "PURCHASE"
        t.storefront = "USA"
        t.storefrontId = "143441"
        t.price = 9990
        t.currency = "USD"
        var r = AppleRenewalInfo()
        r.originalTransactionId = originalTransactionId
        r.productId = "com.example.monthly"
        r.autoRenewProductId = "com.example.monthly"
        r.autoRenewStatus = 1
        r.signedDate = AppleTime(signedDate)
        r.environment = environment
        r.recentSubscriptionStartDate = AppleTime(signedDate - 1000)
        r.renewalDate = AppleTime(expiresDate)
        return Sample(notification: n, transaction: t, renewal: r)
    }

    /// A complete, valid V2 body for `sample`.
    public func signSample(_ s: Sample, options: NotificationOptions = NotificationOptions()) throws -> Data {
        try signNotification(s.notification, transaction: s.transaction, renewal: s.renewal, options: options)
    }
}

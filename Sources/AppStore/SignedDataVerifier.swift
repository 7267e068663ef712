import Crypto
import Foundation
import LedgerCore
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Apple's marker extensions (reference/apple.md §1.1 step 6): present on every App Store
/// signing chain, absent from ordinary WWDR/TLS certificates that also chain to Apple's root.
public enum AppleOID {
    public static let receiptSigningLeaf = "1.2.840.113635.100.6.11.1"
    public static let wwdrIntermediate = "1.2.840.113635.100.6.2.1"
}

/// Which kind of signed value is being verified; decides the field that gives the validation time.
public enum SignedDataKind: String, Sendable {
    case notification, transaction, renewalInfo, appTransaction

    /// App transactions are dated by `receiptCreationDate` (what Apple's libraries use), the rest by
    /// `signedDate`.
    var timeFields: [String] {
        self == .appTransaction ? ["receiptCreationDate", "signedDate"] : ["signedDate"]
    }
}

/// A verified JWS: the decoded payload and the facts the verification relied on.
public struct VerifiedSignedData {
    /// The payload exactly as signed (UTF-8 JSON).
    public let payloadJSON: [UInt8]
    /// The chain was checked at this time (ms): the payload's date, the override, or now.
    public let validationTime: Int64
    public let leafSubject: String
    /// The payload parsed once; unknown fields included.
    let object: [String: Any]

    public func payloadObject() -> [String: Any] { object }
}

public struct SignedDataVerifierOptions: Sendable {
    /// Verified chains kept; Apple rotates its leaf about every two years, so a handful is plenty.
    public var chainCacheCapacity: Int = 32
    /// Forces the chain validation time (ms) instead of the payload's date — for auditing whether
    /// stored evidence would verify at a given moment.
    public var validationTimeOverride: Int64? = nil
    /// The clock used when a payload carries no date (ms).
    public var now: @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
    /// Accept the strict-profile gaps of Apple's published library test PKI (see
    /// `X509ChainVerifier.verify`). Only for tests that use `library-test-chain`.
    public var tolerateTestPKIProfileGaps: Bool = false

    public init() {}
}

/// Verifies Apple's signed data (compact JWS with an `x5c` chain) the way reference/apple.md §1
/// describes: ES256 only, exactly three certificates of which the third is ignored, leaf and
/// intermediate chained to the configured roots at the payload's signing date, Apple's marker
/// OIDs, then the signature. Verified chains are cached, so steady traffic costs one P-256
/// verification per JWS. Thread-safe.
public final class SignedDataVerifier: Sendable {
    public let trustedRoots: [X509Certificate]
    public let options: SignedDataVerifierOptions
    private let cache: Mutex<ChainCache>

    public init(trustedRoots: [X509Certificate], options: SignedDataVerifierOptions = .init()) {
        precondition(!trustedRoots.isEmpty, "a verifier without trusted roots would refuse everything")
        self.trustedRoots = trustedRoots
        self.options = options
        self.cache = Mutex(ChainCache(capacity: max(1, options.chainCacheCapacity)))
    }

    /// How many full X.509 path validations ran (cache misses); a counter for tests and metrics.
    public var chainValidationCount: Int { cache.withLock { $0.validations } }
    public var cacheHitCount: Int { cache.withLock { $0.hits } }
    public var cachedChainCount: Int { cache.withLock { $0.entries.count } }
    var cachedHeaderCount: Int { cache.withLock { $0.headers.count } }

    public func verify(_ jws: String, kind: SignedDataKind) throws(AppleVerificationError) -> VerifiedSignedData {
        try verify(bytes: Array(jws.utf8), kind: kind)
    }

    public func verify(bytes: [UInt8], kind: SignedDataKind) throws(AppleVerificationError) -> VerifiedSignedData {
        switch try open(bytes: bytes, kind: kind, keepingUnreadable: false) {
        case .readable(let verified): return verified
        case .unreadable(let why): throw why
        }
    }

    /// A JWS whose signature was checked: readable, or authentic (the signature and chain hold)
    /// with a payload that cannot be read.
    public enum Opened {
        case readable(VerifiedSignedData)
        /// Why the payload cannot be read (not JSON, nested too deep, a signedDate that is no
        /// timestamp); the chain was checked at the current time, as there is no signing time.
        case unreadable(AppleVerificationError)
    }

    /// Like `verify`, but a payload that cannot be read does not hide whether the JWS is
    /// authentic: its signature and chain are checked anyway, and an authentic one comes back as
    /// `.unreadable` (ingestion keeps it as evidence; Apple may not send it again after a 4xx).
    public func open(bytes: [UInt8], kind: SignedDataKind) throws(AppleVerificationError) -> Opened {
        try open(bytes: bytes, kind: kind, keepingUnreadable: true)
    }

    private func open(bytes: [UInt8], kind: SignedDataKind, keepingUnreadable: Bool) throws(AppleVerificationError) -> Opened {
        let jws = try CompactJWS.parse(bytes, decodeHeader: false)
        // Apple's header (ES256 + the same three certificates) is identical on every JWS of a leaf,
        // so its checked x5c entries are remembered by the exact header text: steady traffic skips
        // decoding and parsing ~2.4 kB of header JSON per JWS. Only headers that passed are kept.
        let headerKey = Data(jws.headerSegment)
        let x5c: CheckedHeader
        if let hit = cache.withLock({ $0.headers[headerKey] }) {
            x5c = hit
        } else {
            x5c = try Self.checkHeader(jws.headerSegment)
            cache.withLock { $0.insertHeader(headerKey, x5c) }
        }
        let payload: [String: Any]
        let time: Int64
        do throws(AppleVerificationError) {
            payload = try JSONGuard.object(jws.payload, what: "JWS payload")
            guard jws.signature.count == 64 else {
                throw .malformed("ES256 signature must be 64 bytes (r‖s), got \(jws.signature.count)")
            }
            time = try validationTime(payload, kind: kind)
        } catch {
            guard keepingUnreadable, jws.signature.count == 64 else { throw error }
            try checkSignature(jws, x5c, atMillis: options.validationTimeOverride ?? options.now())
            return .unreadable(error)
        }
        let leafSubject = try checkSignature(jws, x5c, atMillis: time)
        return .readable(VerifiedSignedData(payloadJSON: jws.payload, validationTime: time, leafSubject: leafSubject, object: payload))
    }

    /// The leaf's signature over the JWS and its chain at `ms`; the leaf's subject.
    @discardableResult
    private func checkSignature(_ jws: CompactJWS, _ x5c: CheckedHeader, atMillis ms: Int64) throws(AppleVerificationError) -> String {
        let leaf = try verifiedLeaf(leaf: x5c.leaf, intermediate: x5c.intermediate, atMillis: ms, jws: jws)
        if !leaf.signatureChecked {
            guard leaf.key.verifyES256(signature: jws.signature, message: jws.signingInput) else { throw .badSignature }
        }
        return leaf.subject
    }

    /// The x5c entries of a header that names ES256, no `crit`, and exactly three certificates.
    struct CheckedHeader {
        let leaf: String
        let intermediate: String
    }

    static func checkHeader(_ segment: ArraySlice<UInt8>) throws(AppleVerificationError) -> CheckedHeader {
        guard let bytes = Base64.decodeURL(segment) else { throw .malformed("JWS header is not base64url") }
        let header = try JSONGuard.object(bytes, what: "JWS header")
        guard let alg = header["alg"] as? String else { throw .missingField("JWS header alg") }
        guard alg == "ES256" else { throw .unsupportedAlgorithm(alg) }
        // RFC 7515 §4.1.11: a `crit` extension we do not implement must make the JWS invalid.
        guard header["crit"] == nil else { throw .malformed("JWS header has a crit parameter this verifier does not implement") }
        guard let x5cAny = header["x5c"] else { throw .missingField("JWS header x5c") }
        guard let x5c = x5cAny as? [String] else { throw .malformed("JWS header x5c is not an array of strings") }
        guard x5c.count == 3 else { throw .invalidChainLength(x5c.count) }
        return CheckedHeader(leaf: x5c[0], intermediate: x5c[1])
    }

    /// Decodes without verifying — only for showing what a refused JWS claims (PayloadInspector).
    public static func decodeUnverified(_ jws: String) throws(AppleVerificationError) -> (header: [String: Any], payload: [String: Any]) {
        let parsed = try CompactJWS.parse(Array(jws.utf8))
        return (try JSONGuard.object(parsed.header, what: "JWS header"), try JSONGuard.object(parsed.payload, what: "JWS payload"))
    }

    private func validationTime(_ payload: [String: Any], kind: SignedDataKind) throws(AppleVerificationError) -> Int64 {
        if let forced = options.validationTimeOverride { return forced }
        for field in kind.timeFields {
            guard let value = payload[field] else { continue }
            guard let ms = JSONNumbers.millis(value) else { throw .malformed("\(field) is not a millisecond timestamp") }
            return ms
        }
        return options.now()
    }

    private func verifiedLeaf(
        leaf: String, intermediate: String, atMillis ms: Int64, jws: CompactJWS
    ) throws(AppleVerificationError) -> (key: ECPublicKey, subject: String, signatureChecked: Bool) {
        let seconds = ms >= 0 ? ms / 1000 : (ms - 999) / 1000
        var keyMaterial = Array(leaf.utf8)
        keyMaterial.append(UInt8(ascii: "."))
        keyMaterial.append(contentsOf: intermediate.utf8)
        let key = Data(Digest.sha256(keyMaterial))
        if let hit = cache.withLock({ $0.lookup(key) }), hit.window.contains(epochSeconds: seconds) {
            return (hit.leafKey, hit.leafSubject, false)
        }
        // Miss, or a cached chain outside its window: validate in full (another root might cover
        // this time), outside the lock so concurrent requests are not serialised on P-384 math.
        guard let leafDER = Base64.decodeStandard(leaf.utf8), let intDER = Base64.decodeStandard(intermediate.utf8) else {
            throw .invalidCertificate("x5c entries must be standard base64 DER")
        }
        let leafCert: X509Certificate, intCert: X509Certificate
        do {
            leafCert = try X509Certificate(der: leafDER)
            intCert = try X509Certificate(der: intDER)
        } catch {
            throw .invalidCertificate("\(error)")
        }
        // Cheap policy checks first: a chain without Apple's markers is refused before any signature math.
        guard leafCert.hasExtension(oid: AppleOID.receiptSigningLeaf) else {
            throw .missingAppleOID(certificate: "leaf \(leafCert.subject)", oid: AppleOID.receiptSigningLeaf)
        }
        guard intCert.hasExtension(oid: AppleOID.wwdrIntermediate) else {
            throw .missingAppleOID(certificate: "intermediate \(intCert.subject)", oid: AppleOID.wwdrIntermediate)
        }
        let leafKey: ECPublicKey
        do { leafKey = try leafCert.publicKey() } catch { throw .invalidCertificate("leaf key: \(error)") }
        guard leafKey.curve == .p256 else { throw .invalidCertificate("the leaf key is not P-256, so it cannot sign ES256") }
        // The signature before the chain: a path validation costs many times one P-256 verify, and
        // a miss is what an unauthenticated sender can force at will (take a genuine JWS, move its
        // signedDate outside the cached window, or send any chain). With this order, only data
        // signed by the key in x5c[0] pays for path validation. The key is not trusted yet; the
        // chain check below decides that.
        guard leafKey.verifyES256(signature: jws.signature, message: jws.signingInput) else { throw .badSignature }
        cache.withLock { $0.validations += 1 }
        let window: VerifiedChainWindow
        do {
            window = try X509ChainVerifier.verify(
                leaf: leafCert, intermediates: [intCert], roots: trustedRoots,
                atEpochSeconds: seconds, tolerateProfileGaps: options.tolerateTestPKIProfileGaps)
        } catch {
            switch error {
            case .expired, .notYetValid: throw .certificateNotValidAtSigningTime("\(error) (validation time \(ms) ms)")
            case .untrusted, .invalid: throw .untrustedChain("\(error)")
            }
        }
        // A valid path is not enough: OpenSSL may build leaf → root directly (a leaf a trusted root
        // signed itself), ignoring the x5c[1] whose marker OID was checked above. Apple's chain is
        // exactly the leaf, x5c[1], and one of the configured roots.
        let path = window.pathDER
        guard path.count == 3, path[0] == leafDER, path[1] == intDER, trustedRoots.contains(where: { $0.der == path[2] }) else {
            throw .untrustedChain("the verified path is not leaf → x5c[1] → a trusted root (\(path.count) certificates; the leaf must be issued by x5c[1], and x5c[1] by a configured root)")
        }
        let entry = ChainCache.Entry(leafKey: leafKey, leafSubject: leafCert.subject, window: window)
        cache.withLock { $0.insert(key, entry) }
        return (leafKey, leafCert.subject, true)
    }
}

/// Verified leaf+intermediate pairs, keyed by SHA-256 of their x5c text. FIFO-bounded.
struct ChainCache: ~Copyable {
    struct Entry {
        let leafKey: ECPublicKey
        let leafSubject: String
        let window: VerifiedChainWindow
    }

    let capacity: Int
    var entries: [Data: Entry] = [:]
    var order: [Data] = []
    /// Checked JWS headers by their exact base64url text; a few suffice (one per live leaf).
    static let headerCapacity = 8
    var headers: [Data: SignedDataVerifier.CheckedHeader] = [:]
    var headerOrder: [Data] = []
    var validations = 0
    var hits = 0

    init(capacity: Int) { self.capacity = capacity }

    mutating func lookup(_ key: Data) -> Entry? {
        guard let e = entries[key] else { return nil }
        hits += 1
        return e
    }

    mutating func insertHeader(_ key: Data, _ header: SignedDataVerifier.CheckedHeader) {
        guard headers[key] == nil else { return }
        if headers.count >= Self.headerCapacity, !headerOrder.isEmpty { headers[headerOrder.removeFirst()] = nil }
        headerOrder.append(key)
        headers[key] = header
    }

    mutating func insert(_ key: Data, _ entry: Entry) {
        if entries[key] == nil {
            if entries.count >= capacity, !order.isEmpty { entries[order.removeFirst()] = nil }
            order.append(key)
        }
        entries[key] = entry
    }
}

/// The three parts of a compact JWS, decoded strictly.
struct CompactJWS {
    /// Empty when parsed with `decodeHeader: false` (the verifier decodes it only on a cache miss).
    let header: [UInt8]
    let headerSegment: ArraySlice<UInt8>
    let payload: [UInt8]
    let signature: [UInt8]
    let signingInput: ArraySlice<UInt8>

    static func parse(_ bytes: [UInt8], decodeHeader: Bool = true) throws(AppleVerificationError) -> CompactJWS {
        let dots = ByteScan.positions(of: UInt8(ascii: "."), in: bytes, limit: 3)
        guard dots.count == 2 else {
            throw .malformed("a compact JWS has exactly three dot-separated segments, found \(dots.count + 1)\(dots.count > 2 ? " or more" : "")")
        }
        let h = bytes[..<dots[0]], p = bytes[(dots[0] + 1)..<dots[1]], s = bytes[(dots[1] + 1)...]
        guard !h.isEmpty, !p.isEmpty else { throw .malformed("JWS header or payload segment is empty") }
        var header: [UInt8] = []
        if decodeHeader {
            guard let decoded = Base64.decodeURL(h) else { throw .malformed("JWS header is not base64url") }
            header = decoded
        }
        guard let payload = Base64.decodeURL(p) else { throw .malformed("JWS payload is not base64url") }
        guard let signature = Base64.decodeURL(s) else { throw .malformed("JWS signature is not base64url") }
        return CompactJWS(header: header, headerSegment: h, payload: payload, signature: signature, signingInput: bytes[..<dots[1]])
    }
}

/// Reading values out of JSONSerialization results.
enum JSONNumbers {
    /// PostgreSQL's `timestamptz` range (4713 BC … 294276 AD) in ms. A time outside it is no date
    /// any document means, and the event could not be stored: the append would fail after the
    /// notification was accepted (found by the fuzz tests).
    static let storableMillis: ClosedRange<Int64> = -210_866_803_200_000...9_224_318_015_999_999

    /// Whether a JSONSerialization number is a JSON `true`/`false` (`FoundationJSON.isBoolean`).
    static func isBoolean(_ n: NSNumber) -> Bool { FoundationJSON.isBoolean(n) }

    /// A millisecond timestamp: integer, or fractional (Xcode) rounded to the nearest ms; nil when
    /// not a number or outside `storableMillis`.
    static func millis(_ v: Any?) -> Int64? {
        guard let ms = FoundationJSON.millis(v) else { return nil }
        return storableMillis.contains(ms) ? ms : nil
    }

    static func int64(_ v: Any?) -> Int64? { FoundationJSON.int64(v) }
}

/// Byte searches through libc's `memchr`: the generic `firstIndex(of:)` on a slice is instantiated
/// unoptimised in a debug build and cost more per JWS than everything else but the signature
/// (measured by the fuzz tests; the release build specialises it, but tests run debug).
enum ByteScan {
    static func contains(_ byte: UInt8, in bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBufferPointer { b in b.baseAddress.map { memchr($0, Int32(byte), b.count) != nil } ?? false }
    }

    /// Offsets of the first `limit` occurrences of `byte`.
    static func positions(of byte: UInt8, in bytes: [UInt8], limit: Int) -> [Int] {
        bytes.withUnsafeBufferPointer { b -> [Int] in
            guard let base = b.baseAddress else { return [] }
            var found: [Int] = []
            var from = 0
            while found.count < limit, from < b.count, let hit = memchr(base + from, Int32(byte), b.count - from) {
                let at = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                found.append(at)
                from = at + 1
            }
            return found
        }
    }
}

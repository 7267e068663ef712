import Foundation

/// A Standard Webhooks 1.0 symmetric secret: shown as `whsec_<base64 of the key>`; the key is
/// the decoded bytes. Its description never shows the key (secrets are never logged).
public struct WebhookSecret: Sendable, Hashable, CustomStringConvertible {
    public let key: [UInt8]

    public static let prefix = "whsec_"
    /// Standard Webhooks recommends 24–64 bytes; shorter keys are refused.
    public static let minimumKeyBytes = 24
    public static let maximumKeyBytes = 64

    public init(key: [UInt8]) throws(WebhookSignatureError) {
        guard (Self.minimumKeyBytes...Self.maximumKeyBytes).contains(key.count) else {
            throw .secretSize(key.count)
        }
        self.key = key
    }

    /// Parses `whsec_<base64>` (the prefix is required, so a key pasted without it is not read as
    /// different bytes than the receiver uses).
    public init(text: String) throws(WebhookSignatureError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.hasPrefix(Self.prefix) else { throw .secretFormat }
        guard let data = Data(base64Encoded: String(trimmed.dropFirst(Self.prefix.count))) else { throw .secretFormat }
        try self.init(key: Array(data))
    }

    /// A fresh 32-byte secret.
    public static func generate() -> WebhookSecret {
        // 32 is within the accepted range: the initialiser cannot throw here.
        try! WebhookSecret(key: SecureRandom.bytes(32))
    }

    /// The form the receiver configures. Shown once, to whoever created or rotated it.
    public var text: String { Self.prefix + Data(key).base64EncodedString() }

    /// A public name for the secret (not the key): the first 8 hex digits of SHA-256 of the key,
    /// so an operator can tell which secret an endpoint signs with without seeing it.
    public var fingerprint: String { String(Hex.encode(Digest.sha256(key)).prefix(8)) }

    public var description: String { "whsec_…(\(fingerprint))" }
}

public enum WebhookSignatureError: Error, Equatable, CustomStringConvertible {
    case secretFormat
    case secretSize(Int)
    case missingHeader(String)
    case badTimestamp(String)
    case timestampOutOfTolerance(skewSeconds: Int64)
    case noMatchingSignature

    public var description: String {
        switch self {
        case .secretFormat: "a webhook secret has the form whsec_<base64 of 24–64 bytes>"
        case .secretSize(let n): "a webhook secret must be 24–64 bytes once base64-decoded, this one is \(n)"
        case .missingHeader(let h): "the request has no \(h) header"
        case .badTimestamp(let t): "webhook-timestamp must be integer Unix seconds, got \(t)"
        case .timestampOutOfTolerance(let s): "webhook-timestamp is \(s) s away from this clock (more than the tolerance)"
        case .noMatchingSignature: "no v1 signature in webhook-signature matches the body with the configured secret"
        }
    }
}

/// Standard Webhooks 1.0 (standardwebhooks.com) signing, symmetric `v1`: HMAC-SHA256 over
/// `<webhook-id>.<webhook-timestamp>.<body>`, base64, in `webhook-signature` as `v1,<sig>`; several
/// signatures space-separated (a rotation sends one per secret in force).
public enum StandardWebhooks {
    public static let idHeader = "webhook-id"
    public static let timestampHeader = "webhook-timestamp"
    public static let signatureHeader = "webhook-signature"
    /// How far a receiver lets a timestamp be from its clock (the reference libraries use 5 min).
    public static let tolerance: Int64 = 300

    public static func signature(id: String, timestamp: Int64, body: Data, secret: WebhookSecret) -> String {
        var content = Data("\(id).\(timestamp).".utf8)
        content.append(body)
        return "v1," + Data(Digest.hmacSHA256(key: secret.key, content)).base64EncodedString()
    }

    /// The three headers for one attempt, one signature per secret (in the order given).
    public static func headers(id: String, timestamp: Int64, body: Data, secrets: [WebhookSecret]) -> [(String, String)] {
        [
            (idHeader, id),
            (timestampHeader, String(timestamp)),
            (signatureHeader, secrets.map { signature(id: id, timestamp: timestamp, body: body, secret: $0) }.joined(separator: " ")),
        ]
    }

    /// The receiver's check: the timestamp within `tolerance` of `now` (Unix s), and any `v1`
    /// signature equal (in constant time) to one computed with any of `secrets`.
    public static func verify(
        id: String?, timestamp: String?, signatures: String?, body: Data, secrets: [WebhookSecret], now: Int64,
        tolerance: Int64 = tolerance
    ) throws(WebhookSignatureError) {
        guard let id, !id.isEmpty else { throw .missingHeader(idHeader) }
        guard let timestamp else { throw .missingHeader(timestampHeader) }
        guard let signatures else { throw .missingHeader(signatureHeader) }
        guard let ts = Int64(timestamp) else { throw .badTimestamp(timestamp) }
        let skew = ts > now ? ts - now : now - ts
        guard skew <= tolerance else { throw .timestampOutOfTolerance(skewSeconds: ts - now) }
        let offered = signatures.split(separator: " ").map(String.init).filter { $0.hasPrefix("v1,") }
        for secret in secrets {
            let expected = signature(id: id, timestamp: ts, body: body, secret: secret)
            for candidate in offered where ConstantTime.equals(candidate, expected) { return }
        }
        throw .noMatchingSignature
    }

    /// The message id of an event identity (`WebhookEvent.identity`): `evt_` and 32 hex digits of
    /// its SHA-256, so the id is short, header-safe and reveals nothing of customer ids.
    public static func messageId(for identity: String) -> String {
        "evt_" + Hex.encode(Digest.sha256(Array(identity.utf8))).prefix(32)
    }
}

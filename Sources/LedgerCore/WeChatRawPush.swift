import Foundation

/// Reading the `raw` column of a WeChat push event (written by WeChatPay's `RawPush.encode`):
/// `{"v":…,"format":…,"query":{…},"body":"<exact body>"}` or `"body_base64"` for a body that is not
/// UTF-8. The one reader of that layout: the re-verification of evidence and the store's
/// plaintext-nonce step both read through it.
public struct WeChatRawPush: Sendable, Equatable {
    /// The query parameters that were sent (`signature`, `timestamp`, `nonce`, `encrypt_type`, …).
    public var query: [String: String]
    /// The exact body received.
    public var body: [UInt8]

    public init?(raw: Data) {
        guard let v = try? JSONDecoder().decode(JSONValue.self, from: raw) else { return nil }
        if case .string(let s)? = v["body"] {
            body = Array(s.utf8)
        } else if case .string(let s)? = v["body_base64"], let d = Data(base64Encoded: s) {
            body = Array(d)
        } else {
            return nil
        }
        var q: [String: String] = [:]
        if case .object(let o)? = v["query"] {
            for (k, value) in o { if case .string(let s) = value { q[k] = s } }
        }
        query = q
    }

    /// The nonce of a plaintext-mode push (its signature covers the query only, so its nonce may
    /// carry one body: Migrations/0008); nil for an encrypted push.
    public var plaintextNonce: String? {
        guard query["encrypt_type"].map({ $0.lowercased() != "aes" }) ?? true else { return nil }
        return query["nonce"]
    }
}

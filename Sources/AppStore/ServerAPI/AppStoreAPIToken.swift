import Crypto
import Foundation

/// The bearer token of one App Store Server API request (reference/appstore-server-api.md §2):
/// header `{"alg":"ES256","kid":…,"typ":"JWT"}`, claims `{"iss","iat","exp","aud":"appstoreconnect-v1","bid"}`
/// with `iat`/`exp` in **seconds**, signed ES256 over `b64url(header).b64url(claims)` with the raw
/// 64-byte r‖s signature (not DER) — the three mistakes Apple answers with a bare 401.
public enum AppStoreAPIToken {
    public static let audience = "appstoreconnect-v1"
    /// Apple refuses tokens that live longer than an hour.
    public static let maxLifetimeSeconds: Int64 = 3600

    /// A fresh token issued at `issuedAt` (seconds) for `lifetime` seconds (clamped to 1…3600).
    public static func make(
        issuerId: String, keyId: String, bundleId: String, key: ECPrivateKey, issuedAt: Int64, lifetime: Int64
    ) throws(AppStoreServerAPIError) -> String {
        let life = min(max(lifetime, 1), maxLifetimeSeconds)
        let header: [String: Any] = ["alg": "ES256", "kid": keyId, "typ": "JWT"]
        let claims: [String: Any] = [
            "iss": issuerId, "iat": issuedAt, "exp": issuedAt + life, "aud": audience, "bid": bundleId,
        ]
        let headerJSON: Data, claimsJSON: Data
        do {
            headerJSON = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys, .withoutEscapingSlashes])
            claimsJSON = try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys, .withoutEscapingSlashes])
        } catch {
            throw .invalidRequest("the token claims could not be encoded: \(error)")
        }
        let signingInput = Base64.encodeURL([UInt8](headerJSON)) + "." + Base64.encodeURL([UInt8](claimsJSON))
        let signature: [UInt8]
        do { signature = try key.signES256(Array(signingInput.utf8)) } catch {
            throw .configuration("the In-App Purchase key could not sign the token: \(error)")
        }
        return signingInput + "." + Base64.encodeURL(signature)
    }

    /// A token for `configuration` issued now (`nowMillis`).
    static func make(_ configuration: AppStoreServerAPIConfiguration, nowMillis: Int64) throws(AppStoreServerAPIError) -> String {
        try make(issuerId: configuration.issuerId, keyId: configuration.keyId, bundleId: configuration.bundleId,
                 key: configuration.privateKey, issuedAt: nowMillis / 1000, lifetime: configuration.tokenLifetimeSeconds)
    }
}

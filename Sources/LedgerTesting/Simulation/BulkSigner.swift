import AppStore
import Crypto
import Foundation
import LedgerCore

/// Signs many notifications with one authority as `AppleTestAuthority.signNotification` would
/// (same header, same nesting), but with the JWS header encoded once and models encoded straight
/// to JSON: re-encoding the three-certificate header for every JWS cost the simulator more than
/// the ECDSA signatures themselves.
struct BulkSigner: Sendable {
    let headerSegment: String
    let key: ECPrivateKey

    init(_ authority: AppleTestAuthority) throws {
        let header: [String: Any] = [
            "alg": "ES256",
            "x5c": [authority.leaf, authority.intermediate, authority.root].map { Base64.encodeStandard($0.der) },
        ]
        let json = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys, .withoutEscapingSlashes])
        headerSegment = Base64.encodeURL([UInt8](json))
        key = authority.leafKey
    }

    func sign<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let input = headerSegment + "." + Base64.encodeURL([UInt8](try encoder.encode(value)))
        return input + "." + Base64.encodeURL(try key.signES256(Array(input.utf8)))
    }

    /// `{"signedPayload": …}` with the transaction and renewal signed into `data`.
    func body(_ notification: AppleNotification, transaction: AppleTransaction, renewal: AppleRenewalInfo) throws -> Data {
        var n = notification
        if n.data == nil { n.data = .init() }
        n.data?.signedTransactionInfo = try sign(transaction)
        n.data?.signedRenewalInfo = try sign(renewal)
        // A compact JWS is base64url and dots only: nothing in it needs JSON escaping.
        return Data(#"{"signedPayload":""#.utf8) + Data(try sign(n).utf8) + Data(#""}"#.utf8)
    }
}

import Foundation
import LedgerCore

/// What `ledger verify-payload` reports about one input.
public struct InspectionReport: Sendable {
    public enum InputKind: String, Sendable {
        case jws = "compact JWS"
        case v2Notification = "V2 notification body"
        case v1Notification = "V1 notification body (unsigned)"
    }

    /// One signed value found in the input and what verification said about it.
    public struct Outcome: Sendable, Equatable {
        /// Where it sits: `signedPayload`, `data.signedTransactionInfo`, … or `jws`.
        public var path: String
        public var error: AppleVerificationError?
        /// The time (ms) the chain was checked at, when verification got that far.
        public var validationTime: Int64?
        public var leafSubject: String?
        public var verified: Bool { error == nil }
    }

    public var kind: InputKind
    public var outcomes: [Outcome]
    /// The decoded JSON (nested JWS decoded in place as transactionInfo / renewalInfo /
    /// appTransactionInfo), pretty-printed. A value that failed verification is still decoded so
    /// the operator can see what it claims — the outcomes say whether to believe it.
    public var decodedJSON: Data

    /// True when every signed value verified (a V1 body has none and is never "verified").
    public var allVerified: Bool { !outcomes.isEmpty && outcomes.allSatisfy(\.verified) }

    public func render() -> String {
        var lines = ["input: \(kind.rawValue)"]
        if outcomes.isEmpty { lines.append("no signatures to verify: V1 notifications are authenticated only by the shared secret") }
        for o in outcomes {
            if let e = o.error {
                lines.append("\(o.path): REFUSED \(e.code) — \(e.message)")
            } else {
                lines.append("\(o.path): verified (chain checked at \(o.validationTime.map(String.init) ?? "?") ms, leaf \(o.leafSubject ?? "?"))")
            }
        }
        lines.append(String(decoding: decodedJSON, as: UTF8.self))
        return lines.joined(separator: "\n")
    }
}

/// Offline verification of stored or captured Apple evidence: a compact JWS, a V2 body
/// (`{"signedPayload": …}`) or a stored V1 body. Every JWS is checked at its own signedDate with the
/// given verifier's roots; no acceptance policy (app, environment) is applied — that is a
/// deployment's decision, not a property of the evidence.
public struct PayloadInspector: Sendable {
    public let verifier: SignedDataVerifier

    public init(verifier: SignedDataVerifier) { self.verifier = verifier }

    public func inspect(_ input: Data) throws(AppleVerificationError) -> InspectionReport {
        var bytes = [UInt8](input)
        while let last = bytes.last, [0x20, 0x09, 0x0A, 0x0D].contains(last) { bytes.removeLast() }
        while let first = bytes.first, [0x20, 0x09, 0x0A, 0x0D].contains(first) { bytes.removeFirst() }
        guard let first = bytes.first else { throw .malformed("the input is empty") }
        var outcomes: [InspectionReport.Outcome] = []
        let decoded: [String: Any]
        let kind: InspectionReport.InputKind
        if first == UInt8(ascii: "{") {
            let object = try JSONGuard.object(bytes, what: "input")
            if let signed = object["signedPayload"] as? String {
                kind = .v2Notification
                var outer = check(signed, kind: .notification, path: "signedPayload", into: &outcomes)
                let section = ["data", "summary", "externalPurchaseToken", "appData"].first { outer[$0] is [String: Any] }
                if let section, let s = outer[section] as? [String: Any] {
                    let nested: [(String, String, SignedDataKind)] = [
                        ("signedTransactionInfo", "transactionInfo", .transaction),
                        ("signedRenewalInfo", "renewalInfo", .renewalInfo),
                        ("signedAppTransactionInfo", "appTransactionInfo", .appTransaction),
                    ]
                    for (field, target, k) in nested {
                        guard let jws = s[field] as? String else { continue }
                        outer[target] = check(jws, kind: k, path: "\(section).\(field)", into: &outcomes)
                    }
                }
                decoded = outer
            } else if let body = Self.v1Body(object) {
                kind = .v1Notification
                var redacted = body
                if redacted["password"] != nil { redacted["password"] = V1Redaction.placeholder }
                decoded = redacted
            } else {
                throw .malformed("a JSON input must be a V2 body with signedPayload, a V1 body with notification_type, or a stored V1 payload {\"responseBodyV1\": …}")
            }
        } else {
            kind = .jws
            let text = String(decoding: bytes, as: UTF8.self)
            let unverified = try SignedDataVerifier.decodeUnverified(text).payload
            let k: SignedDataKind = unverified["receiptType"] != nil ? .appTransaction
                : unverified["notificationType"] != nil ? .notification : .transaction
            decoded = check(text, kind: k, path: "jws", into: &outcomes)
        }
        let json = (try? JSONSerialization.data(withJSONObject: decoded, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return InspectionReport(kind: kind, outcomes: outcomes, decodedJSON: json)
    }

    /// A V1 body as posted (or as stored in `raw`), or a stored V1 `payload`, which keeps the body
    /// under `responseBodyV1`.
    static func v1Body(_ object: [String: Any]) -> [String: Any]? {
        if object["notification_type"] != nil { return object }
        if object.count == 1, let body = object[AppleV1Subscription.payloadKey] as? [String: Any], body["notification_type"] != nil {
            return body
        }
        return nil
    }

    private func check(_ jws: String, kind: SignedDataKind, path: String, into outcomes: inout [InspectionReport.Outcome]) -> [String: Any] {
        do {
            let v = try verifier.verify(jws, kind: kind)
            outcomes.append(.init(path: path, error: nil, validationTime: v.validationTime, leafSubject: v.leafSubject))
            return v.object
        } catch {
            outcomes.append(.init(path: path, error: error, validationTime: nil, leafSubject: nil))
            return (try? SignedDataVerifier.decodeUnverified(jws).payload) ?? [:]
        }
    }
}

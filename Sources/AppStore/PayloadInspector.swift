import Foundation
import LedgerCore

/// What `ledger verify-payload` reports about one input.
public struct InspectionReport: Sendable {
    public enum InputKind: String, Sendable {
        case jws = "compact JWS"
        case v2Notification = "V2 notification body"
        case v1Notification = "V1 notification body (unsigned)"
        /// The raw of an `API/subscription-status` event.
        case statusResponse = "Get All Subscription Statuses answer"
        case transactionHistory = "Get Transaction History page"
        case notificationHistory = "Get Notification History page"
        /// The raw of an `API/verify-receipt` event: Apple signs nothing in it.
        case verifyReceipt = "verifyReceipt answer (unsigned)"
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
        if outcomes.isEmpty {
            switch kind {
            case .verifyReceipt:
                lines.append("no signatures to verify: a verifyReceipt answer is authenticated only by the TLS connection to Apple's host it came over")
            case .v1Notification:
                lines.append("no signatures to verify: V1 notifications are authenticated only by the shared secret")
            default:
                lines.append("no signed items in it")
            }
        }
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
                decoded = notification(signed, path: "signedPayload", into: &outcomes)
            } else if let groups = object["data"] as? [Any], object["bundleId"] != nil || groups.contains(where: { ($0 as? [String: Any])?["lastTransactions"] != nil }) {
                kind = .statusResponse
                var out = object
                out["data"] = groups.enumerated().map { g, group -> Any in
                    guard var group = group as? [String: Any], let items = group["lastTransactions"] as? [Any] else { return group }
                    group["lastTransactions"] = items.enumerated().map { i, item -> Any in
                        guard var item = item as? [String: Any] else { return item }
                        let slot = "data[\(g)].lastTransactions[\(i)]"
                        if let jws = item.removeValue(forKey: "signedTransactionInfo") as? String {
                            item["transactionInfo"] = check(jws, kind: .transaction, path: "\(slot).signedTransactionInfo", into: &outcomes)
                        }
                        if let jws = item.removeValue(forKey: "signedRenewalInfo") as? String {
                            item["renewalInfo"] = check(jws, kind: .renewalInfo, path: "\(slot).signedRenewalInfo", into: &outcomes)
                        }
                        return item
                    }
                    return group
                }
                decoded = out
            } else if let signed = object["signedTransactions"] as? [Any] {
                kind = .transactionHistory
                var out = object
                out["signedTransactions"] = nil
                out["transactions"] = signed.enumerated().map { i, jws -> Any in
                    guard let jws = jws as? String else { return jws }
                    return check(jws, kind: .transaction, path: "signedTransactions[\(i)]", into: &outcomes)
                }
                decoded = out
            } else if let items = object["notificationHistory"] as? [Any] {
                kind = .notificationHistory
                var out = object
                out["notificationHistory"] = items.enumerated().map { i, item -> Any in
                    guard var item = item as? [String: Any], let jws = item.removeValue(forKey: "signedPayload") as? String else { return item }
                    item["notification"] = notification(jws, path: "notificationHistory[\(i)].signedPayload", into: &outcomes)
                    return item
                }
                decoded = out
            } else if object["status"] != nil, object["receipt"] != nil || object["latest_receipt_info"] != nil {
                kind = .verifyReceipt
                var out = object
                if out["latest_receipt"] != nil { out["latest_receipt"] = "(the receipt, base64; omitted)" }
                decoded = out
            } else if let body = Self.v1Body(object) {
                kind = .v1Notification
                var redacted = body
                if redacted["password"] != nil { redacted["password"] = V1Redaction.placeholder }
                decoded = redacted
            } else {
                throw .malformed("a JSON input must be a V2 body with signedPayload, a V1 body with notification_type, a stored V1 payload {\"responseBodyV1\": …}, or the raw of an App Store API answer (statuses with data[].lastTransactions, a history page with signedTransactions, a notification history page, a verifyReceipt answer); a stored API payload ({\"statusResponse\": …}) holds no signatures: give the event's raw instead")
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

    /// A V2 notification JWS and its nested JWS, decoded in place.
    private func notification(_ signed: String, path: String, into outcomes: inout [InspectionReport.Outcome]) -> [String: Any] {
        var outer = check(signed, kind: .notification, path: path, into: &outcomes)
        let section = ["data", "summary", "externalPurchaseToken", "appData"].first { outer[$0] is [String: Any] }
        if let section, let s = outer[section] as? [String: Any] {
            let nested: [(String, String, SignedDataKind)] = [
                ("signedTransactionInfo", "transactionInfo", .transaction),
                ("signedRenewalInfo", "renewalInfo", .renewalInfo),
                ("signedAppTransactionInfo", "appTransactionInfo", .appTransaction),
            ]
            let prefix = path == "signedPayload" ? "" : path + "."
            for (field, target, k) in nested {
                guard let jws = s[field] as? String else { continue }
                outer[target] = check(jws, kind: k, path: "\(prefix)\(section).\(field)", into: &outcomes)
            }
        }
        return outer
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

import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// The JSON the API answers with, built as `JSONValue` (the one JSON value type; canonical output
/// with sorted keys): Apple's camelCase names and millisecond timestamps. Absent values are JSON
/// null, so every documented key is always present.
enum Representation {
    /// The one representation, shared with webhooks (`SubscriptionState.representation`).
    static func subscription(_ s: SubscriptionState) -> JSONValue { s.representation }

    static func customer(_ s: SubscriptionState) -> JSONValue { s.customerRepresentation }

    static func entitlement(_ g: EntitlementGrant) -> JSONValue {
        [
            "environment": .string(g.environment),
            "entitlement": .string(g.entitlement),
            "productId": .string(g.productId),
            "originalTransactionId": .string(g.originalTransactionId),
            "expiresDate": .optional(g.expiresDate),
            "status": .string(g.status.rawValue),
        ]
    }

    /// One stored event with its evidence. `raw` is the exact bytes: as text when they are UTF-8
    /// (every Apple and WeChat body is), else base64 — `rawEncoding` says which.
    static func event(_ e: RecordedEvent, facts: [Fact]? = nil) -> JSONValue {
        let payload = (try? JSONValue(json: e.event.payload)) ?? .null
        let raw: String, encoding: String
        if let text = String(validatingUTF8Data: e.event.raw) {
            (raw, encoding) = (text, "utf8")
        } else {
            (raw, encoding) = (e.event.raw.base64EncodedString(), "base64")
        }
        var out: [String: JSONValue] = [
            "position": .integer(e.position),
            "recordedAt": .integer(e.recordedAt),
            "source": .string(e.event.source.rawValue),
            "type": .string(e.event.type),
            "environment": .optional(e.event.environment),
            "signedDate": .optional(e.event.signedAt),
            "expiresDate": .optional(e.event.expiresAt),
            "dedupeKey": .string(e.event.dedupeKey),
            "payload": payload,
            "raw": .string(raw),
            "rawEncoding": .string(encoding),
        ]
        if let facts { out["facts"] = .array(facts.map(fact)) }
        return .object(out)
    }

    static func event(_ e: EvidencedEvent) -> JSONValue { event(e.event, facts: e.facts) }

    /// One derived fact, as the timeline shows what an event contributed.
    static func fact(_ f: Fact) -> JSONValue {
        var o: [String: JSONValue] = [
            "kind": .string(f.kind.rawValue), "origin": .string(f.origin.rawValue), "subscription": .optional(f.subscription?.text),
            "signedAt": .integer(f.signedAt), "effectiveAt": .integer(f.effectiveAt), "transactionId": .optional(f.transactionId),
            "orderAlias": .optional(f.orderAlias), "customerId": .optional(f.customerId),
        ]
        if let t = f.transaction {
            var tx: [String: JSONValue] = [
                "transactionId": .string(t.transactionId), "productId": .optional(t.productId), "type": .optional(t.type),
                "purchaseDate": .optional(t.purchaseDate), "expiresDate": .optional(t.expiresDate),
                "revocationDate": .optional(t.revocationDate), "isUpgraded": .bool(t.isUpgraded), "price": .optional(t.price),
                "currency": .optional(t.currency), "inAppOwnershipType": .optional(t.inAppOwnershipType),
            ]
            // The fields of the table (`AppleFields`) no fold reads, by their API names.
            for (i, field) in AppleFields.transactionExtras.enumerated() { tx[field.apiName] = t.extras[i]?.json ?? .null }
            o["transaction"] = .object(tx)
        }
        if let r = f.renewal {
            var renewal: [String: JSONValue] = [
                "autoRenewProductId": .optional(r.autoRenewProductId), "autoRenewStatus": .optional(r.autoRenewStatus),
                "expirationIntent": .optional(r.expirationIntent), "isInBillingRetryPeriod": .optional(r.isInBillingRetryPeriod),
                "gracePeriodExpiresDate": .optional(r.gracePeriodExpiresDate), "renewalDate": .optional(r.renewalDate),
            ]
            for (i, field) in AppleFields.renewalExtras.enumerated() { renewal[field.apiName] = r.extras[i]?.json ?? .null }
            o["renewal"] = .object(renewal)
        }
        if let d = f.detail, let parsed = try? JSONValue(json: Data(d.utf8)) { o["detail"] = parsed }
        return .object(o)
    }

    static func rebuild(_ report: RebuildReport) -> JSONValue {
        func change(_ c: EntitlementChange) -> JSONValue {
            ["customerId": .string(c.customerId), "entitlement": .string(c.entitlement), "productId": .string(c.productId),
             "originalTransactionId": .string(c.originalTransactionId)]
        }
        var out: [String: JSONValue] = [
            "status": .string(report.dryRun ? "dry_run" : "rebuilt"),
            "projections": .array(report.projections.map { .string($0.rawValue) }),
            "events": .integer(Int64(report.events)), "streams": .integer(Int64(report.streams)),
            "seconds": .number(report.seconds), "eventsPerSecond": .number(report.eventsPerSecond),
        ]
        if report.dryRun {
            out["changes"] = ["gains": .array(report.gains.map(change)), "losses": .array(report.losses.map(change))]
        }
        return .object(out)
    }

    /// An `Encodable` domain value (refund cases) as the same JSON value type.
    static func encoded(_ value: some Encodable) throws -> JSONValue {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try JSONValue(json: encoder.encode(value))
    }
}

extension HTTPResponse {
    /// A JSON answer (canonical: sorted keys, so equal answers are equal bytes).
    static func json(_ status: Int, _ value: JSONValue, headers: [(String, String)] = []) -> HTTPResponse {
        .json(status, value.canonicalJSON(), headers: headers)
    }
}

private extension String {
    /// The bytes as text when they are valid UTF-8 (no replacement characters), else nil.
    init?(validatingUTF8Data data: Data) {
        guard let s = String(data: data, encoding: .utf8) else { return nil }
        self = s
    }
}

import Foundation

/// The one place a stored event becomes facts: one decoder per source, chosen from the event's
/// envelope, each a pure function of the event (never of its position or of other events).
///
/// | source | events | decoder |
/// |---|---|---|
/// | `apple`, type `V1/…` | legacy V1 notifications (shared secret) | `AppleV1Facts` |
/// | `apple`, type `API/…` | Apple's answers to the ledger's requests (`AppleAPIEvents`) | `AppleAPIFacts` |
/// | `apple`, other types | V2 notifications (verified JWS, nested JWS decoded) | `AppleV2Facts` |
/// | `wechat` | xpay pushes | `WeChatFacts` |
/// | `ledger` | the ledger's own decisions and records | `LedgerFacts` |
///
/// A decoder never throws: an event it cannot interpret gives one `unreadable` fact naming the
/// reason, so the evidence stays on record, is counted, and is folded by nobody.
///
/// Version 3: App Store API transaction snapshots without a revocationDate state a `reversal`;
/// consent records and consumption answers have facts.
///
/// Version 4: WeChat deliveries without PaidTime carry no purchase date, ordinary purchases and
/// WeChat's API answers are facts, order links name their environment and the id they matched.
///
/// Version 5 (Apple): every V2 transaction snapshot states a `revocation` (with revocationDate) or
/// a `reversal` (without), whatever the notification type; V1 and receipt cancellations of upgraded
/// entries (`is_upgraded`) are no revocations.
/// Version 5 (WeChat): times of the wrong magnitude (refund_time or PaidTime in ms, SignedTime,
/// UnsignedTime or RenewalDate in s) are refused as unreadable.
///
/// Version 6 (Apple, issue 20 items 1–2 and issue 19 item 3) — "Apple status facts + consent +
/// extension summary + the new Apple fields": every V2 `data.status` and every Get All
/// Subscription Statuses item's `status` is an `apple_status` fact; RESCIND_CONSENT is a
/// `consent_rescinded` fact and RENEWAL_EXTENSION/SUMMARY an `extension_summary` fact (both
/// without a subscription); transaction and renewal snapshots are read through `AppleFields`
/// and carry `offerDiscountType`, `appTransactionId`, `renewalPrice` and the renewal `currency`.
///
/// `schemaVersion` names the fact schema these decoders produce. Change it whenever a decoder
/// would derive different facts from the same event; `ledger rederive` then derives the new
/// version beside the old one (blue/green) and the readers switch when it is complete.
public enum FactDecoder {
    /// 6: Apple status facts + consent + extension summary + the new Apple fields (see above).
    /// 7: a WeChat signing or unsigning without SignedTime / UnsignedTime is a contract change at
    /// its push's CreateTime (`detail.time_basis`), no longer evidence only (Migrations/0022).
    public static let schemaVersion = 7

    /// The facts of an event about to be appended (unplaced: the store adds position, ordinal,
    /// recordedAt and stream).
    public static func facts(of event: NewEvent) -> [Fact] {
        do throws(FactDecodingError) {
            let facts: [Fact]
            switch event.source {
            case .apple:
                if case .appleUnreadable = StreamId(event.streamId).kind { throw FactDecodingError(UnreadableEvidence.reason(of: event)) }
                facts = AppleV1Facts.isV1(event) ? try AppleV1Facts.facts(of: event)
                    : AppleAPIEvents.isAPI(event) ? try AppleAPIFacts.facts(of: event)
                    : try AppleV2Facts.facts(of: event)
            case .wechat:
                facts = try WeChatFacts.facts(of: event)
            case .ledger:
                facts = try LedgerFacts.facts(of: event)
            }
            for fact in facts { try checkIdentifiers(fact) }
            return facts
        } catch {
            return [unreadable(event, reason: error.description)]
        }
    }

    /// Longest identifier a fact may carry. Ids become keys of the facts' and projections' indexes,
    /// whose entries PostgreSQL caps near 2.7 kB: one oversized id would stop every projection at
    /// that event. Real ids are tens of bytes (ingestion bounds Apple's at 512 and WeChat's at 128).
    public static let maxIdentifierBytes = 512

    static func checkIdentifiers(_ f: Fact) throws(FactDecodingError) {
        let ids: [(String, String?)] = [
            ("originalTransactionId", f.subscription?.originalTransactionId), ("transactionId", f.transactionId),
            ("order alias", f.orderAlias), ("customer", f.customerId),
            ("productId", f.transaction?.productId ?? f.renewal?.productId), ("autoRenewProductId", f.renewal?.autoRenewProductId),
        ]
        for case let (name, value?) in ids where value.utf8.count > maxIdentifierBytes {
            throw FactDecodingError("its \(name) is \(value.utf8.count) bytes; identifiers of more than \(maxIdentifierBytes) bytes cannot be indexed")
        }
    }

    /// The facts of a stored event, placed at its position.
    public static func facts(of event: RecordedEvent) -> [Fact] {
        facts(of: event.event).enumerated().map { i, f in
            f.placed(position: event.position, ordinal: i, recordedAt: event.recordedAt, streamId: event.event.streamId)
        }
    }

    static func unreadable(_ event: NewEvent, reason: String) -> Fact {
        let origin: FactOrigin = switch event.source {
        case .apple: AppleV1Facts.isV1(event) ? .appleV1 : AppleAPIEvents.isAPI(event) ? .appleAPI : .appleV2
        case .wechat: .wechat
        case .ledger: .ledger
        }
        return Fact(
            subscription: nil, kind: .unreadable, origin: origin, message: event.type,
            signedAt: event.signedAt ?? 0, detail: Detail.json(["reason": .string(reason)]))
    }
}

/// Authentic notifications ingestion could not read (`apple:unreadable`, and WeChat pushes that
/// could not be decrypted or parsed): the payload is `{"code","reason",…}` as ingestion wrote it,
/// the exact bytes are in `raw`. Evidence only; a later build re-reads `raw`, not this payload.
public enum UnreadableEvidence {
    /// The event type of such evidence.
    public static let type = "unreadable"

    /// The payload ingestion stores: why (a stable code and the message) and what it could read.
    public static func payload(code: String, reason: String, readable: [String: String] = [:]) -> Data {
        var o: [String: JSONValue] = ["code": .string(StorableText.clean(code, limit: 64)),
                                      "reason": .string(StorableText.clean(reason, limit: 2_000))]
        for (k, v) in readable { o[k] = .string(StorableText.clean(v, limit: 256)) }
        return JSONValue.object(o).canonicalJSON()
    }

    static func reason(of event: NewEvent) -> String {
        let value = try? JSONDecoder().decode(JSONValue.self, from: event.payload)
        let why = value?.text("reason") ?? "no reason recorded"
        return "ingestion kept it as evidence: authentic, but it could not be read (\(why))"
    }
}

/// Why a decoder could not interpret an event; becomes an `unreadable` fact's reason.
public struct FactDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Canonical JSON for `Fact.detail` (sorted keys, so equal details are equal text).
enum Detail {
    static func json(_ object: [String: JSONValue?]) -> String? {
        var o: [String: JSONValue] = [:]
        for (k, v) in object { if let v { o[k] = v } }
        if o.isEmpty { return nil }
        return String(decoding: JSONValue.object(o).canonicalJSON(), as: UTF8.self)
    }

    static func text(_ s: String?) -> JSONValue? { s.map(JSONValue.string) }
    static func int(_ i: Int64?) -> JSONValue? { i.map(JSONValue.integer) }
    static func int(_ i: Int?) -> JSONValue? { i.map { JSONValue.integer(Int64($0)) } }
}

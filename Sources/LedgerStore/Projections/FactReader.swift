import Foundation
import LedgerCore
import Postgres

/// Turns stored events into `SubscriptionFact`s without a JSON decoder: PostgreSQL extracts each
/// fact field from the `payload` jsonb (the paths of docs/projections.md) and the memberwise
/// initialisers assemble the fact. Only sources other than Apple (low volume, e.g. WeChat) ship
/// their payload and go through `SubscriptionFact.decode`. `raw` is never read.
enum FactReader {
    /// Column order of `columns`; the parsers index by these.
    enum C: Int, CaseIterable {
        case streamId, position, recordedAt, source, signedAtColumn
        case notificationType, subtype, signedDate, status, dataBundleId, dataEnvironment
        case txObject, transactionId, txOriginal, webOrderLineItemId, txBundleId, txProductId, purchaseDate,
             txExpiresDate, txSignedDate, revocationDate, revocationReason, revocationType, revocationPercentage,
             isUpgraded, price, currency, txOfferType, txOfferIdentifier, txAppAccountToken, txEnvironment, txType,
             inAppOwnershipType
        case renewalObject, rOriginal, rProductId, autoRenewProductId, autoRenewStatus, expirationIntent,
             isInBillingRetryPeriod, gracePeriodExpiresDate, priceIncreaseStatus, rOfferType, rOfferIdentifier,
             recentSubscriptionStartDate, renewalDate, rAppAccountToken, rSignedDate
        // Other sources only: the envelope and payload for `SubscriptionFact.decode`.
        case otherPayload, otherDedupeKey, otherType, otherEnvironment, otherExpiresAt
    }

    private static let expressions: [String] = {
        func t(_ k: String) -> String { "projections.json_text(t->'\(k)')" }
        func tm(_ k: String) -> String { "projections.json_millis(t->'\(k)')" }
        func ti(_ k: String) -> String { "projections.json_int(t->'\(k)')" }
        func r(_ k: String) -> String { "projections.json_text(r->'\(k)')" }
        func rm(_ k: String) -> String { "projections.json_millis(r->'\(k)')" }
        func ri(_ k: String) -> String { "projections.json_int(r->'\(k)')" }
        let other = "e.source <> 'apple'"
        return [
            "e.stream_id", "e.position", "floor(extract(epoch FROM e.recorded_at) * 1000)::bigint", "e.source",
            "floor(extract(epoch FROM e.signed_at) * 1000)::bigint",
            "projections.json_text(e.payload->'notificationType')", "projections.json_text(e.payload->'subtype')",
            "projections.json_millis(e.payload->'signedDate')", "projections.json_int(e.payload->'data'->'status')",
            "projections.json_text(e.payload->'data'->'bundleId')", "projections.json_text(e.payload->'data'->'environment')",
            "jsonb_typeof(t) = 'object'", t("transactionId"), t("originalTransactionId"), t("webOrderLineItemId"),
            t("bundleId"), t("productId"), tm("purchaseDate"), tm("expiresDate"), tm("signedDate"), tm("revocationDate"),
            ti("revocationReason"), t("revocationType"), ti("revocationPercentage"), "projections.json_bool(t->'isUpgraded')",
            ti("price"), t("currency"), ti("offerType"), t("offerIdentifier"), t("appAccountToken"), t("environment"),
            t("type"), t("inAppOwnershipType"),
            "jsonb_typeof(r) = 'object'", r("originalTransactionId"), r("productId"), r("autoRenewProductId"),
            ri("autoRenewStatus"), ri("expirationIntent"), "projections.json_bool(r->'isInBillingRetryPeriod')",
            rm("gracePeriodExpiresDate"), ri("priceIncreaseStatus"), ri("offerType"), r("offerIdentifier"),
            rm("recentSubscriptionStartDate"), rm("renewalDate"), r("appAccountToken"), rm("signedDate"),
            "CASE WHEN \(other) THEN e.payload::text END", "CASE WHEN \(other) THEN e.dedupe_key END",
            "CASE WHEN \(other) THEN e.type END", "CASE WHEN \(other) THEN e.environment END",
            "CASE WHEN \(other) THEN floor(extract(epoch FROM e.expires_at) * 1000)::bigint END",
        ]
    }()

    static let from = """
        FROM events e
        CROSS JOIN LATERAL (SELECT e.payload->'transactionInfo' AS t, e.payload->'renewalInfo' AS r) x
        """

    /// The select list; `asText` casts every column to text (for `Connection.query`, whose
    /// binary results would otherwise need one decoder per type).
    static func columns(asText: Bool) -> String {
        precondition(expressions.count == C.allCases.count, "FactReader columns and indices disagree")
        return expressions.map { asText ? "(\($0))::text" : $0 }.joined(separator: ",\n    ")
    }

    /// Every event of the given streams, grouped by stream.
    static func facts(streams: [String], on connection: Connection, upTo: Int64? = nil) throws -> [String: [SubscriptionFact]] {
        if streams.isEmpty { return [:] }
        let result = try connection.query(
            "SELECT \(columns(asText: true))\n\(from)\nWHERE e.stream_id = ANY($1) AND e.position <= $2 ORDER BY e.stream_id, e.position",
            [.array(streams.map { .text($0) }, of: .text), .int64(upTo ?? .max)], name: "projection facts of streams")
        var out: [String: [SubscriptionFact]] = [:]
        for row in result.rows {
            var values: [String?] = []
            values.reserveCapacity(C.allCases.count)
            for i in 0..<C.allCases.count { values.append(try row.decode(String?.self, at: i)) }
            let fields = TextFields(values: values)
            let stream = fields.string(.streamId) ?? ""
            if let fact = try fact(fields) { out[stream, default: []].append(fact) }
        }
        return out
    }

    /// One event's fact, or nil when the event is about no subscription.
    static func fact(_ f: some FactFields) throws -> SubscriptionFact? {
        guard let position = f.int64(.position), let recordedAt = f.int64(.recordedAt), let source = f.string(.source),
              let streamId = f.string(.streamId) else {
            throw ProjectionError.corrupt("an event row lacks position, recorded_at, source or stream_id")
        }
        if source != EventSource.apple.rawValue {
            return try otherSource(f, position: position, recordedAt: recordedAt, source: source, streamId: streamId)
        }
        var tx: TransactionFact?
        if f.bool(.txObject) == true, let id = f.string(.transactionId) {
            tx = TransactionFact(
                transactionId: id, originalTransactionId: f.string(.txOriginal),
                webOrderLineItemId: f.string(.webOrderLineItemId), bundleId: f.string(.txBundleId),
                productId: f.string(.txProductId), purchaseDate: f.int64(.purchaseDate),
                expiresDate: f.int64(.txExpiresDate), signedDate: f.int64(.txSignedDate),
                revocationDate: f.int64(.revocationDate), revocationReason: f.int(.revocationReason),
                revocationType: f.string(.revocationType), revocationPercentage: f.int(.revocationPercentage),
                isUpgraded: f.bool(.isUpgraded) ?? false, price: f.int64(.price), currency: f.string(.currency),
                offerType: f.int(.txOfferType), offerIdentifier: f.string(.txOfferIdentifier),
                appAccountToken: f.string(.txAppAccountToken), environment: f.string(.txEnvironment),
                type: f.string(.txType), inAppOwnershipType: f.string(.inAppOwnershipType))
        }
        var renewal: RenewalFact?
        if f.bool(.renewalObject) == true {
            renewal = RenewalFact(
                productId: f.string(.rProductId), autoRenewProductId: f.string(.autoRenewProductId),
                autoRenewStatus: f.int(.autoRenewStatus), expirationIntent: f.int(.expirationIntent),
                isInBillingRetryPeriod: f.bool(.isInBillingRetryPeriod),
                gracePeriodExpiresDate: f.int64(.gracePeriodExpiresDate),
                priceIncreaseStatus: f.int(.priceIncreaseStatus), offerType: f.int(.rOfferType),
                offerIdentifier: f.string(.rOfferIdentifier),
                recentSubscriptionStartDate: f.int64(.recentSubscriptionStartDate),
                renewalDate: f.int64(.renewalDate), appAccountToken: f.string(.rAppAccountToken),
                signedDate: f.int64(.rSignedDate))
        }
        if tx == nil && renewal == nil { return nil }
        let original = tx?.originalTransactionId ?? (renewal != nil ? f.string(.rOriginal) : nil) ?? streamId
        guard let signed = f.int64(.signedDate) ?? tx?.signedDate ?? renewal?.signedDate ?? f.int64(.signedAtColumn) else {
            throw SubscriptionFactError.missingSignedDate(position: position)
        }
        return SubscriptionFact(
            position: position, recordedAt: recordedAt, source: .appleNotification, originalTransactionId: original,
            notificationType: f.string(.notificationType), subtype: f.string(.subtype), signedDate: signed,
            status: f.int(.status), bundleId: f.string(.dataBundleId), environment: f.string(.dataEnvironment),
            transaction: tx, renewal: renewal)
    }

    private static func otherSource(
        _ f: some FactFields, position: Int64, recordedAt: EpochMillis, source: String, streamId: String
    ) throws -> SubscriptionFact? {
        guard let eventSource = EventSource(rawValue: source) else {
            throw ProjectionError.corrupt("event at position \(position) has unknown source \(source)")
        }
        let event = NewEvent(
            streamId: streamId, dedupeKey: f.string(.otherDedupeKey) ?? "", source: eventSource,
            type: f.string(.otherType) ?? "", environment: f.string(.otherEnvironment),
            signedAt: f.int64(.signedAtColumn), expiresAt: f.int64(.otherExpiresAt),
            payload: Data((f.string(.otherPayload) ?? "{}").utf8), raw: Data())
        return try SubscriptionFact.decode(RecordedEvent(position: position, recordedAt: recordedAt, event: event))
    }
}

/// Field access shared by the two row formats (text results of `query`, rows of `COPY … TO STDOUT`).
protocol FactFields {
    func string(_ c: FactReader.C) -> String?
    func int64(_ c: FactReader.C) -> Int64?
    func bool(_ c: FactReader.C) -> Bool?
}

extension FactFields {
    func int(_ c: FactReader.C) -> Int? { int64(c).map { Int(truncatingIfNeeded: $0) } }
}

struct TextFields: FactFields {
    let values: [String?]
    func string(_ c: FactReader.C) -> String? { values[c.rawValue] }
    func int64(_ c: FactReader.C) -> Int64? { values[c.rawValue].flatMap { Int64($0) } }
    func bool(_ c: FactReader.C) -> Bool? {
        guard let v = values[c.rawValue] else { return nil }
        return v.first == "t"
    }
}

/// One row of `COPY … TO STDOUT` in text format, read in place: fields are tab-separated, `\N` is
/// NULL, and backslash escapes appear only in text that holds tabs, newlines or backslashes.
struct CopyRowFields: FactFields {
    let bytes: UnsafeRawBufferPointer
    /// Start and end offset of each field; start < 0 for NULL.
    var bounds: [(Int, Int)]

    init(bytes: UnsafeRawBufferPointer, reuse: [(Int, Int)]) {
        self.bytes = bytes
        var bounds = reuse
        bounds.removeAll(keepingCapacity: true)
        var end = bytes.count
        if end > 0 && bytes[end - 1] == 0x0A { end -= 1 }
        var start = 0
        var i = 0
        while i <= end {
            if i == end || bytes[i] == 0x09 {
                if i - start == 2 && bytes[start] == 0x5C && bytes[start + 1] == 0x4E {
                    bounds.append((-1, -1))
                } else {
                    bounds.append((start, i))
                }
                start = i + 1
            }
            i += 1
        }
        self.bounds = bounds
    }

    var isComplete: Bool { bounds.count == FactReader.C.allCases.count }

    func string(_ c: FactReader.C) -> String? {
        let (s, e) = bounds[c.rawValue]
        if s < 0 { return nil }
        let slice = UnsafeRawBufferPointer(rebasing: bytes[s..<e])
        if !slice.contains(0x5C) { return String(decoding: slice, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(slice.count)
        var i = slice.startIndex
        while i < slice.endIndex {
            let b = slice[i]
            if b == 0x5C, i + 1 < slice.endIndex {
                let n = slice[i + 1]
                switch n {
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "v"): out.append(0x0B)
                default: out.append(n)
                }
                i += 2
            } else {
                out.append(b)
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    func int64(_ c: FactReader.C) -> Int64? {
        let (s, e) = bounds[c.rawValue]
        if s < 0 || s == e { return nil }
        var i = s
        var negative = false
        if bytes[i] == UInt8(ascii: "-") { negative = true; i += 1 }
        var value: Int64 = 0
        while i < e {
            let d = bytes[i] &- 0x30
            guard d < 10 else { return nil }
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int64(d))
            if o1 || o2 { return nil }
            value = a
            i += 1
        }
        return negative ? -value : value
    }

    func bool(_ c: FactReader.C) -> Bool? {
        let (s, _) = bounds[c.rawValue]
        if s < 0 { return nil }
        return bytes[s] == UInt8(ascii: "t")
    }
}

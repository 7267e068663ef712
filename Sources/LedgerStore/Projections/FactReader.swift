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

    /// Every JSON field is read with `->>` as text and parsed here: converting in SQL (numeric
    /// rounding, casts) cost more than the whole fold. `t` and `r` are evaluated once per row
    /// (`OFFSET 0` keeps the planner from inlining them into every field).
    private static let expressions: [String] = {
        func t(_ k: String) -> String { "t->>'\(k)'" }
        func r(_ k: String) -> String { "r->>'\(k)'" }
        let other = "e.source <> 'apple'"
        return [
            "e.stream_id", "e.position", "e.recorded_at", "e.source", "e.signed_at",
            "e.payload->>'notificationType'", "e.payload->>'subtype'", "e.payload->>'signedDate'",
            "e.payload->'data'->>'status'", "e.payload->'data'->>'bundleId'", "e.payload->'data'->>'environment'",
            "jsonb_typeof(t)", t("transactionId"), t("originalTransactionId"), t("webOrderLineItemId"),
            t("bundleId"), t("productId"), t("purchaseDate"), t("expiresDate"), t("signedDate"), t("revocationDate"),
            t("revocationReason"), t("revocationType"), t("revocationPercentage"), t("isUpgraded"),
            t("price"), t("currency"), t("offerType"), t("offerIdentifier"), t("appAccountToken"), t("environment"),
            t("type"), t("inAppOwnershipType"),
            "jsonb_typeof(r)", r("originalTransactionId"), r("productId"), r("autoRenewProductId"),
            r("autoRenewStatus"), r("expirationIntent"), r("isInBillingRetryPeriod"),
            r("gracePeriodExpiresDate"), r("priceIncreaseStatus"), r("offerType"), r("offerIdentifier"),
            r("recentSubscriptionStartDate"), r("renewalDate"), r("appAccountToken"), r("signedDate"),
            "CASE WHEN \(other) THEN e.payload::text END", "CASE WHEN \(other) THEN e.dedupe_key END",
            "CASE WHEN \(other) THEN e.type END", "CASE WHEN \(other) THEN e.environment END",
            "CASE WHEN \(other) THEN e.expires_at END",
        ]
    }()

    static let from = """
        FROM events e
        CROSS JOIN LATERAL (SELECT e.payload->'transactionInfo' AS t, e.payload->'renewalInfo' AS r OFFSET 0) x
        """

    static var columns: String {
        precondition(expressions.count == C.allCases.count, "FactReader columns and indices disagree")
        return expressions.joined(separator: ",\n    ")
    }

    /// Every event of the given streams (up to `upTo`), grouped by stream.
    static func facts(streams: [String], on connection: Connection, upTo: Int64? = nil) throws -> [String: [SubscriptionFact]] {
        if streams.isEmpty { return [:] }
        let result = try connection.query(
            "SELECT \(columns)\n\(from)\nWHERE e.stream_id = ANY($1) AND e.position <= $2 ORDER BY e.stream_id, e.position",
            [.array(streams.map { .text($0) }, of: .text), .int64(upTo ?? .max)], name: "projection facts of streams")
        var out: [String: [SubscriptionFact]] = [:]
        for row in result.rows {
            let fields = RowFields(row: row)
            let stream = try row.decode(String.self, at: C.streamId.rawValue)
            if let fact = try fact(fields) { out[stream, default: []].append(fact) }
        }
        return out
    }

    /// One event's fact, or nil when the event is about no subscription.
    static func fact(_ f: some FactFields) throws -> SubscriptionFact? {
        guard let position = f.integer(.position), let recordedAt = try f.millis(.recordedAt), let source = f.string(.source),
              let streamId = f.string(.streamId) else {
            throw ProjectionError.corrupt("an event row lacks position, recorded_at, source or stream_id")
        }
        if source != EventSource.apple.rawValue {
            return try otherSource(f, position: position, recordedAt: recordedAt, source: source, streamId: streamId)
        }
        var tx: TransactionFact?
        if f.string(.txObject) == "object", let id = f.string(.transactionId) {
            tx = TransactionFact(
                transactionId: id, originalTransactionId: f.string(.txOriginal),
                webOrderLineItemId: f.string(.webOrderLineItemId), bundleId: f.string(.txBundleId),
                productId: f.string(.txProductId), purchaseDate: f.number(.purchaseDate),
                expiresDate: f.number(.txExpiresDate), signedDate: f.number(.txSignedDate),
                revocationDate: f.number(.revocationDate), revocationReason: f.int(.revocationReason),
                revocationType: f.string(.revocationType), revocationPercentage: f.int(.revocationPercentage),
                isUpgraded: f.bool(.isUpgraded) ?? false, price: f.number(.price), currency: f.string(.currency),
                offerType: f.int(.txOfferType), offerIdentifier: f.string(.txOfferIdentifier),
                appAccountToken: f.string(.txAppAccountToken), environment: f.string(.txEnvironment),
                type: f.string(.txType), inAppOwnershipType: f.string(.inAppOwnershipType))
        }
        var renewal: RenewalFact?
        if f.string(.renewalObject) == "object" {
            renewal = RenewalFact(
                productId: f.string(.rProductId), autoRenewProductId: f.string(.autoRenewProductId),
                autoRenewStatus: f.int(.autoRenewStatus), expirationIntent: f.int(.expirationIntent),
                isInBillingRetryPeriod: f.bool(.isInBillingRetryPeriod),
                gracePeriodExpiresDate: f.number(.gracePeriodExpiresDate),
                priceIncreaseStatus: f.int(.priceIncreaseStatus), offerType: f.int(.rOfferType),
                offerIdentifier: f.string(.rOfferIdentifier),
                recentSubscriptionStartDate: f.number(.recentSubscriptionStartDate),
                renewalDate: f.number(.renewalDate), appAccountToken: f.string(.rAppAccountToken),
                signedDate: f.number(.rSignedDate))
        }
        if tx == nil && renewal == nil { return nil }
        let original = tx?.originalTransactionId ?? (renewal != nil ? f.string(.rOriginal) : nil) ?? streamId
        let signedAt = try f.millis(.signedAtColumn)
        guard let signed = f.number(.signedDate) ?? tx?.signedDate ?? renewal?.signedDate ?? signedAt else {
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
            signedAt: try f.millis(.signedAtColumn), expiresAt: try f.millis(.otherExpiresAt),
            payload: Data((f.string(.otherPayload) ?? "{}").utf8), raw: Data())
        return try SubscriptionFact.decode(RecordedEvent(position: position, recordedAt: recordedAt, event: event))
    }
}

/// Field access shared by the two row formats (binary results of `query`, text rows of
/// `COPY … TO STDOUT`). JSON values arrive as the text `->>` gives.
protocol FactFields {
    func string(_ c: FactReader.C) -> String?
    /// A bigint column.
    func integer(_ c: FactReader.C) -> Int64?
    /// A timestamptz column, as epoch milliseconds (floored, as `Int64.decode` does).
    func millis(_ c: FactReader.C) throws -> Int64?
    /// A JSON number: fractional values are rounded as `AppleTime` rounds them; anything that is
    /// not a number reads as absent.
    func number(_ c: FactReader.C) -> Int64?
    /// A JSON boolean.
    func bool(_ c: FactReader.C) -> Bool?
}

extension FactFields {
    func int(_ c: FactReader.C) -> Int? { number(c).map { Int(truncatingIfNeeded: $0) } }
}

enum JSONNumberText {
    /// Integers fast, on bytes; anything else through Double, as `AppleTime` decodes it.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        if bytes.isEmpty { return nil }
        var i = 0
        var negative = false
        if bytes[0] == UInt8(ascii: "-") { negative = true; i = 1 }
        if i == bytes.count { return nil }
        var value: Int64 = 0
        while i < bytes.count {
            let d = bytes[i] &- 0x30
            if d >= 10 { return fractional(bytes) }
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int64(d))
            if o1 || o2 { return nil }
            value = a
            i += 1
        }
        return negative ? -value : value
    }

    private static func fractional(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        guard let d = Double(String(decoding: bytes, as: UTF8.self)), d.isFinite, abs(d) < 9.2e18 else { return nil }
        return Int64(d.rounded())
    }

    static func parse(_ text: String) -> Int64? {
        var text = text
        return text.withUTF8 { parse(UnsafeRawBufferPointer($0)) }
    }
}

struct RowFields: FactFields {
    let row: Row
    func string(_ c: FactReader.C) -> String? { try? row.decode(String?.self, at: c.rawValue) }
    func integer(_ c: FactReader.C) -> Int64? { try? row.decode(Int64?.self, at: c.rawValue) }
    func millis(_ c: FactReader.C) throws -> Int64? { try row.decode(Int64?.self, at: c.rawValue) }
    func number(_ c: FactReader.C) -> Int64? { string(c).flatMap(JSONNumberText.parse) }
    func bool(_ c: FactReader.C) -> Bool? {
        switch string(c) {
        case "true": true
        case "false": false
        default: nil
        }
    }
}

/// One row of `COPY … TO STDOUT` in text format, read in place: fields are tab-separated, `\N` is
/// NULL, and backslash escapes appear only in text that holds tabs, newlines or backslashes.
/// Timestamps must be in ISO style and UTC (`Rebuilder` sets both for its snapshot).
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

    private func field(_ c: FactReader.C) -> UnsafeRawBufferPointer? {
        let (s, e) = bounds[c.rawValue]
        return s < 0 ? nil : UnsafeRawBufferPointer(rebasing: bytes[s..<e])
    }

    func string(_ c: FactReader.C) -> String? {
        guard let slice = field(c) else { return nil }
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

    func integer(_ c: FactReader.C) -> Int64? { field(c).flatMap(JSONNumberText.parse) }

    func number(_ c: FactReader.C) -> Int64? {
        guard let slice = field(c) else { return nil }
        // `->>` never escapes a number, so a backslash means a string: not a number.
        return JSONNumberText.parse(slice)
    }

    func bool(_ c: FactReader.C) -> Bool? {
        guard let slice = field(c) else { return nil }
        if slice.elementsEqual("true".utf8) { return true }
        if slice.elementsEqual("false".utf8) { return false }
        return nil
    }

    /// `YYYY-MM-DD HH:MM:SS[.ffffff]+00`.
    func millis(_ c: FactReader.C) throws -> Int64? {
        guard let f = field(c) else { return nil }
        func digits(_ from: Int, _ count: Int) -> Int64? {
            guard from + count <= f.count else { return nil }
            var v: Int64 = 0
            for i in from..<(from + count) {
                let d = f[i] &- 0x30
                guard d < 10 else { return nil }
                v = v * 10 + Int64(d)
            }
            return v
        }
        guard f.count >= 22, f[4] == 0x2D, f[7] == 0x2D, f[10] == 0x20, f[13] == 0x3A, f[16] == 0x3A,
              let year = digits(0, 4), let month = digits(5, 2), let day = digits(8, 2),
              let hour = digits(11, 2), let minute = digits(14, 2), let second = digits(17, 2) else {
            throw ProjectionError.corrupt("timestamp '\(String(decoding: f, as: UTF8.self))' is not ISO UTC")
        }
        var i = 19
        var micros: Int64 = 0
        if f[i] == UInt8(ascii: ".") {
            i += 1
            var scale: Int64 = 100_000
            while i < f.count, f[i] >= 0x30, f[i] <= 0x39 {
                micros += Int64(f[i] - 0x30) * scale
                scale /= 10
                i += 1
            }
        }
        guard f.count - i == 3, f[i] == UInt8(ascii: "+"), f[i + 1] == 0x30, f[i + 2] == 0x30 else {
            throw ProjectionError.corrupt("timestamp '\(String(decoding: f, as: UTF8.self))' is not in UTC; the reader sets TimeZone = 'UTC'")
        }
        // days from civil (proleptic Gregorian), Howard Hinnant's algorithm.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        let total = (days * 86_400 + hour * 3600 + minute * 60 + second) * 1_000_000 + micros
        return total >= 0 ? total / 1000 : (total - 999) / 1000
    }
}

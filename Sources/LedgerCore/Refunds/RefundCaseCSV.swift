import Foundation

/// `GET /v1/refunds?format=csv`: one row per case, RFC 4180 (CRLF line ends, a cell quoted when
/// it holds a comma, a quote, CR or LF, quotes doubled), UTF-8 without BOM.
///
/// Every cell is text a customer or a remote party may have chosen (order ids, reasons, evidence),
/// and auditors open the file in a spreadsheet: a cell starting with `=`, `+`, `-`, `@`, a tab or a
/// CR is prefixed with `'` so it is never evaluated as a formula (OWASP "CSV injection"). That
/// applies to numbers too (a negative latency shows as `'-5`): a uniform rule cannot be bypassed.
public enum RefundCaseCSV {
    public static let columns = [
        "case_id", "source", "order_id", "original_transaction_id", "open_id", "customer_id", "product_id",
        "opened_at", "opened_at_utc", "last_recorded_at", "decision", "decision_rule", "outcome", "outcome_at",
        "reason", "order_amount_milliunits", "refunded_amount_milliunits", "currency", "inquiries", "answers",
        "first_answer_latency_ms", "result_code", "result_info", "evidence", "revocation_date",
        "revocation_reason", "revocation_type", "revocation_percentage", "links",
    ]

    public static func render(_ cases: [RefundCase]) -> String {
        var out = row(columns)
        for c in cases { out += row(cells(of: c)) }
        return out
    }

    static func cells(of c: RefundCase) -> [String] {
        let first = c.answers.first
        func s<T>(_ v: T?) -> String { v.map { "\($0)" } ?? "" }
        return [
            c.caseId, c.source.rawValue, c.orderId, s(c.originalTransactionId), s(c.openId), s(c.customerId),
            s(c.productId), String(c.openedAt), UTCTime.iso8601(c.openedAt), String(c.lastRecordedAt),
            c.decision?.rawValue ?? "none", s(c.decisionRule), c.outcome.rawValue, s(c.outcomeAt), s(c.reason),
            s(c.orderAmount?.milliunits), s(c.refundedAmount?.milliunits),
            s(c.orderAmount?.currency ?? c.refundedAmount?.currency), String(c.inquiries.count),
            String(c.answers.count), s(first?.latencyMs), s(first?.resultCode), s(first?.resultInfo),
            s(first?.evidence), s(c.revocationDate), s(c.revocationReason), s(c.revocationType),
            s(c.revocationPercentage), c.links.map(String.init).joined(separator: " "),
        ]
    }

    static func row(_ cells: [String]) -> String {
        cells.map(cell).joined(separator: ",") + "\r\n"
    }

    /// One cell: neutralised, then quoted when needed.
    public static func cell(_ raw: String) -> String {
        var text = raw
        if let first = text.unicodeScalars.first, "=+-@\t\r".unicodeScalars.contains(first) {
            text = "'" + text
        }
        let needsQuotes = text.utf8.contains { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == 0x0A || $0 == 0x0D }
        guard needsQuotes else { return text }
        var quoted = [UInt8]()
        quoted.reserveCapacity(text.utf8.count + 2)
        quoted.append(UInt8(ascii: "\""))
        for b in text.utf8 {
            if b == UInt8(ascii: "\"") { quoted.append(b) }
            quoted.append(b)
        }
        quoted.append(UInt8(ascii: "\""))
        return String(decoding: quoted, as: UTF8.self)
    }
}

/// ISO 8601 UTC from epoch ms.
enum UTCTime {
    static func iso8601(_ ms: EpochMillis) -> String {
        guard let t = CivilTime(epochMillis: ms) else { return String(ms) }
        let p = CivilTime.padded
        return "\(p(t.year, 4))-\(p(t.month, 2))-\(p(t.day, 2))T\(p(t.hour, 2)):\(p(t.minute, 2)):\(p(t.second, 2)).\(p(t.millisecond, 3))Z"
    }
}

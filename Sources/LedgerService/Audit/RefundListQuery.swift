import Foundation
import LedgerCore
import LedgerStore

/// The query of `GET /v1/refunds` (and the auditor's refund pages): filters, the page, the
/// position, the format.
struct RefundListQuery: Sendable {
    var filter: RefundCaseFilter
    var cursor: RefundCaseCursor?
    /// Nil: the whole list (an export).
    var limit: Int?
    var asOfPosition: Int64?
    var format: String

    init(_ raw: [String: String], defaultLimit: Int? = nil) throws {
        var query = raw
        if let to = query.removeValue(forKey: "to") { query["until"] = to }
        do { filter = try RefundCaseFilter(query: query) } catch { throw ServiceFailure.invalidParameter("\(error)") }
        format = raw["format"] ?? "json"
        guard format == "json" || format == "csv" else { throw ServiceFailure.invalidParameter("format must be json or csv") }
        if let c = raw["cursor"], !c.isEmpty {
            guard let cursor = RefundCaseCursor(text: c) else {
                throw ServiceFailure.invalidParameter("cursor is not one this service gave out; start again without it")
            }
            self.cursor = cursor
        }
        limit = defaultLimit
        if let l = raw["limit"] {
            guard let n = Int(l), (1...RefundCaseQueries.maxLimit).contains(n) else {
                throw ServiceFailure.invalidParameter("limit must be an integer from 1 to \(RefundCaseQueries.maxLimit); leave it out for the whole export")
            }
            limit = n
        }
        if cursor != nil && limit == nil {
            throw ServiceFailure.invalidParameter("cursor pages the list: give limit too (e.g. limit=100)")
        }
        if let p = raw["asOfPosition"] {
            guard let n = Int64(p), n >= 0 else {
                throw ServiceFailure.invalidParameter("asOfPosition must be a log position (an integer ≥ 0), e.g. the position an earlier export names")
            }
            asOfPosition = n
        }
    }
}

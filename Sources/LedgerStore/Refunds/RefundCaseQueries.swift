import Foundation
import LedgerCore
internal import Postgres

/// Where a page of refund cases ends: the list is ordered by (openedAt, caseId in byte order), and
/// the next page starts after this pair — stable under appends, never an offset.
public struct RefundCaseCursor: Sendable, Equatable {
    public var openedAt: Int64
    public var caseId: String

    public init(openedAt: Int64, caseId: String) {
        self.openedAt = openedAt
        self.caseId = caseId
    }

    public init(after c: RefundCase) { self.init(openedAt: c.openedAt, caseId: c.caseId) }

    /// Opaque text for a URL: base64url of `<openedAt>:<caseId>`.
    public var text: String {
        Data("\(openedAt):\(caseId)".utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    public init?(text: String) {
        guard !text.isEmpty, text.utf8.count <= 4096 else { return nil }
        var b64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.utf8.count % 4 != 0 { b64 += "=" }
        guard let data = Data(base64Encoded: b64), let decoded = String(data: data, encoding: .utf8),
              let colon = decoded.firstIndex(of: ":"), let openedAt = Int64(decoded[..<colon]) else { return nil }
        let id = String(decoded[decoded.index(after: colon)...])
        guard !id.isEmpty, !id.utf8.contains(0) else { return nil }
        self.init(openedAt: openedAt, caseId: id)
    }

    /// True when `c` comes after this cursor in the list's order.
    public func precedes(_ c: RefundCase) -> Bool { RefundCaseQueries.ordered((openedAt, caseId), (c.openedAt, c.caseId)) }
}

/// Refund cases as of one log position, with what an auditor needs to reproduce them: the
/// position, the hash chain's value there, the fact schema version they were folded from.
public struct RefundCaseSnapshot: Sendable {
    public var position: Int64
    public var chainHash: [UInt8]
    public var factSchemaVersion: Int
    /// True when read from the projection; false when folded from the facts (`asOfPosition`).
    public var fromProjection: Bool
    public var cases: [RefundCase]
    /// Where the next page starts; nil on the last page (and for a whole export).
    public var nextCursor: RefundCaseCursor?
}

/// Why a refund-case query cannot be answered as asked.
public enum RefundCaseQueryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `asOfPosition` beyond what the ledger has derived facts for.
    case positionNotReached(asked: Int64, available: Int64)
    case invalidLimit(Int)

    public var description: String {
        switch self {
        case .positionNotReached(let asked, let available):
            return "asOfPosition=\(asked) is beyond the log the ledger has derived (position \(available)); ask for a position from 0 to \(available)"
        case .invalidLimit(let n):
            return "limit=\(n) is out of range; use 1 to 1000, or leave it out for the whole export"
        }
    }
}

/// Reads of the refund-case projection, and folds of the facts at an earlier position.
public struct RefundCaseQueries: Sendable {
    let pool: ConnectionPool
    /// Whole exports and folds at a position are long reads (LongReads.swift): limited per
    /// instance, on a connection of their own with the long statement timeout, cancelled with
    /// their request.
    let longReads: LongReads

    public static let maxLimit = 1000

    /// The list's order: openedAt, then caseId by UTF-8 bytes (what `COLLATE "C"` sorts by).
    static func ordered(_ a: (Int64, String), _ b: (Int64, String)) -> Bool {
        if a.0 != b.0 { return a.0 < b.0 }
        return a.1.utf8.lexicographicallyPrecedes(b.1.utf8)
    }

    /// The cases matching `filter`, after `cursor`, at most `limit` (nil: all of them), as of the
    /// projection's position — or, with `asOfPosition`, folded from the facts up to that position
    /// (the same cases the projection held when it was there: an export taken then is reproduced
    /// byte for byte, given the same fact schema version).
    public func cases(
        matching filter: RefundCaseFilter, after cursor: RefundCaseCursor? = nil, limit: Int? = nil, asOfPosition: Int64? = nil
    ) async throws -> RefundCaseSnapshot {
        if let limit, !(1...Self.maxLimit).contains(limit) { throw RefundCaseQueryError.invalidLimit(limit) }
        if let asOfPosition {
            return try await longReads.run { connection in try self.folded(filter, cursor, limit, at: asOfPosition, on: connection) }
        }
        if limit != nil {
            return try await pool.withConnection { connection in try self.read(filter, cursor, limit, on: connection) }
        }
        return try await longReads.run { connection in try self.read(filter, cursor, nil, on: connection) }
    }

    private func read(_ filter: RefundCaseFilter, _ cursor: RefundCaseCursor?, _ limit: Int?, on connection: Connection) throws -> RefundCaseSnapshot {
        try connection.transaction { connection in
            try connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", name: "snapshot")
            let position = try connection.query(
                "SELECT position FROM projection_checkpoints WHERE projection = $1", [.text(RefundCaseProjection.name.rawValue)],
                name: "refund cases position").first?.decode(Int64.self, "position") ?? 0
            var conditions: [String] = []
            var parameters: [PostgresValue] = []
            func bind(_ v: PostgresValue) -> String { parameters.append(v); return "$\(parameters.count)" }
            if let v = filter.from { conditions.append("opened_at >= \(bind(.int64(v)))") }
            if let v = filter.until { conditions.append("opened_at < \(bind(.int64(v)))") }
            if let v = filter.originalTransactionId { conditions.append("original_transaction_id = \(bind(.text(v)))") }
            if let v = filter.openId { conditions.append("open_id = \(bind(.text(v)))") }
            if let d = filter.decision {
                conditions.append(d.map { "decision = \(bind(.text($0.rawValue)))" } ?? "decision IS NULL")
            }
            if let v = filter.outcome { conditions.append("outcome = \(bind(.text(v.rawValue)))") }
            if let v = filter.source { conditions.append("source = \(bind(.text(v.rawValue)))") }
            if let cursor {
                conditions.append("(opened_at, case_id COLLATE \"C\") > (\(bind(.int64(cursor.openedAt))), \(bind(.text(cursor.caseId))) COLLATE \"C\")")
            }
            var sql = "SELECT body FROM projections.refund_cases"
            if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
            sql += " ORDER BY opened_at, case_id COLLATE \"C\""
            if let limit { sql += " LIMIT \(bind(.int64(Int64(limit + 1))))" }
            var cases = try connection.query(sql, parameters, name: "refund cases page").rows.map {
                try RefundCaseRow.decode(body: try $0.decode(String.self, "body"))
            }
            var next: RefundCaseCursor?
            if let limit, cases.count > limit {
                cases.removeLast(cases.count - limit)
                next = cases.last.map(RefundCaseCursor.init(after:))
            }
            let chain = try ChainStore.anchor(at: position, on: connection)
            return RefundCaseSnapshot(position: position, chainHash: chain?.hash ?? [], factSchemaVersion: FactStore.version,
                                      fromProjection: true, cases: cases, nextCursor: next)
        }
    }

    private func folded(_ filter: RefundCaseFilter, _ cursor: RefundCaseCursor?, _ limit: Int?, at position: Int64,
                        on connection: Connection) throws -> RefundCaseSnapshot {
        try connection.transaction { connection in
            try connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", name: "snapshot")
            let derived = try FactStore.derivedUpTo(on: connection)
            guard position >= 0, position <= derived else {
                throw RefundCaseQueryError.positionNotReached(asked: position, available: derived)
            }
            var cases = RefundCaseFold.cases(from: try RefundCaseFacts.all(upTo: position, on: connection))
                .filter(filter.matches)
                .sorted { Self.ordered(($0.openedAt, $0.caseId), ($1.openedAt, $1.caseId)) }
            if let cursor { cases = cases.filter(cursor.precedes) }
            var next: RefundCaseCursor?
            if let limit, cases.count > limit {
                cases.removeLast(cases.count - limit)
                next = cases.last.map(RefundCaseCursor.init(after:))
            }
            let chain = try ChainStore.anchor(at: position, on: connection)
            return RefundCaseSnapshot(position: position, chainHash: chain?.hash ?? [], factSchemaVersion: FactStore.version,
                                      fromProjection: false, cases: cases, nextCursor: next)
        }
    }

    /// One case by id, from the projection; nil when there is none.
    public func refundCase(id: String) async throws -> RefundCase? {
        try await pool.withConnection { connection in
            try connection.query("SELECT body FROM projections.refund_cases WHERE case_id = $1", [.text(id)], name: "refund case")
                .first.map { try RefundCaseRow.decode(body: try $0.decode(String.self, "body")) }
        }
    }

    /// The cases of an order, by any of its ids (pay_order_id, MchOrderNo, TransactionId, WxOrderId,
    /// an Apple transactionId), in the list's order.
    public func cases(orderId: String) async throws -> [RefundCase] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT body FROM projections.refund_cases
                WHERE order_id = $1 OR case_id IN (SELECT case_id FROM projections.refund_case_orders WHERE order_id = $1)
                ORDER BY opened_at, case_id COLLATE "C" LIMIT 100
                """, [.text(orderId)], name: "refund cases of order")
                .rows.map { try RefundCaseRow.decode(body: try $0.decode(String.self, "body")) }
        }
    }
}

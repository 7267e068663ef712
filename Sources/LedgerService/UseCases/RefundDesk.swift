import Crypto
import Foundation
import LedgerCore
import LedgerStore

/// Refund cases as of one log position, with what reproduces them: the position, the hash
/// chain's value there, the fact schema version and the catalog digest (the export header).
struct RefundExport: Sendable {
    var snapshot: RefundCaseSnapshot
    var catalogDigest: String

    var chainHashHex: String { Hex.encode(snapshot.chainHash) }

    /// The header every export carries, as HTTP headers too.
    var headers: [(String, String)] {
        [("Ledger-Position", String(snapshot.position)), ("Ledger-Chain-Hash", chainHashHex),
         ("Ledger-Fact-Schema-Version", String(snapshot.factSchemaVersion)), ("Ledger-Catalog-Digest", catalogDigest)]
    }

    /// `export` of the JSON answer. Nothing here depends on when or how the export was taken (no
    /// wall-clock time, not whether it was read or folded), so `?asOfPosition=` reproduces it.
    var json: JSONValue {
        ["position": .integer(snapshot.position), "chainHash": .string(chainHashHex),
         "factSchemaVersion": .integer(Int64(snapshot.factSchemaVersion)), "catalogDigest": .string(catalogDigest)]
    }

    /// The CSV: one comment line naming the position, chain hash, fact schema version and catalog
    /// digest (no comma in it, so a spreadsheet keeps it in one cell), then `RefundCaseCSV`.
    var csv: String {
        "# ledger refund export; position=\(snapshot.position); chain_hash=\(chainHashHex); "
            + "fact_schema_version=\(snapshot.factSchemaVersion); catalog_digest=\(catalogDigest)\r\n"
            + RefundCaseCSV.render(snapshot.cases)
    }
}

/// Use case: refund cases for auditors, from both sources, read from the refund-case projection
/// (`RefundCaseFold` of the facts, kept like every other projection), or folded from the facts up
/// to an earlier log position to reproduce an export. The events are the evidence: a case lists the
/// positions of every one of them, and the single-case view carries each event's stored bytes with
/// the facts the ledger derived from it.
struct RefundDesk: Sendable {
    let store: Store
    /// The digest of the catalog this instance runs with (`CatalogRecord.digest`).
    let catalogDigest: String

    func export(matching filter: RefundCaseFilter, after cursor: RefundCaseCursor? = nil, limit: Int? = nil,
                asOfPosition: Int64? = nil) async throws -> RefundExport {
        do {
            let snapshot = try await store.refundCases.cases(matching: filter, after: cursor, limit: limit, asOfPosition: asOfPosition)
            return RefundExport(snapshot: snapshot, catalogDigest: catalogDigest)
        } catch let error as RefundCaseQueryError {
            throw ServiceFailure.invalidParameter(error.description)
        }
    }

    func cases(matching filter: RefundCaseFilter) async throws -> [RefundCase] {
        try await export(matching: filter).snapshot.cases
    }

    /// The case `caseId` with its evidence trail; nil when there is no such case.
    func refundCase(_ caseId: String) async throws -> (RefundCase, [EvidencedEvent])? {
        guard let found = try await store.refundCases.refundCase(id: caseId) else { return nil }
        let events = try await store.events.events(positions: found.links)
        let facts = try await store.projections.facts(positions: found.links)
        let factsAt = Dictionary(grouping: facts, by: \.position)
        return (found, events.map { EvidencedEvent(event: $0, facts: (factsAt[$0.position] ?? []).sorted { $0.ordinal < $1.ordinal }) })
    }
}

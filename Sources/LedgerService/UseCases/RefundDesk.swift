import Foundation
import LedgerCore
import LedgerStore

/// Use case: refund cases for auditors, from both sources, folded on request from the facts
/// (`RefundCaseFold` over the store's refund facts: the same facts every other reader folds). The
/// events are the evidence: a case lists the positions of every one of them, and the single-case
/// view carries each event's stored bytes with the facts the case took from it.
struct RefundDesk: Sendable {
    let store: Store

    func cases(matching filter: RefundCaseFilter) async throws -> [RefundCase] {
        try await store.read { reads in RefundCaseFold.cases(from: try await reads.refunds.allCaseFacts()).filter(filter.matches) }
    }

    /// The case `caseId` with its evidence trail; nil when there is no such case.
    func refundCase(_ caseId: String) async throws -> (RefundCase, [EvidencedEvent])? {
        try await store.read { reads in try await refundCase(caseId, reads: reads) }
    }

    private func refundCase(_ caseId: String, reads: Reads) async throws -> (RefundCase, [EvidencedEvent])? {
        let facts = try await reads.refunds.caseFacts(caseId: caseId)
        guard let found = RefundCaseFold.cases(from: facts).first(where: { $0.caseId == caseId }) else { return nil }
        let events = try await reads.events.events(positions: found.links)
        let factsAt = Dictionary(grouping: facts, by: \.position)
        return (found, events.map { EvidencedEvent(event: $0, facts: (factsAt[$0.position] ?? []).sorted { $0.ordinal < $1.ordinal }) })
    }
}

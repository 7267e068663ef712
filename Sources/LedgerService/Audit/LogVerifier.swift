import Crypto
import Foundation
import LedgerCore
import LedgerStore

/// Where the log stops being trustworthy, and why.
public struct VerificationBreak: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The stored link does not match the event: the event (or its link) was changed.
        case hashMismatch = "hash_mismatch"
        /// An event without a link, or a link without an event.
        case missingLink = "missing_link"
        /// Positions do not follow each other.
        case gap
        /// The raw evidence's signature does not verify now.
        case signature
        /// A kept anchor is not on this chain: history up to it was rewritten (or cut).
        case anchor
    }

    public var position: Int64
    public var kind: Kind
    public var reason: String

    public var description: String { "position \(position): \(kind.rawValue): \(reason)" }
}

/// What `ledger verify` found.
public struct LogVerificationReport: Sendable {
    public var from: Int64
    public var head: Int64
    public var eventsChecked = 0
    public var signaturesVerified = 0
    public var unsigned = 0
    public var anchorsChecked = 0
    /// In position order; the first is the first broken position.
    public var breaks: [VerificationBreak] = []
    /// The chain's value at the head, as recomputed (the anchor to keep).
    public var headAnchor: ChainAnchor
    public var seconds: Double = 0

    public var isIntact: Bool { breaks.isEmpty }
}

/// Walks the hash chain (recomputing every link in Swift from the event's own fields, not
/// trusting the database's arithmetic), re-verifies each event's raw evidence, and checks kept
/// anchors. A mismatch at one position is reported and the walk goes on from the stored link, so
/// one edited event is named alone rather than everything after it.
public struct LogVerifier: Sendable {
    let store: Store
    let evidence: EvidenceVerifier
    public var batchSize = 500
    /// Breaks reported at most (the walk stops counting there; the first is what matters).
    public var maxBreaks = 100

    public init(store: Store, evidence: EvidenceVerifier) {
        self.store = store
        self.evidence = evidence
    }

    /// Verifies from position `from` (1: the whole log; the link before `from` is taken as stored)
    /// to the head as it is when the walk starts, and every anchor.
    public func verify(
        from: Int64 = 1, anchors: [ChainAnchor] = [], progress: @escaping @Sendable (Int64, Int64) -> Void = { _, _ in }
    ) async throws -> LogVerificationReport {
        let started = ContinuousClock.now
        let start = max(from, 1)
        let head = try await store.chain.head()
        var report = LogVerificationReport(from: start, head: head.position, headAnchor: head)
        func record(_ b: VerificationBreak) { if report.breaks.count < maxBreaks { report.breaks.append(b) } }

        var previous: [UInt8]
        if start == 1 {
            previous = EventChainHash.genesis
        } else if let link = try await store.chain.anchor(at: start - 1) {
            previous = link.hash
        } else {
            previous = EventChainHash.genesis
            record(VerificationBreak(position: start - 1, kind: .missingLink, reason: "no chain link is stored for the position before --from \(start)"))
        }
        var expected = start
        var recomputedAt: [Int64: [UInt8]] = [:]
        let anchorPositions = Set(anchors.map(\.position))
        var cursor = start - 1
        while cursor < head.position {
            let batch = try await store.chain.events(after: cursor, limit: batchSize).filter { $0.event.position <= head.position }
            guard !batch.isEmpty else { break }
            for chained in batch {
                let position = chained.event.position
                if position != expected {
                    record(VerificationBreak(position: expected, kind: .gap,
                                             reason: "the next stored event is at \(position): events \(expected)…\(position - 1) are missing"))
                }
                expected = position + 1
                let recomputed = EventChainHash.hash(previous: previous, chained.fields)
                if let stored = chained.storedHash {
                    if stored != recomputed {
                        record(VerificationBreak(
                            position: position, kind: .hashMismatch,
                            reason: "the stored link does not match the event (\(chained.event.event.type), stream \(chained.event.event.streamId), recorded \(chained.recordedAtMicros) µs): the event or its link was changed after it was appended"))
                    }
                    previous = stored
                } else {
                    record(VerificationBreak(position: position, kind: .missingLink, reason: "the event has no chain link"))
                    previous = recomputed
                }
                if anchorPositions.contains(position) { recomputedAt[position] = previous }
                switch evidence.check(chained.event) {
                case .verified: report.signaturesVerified += 1
                case .unsigned: report.unsigned += 1
                case .refused(let reason):
                    record(VerificationBreak(position: position, kind: .signature, reason: reason))
                }
                report.eventsChecked += 1
            }
            cursor = batch.last!.event.position
            progress(cursor - start + 1, head.position - start + 1)
        }
        if expected <= head.position {
            record(VerificationBreak(position: expected, kind: .gap, reason: "the head is \(head.position) but the log ends at \(expected - 1)"))
        }
        if let orphan = try await store.chain.orphanLinks(after: start - 1).first {
            record(VerificationBreak(position: orphan, kind: .missingLink, reason: "a chain link exists for a position that has no event (an event was removed)"))
        }
        report.headAnchor = ChainAnchor(position: head.position, hash: head.position >= start ? previous : head.hash)

        for anchor in anchors.sorted(by: { $0.position < $1.position }) {
            report.anchorsChecked += 1
            if anchor.position > head.position {
                record(VerificationBreak(position: anchor.position, kind: .anchor,
                                         reason: "the log ends at \(head.position), before this anchor: events were removed"))
                continue
            }
            var onChain = recomputedAt[anchor.position]
            if onChain == nil { onChain = try await store.chain.anchor(at: anchor.position)?.hash }
            if onChain != anchor.hash {
                record(VerificationBreak(
                    position: anchor.position, kind: .anchor,
                    reason: "the chain's hash here is \(onChain.map { Hex.encode($0) } ?? "missing"), the kept anchor says \(anchor.hex): history at or before \(anchor.position) was rewritten"))
            }
        }
        report.breaks.sort { ($0.position, $0.kind.rawValue) < ($1.position, $1.kind.rawValue) }
        report.seconds = started.duration(to: .now).components.seconds.doubleValue
            + Double(started.duration(to: .now).components.attoseconds) / 1e18
        return report
    }
}

private extension Int64 {
    var doubleValue: Double { Double(self) }
}

/// LedgerCore owns the domain: the event envelope every source is stored in, the decoded
/// notification models, and the projections as pure folds over events. No I/O, no C.
import Foundation

/// Who produced an event. `ledger` marks the ledger's own decisions (refund answers, admin actions).
public enum EventSource: String, Sendable, Codable, CaseIterable {
    case apple
    case wechat
    case ledger
}

/// Milliseconds since the Unix epoch, the unit Apple and the HTTP API use for every time.
public typealias EpochMillis = Int64

/// An event about to be appended. `streamId` and `dedupeKey` together make the append idempotent.
public struct NewEvent: Sendable, Equatable {
    /// Apple's originalTransactionId (or a namespaced stream, see `StreamId`).
    public var streamId: String
    /// notificationUUID for Apple V2; a documented deterministic key for other sources.
    public var dedupeKey: String
    public var source: EventSource
    /// notificationType[/subtype] for Apple, the event name for WeChat, the decision name for ledger.
    public var type: String
    /// `Production` / `Sandbox` where the source says so.
    public var environment: String?
    /// When the source signed the message (business time), ms.
    public var signedAt: EpochMillis?
    /// The transaction's expiresDate, ms, when there is one.
    public var expiresAt: EpochMillis?
    /// The decoded message as UTF-8 JSON text (stored as jsonb).
    public var payload: Data {
        // A parsed tree of other bytes would give other facts than the stored payload.
        didSet { parsed = nil }
    }
    /// The exact bytes received, signatures included, so the evidence can be re-verified.
    public var raw: Data
    /// `payload` as the source's verifier already parsed it, so the fact decoder does not parse
    /// it again (issue 19: decoded once). Not stored and not part of equality: the stored bytes
    /// say the same.
    public var parsed: ParsedPayload?

    public init(
        streamId: String, dedupeKey: String, source: EventSource, type: String,
        environment: String? = nil, signedAt: EpochMillis? = nil, expiresAt: EpochMillis? = nil,
        payload: Data, raw: Data, parsed: ParsedPayload? = nil
    ) {
        self.streamId = streamId
        self.dedupeKey = dedupeKey
        self.source = source
        self.type = type
        self.environment = environment
        self.signedAt = signedAt
        self.expiresAt = expiresAt
        self.payload = payload
        self.raw = raw
        self.parsed = parsed
    }

    public static func == (a: NewEvent, b: NewEvent) -> Bool {
        a.streamId == b.streamId && a.dedupeKey == b.dedupeKey && a.source == b.source && a.type == b.type
            && a.environment == b.environment && a.signedAt == b.signedAt && a.expiresAt == b.expiresAt
            && a.payload == b.payload && a.raw == b.raw
    }
}

/// A payload already parsed by whoever built the event (the tree of exactly the `payload` bytes).
public enum ParsedPayload: Sendable {
    /// JSONSerialization's object (the V2 verifier's).
    case foundation(FoundationObject)
    /// A `JSONValue` (the App Store API answers are built as one).
    case value(JSONValue)
}

/// An event as stored: the envelope plus where and when the ledger recorded it.
public struct RecordedEvent: Sendable, Equatable {
    /// Global, gapless, commit-ordered position (1, 2, 3, …).
    public var position: Int64
    public var recordedAt: EpochMillis
    public var event: NewEvent

    public init(position: Int64, recordedAt: EpochMillis, event: NewEvent) {
        self.position = position
        self.recordedAt = recordedAt
        self.event = event
    }
}

/// What an append did: a new event, or the event already stored under the same keys.
public struct AppendOutcome: Sendable, Equatable {
    public var position: Int64
    public var duplicate: Bool
    public var recordedAt: EpochMillis

    public init(position: Int64, duplicate: Bool, recordedAt: EpochMillis) {
        self.position = position
        self.duplicate = duplicate
        self.recordedAt = recordedAt
    }
}


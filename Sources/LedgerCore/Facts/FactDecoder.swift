import Foundation

/// The one place a stored event becomes facts: one decoder per source, chosen from the event's
/// envelope, each a pure function of the event (never of its position or of other events).
///
/// | source | events | decoder |
/// |---|---|---|
/// | `apple`, type `V1/…` | legacy V1 notifications (shared secret) | `AppleV1Facts` |
/// | `apple`, other types | V2 notifications (verified JWS, nested JWS decoded) | `AppleV2Facts` |
/// | `wechat` | xpay pushes | `WeChatFacts` |
/// | `ledger` | the ledger's own decisions and records | `LedgerFacts` |
///
/// A decoder never throws: an event it cannot interpret gives one `unreadable` fact naming the
/// reason, so the evidence stays on record, is counted, and is folded by nobody.
///
/// `schemaVersion` names the fact schema these decoders produce. Change it whenever a decoder
/// would derive different facts from the same event; `ledger rederive` then derives the new
/// version beside the old one (blue/green) and the readers switch when it is complete.
public enum FactDecoder {
    public static let schemaVersion = 2

    /// The facts of an event about to be appended (unplaced: the store adds position, ordinal,
    /// recordedAt and stream).
    public static func facts(of event: NewEvent) -> [Fact] {
        do {
            switch event.source {
            case .apple:
                if AppleV1Facts.isV1(event) { return try AppleV1Facts.facts(of: event) }
                return try AppleV2Facts.facts(of: event)
            case .wechat:
                return try WeChatFacts.facts(of: event)
            case .ledger:
                return try LedgerFacts.facts(of: event)
            }
        } catch {
            return [unreadable(event, reason: error.description)]
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
        case .apple: AppleV1Facts.isV1(event) ? .appleV1 : .appleV2
        case .wechat: .wechat
        case .ledger: .ledger
        }
        return Fact(
            subscription: nil, kind: .unreadable, origin: origin, message: event.type,
            signedAt: event.signedAt ?? 0, detail: Detail.json(["reason": .string(reason)]))
    }
}

/// Why a decoder could not interpret an event; becomes an `unreadable` fact's reason.
public struct FactDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Canonical JSON for `Fact.detail` (sorted keys, so equal details are equal text).
enum Detail {
    static func json(_ object: [String: PushValue?]) -> String? {
        var o: [String: PushValue] = [:]
        for (k, v) in object { if let v { o[k] = v } }
        if o.isEmpty { return nil }
        return String(decoding: PushValue.object(o).canonicalJSON(), as: UTF8.self)
    }

    static func text(_ s: String?) -> PushValue? { s.map(PushValue.string) }
    static func int(_ i: Int64?) -> PushValue? { i.map(PushValue.integer) }
    static func int(_ i: Int?) -> PushValue? { i.map { PushValue.integer(Int64($0)) } }
}

import Foundation
import LedgerCore

/// Apple's CONSUMPTION_REQUEST answers as an outbox consumer (`apple.consumption`).
///
/// Every `apple.v2` `consumption_request` fact with a subscription and a transaction becomes an
/// item `consumption:<request position>` (the answer's dedupe key) in the transaction that stores
/// the notification, unless it was signed more than `lookback` before it was recorded (a history
/// import does not answer requests whose window closed long ago). The answer is the responder's own
/// event (`consumption/sent`, `/refused`, `/not-sent`), which settles the item; failed attempts are
/// `outbox/attempt-failed` events with Apple's window as the schedule (ConsumptionResponder).
public enum ConsumptionOutbox {
    public static let name = "apple.consumption"
    /// Requests signed longer than this before they were recorded are not taken up.
    public static let lookback: EpochMillis = 7 * 86_400_000
    /// Apple's window: 12 hours after the request was signed.
    public static let window: EpochMillis = 12 * 3_600_000

    public static let consumer = OutboxConsumer(
        name: name, ordered: false,
        // The responder schedules its own retries (30 s doubling to 30 min, until the window closes).
        schedule: RetrySchedule(delays: [], jitter: 0), leaseMillis: 300_000, derive: derive)

    static func derive(_ batch: OutboxBatch) -> [OutboxEffect] {
        var effects: [OutboxEffect] = []
        for fact in batch.facts where fact.kind == .consumptionRequest && fact.origin == .appleV2 {
            guard let key = fact.subscription, let tx = fact.transactionId, fact.signedAt >= fact.recordedAt - lookback else { continue }
            effects.append(.enqueue(draft(position: fact.position, subscription: key.text, transactionId: tx, requestedAt: fact.signedAt,
                                          recordedAt: fact.recordedAt)))
        }
        for event in batch.events where event.event.source == .ledger && [
            LedgerEventType.consumptionSent, LedgerEventType.consumptionRefused, LedgerEventType.consumptionNotSent,
        ].contains(event.event.type) {
            guard let value = try? JSONDecoder().decode(JSONValue.self, from: event.event.payload),
                  let request = value.int64("requestPosition") else { continue }
            effects.append(.settle(id: itemId(requestPosition: request), status: .done, position: event.position,
                                   attempts: value.int64("attempts").map(Int.init), error: nil))
        }
        return effects
    }

    public static func itemId(requestPosition: Int64) -> String { DedupeKey.consumptionAnswer(requestPosition: requestPosition) }

    static func draft(position: Int64, subscription: String, transactionId: String, requestedAt: EpochMillis, recordedAt: EpochMillis) -> OutboxItemDraft {
        OutboxItemDraft(
            id: itemId(requestPosition: position), orderingKey: subscription,
            payload: .object(["subscription": .string(subscription), "transactionId": .string(transactionId),
                              "requestedAt": .integer(requestedAt), "deadline": .integer(requestedAt + window)]),
            causePosition: position, createdAt: recordedAt)
    }
}

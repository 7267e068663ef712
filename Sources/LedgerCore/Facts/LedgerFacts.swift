import Foundation

/// The ledger's own event types (source `ledger`). Their payloads are written by the ledger
/// (`LedgerEvents` builds them), so each has exactly one shape.
public enum LedgerEventType {
    /// `{"customerId", "environment", "originalTransactionId", "requestedBy"}`: the app says who
    /// the subscription belongs to.
    public static let customerTied = "customer/tied"
    /// `{"environment", "originalTransactionId", "requestedBy"}`: the app withdraws its tie.
    public static let customerUntied = "customer/untied"
    /// `{"digest", "catalog", "instance"}`: a service started with this product catalog.
    public static let catalog = "config/catalog"
    /// Outbox (Sources/LedgerStore/Outbox) steps, stream `ledger:outbox:<consumer>`, payload
    /// `{"consumer", "item", "generation", "attempt", …}`. They have no facts: the append
    /// transaction applies them to `outbox_items`, whose rows they are the history of.
    /// A failed attempt that will be retried: `"error"`, `"nextAttemptAt"` (ms), optional `"retryAfter"`.
    public static let outboxAttemptFailed = "outbox/attempt-failed"
    /// The attempt succeeded: `"answer"` (what the receiver said, JSON).
    public static let outboxDelivered = "outbox/delivered"
    /// The last attempt of the schedule failed (or the consumer gave up): `"error"`.
    public static let outboxExhausted = "outbox/exhausted"
    /// An operator replayed the item: a new generation starts pending, `"requestedBy"`, `"at"`.
    public static let outboxRequeued = "outbox/requeued"
}

/// Facts of the ledger's own events.
///
/// | type | fact | time |
/// |---|---|---|
/// | `customer/tied`, `customer/untied` | `customer_tie` of the named subscription (`customerId` nil for untie) | recording time (folds order ties by recordedAt, then position) |
/// | `config/catalog` | `catalog` (`detail.digest`, `detail.catalog`) | recording time |
/// | `ledger_wechat_refund_inquiry_answer` | `refund_answer` of `pay_order_id` (`detail`: the decision, the asking's `refund_time`, `decidedInMs`) | the event's signed_at |
/// | `ledger_wechat_order_linked` | `order_alias` of the linked subscription: the stream's order ~ the order it was matched through (`linked_via`) | the event's signed_at |
/// | `customer/consent` | `consent` of `customerId` (`detail.consented`), no subscription | recording time (the latest recorded wins) |
/// | `consumption/sent`, `consumption/refused`, `consumption/not-sent` | `consumption_answer` of the subscription and `transactionId` (`detail`: outcome, reason, requestPosition, request, answer) | the event's signed_at |
/// | `outbox/attempt-failed`, `outbox/delivered`, `outbox/exhausted`, `outbox/requeued` | none (applied to `outbox_items` in the append transaction) | |
/// | `reconcile/report` | none (the report is read back whole: `GET /v1/admin/drift`) | |
/// | anything else (admin actions) | none | |
enum LedgerFacts {
    static func facts(of event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let value: JSONValue
        do { value = try JSONDecoder().decode(JSONValue.self, from: event.payload) } catch {
            throw FactDecodingError("the payload is not JSON: \(error)")
        }
        let signed = event.signedAt ?? 0
        switch event.type {
        case LedgerEventType.customerTied, LedgerEventType.customerUntied:
            guard let env = SubscriptionKey.environment(value.text("environment")),
                  let otid = value.text("originalTransactionId") else {
                throw FactDecodingError("a customer tie names no environment and originalTransactionId")
            }
            var customer: String?
            if event.type == LedgerEventType.customerTied {
                guard let c = value.text("customerId") else { throw FactDecodingError("a customer tie names no customerId") }
                customer = CustomerId.normalised(c)
            }
            return [Fact(subscription: SubscriptionKey(environment: env, originalTransactionId: otid), kind: .customerTie,
                         origin: .ledger, message: event.type, signedAt: signed, customerId: customer)]
        case LedgerEventType.catalog:
            guard let digest = value.text("digest") else { throw FactDecodingError("a catalog record has no digest") }
            let catalog = value["catalog"].map { String(decoding: $0.canonicalJSON(), as: UTF8.self) }
            return [Fact(subscription: nil, kind: .catalog, origin: .ledger, message: event.type, signedAt: signed,
                         detail: Detail.json(["digest": .string(digest), "catalog": Detail.text(catalog)]))]
        case XPayEventName.refundInquiryAnswer:
            guard let order = value.text("pay_order_id") else { throw FactDecodingError("a refund answer names no pay_order_id") }
            var detail = value.objectValue ?? [:]
            detail["pay_order_id"] = nil
            return [Fact(subscription: nil, kind: .refundAnswer, origin: .ledger, message: event.type, signedAt: signed,
                         transactionId: order,
                         detail: String(decoding: JSONValue.object(detail).canonicalJSON(), as: UTF8.self))]
        case XPayEventName.orderLinked:
            guard let order = value.text("order_id"), let stream = value.text("subscription_stream") else {
                throw FactDecodingError("an order link names no order_id or subscription_stream")
            }
            // The link names the provisional stream's order and the id of the subscription's order
            // it was matched through (`linked_via`), so the fold joins the stream's facts even when
            // they name an id no other fact of the subscription states. Links written before
            // `environment` was recorded are Production (WeChat documents no sandbox for Apple payments).
            let environment = SubscriptionKey.environment(value.text("environment")) ?? SubscriptionKey.production
            let via = value.text("linked_via").flatMap { $0 == order || $0.isEmpty ? nil : $0 }
            return [Fact(subscription: SubscriptionKey(environment: environment, originalTransactionId: stream),
                         kind: .orderAlias, origin: .ledger, message: event.type, signedAt: signed, transactionId: order,
                         orderAlias: via)]
        case LedgerEventType.consent:
            return [try ConsentRecord.fact(value, event: event)]
        case LedgerEventType.consumptionSent, LedgerEventType.consumptionRefused, LedgerEventType.consumptionNotSent:
            return [try ConsumptionAnswerRecord.fact(value, event: event)]
        default:
            return []
        }
    }
}

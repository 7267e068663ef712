import Foundation

/// What an outbound webhook announces. The raw values are the `type` field of the body (dotted, as
/// Standard Webhooks suggests) and the names an endpoint's `eventTypes` filter lists.
public enum WebhookEventType: String, Sendable, Hashable, CaseIterable, Codable, Comparable {
    /// The subscription's first period began (once per subscription).
    case subscriptionStarted = "subscription.started"
    /// A later period of the same product began (also a lapsed or refunded customer resubscribing).
    case subscriptionRenewed = "subscription.renewed"
    /// A period of another product began: `from`, `to`, `kind` upgrade/downgrade/crossgrade.
    case subscriptionProductChanged = "subscription.product_changed"
    /// Auto-renew was turned off or on (Apple renewal info, WeChat signing/unsigning).
    case subscriptionAutoRenewChanged = "subscription.auto_renew_changed"
    /// A renewal failed: the grace period or the billing retry began (`stage`, `gracePeriodExpiresDate`).
    case subscriptionBillingIssue = "subscription.billing_issue"
    /// A new period began after a billing issue.
    case subscriptionRecovered = "subscription.recovered"
    /// The subscription lapsed (`reason`).
    case subscriptionExpired = "subscription.expired"
    /// A transaction was refunded or revoked (`transactionId`, `periodInEffect`).
    case subscriptionRefunded = "subscription.refunded"
    /// A refund was reversed (`transactionId`, `periodInEffect`).
    case subscriptionRefundReversed = "subscription.refund_reversed"
    /// A customer gained an entitlement through this subscription.
    case entitlementGranted = "entitlement.granted"
    /// A customer lost an entitlement this subscription gave (`reason`).
    case entitlementRevoked = "entitlement.revoked"
    /// The ledger answered a refund case: a WeChat refund inquiry or an Apple consumption request.
    case refundCaseDecided = "refund_case.decided"
    /// Sent on demand (`POST /v1/admin/webhooks/test`), never derived.
    case test

    public static func < (a: WebhookEventType, b: WebhookEventType) -> Bool { a.rawValue < b.rawValue }
}

/// One event the ledger announces, derived from committed facts (`WebhookDerivation`), never from
/// a request. Its `id` is a digest of `identity` — the subscription, the type and what
/// distinguishes it from another event of that type (the transaction that began a period, the n-th
/// grant of an entitlement) — so every attempt, replay and rebuild sends the same `webhook-id`,
/// and learning the same history in another arrival order names the same events.
public struct WebhookEvent: Sendable, Equatable {
    public var id: String
    /// `<subscription>|<type>|<discriminator>`: what `id` digests. Stable, not secret.
    public var identity: String
    public var type: WebhookEventType
    /// `apple` or `wechat`.
    public var source: String
    /// `Production` or `Sandbox`.
    public var environment: String
    public var originalTransactionId: String?
    public var customerId: String?
    /// The business time the change took effect (epoch ms).
    public var effectiveAt: EpochMillis
    /// The ledger position whose commit made the ledger derive the event.
    public var position: Int64
    /// The type's own fields (documented per type in docs/openapi.yaml, webhooks section).
    public var details: [String: JSONValue]
    /// The subscription as the query API answers it, at `effectiveAt`.
    public var state: SubscriptionState?

    public init(
        id: String, identity: String, type: WebhookEventType, source: String, environment: String,
        originalTransactionId: String?, customerId: String?, effectiveAt: EpochMillis, position: Int64,
        details: [String: JSONValue] = [:], state: SubscriptionState? = nil
    ) {
        self.id = id
        self.identity = identity
        self.type = type
        self.source = source
        self.environment = environment
        self.originalTransactionId = originalTransactionId
        self.customerId = customerId
        self.effectiveAt = effectiveAt
        self.position = position
        self.details = details
        self.state = state
    }

    /// The body sent: `{"id","type","timestamp","data"}` per the Standard Webhooks convention;
    /// `data` has the common fields, the type's own, and `state`. Canonical JSON (sorted keys), so
    /// the same event is the same bytes on every attempt.
    public var body: JSONValue {
        var data = details
        data["source"] = .string(source)
        data["environment"] = .string(environment)
        data["originalTransactionId"] = .optional(originalTransactionId)
        data["customerId"] = .optional(customerId)
        data["effectiveDate"] = .integer(effectiveAt)
        data["position"] = .integer(position)
        data["state"] = state?.representation ?? .null
        return [
            "id": .string(id),
            "type": .string(type.rawValue),
            "timestamp": .string(UTCTime.iso8601(effectiveAt)),
            "data": .object(data),
        ]
    }

    public var bodyBytes: Data { body.canonicalJSON() }
}

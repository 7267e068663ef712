import Foundation

/// How the ledger answers WeChat's iOS refund inquiry (`xpay_subscribe_ios_refund_query_notify`).
/// Apple only takes the answer as advice; it must come within 3 s, so the policy is a pure function
/// of facts the service has already loaded.
///
/// Default (every field can be set in the `refundPolicy` object of the JSON configuration):
/// 1. Allow when the period was not delivered: the ledger holds no delivery for the order and
///    WeChat's `provide_status` is not 1 (delivered). The customer received nothing.
/// 2. Refuse when the customer already had more than `maxEarlierRefunds` (default 0) refunds of
///    *other* orders within `earlierRefundWindowDays` (default 90) before the inquiry.
/// 3. Allow when the entitlement was used for less than `maxEntitlementUseHours` (default 48) up to
///    the inquiry; refuse otherwise.
/// The inquiry's own `refund_time` is the clock, so the same facts always give the same answer.
public struct RefundPolicy: Sendable, Equatable, Codable {
    public var allowWhenNotDelivered: Bool
    public var maxEntitlementUseHours: Int
    public var earlierRefundWindowDays: Int
    public var maxEarlierRefunds: Int

    public static let `default` = RefundPolicy()

    public init(allowWhenNotDelivered: Bool = true, maxEntitlementUseHours: Int = 48,
                earlierRefundWindowDays: Int = 90, maxEarlierRefunds: Int = 0) {
        self.allowWhenNotDelivered = allowWhenNotDelivered
        self.maxEntitlementUseHours = maxEntitlementUseHours
        self.earlierRefundWindowDays = earlierRefundWindowDays
        self.maxEarlierRefunds = maxEarlierRefunds
    }

    private enum CodingKeys: String, CodingKey {
        case allowWhenNotDelivered, maxEntitlementUseHours, earlierRefundWindowDays, maxEarlierRefunds
    }

    /// Missing members keep their defaults, so a configuration may set only what it changes.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let d = RefundPolicy()
        allowWhenNotDelivered = try c.decodeIfPresent(Bool.self, forKey: .allowWhenNotDelivered) ?? d.allowWhenNotDelivered
        maxEntitlementUseHours = try c.decodeIfPresent(Int.self, forKey: .maxEntitlementUseHours) ?? d.maxEntitlementUseHours
        earlierRefundWindowDays = try c.decodeIfPresent(Int.self, forKey: .earlierRefundWindowDays) ?? d.earlierRefundWindowDays
        maxEarlierRefunds = try c.decodeIfPresent(Int.self, forKey: .maxEarlierRefunds) ?? d.maxEarlierRefunds
    }

    /// Reads a policy from JSON text and checks its ranges.
    public static func fromJSON(_ data: Data) throws(RefundPolicyError) -> RefundPolicy {
        let policy: RefundPolicy
        do {
            policy = try JSONDecoder().decode(RefundPolicy.self, from: data)
        } catch {
            throw .invalidJSON("refundPolicy must be a JSON object with optional members allowWhenNotDelivered (bool), maxEntitlementUseHours, earlierRefundWindowDays, maxEarlierRefunds (integers): \(error)")
        }
        try policy.validate()
        return policy
    }

    public func validate() throws(RefundPolicyError) {
        guard (0...24 * 366).contains(maxEntitlementUseHours) else {
            throw .outOfRange(field: "maxEntitlementUseHours", value: maxEntitlementUseHours, allowed: "0...8784")
        }
        guard (0...3660).contains(earlierRefundWindowDays) else {
            throw .outOfRange(field: "earlierRefundWindowDays", value: earlierRefundWindowDays, allowed: "0...3660")
        }
        guard (0...1000).contains(maxEarlierRefunds) else {
            throw .outOfRange(field: "maxEarlierRefunds", value: maxEarlierRefunds, allowed: "0...1000")
        }
    }

    /// Canonical JSON of the policy (sorted keys): what `ledger:config` records and `digest` hashes.
    public var canonicalJSON: Data {
        JSONValue.object([
            "allowWhenNotDelivered": .bool(allowWhenNotDelivered),
            "maxEntitlementUseHours": .integer(Int64(maxEntitlementUseHours)),
            "earlierRefundWindowDays": .integer(Int64(earlierRefundWindowDays)),
            "maxEarlierRefunds": .integer(Int64(maxEarlierRefunds)),
        ]).canonicalJSON()
    }

    /// A short digest of the policy (FNV-1a 64 of `canonicalJSON`, hex) for callers without
    /// cryptography; the service names the SHA-256 it records in `config/wechat-refund-policy`.
    public var digest: String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in canonicalJSON { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }
        let hex = String(h, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// - Parameter policyDigest: the digest the evidence names for this policy (the service passes
    ///   the SHA-256 it recorded in `ledger:config`); `digest` when nil.
    public func decide(_ facts: RefundInquiryFacts, policyDigest: String? = nil) -> RefundDecision {
        let windowStart = facts.askedAt - EpochMillis(earlierRefundWindowDays) * 86_400_000
        let earlier = facts.earlierRefunds
            .filter { $0.orderId != facts.payOrderId && $0.refundedAt >= windowStart && $0.refundedAt <= facts.askedAt }
            .sorted { ($0.refundedAt, $0.orderId) < ($1.refundedAt, $1.orderId) }
        let delivered = facts.delivery != nil || facts.provideStatus == .delivered
        let useStart = facts.entitlementUse?.from ?? facts.delivery?.deliveredAt ?? facts.orderTime
        let useEnd = min(facts.entitlementUse?.until ?? facts.askedAt, facts.askedAt)
        let usedMinutes: Int64? = useStart.map { max(0, useEnd - $0) / 60_000 }
        let basisWord = facts.delivery != nil ? "delivery" : "order_time"

        let verdict: RefundDecision.Verdict
        let rule: String
        let info: String
        if !delivered && allowWhenNotDelivered {
            (verdict, rule, info) = (.allow, "not_delivered", "period not delivered: no delivery recorded and provide_status is not delivered")
        } else if earlier.count > maxEarlierRefunds {
            (verdict, rule, info) = (.refuse, "earlier_refunds",
                                     "customer had \(earlier.count) refund(s) of other orders within \(earlierRefundWindowDays) days (allowed \(maxEarlierRefunds))")
        } else if let used = usedMinutes, used < Int64(maxEntitlementUseHours) * 60 {
            (verdict, rule, info) = (.allow, "short_use",
                                     "held \(used) minutes since \(basisWord), under the \(maxEntitlementUseHours) h limit")
        } else if let used = usedMinutes {
            (verdict, rule, info) = (.refuse, "long_use",
                                     "held \(used) minutes since \(basisWord), at or over the \(maxEntitlementUseHours) h limit")
        } else {
            // Delivered according to WeChat, but neither the ledger nor the inquiry says since when.
            (verdict, rule, info) = (.refuse, "use_unknown", "delivered, but no delivery or order time to measure use from")
        }

        var factObject: [String: JSONValue] = [
            "pay_order_id": .string(facts.payOrderId),
            "asked_at": .integer(facts.askedAt),
            "earlier_refunds_in_window": .array(earlier.map { r in
                var o: [String: JSONValue] = ["order_id": .string(r.orderId), "refunded_at": .integer(r.refundedAt)]
                if !r.refundIds.isEmpty { o["refund_ids"] = .array(r.refundIds.map(JSONValue.string)) }
                return .object(o)
            }),
            "earlier_refunds_count": .integer(Int64(earlier.count)),
        ]
        if let v = facts.customer { factObject["customer"] = .string(v) }
        if let v = facts.orderTime { factObject["order_time"] = .integer(v) }
        if let v = facts.provideStatus { factObject["provide_status"] = .integer(v.rawValue) }
        if let v = facts.productId { factObject["product_id"] = .string(v) }
        if let p = facts.pricePaid {
            factObject["price_paid"] = .object(["milliunits": .integer(p.milliunits), "currency": .optional(p.currency)])
        }
        if let s = facts.subscription {
            var o: [String: JSONValue] = ["original_transaction_id": .string(s.originalTransactionId), "environment": .string(s.environment)]
            if let v = facts.statusAtAsking { o["status_at_asking"] = .string(v) }
            if let v = facts.autoRenewAtAsking { o["auto_renew_at_asking"] = .integer(Int64(v)) }
            factObject["subscription"] = .object(o)
        }
        if let d = facts.delivery {
            var o: [String: JSONValue] = ["order_id": .string(d.orderId), "delivered_at": .integer(d.deliveredAt)]
            if let b = d.deliveredAtBasis { o["delivered_at_basis"] = .string(b) }
            if let p = d.periodEndsAt { o["period_ends_at"] = .integer(p) }
            if let p = d.position { o["event_position"] = .integer(p) }
            if let h = d.rawSHA256 { o["raw_sha256"] = .string(h) }
            factObject["ledger_delivery"] = .object(o)
        }
        if let start = useStart, let minutes = usedMinutes {
            // Named for what it is: the ledger cannot see use inside the app, only how long the
            // customer held the entitlement this order paid for.
            factObject["usage"] = .object([
                "basis": .string(facts.delivery != nil ? "time_since_delivery" : facts.orderTime != nil ? "time_since_order_time" : "unknown"),
                "description": .string("minutes from \(facts.delivery != nil ? "the ledger's delivery" : "WeChat's order_time") to the asking, or to the end of the paid period or a refund of the order when sooner"),
                "from": .integer(start), "until": .integer(useEnd), "minutes": .integer(minutes),
            ])
        }
        let evidence = RefundDecision.capped([
            "rule": .string(rule),
            "decision": .string(verdict == .allow ? "allow" : "refuse"),
            "policy": .object([
                "allowWhenNotDelivered": .bool(allowWhenNotDelivered),
                "maxEntitlementUseHours": .integer(Int64(maxEntitlementUseHours)),
                "earlierRefundWindowDays": .integer(Int64(earlierRefundWindowDays)),
                "maxEarlierRefunds": .integer(Int64(maxEarlierRefunds)),
                "digest": .string(policyDigest ?? digest),
            ]),
            "facts": .object(factObject),
        ])
        return RefundDecision(verdict: verdict, rule: rule, resultInfo: info, evidence: evidence)
    }
}

public enum RefundPolicyError: Error, Equatable, CustomStringConvertible {
    case invalidJSON(String)
    case outOfRange(field: String, value: Int, allowed: String)

    public var description: String {
        switch self {
        case .invalidJSON(let why): return why
        case .outOfRange(let f, let v, let a): return "refundPolicy.\(f) = \(v) is out of range; use a value in \(a)"
        }
    }
}

/// What the ledger knows when an inquiry arrives. Times are ms.
public struct RefundInquiryFacts: Sendable, Equatable {
    /// The inquiry's `pay_order_id`.
    public var payOrderId: String
    /// The customer (openid) when the order is linked to one.
    public var customer: String?
    /// The inquiry's `refund_time`.
    public var askedAt: EpochMillis
    /// The inquiry's `order_time`.
    public var orderTime: EpochMillis?
    /// WeChat's `provide_status`.
    public var provideStatus: XPayProvideStatus?
    /// The delivery the ledger recorded for this order, if any.
    public var delivery: Delivery?
    /// When the customer held the entitlement this order paid for.
    public var entitlementUse: UseWindow?
    /// Refunds of this customer's orders that the ledger recorded (any time; the policy filters).
    public var earlierRefunds: [EarlierRefund]
    /// The product of the order (the delivery's, else the inquiry's `product_id`).
    public var productId: String?
    /// What the customer paid for the order (the delivery's ActualPrice).
    public var pricePaid: Money?
    /// The subscription the order belongs to, and its state when asked.
    public var subscription: SubscriptionKey?
    public var statusAtAsking: String?
    public var autoRenewAtAsking: Int?

    public struct Money: Sendable, Equatable {
        public var milliunits: Int64
        public var currency: String?
        public init(milliunits: Int64, currency: String?) {
            self.milliunits = milliunits
            self.currency = currency
        }
    }

    public struct Delivery: Sendable, Equatable {
        public var orderId: String
        public var deliveredAt: EpochMillis
        public var periodEndsAt: EpochMillis?
        /// Event position of the delivery, so the evidence points at the raw message.
        public var position: Int64?
        /// Where `deliveredAt` comes from: `PaidTime`, `period_start` (no PaidTime: the end of the
        /// period before it) or `CreateTime` (no PaidTime and nothing earlier known).
        public var deliveredAtBasis: String?
        /// Hex SHA-256 of the delivery event's raw bytes (the push as received).
        public var rawSHA256: String?
        public init(orderId: String, deliveredAt: EpochMillis, periodEndsAt: EpochMillis? = nil, position: Int64? = nil,
                    deliveredAtBasis: String? = nil, rawSHA256: String? = nil) {
            self.orderId = orderId
            self.deliveredAt = deliveredAt
            self.periodEndsAt = periodEndsAt
            self.position = position
            self.deliveredAtBasis = deliveredAtBasis
            self.rawSHA256 = rawSHA256
        }
    }

    public struct UseWindow: Sendable, Equatable {
        public var from: EpochMillis
        /// nil = still entitled.
        public var until: EpochMillis?
        public init(from: EpochMillis, until: EpochMillis? = nil) {
            self.from = from
            self.until = until
        }
    }

    public struct EarlierRefund: Sendable, Equatable {
        public var orderId: String
        public var refundedAt: EpochMillis
        /// WeChat's refund ids (WxRefundId, else MchRefundId) of the successful refunds.
        public var refundIds: [String]
        public init(orderId: String, refundedAt: EpochMillis, refundIds: [String] = []) {
            self.orderId = orderId
            self.refundedAt = refundedAt
            self.refundIds = refundIds
        }
    }

    public init(payOrderId: String, customer: String? = nil, askedAt: EpochMillis, orderTime: EpochMillis? = nil,
                provideStatus: XPayProvideStatus? = nil, delivery: Delivery? = nil, entitlementUse: UseWindow? = nil,
                earlierRefunds: [EarlierRefund] = [], productId: String? = nil, pricePaid: Money? = nil,
                subscription: SubscriptionKey? = nil, statusAtAsking: String? = nil, autoRenewAtAsking: Int? = nil) {
        self.payOrderId = payOrderId
        self.customer = customer
        self.askedAt = askedAt
        self.orderTime = orderTime
        self.provideStatus = provideStatus
        self.delivery = delivery
        self.entitlementUse = entitlementUse
        self.earlierRefunds = earlierRefunds
        self.productId = productId
        self.pricePaid = pricePaid
        self.subscription = subscription
        self.statusAtAsking = statusAtAsking
        self.autoRenewAtAsking = autoRenewAtAsking
    }
}

/// The answer: `result_code` 0 allow (recommend refund) / 1 refuse, with its evidence.
public struct RefundDecision: Sendable, Equatable {
    public enum Verdict: Int, Sendable, Equatable {
        case allow = 0
        case refuse = 1
    }
    public var verdict: Verdict
    /// Which policy rule decided (`not_delivered`, `earlier_refunds`, `short_use`, `long_use`,
    /// `use_unknown`), or `deadline` for the fallback given when the budget ran out, `unreadable` for
    /// the fallback given to an inquiry the ledger could not read.
    public var rule: String
    public var resultInfo: String
    /// Compact JSON (sorted keys): rule, decision, policy parameters and the facts used. Never empty.
    public var evidence: String

    public var resultCode: Int { verdict.rawValue }

    /// The answer when the ledger could not decide within its budget (`reason`: `deadline`):
    /// the configured verdict, with evidence saying so and what the asking was.
    /// `unreadable`: the inquiry itself could not be read (no or `0` refund_time, a missing or
    /// over-long pay_order_id, a time of the wrong magnitude) — still answered, as the seed requires
    /// `result_code` and `evidence` in every answer (seed 000 §7.4), with the reason in the evidence.
    public static func fallback(_ verdict: Verdict, reason: String, budgetMs: Int64, payOrderId: String,
                                askedAt: EpochMillis?, why: String, resultInfo: String? = nil) -> RefundDecision {
        var facts: [String: JSONValue] = ["pay_order_id": .string(payOrderId)]
        if let askedAt { facts["asked_at"] = .integer(askedAt) }
        let evidence = capped([
            "rule": .string(reason),
            "decision": .string(verdict == .allow ? "allow" : "refuse"),
            "fallback": .object(["reason": .string(reason), "budget_ms": .integer(budgetMs), "detail": .string(why)]),
            "facts": .object(facts),
        ])
        return RefundDecision(
            verdict: verdict, rule: reason,
            resultInfo: resultInfo ?? "the ledger could not decide within its \(budgetMs) ms budget; configured fallback answer",
            evidence: evidence)
    }

    /// The longest `evidence` the ledger sends. The seed states no limit (000 §7.4), but the answer
    /// must reach WeChat within its 3 s and sits in every audit export: a customer with hundreds of
    /// earlier refunds, or a long error text, must not make it unbounded.
    public static let maxEvidenceBytes = 4096

    /// Compact JSON of `evidence`, at most `maxEvidenceBytes`: what does not fit is left out and
    /// counted, never cut mid-value — first the oldest earlier refunds (`earlier_refunds_left_out`;
    /// `earlier_refunds_count` keeps the whole count the rule used), then long texts (their tail,
    /// with `…(N characters left out)`), last the facts themselves (`facts_left_out`).
    static func capped(_ evidence: [String: JSONValue]) -> String {
        func text(_ o: [String: JSONValue]) -> String { String(decoding: JSONValue.object(o).canonicalJSON(), as: UTF8.self) }
        var o = evidence
        var out = text(o)
        guard out.utf8.count > maxEvidenceBytes else { return out }
        if case .object(var facts)? = o["facts"], case .array(var earlier)? = facts["earlier_refunds_in_window"] {
            var leftOut = 0
            while !earlier.isEmpty && out.utf8.count > maxEvidenceBytes {
                // Halving keeps this a few passes even for thousands of refunds.
                let drop = max(1, earlier.count / 2)
                earlier.removeFirst(drop)
                leftOut += drop
                facts["earlier_refunds_in_window"] = .array(earlier)
                facts["earlier_refunds_left_out"] = .integer(Int64(leftOut))
                o["facts"] = .object(facts)
                out = text(o)
            }
        }
        guard out.utf8.count > maxEvidenceBytes else { return out }
        func shortened(_ v: JSONValue) -> JSONValue {
            switch v {
            case .string(let s) where s.count > 256:
                return .string(String(s.prefix(256)) + "…(\(s.count - 256) characters left out)")
            case .object(let m): return .object(m.mapValues(shortened))
            case .array(let a): return .array(a.map(shortened))
            default: return v
            }
        }
        o = o.mapValues(shortened)
        out = text(o)
        guard out.utf8.count > maxEvidenceBytes else { return out }
        let factsBytes = o["facts"].map { $0.canonicalJSON().count } ?? 0
        o["facts"] = nil
        o["facts_left_out"] = .string("\(factsBytes) bytes of facts did not fit in \(maxEvidenceBytes) bytes; the stored inquiry and answer events hold them")
        out = text(o)
        return out.utf8.count > maxEvidenceBytes ? text(["rule": o["rule"] ?? .null, "decision": o["decision"] ?? .null,
                                                         "left_out": .string("the evidence did not fit in \(maxEvidenceBytes) bytes")]) : out
    }

    public init(verdict: Verdict, rule: String, resultInfo: String, evidence: String) {
        self.verdict = verdict
        self.rule = rule
        self.resultInfo = resultInfo
        self.evidence = evidence
    }
}

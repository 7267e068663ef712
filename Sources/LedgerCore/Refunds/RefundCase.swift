import Foundation

/// One refund case for auditors: everything the ledger holds about one refund request, from
/// either source, with the positions of the stored messages so the raw evidence can be fetched.
/// Folded from facts (`RefundCaseFold`), like every other reader.
///
/// - WeChat: one case per `pay_order_id` of `xpay_subscribe_ios_refund_query_notify` (Apple asks
///   up to three times; all askings are one case), the ledger's answers (`source = ledger`), the
///   `xpay_refund_notify` outcomes naming the order (MchOrderId or WxOrderId, else another id of the
///   same order), the delivery of the order when known (joined by the order's ids, whichever
///   arrived first), and the link events that tied the order to its subscription. A refund notify
///   no asking claims is a case of its own, keyed by MchOrderId (else WxOrderId). The same message
///   stored twice (a re-push routed to another stream) counts once; both positions are listed.
/// - Apple: one case per `transactionId` of `CONSUMPTION_REQUEST`, `REFUND`, `REFUND_DECLINED`
///   and `REFUND_REVERSED` notifications (V2; REVOKE is not a refund), of refunds Apple's API
///   answers state (reconciliation: a refund whose notification was lost, or one of an earlier
///   period found in the transaction history) and of the reversals those answers state after a
///   refund; with the ledger's answers to the consumption requests.
/// Times are epoch ms. Amounts are milliunits of `currency` (Apple's unit; WeChat fen × 10).
public struct RefundCase: Sendable, Equatable, Codable {
    public enum Source: String, Sendable, Equatable, Codable, CaseIterable {
        case wechat, apple
    }

    /// The ledger's answer (WeChat inquiries only; the ledger does not decide Apple refunds).
    public enum Decision: String, Sendable, Equatable, Codable, CaseIterable {
        case allow, refuse
    }

    public enum Outcome: String, Sendable, Equatable, Codable, CaseIterable {
        /// No final word yet.
        case pending
        /// Refunded (WeChat RetCode 0; Apple REFUND as the latest word).
        case refunded
        /// WeChat reported the refund failed (RetCode ≠ 0) and no success arrived.
        case refundFailed = "refund_failed"
        /// Apple REFUND_DECLINED as the latest word.
        case declined
        /// Apple REFUND_REVERSED as the latest word.
        case reversed
    }

    public struct Money: Sendable, Equatable, Codable {
        public var milliunits: Int64
        public var currency: String?
        public init(milliunits: Int64, currency: String?) {
            self.milliunits = milliunits
            self.currency = currency
        }
    }

    /// One asking of a WeChat refund inquiry.
    public struct Inquiry: Sendable, Equatable, Codable {
        public var position: Int64
        public var recordedAt: EpochMillis
        /// `refund_time` (ms).
        public var askedAt: EpochMillis?
        /// `order_time` (ms).
        public var orderTime: EpochMillis?
        public var provideStatus: Int64?
        public var reason: String?
        public var channelBill: String?
        public var productId: String?
        public var streamId: String
        /// The answer that replied to this asking: the one it triggered, or (a repeated asking) the
        /// stored answer repeated word for word.
        public var answerPosition: Int64?
        /// True when this asking was answered by repeating an answer recorded before it.
        public var repeatedAnswer: Bool
    }

    /// One answer the ledger gave (a `ledger_wechat_refund_inquiry_answer` event).
    public struct Answer: Sendable, Equatable, Codable {
        public var position: Int64
        public var recordedAt: EpochMillis
        public var resultCode: Int64?
        public var decision: Decision?
        public var rule: String?
        public var resultInfo: String?
        /// The evidence sent to WeChat (compact JSON text), verbatim.
        public var evidence: String?
        /// The asking that triggered it.
        public var inquiryPosition: Int64?
        /// How long the ledger took to answer: `decidedInMs` when recorded, else recordedAt of the
        /// answer − recordedAt of the asking that triggered it.
        public var latencyMs: Int64?
        /// Measured in process from the asking's arrival to the reply being ready (answers
        /// recorded since the refund deadline; nil before).
        public var decidedInMs: Int64?
        /// recordedAt of the answer − the asking's own `refund_time` (includes WeChat's delivery
        /// delay and clock skew; second resolution).
        public var latencyFromAskedMs: Int64?
    }

    /// One `xpay_refund_notify`.
    public struct WeChatRefundOutcome: Sendable, Equatable, Codable {
        public var position: Int64
        public var recordedAt: EpochMillis
        public var succeeded: Bool
        public var retCode: Int64?
        public var retMsg: String?
        public var wxRefundId: String?
        public var mchRefundId: String?
        public var wxOrderId: String?
        public var mchOrderId: String?
        public var refundFee: Money?
        public var startedAt: EpochMillis?
        public var succeededAt: EpochMillis?
    }

    /// One Apple notification of the case.
    public struct AppleNotificationEntry: Sendable, Equatable, Codable {
        public var position: Int64
        public var recordedAt: EpochMillis
        public var notificationType: String
        public var subtype: String?
        public var signedDate: EpochMillis?
        public var consumptionRequestReason: String?
        public var revocationDate: EpochMillis?
        public var revocationReason: Int?
        public var revocationType: String?
        public var revocationPercentage: Int?
        /// Who stated it: `apple.v2` (a notification) or `apple.api` (Apple's answer to the
        /// ledger's own request during reconciliation, message `API/…`).
        public var origin: String = FactOrigin.appleV2.rawValue
    }

    /// The ledger's answer to one CONSUMPTION_REQUEST of the case (`consumption/*` events): what it
    /// sent Apple and Apple's answer, or why it sent nothing.
    public struct ConsumptionAnswerEntry: Sendable, Equatable, Codable {
        public var position: Int64
        public var recordedAt: EpochMillis
        /// `sent`, `refused` or `not_sent`.
        public var outcome: String
        /// Why nothing was sent (`no_consent`, `no_customer`, `no_credentials`, `window_expired`, `unknown_transaction`, `family_shared`).
        public var reason: String?
        public var message: String?
        /// The position of the CONSUMPTION_REQUEST it answers.
        public var requestPosition: Int64?
        /// The ConsumptionRequest body as sent (canonical JSON text).
        public var request: String?
        /// Apple's answer (`{"httpStatus", "errorCode"?, "errorMessage"?}`, canonical JSON text).
        public var answer: String?
        public var attempts: Int64?
    }

    /// "wechat:<pay_order_id>" or "apple:<transactionId>"; safe in a URL path segment only after
    /// percent-encoding (order ids are opaque text).
    public var caseId: String
    public var source: Source
    /// pay_order_id (WeChat) or transactionId (Apple).
    public var orderId: String
    public var originalTransactionId: String?
    public var openId: String?
    /// openid (WeChat) or appAccountToken (Apple).
    public var customerId: String?
    public var productId: String?
    /// The earliest business time of the case's own messages (asking, notification, refund).
    public var openedAt: EpochMillis
    /// The latest recordedAt of any message of the case.
    public var lastRecordedAt: EpochMillis
    /// The first answer's decision; nil when the ledger did not decide (Apple, or unanswered).
    public var decision: Decision?
    public var decisionRule: String?
    public var outcome: Outcome
    /// When the outcome happened (refund success time; Apple: the deciding notification's revocationDate or signedDate).
    public var outcomeAt: EpochMillis?
    /// Why the customer asked (`refund_request_reason`, or Apple's consumptionRequestReason).
    public var reason: String?
    /// What the order cost (WeChat delivery ActualPrice; Apple transaction price).
    public var orderAmount: Money?
    /// What was refunded (WeChat RefundFee of the success; Apple price × revocationPercentage).
    public var refundedAmount: Money?
    /// Apple's revocation fields from the latest REFUND (nil otherwise).
    public var revocationDate: EpochMillis?
    public var revocationReason: Int?
    public var revocationType: String?
    public var revocationPercentage: Int?
    /// The position of the delivery of the order (WeChat), when known.
    public var deliveryPosition: Int64?
    public var inquiries: [Inquiry]
    public var answers: [Answer]
    public var refundOutcomes: [WeChatRefundOutcome]
    public var appleNotifications: [AppleNotificationEntry]
    /// Positions of every event of the case (inquiries, answers, outcomes, Apple notifications,
    /// the delivery, link events), ascending.
    public var links: [Int64]
    /// Apple cases: the ledger's answers to the consumption requests, in recording order.
    public var consumptionAnswers: [ConsumptionAnswerEntry] = []
}

/// The filters of `GET /v1/refunds`. Nil members do not filter.
public struct RefundCaseFilter: Sendable, Equatable {
    /// `openedAt` ≥ from.
    public var from: EpochMillis?
    /// `openedAt` < until.
    public var until: EpochMillis?
    public var originalTransactionId: String?
    public var openId: String?
    /// A decision, or `.some(nil)` for "no decision" (query value `none`).
    public var decision: RefundCase.Decision??
    public var outcome: RefundCase.Outcome?
    public var source: RefundCase.Source?

    public init(from: EpochMillis? = nil, until: EpochMillis? = nil, originalTransactionId: String? = nil,
                openId: String? = nil, decision: RefundCase.Decision?? = nil, outcome: RefundCase.Outcome? = nil,
                source: RefundCase.Source? = nil) {
        self.from = from
        self.until = until
        self.originalTransactionId = originalTransactionId
        self.openId = openId
        self.decision = decision
        self.outcome = outcome
        self.source = source
    }

    /// Reads query values as the API takes them (`decision=allow|refuse|none`,
    /// `outcome=pending|refunded|refund_failed|declined|reversed`, `source=wechat|apple`, times in ms).
    /// Throws with the accepted values when one is not understood.
    public init(query: [String: String]) throws(RefundCaseFilterError) {
        func time(_ key: String) throws(RefundCaseFilterError) -> EpochMillis? {
            guard let s = query[key] else { return nil }
            guard let v = EpochMillis(s) else { throw .invalid(parameter: key, value: s, accepted: "epoch milliseconds") }
            return v
        }
        self.init(from: try time("from"), until: try time("until"))
        originalTransactionId = query["originalTransactionId"].flatMap { $0.isEmpty ? nil : $0 }
        openId = query["openid"].flatMap { $0.isEmpty ? nil : $0 }
        if let d = query["decision"] {
            if d == "none" {
                decision = .some(nil)
            } else if let v = RefundCase.Decision(rawValue: d) {
                decision = .some(v)
            } else {
                throw .invalid(parameter: "decision", value: d, accepted: "allow, refuse, none")
            }
        }
        if let o = query["outcome"] {
            guard let v = RefundCase.Outcome(rawValue: o) else {
                throw .invalid(parameter: "outcome", value: o,
                               accepted: RefundCase.Outcome.allCases.map(\.rawValue).joined(separator: ", "))
            }
            outcome = v
        }
        if let s = query["source"] {
            guard let v = RefundCase.Source(rawValue: s) else {
                throw .invalid(parameter: "source", value: s, accepted: "wechat, apple")
            }
            source = v
        }
    }

    public func matches(_ c: RefundCase) -> Bool {
        if let from, c.openedAt < from { return false }
        if let until, c.openedAt >= until { return false }
        if let originalTransactionId, c.originalTransactionId != originalTransactionId { return false }
        if let openId, c.openId != openId { return false }
        if let decision, c.decision != decision { return false }
        if let outcome, c.outcome != outcome { return false }
        if let source, c.source != source { return false }
        return true
    }
}

public enum RefundCaseFilterError: Error, Equatable, CustomStringConvertible {
    case invalid(parameter: String, value: String, accepted: String)

    public var description: String {
        switch self {
        case .invalid(let p, let v, let a):
            // The value is echoed shortened: it is caller input, not a secret, but may be long.
            return "query parameter \(p)=\(v.prefix(64)) is not understood; use one of: \(a)"
        }
    }
}

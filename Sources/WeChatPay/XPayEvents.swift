import Crypto
import Foundation
import LedgerCore

/// An authentic push turned into what the ledger stores. Never refuses: a push that passed the
/// signature (and decryption) is evidence, so one the ledger cannot fully interpret is stored as
/// such (`unreadableReason`, stream `wechat:unreadable:<event>`) instead of being answered 400 and
/// lost after WeChat's retries.
///
/// Dedupe keys (stable across WeChat's re-pushes: they never include CreateTime, RetryTimes,
/// FromUserName, the nonce or the ciphertext):
/// - signing result: `signing:<SignedTime>`
/// - goods deliver: `deliver:<OutTradeNo>` (the xpay doc's own idempotency key)
/// - unsigning: `unsigning:<UnsignedTime>`
/// - refund inquiry: `refund-inquiry:<pay_order_id>:<refund_time>` (one event per asking)
/// - refund notify: `refund:<WxRefundId>:<RetCode>` (MchRefundId when WxRefundId is missing, else
///   the content hash), so a failure followed by a success is two facts and a re-push is one
/// - unreadable pushes: `sha256:<content hash>`; anything else: `msg:<MsgId>`, else `sha256:<content hash>`
/// The content hash is SHA-256 of the message as canonical JSON without CreateTime and RetryTimes.
///
/// Streams depend on the push alone, never on what the ledger already holds, so a re-push lands
/// where its first copy did and the log's `UNIQUE (stream_id, dedupe_key)` stores it once, even
/// when copies race:
/// - signing, unsigning, deliveries with AppleSubscriptionInfo: the OriginalTransactionId;
/// - an ordinary purchase (no AppleSubscriptionInfo): `wechat:order:<OutTradeNo>`;
/// - refund notifies: `wechat:order:<MchOrderId>` (else WxOrderId); inquiries:
///   `wechat:order:<pay_order_id>` — order streams, tied to their subscription by the ledger's
///   link events (`OrderLink`) as soon as any push names an id of the same order;
/// - other pushes: `wechat:other:<Event>` (other xpay events, debug_demo, customer-service messages:
///   the URL is shared by every push type and a refusal would only make WeChat retry).
public struct XPayNotification: Sendable {
    public let push: ReceivedPush
    public let message: XPayMessage
    public let dedupeKey: String
    public let stream: String
    /// Every order id the push names: a delivery's OutTradeNo and WeChatPayInfo ids, a refund's
    /// MchOrderId and WxOrderId, an inquiry's pay_order_id. What linking looks up.
    public let orderIds: [String]
    /// Why the ledger cannot interpret this authentic push (the fact decoder's reason); nil when it can.
    public let unreadableReason: String?

    public init(_ push: ReceivedPush) {
        self.push = push
        let message = XPayMessage(push.message)
        self.message = message
        let hash = Self.contentHash(push.message)
        var stream: String
        var key: String
        var ids: [String] = []
        switch message {
        case .signingResult(let s):
            stream = s.subscription.originalTransactionId ?? ""
            key = "signing:" + (s.subscription.signedTime.map(String.init) ?? "sha256:" + hash)
        case .goodsDelivery(let d):
            let order = d.outTradeNo ?? ""
            key = DedupeKey.wechatDelivery(order)
            stream = d.subscription == nil ? StreamId.wechatOrder(order).text : d.subscription?.originalTransactionId ?? ""
            ids = [d.outTradeNo, d.mchOrderNo, d.transactionId].compactMap { $0 }
        case .unsigning(let u):
            stream = u.subscription.originalTransactionId ?? ""
            key = "unsigning:" + (u.subscription.unsignedTime.map(String.init) ?? "sha256:" + hash)
        case .refundInquiry(let q):
            let order = q.payOrderId ?? ""
            stream = StreamId.wechatOrder(order).text
            key = "refund-inquiry:\(order):\(q.refundTime.map(String.init) ?? "")"
            ids = [order]
        case .refundOutcome(let r):
            let ret = r.retCode.map(String.init) ?? "none"
            if let id = r.wxRefundId, !id.isEmpty {
                key = "refund:\(id):\(ret)"
            } else if let id = r.mchRefundId, !id.isEmpty {
                key = "refund:mch:\(id):\(ret)"
            } else {
                key = "refund:sha256:" + hash
            }
            ids = [r.mchOrderId, r.wxOrderId].compactMap { $0 }
            stream = StreamId.wechatOrder(ids.first { !$0.isEmpty } ?? "").text
        case .other(let event, let msgType):
            key = push.message.text("MsgId").map { "msg:" + $0 } ?? "sha256:" + hash
            stream = StreamId.wechatOther(event: Self.bucket(event), msgType: Self.bucket(msgType)).text
        }
        ids = Array(Set(ids.filter { !$0.isEmpty })).sorted()
        // The fact decoder is the judge of what the ledger can interpret: the push as it would be
        // stored, decoded once here for the verdict (the store decodes it again at append).
        var reason = Self.unreadable(NewEvent(
            streamId: stream.isEmpty ? "-" : stream, dedupeKey: key, source: .wechat, type: push.event ?? push.msgType ?? "unknown",
            payload: push.payload, raw: Data()))
        // A stream must be an Apple id (digits) or one of the ledger's own; anything else could
        // file the push under another stream's name.
        if reason == nil { reason = Self.streamProblem(stream, message) }
        if reason == nil, let long = ids.first(where: { $0.utf8.count > 128 }) {
            reason = "an order id is \(long.utf8.count) bytes; WeChat ids are at most 128"
        }
        if let reason {
            unreadableReason = reason
            self.stream = StreamId.wechatUnreadable(event: Self.bucket(push.event ?? push.msgType)).text
            dedupeKey = "sha256:" + hash
            orderIds = []
        } else {
            unreadableReason = nil
            self.stream = stream
            dedupeKey = key
            orderIds = ids
        }
    }

    private static func streamProblem(_ stream: String, _ message: XPayMessage) -> String? {
        if stream.isEmpty { return "it names no stream" }
        if stream.utf8.count > 200 { return "its stream id is longer than 200 bytes" }
        switch StreamId(stream).kind {
        case .subscription(let otid):
            return OriginalTransactionId.isValid(otid) ? nil
                : "AppleSubscriptionInfo.OriginalTransactionId must be Apple's id (1 to 20 digits)"
        case .wechatOrder(let order):
            return order.isEmpty ? "it names no order" : nil
        case .wechatOther:
            if case .other = message { return nil }
            return "it is not an event this stream holds"
        default:
            return "its OriginalTransactionId is not Apple's id"
        }
    }

    /// An event name as a stream's last part: WeChat's names are short identifiers; anything else
    /// (a sender's invention, a corrupt value) shares one bucket rather than naming a stream.
    public static func bucket(_ name: String?) -> String? {
        guard let name else { return nil }
        let ok = !name.isEmpty && name.utf8.count <= 64 && name.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x2E || b == 0x2D
        }
        return ok ? name : "unrecognised"
    }

    /// The decoder's reason when it cannot read the push, nil when it can.
    private static func unreadable(_ event: NewEvent) -> String? {
        let facts = FactDecoder.facts(of: event)
        guard let u = facts.first(where: { $0.kind == .unreadable }) else { return nil }
        return u.details["reason"]?.text ?? "the ledger could not interpret it"
    }

    public var isReadable: Bool { unreadableReason == nil }

    /// Dedupe-key prefix of a conflicting re-push kept as evidence (`conflictEvidence`).
    public static let conflictKeyPrefix = "conflict:"

    /// A re-push stored under a key already holding a message with other content (the key is
    /// WeChat's own id, e.g. `deliver:<OutTradeNo>`, so WeChat sent two different messages for one
    /// thing): the event that keeps this copy as evidence — in `wechat:unreadable:<event>`, key
    /// `conflict:<key>:sha256:<content hash>`, so each different copy is kept once and folds
    /// nothing (the first copy stays in force: the log is append-only). Nil when `storedPayload`
    /// is the same message (an ordinary re-push; CreateTime and RetryTimes aside, in any format).
    public func conflictEvidence(storedPayload: Data) -> NewEvent? {
        guard isReadable, let stored = try? JSONValue(json: storedPayload) else { return nil }
        let hash = Self.contentHash(push.message)
        guard Self.contentHash(stored) != hash else { return nil }
        return NewEvent(streamId: StreamId.wechatUnreadable(event: Self.bucket(push.event ?? push.msgType)).text,
                        dedupeKey: Self.conflictKeyPrefix + dedupeKey + ":sha256:" + hash, source: .wechat,
                        type: push.event ?? push.msgType ?? "unknown", payload: push.payload, raw: push.raw)
    }

    /// The subscription stream this push states itself (signing, delivery, unsigning), if any.
    public var subscriptionStream: String? {
        guard isReadable, StreamId(stream).isSubscription else { return nil }
        return stream
    }

    /// The event to append.
    public func event() -> NewEvent {
        NewEvent(streamId: stream, dedupeKey: dedupeKey, source: .wechat,
                 type: push.event ?? push.msgType ?? "unknown", environment: isReadable ? environment : nil,
                 signedAt: isReadable ? signedAt : nil, expiresAt: isReadable ? expiresAt : nil,
                 payload: push.payload, raw: push.raw)
    }

    /// Apple subscriptions have no sandbox on WeChat (wechat.md §3.1); deliveries carry Env, and a
    /// delivery stating Env 1 is kept apart in Sandbox so it never grants a Production entitlement.
    public var environment: String? {
        switch message {
        case .signingResult, .unsigning, .refundInquiry: return "Production"
        case .goodsDelivery(let d):
            switch d.env {
            case 0?: return "Production"
            case 1?: return "Sandbox"
            default: return d.subscription == nil ? nil : "Production"
            }
        case .refundOutcome, .other: return nil
        }
    }

    /// Business time, ms: what the push states about when it happened. CreateTime (the send time)
    /// only where nothing else is stated, for the envelope column; facts carry their own times.
    public var signedAt: EpochMillis? {
        let createMs = push.message.int64("CreateTime").flatMap(epochMillis(seconds:))
        switch message {
        // A contract change without its own time is placed at CreateTime, as its fact is.
        case .signingResult(let s): return s.subscription.signedTime ?? createMs
        case .unsigning(let u): return u.subscription.unsignedTime ?? createMs
        case .goodsDelivery(let d): return d.paidTime.flatMap(epochMillis(seconds:)) ?? createMs
        case .refundInquiry(let q): return q.refundTime.flatMap(epochMillis(seconds:))
        case .refundOutcome(let r): return (r.refundSuccTimestamp ?? r.refundStartTimestamp).flatMap(epochMillis(seconds:)) ?? createMs
        case .other: return createMs
        }
    }

    /// The period end (RenewalDate), ms.
    public var expiresAt: EpochMillis? {
        switch message {
        case .signingResult(let s): return s.subscription.renewalDate
        case .unsigning(let u): return u.subscription.renewalDate
        case .goodsDelivery(let d): return d.subscription?.renewalDate
        default: return nil
        }
    }

    /// The inquiry's `pay_order_id` and `refund_time` (s), for a readable refund inquiry.
    public var asking: (payOrderId: String, refundTime: Int64)? {
        guard isReadable, case .refundInquiry(let q) = message, let order = q.payOrderId, let t = q.refundTime else { return nil }
        return (order, t)
    }

    /// Format-independent: XML carries every value as text, so values are hashed as their text
    /// (a JSON 3000 and an XML `<X>3000</X>` are the same message).
    static func contentHash(_ message: JSONValue) -> String {
        func text(_ v: JSONValue) -> JSONValue {
            switch v {
            case .object(let o): return .object(o.mapValues(text))
            case .array(let a): return .array(a.map(text))
            case .integer(let i): return .string(String(i))
            case .number(let d): return .string(String(d))
            case .bool(let b): return .string(b ? "true" : "false")
            case .null: return .string("")
            case .string: return v
            }
        }
        return Hex.encode(Digest.sha256(text(message.removing(["CreateTime", "RetryTimes"])).canonicalJSON()))
    }
}

/// WeChat's times are Unix seconds. A corrupt or hostile value (the fuzzer found 6479066520700676582)
/// times 1000 overflows Int64 and would trap the service: such a time is unknown (nil), not a crash.
func epochMillis(seconds: Int64) -> EpochMillis? {
    let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
    return overflow ? nil : ms
}

/// The ledger's link from an order stream (`wechat:order:<id>`) to the subscription the order
/// belongs to: a new event in the subscription stream (the order stream's events are never
/// rewritten). Dedupe key `link:<order stream>`, so linking twice is one event. `linkedVia` is the
/// id of the subscription's order the stream's id was matched to (through the order's aliases),
/// so the fold joins the stream's facts even when they name an id no other fact of the
/// subscription states.
public enum OrderLink {
    public static func event(orderId: String, provisionalStream: String, subscription: SubscriptionKey,
                             linkedVia: String? = nil, at: EpochMillis? = nil, evidence: String? = nil) -> NewEvent {
        var o: [String: JSONValue] = [
            "order_id": .string(orderId),
            "provisional_stream": .string(provisionalStream),
            "subscription_stream": .string(subscription.originalTransactionId),
            "environment": .string(subscription.environment),
        ]
        if let linkedVia, linkedVia != orderId { o["linked_via"] = .string(linkedVia) }
        if let evidence { o["evidence"] = .string(evidence) }
        let payload = JSONValue.object(o).canonicalJSON()
        return NewEvent(streamId: subscription.originalTransactionId, dedupeKey: DedupeKey.orderLink(StreamId(provisionalStream)),
                        source: .ledger, type: XPayEventName.orderLinked, environment: subscription.environment,
                        signedAt: at, payload: payload, raw: payload)
    }
}

/// WeChat's answers to the ledger's server API calls, recorded as `source = wechat` events (what
/// WeChat said, unsigned, at the time the ledger asked): `raw` holds the answer's exact bytes,
/// `payload` the question and the answer as JSON (`WeChatFacts` reads it).
public enum WeChatAPIAnswer {
    /// `query_subscribe_contract`: in the subscription's stream (the answer's
    /// original_transaction_id). Nil when the answer names no Apple subscription (UNBINDUSER):
    /// there is nothing to fold, and the reconciliation reports it instead.
    public static func contract(openId: String, productId: String, askedAt: EpochMillis, answer: SubscribeContract,
                                responseBody: Data) -> NewEvent? {
        guard let otid = answer.appleSubscriptionInfo?.originalTransactionId, OriginalTransactionId.isValid(otid) else { return nil }
        let payload = JSONValue.object([
            "api": "query_subscribe_contract", "asked_at": .integer(askedAt), "openid": .string(openId),
            "product_id": .string(productId), "answer": (try? JSONValue(json: responseBody)) ?? .null,
        ]).canonicalJSON()
        return NewEvent(streamId: otid, dedupeKey: DedupeKey.wechatAPIAnswer("query_subscribe_contract", subject: "\(openId):\(productId)", askedAt: askedAt),
                        source: .wechat, type: XPayEventName.contractQueryAnswer, environment: SubscriptionKey.production,
                        signedAt: askedAt, payload: payload, raw: responseBody)
    }

    /// `query_order`: in the order stream it was asked for (typically an orphan whose id only
    /// WeChat can tie to its OutTradeNo); its facts state every id of the order.
    public static func order(openId: String, asked: XPayOrderReference, askedAt: EpochMillis, responseBody: Data,
                             stream: String) -> NewEvent {
        let payload = JSONValue.object([
            "api": "query_order", "asked_at": .integer(askedAt), "openid": .string(openId),
            "asked": .object([asked.parameter: .string(asked.id)]),
            "answer": (try? JSONValue(json: responseBody)) ?? .null,
        ]).canonicalJSON()
        return NewEvent(streamId: stream, dedupeKey: DedupeKey.wechatAPIAnswer("query_order", subject: asked.id, askedAt: askedAt),
                        source: .wechat, type: XPayEventName.orderQueryAnswer, signedAt: askedAt, payload: payload, raw: responseBody)
    }
}

import Crypto
import Foundation
import LedgerCore

/// Streams for WeChat pushes that belong to no subscription.
/// Where an event goes.
public enum StreamTarget: Sendable, Equatable {
    /// A known stream: the subscription's OriginalTransactionId, or a fixed WeChat stream.
    case known(String)
    /// The event names orders only: the service looks the ids up (a delivery with that OutTradeNo,
    /// or the same order under one of WeChat's ids) and falls back to `provisional`, which a later
    /// `OrderLink` event ties to the subscription.
    case byOrder(orderIds: [String], provisional: String)
}

/// An xpay push turned into what the ledger stores.
///
/// Dedupe keys (stable across WeChat's re-pushes: they never include CreateTime, RetryTimes,
/// FromUserName, the nonce or the ciphertext):
/// - signing result: `signing:<SignedTime>`, else `signing:sha256:<content hash>`
/// - goods deliver: `deliver:<OutTradeNo>` (required; the xpay doc's own idempotency key)
/// - unsigning: `unsigning:<UnsignedTime>`, else `unsigning:sha256:<content hash>`
/// - refund inquiry: `refund-inquiry:<pay_order_id>:<refund_time>` (one event per asking)
/// - refund notify: `refund:<WxRefundId>:<RetCode>` (MchRefundId when WxRefundId is missing, else
///   the content hash), so a failure followed by a success is two facts and a re-push is one
/// - anything else: `msg:<MsgId>` when present, else `sha256:<content hash>`
/// The content hash is SHA-256 of the message as canonical JSON without CreateTime and RetryTimes.
///
/// Streams: the AppleSubscriptionInfo.OriginalTransactionId; a delivery without it (an ordinary
/// purchase) goes to `StreamId.wechatOrder(OutTradeNo)`; refund inquiries and
/// refund notifies are `StreamTarget.byOrder`; others go to `StreamId.wechatOther` (authentic pushes the ledger does not model — other xpay
/// events, debug_demo, customer-service messages — stored verbatim rather than refused: the URL
/// is shared by every push type and a refusal would only make WeChat retry).
public struct XPayNotification: Sendable {
    public let push: ReceivedPush
    public let message: XPayMessage
    public let dedupeKey: String
    public let stream: StreamTarget
    /// Order ids this push carries, for the service's order → stream index (deliveries) or lookup.
    public let orderIds: [String]

    public init(_ push: ReceivedPush) throws(WeChatPushError) {
        self.push = push
        let message = XPayMessage(push.message)
        self.message = message
        let hash = Self.contentHash(push.message)
        switch message {
        case .signingResult(let s):
            let otid = try Self.required(s.subscription.originalTransactionId, XPayEventName.signingResult,
                                         "AppleSubscriptionInfo.OriginalTransactionId")
            dedupeKey = "signing:" + (s.subscription.signedTime.map(String.init) ?? "sha256:" + hash)
            stream = .known(otid)
            orderIds = []
        case .goodsDelivery(let d):
            let order = try Self.required(d.outTradeNo, XPayEventName.goodsDeliver, "OutTradeNo")
            dedupeKey = DedupeKey.wechatDelivery(order)
            if let sub = d.subscription {
                stream = .known(try Self.required(sub.originalTransactionId, XPayEventName.goodsDeliver,
                                                  "AppleSubscriptionInfo.OriginalTransactionId"))
            } else {
                stream = .known(StreamId.wechatOrder(order).text)
            }
            orderIds = [order, d.mchOrderNo, d.transactionId].compactMap { $0 }
        case .unsigning(let u):
            let otid = try Self.required(u.subscription.originalTransactionId, XPayEventName.unsigning,
                                         "AppleSubscriptionInfo.OriginalTransactionId")
            dedupeKey = "unsigning:" + (u.subscription.unsignedTime.map(String.init) ?? "sha256:" + hash)
            stream = .known(otid)
            orderIds = []
        case .refundInquiry(let q):
            let order = try Self.required(q.payOrderId, XPayEventName.refundInquiry, "pay_order_id")
            let asked = try Self.required(q.refundTime.map(String.init), XPayEventName.refundInquiry, "refund_time")
            dedupeKey = "refund-inquiry:\(order):\(asked)"
            orderIds = [order, q.channelBill].compactMap { $0 }
            stream = .byOrder(orderIds: orderIds, provisional: StreamId.wechatOrder(order).text)
        case .refundOutcome(let r):
            let ret = r.retCode.map(String.init) ?? "none"
            if let id = r.wxRefundId {
                dedupeKey = "refund:\(id):\(ret)"
            } else if let id = r.mchRefundId {
                dedupeKey = "refund:mch:\(id):\(ret)"
            } else {
                dedupeKey = "refund:sha256:" + hash
            }
            orderIds = [r.mchOrderId, r.wxOrderId].compactMap { $0 }
            guard let first = orderIds.first else {
                throw .missingField(event: XPayEventName.refundNotify, field: "MchOrderId or WxOrderId")
            }
            stream = .byOrder(orderIds: orderIds, provisional: StreamId.wechatOrder(first).text)
        case .other(let event, let msgType):
            dedupeKey = push.message.text("MsgId").map { "msg:" + $0 } ?? "sha256:" + hash
            stream = .known(StreamId.wechatOther(event: event, msgType: msgType).text)
            orderIds = []
        }
        if let long = orderIds.first(where: { $0.utf8.count > 128 }) {
            throw .invalidField(event: push.event ?? "push", field: "order id", reason: "\(long.utf8.count) bytes, more than 128")
        }
        if case .known(let s) = stream, s.utf8.count > 200 {
            throw .invalidField(event: push.event ?? "push", field: "stream id", reason: "longer than 200 bytes")
        }
    }

    /// The event to append. `resolvedStream` is the service's answer for `StreamTarget.byOrder`
    /// (nil = not known yet: the provisional stream); it is ignored for `.known`.
    public func event(resolvedStream: String? = nil) -> NewEvent {
        let streamId: String
        switch stream {
        case .known(let s): streamId = s
        case .byOrder(_, let provisional): streamId = resolvedStream ?? provisional
        }
        return NewEvent(streamId: streamId, dedupeKey: dedupeKey, source: .wechat,
                        type: push.event ?? push.msgType ?? "unknown", environment: environment,
                        signedAt: signedAt, expiresAt: expiresAt, payload: push.payload, raw: push.raw)
    }

    /// Apple subscriptions have no sandbox on WeChat; deliveries carry Env.
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

    /// Business time, ms.
    public var signedAt: EpochMillis? {
        let createMs = push.message.int64("CreateTime").flatMap(epochMillis(seconds:))
        switch message {
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

    private static func required(_ v: String?, _ event: String, _ field: String) throws(WeChatPushError) -> String {
        guard let v, !v.isEmpty else { throw .missingField(event: event, field: field) }
        guard v.utf8.count <= 128 else { throw .invalidField(event: event, field: field, reason: "longer than 128 bytes") }
        return v
    }

    static func contentHash(_ message: JSONValue) -> String {
        Hex.encode(Digest.sha256(message.removing(["CreateTime", "RetryTimes"]).canonicalJSON()))
    }
}

/// WeChat's times are Unix seconds. A corrupt or hostile value (the fuzzer found 6479066520700676582)
/// times 1000 overflows Int64 and would trap the service: such a time is unknown (nil), not a crash.
func epochMillis(seconds: Int64) -> EpochMillis? {
    let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
    return overflow ? nil : ms
}

/// The ledger's link from a provisional order stream to the subscription it belongs to: a new
/// event in the subscription stream (the provisional events are never rewritten). Dedupe key
/// `link:<provisional stream>`, so linking twice is one event.
public enum OrderLink {
    public static func event(orderId: String, provisionalStream: String, subscriptionStream: String,
                             at: EpochMillis? = nil, evidence: String? = nil) -> NewEvent {
        var o: [String: JSONValue] = [
            "order_id": .string(orderId),
            "provisional_stream": .string(provisionalStream),
            "subscription_stream": .string(subscriptionStream),
        ]
        if let evidence { o["evidence"] = .string(evidence) }
        let payload = JSONValue.object(o).canonicalJSON()
        return NewEvent(streamId: subscriptionStream, dedupeKey: DedupeKey.orderLink(StreamId(provisionalStream)), source: .ledger,
                        type: XPayEventName.orderLinked, signedAt: at, payload: payload, raw: payload)
    }
}

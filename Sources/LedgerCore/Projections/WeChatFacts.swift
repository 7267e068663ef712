import Foundation

// WeChat xpay Apple-subscription events as `SubscriptionFact`s.
//
// The payload is what `XPayNotification.event()` stores: the decrypted push as a JSON object (XML
// pushes converted, every value a string). Each event becomes at most one fact:
//
// | event | source | transaction | renewal | signedDate (business time) |
// |---|---|---|---|---|
// | `xpay_apple_subscribe_signing_result_notify` | `.wechatContractSigned` | none | ProductId, AutoRenewStatus, RenewalDate | `SignedTime` (ms), else CreateTime |
// | `xpay_goods_deliver_notify` with AppleSubscriptionInfo | `.wechatPeriodDelivered` | id = OutTradeNo, productId = GoodsInfo.ProductId, purchaseDate = signedDate, expiresDate = RenewalDate, price = ActualPrice × 10 (milli-CNY), currency CNY | GoodsInfo.ProductId, AutoRenewStatus, RenewalDate | `WeChatPayInfo.PaidTime` (s), else CreateTime |
// | `xpay_apple_subscribe_unsigning_result_notify` | `.wechatContractTerminated` | none | ProductId, AutoRenewStatus (0), RenewalDate (end of the current period) | `UnsignedTime` (ms), else CreateTime |
// | `xpay_refund_notify` | `.wechatRefundOutcome` | id = MchOrderId (else WxOrderId), webOrderLineItemId = WxOrderId, revocationDate = RefundSuccTimestamp when RetCode = 0, price = RefundFee × 10, currency CNY | none | RefundSuccTimestamp, else RefundStartTimestamp, else CreateTime (s) |
//
// CreateTime is only the push's send time (re-pushes may differ), so it is the last resort; the
// event's `signed_at` column comes after it. Times of 0 or out of range count as absent.
// Customer = `OpenId` (never FromUserName, a fixed WeChat account). The subscription is
// AppleSubscriptionInfo.OriginalTransactionId, else the event's stream. A refund notify names only
// orders: its subscription is its stream, which is a provisional `wechat:order:` stream when the
// delivery was not known yet; `WeChatOrderLinks` moves such facts to the subscription a later
// link event names. Deliveries without AppleSubscriptionInfo (ordinary purchases), refund
// inquiries, the ledger's answers and links are not subscription facts.

extension FactSource {
    /// True for the four WeChat kinds, which `SubscriptionFold` folds with `WeChatSubscriptionFold`.
    public var isWeChat: Bool { self != .appleNotification }
}

extension SubscriptionFact {
    /// CNY amounts arrive in fen; facts hold milliunits like Apple's `price` (1 fen = 10 milli-CNY).
    static let milliPerFen: Int64 = 10

    /// The fact of a stored WeChat event; nil when the event is about no subscription.
    public static func decodeWeChat(
        _ event: RecordedEvent, decoder: JSONDecoder = JSONDecoder()
    ) throws(SubscriptionFactError) -> SubscriptionFact? {
        guard event.event.source == .wechat else { return nil }
        let value: PushValue
        do {
            value = try decoder.decode(PushValue.self, from: event.event.payload)
        } catch {
            throw .undecodablePayload(position: event.position, reason: String(describing: error))
        }
        guard value.objectValue != nil else {
            throw .undecodablePayload(position: event.position, reason: "a WeChat payload must be a JSON object")
        }
        return try SubscriptionFact(wechat: value, position: event.position, recordedAt: event.recordedAt,
                                    streamId: event.event.streamId, environment: event.event.environment,
                                    fallbackSignedDate: event.event.signedAt)
    }

    /// Builds the fact of a decoded WeChat push (see the table above). Nil for pushes that change
    /// no subscription.
    public init?(
        wechat message: PushValue, position: Int64, recordedAt: EpochMillis, streamId: String,
        environment: String? = nil, fallbackSignedDate: EpochMillis? = nil
    ) throws(SubscriptionFactError) {
        let createMs = WeChatTime.seconds(message.int64("CreateTime"))
        func signed(_ candidates: EpochMillis?...) throws(SubscriptionFactError) -> EpochMillis {
            for c in candidates { if let c { return c } }
            throw .missingSignedDate(position: position)
        }
        func subscription(_ info: XPayAppleSubscription) -> String {
            info.originalTransactionId ?? streamId
        }
        switch XPayMessage(message) {
        case .signingResult(let s):
            let info = s.subscription
            let date = try signed(WeChatTime.millis(info.signedTime), createMs, fallbackSignedDate)
            self.init(
                position: position, recordedAt: recordedAt, source: .wechatContractSigned,
                originalTransactionId: subscription(info), notificationType: XPayEventName.signingResult,
                signedDate: date, environment: environment ?? "Production", openId: s.openId,
                renewal: RenewalFact(productId: info.productId, autoRenewProductId: info.productId,
                                     autoRenewStatus: info.autoRenewStatus.map(Self.clampedInt),
                                     renewalDate: WeChatTime.millis(info.renewalDate), signedDate: date))
        case .goodsDelivery(let d):
            guard let info = d.subscription, let order = d.outTradeNo else { return nil }
            let date = try signed(WeChatTime.seconds(d.paidTime), createMs, fallbackSignedDate)
            let renewalDate = WeChatTime.millis(info.renewalDate)
            let env = environment ?? (d.env == 1 ? "Sandbox" : "Production")
            let productId = d.productId ?? info.productId
            self.init(
                position: position, recordedAt: recordedAt, source: .wechatPeriodDelivered,
                originalTransactionId: subscription(info), notificationType: XPayEventName.goodsDeliver,
                signedDate: date, environment: env, openId: d.openId,
                transaction: TransactionFact(
                    transactionId: order, originalTransactionId: subscription(info), productId: productId,
                    purchaseDate: date, expiresDate: renewalDate, signedDate: date,
                    price: d.actualPrice.flatMap(Self.milli), currency: d.actualPrice == nil ? nil : "CNY",
                    environment: env, type: "Auto-Renewable Subscription", inAppOwnershipType: "PURCHASED"),
                renewal: RenewalFact(productId: productId, autoRenewProductId: productId,
                                     autoRenewStatus: info.autoRenewStatus.map(Self.clampedInt),
                                     renewalDate: renewalDate, signedDate: date))
        case .unsigning(let u):
            let info = u.subscription
            let date = try signed(WeChatTime.millis(info.unsignedTime), createMs, fallbackSignedDate)
            self.init(
                position: position, recordedAt: recordedAt, source: .wechatContractTerminated,
                originalTransactionId: subscription(info), notificationType: XPayEventName.unsigning,
                signedDate: date, environment: environment ?? "Production", openId: u.openId,
                renewal: RenewalFact(productId: info.productId, autoRenewProductId: info.productId,
                                     // The push says 0; a missing value still means turned off.
                                     autoRenewStatus: info.autoRenewStatus.map(Self.clampedInt) ?? 0,
                                     renewalDate: WeChatTime.millis(info.renewalDate), signedDate: date))
        case .refundOutcome(let r):
            guard let order = r.mchOrderId ?? r.wxOrderId else { return nil }
            let succeeded = WeChatTime.seconds(r.refundSuccTimestamp)
            let started = WeChatTime.seconds(r.refundStartTimestamp)
            let date = try signed(r.succeeded ? succeeded : nil, started, createMs, fallbackSignedDate)
            self.init(
                position: position, recordedAt: recordedAt, source: .wechatRefundOutcome,
                originalTransactionId: streamId, notificationType: XPayEventName.refundNotify,
                signedDate: date, environment: environment, openId: r.openId,
                transaction: TransactionFact(
                    transactionId: order, webOrderLineItemId: r.mchOrderId == nil ? nil : r.wxOrderId,
                    signedDate: date, revocationDate: r.succeeded ? (succeeded ?? date) : nil,
                    revocationType: r.succeeded ? "REFUND" : nil,
                    price: r.refundFee.flatMap(Self.milli), currency: r.refundFee == nil ? nil : "CNY"))
        case .refundInquiry, .other:
            return nil
        }
    }

    /// The order ids a WeChat refund-outcome fact names (MchOrderId, WxOrderId).
    var refundOrderIds: [String] {
        guard source == .wechatRefundOutcome, let tx = transaction else { return [] }
        return [tx.transactionId] + (tx.webOrderLineItemId.map { [$0] } ?? [])
    }

    private static func milli(_ fen: Int64) -> Int64? {
        let (v, overflow) = fen.multipliedReportingOverflow(by: milliPerFen)
        return overflow ? nil : v
    }

    private static func clampedInt(_ v: Int64) -> Int { Int(clamping: v) }
}

/// WeChat push times: seconds everywhere except inside AppleSubscriptionInfo (milliseconds).
/// 0 (sent for "not yet", e.g. a failed refund's success time) and values that do not fit are absent.
enum WeChatTime {
    static func seconds(_ s: Int64?) -> EpochMillis? {
        guard let s, s > 0 else { return nil }
        let (v, overflow) = s.multipliedReportingOverflow(by: 1000)
        return overflow ? nil : v
    }

    static func millis(_ ms: Int64?) -> EpochMillis? {
        guard let ms, ms > 0 else { return nil }
        return ms
    }
}

/// The ledger's links from provisional order streams (`wechat:order:<id>`) to subscription streams,
/// read from its `ledger_wechat_order_linked` events. Events are never rewritten, so whoever folds
/// a subscription applies the links: a fact from a linked provisional stream belongs to the
/// subscription. Order-independent: a provisional stream linked twice (to different subscriptions,
/// which the service does not do) goes to the least stream id, whatever the order.
public struct WeChatOrderLinks: Sendable, Equatable {
    public private(set) var subscriptionByProvisional: [String: String] = [:]
    /// Positions of the link events, per provisional stream (evidence for refund cases).
    public private(set) var linkPositions: [String: [Int64]] = [:]

    public init() {}

    public init(events: some Sequence<RecordedEvent>) {
        for e in events { add(e) }
    }

    /// Reads one event; anything but a link event is ignored.
    public mutating func add(_ event: RecordedEvent) {
        guard event.event.source == .ledger, event.event.type == XPayEventName.orderLinked,
              let v = try? JSONDecoder().decode(PushValue.self, from: event.event.payload),
              let provisional = v.text("provisional_stream") else { return }
        let target = v.text("subscription_stream") ?? event.event.streamId
        if subscriptionByProvisional[provisional].map({ target < $0 }) ?? true {
            subscriptionByProvisional[provisional] = target
        }
        if !(linkPositions[provisional] ?? []).contains(event.position) {
            linkPositions[provisional, default: []].append(event.position)
            linkPositions[provisional]!.sort()
        }
    }

    /// The subscription stream an event of `streamId` belongs to (itself when not linked).
    public func subscriptionStream(of streamId: String) -> String {
        subscriptionByProvisional[streamId] ?? streamId
    }

    /// The provisional streams linked to a subscription, to load with it.
    public func provisionalStreams(linkedTo subscription: String) -> [String] {
        subscriptionByProvisional.filter { $0.value == subscription }.keys.sorted()
    }

    /// The fact, moved to its subscription when it came from a linked provisional stream.
    public func relinked(_ fact: SubscriptionFact) -> SubscriptionFact {
        guard let target = subscriptionByProvisional[fact.originalTransactionId] else { return fact }
        var moved = fact
        moved.originalTransactionId = target
        if var tx = moved.transaction, tx.originalTransactionId == fact.originalTransactionId {
            tx.originalTransactionId = target
            moved.transaction = tx
        }
        return moved
    }
}

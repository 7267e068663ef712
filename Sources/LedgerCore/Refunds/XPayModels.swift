import Foundation

// WeChat mini-program virtual payment (xpay) push messages for Apple subscriptions, decoded from a
// `JSONValue` so the projections can read stored payloads without the WeChatPay module.
// Field names and units follow the xpay iOS subscription document (seed 000): the Apple subscription
// times are milliseconds, every other push time (CreateTime, refund_time, …) is seconds. Fields are
// optional: the module that receives a push decides which ones it requires.

/// The event names this ledger understands.
public enum XPayEventName {
    public static let signingResult = "xpay_apple_subscribe_signing_result_notify"
    public static let goodsDeliver = "xpay_goods_deliver_notify"
    public static let unsigning = "xpay_apple_subscribe_unsigning_result_notify"
    public static let refundInquiry = "xpay_subscribe_ios_refund_query_notify"
    public static let refundNotify = "xpay_refund_notify"
    /// The ledger's own answer to a refund inquiry (source `ledger`).
    public static let refundInquiryAnswer = "ledger_wechat_refund_inquiry_answer"
    /// The ledger's link from a provisional order stream to a subscription stream (source `ledger`).
    public static let orderLinked = "ledger_wechat_order_linked"
    /// WeChat's answer to the ledger's `query_subscribe_contract` (mode=apple), asked by
    /// `ledger reconcile --wechat` (source `wechat`: what WeChat said, unsigned, at the time asked).
    public static let contractQueryAnswer = "xpay_api_query_subscribe_contract"
    /// WeChat's answer to the ledger's `query_order` (source `wechat`): the ids of one order.
    public static let orderQueryAnswer = "xpay_api_query_order"
}

/// `AppleSubscriptionInfo` as it appears in the signing, deliver and unsigning pushes.
public struct XPayAppleSubscription: Sendable, Equatable {
    public var originalTransactionId: String?
    public var productId: String?
    /// 1 = auto-renew on, 0 = off.
    public var autoRenewStatus: Int64?
    /// Next renewal (signing, deliver) or end of the current period (unsigning), ms.
    public var renewalDate: EpochMillis?
    public var signedTime: EpochMillis?
    public var unsignedTime: EpochMillis?

    public init(_ v: JSONValue) {
        originalTransactionId = v.text("OriginalTransactionId")
        productId = v.text("ProductId")
        autoRenewStatus = v.int64("AutoRenewStatus")
        renewalDate = v.int64("RenewalDate")
        signedTime = v.int64("SignedTime")
        unsignedTime = v.int64("UnsignedTime")
    }
}

/// `xpay_apple_subscribe_signing_result_notify`: the contract is signed (sent once per signing).
public struct XPaySigningResult: Sendable, Equatable {
    public var openId: String?
    public var attach: String?
    public var createTime: Int64?
    public var subscription: XPayAppleSubscription
}

/// `xpay_goods_deliver_notify`: one successful charge. Without `subscription` it is an ordinary
/// (non-subscription) purchase.
public struct XPayGoodsDelivery: Sendable, Equatable {
    public var openId: String?
    public var outTradeNo: String?
    /// 0 = production, 1 = sandbox.
    public var env: Int64?
    public var productId: String?
    public var quantity: Int64?
    /// Fen.
    public var origPrice: Int64?
    /// Fen.
    public var actualPrice: Int64?
    public var attach: String?
    public var mchOrderNo: String?
    public var transactionId: String?
    /// Seconds.
    public var paidTime: Int64?
    public var createTime: Int64?
    public var subscription: XPayAppleSubscription?
}

/// `xpay_apple_subscribe_unsigning_result_notify`: auto-renew turned off; entitled until
/// `subscription.renewalDate`.
public struct XPayUnsigning: Sendable, Equatable {
    public var openId: String?
    public var attach: String?
    public var action: String?
    public var createTime: Int64?
    public var subscription: XPayAppleSubscription
}

/// WeChat's `provide_status` in a refund inquiry.
public enum XPayProvideStatus: Int64, Sendable, Equatable, Codable {
    case notDelivered = 0
    case delivered = 1
    case delivering = 2
}

/// `xpay_subscribe_ios_refund_query_notify`: Apple asks (three times) whether to refund an order.
/// Every field arrives as a string; times are seconds.
public struct XPayRefundInquiry: Sendable, Equatable {
    public var refundTime: Int64?
    public var orderTime: Int64?
    public var channelBill: String?
    public var bundleId: String?
    public var productId: String?
    public var count: Int64?
    public var refundRequestReason: String?
    /// Raw value; `provideStatus` maps the documented ones.
    public var provideStatusRaw: Int64?
    public var payOrderId: String?
    public var serviceType: String?
    public var consumptionStatus: String?

    public var provideStatus: XPayProvideStatus? { provideStatusRaw.flatMap(XPayProvideStatus.init(rawValue:)) }
}

/// `xpay_refund_notify`: the outcome of a refund (for Apple orders: Apple's final approval).
public struct XPayRefundOutcome: Sendable, Equatable {
    public var openId: String?
    public var wxRefundId: String?
    public var mchRefundId: String?
    public var wxOrderId: String?
    public var mchOrderId: String?
    /// Fen.
    public var refundFee: Int64?
    /// 0 = refunded; anything else = failed.
    public var retCode: Int64?
    public var retMsg: String?
    public var refundStartTimestamp: Int64?
    public var refundSuccTimestamp: Int64?
    public var wxpayRefundTransactionId: String?
    public var createTime: Int64?

    public var succeeded: Bool { retCode == 0 }
}

/// One decoded push.
public enum XPayMessage: Sendable, Equatable {
    case signingResult(XPaySigningResult)
    case goodsDelivery(XPayGoodsDelivery)
    case unsigning(XPayUnsigning)
    case refundInquiry(XPayRefundInquiry)
    case refundOutcome(XPayRefundOutcome)
    /// Any other push on the shared URL (other xpay events, debug_demo, customer-service messages).
    case other(event: String?, msgType: String?)

    /// Decodes a message tree (the stored payload, or a freshly decrypted push).
    public init(_ v: JSONValue) {
        let createTime = v.int64("CreateTime")
        switch v.text("Event") {
        case XPayEventName.signingResult:
            self = .signingResult(XPaySigningResult(
                openId: v.text("OpenId"), attach: v.text("Attach"), createTime: createTime,
                subscription: XPayAppleSubscription(v["AppleSubscriptionInfo"] ?? .null)))
        case XPayEventName.goodsDeliver:
            let goods = v["GoodsInfo"] ?? .null
            let pay = v["WeChatPayInfo"] ?? .null
            self = .goodsDelivery(XPayGoodsDelivery(
                openId: v.text("OpenId"), outTradeNo: v.text("OutTradeNo"), env: v.int64("Env"),
                productId: goods.text("ProductId"), quantity: goods.int64("Quantity"),
                origPrice: goods.int64("OrigPrice"), actualPrice: goods.int64("ActualPrice"),
                attach: goods.text("Attach"), mchOrderNo: pay.text("MchOrderNo"),
                transactionId: pay.text("TransactionId"), paidTime: pay.int64("PaidTime"),
                createTime: createTime,
                subscription: v["AppleSubscriptionInfo"]?.objectValue.map { XPayAppleSubscription(.object($0)) }))
        case XPayEventName.unsigning:
            self = .unsigning(XPayUnsigning(
                openId: v.text("OpenId"), attach: v.text("Attach"), action: v.text("Action"),
                createTime: createTime, subscription: XPayAppleSubscription(v["AppleSubscriptionInfo"] ?? .null)))
        case XPayEventName.refundInquiry:
            self = .refundInquiry(XPayRefundInquiry(
                refundTime: v.int64("refund_time"), orderTime: v.int64("order_time"),
                channelBill: v.text("channel_bill"), bundleId: v.text("bundleid"),
                productId: v.text("product_id"), count: v.int64("p_count"),
                refundRequestReason: v.text("refund_request_reason"),
                provideStatusRaw: v.int64("provide_status"), payOrderId: v.text("pay_order_id"),
                serviceType: v.text("service_type"), consumptionStatus: v.text("consumption_status")))
        case XPayEventName.refundNotify:
            self = .refundOutcome(XPayRefundOutcome(
                openId: v.text("OpenId"), wxRefundId: v.text("WxRefundId"), mchRefundId: v.text("MchRefundId"),
                wxOrderId: v.text("WxOrderId"), mchOrderId: v.text("MchOrderId"), refundFee: v.int64("RefundFee"),
                retCode: v.int64("RetCode"), retMsg: v.text("RetMsg"),
                refundStartTimestamp: v.int64("RefundStartTimestamp"),
                refundSuccTimestamp: v.int64("RefundSuccTimestamp"),
                wxpayRefundTransactionId: v.text("WxpayRefundTransactionId"), createTime: createTime))
        case let other:
            self = .other(event: other, msgType: v.text("MsgType"))
        }
    }

    /// Decodes a stored payload (UTF-8 JSON object).
    public init(payload: Data) throws {
        self.init(try JSONDecoder().decode(JSONValue.self, from: payload))
    }
}

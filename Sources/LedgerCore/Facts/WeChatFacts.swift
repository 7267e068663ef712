import Foundation

/// Facts of a WeChat xpay push (the stored payload: the decrypted message as a JSON object; XML
/// pushes converted, values possibly strings).
///
/// | push | facts | signedAt / effectiveAt |
/// |---|---|---|
/// | signing result | `renewal` (ProductId, AutoRenewStatus, RenewalDate; a contract change) | SignedTime (ms) |
/// | deliver with AppleSubscriptionInfo | `transaction` (order OutTradeNo: GoodsInfo.ProductId, paid → RenewalDate, ActualPrice), `renewal` (the delivery's AutoRenewStatus), one `order_alias` per WeChatPayInfo.MchOrderNo / TransactionId | PaidTime (s), else CreateTime |
/// | unsigning | `renewal` (AutoRenewStatus 0 unless stated; a contract change) | UnsignedTime (ms) |
/// | refund notify, RetCode 0 | `revocation` of MchOrderId (else WxOrderId); `order_alias` MchOrderId ~ WxOrderId | RefundSuccTimestamp, else RefundStartTimestamp, else CreateTime (s) |
/// | refund notify, other RetCode | `refund_failed` (evidence) and the alias | as above |
/// | iOS refund inquiry | `refund_inquiry` (evidence: every field in `detail`) | refund_time (s) |
///
/// Subscription: (Env 1 → Sandbox, else Production; iOS has no WeChat sandbox) with
/// AppleSubscriptionInfo.OriginalTransactionId. Refunds and inquiries name only orders: their facts
/// have no subscription and join one through the order's ids (the subscription's deliveries and
/// aliases), whichever arrives first. Customer = `OpenId` (never FromUserName, a fixed WeChat
/// account). A contract change without its own time (SignedTime / UnsignedTime) cannot be ordered
/// against other contract changes and is kept as `unreadable`; CreateTime (the send time, new on
/// each re-push) orders nothing but the start of a delivered period that states no PaidTime.
enum WeChatFacts {
    /// CNY amounts arrive in fen; facts hold milliunits like Apple's `price` (1 fen = 10 milli-CNY).
    static let milliPerFen: Int64 = 10

    static func facts(of event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let value: JSONValue
        do { value = try JSONDecoder().decode(JSONValue.self, from: event.payload) } catch {
            throw FactDecodingError("the payload is not JSON: \(error)")
        }
        guard value.objectValue != nil else { throw FactDecodingError("a WeChat payload must be a JSON object") }
        let createMs = WeChatTime.seconds(value.int64("CreateTime"))
        let message = value.text("Event") ?? event.type
        switch XPayMessage(value) {
        case .signingResult(let s):
            let info = s.subscription
            let key = try subscription(info.originalTransactionId, env: nil)
            guard let signed = WeChatTime.millis(info.signedTime) else {
                throw FactDecodingError("the signing result has no SignedTime, so it cannot be ordered against other contract changes")
            }
            return [Fact(
                subscription: key, kind: .renewal, origin: .wechat, message: message, signedAt: signed,
                customerId: s.openId,
                renewal: RenewalFact(productId: info.productId, autoRenewProductId: info.productId,
                                     autoRenewStatus: info.autoRenewStatus.map(clamped) ?? 1,
                                     renewalDate: WeChatTime.millis(info.renewalDate), signedDate: signed))]
        case .unsigning(let u):
            let info = u.subscription
            let key = try subscription(info.originalTransactionId, env: nil)
            guard let signed = WeChatTime.millis(info.unsignedTime) else {
                throw FactDecodingError("the unsigning result has no UnsignedTime, so it cannot be ordered against other contract changes")
            }
            return [Fact(
                subscription: key, kind: .renewal, origin: .wechat, message: message, signedAt: signed,
                customerId: u.openId,
                renewal: RenewalFact(productId: info.productId, autoRenewProductId: info.productId,
                                     // The push says 0; a missing value still means turned off.
                                     autoRenewStatus: info.autoRenewStatus.map(clamped) ?? 0,
                                     renewalDate: WeChatTime.millis(info.renewalDate), signedDate: signed))]
        case .goodsDelivery(let d):
            guard let info = d.subscription else { return [] }
            guard let order = d.outTradeNo, !order.isEmpty else { throw FactDecodingError("the delivery has no OutTradeNo") }
            let key = try subscription(info.originalTransactionId, env: d.env)
            guard let paid = WeChatTime.seconds(d.paidTime) ?? createMs else {
                throw FactDecodingError("the delivery states neither WeChatPayInfo.PaidTime nor CreateTime")
            }
            let renewalDate = WeChatTime.millis(info.renewalDate)
            let productId = d.productId ?? info.productId
            var facts = [Fact(
                subscription: key, kind: .transaction, origin: .wechat, message: message, signedAt: paid,
                effectiveAt: paid, transactionId: order, customerId: d.openId,
                transaction: TransactionFact(
                    transactionId: order, originalTransactionId: key.originalTransactionId, productId: productId,
                    purchaseDate: paid, expiresDate: renewalDate, signedDate: paid,
                    price: d.actualPrice.flatMap(milli), currency: d.actualPrice == nil ? nil : "CNY",
                    environment: key.environment, type: "Auto-Renewable Subscription", inAppOwnershipType: "PURCHASED"))]
            facts.append(Fact(
                subscription: key, kind: .renewal, origin: .wechat, message: message, signedAt: paid,
                customerId: d.openId,
                renewal: RenewalFact(productId: productId, autoRenewProductId: productId,
                                     autoRenewStatus: info.autoRenewStatus.map(clamped),
                                     renewalDate: renewalDate, signedDate: paid)))
            for alias in Set([d.mchOrderNo, d.transactionId].compactMap { $0 }).sorted() where !alias.isEmpty && alias != order {
                facts.append(Fact(
                    subscription: key, kind: .orderAlias, origin: .wechat, message: message, signedAt: paid,
                    transactionId: order, orderAlias: alias))
            }
            return facts
        case .refundOutcome(let r):
            guard let order = r.mchOrderId ?? r.wxOrderId, !order.isEmpty else {
                throw FactDecodingError("the refund names neither MchOrderId nor WxOrderId")
            }
            let succeeded = WeChatTime.seconds(r.refundSuccTimestamp)
            let started = WeChatTime.seconds(r.refundStartTimestamp)
            guard let signed = (r.succeeded ? succeeded : nil) ?? started ?? succeeded ?? createMs else {
                throw FactDecodingError("the refund states no time (RefundSuccTimestamp, RefundStartTimestamp, CreateTime)")
            }
            let alias = r.mchOrderId == nil ? nil : r.wxOrderId
            let detail = Detail.json([
                "wx_refund_id": Detail.text(r.wxRefundId), "mch_refund_id": Detail.text(r.mchRefundId),
                "mch_order_id": Detail.text(r.mchOrderId), "wx_order_id": Detail.text(r.wxOrderId),
                "refund_fee": Detail.int(r.refundFee), "ret_code": Detail.int(r.retCode), "ret_msg": Detail.text(r.retMsg),
                "refund_start": Detail.int(started), "refund_succeeded": Detail.int(succeeded),
                "wxpay_refund_transaction_id": Detail.text(r.wxpayRefundTransactionId),
            ])
            var facts = [Fact(
                subscription: nil, kind: r.succeeded ? .revocation : .refundFailed, origin: .wechat, message: message,
                signedAt: signed, effectiveAt: signed, transactionId: order, orderAlias: alias, customerId: r.openId,
                transaction: TransactionFact(
                    transactionId: order, webOrderLineItemId: alias, signedDate: signed,
                    revocationDate: r.succeeded ? signed : nil, revocationType: r.succeeded ? "REFUND" : nil,
                    price: r.refundFee.flatMap(milli), currency: r.refundFee == nil ? nil : "CNY"),
                detail: detail)]
            if let alias, alias != order {
                facts.append(Fact(
                    subscription: nil, kind: .orderAlias, origin: .wechat, message: message, signedAt: signed,
                    transactionId: order, orderAlias: alias))
            }
            return facts
        case .refundInquiry(let q):
            guard let order = q.payOrderId, !order.isEmpty else { throw FactDecodingError("the refund inquiry has no pay_order_id") }
            guard let asked = WeChatTime.seconds(q.refundTime) else {
                throw FactDecodingError("the refund inquiry has no refund_time")
            }
            let detail = Detail.json([
                "pay_order_id": .string(order), "refund_time": Detail.int(asked),
                "order_time": Detail.int(WeChatTime.seconds(q.orderTime)), "channel_bill": Detail.text(q.channelBill),
                "bundle_id": Detail.text(q.bundleId), "product_id": Detail.text(q.productId), "count": Detail.int(q.count),
                "refund_request_reason": Detail.text(q.refundRequestReason), "provide_status": Detail.int(q.provideStatusRaw),
                "service_type": Detail.text(q.serviceType), "consumption_status": Detail.text(q.consumptionStatus),
            ])
            return [Fact(subscription: nil, kind: .refundInquiry, origin: .wechat, message: message, signedAt: asked,
                         transactionId: order, detail: detail)]
        case .other:
            return []
        }
    }

    static func subscription(_ otid: String?, env: Int64?) throws(FactDecodingError) -> SubscriptionKey {
        guard let otid, !otid.isEmpty else { throw FactDecodingError("AppleSubscriptionInfo.OriginalTransactionId is missing") }
        return SubscriptionKey(environment: env == 1 ? SubscriptionKey.sandbox : SubscriptionKey.production,
                               originalTransactionId: otid)
    }

    static func milli(_ fen: Int64) -> Int64? {
        let (v, overflow) = fen.multipliedReportingOverflow(by: milliPerFen)
        return overflow ? nil : v
    }

    static func clamped(_ v: Int64) -> Int { Int(clamping: v) }
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

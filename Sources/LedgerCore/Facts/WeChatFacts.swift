import Foundation

/// Facts of a WeChat event: an xpay push (the stored payload is the decrypted message as a JSON
/// object; XML pushes converted, values possibly strings) or WeChat's answer to one of the
/// ledger's server API calls (`ledger reconcile --wechat`).
///
/// | event | facts | signedAt / effectiveAt |
/// |---|---|---|
/// | signing result | `renewal` (ProductId, AutoRenewStatus, RenewalDate; a contract change) | SignedTime (ms), else CreateTime (s; `detail.time_basis`) |
/// | deliver with AppleSubscriptionInfo | `transaction` of the order OutTradeNo (GoodsInfo.ProductId, PaidTime → RenewalDate, ActualPrice; `detail`: CreateTime, Env, prices, WeChatPayInfo ids), `renewal` of the same order (its AutoRenewStatus), one `order_alias` per WeChatPayInfo.MchOrderNo / TransactionId | PaidTime (s); without it the fact's times hold CreateTime as a placeholder and `purchaseDate` is absent: the fold places the period after the one before it, never earlier than RenewalDate minus the product's longest period (see `SubscriptionFold`) |
/// | deliver without AppleSubscriptionInfo | `purchase` (an ordinary purchase: order, amount, customer, Env; no subscription) | PaidTime, else CreateTime (evidence only) |
/// | unsigning | `renewal` (AutoRenewStatus 0 unless stated; a contract change) | UnsignedTime (ms), else CreateTime (s; `detail.time_basis`) |
/// | refund notify, RetCode 0 | `revocation` of MchOrderId (else WxOrderId); `order_alias` MchOrderId ~ WxOrderId | RefundSuccTimestamp, else RefundStartTimestamp, else CreateTime (s): the latest time the refund can have happened |
/// | refund notify, other RetCode | `refund_failed` (evidence) and the alias | as above |
/// | iOS refund inquiry | `refund_inquiry` (evidence: every field in `detail`) | refund_time (s) |
/// | `xpay_api_query_subscribe_contract` (SIGNED / TERMINATED) | `renewal` (a contract change: auto-renew, renewal_date, recent_subscription_start_date; `detail.authorization_state`) | the time the ledger asked minus `contractAnswerLag` |
/// | `xpay_api_query_order` | one `order_alias` per id of the order (order_id ~ wx_order_id, channel_order_id, wxpay_order_id) | the time the ledger asked |
///
/// Subscription: (Env 1 → Sandbox, else Production) with AppleSubscriptionInfo.OriginalTransactionId.
/// Signings, unsignings and contract answers carry no Env and are Production: WeChat documents no
/// sandbox for Apple payments (wechat.md §3.1, ios.html), so a delivery stating Env 1 is kept apart
/// in Sandbox — it never grants a Production entitlement — while its signing stays in Production.
/// Refunds and inquiries name only orders: their facts have no subscription and join one through
/// the order's ids (the subscription's deliveries, aliases and the ledger's links), whichever
/// arrives first. Customer = `OpenId` (never FromUserName, a fixed WeChat account).
///
/// A contract change (signing, unsigning) without its own time (SignedTime / UnsignedTime) is
/// placed at the push's CreateTime, named in `detail.time_basis` (schema 7).
///
/// What the decoder refuses (one `unreadable` fact naming why; the push stays stored as evidence):
/// a contract change with neither its own time nor CreateTime, a subscription message without OriginalTransactionId, a delivery
/// without OutTradeNo, a refund naming no order, an inquiry without pay_order_id or refund_time, and
/// any id longer than `maxIdBytes`, and a time of the wrong magnitude (refund_time or PaidTime in
/// milliseconds, SignedTime / UnsignedTime / RenewalDate in seconds: `WeChatTime.magnitude`). CreateTime (the send time, new on each re-push) orders nothing.
enum WeChatFacts {
    /// CNY amounts arrive in fen; facts hold milliunits like Apple's `price` (1 fen = 10 milli-CNY).
    static let milliPerFen: Int64 = 10
    /// WeChat's ids are tens of bytes; the service refuses nothing longer at the door either.
    static let maxIdBytes = 128
    /// Apple's state behind `query_subscribe_contract` can trail Apple's notification by up to 10 s
    /// (seed 000 §6.1): an answer states the contract as of 10 s before it was asked.
    static let contractAnswerLag: EpochMillis = 10_000

    static func facts(of event: NewEvent) throws(FactDecodingError) -> [Fact] {
        if event.type == UnreadableEvidence.type, case .wechatUnreadable = StreamId(event.streamId).kind {
            throw FactDecodingError(UnreadableEvidence.reason(of: event))
        }
        let facts = try decode(event)
        // Ingestion stored it as unreadable (`wechat:unreadable:<event>`): whatever else could be
        // read from it, it is evidence only, and counted as such.
        if case .wechatUnreadable = StreamId(event.streamId).kind {
            if event.dedupeKey.hasPrefix("conflict:") {
                // `conflict:<key>:sha256:<hash>` (WeChatPay's `XPayNotification.conflictEvidence`).
                let key = event.dedupeKey.dropFirst("conflict:".count)
                let original = key.range(of: ":sha256:").map { key[..<$0.lowerBound] } ?? key
                throw FactDecodingError("a re-push whose content differs from the copy first stored under \(original); "
                                        + "the first copy is in force, this one is kept as evidence")
            }
            throw FactDecodingError("ingestion kept it as unreadable evidence (its stream or ids cannot be filed)")
        }
        return facts
    }

    static func decode(_ event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let value: JSONValue
        do { value = try JSONDecoder().decode(JSONValue.self, from: event.payload) } catch {
            throw FactDecodingError("the payload is not JSON: \(error)")
        }
        guard value.objectValue != nil else { throw FactDecodingError("a WeChat payload must be a JSON object") }
        switch event.type {
        case XPayEventName.contractQueryAnswer: return try contractAnswer(value, message: event.type)
        case XPayEventName.orderQueryAnswer: return try orderAnswer(value, message: event.type)
        default: break
        }
        let createMs = WeChatTime.seconds(value.int64("CreateTime"))
        let message = value.text("Event") ?? event.type
        switch XPayMessage(value) {
        case .signingResult(let s):
            let info = s.subscription
            let key = try subscription(info.originalTransactionId, env: nil)
            try WeChatTime.checkMillis(info.signedTime, "AppleSubscriptionInfo.SignedTime")
            try WeChatTime.checkMillis(info.renewalDate, "AppleSubscriptionInfo.RenewalDate")
            let (signed, basis) = try contractTime(info.signedTime, "SignedTime", createMs: createMs)
            return [Fact(
                subscription: key, kind: .renewal, origin: .wechat, message: message, signedAt: signed,
                customerId: try id(s.openId, "OpenId"),
                renewal: RenewalFact(productId: try id(info.productId, "ProductId"), autoRenewProductId: info.productId,
                                     autoRenewStatus: info.autoRenewStatus.map(clamped) ?? 1,
                                     renewalDate: WeChatTime.millis(info.renewalDate), signedDate: signed),
                detail: basis)]
        case .unsigning(let u):
            let info = u.subscription
            let key = try subscription(info.originalTransactionId, env: nil)
            try WeChatTime.checkMillis(info.unsignedTime, "AppleSubscriptionInfo.UnsignedTime")
            try WeChatTime.checkMillis(info.renewalDate, "AppleSubscriptionInfo.RenewalDate")
            let (signed, basis) = try contractTime(info.unsignedTime, "UnsignedTime", createMs: createMs)
            return [Fact(
                subscription: key, kind: .renewal, origin: .wechat, message: message, signedAt: signed,
                customerId: try id(u.openId, "OpenId"),
                renewal: RenewalFact(productId: try id(info.productId, "ProductId"), autoRenewProductId: info.productId,
                                     // The push says 0; a missing value still means turned off.
                                     autoRenewStatus: info.autoRenewStatus.map(clamped) ?? 0,
                                     renewalDate: WeChatTime.millis(info.renewalDate), signedDate: signed),
                detail: basis)]
        case .goodsDelivery(let d):
            guard let order = try id(d.outTradeNo, "OutTradeNo") else { throw FactDecodingError("the delivery has no OutTradeNo") }
            try WeChatTime.checkSeconds(d.paidTime, "WeChatPayInfo.PaidTime")
            try WeChatTime.checkMillis(d.subscription?.renewalDate, "AppleSubscriptionInfo.RenewalDate")
            let paidTime = WeChatTime.seconds(d.paidTime)
            guard let stated = paidTime ?? createMs else {
                throw FactDecodingError("the delivery states neither WeChatPayInfo.PaidTime nor CreateTime")
            }
            var statedIds = Set<String>()
            for case let alias? in [try id(d.mchOrderNo, "WeChatPayInfo.MchOrderNo"), try id(d.transactionId, "WeChatPayInfo.TransactionId")]
            where !alias.isEmpty && alias != order { statedIds.insert(alias) }
            let aliases = statedIds.sorted()
            let detail = Detail.json([
                "create_time": Detail.int(d.createTime), "paid_time": Detail.int(d.paidTime), "env": Detail.int(d.env),
                "quantity": Detail.int(d.quantity), "orig_price_fen": Detail.int(d.origPrice),
                "actual_price_fen": Detail.int(d.actualPrice), "mch_order_no": Detail.text(d.mchOrderNo),
                "pay_transaction_id": Detail.text(d.transactionId),
            ])
            let customer = try id(d.openId, "OpenId")
            guard let info = d.subscription else {
                // An ordinary purchase: kept for auditors as a fact of its own, folded by no subscription.
                return [Fact(
                    subscription: nil, kind: .purchase, origin: .wechat, message: message, signedAt: stated,
                    effectiveAt: stated, transactionId: order, orderAlias: aliases.first, customerId: customer,
                    transaction: TransactionFact(
                        transactionId: order, productId: try id(d.productId, "GoodsInfo.ProductId"), purchaseDate: paidTime,
                        signedDate: stated, price: d.actualPrice.flatMap(milli), currency: d.actualPrice == nil ? nil : "CNY",
                        environment: d.env == 1 ? SubscriptionKey.sandbox : SubscriptionKey.production),
                    detail: detail)]
            }
            let key = try subscription(info.originalTransactionId, env: d.env)
            let renewalDate = WeChatTime.millis(info.renewalDate)
            let productId = try id(d.productId ?? info.productId, "GoodsInfo.ProductId")
            // `stated` is PaidTime, or CreateTime as a placeholder when WeChat sent no PaidTime
            // (expected for Apple payments): then `purchaseDate` is absent and the fold starts the
            // period where the one before it ended, never at a send time.
            var facts = [Fact(
                subscription: key, kind: .transaction, origin: .wechat, message: message, signedAt: stated,
                effectiveAt: stated, transactionId: order, customerId: customer,
                transaction: TransactionFact(
                    transactionId: order, originalTransactionId: key.originalTransactionId, productId: productId,
                    purchaseDate: paidTime, expiresDate: renewalDate, signedDate: paidTime,
                    price: d.actualPrice.flatMap(milli), currency: d.actualPrice == nil ? nil : "CNY",
                    environment: key.environment, type: ProductType.autoRenewable, inAppOwnershipType: "PURCHASED"),
                detail: detail)]
            facts.append(Fact(
                subscription: key, kind: .renewal, origin: .wechat, message: message, signedAt: stated,
                transactionId: order, customerId: customer,
                renewal: RenewalFact(productId: productId, autoRenewProductId: productId,
                                     autoRenewStatus: info.autoRenewStatus.map(clamped),
                                     renewalDate: renewalDate, signedDate: paidTime)))
            for alias in aliases {
                facts.append(Fact(
                    subscription: key, kind: .orderAlias, origin: .wechat, message: message, signedAt: stated,
                    transactionId: order, orderAlias: alias))
            }
            return facts
        case .refundOutcome(let r):
            let mch = try id(r.mchOrderId, "MchOrderId").flatMap { $0.isEmpty ? nil : $0 }
            let wx = try id(r.wxOrderId, "WxOrderId").flatMap { $0.isEmpty ? nil : $0 }
            guard let order = mch ?? wx else {
                throw FactDecodingError("the refund names neither MchOrderId nor WxOrderId")
            }
            let succeeded = WeChatTime.seconds(r.refundSuccTimestamp)
            let started = WeChatTime.seconds(r.refundStartTimestamp)
            // A refund without either timestamp happened by the time WeChat sent it (CreateTime):
            // the latest it can have taken effect. It orders nothing (WeChat refunds are never reversed).
            guard let signed = (r.succeeded ? succeeded : nil) ?? started ?? succeeded ?? createMs else {
                throw FactDecodingError("the refund states no time (RefundSuccTimestamp, RefundStartTimestamp, CreateTime)")
            }
            let alias = mch == nil ? nil : wx
            let detail = Detail.json([
                "wx_refund_id": Detail.text(r.wxRefundId), "mch_refund_id": Detail.text(r.mchRefundId),
                "mch_order_id": Detail.text(r.mchOrderId), "wx_order_id": Detail.text(r.wxOrderId),
                "refund_fee": Detail.int(r.refundFee), "ret_code": Detail.int(r.retCode), "ret_msg": Detail.text(r.retMsg),
                "refund_start": Detail.int(started), "refund_succeeded": Detail.int(succeeded),
                "wxpay_refund_transaction_id": Detail.text(r.wxpayRefundTransactionId),
            ])
            var facts = [Fact(
                subscription: nil, kind: r.succeeded ? .revocation : .refundFailed, origin: .wechat, message: message,
                signedAt: signed, effectiveAt: signed, transactionId: order, orderAlias: alias, customerId: try id(r.openId, "OpenId"),
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
            guard let order = try id(q.payOrderId, "pay_order_id"), !order.isEmpty else {
                throw FactDecodingError("the refund inquiry has no pay_order_id")
            }
            try WeChatTime.checkSeconds(q.refundTime, "refund_time")
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

    /// `query_subscribe_contract` (mode=apple) as recorded by `WeChatAPIAnswer`:
    /// `{"api", "asked_at", "openid", "product_id", "answer": <WeChat's JSON>}`.
    static func contractAnswer(_ v: JSONValue, message: String) throws(FactDecodingError) -> [Fact] {
        guard let asked = v.int64("asked_at"), asked > contractAnswerLag else {
            throw FactDecodingError("the contract answer has no asked_at")
        }
        guard let openId = try id(v.text("openid"), "openid"), let product = try id(v.text("product_id"), "product_id") else {
            throw FactDecodingError("the contract answer names no openid and product_id")
        }
        let answer = v["answer"] ?? .null
        let state = answer.text("authorization_state")
        guard state == "SIGNED" || state == "TERMINATED" else { return [] }
        let info = answer["apple_subscription_info"] ?? .null
        let key = try subscription(info.text("original_transaction_id"), env: nil)
        let signed = asked - contractAnswerLag
        let autoRenew = state == "TERMINATED" ? 0 : info.int64("auto_renew_status").map(clamped) ?? 1
        return [Fact(
            subscription: key, kind: .renewal, origin: .wechat, message: message, signedAt: signed, customerId: openId,
            renewal: RenewalFact(productId: product, autoRenewProductId: product, autoRenewStatus: autoRenew,
                                 recentSubscriptionStartDate: WeChatTime.millis(info.int64("recent_subscription_start_date")),
                                 renewalDate: WeChatTime.millis(info.int64("renewal_date")), signedDate: signed),
            detail: Detail.json(["authorization_state": Detail.text(state), "asked_at": .integer(asked)]))]
    }

    /// `query_order` as recorded by `WeChatAPIAnswer`: `{"api", "asked_at", "openid", "answer": {"order": …}}`.
    static func orderAnswer(_ v: JSONValue, message: String) throws(FactDecodingError) -> [Fact] {
        guard let asked = v.int64("asked_at"), asked > 0 else { throw FactDecodingError("the order answer has no asked_at") }
        let order = v["answer"]?["order"] ?? .null
        guard let orderId = try id(order.text("order_id"), "order_id"), !orderId.isEmpty else {
            throw FactDecodingError("the order answer has no order.order_id")
        }
        var others = Set<String>()
        for case let other? in [try id(order.text("wx_order_id"), "wx_order_id"), try id(order.text("channel_order_id"), "channel_order_id"),
                                try id(order.text("wxpay_order_id"), "wxpay_order_id")] where !other.isEmpty && other != orderId {
            others.insert(other)
        }
        return others.sorted().map { alias in
            Fact(subscription: nil, kind: .orderAlias, origin: .wechat, message: message, signedAt: asked,
                 transactionId: orderId, orderAlias: alias, customerId: try? id(v.text("openid"), "openid"),
                 detail: Detail.json(["status": Detail.int(order.int64("status")), "order_type": Detail.int(order.int64("order_type"))]))
        }
    }

    /// A contract change's own time (SignedTime / UnsignedTime, ms), else the push's CreateTime (s):
    /// the send time, seconds after the change, is the best bound the push gives — a change folded
    /// a little late beats one never folded (before schema 7 such a push was evidence only). The
    /// basis is named in the fact's `detail.time_basis` whenever it is not the push's own time.
    static func contractTime(_ own: Int64?, _ field: String, createMs: EpochMillis?) throws(FactDecodingError)
        -> (EpochMillis, String?) {
        if let t = WeChatTime.millis(own) { return (t, nil) }
        guard let createMs else {
            throw FactDecodingError("the contract change states neither AppleSubscriptionInfo.\(field) nor CreateTime, so it cannot be ordered against other contract changes")
        }
        return (createMs, Detail.json(["time_basis": .string("CreateTime"), "missing": .string("AppleSubscriptionInfo." + field)]))
    }

    static func subscription(_ otid: String?, env: Int64?) throws(FactDecodingError) -> SubscriptionKey {
        guard let otid = try id(otid, "OriginalTransactionId"), !otid.isEmpty else {
            throw FactDecodingError("AppleSubscriptionInfo.OriginalTransactionId is missing")
        }
        guard OriginalTransactionId.isValid(otid) else {
            throw FactDecodingError("AppleSubscriptionInfo.OriginalTransactionId must be Apple's id (1 to 20 digits)")
        }
        return SubscriptionKey(environment: env == 1 ? SubscriptionKey.sandbox : SubscriptionKey.production,
                               originalTransactionId: otid)
    }

    /// An id as stated, refused when longer than any id WeChat issues.
    static func id(_ value: String?, _ field: String) throws(FactDecodingError) -> String? {
        guard let value else { return nil }
        guard value.utf8.count <= maxIdBytes else {
            throw FactDecodingError("its \(field) is \(value.utf8.count) bytes; WeChat ids are at most \(maxIdBytes)")
        }
        return value
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

    /// 10^11: as seconds the year 5138, as milliseconds 1973-03-03. A seconds field at or above it
    /// is a millisecond value (e.g. 1775226065000), a millisecond field below it a seconds value
    /// (e.g. 1775226065): taken at face value either would place the event centuries or decades away.
    static let magnitude: Int64 = 100_000_000_000

    /// Refuses a seconds field that holds milliseconds (the push stays stored as evidence).
    static func checkSeconds(_ s: Int64?, _ field: String) throws(FactDecodingError) {
        guard let s, s >= magnitude else { return }
        throw FactDecodingError("its \(field) \(s) is in milliseconds; WeChat states it in Unix seconds (e.g. 1775226065)")
    }

    /// Refuses a millisecond field (AppleSubscriptionInfo's times) that holds seconds.
    static func checkMillis(_ ms: Int64?, _ field: String) throws(FactDecodingError) {
        guard let ms, ms > 0, ms < magnitude else { return }
        throw FactDecodingError("its \(field) \(ms) is in seconds; WeChat states it in Unix milliseconds (e.g. 1775226065000)")
    }

    static func millis(_ ms: Int64?) -> EpochMillis? {
        guard let ms, ms > 0 else { return nil }
        return ms
    }
}

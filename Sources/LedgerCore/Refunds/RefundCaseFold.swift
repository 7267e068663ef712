import Foundation

/// Builds the refund cases (see `RefundCase`) from stored events of any source. Pure and
/// order-independent: the same set of events gives the same cases in any order, and an event
/// given twice (same position) counts once. Events that belong to no case are ignored, except
/// that deliveries, contract messages and link events supply a case's order amount, customer and
/// subscription. Give it every event that may belong to the cases asked for: the refund events,
/// plus the deliveries/contract events of their subscriptions and the link events.
public enum RefundCaseFold {
    static let appleTypes: Set<String> = ["CONSUMPTION_REQUEST", "REFUND", "REFUND_DECLINED", "REFUND_REVERSED"]

    public static func cases(from events: [RecordedEvent]) -> [RefundCase] {
        let unique = deduplicated(events)
        let links = WeChatOrderLinks(events: unique)
        var wechat = WeChatInputs(links: links)
        var apple: [String: [(RecordedEvent, AppleEventPayload)]] = [:]
        let decoder = JSONDecoder()
        for e in unique {
            switch e.event.source {
            case .wechat, .ledger:
                wechat.add(e, decoder: decoder)
            case .apple:
                guard let p = try? decoder.decode(AppleEventPayload.self, from: e.event.payload),
                      let type = p.notificationType, appleTypes.contains(type) else { continue }
                let key = p.transactionInfo?.transactionId ?? "event-\(e.position)"
                apple[key, default: []].append((e, p))
            }
        }
        let all = wechat.cases() + apple.map { appleCase(orderId: $0.key, entries: $0.value) }
        return all.sorted { ($0.openedAt, $0.caseId) < ($1.openedAt, $1.caseId) }
    }

    /// The case ids an event may contribute to, so a live projection re-folds only those cases when
    /// it appends the event (load every event indexed under these ids, plus the link events of
    /// their provisional streams, and call `cases(from:)`). Deliveries and links are listed under
    /// each order id they name; contract messages and other events under none.
    public static func caseIds(of event: RecordedEvent) -> [String] {
        let decoder = JSONDecoder()
        switch event.event.source {
        case .apple:
            guard appleTypes.contains(event.event.type.split(separator: "/").first.map(String.init) ?? ""),
                  let p = try? decoder.decode(AppleEventPayload.self, from: event.event.payload),
                  let type = p.notificationType, appleTypes.contains(type) else { return [] }
            return ["apple:" + (p.transactionInfo?.transactionId ?? "event-\(event.position)")]
        case .ledger:
            guard let v = try? decoder.decode(PushValue.self, from: event.event.payload) else { return [] }
            switch event.event.type {
            case XPayEventName.refundInquiryAnswer, XPayEventName.orderLinked:
                return [v.text("pay_order_id") ?? v.text("order_id")].compactMap { $0.map { "wechat:" + $0 } }
            default: return []
            }
        case .wechat:
            guard let v = try? decoder.decode(PushValue.self, from: event.event.payload) else { return [] }
            let ids: [String?]
            switch XPayMessage(v) {
            case .refundInquiry(let q): ids = [q.payOrderId]
            case .refundOutcome(let r): ids = [r.mchOrderId, r.wxOrderId]
            case .goodsDelivery(let d): ids = [d.outTradeNo, d.mchOrderNo, d.transactionId]
            default: ids = []
            }
            return Array(Set(ids.compactMap { $0.map { "wechat:" + $0 } })).sorted()
        }
    }

    /// One event per position; should two different events claim one position (never in a real
    /// log), the choice depends on their content only.
    static func deduplicated(_ events: [RecordedEvent]) -> [RecordedEvent] {
        var byPosition: [Int64: RecordedEvent] = [:]
        for e in events {
            if let current = byPosition[e.position], !contentPrecedes(e, current) { continue }
            byPosition[e.position] = e
        }
        return byPosition.keys.sorted().map { byPosition[$0]! }
    }

    private static func contentPrecedes(_ a: RecordedEvent, _ b: RecordedEvent) -> Bool {
        if a == b { return false }
        let ka = [String(a.recordedAt), a.event.streamId, a.event.dedupeKey, a.event.type]
        let kb = [String(b.recordedAt), b.event.streamId, b.event.dedupeKey, b.event.type]
        if ka != kb { return ka.lexicographicallyPrecedes(kb) }
        return a.event.payload.lexicographicallyPrecedes(b.event.payload)
    }

    // MARK: - Apple

    static func appleCase(orderId: String, entries raw: [(RecordedEvent, AppleEventPayload)]) -> RefundCase {
        let entries = raw.sorted { a, b in
            (a.1.signedDate?.millis ?? a.0.recordedAt, a.0.position) < (b.1.signedDate?.millis ?? b.0.recordedAt, b.0.position)
        }
        let notes = entries.map { e, p in
            RefundCase.AppleNotificationEntry(
                position: e.position, recordedAt: e.recordedAt, notificationType: p.notificationType ?? "",
                subtype: p.subtype, signedDate: p.signedDate?.millis,
                consumptionRequestReason: p.data?.consumptionRequestReason,
                revocationDate: p.transactionInfo?.revocationDate?.millis,
                revocationReason: p.transactionInfo?.revocationReason,
                revocationType: p.transactionInfo?.revocationType,
                revocationPercentage: p.transactionInfo?.revocationPercentage)
        }
        let latestTx = entries.reversed().lazy.compactMap(\.1.transactionInfo)
        let final = entries.last { $0.1.notificationType != "CONSUMPTION_REQUEST" }
        let lastRefund = entries.last { $0.1.notificationType == "REFUND" }?.1.transactionInfo
        let outcome: RefundCase.Outcome
        var outcomeAt: EpochMillis?
        switch final?.1.notificationType {
        case "REFUND"?:
            outcome = .refunded
            outcomeAt = final?.1.transactionInfo?.revocationDate?.millis ?? final?.1.signedDate?.millis
        case "REFUND_DECLINED"?: outcome = .declined; outcomeAt = final?.1.signedDate?.millis
        case "REFUND_REVERSED"?: outcome = .reversed; outcomeAt = final?.1.signedDate?.millis
        default: outcome = .pending
        }
        let price = latestTx.compactMap(\.price).first
        let currency = latestTx.compactMap(\.currency).first
        var refunded: RefundCase.Money?
        if outcome == .refunded, let price {
            let pct = Int64(lastRefund?.revocationPercentage ?? 100_000)
            let (scaled, overflow) = price.multipliedReportingOverflow(by: max(0, min(pct, 100_000)))
            refunded = overflow ? nil : .init(milliunits: scaled / 100_000, currency: currency)
        }
        let token = latestTx.compactMap(\.appAccountToken).first
        return RefundCase(
            caseId: "apple:" + orderId, source: .apple, orderId: orderId,
            originalTransactionId: latestTx.compactMap(\.originalTransactionId).first ?? entries.first?.0.event.streamId,
            openId: nil, customerId: token, productId: latestTx.compactMap(\.productId).first,
            openedAt: entries.map { $0.1.signedDate?.millis ?? $0.0.recordedAt }.min() ?? 0,
            lastRecordedAt: entries.map(\.0.recordedAt).max() ?? 0,
            decision: nil, decisionRule: nil, outcome: outcome, outcomeAt: outcomeAt,
            reason: entries.last { $0.1.data?.consumptionRequestReason != nil }?.1.data?.consumptionRequestReason,
            orderAmount: price.map { .init(milliunits: $0, currency: currency) }, refundedAmount: refunded,
            revocationDate: outcome == .refunded ? lastRefund?.revocationDate?.millis : nil,
            revocationReason: outcome == .refunded ? lastRefund?.revocationReason : nil,
            revocationType: outcome == .refunded ? lastRefund?.revocationType : nil,
            revocationPercentage: outcome == .refunded ? lastRefund?.revocationPercentage : nil,
            deliveryPosition: nil, inquiries: [], answers: [], refundOutcomes: [], appleNotifications: notes,
            links: entries.map(\.0.position).sorted())
    }
}

/// The WeChat side of the fold: inquiries, answers, refund outcomes, and the context (deliveries,
/// contract openids, links) that completes a case.
struct WeChatInputs {
    struct Delivery {
        var event: RecordedEvent
        var message: XPayGoodsDelivery
        var ids: [String]
    }

    let links: WeChatOrderLinks
    var inquiries: [String: [(RecordedEvent, XPayRefundInquiry)]] = [:]
    var answers: [String: [(RecordedEvent, PushValue)]] = [:]
    var refunds: [(RecordedEvent, XPayRefundOutcome)] = []
    /// Deliveries under each order id they carry (OutTradeNo, MchOrderNo, TransactionId), so
    /// matching a case costs a lookup per alias, not a scan of every delivery.
    var deliveriesById: [String: [Delivery]] = [:]
    /// openids named by contract messages and deliveries, per subscription stream.
    var openIdsByStream: [String: Set<String>] = [:]

    init(links: WeChatOrderLinks) { self.links = links }

    mutating func add(_ e: RecordedEvent, decoder: JSONDecoder) {
        guard let v = try? decoder.decode(PushValue.self, from: e.event.payload) else { return }
        if e.event.source == .ledger {
            if e.event.type == XPayEventName.refundInquiryAnswer, let order = v.text("pay_order_id") {
                answers[order, default: []].append((e, v))
            }
            return
        }
        let stream = links.subscriptionStream(of: e.event.streamId)
        switch XPayMessage(v) {
        case .refundInquiry(let q):
            if let order = q.payOrderId { inquiries[order, default: []].append((e, q)) }
        case .refundOutcome(let r):
            if r.mchOrderId != nil || r.wxOrderId != nil { refunds.append((e, r)) }
        case .goodsDelivery(let d):
            if let order = d.outTradeNo {
                let delivery = Delivery(event: e, message: d, ids: [order, d.mchOrderNo, d.transactionId].compactMap { $0 })
                for id in Set(delivery.ids) { deliveriesById[id, default: []].append(delivery) }
            }
            if let o = d.openId { openIdsByStream[d.subscription?.originalTransactionId ?? stream, default: []].insert(o) }
        case .signingResult(let s):
            if let o = s.openId { openIdsByStream[s.subscription.originalTransactionId ?? stream, default: []].insert(o) }
        case .unsigning(let u):
            if let o = u.openId { openIdsByStream[u.subscription.originalTransactionId ?? stream, default: []].insert(o) }
        case .other:
            break
        }
    }

    func cases() -> [RefundCase] {
        var keys = Set(inquiries.keys).union(answers.keys)
        var refundsByKey: [String: [(RecordedEvent, XPayRefundOutcome)]] = [:]
        // A refund joins the case its MchOrderId names, else the one its WxOrderId names, else
        // opens its own. Whether a case exists depends only on inquiries and answers, so the
        // assignment does not depend on the order refunds are seen in.
        var ownKeys: [String] = []
        for (e, r) in refunds {
            let ids = [r.mchOrderId, r.wxOrderId].compactMap { $0 }
            let key = ids.first { keys.contains($0) } ?? ids[0]
            if !keys.contains(key) { ownKeys.append(key) }
            refundsByKey[key, default: []].append((e, r))
        }
        keys.formUnion(ownKeys)
        return keys.map { wechatCase($0, refunds: refundsByKey[$0] ?? []) }
    }

    private func wechatCase(_ key: String, refunds rawRefunds: [(RecordedEvent, XPayRefundOutcome)]) -> RefundCase {
        let asked = (inquiries[key] ?? []).sorted { ($0.0.recordedAt, $0.0.position) < ($1.0.recordedAt, $1.0.position) }
        let answered = (answers[key] ?? []).sorted { ($0.0.recordedAt, $0.0.position) < ($1.0.recordedAt, $1.0.position) }
        let refunds = rawRefunds.sorted { $0.0.position < $1.0.position }
        var aliases: Set<String> = [key]
        for (_, r) in refunds { aliases.formUnion([r.mchOrderId, r.wxOrderId].compactMap { $0 }) }
        let delivery = aliases.flatMap { deliveriesById[$0] ?? [] }.min { $0.event.position < $1.event.position }

        // Answers and the askings they replied to.
        var triggered: [Int64: Int64] = [:]   // inquiry position → answer position
        var answerRows: [RefundCase.Answer] = []
        for (e, v) in answered {
            let trigger = asked.first { $0.0.recordedAt <= e.recordedAt && triggered[$0.0.position] == nil }
            if let t = trigger { triggered[t.0.position] = e.position }
            let code = v.int64("result_code")
            let decision: RefundCase.Decision? = v.text("decision").flatMap(RefundCase.Decision.init(rawValue:))
                ?? code.flatMap { $0 == 0 ? .allow : $0 == 1 ? .refuse : nil }
            var info: String?
            if case .string(let s)? = v["result_info"] { info = s }
            answerRows.append(RefundCase.Answer(
                position: e.position, recordedAt: e.recordedAt, resultCode: code, decision: decision,
                rule: v.text("rule"), resultInfo: info, evidence: v.text("evidence"),
                inquiryPosition: trigger?.0.position,
                latencyMs: trigger.map { e.recordedAt &- $0.0.recordedAt },
                latencyFromAskedMs: trigger.flatMap { WeChatTime.seconds($0.1.refundTime) }.map { e.recordedAt &- $0 }))
        }
        let inquiryRows = asked.map { e, q -> RefundCase.Inquiry in
            var answer = triggered[e.position]
            let repeated = answer == nil
            if answer == nil {
                answer = answered.last { $0.0.recordedAt <= e.recordedAt }?.0.position
            }
            return RefundCase.Inquiry(
                position: e.position, recordedAt: e.recordedAt, askedAt: WeChatTime.seconds(q.refundTime),
                orderTime: WeChatTime.seconds(q.orderTime), provideStatus: q.provideStatusRaw,
                reason: q.refundRequestReason, channelBill: q.channelBill, productId: q.productId,
                streamId: e.event.streamId, answerPosition: answer, repeatedAnswer: repeated && answer != nil)
        }.sorted { ($0.askedAt ?? .min, $0.recordedAt, $0.position) < ($1.askedAt ?? .min, $1.recordedAt, $1.position) }

        let outcomeRows = refunds.map { e, r in
            RefundCase.WeChatRefundOutcome(
                position: e.position, recordedAt: e.recordedAt, succeeded: r.succeeded, retCode: r.retCode,
                retMsg: r.retMsg, wxRefundId: r.wxRefundId, mchRefundId: r.mchRefundId, wxOrderId: r.wxOrderId,
                mchOrderId: r.mchOrderId, refundFee: r.refundFee.flatMap(Self.money),
                startedAt: WeChatTime.seconds(r.refundStartTimestamp),
                succeededAt: r.succeeded ? WeChatTime.seconds(r.refundSuccTimestamp) : nil)
        }
        // A success is final; a failure only counts while no success is known.
        let successes = refunds.filter { $0.1.succeeded }
        let outcome: RefundCase.Outcome = !successes.isEmpty ? .refunded : refunds.isEmpty ? .pending : .refundFailed
        let outcomeAt: EpochMillis? = switch outcome {
        case .refunded: successes.compactMap { Self.refundTime($0.1) ?? $0.0.event.signedAt }.min()
        case .refundFailed: refunds.compactMap { Self.refundTime($0.1) ?? $0.0.event.signedAt }.max()
        default: nil
        }
        let refundedFen = successes.compactMap(\.1.refundFee).max()

        // Streams: the raw ones (for link events) and the subscription they belong to.
        let caseEvents = asked.map(\.0) + answered.map(\.0) + refunds.map(\.0) + (delivery.map { [$0.event] } ?? [])
        var rawStreams = Set(caseEvents.map(\.event.streamId))
        for id in aliases { rawStreams.insert(StreamNames.wechatProvisional(orderId: id)) }
        let linkPositions = rawStreams.flatMap { links.linkPositions[$0] ?? [] }
        let provisionalPrefix = StreamNames.wechatProvisional(orderId: "")
        let subscriptions = Set(caseEvents.map { links.subscriptionStream(of: $0.event.streamId) })
            .filter { !$0.hasPrefix(provisionalPrefix) }
        let otid = delivery?.message.subscription?.originalTransactionId ?? subscriptions.min()
        let openId = refunds.compactMap(\.1.openId).min() ?? delivery?.message.openId
            ?? otid.flatMap { openIdsByStream[$0]?.min() }

        let businessTimes = asked.compactMap { WeChatTime.seconds($0.1.refundTime) }
            + refunds.compactMap { Self.refundStart($0.1) }
        let ownEvents = asked.map(\.0) + answered.map(\.0) + refunds.map(\.0)
        let first = answerRows.first
        return RefundCase(
            caseId: "wechat:" + key, source: .wechat, orderId: key, originalTransactionId: otid,
            openId: openId, customerId: openId,
            productId: asked.compactMap(\.1.productId).min() ?? delivery?.message.productId
                ?? answered.compactMap { $0.1.text("product_id") }.min(),
            openedAt: businessTimes.min() ?? ownEvents.map(\.recordedAt).min() ?? 0,
            lastRecordedAt: (ownEvents + (delivery.map { [$0.event] } ?? [])).map(\.recordedAt).max() ?? 0,
            decision: first?.decision, decisionRule: first?.rule, outcome: outcome, outcomeAt: outcomeAt,
            reason: asked.compactMap(\.1.refundRequestReason).min(),
            orderAmount: delivery?.message.actualPrice.flatMap(Self.money),
            refundedAmount: refundedFen.flatMap(Self.money),
            revocationDate: nil, revocationReason: nil, revocationType: nil, revocationPercentage: nil,
            deliveryPosition: delivery?.event.position,
            inquiries: inquiryRows, answers: answerRows, refundOutcomes: outcomeRows, appleNotifications: [],
            links: Array(Set(caseEvents.map(\.position) + linkPositions)).sorted())
    }

    static func money(_ fen: Int64) -> RefundCase.Money? {
        let (v, overflow) = fen.multipliedReportingOverflow(by: WeChatFacts.milliPerFen)
        return overflow ? nil : RefundCase.Money(milliunits: v, currency: "CNY")
    }

    static func refundTime(_ r: XPayRefundOutcome) -> EpochMillis? {
        (r.succeeded ? WeChatTime.seconds(r.refundSuccTimestamp) : nil)
            ?? WeChatTime.seconds(r.refundStartTimestamp) ?? WeChatTime.seconds(r.createTime)
    }

    static func refundStart(_ r: XPayRefundOutcome) -> EpochMillis? {
        WeChatTime.seconds(r.refundStartTimestamp) ?? refundTime(r)
    }
}

import Foundation

/// Builds the refund cases (see `RefundCase`) from facts (`FactDecoder`: the one reading of every
/// stored event; nothing here decodes a payload). Pure and order-independent: the same set of
/// facts gives the same cases in any order, and a fact given twice (same position and ordinal)
/// counts once.
///
/// | fact | role |
/// |---|---|
/// | `refund_inquiry` (WeChat) | opens the case of its `pay_order_id` (one asking each) |
/// | `refund_answer` (ledger) | the ledger's answer, in the case of its `pay_order_id` |
/// | `revocation` / `refund_failed` (WeChat) | a refund outcome: joins the case its MchOrderId names, else its WxOrderId, else the least case of the same order (aliases); refunds of an order nobody asked about are one case of their own |
/// | `transaction` (WeChat delivery), `order_alias` | context: the order's amount, period, customer and subscription, and which ids name the same order |
/// | `renewal` / `transaction` (WeChat) | context: the customer (openid) of a subscription |
/// | `revocation` of a REFUND, `reversal`, `refund_declined`, `consumption_request` (Apple V2) | one case per transactionId; the transaction snapshot each carries gives amount, customer, product |
/// | `revocation` (not FAMILY_REVOKE) stated by an App Store API answer (`apple.api`) | a refund the ledger learned by asking (its notification was lost, or an earlier period's): opens or joins the transaction's case |
/// | `reversal` stated by an App Store API answer | joins the transaction's case only where it undoes a refund in force (API snapshots state "not revoked" every time) |
/// | `revocation` / `reversal` a V2 notification of another type states from its transaction (`detail.basis`) | as an App Store API answer's statement (a lost REFUND healed by the next notification) |
/// | `consumption_answer` (ledger) | the ledger's answer to a consumption request: joins the transaction's case (`consumptionAnswers`) |
///
/// An API answer restates what the ledger may already know: of its revocations and reversals only
/// those that change the case's state (by signed time) are entries. Apple REVOKE (Family Sharing
/// ending) and V1 cancellations are not refund requests and open no case. Give it every fact that may belong to the cases asked for: the refund facts, plus the
/// WeChat facts naming their orders (deliveries, aliases, links) and the WeChat facts of those
/// orders' subscriptions (`RefundFactQueries` in LedgerStore loads exactly that).
public enum RefundCaseFold {
    /// The Apple notification each fact kind stands for in a case.
    static let appleTypes: [FactKind: String] = [
        .revocation: "REFUND", .reversal: "REFUND_REVERSED", .refundDeclined: "REFUND_DECLINED",
        .consumptionRequest: "CONSUMPTION_REQUEST",
    ]

    /// The fact kinds that open or make up a case (the rest is context).
    public static let caseKinds: Set<FactKind> = [
        .refundInquiry, .refundAnswer, .revocation, .refundFailed, .reversal, .refundDeclined, .consumptionRequest,
        .consumptionAnswer,
    ]

    public static func cases(from facts: some Sequence<Fact>) -> [RefundCase] {
        let unique = deduplicated(facts)
        var wechat = WeChatInputs(links: WeChatOrderLinks(facts: unique))
        var apple: [String: [Fact]] = [:]
        var api: [String: [Fact]] = [:]
        var consumptionAnswers: [String: [Fact]] = [:]
        for f in unique {
            switch f.origin {
            case .ledger where f.kind == .consumptionAnswer:
                if let id = f.transactionId, !id.isEmpty { consumptionAnswers[id, default: []].append(f) }
            case .wechat, .ledger:
                wechat.add(f)
            case .appleV2:
                guard let id = f.transactionId, let type = appleTypes[f.kind] else { continue }
                if notificationType(of: f) == type {
                    apple[id, default: []].append(f)
                } else if f.kind == .revocation || f.kind == .reversal, f.details["basis"] != nil {
                    // What any other notification's transaction states (revoked or not as of its
                    // signing): like an API answer's statement, it counts where it changes the case.
                    if f.kind == .revocation, f.transaction?.revocationType == "FAMILY_REVOKE" { continue }
                    api[id, default: []].append(f)
                }
            case .appleAPI:
                guard let id = f.transactionId, f.kind == .revocation || f.kind == .reversal else { continue }
                if f.kind == .revocation, f.transaction?.revocationType == "FAMILY_REVOKE" { continue }
                api[id, default: []].append(f)
            case .appleV1:
                continue
            }
        }
        var appleCases: [RefundCase] = []
        for id in Set(apple.keys).union(api.filter { $0.value.contains { $0.kind == .revocation } }.keys) {
            let entries = withAPIStatements(apple[id] ?? [], api[id] ?? [])
            if entries.isEmpty { continue }
            appleCases.append(appleCase(orderId: id, entries: entries, answers: consumptionAnswers[id] ?? []))
        }
        let all = wechat.cases() + appleCases
        return all.sorted { ($0.openedAt, $0.caseId) < ($1.openedAt, $1.caseId) }
    }

    /// One fact per (position, ordinal); should two different facts claim one place (never in a
    /// real log), the choice depends on their content only.
    static func deduplicated(_ facts: some Sequence<Fact>) -> [Fact] {
        var byPlace: [Place: Fact] = [:]
        for f in facts {
            let place = Place(position: f.position, ordinal: f.ordinal)
            if let current = byPlace[place], !precedes(f, current) { continue }
            byPlace[place] = f
        }
        return byPlace.keys.sorted { ($0.position, $0.ordinal) < ($1.position, $1.ordinal) }.map { byPlace[$0]! }
    }

    struct Place: Hashable { var position: Int64; var ordinal: Int }

    /// Facts that state the same thing at different positions (a WeChat re-push stored again in
    /// another stream, because the order's delivery arrived in between) count once: per content,
    /// the first stored (least position) is kept; the others are `repeats` (still evidence: their positions
    /// are listed with the case).
    static func restatementsRemoved(_ facts: [Fact]) -> (kept: [Fact], repeats: [Fact]) {
        var first: [Fact: Fact] = [:]
        for f in facts {
            let c = f.content
            if let current = first[c], (current.position, current.ordinal) <= (f.position, f.ordinal) { continue }
            first[c] = f
        }
        let kept = Set(first.values.map { Place(position: $0.position, ordinal: $0.ordinal) })
        return (facts.filter { kept.contains(Place(position: $0.position, ordinal: $0.ordinal)) },
                facts.filter { !kept.contains(Place(position: $0.position, ordinal: $0.ordinal)) })
    }

    /// A total order of facts by content, then by the rest of their place.
    static func precedes(_ a: Fact, _ b: Fact) -> Bool {
        if a.contentPrecedes(b) { return true }
        if b.contentPrecedes(a) { return false }
        return (a.recordedAt, a.streamId) < (b.recordedAt, b.streamId)
    }

    /// `REFUND` of `REFUND` or `REFUND/SUBTYPE`: the notification type an Apple fact's message names.
    static func notificationType(of fact: Fact) -> String {
        guard let m = fact.message else { return "" }
        return m.firstIndex(of: "/").map { String(m[..<$0]) } ?? m
    }

    static func subtype(of fact: Fact) -> String? {
        guard let m = fact.message, let slash = m.firstIndex(of: "/") else { return nil }
        let s = m[m.index(after: slash)...]
        return s.isEmpty ? nil : String(s)
    }

    // MARK: - Apple

    /// The case's notification facts with the API statements that change its state, walked in
    /// signed order: an API revocation counts unless the same refund (same revocationDate) is
    /// already in force; an API reversal only while a refund is in force.
    static func withAPIStatements(_ notifications: [Fact], _ statements: [Fact]) -> [Fact] {
        if statements.isEmpty { return notifications }
        let order = { (a: Fact, b: Fact) in (a.signedAt, a.position, a.ordinal) < (b.signedAt, b.position, b.ordinal) }
        var kept: [Fact] = []
        var refundedAt: EpochMillis??
        for f in (notifications + statements).sorted(by: order) {
            let isAPI = isStatement(f)
            switch f.kind {
            case .revocation:
                let date = f.transaction?.revocationDate
                if isAPI, let current = refundedAt, current == date { continue }
                refundedAt = .some(date)
            case .reversal, .refundDeclined:
                if isAPI, refundedAt == nil { continue }
                refundedAt = nil
            default:
                break
            }
            kept.append(f)
        }
        return kept
    }

    /// A revocation or reversal stated by a transaction snapshot (an App Store API answer, or a V2
    /// notification of another type: `detail.basis`), not by a refund notification of its own.
    static func isStatement(_ f: Fact) -> Bool {
        f.origin == .appleAPI || ((f.kind == .revocation || f.kind == .reversal) && f.origin == .appleV2 && f.details["basis"] != nil)
    }

    static func appleCase(orderId: String, entries all: [Fact], answers rawAnswers: [Fact] = []) -> RefundCase {
        let (raw, repeats) = restatementsRemoved(all)
        let entries = raw.sorted { ($0.signedAt, $0.position, $0.ordinal) < ($1.signedAt, $1.position, $1.ordinal) }
        let notes = entries.map { f in
            RefundCase.AppleNotificationEntry(
                position: f.position, recordedAt: f.recordedAt,
                notificationType: isStatement(f) ? appleTypes[f.kind] ?? "" : notificationType(of: f),
                subtype: isStatement(f) ? nil : subtype(of: f), signedDate: f.signedAt,
                consumptionRequestReason: f.details["reason"]?.text,
                revocationDate: f.transaction?.revocationDate, revocationReason: f.transaction?.revocationReason,
                revocationType: f.transaction?.revocationType, revocationPercentage: f.transaction?.revocationPercentage,
                origin: f.origin.rawValue)
        }
        let answerFacts = restatementsRemoved(rawAnswers).kept
            .sorted { ($0.recordedAt, $0.position, $0.ordinal) < ($1.recordedAt, $1.position, $1.ordinal) }
        let answers = answerFacts.map { f in
            let d = f.details
            func json(_ v: JSONValue?) -> String? { v.map { String(decoding: $0.canonicalJSON(), as: UTF8.self) } }
            return RefundCase.ConsumptionAnswerEntry(
                position: f.position, recordedAt: f.recordedAt, outcome: d["outcome"]?.text ?? "", reason: d["reason"]?.text,
                message: d["message"]?.text, requestPosition: d["requestPosition"]?.int64, request: json(d["request"]),
                answer: json(d["answer"]), attempts: d["attempts"]?.int64)
        }
        let latestTx = entries.reversed().lazy.compactMap(\.transaction)
        let final = entries.last { $0.kind != .consumptionRequest }
        let lastRefund = entries.last { $0.kind == .revocation }?.transaction
        let outcome: RefundCase.Outcome
        var outcomeAt: EpochMillis?
        switch final?.kind {
        case .revocation?:
            outcome = .refunded
            outcomeAt = final?.transaction?.revocationDate ?? final?.signedAt
        case .refundDeclined?: outcome = .declined; outcomeAt = final?.signedAt
        case .reversal?: outcome = .reversed; outcomeAt = final?.signedAt
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
        return RefundCase(
            caseId: "apple:" + orderId, source: .apple, orderId: orderId,
            originalTransactionId: latestTx.compactMap(\.originalTransactionId).first
                ?? entries.compactMap(\.subscription).first?.originalTransactionId,
            openId: nil, customerId: latestTx.compactMap(\.appAccountToken).first ?? entries.compactMap(\.customerId).first,
            productId: latestTx.compactMap(\.productId).first,
            openedAt: entries.map(\.signedAt).min() ?? 0,
            lastRecordedAt: (entries + repeats + answerFacts).map(\.recordedAt).max() ?? 0,
            decision: nil, decisionRule: nil, outcome: outcome, outcomeAt: outcomeAt,
            reason: notes.last { $0.consumptionRequestReason != nil }?.consumptionRequestReason,
            orderAmount: price.map { .init(milliunits: $0, currency: currency) }, refundedAmount: refunded,
            revocationDate: outcome == .refunded ? lastRefund?.revocationDate : nil,
            revocationReason: outcome == .refunded ? lastRefund?.revocationReason : nil,
            revocationType: outcome == .refunded ? lastRefund?.revocationType : nil,
            revocationPercentage: outcome == .refunded ? lastRefund?.revocationPercentage : nil,
            deliveryPosition: nil, inquiries: [], answers: [], refundOutcomes: [], appleNotifications: notes,
            links: Array(Set((entries + repeats + answerFacts).map(\.position))).sorted(), consumptionAnswers: answers)
    }
}

/// The WeChat side of the fold: inquiries, answers, refund outcomes, and the context (deliveries,
/// aliases, links, the customers of subscriptions) that completes a case.
struct WeChatInputs {
    let links: WeChatOrderLinks
    var inquiries: [String: [Fact]] = [:]
    var answers: [String: [Fact]] = [:]
    var refunds: [Fact] = []
    /// openids named by the WeChat facts (deliveries, contract changes) of each subscription.
    var customersBySubscription: [SubscriptionKey: Set<String>] = [:]

    init(links: WeChatOrderLinks) { self.links = links }

    mutating func add(_ f: Fact) {
        switch (f.kind, f.origin) {
        case (.refundInquiry, .wechat):
            if let order = f.transactionId, !order.isEmpty { inquiries[order, default: []].append(f) }
        case (.refundAnswer, .ledger):
            if let order = f.transactionId, !order.isEmpty { answers[order, default: []].append(f) }
        case (.revocation, .wechat), (.refundFailed, .wechat):
            if let order = f.transactionId, !order.isEmpty { refunds.append(f) }
        case (.transaction, .wechat), (.renewal, .wechat):
            if let key = f.subscription, let c = f.customerId, !c.isEmpty { customersBySubscription[key, default: []].insert(c) }
        default:
            break
        }
    }

    /// MchOrderId then WxOrderId (the decoder's `transactionId` and `orderAlias` of a refund).
    static func ids(ofRefund f: Fact) -> [String] {
        [f.transactionId, f.orderAlias].compactMap { $0 }.filter { !$0.isEmpty }
    }

    func cases() -> [RefundCase] {
        let asked = Set(inquiries.keys).union(answers.keys)
        // The cases of each order (an order asked about under two of its ids has two cases).
        var askedByGroup: [String: [String]] = [:]
        for key in asked { askedByGroup[links.group(of: key), default: []].append(key) }
        // A refund joins the case its MchOrderId names, else the one its WxOrderId names, else the
        // least case of the same order; refunds of an order nobody asked about form one case, keyed
        // by the least MchOrderId (else WxOrderId) among them. Whether a case exists depends only
        // on inquiries and answers, so the assignment does not depend on the order refunds are seen in.
        var refundsByKey: [String: [Fact]] = [:]
        var unasked: [String: [Fact]] = [:]   // by order (group)
        for r in refunds {
            let ids = Self.ids(ofRefund: r)
            if let key = ids.first(where: { asked.contains($0) }) ?? askedByGroup[links.group(of: ids[0])]?.min() {
                refundsByKey[key, default: []].append(r)
            } else {
                unasked[links.group(of: ids[0]), default: []].append(r)
            }
        }
        for (_, group) in unasked {
            refundsByKey[group.map { Self.ids(ofRefund: $0)[0] }.min()!, default: []] += group
        }
        return Set(asked).union(refundsByKey.keys).map { wechatCase($0, refunds: refundsByKey[$0] ?? []) }
    }

    private func wechatCase(_ key: String, refunds rawRefunds: [Fact]) -> RefundCase {
        let byArrival = { (a: Fact, b: Fact) in (a.recordedAt, a.position, a.ordinal) < (b.recordedAt, b.position, b.ordinal) }
        let (askings, repeatedAskings) = RefundCaseFold.restatementsRemoved(inquiries[key] ?? [])
        let (answerFacts, repeatedAnswers) = RefundCaseFold.restatementsRemoved(answers[key] ?? [])
        let (refundFacts, repeatedRefunds) = RefundCaseFold.restatementsRemoved(rawRefunds)
        let repeats = repeatedAskings + repeatedAnswers + repeatedRefunds
        let asked = askings.sorted(by: byArrival)
        let answered = answerFacts.sorted(by: byArrival)
        let refunds = refundFacts.sorted { ($0.position, $0.ordinal) < ($1.position, $1.ordinal) }
        let orderIds = links.ids(of: key)
        let delivery = links.delivery(among: orderIds)
        let askedDetails = asked.map(\.details)
        let answerDetails = answered.map(\.details)
        let refundDetails = refunds.map(\.details)

        // Answers and the askings they replied to.
        var triggered: [Int64: Int64] = [:]   // inquiry position → answer position
        var answerRows: [RefundCase.Answer] = []
        for (a, v) in zip(answered, answerDetails) {
            // An answer names the asking it replied to (its refund_time, seconds); answers stored
            // before they did are matched to the first unanswered asking recorded by then.
            let named = v["refund_time"]?.int64.flatMap { t in
                asked.first { $0.signedAt / 1000 == t && triggered[$0.position] == nil }
            }
            let trigger = named ?? asked.first { $0.recordedAt <= a.recordedAt && triggered[$0.position] == nil }
            if let t = trigger { triggered[t.position] = a.position }
            let code = v["result_code"]?.int64
            let decision: RefundCase.Decision? = v["decision"]?.text.flatMap(RefundCase.Decision.init(rawValue:))
                ?? code.flatMap { $0 == 0 ? .allow : $0 == 1 ? .refuse : nil }
            var info: String?
            if case .string(let s)? = v["result_info"] { info = s }
            answerRows.append(RefundCase.Answer(
                position: a.position, recordedAt: a.recordedAt, resultCode: code, decision: decision,
                rule: v["rule"]?.text, resultInfo: info, evidence: v["evidence"]?.text,
                inquiryPosition: trigger?.position,
                // The time the ledger took, measured in process from the asking's arrival to the
                // reply being ready (`decidedInMs`); answers recorded before it was measured fall
                // back to the recording times (0 when stored in the asking's transaction).
                latencyMs: v["decidedInMs"]?.int64 ?? trigger.map { a.recordedAt &- $0.recordedAt },
                decidedInMs: v["decidedInMs"]?.int64,
                latencyFromAskedMs: trigger.map { a.recordedAt &- $0.signedAt }))
        }
        let inquiryRows = zip(asked, askedDetails).map { q, v -> RefundCase.Inquiry in
            var answer = triggered[q.position]
            let repeated = answer == nil
            if answer == nil {
                answer = answered.last { $0.recordedAt <= q.recordedAt }?.position
            }
            return RefundCase.Inquiry(
                position: q.position, recordedAt: q.recordedAt, askedAt: q.signedAt,
                orderTime: v["order_time"]?.int64, provideStatus: v["provide_status"]?.int64,
                reason: v["refund_request_reason"]?.text, channelBill: v["channel_bill"]?.text,
                productId: v["product_id"]?.text, streamId: q.streamId, answerPosition: answer,
                repeatedAnswer: repeated && answer != nil)
        }.sorted { ($0.askedAt ?? .min, $0.recordedAt, $0.position) < ($1.askedAt ?? .min, $1.recordedAt, $1.position) }

        let outcomeRows = zip(refunds, refundDetails).map { r, v in
            let succeeded = r.kind == .revocation
            return RefundCase.WeChatRefundOutcome(
                position: r.position, recordedAt: r.recordedAt, succeeded: succeeded, retCode: v["ret_code"]?.int64,
                retMsg: v["ret_msg"]?.text, wxRefundId: v["wx_refund_id"]?.text, mchRefundId: v["mch_refund_id"]?.text,
                wxOrderId: v["wx_order_id"]?.text, mchOrderId: v["mch_order_id"]?.text, refundFee: Self.money(r),
                startedAt: v["refund_start"]?.int64, succeededAt: succeeded ? v["refund_succeeded"]?.int64 : nil)
        }
        // A success is final; a failure only counts while no success is known. A refund fact's
        // signedAt is its success time, else its start, else the push's CreateTime.
        let successes = refunds.filter { $0.kind == .revocation }
        let outcome: RefundCase.Outcome = !successes.isEmpty ? .refunded : refunds.isEmpty ? .pending : .refundFailed
        let outcomeAt: EpochMillis? = switch outcome {
        case .refunded: successes.map(\.signedAt).min()
        case .refundFailed: refunds.map(\.signedAt).max()
        default: nil
        }
        let refunded = successes.compactMap { r in Self.money(r).map { (r, $0) } }.max { $0.1.milliunits < $1.1.milliunits }?.1

        // The subscription: the delivery's, else one a link or alias ties the order to.
        let subscription = delivery?.subscription ?? links.subscriptions(of: orderIds).first
        let openId = refunds.compactMap(\.customerId).filter { !$0.isEmpty }.min() ?? delivery?.customerId
            ?? subscription.flatMap { customersBySubscription[$0]?.min() }
        let linkFacts = links.links(of: orderIds)

        let businessTimes = asked.map(\.signedAt) + zip(refunds, refundDetails).map { r, v in v["refund_start"]?.int64 ?? r.signedAt }
        let own = asked + answered + refunds
        let first = answerRows.first
        return RefundCase(
            caseId: "wechat:" + key, source: .wechat, orderId: key,
            originalTransactionId: subscription?.originalTransactionId,
            openId: openId, customerId: openId,
            productId: askedDetails.compactMap { $0["product_id"]?.text }.min() ?? delivery?.transaction?.productId
                ?? answerDetails.compactMap { $0["product_id"]?.text }.min(),
            openedAt: businessTimes.min() ?? own.map(\.recordedAt).min() ?? 0,
            lastRecordedAt: (own + repeats + (delivery.map { [$0] } ?? [])).map(\.recordedAt).max() ?? 0,
            decision: first?.decision, decisionRule: first?.rule, outcome: outcome, outcomeAt: outcomeAt,
            reason: askedDetails.compactMap { $0["refund_request_reason"]?.text }.min(),
            orderAmount: delivery.flatMap(Self.money),
            refundedAmount: refunded,
            revocationDate: nil, revocationReason: nil, revocationType: nil, revocationPercentage: nil,
            deliveryPosition: delivery?.position,
            inquiries: inquiryRows, answers: answerRows, refundOutcomes: outcomeRows, appleNotifications: [],
            links: Array(Set((own + repeats + linkFacts).map(\.position) + (delivery.map { [$0.position] } ?? []))).sorted())
    }

    /// The amount a WeChat fact states (delivery ActualPrice, refund RefundFee), in milli-CNY.
    static func money(_ f: Fact) -> RefundCase.Money? {
        guard let price = f.transaction?.price else { return nil }
        return RefundCase.Money(milliunits: price, currency: f.transaction?.currency ?? "CNY")
    }
}

import Foundation
import HTTPServer
import LedgerCore
import LedgerStore
import WeChatPay

/// Use case: WeChat's message push (URL check and xpay events, with the ledger's answer to a refund
/// inquiry) and the xpay helpers for app backends (contract state, signing parameters).
struct WeChatPushDesk: Sendable {
    let receiver: PushReceiver?
    let refusal: String
    let policy: RefundPolicy
    let signer: AppleSubscribeSigner?
    let intake: NotificationIntake
    let store: Store

    init(configuration c: LedgerConfiguration.WeChat, intake: NotificationIntake, store: Store) throws(LedgerAppError) {
        self.intake = intake
        self.store = store
        do {
            policy = try c.refundPolicyJSON.map { data throws(RefundPolicyError) in try RefundPolicy.fromJSON(data) } ?? .default
        } catch {
            throw .configuration("wechat.refundPolicy: \(error)")
        }
        if let appId = c.appId, let token = c.token {
            do {
                let key = try c.aesKey.map { s throws(WeChatPushError) in try EncodingAESKey(s.value) }
                let previous = try c.previousAESKey.map { s throws(WeChatPushError) in try EncodingAESKey(s.value) }
                receiver = PushReceiver(config: try WeChatPushConfig(
                    appId: appId, token: token.value, aesKey: key, previousAESKey: previous, allowPlaintext: c.allowPlaintext))
            } catch {
                throw .configuration("WeChat: \(error.message)")
            }
            refusal = ""
        } else {
            receiver = nil
            refusal = "WeChat is not configured: set LEDGER_WECHAT_APPID and LEDGER_WECHAT_TOKEN (and LEDGER_WECHAT_AES_KEY for secure mode)"
        }
        if let offerId = c.offerId, let appKey = c.appKey {
            do { signer = try AppleSubscribeSigner(offerId: offerId, appKey: appKey.value) } catch {
                throw .configuration("WeChat sign params: \(error.message)")
            }
        } else {
            signer = nil
        }
    }
}

/// The push answer: WeChat's format (XML or JSON), possibly encrypted.
struct WeChatReply: Sendable {
    var body: Data
    var contentType: String
}

/// A WeChat-side refusal with its own code (not configured, bad signature, …).
extension WeChatPushDesk {
    private func requireReceiver() throws -> PushReceiver {
        guard let receiver else {
            intake.count(source: "wechat", outcome: "not_configured")
            throw ServiceFailure(422, "wechat_not_configured", refusal)
        }
        return receiver
    }

    /// WeChat's URL check: echoes `echostr` when the signature holds.
    func verifyURL(query: [String: String]) throws -> String {
        let receiver = try requireReceiver()
        do { return try receiver.verifyURL(PushQuery(query)) } catch {
            intake.count(source: "wechat", outcome: error.code)
            throw error
        }
    }

    /// Verifies and decrypts the push, stores it (with the ledger's answer, for a refund inquiry,
    /// in the same transaction), then replies in the push's own format — only after the commit.
    func handle(query: [String: String], body: Data, remoteAddress: String?) async throws -> WeChatReply {
        let receiver = try requireReceiver()
        let note: XPayNotification
        do {
            note = try XPayNotification(receiver.open(query: PushQuery(query), body: body))
        } catch {
            intake.count(source: "wechat", outcome: error.code)
            intake.log.warn("wechat push refused", ["code": error.code, "remote": remoteAddress ?? "-"])
            throw error
        }
        var stream: String?
        if case .byOrder(let ids, _) = note.stream {
            stream = try await subscriptionStream(forOrders: ids, dedupeKey: note.dedupeKey)
        }
        let event = note.event(resolvedStream: stream)
        var batch = [event]
        batch += try await links(for: note, into: event.streamId)
        var reply = PushReply.success
        if case .refundInquiry = note.message {
            let (decision, answerEvent) = try await answer(event, note: note)
            reply = .refundAnswer(decision)
            if let answerEvent { batch.append(answerEvent) }
        }
        let outcomes = try await intake.append(batch, source: "wechat")
        if case .refundInquiry(let inquiry) = note.message, outcomes.count > 1, outcomes.last!.duplicate,
           let order = inquiry.payOrderId, let stored = try await storedAnswer(payOrderId: order) {
            // A concurrent asking stored its answer first: repeat that one, word for word.
            reply = .refundAnswer(stored)
        }
        let replyBody = try receiver.reply(reply, to: note.push)
        return WeChatReply(body: replyBody, contentType: note.push.format == .xml ? "text/xml; charset=utf-8" : "application/json")
    }

    /// Where a push that names only orders (refund inquiry, refund notify) goes: the stream its
    /// earlier copy went to when WeChat re-pushes it (the dedupe key is unique per stream, so a
    /// re-push routed anew after the order's delivery arrived would be stored twice); else the
    /// subscription stream of the delivery that paid one of `orderIds`, if it is known.
    func subscriptionStream(forOrders orderIds: [String], dedupeKey: String) async throws(StoreError) -> String? {
        if let earlier = try await store.events.events(dedupeKeys: [dedupeKey]).first(where: { $0.event.source == .wechat }) {
            return earlier.event.streamId
        }
        let deliveries = try await store.events.events(dedupeKeys: orderIds.map(DedupeKey.wechatDelivery))
        return deliveries.first { StreamId($0.event.streamId).isSubscription }?.event.streamId
    }

    /// When a subscription's delivery arrives, events that waited in provisional streams for its
    /// order (an early refund inquiry) are tied to the subscription by a link event.
    func links(for note: XPayNotification, into stream: String) async throws(StoreError) -> [NewEvent] {
        guard case .goodsDelivery = note.message, StreamId(stream).isSubscription else { return [] }
        let candidates = note.orderIds.map { StreamId.wechatOrder($0).text }
        let waiting = Set(try await store.events.read(streams: candidates).map(\.event.streamId))
        return note.orderIds.filter { waiting.contains(StreamId.wechatOrder($0).text) }.map { order in
            OrderLink.event(orderId: order, provisionalStream: StreamId.wechatOrder(order).text,
                            subscriptionStream: stream, at: note.signedAt)
        }
    }

    /// The answer to a refund inquiry: the stored one when this order was already answered (Apple
    /// asks up to three times; all get the same answer), else a decision from the ledger's facts:
    /// the inquiry's own (`FactDecoder`, the one reading of the event about to be stored), its
    /// order's (deliveries, aliases, refunds, links and the subscription's WeChat facts, joined by
    /// order ids whichever arrived first) and the customer's earlier refund cases.
    func answer(_ event: NewEvent, note: XPayNotification) async throws -> (RefundDecision, NewEvent?) {
        let inquiry = try RefundEvidence.inquiry(in: FactDecoder.facts(of: event))
        let order = inquiry.transactionId ?? ""
        if let stored = try await storedAnswer(payOrderId: order) { return (stored, nil) }
        let known = try await store.refunds.orderFacts(naming: [order])
        var facts = try RefundEvidence.facts(for: inquiry, known: known, customerRefundCases: [])
        if let customer = facts.customer {
            let keys = try await store.projections.subscriptions(customerId: customer)
            let cases = RefundCaseFold.cases(from: try await store.refunds.subscriptionFacts(keys)).filter { $0.openId == customer }
            facts = try RefundEvidence.facts(for: inquiry, known: known, customerRefundCases: cases)
        }
        let decision = policy.decide(facts)
        return (decision, RefundInquiryAnswer.event(decision, for: note, streamId: event.streamId))
    }

    /// The answer already stored for `payOrderId`, word for word: its `refund_answer` fact. An
    /// answer committed by a concurrent asking whose facts the catch-up has not derived yet (the
    /// append transaction records them in the usual case) is read from its event through the same
    /// decoder, so an order is never answered twice differently.
    func storedAnswer(payOrderId order: String) async throws -> RefundDecision? {
        if let fact = try await store.refunds.answers(payOrderId: order).first { return RefundDecision(answer: fact) }
        guard let event = try await store.events.events(dedupeKeys: [RefundInquiryAnswer.caseKey(payOrderId: order)]).first else {
            return nil
        }
        return FactDecoder.facts(of: event).lazy.compactMap(RefundDecision.init(answer:)).first
    }

    /// The xpay contract state of `openId` for `productId`, from the facts of the customer's
    /// subscriptions.
    func contract(openId: String, productId: String) async throws -> WeChatContractState {
        let facts = try await store.projections.facts(of: try await store.projections.subscriptions(customerId: openId))
        return WeChatContractState.of(openId: openId, productId: productId, facts: facts)
    }

    /// Signing parameters for `wx.requestAppleSubscribeSign`.
    func signParams(_ request: AppleSubscribeSignRequest, sessionKey: String) throws -> AppleSubscribeSignParams {
        guard let signer else {
            throw ServiceFailure(422, "wechat_not_configured", "signing needs LEDGER_WECHAT_OFFER_ID and LEDGER_WECHAT_APP_KEY")
        }
        do { return try signer.sign(request, sessionKey: sessionKey) } catch {
            throw ServiceFailure(400, error.code, error.message)
        }
    }
}

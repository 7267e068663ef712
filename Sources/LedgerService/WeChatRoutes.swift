import Foundation
import HTTPServer
import LedgerCore
import LedgerStore
import WeChatPay

/// WeChat's message push (URL check and xpay events) and the xpay helpers for app backends.
struct WeChatWebhook: Sendable {
    let receiver: PushReceiver?
    let refusal: String
    let policy: RefundPolicy
    let signer: AppleSubscribeSigner?

    init(configuration c: LedgerConfiguration.WeChat) throws(LedgerAppError) {
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

extension LedgerApp {
    func addWeChatRoutes(to router: inout Router) {
        router.add("GET", "/v1/wechat/notifications") { [self] request in
            guard let receiver = wechat.receiver else {
                return .error(status: 422, code: "wechat_not_configured", message: wechat.refusal)
            }
            do {
                let echo = try receiver.verifyURL(PushQuery(request.query))
                return .text(200, echo, contentType: "text/plain; charset=utf-8")
            } catch let error as WeChatPushError {
                countNotification(source: "wechat", outcome: error.code)
                return .error(status: error.kind.httpStatus, code: error.code, message: error.message)
            } catch {
                return .error(status: 400, code: "malformed", message: "\(error)")
            }
        }
        router.add("POST", "/v1/wechat/notifications") { [self] request in await wechatPush(request) }
        router.add("GET", "/v1/wechat/contracts") { [self] request in
            await authorized(request, .app) { await contract(request) }
        }
        router.add("POST", "/v1/wechat/sign-params") { [self] request in
            await authorized(request, .app) { signParams(request) }
        }
    }

    /// Verifies and decrypts the push, stores it (with the ledger's answer, for a refund inquiry,
    /// in the same transaction), then replies in the push's own format: 200 only after the commit.
    func wechatPush(_ request: HTTPRequest) async -> HTTPResponse {
        guard let receiver = wechat.receiver else {
            countNotification(source: "wechat", outcome: "not_configured")
            return .error(status: 422, code: "wechat_not_configured", message: wechat.refusal)
        }
        let note: XPayNotification
        do {
            note = try XPayNotification(receiver.open(query: PushQuery(request.query), body: request.body))
        } catch {
            countNotification(source: "wechat", outcome: error.code)
            log.warn("wechat push refused", ["code": error.code, "remote": request.remoteAddress ?? "-"])
            return .error(status: error.kind.httpStatus, code: error.code, message: error.message)
        }
        do {
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
            let outcomes = try await store.append(batch)
            countNotification(source: "wechat", outcome: outcomes[0].duplicate ? "duplicate" : "stored")
            if case .refundInquiry(let inquiry) = note.message, outcomes.count > 1, outcomes.last!.duplicate,
               let order = inquiry.payOrderId, let stored = try await storedAnswer(payOrderId: order) {
                // A concurrent asking stored its answer first: repeat that one, word for word.
                reply = .refundAnswer(stored)
            }
            let body = try receiver.reply(reply, to: note.push)
            return HTTPResponse(status: 200, headers: [("Content-Type", note.push.format == .xml ? "text/xml; charset=utf-8" : "application/json")], body: body)
        } catch let error as StoreError {
            return storeFailure(error, source: "wechat")
        } catch {
            log.error("wechat push could not be answered", ["error": "\(error)"])
            return .error(status: 500, code: "internal", message: "the push could not be processed; nothing was stored")
        }
    }

    /// Where a push that names only orders (refund inquiry, refund notify) goes: the stream its
    /// earlier copy went to when WeChat re-pushes it (the dedupe key is unique per stream, so a
    /// re-push routed anew after the order's delivery arrived would be stored twice); else the
    /// subscription stream of the delivery that paid one of `orderIds`, if it is known.
    func subscriptionStream(forOrders orderIds: [String], dedupeKey: String) async throws(StoreError) -> String? {
        if let earlier = try await store.events(dedupeKeys: [dedupeKey]).first(where: { $0.event.source == .wechat }) {
            return earlier.event.streamId
        }
        let deliveries = try await store.events(dedupeKeys: orderIds.map { "deliver:" + $0 })
        let provisional = Set(orderIds.map { StreamNames.wechatProvisional(orderId: $0) })
        return deliveries.first { !provisional.contains($0.event.streamId) && !$0.event.streamId.hasPrefix("wechat:") }?.event.streamId
    }

    /// When a subscription's delivery arrives, events that waited in provisional streams for its
    /// order (an early refund inquiry) are tied to the subscription by a link event.
    func links(for note: XPayNotification, into stream: String) async throws(StoreError) -> [NewEvent] {
        guard case .goodsDelivery = note.message, !stream.hasPrefix("wechat:") else { return [] }
        let candidates = note.orderIds.map { StreamNames.wechatProvisional(orderId: $0) }
        let waiting = Set(try await store.read(streams: candidates).map(\.event.streamId))
        return note.orderIds.filter { waiting.contains(StreamNames.wechatProvisional(orderId: $0)) }.map { order in
            OrderLink.event(orderId: order, provisionalStream: StreamNames.wechatProvisional(orderId: order),
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
        let known = try await refundFacts.orderFacts(naming: [order])
        var facts = try RefundEvidence.facts(for: inquiry, known: known, customerRefundCases: [])
        if let customer = facts.customer {
            let keys = try await queries.subscriptions(customerId: customer)
            let cases = RefundCaseFold.cases(from: try await refundFacts.subscriptionFacts(keys)).filter { $0.openId == customer }
            facts = try RefundEvidence.facts(for: inquiry, known: known, customerRefundCases: cases)
        }
        let decision = wechat.policy.decide(facts)
        return (decision, RefundInquiryAnswer.event(decision, for: note, streamId: event.streamId))
    }

    /// The answer already stored for `payOrderId`, word for word: its `refund_answer` fact. An
    /// answer committed by a concurrent asking whose facts the catch-up has not derived yet (the
    /// append transaction records them in the usual case) is read from its event through the same
    /// decoder, so an order is never answered twice differently.
    func storedAnswer(payOrderId order: String) async throws -> RefundDecision? {
        if let fact = try await refundFacts.answers(payOrderId: order).first { return RefundDecision(answer: fact) }
        guard let event = try await store.events(dedupeKeys: [RefundInquiryAnswer.caseKey(payOrderId: order)]).first else {
            return nil
        }
        return FactDecoder.facts(of: event).lazy.compactMap(RefundDecision.init(answer:)).first
    }

    func contract(_ request: HTTPRequest) async -> HTTPResponse {
        guard let openId = request.query["openid"], !openId.isEmpty,
              let productId = request.query["product_id"], !productId.isEmpty else {
            return .error(status: 400, code: "invalid_parameter", message: "give both openid and product_id, e.g. ?openid=o…&product_id=com.example.monthly")
        }
        do {
            let facts = try await queries.facts(of: try await queries.subscriptions(customerId: openId))
            let state = WeChatContractState.of(openId: openId, productId: productId, facts: facts)
            return .json(200, state.responseJSON())
        } catch {
            return projectionFailure(error)
        }
    }

    func signParams(_ request: HTTPRequest) -> HTTPResponse {
        guard let signer = wechat.signer else {
            return .error(status: 422, code: "wechat_not_configured",
                          message: "signing needs LEDGER_WECHAT_OFFER_ID and LEDGER_WECHAT_APP_KEY")
        }
        guard let body = try? JSONSerialization.jsonObject(with: request.body) as? [String: Any] else {
            return .error(status: 400, code: "malformed", message: "the body must be a JSON object with openid, productId, goodsPrice, sessionKey and optional activitySellingPrice and attach")
        }
        guard let openId = body["openid"] as? String, let productId = body["productId"] as? String,
              let price = body["goodsPrice"] as? Int, let sessionKey = body["sessionKey"] as? String else {
            return .error(status: 400, code: "invalid_parameter", message: "openid (string), productId (string), goodsPrice (integer fen) and sessionKey (string) are required")
        }
        var intro: Int?
        if let v = body["activitySellingPrice"] {
            guard let n = v as? Int else { return .error(status: 400, code: "invalid_parameter", message: "activitySellingPrice must be an integer (fen); 0 means a free trial") }
            intro = n
        }
        let attach = body["attach"] as? String ?? ""
        do {
            let params = try signer.sign(AppleSubscribeSignRequest(openid: openId, productId: productId, goodsPrice: price,
                                                                  activitySellingPrice: intro, attach: attach), sessionKey: sessionKey)
            return JSONBody.response(200, ["signData": params.signData, "paySig": params.paySig, "signature": params.signature])
        } catch {
            return .error(status: 400, code: error.code, message: error.message)
        }
    }
}

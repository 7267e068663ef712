import Crypto
import LedgerMetrics
import Foundation
import LedgerCore
import LedgerStore
import WeChatPay

/// Use case: WeChat's message push (URL check and xpay events, with the ledger's answer to a refund
/// inquiry) and the xpay helpers for app backends (contract state, signing parameters).
///
/// A push is verified (signature, decryption, appid), checked for freshness (plaintext mode: the
/// replay window and the nonce memory; other modes: a stale timestamp is only counted), turned into
/// an event — an authentic push the ledger cannot fully interpret is stored as evidence, never
/// refused — and appended with the links its order needs; 200 only after the commit.
struct WeChatPushDesk: Sendable {
    let receiver: PushReceiver?
    let refusal: String
    let policy: RefundPolicy
    /// SHA-256 (hex, 16 digits) of the policy's canonical JSON: named in every answer's evidence and
    /// in the `config/wechat-refund-policy` record.
    let policyDigest: String
    let signer: AppleSubscribeSigner?
    let intake: NotificationIntake
    let store: Store
    let metrics: MetricsRegistry
    let log: Log
    let replayWindow: ReplayWindow
    let refundBudget: Duration
    let refundAnswerDeadline: Duration
    let fallbackVerdict: RefundDecision.Verdict
    let linker: WeChatOrderLinker
    /// Unix seconds now (tests move it).
    let clock: @Sendable () -> Int64

    init(configuration c: LedgerConfiguration.WeChat, intake: NotificationIntake, store: Store, metrics: MetricsRegistry, log: Log,
         clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) throws(LedgerAppError) {
        self.intake = intake
        self.store = store
        self.metrics = metrics
        self.log = log
        self.clock = clock
        do {
            policy = try c.refundPolicyJSON.map { data throws(RefundPolicyError) in try RefundPolicy.fromJSON(data) } ?? .default
        } catch {
            throw .configuration("wechat.refundPolicy: \(error)")
        }
        policyDigest = String(Hex.encode(Digest.sha256([UInt8](policy.canonicalJSON))).prefix(16))
        replayWindow = ReplayWindow(seconds: Int64(c.replayWindowSeconds))
        refundBudget = .milliseconds(c.refundBudgetMs)
        refundAnswerDeadline = .milliseconds(c.refundAnswerDeadlineMs)
        fallbackVerdict = c.refundFallback == "refuse" ? .refuse : .allow
        linker = WeChatOrderLinker(store: store, log: log)
        metrics.describeWeChat()
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

extension WeChatPushDesk {
    private func requireReceiver() throws -> PushReceiver {
        guard let receiver else {
            intake.count(source: "wechat", outcome: "not_configured")
            throw ServiceFailure(.notConfigured, "wechat_not_configured", refusal)
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

    /// Verifies, checks freshness, stores (with the ledger's answer, for a refund inquiry, in the
    /// same transaction), links the order, then replies in the push's own format — only after the commit.
    func handle(query: [String: String], body: Data, remoteAddress: String?) async throws -> WeChatReply {
        let arrival = ContinuousClock.now
        let receiver = try requireReceiver()
        let push: ReceivedPush
        do {
            switch try receiver.openKeepingUnreadable(query: PushQuery(query), body: body) {
            case .opened(let opened): push = opened
            case .unreadable(let kept): return try await keep(kept)
            }
        } catch let error as WeChatPushError {
            refused(error, remoteAddress)
            throw error
        }
        let nonceHash = try await checkFreshness(push, body: body, remoteAddress: remoteAddress)
        let note = XPayNotification(push)
        if let reason = note.unreadableReason {
            metrics.increment("ledger_wechat_unreadable_pushes_total", ["event": String((push.event ?? push.msgType ?? "unknown").prefix(64))])
            log.warn("an authentic WeChat push could not be interpreted; stored as evidence", [
                "event": push.event ?? "-", "reason": reason, "stream": note.stream,
            ])
        }
        if note.asking != nil {
            return try await answerInquiry(note, receiver: receiver, arrival: arrival, nonceHash: nonceHash)
        }
        if note.unreadableReason != nil, case .refundInquiry = note.message {
            return try await answerUnreadableInquiry(note, receiver: receiver, arrival: arrival, nonceHash: nonceHash)
        }
        noticeSubscriptionProductWithoutInfo(note)
        let group = note.orderIds.isEmpty ? nil : try await store.wechat.orderGroup(naming: note.orderIds)
        let event = note.event()
        let batch = [event] + (group.map { linker.links(for: note, group: $0) } ?? [])
        let outcomes = try await intake.append(batch, source: "wechat")
        try await markNonceOfDuplicate(nonceHash, push.nonce, outcomes[0])
        try await keepConflictingRepush(note, outcomes[0])
        // Re-checked after the commit: a push of the same order committed meanwhile is linked now.
        try await linker.relink(after: note)
        return WeChatReply(body: try receiver.reply(.success, to: push), contentType: contentType(push))
    }

    /// An authentic push that could not be decrypted or parsed, stored as evidence under
    /// `wechat:unreadable:undecryptable` or `…:unparsable`; answered with an empty body (WeChat's
    /// "success" that needs no encryption: there may be no key to encrypt with) after the commit.
    private func keep(_ kept: PushReceiver.UnreadablePush) async throws -> WeChatReply {
        let event = NewEvent(
            streamId: StreamId.wechatUnreadable(event: kept.decrypted ? "unparsable" : "undecryptable").text, dedupeKey: kept.dedupeKey,
            source: .wechat, type: UnreadableEvidence.type,
            payload: UnreadableEvidence.payload(code: kept.reason.code, reason: kept.reason.message), raw: kept.raw)
        _ = try await intake.keepUnreadable(event, source: "wechat", code: kept.reason.code, reason: kept.reason.message)
        return WeChatReply(body: Data(), contentType: kept.format == .xml ? "text/xml; charset=utf-8" : "application/json")
    }

    /// A plaintext push's nonce is marked in its append's transaction (LedgerStore's
    /// `WeChatNonceHook`); a push answered as a duplicate was stored earlier under another nonce,
    /// so this one is marked here, before the 200 — a failure is answered 503 and WeChat retries.
    private func markNonceOfDuplicate(_ bodyHash: String?, _ nonce: String, _ outcome: AppendOutcome) async throws {
        guard let bodyHash, outcome.duplicate else { return }
        try await store.wechat.markNonceStored(nonce, bodySHA256: bodyHash, position: outcome.position)
    }

    /// A delivery without AppleSubscriptionInfo is an ordinary purchase (seed 000 §4.3: only Apple
    /// subscription deliveries carry it) and grants nothing. When its product is one the configured
    /// catalog lists (it grants entitlements: a subscription product, auto-renewing or with
    /// `durationDays`) the customer paid for access the ledger cannot give: counted
    /// (`ledger_wechat_subscription_deliveries_without_info_total`) and logged for the operator, the
    /// push stored as the ordinary purchase it reads as. The default catalog (every product named
    /// after itself) says nothing about which products grant access, so it alerts on none.
    private func noticeSubscriptionProductWithoutInfo(_ note: XPayNotification) {
        guard note.isReadable, case .goodsDelivery(let d) = note.message, d.subscription == nil, let product = d.productId else { return }
        let catalog = store.configuration.catalog
        guard !catalog.grantsProductIds, catalog.products[product] != nil else { return }
        metrics.increment("ledger_wechat_subscription_deliveries_without_info_total")
        log.warn("a WeChat delivery of a catalog subscription product has no AppleSubscriptionInfo; stored as an ordinary purchase, it grants nothing",
                 ["product_id": String(product.prefix(128)), "order": String((d.outTradeNo ?? "-").prefix(128))])
    }

    /// A push answered as a duplicate whose content differs from the stored copy (WeChat's own id
    /// names two different messages): counted (`ledger_wechat_conflicting_repushes_total`), logged
    /// and kept as evidence (`XPayNotification.conflictEvidence`) before the 200 — the first copy
    /// stays in force, but the second is never dropped without a trace. An ordinary re-push (the
    /// same message, new CreateTime/nonce) costs one indexed read.
    private func keepConflictingRepush(_ note: XPayNotification, _ outcome: AppendOutcome) async throws {
        guard outcome.duplicate, note.isReadable,
              let stored = try await store.wechat.stored(stream: note.stream, dedupeKey: note.dedupeKey),
              let evidence = note.conflictEvidence(storedPayload: stored.event.payload) else { return }
        let event = String(XPayNotification.bucket(note.push.event ?? note.push.msgType) ?? "unknown")
        metrics.increment("ledger_wechat_conflicting_repushes_total", ["event": event])
        log.warn("a WeChat re-push differs from the copy stored under the same key; the first stays in force, this one is kept as evidence",
                 ["event": event, "stream": note.stream, "key": note.dedupeKey, "stored_position": String(stored.position)])
        _ = try await intake.append([evidence], source: "wechat")
    }

    private func contentType(_ push: ReceivedPush) -> String {
        push.format == .xml ? "text/xml; charset=utf-8" : "application/json"
    }

    private func refused(_ error: WeChatPushError, _ remoteAddress: String?) {
        intake.count(source: "wechat", outcome: error.code)
        intake.log.warn("wechat push refused", ["code": error.code, "remote": remoteAddress ?? "-"])
    }

    /// The replay window. Plaintext: a stale timestamp is refused, and the nonce may carry this
    /// body only (returns the body's hash, to mark the nonce stored). Other modes: counted.
    private func checkFreshness(_ push: ReceivedPush, body: Data, remoteAddress: String?) async throws -> String? {
        let skew = replayWindow.skew(of: push.timestamp, now: clock())
        guard push.mode == .plaintext else {
            if let skew {
                metrics.increment("ledger_wechat_stale_timestamps_total", ["mode": push.mode.rawValue])
                log.info("wechat push with a timestamp outside the replay window; stored (its signature covers the body)",
                         ["skew_seconds": skew == .max || skew == -.max ? "out of range" : String(skew), "mode": push.mode.rawValue])
            }
            return nil
        }
        if let skew {
            let error = WeChatPushError.staleTimestamp(skew: skew, window: replayWindow.seconds)
            refused(error, remoteAddress)
            throw error
        }
        let hash = Hex.encode(Digest.sha256([UInt8](body)))
        if try await store.wechat.claimNonce(push.nonce, timestamp: push.timestamp, bodySHA256: hash,
                                             windowSeconds: Int(replayWindow.seconds)) == .reused {
            let error = WeChatPushError.nonceReused
            refused(error, remoteAddress)
            throw error
        }
        return hash
    }

    // MARK: refund inquiries

    /// One asking of a refund inquiry: decided from the ledger's facts in one read transaction
    /// within the budget (else the configured fallback, rule `deadline`), stored with the asking,
    /// then answered — or 503 when not even that could be stored before WeChat stops waiting.
    private func answerInquiry(_ note: XPayNotification, receiver: PushReceiver, arrival: ContinuousClock.Instant,
                               nonceHash: String?) async throws -> WeChatReply {
        guard let (order, refundTime) = note.asking else { throw ServiceFailure(.defect, "internal", "not a refund inquiry") }
        let answerKey = RefundInquiryAnswer.key(payOrderId: order, refundTime: refundTime)
        let inquiryEvent = note.event()
        let budgetEnd = arrival + refundBudget
        let store = self.store, stream = note.stream
        let remaining = max(budgetEnd - ContinuousClock.now, .milliseconds(1))
        let read = await Deadline.run(until: budgetEnd) {
            try await store.wechat.refundDecisionInputs(payOrderId: order, stream: stream, answerKey: answerKey, timeout: remaining)
        }
        var decision: RefundDecision
        var inputs: RefundDecisionInputs?
        var repeated = false
        switch read {
        case .value(let i):
            inputs = i
            if let stored = i.storedAnswer, let d = RefundInquiryAnswer.decision(fromPayload: stored.event.payload) {
                decision = d
                repeated = true
            } else {
                do {
                    decision = try decide(note, inputs: i)
                } catch {
                    log.error("a refund inquiry could not be decided from the facts; fallback answer", ["error": "\(error)", "pay_order_id": order])
                    decision = fallback(order, note, reason: "decision_error", why: "\(error)")
                }
            }
        case .timedOut:
            decision = fallback(order, note, reason: "deadline", why: "the decision's read did not finish within the budget")
        case .failed(let error):
            decision = fallback(order, note, reason: "deadline", why: "the decision's read failed: \((error as? StoreError)?.isUnavailable == true ? "database unavailable or too slow" : "\(error)")")
        }
        let decidedInMs = Int64((ContinuousClock.now - arrival).milliseconds)
        if !repeated {
            metrics.observe("ledger_wechat_refund_decision_seconds", value: Double(decidedInMs) / 1000)
            if decision.rule == "deadline" || decision.rule == "decision_error" {
                metrics.increment("ledger_wechat_refund_fallbacks_total", ["reason": decision.rule])
                log.warn("refund inquiry answered with the fallback", ["pay_order_id": order, "reason": decision.rule, "decided_in_ms": decidedInMs])
            }
        }
        guard let answerEvent = RefundInquiryAnswer.event(decision, for: note, decidedInMs: decidedInMs,
                                                          budgetMs: Int64(refundBudget.milliseconds),
                                                          policyDigest: decision.rule == "deadline" || decision.rule == "decision_error" ? nil : policyDigest) else {
            throw ServiceFailure(.defect, "internal", "the refund answer could not be built")
        }
        // Stored before it is sent; not stored in time → 503, WeChat asks again (the stored answer
        // is then repeated if the append did land late).
        let intake = self.intake
        let stored = await Deadline.run(until: arrival + refundAnswerDeadline) {
            try await intake.append([inquiryEvent, answerEvent], source: "wechat")
        }
        let outcomes: [AppendOutcome]
        switch stored {
        case .value(let o): outcomes = o
        case .failed(let error): throw error
        case .timedOut:
            metrics.increment("ledger_wechat_refund_answers_not_stored_total")
            log.error("a refund answer could not be stored before WeChat's deadline; answered 503 so WeChat asks again", ["pay_order_id": order])
            throw ServiceFailure(.unavailable(retryAfterSeconds: 1), "refund_answer_not_stored",
                                 "the answer could not be stored within \(refundAnswerDeadline.milliseconds) ms; nothing is sent unstored — ask again")
        }
        try await markNonceOfDuplicate(nonceHash, note.push.nonce, outcomes[0])
        // The answer is stored and WeChat is waiting (3 s): keeping a conflicting copy of the asking
        // must not cost the reply — a failure is logged (the trace), not answered.
        do { try await keepConflictingRepush(note, outcomes[0]) } catch {
            log.warn("a conflicting re-push of a refund inquiry could not be kept as evidence; its answer is sent",
                     ["stream": note.stream, "error": "\(error)"])
        }
        if outcomes[1].duplicate, let stored = try await store.wechat.storedAnswer(stream: stream, answerKey: answerKey),
           let d = RefundInquiryAnswer.decision(fromPayload: stored.event.payload) {
            // A concurrent copy of this asking stored its answer first: that one, word for word.
            decision = d
        }
        let reply = try receiver.reply(.refundAnswer(decision), to: note.push)
        // Relinked after every commit of an asking (not only when the decision's read saw a
        // subscription): an inquiry racing its own delivery commits after the delivery re-checked
        // its group, so only this check sees both. Awaited up to the answer's deadline: WeChat
        // waits 3 s for the reply and the answer is already stored, so past it the reply goes out
        // and the relink finishes on its own (its append is an idempotent link event). A failure
        // is logged, not answered: any later push of the order or `ledger reconcile --wechat`
        // links it. Skipped only when the decision's read did not finish (the database is
        // struggling and the reply must not wait on it): the reconciliation links those.
        guard inputs != nil else { return WeChatReply(body: reply, contentType: contentType(note.push)) }
        let linker = linker, log = log
        switch await Deadline.run(until: arrival + refundAnswerDeadline, { try await linker.relink(after: note) }) {
        case .value: break
        case .failed(let error):
            log.warn("linking a refund inquiry's order stream failed; a later push of the order or `ledger reconcile --wechat` links it",
                     ["stream": note.stream, "error": "\(error)"])
        case .timedOut:
            metrics.increment("ledger_wechat_relinks_past_deadline_total")
            log.warn("linking a refund inquiry's order stream outlasted the answer's deadline; replied, the link finishes on its own",
                     ["stream": note.stream])
        }
        return WeChatReply(body: reply, contentType: contentType(note.push))
    }

    /// An authentic refund inquiry the ledger cannot read (no or `0` refund_time, a missing or
    /// over-long pay_order_id, a time of the wrong magnitude) still gets an `IosRefundQueryResponse`
    /// with `result_code` and `evidence` (seed 000 §7.4: evidence is required): the configured
    /// fallback verdict, rule `unreadable`, the reason in the evidence — stored with the asking
    /// before it is sent, and repeated word for word to a re-push of the same asking.
    private func answerUnreadableInquiry(_ note: XPayNotification, receiver: PushReceiver, arrival: ContinuousClock.Instant,
                                         nonceHash: String?) async throws -> WeChatReply {
        guard case .refundInquiry(let q) = note.message, let reason = note.unreadableReason else {
            throw ServiceFailure(.defect, "internal", "not an unreadable refund inquiry")
        }
        let stream = note.stream, answerKey = RefundInquiryAnswer.unreadableKey(note)
        var decision: RefundDecision
        if let stored = try await store.wechat.storedAnswer(stream: stream, answerKey: answerKey),
           let d = RefundInquiryAnswer.decision(fromPayload: stored.event.payload) {
            decision = d
        } else {
            decision = RefundDecision.fallback(
                fallbackVerdict, reason: "unreadable", budgetMs: Int64(refundBudget.milliseconds),
                payOrderId: q.payOrderId.map { String($0.prefix(128)) } ?? "",
                askedAt: q.refundTime.flatMap { $0 > 0 ? epochMillisOrNil(seconds: $0) : nil }, why: reason,
                resultInfo: "the ledger could not read this inquiry (\(reason)); configured fallback answer")
            metrics.increment("ledger_wechat_refund_fallbacks_total", ["reason": "unreadable"])
            log.warn("an unreadable refund inquiry answered with the fallback", ["reason": reason, "stream": stream])
        }
        let decidedInMs = Int64((ContinuousClock.now - arrival).milliseconds)
        guard let answerEvent = RefundInquiryAnswer.unreadableEvent(decision, for: note, decidedInMs: decidedInMs,
                                                                    budgetMs: Int64(refundBudget.milliseconds)) else {
            throw ServiceFailure(.defect, "internal", "the refund answer could not be built")
        }
        let outcomes = try await intake.append([note.event(), answerEvent], source: "wechat")
        try await markNonceOfDuplicate(nonceHash, note.push.nonce, outcomes[0])
        if outcomes[1].duplicate, let stored = try await store.wechat.storedAnswer(stream: stream, answerKey: answerKey),
           let d = RefundInquiryAnswer.decision(fromPayload: stored.event.payload) {
            decision = d
        }
        return WeChatReply(body: try receiver.reply(.refundAnswer(decision), to: note.push), contentType: contentType(note.push))
    }

    /// The policy's decision on the facts read (`RefundEvidence` folds them like every other reader).
    private func decide(_ note: XPayNotification, inputs: RefundDecisionInputs) throws -> RefundDecision {
        let inquiry = try RefundEvidence.inquiry(in: FactDecoder.facts(of: note.event()))
        let cases = inputs.customer.map { customer in
            RefundCaseFold.cases(from: inputs.customerFacts).filter { $0.openId == customer }
        } ?? []
        let facts = try RefundEvidence.facts(for: inquiry, known: inputs.known, customerRefundCases: cases,
                                             deliveryRawSHA256: { inputs.rawSHA256[$0] },
                                             catalogPeriods: store.configuration.catalog.periods)
        return policy.decide(facts, policyDigest: policyDigest)
    }

    private func fallback(_ order: String, _ note: XPayNotification, reason: String, why: String) -> RefundDecision {
        RefundDecision.fallback(fallbackVerdict, reason: reason, budgetMs: Int64(refundBudget.milliseconds), payOrderId: order,
                                askedAt: note.asking.flatMap { epochMillisOrNil(seconds: $0.refundTime) }, why: why)
    }

    // MARK: app backends

    /// The xpay contract state of `openId` for `productId`, from the contract projection
    /// (`WeChatContractState.of` of the customer's subscriptions' facts, kept in the append).
    func contract(openId: String, productId: String) async throws -> WeChatContractState {
        try await store.wechat.contract(openId: openId, productId: productId)
    }

    /// Signing parameters for `wx.requestAppleSubscribeSign`. Refused while the customer's unsigned
    /// (TERMINATED) contract for the product still has a paid period running: seed 000 §3 签约前提 —
    /// a user who signed and then unsigned may sign again only once the current period has ended.
    func signParams(_ request: AppleSubscribeSignRequest, sessionKey: String) async throws -> AppleSubscribeSignParams {
        guard let signer else {
            throw ServiceFailure(.notConfigured, "wechat_not_configured", "signing needs LEDGER_WECHAT_OFFER_ID and LEDGER_WECHAT_APP_KEY")
        }
        let params: AppleSubscribeSignParams
        do { params = try signer.sign(request, sessionKey: sessionKey) } catch {
            throw ServiceFailure(.invalid, error.code, error.message)
        }
        let state = try await contract(openId: request.openid, productId: request.productId)
        let now = clock() * 1000
        if state.authorizationState == .terminated, let end = state.appleSubscriptionInfo?.renewalDate, end > now {
            throw ServiceFailure(.conflict, "contract_period_running",
                                 "the customer unsigned the contract for \(request.productId) but its paid period runs until "
                                 + "\(Self.iso(end)) (renewal_date \(end)); WeChat allows signing again only after it ends (seed 000 §3, 签约前提)")
        }
        return params
    }

    static func iso(_ ms: EpochMillis) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}

private func epochMillisOrNil(seconds: Int64) -> EpochMillis? {
    let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
    return overflow ? nil : ms
}

extension Duration {
    /// Whole milliseconds.
    var milliseconds: Int {
        let (s, atto) = components
        return Int(s) * 1000 + Int(atto / 1_000_000_000_000_000)
    }
}

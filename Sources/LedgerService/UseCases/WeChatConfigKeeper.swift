import Crypto
import LedgerMetrics
import Foundation
import LedgerCore
import LedgerStore
import WeChatPay

/// The WeChat settings an instance answers with, recorded in `ledger:config` whenever they differ
/// from the last record (like the catalog, `CatalogKeeper`): the refund policy (its canonical JSON
/// and digest, the budget and the fallback) and the push and API keys — by fingerprint only
/// (`WeChatKeyFingerprint`), never a secret. An auditor can then tell which policy decided an
/// answer (its evidence names the digest) and which key opened a push (its `raw` names the
/// fingerprint), and when either changed.
struct WeChatConfigKeeper: Sendable {
    static let policyType = "config/wechat-refund-policy"
    static let keysType = "config/wechat-keys"

    let store: Store
    let log: Log
    let policyRecord: JSONValue
    let keysRecord: JSONValue

    init(configuration c: LedgerConfiguration.WeChat, desk: WeChatPushDesk, store: Store, log: Log) {
        self.store = store
        self.log = log
        policyRecord = [
            "policy": (try? JSONValue(json: desk.policy.canonicalJSON)) ?? .null,
            "budgetMs": .integer(Int64(c.refundBudgetMs)), "answerDeadlineMs": .integer(Int64(c.refundAnswerDeadlineMs)),
            "fallback": .string(c.refundFallback), "evidenceDigest": .string(desk.policyDigest),
        ]
        var keys: [String: JSONValue] = ["allowPlaintext": .bool(c.allowPlaintext), "replayWindowSeconds": .integer(Int64(c.replayWindowSeconds))]
        if let appId = c.appId { keys["appId"] = .string(appId) }
        if let t = c.token { keys["token"] = .string(WeChatKeyFingerprint.token(t.value)) }
        if let k = c.aesKey, let key = try? EncodingAESKey(k.value) { keys["aesKey"] = .string(WeChatKeyFingerprint.aesKey(key)) }
        if let k = c.previousAESKey, let key = try? EncodingAESKey(k.value) { keys["previousAESKey"] = .string(WeChatKeyFingerprint.aesKey(key)) }
        if let k = c.appKey { keys["appKey"] = .string(WeChatKeyFingerprint.secret(k.value, name: "app-key")) }
        if let k = c.appSecret { keys["appSecret"] = .string(WeChatKeyFingerprint.secret(k.value, name: "app-secret")) }
        keysRecord = .object(keys)
    }

    /// Records what changed since the last records; returns the types recorded.
    @discardableResult
    func recordIfChanged() async throws -> [String] {
        let recorded = try await store.events.read(stream: StreamId.ledgerConfig.text)
        var out: [String] = []
        for (type, content) in [(Self.policyType, policyRecord), (Self.keysType, keysRecord)] {
            let digest = Hex.encode(Digest.sha256([UInt8](content.canonicalJSON())))
            let last = recorded.last { $0.event.type == type }
            if let last, (try? JSONValue(json: last.event.payload))?.text("digest") == digest { continue }
            var payload = content.objectValue ?? [:]
            payload["digest"] = .string(digest)
            payload["instance"] = .string(ProcessInfo.processInfo.hostName + ":" + String(getpid()))
            let body = JSONValue.object(payload).canonicalJSON()
            let event = NewEvent(streamId: StreamId.ledgerConfig.text,
                                 dedupeKey: "\(type.dropFirst("config/".count)):\(digest):after:\(last?.position ?? 0)",
                                 source: .ledger, type: type, signedAt: Clock.nowMillis(), payload: body, raw: body)
            if try await !store.events.append(event).duplicate {
                out.append(type)
                log.info("recorded the WeChat settings", ["type": type, "digest": String(digest.prefix(16))])
            }
        }
        return out
    }
}

/// `/metrics` for WeChat, read at scrape time: orphan order streams (older than 24 h) and
/// authentic pushes the ledger could not interpret.
extension Readiness {
    func registerWeChatMetrics() {
        let store = self.store
        metrics.collect("ledger_wechat_orphan_streams", help: "WeChat order streams (refunds, inquiries) no link ties to a subscription, first recorded over 24 h ago (GET /v1/wechat/orphans)") {
            guard let n = try? await store.wechat.orphanCount(recordedBefore: Clock.nowMillis() - 24 * 3_600_000) else { return nil }
            return [(labels: [:], value: Double(n))]
        }
        metrics.collect("ledger_wechat_unreadable_events", help: "Authentic WeChat pushes stored as evidence that the ledger could not interpret") {
            guard let n = try? await store.wechat.unreadableCount() else { return nil }
            return [(labels: [:], value: Double(n))]
        }
    }
}

extension MetricsRegistry {
    /// The WeChat counters and histograms, described once.
    func describeWeChat() {
        describe("ledger_wechat_unreadable_pushes_total", type: .counter, help: "Authentic WeChat pushes stored as evidence the ledger could not interpret, by event")
        describe("ledger_wechat_stale_timestamps_total", type: .counter, help: "Signed WeChat pushes whose timestamp was outside the replay window (stored: their signature covers the body)")
        describe("ledger_wechat_refund_decision_seconds", type: .histogram, help: "Refund inquiries: time from arrival to the reply being ready (decidedInMs)")
        describe("ledger_wechat_refund_fallbacks_total", type: .counter, help: "Refund inquiries answered with the configured fallback, by reason (deadline, decision_error, unreadable)")
        describe("ledger_wechat_refund_answers_not_stored_total", type: .counter, help: "Refund answers not stored before WeChat's deadline (answered 503; WeChat asks again)")
        describe("ledger_wechat_relinks_past_deadline_total", type: .counter, help: "Refund inquiries whose order relink outlasted the answer deadline (replied; the link finished on its own)")
        describe("ledger_wechat_conflicting_repushes_total", type: .counter, help: "WeChat re-pushes whose content differs from the copy stored under the same key (the first stays in force; the re-push is kept as evidence), by event")
        describe("ledger_wechat_subscription_deliveries_without_info_total", type: .counter, help: "WeChat deliveries of a catalog subscription product without AppleSubscriptionInfo (stored as ordinary purchases; they grant nothing)")
    }
}

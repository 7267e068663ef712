import Foundation
import LedgerCore
import LedgerStore
import WeChatPay

/// Use case behind `ledger reconcile --wechat`: asks WeChat (`query_subscribe_contract`, mode=apple)
/// the contract of every (openid, product) the ledger's WeChat facts name, and records each answer
/// that disagrees with the ledger's own contract state as a `xpay_api_query_subscribe_contract`
/// event. The answer is unsigned, so its facts carry the time the ledger asked and override only
/// push facts older than that (`SubscriptionFold`): a missed unsigning is healed, a push that comes
/// later still wins. Then every orphan order stream whose refund named an openid is looked up with
/// `query_order`, the answer's ids are recorded, and whatever the alias index can now place is linked.
struct WeChatContractReconciliation: Sendable {
    let store: Store
    let api: WeChatServerAPI
    let linker: WeChatOrderLinker
    let log: Log

    struct Difference: Sendable {
        var openId: String
        var productId: String
        var ledger: WeChatContractState
        var wechat: SubscribeContract
        /// The position of the recorded answer (nil: dry run, or nothing to fold).
        var position: Int64?
    }

    struct Report: Sendable {
        var dryRun: Bool
        var asked = 0
        var agreed = 0
        /// Differing answers equal to the last one recorded (not recorded again).
        var unchanged = 0
        var differences: [Difference] = []
        /// (openid, product, why) for questions WeChat did not answer.
        var failures: [(String, String, String)] = []
        var orphansAsked = 0
        var aliasesRecorded = 0
        var linked = 0
    }

    /// - Parameter orphanAge: orphans younger than this are left to the pushes still coming (a
    ///   delivery usually follows within seconds).
    func run(dryRun: Bool, orphanAge: Duration = .seconds(3600), progress: @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> Report {
        var report = Report(dryRun: dryRun)
        let pairs = try await store.wechat.contractPairs()
        for (i, pair) in pairs.enumerated() {
            progress(i, pairs.count)
            report.asked += 1
            let answer: WeChatServerAPI.Answer<SubscribeContract>
            do {
                answer = try await api.subscribeContract(openId: pair.openId, productId: pair.productId)
            } catch {
                if case .accessToken = error { throw error }  // every later question would fail the same way
                report.failures.append((pair.openId, pair.productId, error.message))
                continue
            }
            let keys = try await store.projections.subscriptions(customerId: pair.openId)
            let view = WeChatContractState.reconciliationView(openId: pair.openId, productId: pair.productId,
                                                              facts: try await store.projections.facts(of: keys),
                                                              catalogPeriods: store.configuration.catalog.periods)
            let ledger = view.state
            if Self.agrees(view, answer.value) {
                report.agreed += 1
                continue
            }
            if Self.repeatsLastAnswer(view, answer.value) {
                // WeChat still says what it said last time, and that answer is already folded: a
                // second copy would change nothing (and one a run, forever).
                report.unchanged += 1
                continue
            }
            var position: Int64?
            if !dryRun, let event = WeChatAPIAnswer.contract(openId: pair.openId, productId: pair.productId, askedAt: answer.askedAt,
                                                             answer: answer.value, responseBody: answer.body) {
                position = try await store.events.append(event).position
            }
            report.differences.append(Difference(openId: pair.openId, productId: pair.productId, ledger: ledger,
                                                 wechat: answer.value, position: position))
        }
        progress(pairs.count, pairs.count)
        try await reconcileOrphans(&report, olderThan: Clock.nowMillis() - EpochMillis(orphanAge.milliseconds))
        return report
    }

    /// The fields both sides state: authorization state, auto-renew and the renewal date — WeChat's
    /// `renewal_date` compared with the RenewalDate of the ledger's contract head (its latest
    /// contract statement), not with the latest any message stated: a push may state a later period
    /// end than WeChat reports now, and that alone is no disagreement the answer could heal.
    static func agrees(_ view: WeChatContractState.ReconciliationView, _ wechat: SubscribeContract) -> Bool {
        let ledger = view.state
        guard ledger.authorizationState.rawValue == wechat.authorizationState.rawValue else { return false }
        guard let l = ledger.appleSubscriptionInfo, let w = wechat.appleSubscriptionInfo else {
            return ledger.appleSubscriptionInfo == nil && wechat.appleSubscriptionInfo == nil
        }
        return l.originalTransactionId == w.originalTransactionId && l.autoRenewStatus == w.autoRenewStatus
            && (w.renewalDate == nil || view.headRenewalDate == w.renewalDate || l.renewalDate == w.renewalDate)
    }

    /// WeChat's answer states what the last recorded answer for this openid and product stated.
    static func repeatsLastAnswer(_ view: WeChatContractState.ReconciliationView, _ wechat: SubscribeContract) -> Bool {
        guard let last = view.lastAnswer, let w = wechat.appleSubscriptionInfo else { return false }
        return last.state == wechat.authorizationState.rawValue && last.originalTransactionId == w.originalTransactionId
            && last.autoRenew == w.autoRenewStatus && last.renewalDate == w.renewalDate
    }

    /// Orphans older than an hour whose refunds named the customer: WeChat's `query_order` knows
    /// the order's ids (a refund naming only WxOrderId is otherwise tied to nothing).
    private func reconcileOrphans(_ report: inout Report, olderThan: EpochMillis) async throws {
        let orphans = try await store.wechat.orphans(recordedBefore: olderThan, limit: 10_000)
        for orphan in orphans {
            guard let openId = orphan.openIds.first else { continue }
            report.orphansAsked += 1
            var found: WeChatServerAPI.Answer<XPayOrder>?
            var asked: XPayOrderReference = .wxOrderId(orphan.orderId)
            for reference in [XPayOrderReference.wxOrderId(orphan.orderId), .orderId(orphan.orderId)] {
                if let answer = try? await api.order(openId: openId, reference) {
                    found = answer
                    asked = reference
                    break
                }
            }
            guard let answer = found else { continue }
            if report.dryRun { continue }
            let event = WeChatAPIAnswer.order(openId: openId, asked: asked, askedAt: answer.askedAt, responseBody: answer.body,
                                              stream: orphan.stream)
            if try await !store.events.append(event).duplicate { report.aliasesRecorded += 1 }
        }
        if !report.dryRun {
            report.linked = try await linker.linkOrphans(olderThan: Clock.nowMillis() + 1)
        }
    }
}

/// `ledger reconcile --wechat`, for the command line and tests: builds the store (live projections
/// on, so the answers it records update the tables in their append transaction) and the API client
/// from the configuration, runs the reconciliation, and describes what it did.
public enum WeChatReconcile {
    public struct Summary: Sendable, CustomStringConvertible {
        public var dryRun: Bool
        public var asked: Int
        public var agreed: Int
        /// Differing answers that repeat the last recorded one (not recorded again).
        public var unchanged: Int
        /// One line per disagreement: openid, product, the ledger's and WeChat's state.
        public var differences: [String]
        /// How many answers were recorded as events.
        public var recorded: Int
        public var failures: [String]
        public var orphansAsked: Int
        public var aliasesRecorded: Int
        public var linked: Int

        public var description: String {
            var lines = ["wechat reconciliation\(dryRun ? " (dry run: nothing recorded)" : ""): asked \(asked) contracts, \(agreed) agree, \(differences.count) differ, \(unchanged) unchanged since the last recorded answer, \(failures.count) unanswered"]
            lines += differences.map { "  ≠ \($0)" }
            lines += failures.map { "  ! \($0)" }
            lines.append("orphan orders: asked \(orphansAsked), ids recorded \(aliasesRecorded), streams linked \(linked)")
            if !dryRun { lines.append("recorded \(recorded) contract answer(s); the live projections are updated with them") }
            return lines.joined(separator: "\n")
        }
    }

    public static func run(configuration: LedgerConfiguration, dryRun: Bool, orphanAge: Duration = .seconds(3600),
                           log: Log = .shared,
                           progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> Summary {
        let c = configuration.wechat
        guard let appId = c.appId, let secret = c.appSecret, let appKey = c.appKey, let url = URL(string: c.apiBaseURL) else {
            throw ServiceFailure(.notConfigured, "wechat_api_not_configured",
                                 "reconciling with WeChat needs LEDGER_WECHAT_APPID, LEDGER_WECHAT_APP_SECRET, LEDGER_WECHAT_APP_KEY and LEDGER_WECHAT_API_BASE_URL (default https://api.weixin.qq.com)")
        }
        let api: WeChatServerAPI
        do {
            api = WeChatServerAPI(configuration: try WeChatServerAPIConfiguration(
                baseURL: url, appId: appId, appSecret: secret.value, appKey: appKey.value,
                allowsPlainHTTPLoopback: configuration.outboundAllowsPlainHTTPLoopback))
        } catch {
            throw ServiceFailure(.notConfigured, error.code, error.message)
        }
        let catalog: ProductCatalog
        do { catalog = try configuration.catalog() } catch { throw ServiceFailure(.notConfigured, "invalid_catalog", "products: \(error)") }
        let store = Store(.init(databaseURL: configuration.databaseURL, poolSize: 2, catalog: catalog))
        defer { store.close() }
        let reconciliation = WeChatContractReconciliation(store: store, api: api, linker: WeChatOrderLinker(store: store, log: log), log: log)
        let report = try await reconciliation.run(dryRun: dryRun, orphanAge: orphanAge, progress: progress)
        await store.events.finish()
        return Summary(
            dryRun: dryRun, asked: report.asked, agreed: report.agreed, unchanged: report.unchanged,
            differences: report.differences.map { d in
                let l = d.ledger, w = d.wechat
                return "\(d.openId) \(d.productId): ledger \(l.authorizationState.rawValue) auto_renew \(l.appleSubscriptionInfo?.autoRenewStatus.map(String.init) ?? "-") renewal \(l.appleSubscriptionInfo?.renewalDate.map(String.init) ?? "-"); WeChat \(w.authorizationState.rawValue) auto_renew \(w.appleSubscriptionInfo.map { String($0.autoRenewStatus) } ?? "-") renewal \(w.appleSubscriptionInfo?.renewalDate.map(String.init) ?? "-")\(d.position.map { " → recorded at position \($0)" } ?? "")"
            },
            recorded: report.differences.filter { $0.position != nil }.count,
            failures: report.failures.map { "\($0.0) \($0.1): \($0.2)" },
            orphansAsked: report.orphansAsked, aliasesRecorded: report.aliasesRecorded, linked: report.linked)
    }
}

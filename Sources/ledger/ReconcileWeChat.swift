import Foundation
import LedgerCommandLine
import LedgerService

/// `ledger reconcile --wechat [--dry-run]`: WeChat's contract state (`query_subscribe_contract`)
/// for every (openid, product) the ledger knows, recorded where it disagrees; orphan orders
/// looked up with `query_order` and linked. (Apple reconciliation is a separate part of `reconcile`.)
enum ReconcileWeChat {
    static let help = """
    usage: ledger reconcile --wechat [--dry-run]

    Asks WeChat's server API the contract state (query_subscribe_contract, mode=apple) of every
    (openid, product) the ledger's WeChat facts name, and records each answer that disagrees with
    the ledger's own contract state as an event (xpay_api_query_subscribe_contract). WeChat's answer
    is not signed: it carries the time it was asked and overrides only push facts older than that,
    so a missed unsigning is healed while a later push still wins. Then every orphan order stream
    (GET /v1/wechat/orphans) whose refund named an openid is looked up with query_order, the order's
    ids are recorded, and the streams the ledger can now place are linked to their subscription.

      --dry-run   ask, compare and print; record nothing

    Needs LEDGER_WECHAT_APPID, LEDGER_WECHAT_APP_SECRET (for cgi-bin/stable_token),
    LEDGER_WECHAT_APP_KEY (pay_sig) and LEDGER_WECHAT_API_BASE_URL (default https://api.weixin.qq.com);
    the database is LEDGER_DATABASE_URL. Exit status: 0 when every question was answered, 1 otherwise.
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "reconcile", boolean: ["wechat", "dry-run"], help: help)
        guard args.has("wechat") else {
            throw CommandFailure(message: "WeChat reconciliation runs with --wechat; Apple reconciliation is `ledger reconcile --since <epoch ms>`", exitCode: 2)
        }
        let configuration = try loadConfiguration()
        let bar = LazyProgressBar(label: "reconcile wechat")
        let summary: WeChatReconcile.Summary
        do {
            summary = try await WeChatReconcile.run(configuration: configuration, dryRun: args.has("dry-run"),
                                                    log: Log(minimum: .warn)) { done, total in bar.update(done, total) }
        } catch {
            bar.finish()
            throw CommandFailure(message: "\(error)")
        }
        bar.finish()
        print(summary.description)
        if !summary.failures.isEmpty { exit(1) }
    }
}

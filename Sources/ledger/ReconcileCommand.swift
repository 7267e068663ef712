import Foundation
import LedgerCommandLine
import LedgerCore
import LedgerService
import Synchronization

/// `ledger reconcile`: reconciliation with Apple from the command line (the same use case as
/// `POST /v1/admin/reconcile` and the periodic runner), or the end-to-end test notification.
enum ReconcileCommand {
    static let help = """
    usage: ledger reconcile --since <epoch ms> [--until <epoch ms>] [--environment Production|Sandbox] [--dry-run] [--all]
           ledger reconcile --test-notification [--environment Production|Sandbox] [--timeout SECONDS]
           ledger reconcile --wechat [--dry-run]   (WeChat's contract state: see ledger reconcile --wechat --help)

    Reconciles the ledger with Apple through the App Store Server API:
      1. stores every notification of the window's Get Notification History that the webhook
         missed (each verified like a webhook delivery; already stored = nothing new);
      2. asks Get All Subscription Statuses for every subscription seen in the window or known to
         the ledger and not expired for more than 60 days (--all: every one), verifies Apple's
         signed answers and stores them (an unchanged answer is not stored again);
      3. for each subscription whose state changed, stores its Get Transaction History;
      4. prints the drift report: each subscription whose state changed, before → after (status,
         product, expiresDate, auto-renew, entitlements); stores it as a reconcile/report event.
    Apple's rate limits (429) slow a run down, never stop it. A second run over the same window
    stores nothing new. One run at a time across every instance on the database.

      --since MS            start of the notification history window (epoch milliseconds; Apple
                            keeps 180 days in Production, 30 in Sandbox)
      --until MS            end of the window (default: now)
      --environment ENV     Production or Sandbox (default: every environment LEDGER_APPLE_ENVIRONMENTS accepts)
      --dry-run             store nothing: ask Apple and print what would change
      --all                 ask about every subscription the ledger knows
      --test-notification   ask Apple for a TEST notification and wait until the webhook stored it
                            (an end-to-end check of the deployment); default environment Sandbox
                            when accepted, else Production
      --timeout SECONDS     how long --test-notification waits (default 60)

    Needs LEDGER_APPLE_API_ISSUER_ID, LEDGER_APPLE_API_KEY_ID, LEDGER_APPLE_API_PRIVATE_KEY (the
    In-App Purchase key, .p8) and the webhook's Apple settings (LEDGER_APPLE_BUNDLE_IDS, …); the
    database is LEDGER_DATABASE_URL. A progress bar shows on a terminal.

    Exit status: 0 done; 3 done, but some items could not be reconciled (listed as problems);
    1 the run failed (message on standard error); 2 bad usage or configuration.
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "reconcile", valued: ["since", "until", "environment", "timeout"],
                             boolean: ["dry-run", "all", "test-notification"], help: help)
        guard args.positionals.isEmpty else {
            throw CommandFailure(message: "unexpected argument \(args.positionals[0]); see ledger reconcile --help", exitCode: 2)
        }
        var environment: String?
        if let e = args.options["environment"] {
            guard e != "PROD", let env = SubscriptionKey.environment(e) else {
                throw CommandFailure(message: "--environment must be Production or Sandbox, not \(e)", exitCode: 2)
            }
            environment = env
        }
        let configuration = try loadConfiguration()
        let app: LedgerApp
        do { app = try LedgerApp(configuration: configuration, log: Log(minimum: .warn)) } catch {
            throw CommandFailure(message: "\(error)", exitCode: 2)
        }
        defer { app.shutdown() }
        guard let reconciliation = app.appleAPI.reconciliation else {
            throw CommandFailure(message: "the App Store Server API is not configured: set LEDGER_APPLE_API_ISSUER_ID, LEDGER_APPLE_API_KEY_ID and LEDGER_APPLE_API_PRIVATE_KEY (and LEDGER_APPLE_BUNDLE_IDS)", exitCode: 2)
        }
        if args.has("test-notification") {
            try await testNotification(reconciliation, environment: environment, timeout: try args.int("timeout", default: 60))
            return
        }
        guard let sinceText = args.options["since"] else {
            throw CommandFailure(message: "give --since <epoch ms> (the start of the window); see ledger reconcile --help", exitCode: 2)
        }
        guard let since = Int64(sinceText), since >= 0 else {
            throw CommandFailure(message: "--since must be epoch milliseconds, not \(sinceText)", exitCode: 2)
        }
        var until: Int64?
        if let u = args.options["until"] {
            guard let v = Int64(u), v > since else {
                throw CommandFailure(message: "--until must be epoch milliseconds after --since, not \(u)", exitCode: 2)
            }
            until = v
        }
        let request = ReconcileRequest(since: since, until: until, environments: environment.map { [$0] },
                                       dryRun: args.has("dry-run"), all: args.has("all"))
        let bars = PhaseBars()
        let report: DriftReport
        do {
            report = try await reconciliation.run(request) { phase, done, total in bars.update(phase, done, total) }
        } catch {
            bars.finish()
            throw CommandFailure(message: error.description, exitCode: error.isUsage ? 2 : 1)
        }
        bars.finish()
        print(report.text)
        if !report.problems.isEmpty {
            FileHandle.standardError.write(Data("ledger reconcile: \(report.problems.count) problem(s); see above\n".utf8))
            exit(3)
        }
    }

    static func testNotification(_ reconciliation: AppleReconciliation, environment: String?, timeout: Int) async throws {
        let env = environment ?? (reconciliation.environments.contains("Sandbox") ? "Sandbox" : "Production")
        do {
            let outcome = try await reconciliation.testNotification(environment: env, timeout: .seconds(max(1, timeout)))
            let attempts = outcome.sendAttempts.map { "\($0.sendAttemptResult ?? "?") at \($0.attemptDate.map(String.init) ?? "?")" }
            if let position = outcome.position {
                print("TEST notification \(outcome.notificationUUID ?? "?") (\(env)) arrived through the webhook and is stored at position \(position) after \(outcome.waited); Apple's attempts: \(attempts.joined(separator: ", "))")
                return
            }
            throw CommandFailure(message: "Apple was asked for a TEST notification (\(env), token \(outcome.token)) but the ledger has not stored it after \(timeout) s. Apple's attempts: \(attempts.isEmpty ? "none reported yet" : attempts.joined(separator: ", ")). Check the App Store Server Notifications URL in App Store Connect, that it reaches this service over TLS, and the service log for refusals.")
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure(message: "\(error)")
        }
    }
}

private extension ReconciliationError {
    var isUsage: Bool {
        switch self {
        case .notConfigured, .invalidRequest: true
        default: false
        }
    }
}

/// One progress bar per phase of the run, on a terminal only.
private final class PhaseBars: Sendable {
    private struct State {
        var phase = ""
        var total = 0
        var bar: ProgressBar?
        var done = 0
    }

    private let state = Mutex(State())

    func update(_ phase: String, _ done: Int, _ total: Int) {
        state.withLock { s in
            if s.phase != phase {
                s.bar?.finish(s.done)
                s.phase = phase
                s.bar = nil
            }
            // Paged endpoints learn their total page by page.
            if s.bar == nil || s.total != total {
                s.total = total
                s.bar = ProgressBar(total: max(total, 1), label: phase)
            }
            s.done = done
            s.bar?.update(done)
        }
    }

    func finish() {
        state.withLock { s in s.bar?.finish(s.done); s.bar = nil }
    }
}

import AppStore
import LedgerMetrics
import Foundation
import LedgerCore
import LedgerStore
import Synchronization

/// What an operator asks a reconciliation run to do.
public struct ReconcileRequest: Sendable, Equatable {
    /// The notification history window (epoch ms): Apple keeps 180 days (Production), 30 (Sandbox).
    public var since: EpochMillis
    /// Default: now.
    public var until: EpochMillis?
    /// Default: every environment the deployment accepts.
    public var environments: [String]?
    /// Change nothing: ask Apple, report what would change.
    public var dryRun: Bool
    /// Ask about every subscription the ledger knows, not only those not expired for more than 60 days.
    public var all: Bool
    /// Backfill only the notifications Apple could not deliver (Get Notification History
    /// `onlyFailures`): what the periodic runner asks; an operator's run reads the full history.
    public var onlyFailures: Bool

    public init(since: EpochMillis, until: EpochMillis? = nil, environments: [String]? = nil, dryRun: Bool = false, all: Bool = false,
                onlyFailures: Bool = false) {
        self.since = since
        self.until = until
        self.environments = environments
        self.dryRun = dryRun
        self.all = all
        self.onlyFailures = onlyFailures
    }
}

/// Why a reconciliation did not run or did not finish; each says what to do.
public enum ReconciliationError: Error, CustomStringConvertible {
    /// LEDGER_APPLE_API_* are not set.
    case notConfigured(String)
    /// Another run (on this or another instance) holds the reconciliation lock.
    case busy(runningRunId: String?)
    case invalidRequest(String)
    /// Apple refused the run's requests in a way retrying will not fix (e.g. 401: the key).
    case apple(AppStoreServerAPIError)
    case store(StoreError)
    case cancelled

    public var description: String {
        switch self {
        case .notConfigured(let why): return "reconciliation is not configured: \(why)"
        case .busy(let id):
            return "another reconciliation is running\(id.map { " (run \($0))" } ?? ""); wait for it to finish (GET /v1/admin/drift shows the last run)"
        case .invalidRequest(let why): return why
        case .apple(let error): return error.message
        case .store(let error): return error.description
        case .cancelled: return "the reconciliation was cancelled (the service is stopping); run it again"
        }
    }
}

/// Use case: reconciliation with Apple (the App Store Server API), shared by `ledger reconcile`,
/// `POST /v1/admin/reconcile` and the periodic runner. One run, per environment:
///
/// 1. **Backfill**: every page of Get Notification History for the window; each `signedPayload`
///    goes through the same verified V2 path as the webhook (`AppleNotificationIngestor`), so a
///    notification already stored is a duplicate and stores nothing.
/// 2. **Statuses**: Get All Subscription Statuses for every originalTransactionId seen in the
///    window or known to the ledger for the API's bundle id and not expired for more than 60 days
///    (`all`: every one); one answer covers every subscription of its customer. Every signed item
///    is verified (`AppleAPIAnswerEvents`) and stored as an `API/subscription-status` event keyed
///    by its content (an unchanged answer is not stored again).
/// 3. **Drift**: each subscription the run stored something for is folded twice — from the facts
///    recorded before the run, and from all of them — and compared at the same time (status,
///    product, expiry, auto-renew, customer, entitlements).
/// 4. **History**: for each drifted subscription, every page of Get Transaction History, stored as
///    `API/transaction` events (transactions the ledger never saw: refunds of earlier periods).
///
/// 429s slow a run down and never stop it (`Retry-After` is waited for). A dry run stores nothing:
/// its "after" folds what it would store. The report (`DriftReport`) is stored as a
/// `reconcile/report` event when the run stored something or found drift; every run is a row of
/// `reconciliation_runs`. Exactly one run at a time across instances (an advisory lock).
public final class AppleReconciliation: Sendable {
    public enum Trigger: String, Sendable { case cli, admin, periodic }

    let store: Store
    let ingestor: AppleNotificationIngestor
    let answers: AppleAPIAnswerEvents
    /// One client per app (bundle id) and environment the deployment accepts.
    let clients: AppStoreServerAPIClients
    let catalog: ProductCatalog
    let metrics: MetricsRegistry
    let log: Log
    let clock: @Sendable () -> EpochMillis
    /// How to wait for rate limits (tests shorten it).
    let sleep: @Sendable (Duration) async throws -> Void
    /// The longest single wait for a rate limit; a longer Retry-After is waited in steps of this.
    let longestWait: Duration

    /// Subscriptions expired for more than this are not asked about unless `all`.
    public static let expiredLimit: EpochMillis = 60 * 86_400_000
    /// A periodic window starts this long before the previous one ended: Apple dates history by
    /// sending time, and a duplicate costs nothing.
    public static let overlap: EpochMillis = 3_600_000
    /// At most this many problems are listed in a report (the rest are counted).
    static let problemLimit = 100

    private let background = Mutex<[String: Task<Void, Never>]>([:])
    private let lastFinished = LatestTime()

    init(store: Store, ingestor: AppleNotificationIngestor, clients: AppStoreServerAPIClients,
         catalog: ProductCatalog, metrics: MetricsRegistry, log: Log, clock: @escaping @Sendable () -> EpochMillis = Clock.nowMillis,
         sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) },
         longestWait: Duration = .seconds(3600), backfillPageBudget: Int = 2_000) {
        self.backfillPageBudget = max(1, backfillPageBudget)
        self.store = store
        self.ingestor = ingestor
        self.answers = AppleAPIAnswerEvents(verifier: ingestor.verifier, acceptance: ingestor.acceptance)
        self.clients = clients
        self.catalog = catalog
        self.metrics = metrics
        self.log = log
        self.clock = clock
        self.sleep = sleep
        self.longestWait = longestWait
        metrics.describe("ledger_reconcile_runs_total", type: .counter, help: "Reconciliation runs by trigger and outcome")
        metrics.describe("ledger_reconcile_notifications_backfilled_total", type: .counter,
                         help: "Notifications stored by reconciliation that the webhook had not received")
        metrics.describe("ledger_reconcile_subscriptions_drifted_total", type: .counter,
                         help: "Subscriptions whose state a reconciliation run changed")
        let last = lastFinished
        metrics.gauge("ledger_reconcile_last_run_timestamp_seconds", help: "When this instance last finished a reconciliation run (0: never)") {
            [(labels: [:], value: Double(last.value ?? 0) / 1000)]
        }
    }

    public var environments: [String] { clients.environments }

    /// How far back Get Notification History reaches per environment (issue 20 item 3): Apple keeps
    /// 180 days of Production history and 30 days of Sandbox history; an older startDate is
    /// refused, so each environment's window is clamped (an hour inside the limit, for clock skew).
    public static func historyLimit(environment: String) -> EpochMillis {
        (environment == SubscriptionKey.sandbox ? 30 : 180) * 86_400_000 - 3_600_000
    }

    /// Pages one backfill reads per run at most (2,000 pages of 20: 40,000 notifications): a
    /// periodic run saves its progress after every page and continues there next run, so a large
    /// history never makes a run fail.
    let backfillPageBudget: Int

    // MARK: - Running

    /// Runs now and returns the report (the command line; tests). Throws `.busy` when another run
    /// holds the lock.
    public func run(_ request: ReconcileRequest, trigger: Trigger = .cli,
                    progress: @escaping @Sendable (String, Int, Int) -> Void = { _, _, _ in }) async throws(ReconciliationError) -> DriftReport {
        try await run(request, trigger: trigger, requestedBy: .commandLine, progress: progress)
    }

    func run(_ request: ReconcileRequest, trigger: Trigger, requestedBy: Requester,
             progress: @escaping @Sendable (String, Int, Int) -> Void = { _, _, _ in }) async throws(ReconciliationError) -> DriftReport {
        let (run, lock) = try await begin(request, trigger: trigger, requestedBy: requestedBy)
        let result: Result<DriftReport, ReconciliationError>
        do { result = .success(try await execute(run, request: request, progress: progress)) } catch { result = .failure(error) }
        await lock.release()
        return try result.get()
    }

    /// Starts a run in the background (`POST /v1/admin/reconcile`): recorded as an admin event,
    /// answered with its id at once. Throws `.busy` when another run holds the lock.
    func start(_ request: ReconcileRequest, requestedBy: Requester) async throws(ReconciliationError) -> ReconciliationStore.Run {
        let (run, lock) = try await begin(request, trigger: .admin, requestedBy: requestedBy)
        do {
            let body = JSONValue.object([
                "action": "reconcile", "runId": .string(run.runId), "environments": .array(run.environments.map(JSONValue.string)),
                "window": .object(["since": .integer(run.since), "until": .integer(run.until)]), "dryRun": .bool(run.dryRun),
                "all": .bool(run.all), "requestedBy": requestedBy.json, "requestedAt": .integer(run.startedAt),
            ]).canonicalJSON()
            _ = try await store.events.append(NewEvent(
                streamId: StreamId.ledgerAdmin.text, dedupeKey: DedupeKey.adminAction(at: run.startedAt), source: .ledger,
                type: "admin/reconcile", signedAt: run.startedAt, payload: body, raw: body))
        } catch {
            try? await store.reconciliation.recordEnd(runId: run.runId, succeeded: false, finishedAt: clock(), summary: nil,
                                                      error: "the request could not be recorded: \(error)", reportPosition: nil)
            await lock.release()
            throw .store(error)
        }
        let task = Task { [self] in
            _ = try? await execute(run, request: request, progress: { _, _, _ in })
            await lock.release()
            _ = background.withLock { $0.removeValue(forKey: run.runId) }
        }
        background.withLock { $0[run.runId] = task }
        return run
    }

    /// The periodic runner's tick: runs when no run (on any instance) started a periodic run less
    /// than `every` ago, over the window since the last successful run (less `overlap`). Nil when
    /// nothing ran.
    func runIfDue(every: Duration) async throws(ReconciliationError) -> DriftReport? {
        let lock: HeldLock
        do {
            guard let held = try await store.reconciliation.tryLock(.reconciliation) else { return nil }
            lock = held
        } catch { throw .store(error) }
        let result: Result<DriftReport?, ReconciliationError>
        do { result = .success(try await runIfDue(every: every, holding: lock)) } catch { result = .failure(error) }
        await lock.release()
        return try result.get()
    }

    private func runIfDue(every: Duration, holding lock: HeldLock) async throws(ReconciliationError) -> DriftReport? {
        let now = clock()
        let everyMillis = EpochMillis(every.components.seconds * 1000)
        let last: ReconciliationStore.Run?, succeeded: ReconciliationStore.Run?
        do {
            last = try await store.reconciliation.latestRun(trigger: Trigger.periodic.rawValue)
            succeeded = try await store.reconciliation.latestSucceededRun()
        } catch { throw .store(error) }
        if let last, now - last.startedAt < everyMillis { return nil }
        // The window of the backfill moves forward page by page from where each app's last pass got
        // to (`reconciliation_progress`); per environment it is clamped to what Apple keeps.
        let since = max(succeeded.map { $0.until - Self.overlap } ?? (now - everyMillis - Self.overlap), now - 29 * 86_400_000)
        let request = ReconcileRequest(since: since, until: now, onlyFailures: true)
        let requester = Requester(fields: ["via": "periodic", "host": .string(ProcessInfo.processInfo.hostName),
                                           "pid": .integer(Int64(getpid()))])
        let run = try await record(request, trigger: .periodic, requestedBy: requester)
        return try await execute(run, request: request, progress: { _, _, _ in })
    }

    /// Cancels the runs started in the background (the service is stopping); each records itself failed.
    func cancelBackgroundRuns() async {
        let tasks = background.withLock { Array($0.values) }
        for t in tasks { t.cancel() }
        for t in tasks { await t.value }
    }

    /// Takes the lock and records the run's start.
    private func begin(_ request: ReconcileRequest, trigger: Trigger, requestedBy: Requester)
        async throws(ReconciliationError) -> (ReconciliationStore.Run, HeldLock) {
        try validate(request)
        let lock: HeldLock
        do {
            guard let held = try await store.reconciliation.tryLock(.reconciliation) else {
                let running = try? await store.reconciliation.latestRun()
                throw ReconciliationError.busy(runningRunId: running?.status == "running" ? running?.runId : nil)
            }
            lock = held
        } catch let e as ReconciliationError { throw e } catch let e as StoreError { throw .store(e) } catch { throw .cancelled }
        do {
            return (try await record(request, trigger: trigger, requestedBy: requestedBy), lock)
        } catch {
            await lock.release()
            throw error
        }
    }

    private func validate(_ request: ReconcileRequest) throws(ReconciliationError) {
        guard !clients.isEmpty else { throw .notConfigured("set LEDGER_APPLE_API_ISSUER_ID, LEDGER_APPLE_API_KEY_ID and LEDGER_APPLE_API_PRIVATE_KEY") }
        let until = request.until ?? clock()
        guard request.since < until else {
            throw .invalidRequest("since (\(request.since)) must be before until (\(until)); both are epoch milliseconds")
        }
        for e in request.environments ?? [] where !clients.has(environment: e) {
            throw .invalidRequest("environment \(e) is not accepted here (accepted: \(environments.joined(separator: ", ")))")
        }
    }

    private func record(_ request: ReconcileRequest, trigger: Trigger, requestedBy: Requester) async throws(ReconciliationError) -> ReconciliationStore.Run {
        let now = clock()
        let run = ReconciliationStore.Run(
            runId: UUID().uuidString.lowercased(), trigger: trigger.rawValue, environments: request.environments ?? environments,
            since: request.since, until: request.until ?? now, dryRun: request.dryRun, all: request.all,
            requestedBy: requestedBy.json, startedAt: now)
        do { try await store.reconciliation.recordStart(run) } catch { throw .store(error) }
        return run
    }

    /// The run itself (the lock is held by the caller).
    private func execute(_ run: ReconciliationStore.Run, request: ReconcileRequest,
                         progress: @escaping @Sendable (String, Int, Int) -> Void) async throws(ReconciliationError) -> DriftReport {
        var pass = Pass(owner: self, report: DriftReport(
            runId: run.runId, trigger: run.trigger, requestedBy: run.requestedBy, environments: run.environments,
            since: run.since, until: run.until, all: run.all, dryRun: run.dryRun, startedAt: run.startedAt), progress: progress,
            onlyFailures: request.onlyFailures, periodic: run.trigger == Trigger.periodic.rawValue)
        do {
            try await pass.perform()
        } catch {
            let failure: ReconciliationError = Task.isCancelled ? .cancelled : error
            try? await store.reconciliation.recordEnd(runId: run.runId, succeeded: false, finishedAt: clock(),
                                                      summary: pass.report.json["notifications"], error: failure.description, reportPosition: nil)
            metrics.increment("ledger_reconcile_runs_total", ["trigger": run.trigger, "outcome": "failed"])
            log.error("reconciliation failed", ["runId": run.runId, "error": failure.description])
            throw failure
        }
        var report = pass.report
        report.finishedAt = clock()
        var reportPosition: Int64?
        if !run.dryRun, report.counts.stored > 0 || !report.drift.isEmpty {
            let body = report.json.canonicalJSON()
            do {
                reportPosition = try await store.events.append(NewEvent(
                    streamId: StreamId.ledgerReconciliation.text, dedupeKey: DedupeKey.reconciliationReport(runId: run.runId),
                    source: .ledger, type: LedgerEventType.reconciliationReport, signedAt: report.finishedAt,
                    payload: body, raw: body)).position
            } catch {
                log.error("the drift report could not be stored", ["runId": run.runId, "error": "\(error)"])
            }
        }
        let summary = report.json.objectValue.map { o in JSONValue.object(o.filter { $0.key != "drift" && $0.key != "problems" && $0.key != "requestedBy" }) }
        try? await store.reconciliation.recordEnd(runId: run.runId, succeeded: true, finishedAt: report.finishedAt, summary: summary,
                                                  error: nil, reportPosition: reportPosition)
        if !run.dryRun {
            metrics.increment("ledger_reconcile_notifications_backfilled_total", by: Double(report.counts.notificationsBackfilled))
            metrics.increment("ledger_reconcile_subscriptions_drifted_total", by: Double(report.drift.count))
        }
        metrics.increment("ledger_reconcile_runs_total", ["trigger": run.trigger, "outcome": "succeeded"])
        lastFinished.value = report.finishedAt
        log.info("reconciliation finished", [
            "runId": run.runId, "dryRun": run.dryRun, "backfilled": report.counts.notificationsBackfilled,
            "answersStored": report.counts.statusAnswersStored, "drifted": report.drift.count, "problems": report.problems.count,
        ])
        return report
    }

    // MARK: - Test notification

    public struct TestNotificationOutcome: Sendable {
        public var environment: String
        public var token: String
        public var notificationUUID: String?
        /// Where the ledger stored it (nil: it did not arrive in time).
        public var position: Int64?
        public var sendAttempts: [SendAttempt]
        public var waited: Duration
    }

    /// Asks Apple for a TEST notification and waits until the webhook has stored it (an
    /// end-to-end check of the deployment: Apple's URL, TLS, verification, the database).
    public func testNotification(environment: String, timeout: Duration = .seconds(60),
                                 poll: Duration = .milliseconds(500)) async throws(ReconciliationError) -> TestNotificationOutcome {
        guard let client = clients.client(environment: environment, bundleId: nil) else {
            throw .invalidRequest("environment \(environment) is not configured here (configured: \(environments.joined(separator: ", ")))")
        }
        let started = ContinuousClock.now
        let token: String
        do { token = try await client.requestTestNotification() } catch { throw .apple(error) }
        var outcome = TestNotificationOutcome(environment: environment, token: token, notificationUUID: nil, position: nil,
                                              sendAttempts: [], waited: .zero)
        while ContinuousClock.now - started < timeout {
            if Task.isCancelled { throw .cancelled }
            do {
                if let status = try await client.testNotificationStatus(token: token) {
                    outcome.sendAttempts = status.sendAttempts
                    if let signed = status.signedPayload, let payload = try? SignedDataVerifier.decodeUnverified(signed).payload,
                       let uuid = payload["notificationUUID"] as? String {
                        outcome.notificationUUID = uuid
                        let stored = try await store.events.events(dedupeKeys: [uuid]).first { $0.event.streamId == StreamId.appleTest.text }
                        if let stored {
                            outcome.position = stored.position
                            outcome.waited = ContinuousClock.now - started
                            return outcome
                        }
                    }
                }
            } catch let e as AppStoreServerAPIError {
                if !e.isRetryable { throw .apple(e) }
            } catch let e as StoreError {
                throw .store(e)
            } catch {
                throw .cancelled
            }
            do { try await Task.sleep(for: poll) } catch { throw .cancelled }
        }
        outcome.waited = ContinuousClock.now - started
        return outcome
    }
}

/// One run's state while it works: the report it fills, and what it stored or would store.
private struct Pass {
    let owner: AppleReconciliation
    var report: DriftReport
    let progress: @Sendable (String, Int, Int) -> Void
    /// Backfill asks only for what Apple could not deliver (`onlyFailures`).
    let onlyFailures: Bool
    /// A periodic run: its backfill saves and resumes its progress (`reconciliation_progress`).
    let periodic: Bool
    var problemsDropped = 0
    /// The head before the run stored anything: "before" folds facts up to it.
    var headBefore: Int64 = 0
    /// Subscriptions the run stored (or would store) something about.
    var touched = Set<SubscriptionKey>()
    /// Dry run: the events it would have stored, for the "after" fold.
    var wouldStore: [NewEvent] = []

    init(owner: AppleReconciliation, report: DriftReport, progress: @escaping @Sendable (String, Int, Int) -> Void,
         onlyFailures: Bool = false, periodic: Bool = false) {
        self.owner = owner
        self.report = report
        self.progress = progress
        self.onlyFailures = onlyFailures
        self.periodic = periodic
    }

    var store: Store { owner.store }

    mutating func perform() async throws(ReconciliationError) {
        do { headBefore = try await store.events.headPosition() } catch { throw .store(error) }
        // Apple said something the ledger disagreed with since the last run: those customers'
        // transaction history is asked for this run (issue 20 item 2).
        let flagged = try await flaggedByApple()
        // Each environment (and app) on its own: Apple refusing one (Production answers 401 until
        // the app's first release) is reported and the others still run (issue 20 item 3).
        var failures: [ReconciliationError] = []
        var units = 0
        for environment in report.environments {
            for (bundleId, client) in owner.clients.clients(environment: environment) {
                units += 1
                let unit = owner.clients.clients(environment: environment).count > 1 ? "\(environment)/\(bundleId)" : environment
                do {
                    let seen = try await backfill(environment, bundleId: bundleId, client)
                    try await statuses(environment, bundleId: bundleId, client, seen: seen)
                    report.outcomes[unit] = "ok"
                } catch {
                    guard case .apple(let apple) = error else { throw error }
                    failures.append(error)
                    report.outcomes[unit] = "failed"
                    var message = apple.message
                    if case .unauthorized = apple, environment == SubscriptionKey.production {
                        message = "Production answered 401: until the app has had its first Production release Apple refuses every Production call (then this is expected and harmless); otherwise check the key. The other environments were reconciled. (\(apple.message))"
                    }
                    problem("environment", environment, nil, message)
                }
            }
        }
        if units > 0, failures.count == units, let first = failures.first { throw first }
        var (drift, after) = try await driftAndFacts()
        report.drift = drift
        // Subscriptions that drifted or that Apple's word disputes: what happened to their other
        // transactions (refunds of earlier periods, renewals the ledger never saw)? Asked once per
        // customer: Get Transaction History answers for every subscription of the customer.
        let wanted = Set(report.drift.map(\.key)).union(flagged.map(\.key))
        try await histories(for: wanted)
        if report.counts.historyTransactionsStored > 0 { (drift, after) = try await driftAndFacts(); report.drift = drift }
        // The ledger compared with Apple, not only with itself: Apple's statements about the
        // subscriptions the run touched or that were flagged, against the fold after the run.
        var apple: [AppleStatusCheck] = []
        let checkedKeys = Set(touched).union(wanted)
        var facts = after
        let missing = checkedKeys.subtracting(Set(after.compactMap(\.subscription)))
        if !missing.isEmpty {
            do { facts += try await store.projections.facts(of: missing.sorted()) } catch {
                throw .store(StoreError.unavailable("the facts of the flagged subscriptions could not be read: \(error)"))
            }
        }
        let byKey = Dictionary(grouping: facts.filter { $0.subscription != nil }, by: { $0.subscription! })
        for key in checkedKeys.sorted() {
            apple += AppleStatusCheck.checks(key: key, facts: byKey[key] ?? []).filter { !$0.agrees }
        }
        report.appleDisagreements = apple
        report.counts.appleFlagged = flagged.count
        // A mass extension's summary against the RENEWAL_EXTENDED notifications the ledger holds
        // (after the backfill): a shortfall is notifications the ledger never received.
        do {
            for e in try await store.reconciliation.extensionSummaryChecks() where e.shortfall > 0 {
                problem("renewalExtension", e.environment ?? report.environments.joined(separator: ","), nil,
                        "RENEWAL_EXTENSION/SUMMARY \(e.requestIdentifier) (\(e.productId ?? "every product")): Apple extended \(e.succeededCount) subscriptions, the ledger holds RENEWAL_EXTENDED for \(e.received); \(e.shortfall) missing (evidence: event \(e.position)). Run a full reconciliation (not onlyFailures) over the window since \(e.windowStart) to backfill them.")
            }
        } catch { throw .store(error) }
        if problemsDropped > 0 {
            report.problems.append(.init(stage: "report", environment: report.environments.joined(separator: ","),
                                         message: "\(problemsDropped) more problems were not listed"))
        }
    }

    mutating func problem(_ stage: String, _ environment: String, _ otid: String? = nil, _ message: String) {
        if report.problems.count >= AppleReconciliation.problemLimit { problemsDropped += 1; return }
        report.problems.append(.init(stage: stage, environment: environment, originalTransactionId: otid, message: message))
    }

    /// The statements the ledger disagrees with now that were recorded since the previous run
    /// started (every one, before a first run).
    func flaggedByApple() async throws(ReconciliationError) -> [AppleStatusCheck] {
        do {
            let previous = try await store.reconciliation.latestSucceededRun()
            return try await store.reconciliation.appleStatusDisagreements(recordedSince: previous?.startedAt, limit: 10_000)
                .filter { report.environments.contains($0.key.environment) }
        } catch { throw .store(error) }
    }

    // MARK: backfill

    /// The window's notification history through the verified V2 path (only the failures, for a
    /// periodic run). Returns the originalTransactionIds of the subscriptions the notifications are
    /// about. The window is clamped to what Apple keeps for the environment; a periodic run starts
    /// where the app's last pass got to and saves its progress after every page.
    mutating func backfill(_ environment: String, bundleId: String, _ client: AppStoreServerAPIClient) async throws(ReconciliationError) -> [String] {
        let now = owner.clock()
        var since = report.since
        let floor = now - AppleReconciliation.historyLimit(environment: environment)
        if periodic {
            let saved: EpochMillis?
            do { saved = try await store.reconciliation.backfillCursor(environment: environment, bundleId: bundleId) } catch { throw .store(error) }
            if let saved { since = max(since, saved - AppleReconciliation.overlap) }
        }
        if since < floor {
            problem("notificationHistory", environment, nil,
                    "the window starts \(since), before the \(environment == SubscriptionKey.sandbox ? "30" : "180") days of history Apple keeps for \(environment); asked from \(floor) instead")
            report.counts.windowsClamped += 1
            since = floor
        }
        guard since < report.until else { return [] }
        let request = NotificationHistoryRequest(startDate: since, endDate: report.until, onlyFailures: onlyFailures ? true : nil)
        var token: String?
        var tokens = Set<String>()
        var restarted = false
        var pages = 0
        var seen: [String] = []
        var cursor = since
        while true {
            let page: NotificationHistoryResponse
            do {
                page = try await patiently { () async throws(AppStoreServerAPIError) in
                    try await client.notificationHistoryPage(request, paginationToken: token)
                }
            } catch .apple(let e) where e.handling == .restartPaging && token != nil && !restarted {
                restarted = true
                token = nil
                tokens = []
                continue
            }
            pages += 1
            progress("notification history \(environment)", pages, pages + (page.hasMore ? 1 : 0))
            var events: [NewEvent] = []
            for (i, item) in page.notificationHistory.enumerated() {
                report.counts.notificationsSeen += 1
                guard let signed = item.signedPayload, !signed.isEmpty else {
                    report.counts.notificationsRefused += 1
                    problem("notificationHistory", environment, nil, "item \(i) of page \(pages) has no signedPayload")
                    continue
                }
                let body = JSONValue.object(["signedPayload": .string(signed)]).canonicalJSON()
                let event: NewEvent
                do { event = try owner.ingestor.ingestV2(body: body) } catch {
                    report.counts.notificationsRefused += 1
                    problem("notificationHistory", environment, nil, "a notification was refused (\(error.code)): \(error.message)")
                    continue
                }
                guard event.environment == environment else {
                    report.counts.notificationsRefused += 1
                    problem("notificationHistory", environment, nil,
                            "asked \(environment), Apple's history holds a \(event.environment ?? "?") notification; check LEDGER_APPLE_API_BASE_URL")
                    continue
                }
                if let t = event.signedAt { cursor = max(cursor, min(t, report.until)) }
                events.append(event)
                if StreamId(event.streamId).isSubscription { seen.append(event.streamId) }
            }
            let (new, old) = try await keep(events, stage: "notificationHistory", environment: environment)
            report.counts.notificationsBackfilled += new
            report.counts.notificationsAlreadyStored += old
            let done = !page.hasMore || page.paginationToken == nil
            // Apple lists history oldest first: everything before the last item read is read.
            if periodic && !report.dryRun {
                do {
                    try await store.reconciliation.saveBackfillCursor(environment: environment, bundleId: bundleId,
                                                                      cursor: done ? report.until : cursor, now: owner.clock())
                } catch { throw .store(error) }
            }
            report.backfilledUpTo[environment] = done ? report.until : cursor
            if done { break }
            let next = page.paginationToken!
            guard tokens.insert(next).inserted else {
                throw .apple(.paging(endpoint: "Get Notification History", reason: "Apple returned the same pagination token twice"))
            }
            if pages >= owner.backfillPageBudget {
                problem("notificationHistory", environment, nil,
                        "read \(pages) pages (up to \(cursor)); \(periodic ? "the next periodic run continues from there" : "run again with since=\(cursor) for the rest")")
                break
            }
            token = next
        }
        return seen
    }

    // MARK: statuses

    mutating func statuses(_ environment: String, bundleId: String, _ client: AppStoreServerAPIClient, seen: [String]) async throws(ReconciliationError) {
        let known: [String]
        do {
            known = try await store.reconciliation.knownSubscriptions(
                environment: environment, bundleId: bundleId,
                expiredSince: report.all ? nil : owner.clock() - AppleReconciliation.expiredLimit)
        } catch { throw .store(error) }
        var candidates: [String] = []
        var listed = Set<String>()
        for otid in seen + known where listed.insert(otid).inserted { candidates.append(otid) }
        var covered = Set<String>()
        for (i, otid) in candidates.enumerated() {
            progress("subscription statuses \(environment)", i, candidates.count)
            if covered.contains(otid) { continue }
            let answer: StatusResponse
            do {
                answer = try await patiently { () async throws(AppStoreServerAPIError) in
                    try await client.allSubscriptionStatuses(transactionId: otid)
                }
            } catch .apple(let e) where Self.isUnknown(e) {
                report.counts.unknownToApple += 1
                problem("statuses", environment, otid, e.message)
                continue
            } catch .apple(let e) where !Self.isFatal(e) {
                problem("statuses", environment, otid, e.message)
                continue
            }
            report.counts.subscriptionsAsked += 1
            if let stated = answer.environment, SubscriptionKey.environment(stated) != environment {
                problem("statuses", environment, otid, "asked \(environment), Apple answered for \(stated); check LEDGER_APPLE_API_BASE_URL")
                continue
            }
            let built: [NewEvent]
            do { built = try owner.answers.subscriptionStatusEvents(answer) } catch {
                problem("statuses", environment, otid, "the answer was refused (\(error.code)): \(error.message)")
                continue
            }
            let events = try await keyedAfterOtherEvents(built)
            covered.formUnion(events.map(\.streamId))
            covered.insert(otid)
            let (new, old) = try await keep(events, stage: "statuses", environment: environment)
            report.counts.statusAnswersStored += new
            report.counts.statusAnswersUnchanged += old
        }
        progress("subscription statuses \(environment)", candidates.count, candidates.count)
    }

    // MARK: history

    /// Get Transaction History once per customer: a subscription whose id an earlier answer of
    /// this run listed is covered by it (Apple answers with every transaction of the customer).
    /// Filtered to auto-renewable subscriptions (`productType=AUTO_RENEWABLE`, Get Transaction
    /// History v2): the folds compare nothing else.
    mutating func histories(for keys: Set<SubscriptionKey>) async throws(ReconciliationError) {
        guard !keys.isEmpty else { return }
        let apps: [SubscriptionKey: String]
        do { apps = try await store.reconciliation.bundleIds(of: keys.sorted()) } catch { throw .store(error) }
        var covered = Set<SubscriptionKey>()
        for key in keys.sorted() where !covered.contains(key) {
            guard let client = owner.clients.client(environment: key.environment, bundleId: apps[key]) else { continue }
            let listed = try await history(key, client)
            covered.insert(key)
            for otid in listed { covered.insert(SubscriptionKey(environment: key.environment, originalTransactionId: otid)) }
        }
    }

    /// Every page of one customer's history (through `key`); the originalTransactionIds it lists.
    mutating func history(_ key: SubscriptionKey, _ client: AppStoreServerAPIClient) async throws(ReconciliationError) -> Set<String> {
        report.counts.historySubscriptionsAsked += 1
        var query = TransactionHistoryQuery()
        query.productTypes = ["AUTO_RENEWABLE"]
        var revision: String?
        var revisions = Set<String>()
        var restarted = false
        var pages = 0
        var listed = Set<String>()
        while true {
            let page: HistoryResponse
            do {
                page = try await patiently { () async throws(AppStoreServerAPIError) in
                    try await client.transactionHistoryPage(transactionId: key.originalTransactionId, query: query, revision: revision)
                }
            } catch .apple(let e) where e.handling == .restartPaging && revision != nil && !restarted {
                restarted = true
                revision = nil
                revisions = []
                continue
            } catch .apple(let e) where !Self.isFatal(e) {
                problem("transactionHistory", key.environment, key.originalTransactionId, e.message)
                return listed
            }
            pages += 1
            progress("transaction history", report.counts.historySubscriptionsAsked, report.drift.count)
            let built: [NewEvent]
            do { built = try owner.answers.transactionHistoryEvents(page) } catch {
                problem("transactionHistory", key.environment, key.originalTransactionId, "a page was refused (\(error.code)): \(error.message)")
                return listed
            }
            let events = try await keyedAfterOtherEvents(built).filter { $0.environment == key.environment }
            for e in events where StreamId(e.streamId).isSubscription { listed.insert(e.streamId) }
            let (new, _) = try await keep(events, stage: "transactionHistory", environment: key.environment)
            report.counts.historyTransactionsStored += new
            guard page.hasMore, let next = page.revision else { return listed }
            guard revisions.insert(next).inserted, pages < AppStoreServerAPIClient.maxPages else {
                problem("transactionHistory", key.environment, key.originalTransactionId, "Apple returned the same revision twice; paging stopped")
                return listed
            }
            revision = next
        }
    }

    // MARK: drift

    /// The subscriptions the run touched, folded from the facts before the run and from all of
    /// them (plus, dry, what it would store), compared at the same time; and those facts.
    func driftAndFacts() async throws(ReconciliationError) -> ([DriftEntry], [Fact]) {
        guard !touched.isEmpty else { return ([], []) }
        let keys = touched.sorted()
        var facts: [Fact]
        do { facts = try await store.projections.facts(of: keys) } catch {
            throw .store(StoreError.unavailable("the facts of the touched subscriptions could not be read: \(error)"))
        }
        let before = facts.filter { $0.position <= headBefore }
        var position = Int64.max / 2
        let now = owner.clock()
        for event in wouldStore {
            position += 1
            facts += FactDecoder.facts(of: event).enumerated().map { i, f in
                f.placed(position: position, ordinal: i, recordedAt: now, streamId: event.streamId)
            }
        }
        let entries = DriftEntry.entries(keys: keys, before: SubscriptionProjection(facts: before).view(at: now),
                                         after: SubscriptionProjection(facts: facts).view(at: now), catalog: owner.catalog)
        return (entries, facts)
    }

    // MARK: storing

    /// API answers keyed after the latest other event of their stream (`AppleAPIAnswerEvents`).
    func keyedAfterOtherEvents(_ built: [NewEvent]) async throws(ReconciliationError) -> [NewEvent] {
        guard !built.isEmpty else { return [] }
        let after: [String: Int64]
        do { after = try await store.reconciliation.latestPositionsBesidesAPIAnswers(streams: Array(Set(built.map(\.streamId)))) } catch {
            throw .store(error)
        }
        return built.map { e in
            var keyed = e
            if let payload = try? JSONValue(json: e.payload),
               let key = AppleAPIAnswerEvents.dedupeKey(type: e.type, payload: payload, after: after[e.streamId]) {
                keyed.dedupeKey = key
            }
            return keyed
        }
    }

    /// Stores `events` (dry: finds which are stored already). Returns (new, already stored) and
    /// marks the subscriptions of the new ones touched.
    mutating func keep(_ events: [NewEvent], stage: String, environment: String) async throws(ReconciliationError) -> (Int, Int) {
        guard !events.isEmpty else { return (0, 0) }
        var new: [NewEvent] = []
        if report.dryRun {
            let stored: Set<String>
            do { stored = try await store.reconciliation.stored(events.map { ($0.streamId, $0.dedupeKey) }) } catch { throw .store(error) }
            var planned = Set(wouldStore.map { $0.streamId + "\n" + $0.dedupeKey })
            for e in events where !stored.contains(e.streamId + "\n" + e.dedupeKey) && planned.insert(e.streamId + "\n" + e.dedupeKey).inserted {
                new.append(e)
            }
            wouldStore += new
        } else {
            do {
                let outcomes = try await store.events.append(events)
                new = zip(events, outcomes).filter { !$0.1.duplicate }.map(\.0)
            } catch let error where !error.isUnavailable {
                // One event the database refuses must not cost the others: store them one by one.
                for e in events {
                    do {
                        if !(try await store.events.append(e)).duplicate { new.append(e) }
                    } catch where !error.isUnavailable {
                        problem(stage, environment, StreamId(e.streamId).isSubscription ? e.streamId : nil, "not stored: \(error)")
                    } catch { throw .store(error) }
                }
            } catch {
                throw .store(error)
            }
        }
        for e in new {
            for fact in FactDecoder.facts(of: e) { if let key = fact.subscription { touched.insert(key) } }
        }
        return (new.count, events.count - new.count)
    }

    // MARK: Apple's limits

    /// Calls `body`, waiting out rate limits (Apple's Retry-After, else a minute) however often
    /// they come, and retrying other temporary failures a few times. Errors retrying cannot fix
    /// are `.apple`.
    mutating func patiently<T>(_ body: () async throws(AppStoreServerAPIError) -> T) async throws(ReconciliationError) -> T {
        var temporary = 0
        while true {
            if Task.isCancelled { throw .cancelled }
            do { return try await body() } catch {
                if Self.isFatal(error) { throw .apple(error) }
                let wait: Duration
                if case .rateLimited(_, let retryAt) = error {
                    report.counts.rateLimitedWaits += 1
                    let until = retryAt.map { max(0, $0 - owner.clock()) } ?? 60_000
                    wait = min(.milliseconds(until), owner.longestWait)
                } else if error.isRetryable, temporary < 3 {
                    temporary += 1
                    wait = .seconds(30 * temporary)
                } else {
                    throw .apple(error)
                }
                do { try await owner.sleep(wait) } catch { throw .cancelled }
            }
        }
    }

    /// The answer says the id is not Apple's (in this environment).
    static func isUnknown(_ e: AppStoreServerAPIError) -> Bool {
        e.handling == .otherEnvironment || [4_040_001, 4_040_005, 4_000_006].contains(e.errorCode ?? 0)
    }

    /// Nothing else will work either: the credentials, the configuration, the client.
    static func isFatal(_ e: AppStoreServerAPIError) -> Bool {
        switch e {
        case .unauthorized, .configuration: true
        case .apple(_, 404, 4_040_003, _): true
        default: false
        }
    }
}


/// A time shared with a metrics gauge.
final class LatestTime: Sendable {
    private let stored = Mutex<EpochMillis?>(nil)
    var value: EpochMillis? {
        get { stored.withLock { $0 } }
        set { stored.withLock { $0 = newValue } }
    }
}

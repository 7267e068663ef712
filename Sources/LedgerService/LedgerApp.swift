import Foundation
import LedgerMetrics
import HTTPServer
import LedgerCore
import LedgerStore

/// The composition root: configuration in, the store and the use cases wired together, the routes
/// on top. `ledger serve` builds one and runs `serve(until:)`; tests build one against a throw-away
/// database and serve `makeRouter()` on an ephemeral port.
///
/// Dependencies point one way: routes → use cases → Store façade / AppStore / WeChatPay →
/// LedgerCore. Nothing here sees libpq.
public final class LedgerApp: Sendable {
    public let configuration: LedgerConfiguration
    public let store: Store
    public let metrics: MetricsRegistry
    public let tokens: TokenAuthority
    public let log: Log
    public let catalog: ProductCatalog

    // Use cases.
    let apple: AppleIngestion
    let wechat: WeChatPushDesk
    let queries: SubscriptionQueries
    let refunds: RefundDesk
    let reports: ReportDesk
    let ties: CustomerTies
    let admin: AdminActions
    let catalogKeeper: CatalogKeeper
    let readiness: Readiness
    /// The auditor's pages: sessions and evidence re-verification (Audit/).
    let audit: AuditDesk
    /// Reconciliation, consumption answers, consent, receipts (the App Store Server API and verifyReceipt).
    public let appleAPI: AppleAPIUseCases
    let wechatConfig: WeChatConfigKeeper
    let webhookEndpoints: WebhookEndpoints
    let webhookDelivery: WebhookDelivery
    /// Failed authentication counted and slowed per address; app tokens' append budget (Guards/).
    let failures: AuthenticationFailures
    let appendBudget: AppendBudget

    /// - Parameter migrationsDirectory: where `/readyz` looks for the migrations this build expects
    ///   (found next to the binary or in the working directory by default).
    public init(configuration: LedgerConfiguration, log: Log = .shared, migrationsDirectory: URL? = nil) throws(LedgerAppError) {
        self.configuration = configuration
        self.log = log
        // Settings that must not serve (Guards/GuardSettings.swift): refused before anything opens.
        if let refusal = configuration.startupRefusals.first { throw .configuration(refusal) }
        let metrics = MetricsRegistry()
        self.metrics = metrics
        do { catalog = try configuration.catalog() } catch {
            throw .configuration("products: \(error)")
        }
        var storeConfiguration = Store.Configuration(
            databaseURL: configuration.databaseURL, poolSize: configuration.databasePoolSize, acquireTimeout: .seconds(5),
            catalog: catalog, clock: configuration.clock, readDatabaseURL: configuration.readDatabaseURL,
            replicaMaxLag: .milliseconds(Int64(configuration.replicaMaxLagSeconds * 1000)),
            longReads: LongReadSettings(concurrent: configuration.limits.longReads,
                                        statementTimeout: .seconds(configuration.limits.longReadTimeoutMinutes * 60)),
            onProjectionFailure: { failure in
                metrics.increment("ledger_projection_hook_failures_total", ["hook": failure.hook])
                log.error("projection hook failed; events were stored", ["hook": failure.hook, "error": failure.message])
            })
        storeConfiguration.outboxConsumers = OutboxConsumer.registered.map {
            $0.name == WebhookOutbox.name
                ? WebhookOutbox.consumer(schedule: configuration.webhooks.schedule, leaseMillis: EpochMillis(configuration.webhooks.leaseSeconds) * 1000)
                : $0
        }
        storeConfiguration.webhookExpirySettle = configuration.webhooks.expirySettleMillis
        storeConfiguration.onCatchUpError = { error in log.error("projection worker", ["error": "\(error)"]) }
        store = Store(storeConfiguration)
        let intake = NotificationIntake(events: store.events, metrics: metrics, log: log,
                                        unreadableRule: .init(burst: configuration.limits.unreadablePerMinute,
                                                              perMinute: configuration.limits.unreadablePerMinute))
        do { apple = try AppleIngestion(configuration: configuration.apple, intake: intake) } catch {
            throw .configuration("Apple: \(error)")
        }
        for root in apple.allowedTestRoots {
            log.warn("accepting Production under a trusted root that is not Apple's (LEDGER_APPLE_ALLOW_TEST_ROOTS=true): never in a real deployment",
                     ["root": root.certificate.subject, "file": root.path, "sha256": AppleRootPolicy.fingerprint(root.certificate)])
        }
        appleAPI = try AppleAPIUseCases(configuration: configuration, ingestion: apple, store: store, catalog: catalog, metrics: metrics, log: log)
        wechat = try WeChatPushDesk(configuration: configuration.wechat, intake: intake, store: store, metrics: metrics, log: log)
        wechatConfig = WeChatConfigKeeper(configuration: configuration.wechat, desk: wechat, store: store, log: log)
        queries = SubscriptionQueries(store: store, catalog: catalog)
        refunds = RefundDesk(store: store, catalogDigest: CatalogRecord.digest(catalog))
        reports = ReportDesk(store: store, catalogDigest: CatalogRecord.digest(catalog))
        ties = CustomerTies(store: store, perDay: configuration.limits.tiesPerSubscriptionPerDay)
        admin = AdminActions(store: store, log: log)
        catalogKeeper = CatalogKeeper(store: store, catalog: catalog, log: log)
        readiness = Readiness(store: store, migrationsDirectory: migrationsDirectory, catalog: catalogKeeper, metrics: metrics, log: log)
        failures = AuthenticationFailures(limits: configuration.limits, trustedProxies: configuration.http.trustedProxies, metrics: metrics, log: log)
        appendBudget = AppendBudget(limits: configuration.limits, metrics: metrics)
        tokens = TokenAuthority(tokens: configuration.tokens, failures: failures)
        audit = AuditDesk(configuration: configuration)
        webhookEndpoints = WebhookEndpoints(store: store, settings: configuration.webhooks, log: log)
        webhookDelivery = WebhookDelivery(
            store: store, endpoints: webhookEndpoints, settings: configuration.webhooks, metrics: metrics, log: log,
            allowPlainHTTPLoopback: configuration.outboundAllowsPlainHTTPLoopback)
        webhookDelivery.describe()
        if audit.sessions.ephemeralKey {
            log.warn("LEDGER_SESSION_KEY is not set: auditor sessions are signed with a key made up at start, so they end at restart and other instances refuse them")
        }
        if let problem = audit.evidenceProblem {
            log.warn("the auditor's pages cannot re-verify evidence: \(problem)")
        }
        describeMetrics()
    }

    private func describeMetrics() {
        metrics.describe("ledger_http_requests_total", type: .counter, help: "HTTP requests by route, method and status")
        metrics.describe("ledger_http_request_duration_seconds", type: .histogram, help: "HTTP request latency by route")
        metrics.describe("ledger_notifications_total", type: .counter, help: "Notifications received by source and outcome")
        describeIngestMetrics()
        readiness.registerMetrics()
        let store = self.store
        metrics.gauge("ledger_events_appended_total", help: "Events appended since start (new, not duplicates)") {
            [(labels: [:], value: Double(store.statistics.appended))]
        }
        metrics.gauge("ledger_events_duplicates_total", help: "Appends answered with an already stored event since start") {
            [(labels: [:], value: Double(store.statistics.duplicates))]
        }
        metrics.gauge("ledger_append_batches_total", help: "Group-commit transactions since start") {
            [(labels: [:], value: Double(store.statistics.batches))]
        }
        metrics.gauge("ledger_append_queue", help: "Appends waiting for the group-commit writer") {
            [(labels: [:], value: Double(store.statistics.queued))]
        }
        metrics.collect([
            (name: "ledger_long_reads", type: .gauge, help: "Long reads (exports, folds at a position) running now, and this instance's limit"),
            (name: "ledger_long_reads_total", type: .counter, help: "Long reads by outcome: admitted, refused (429), cancelled, timed_out"),
        ]) {
            let s = store.longReadStatistics
            return ["ledger_long_reads": [(labels: ["state": "running"], value: Double(s.running)),
                                          (labels: ["state": "limit"], value: Double(s.limit))],
                    "ledger_long_reads_total": [(labels: ["outcome": "admitted"], value: Double(s.admitted)),
                                                (labels: ["outcome": "refused"], value: Double(s.refused)),
                                                (labels: ["outcome": "cancelled"], value: Double(s.cancelled)),
                                                (labels: ["outcome": "timed_out"], value: Double(s.timedOut))]]
        }
        metrics.gauge("ledger_db_pool_connections", help: "Database pool connections by state (the writer's own connection is not in it)") {
            let s = store.statistics.pool
            return [(labels: ["state": "in_use"], value: Double(s.inUse)),
                    (labels: ["state": "idle"], value: Double(s.idle)),
                    (labels: ["state": "waiting"], value: Double(s.waiting)),
                    (labels: ["state": "max"], value: Double(s.maxConnections))]
        }
    }

    /// Where reads were answered and how far the replica is behind (read at scrape time; only
    /// when a replica is configured).
    static func registerReadMetrics(_ metrics: MetricsRegistry, _ store: Store) {
        guard store.configuration.readDatabaseURL != nil else { return }
        metrics.collect([
            (name: "ledger_reads_total", type: .counter, help: "App and auditor reads by where they were answered"),
            (name: "ledger_replica_fallbacks_total", type: .counter, help: "Reads that failed on the replica and were answered by the primary"),
            (name: "ledger_replica_up", type: .gauge, help: "1 when the read replica answers as a standby"),
            (name: "ledger_replica_lag_bytes", type: .gauge, help: "WAL bytes the read replica is behind the primary"),
            (name: "ledger_replica_lag_seconds", type: .gauge, help: "Seconds the read replica is behind (0 when it has every event)"),
            (name: "ledger_replica_lag_events", type: .gauge, help: "Events the read replica has not replayed yet"),
        ]) {
            let stats = await store.readStatistics()
            var out: [String: [MetricsRegistry.Sample]] = [
                "ledger_reads_total": ReadSource.allCases.map { (labels: ["source": $0.rawValue], value: Double(stats.served[$0] ?? 0)) },
                "ledger_replica_fallbacks_total": [(labels: [:], value: Double(stats.replicaFallbacks))],
                "ledger_replica_up": [(labels: [:], value: stats.replica == nil ? 0 : 1)],
            ]
            if let r = stats.replica {
                out["ledger_replica_lag_bytes"] = [(labels: [:], value: Double(r.lagBytes))]
                out["ledger_replica_lag_seconds"] = [(labels: [:], value: Double(r.lagSeconds))]
                out["ledger_replica_lag_events"] = [(labels: [:], value: Double(r.eventsBehind))]
            }
            return out
        }
    }

    /// Records one finished exchange (called on a server thread: counting only).
    public func observe(_ exchange: HTTPExchange) {
        let status = String(exchange.status)
        metrics.increment("ledger_http_requests_total", ["route": exchange.route, "method": exchange.method, "status": status])
        let seconds = Double(exchange.duration.components.seconds) + Double(exchange.duration.components.attoseconds) / 1e18
        metrics.observe("ledger_http_request_duration_seconds", ["route": exchange.route], value: seconds)
    }

    /// The main listener's limits: per-IP connections and the request deadline on by default.
    public func httpConfiguration() -> HTTPServerConfiguration {
        var c = HTTPServerConfiguration(host: configuration.listenHost, port: configuration.listenPort)
        c.maxBodyBytes = configuration.http.maxBodyBytes
        c.connectionLimit = configuration.http.connectionLimit
        c.perIPConnectionLimit = configuration.http.perIPConnectionLimit
        c.connectionTimeoutSeconds = configuration.http.connectionTimeoutSeconds
        c.receiveDeadlineSeconds = configuration.http.receiveDeadlineSeconds
        c.threadPoolSize = configuration.http.threadPoolSize
        c.handlerTimeout = .seconds(configuration.http.requestDeadlineSeconds)
        return c
    }

    /// Records this instance's catalog when it differs from the last one recorded (see
    /// `CatalogKeeper`); `serve` runs it at start.
    @discardableResult
    public func recordCatalogIfChanged() async throws -> Bool { try await catalogKeeper.recordIfChanged() }

    /// The use case behind `ledger rebuild` and `POST /v1/admin/rebuild`.
    public var adminActions: AdminActions { admin }

    /// The worker that delivers webhook events (any number of instances share the queue).
    func webhookDeliveryService() -> OutboxService {
        let delivery = webhookDelivery
        return OutboxService(store: store, consumer: delivery.consumer, concurrency: configuration.webhooks.concurrency,
                             perPartition: configuration.webhooks.perEndpoint, pollInterval: .milliseconds(configuration.webhooks.pollIntervalMillis), log: log) { item in
            await delivery.work(item)
        }
    }

    /// Closes the store (for a process that did not `serve`).
    public func shutdown() {
        store.close()
    }

    /// The service's wall clock in the API's unit (ms since 1970).
    public static func nowMillis() -> EpochMillis { Clock.nowMillis() }
}

public enum LedgerAppError: Error, CustomStringConvertible {
    case configuration(String)
    case listen(String)
    public var description: String {
        switch self {
        case .configuration(let m): return "configuration: \(m)"
        case .listen(let m): return m
        }
    }
}

extension LedgerApp {
    /// Runs the service until `stop` yields (SIGTERM/SIGINT): the store (its catch-up worker and
    /// group-commit writer), the HTTP listener (and the admin listener when configured) and the
    /// start-up jobs, under one `ServiceGroup`. Stopping drains in reverse order: the listeners
    /// finish requests in flight, then the store stops its worker, commits and answers what is
    /// queued and closes.
    public func serve(until stop: AsyncStream<Void>, onListening: @escaping @Sendable ([String]) -> Void = { _ in }) async throws {
        let main = HTTPServer(configuration: httpConfiguration(), router: makeRouter())
        main.observer = { [self] in observe($0) }
        var services: [any LifecycleService] = [store]
        var listeners = [main]
        services.append(HTTPService(name: "http", server: main))
        if let (host, port) = configuration.adminListen {
            var c = HTTPServerConfiguration(host: host, port: port)
            c.perIPConnectionLimit = 8
            c.connectionLimit = 64
            c.threadPoolSize = 1
            c.handlerTimeout = .seconds(configuration.http.requestDeadlineSeconds)
            let adminServer = HTTPServer(configuration: c, router: makeAdminRouter())
            listeners.append(adminServer)
            services.append(HTTPService(name: "admin-http", server: adminServer))
        }
        services += appleAPI.lifecycleServices(log: log)
        services.append(StartupJob(name: "record-catalog", log: log) { [self] in try await recordCatalogIfChanged() })
        services.append(StartupJob(name: "record-webhook-endpoints", log: log) { [self] in try await webhookEndpoints.syncConfigured() })
        services.append(webhookDeliveryService())
        services.append(ProcessMemoryService())
        if configuration.wechat.isConfigured {
            services.append(StartupJob(name: "record-wechat-config", log: log) { [self] in try await wechatConfig.recordIfChanged() })
        }
        // Bind before anything runs, so a port in use fails `serve` at once with its reason.
        for server in listeners {
            do { try server.start() } catch { throw LedgerAppError.listen("\(error)") }
        }
        onListening(listeners.map { "\($0.configuration.host):\($0.port ?? $0.configuration.port)" })
        try await ServiceGroup(services, log: log).run(until: stop)
    }
}

import Foundation
import LedgerMetrics
import Synchronization
import LedgerCore
import LedgerStore

/// Whether this instance is fit to answer, and why not.
struct ReadinessReport: Sendable {
    var ready: Bool
    /// For operators (admin token or the admin listener): database, migrations, each projection's
    /// checkpoint and last error, the catalog. Never shown on the open `/readyz`, which says only
    /// ready or not: internal messages help an attacker more than a load balancer.
    var detail: JSONValue
}

/// Use case: readiness and the scrape-time metrics. Ready = the database answers, every migration
/// in Migrations/ is applied, and no projection is stopped on a failing event.
struct Readiness: Sendable {
    let store: Store
    let catalog: CatalogKeeper
    let metrics: MetricsRegistry
    let log: Log
    /// The migrations this build expects, read and hashed once at start: the anonymous `/readyz`
    /// must not cost a directory scan and a SHA-256 of every file per request.
    private let expected: Result<[Migration], MigrationError>
    private let openAnswer = OpenAnswerCache()

    init(store: Store, migrationsDirectory: URL?, catalog: CatalogKeeper, metrics: MetricsRegistry, log: Log) {
        self.store = store
        self.catalog = catalog
        self.metrics = metrics
        self.log = log
        do throws(MigrationError) {
            let directory: URL
            if let migrationsDirectory { directory = migrationsDirectory } else { directory = try Migrator.locateDirectory() }
            expected = .success(try store.migrator(directory: directory).loadMigrations())
        } catch {
            expected = .failure(error)
        }
        metrics.describe("ledger_readiness_checks_total", type: .counter,
                         help: "Readiness checks run against the database (the open /readyz reuses one for a second)")
    }

    /// The open `/readyz`'s ready-or-not, reused for a second so a flood of anonymous probes
    /// costs at most one check per second.
    func isReady() async -> Bool {
        if let cached = openAnswer.fresh() { return cached }
        let ready = await report().ready
        openAnswer.store(ready)
        return ready
    }

    func report() async -> ReadinessReport {
        metrics.increment("ledger_readiness_checks_total")
        var body: [String: JSONValue] = ["database": "ok"]
        let migrations: [Migration]
        switch expected {
        case let .success(loaded): migrations = loaded
        case let .failure(error):
            return ReadinessReport(ready: false, detail: ["status": "not_ready", "reason": .string("\(error)")])
        }
        let health = await store.health(migrations: migrations)
        if !health.databaseReachable { body["database"] = "unavailable" }
        if let m = health.migrations {
            body["migrations"] = ["applied": .integer(Int64(m.applied.count)), "pending": .integer(Int64(m.pending.count + m.changed.count))]
            if !m.isCurrent {
                body["reason"] = .string(m.changed.isEmpty
                    ? "migrations pending: \(m.pending.joined(separator: ", ")); run `ledger migrate`"
                    : "landed migrations changed on disk: \(m.changed.joined(separator: ", "))")
            }
        }
        if let problem = health.problem {
            body["reason"] = .string(problem)
            log.warn("not ready", ["reason": problem])
        }
        body["projections"] = .array(health.projections.map { s in
            ["name": .string(s.name), "position": .integer(s.position), "head": .integer(s.head), "lag": .integer(s.lag),
             "status": .string(s.status), "lastError": .optional(s.lastError)]
        })
        if let failed = health.projections.first(where: \.isFailed), body["reason"] == nil {
            body["reason"] = .string("projection \(failed.name) is stopped on a failing event: \(failed.lastError ?? "?")")
        }
        if let outbox = try? await store.outbox.statuses(now: Clock.nowMillis()) {
            // Operators see a backlog here; it does not make the instance unready (the work waits durably).
            body["outbox"] = .array(outbox.map { s in
                ["consumer": .string(s.consumer), "pending": .integer(Int64(s.counts[.pending] ?? 0)),
                 "done": .integer(Int64(s.counts[.done] ?? 0)), "exhausted": .integer(Int64(s.counts[.exhausted] ?? 0)),
                 "oldestPendingSeconds": .number(Double(s.oldestPendingAgeMillis) / 1000)]
            })
        }
        body["catalog"] = await catalog.health()
        if store.configuration.readDatabaseURL != nil {
            var replica: [String: JSONValue] = ["status": health.replica == nil ? "unavailable" : "ok"]
            if let r = health.replica {
                replica["replayedPosition"] = .integer(r.replayedPosition)
                replica["lagBytes"] = .integer(r.lagBytes)
                replica["lagSeconds"] = .number(r.lagSeconds)
            }
            if let problem = health.replicaProblem { replica["reason"] = .string(problem + "; reads use the primary meanwhile") }
            body["replica"] = .object(replica)
        }
        body["status"] = .string(health.isReady ? "ready" : "not_ready")
        return ReadinessReport(ready: health.isReady, detail: .object(body))
    }

    /// The Prometheus text: the service's counters and gauges, then each projection's checkpoint,
    /// lag and stopped state read at scrape time (one small query), then unmapped products.
    func metricsText() async -> String { await metrics.render() }

    /// Registers the families read from the database at scrape time: each projection's checkpoint,
    /// lag and failure, the hash chain's head, reads by source, unmapped products, WeChat's orphans.
    func registerMetrics() {
        let store = self.store, catalog = self.catalog
        metrics.collect([
            (name: "ledger_projection_position", type: .gauge, help: "Last event position applied by each projection"),
            (name: "ledger_projection_lag", type: .gauge, help: "Events appended but not yet applied, per projection"),
            (name: "ledger_projection_failed", type: .gauge, help: "1 when the projection stopped on a failing event (see /readyz)"),
        ]) {
            guard let statuses = try? await store.projectionStatuses() else { return nil }
            return [
                "ledger_projection_position": statuses.map { (labels: ["projection": $0.name], value: Double($0.position)) },
                "ledger_projection_lag": statuses.map { (labels: ["projection": $0.name], value: Double($0.lag)) },
                "ledger_projection_failed": statuses.map { (labels: ["projection": $0.name], value: $0.isFailed ? 1 : 0) },
            ]
        }
        metrics.collect([
            (name: "ledger_outbox_items", type: .gauge, help: "Outbox items per consumer and status"),
            (name: "ledger_outbox_oldest_pending_seconds", type: .gauge, help: "Age of the oldest undelivered item per consumer (0: none)"),
        ]) {
            guard let outbox = try? await store.outbox.statuses(now: Clock.nowMillis()) else { return nil }
            return [
                "ledger_outbox_items": outbox.flatMap { s in
                    OutboxItemStatus.allCases.map { (labels: ["consumer": s.consumer, "status": $0.rawValue], value: Double(s.counts[$0] ?? 0)) }
                },
                "ledger_outbox_oldest_pending_seconds": outbox.map { (labels: ["consumer": $0.consumer], value: Double($0.oldestPendingAgeMillis) / 1000) },
            ]
        }
        // The value to compare with an anchor kept elsewhere (`ledger verify --anchor-file`).
        metrics.collect([
            (name: "ledger_chain_head_position", type: .gauge, help: "Last position of the hash chain over the event log"),
            (name: "ledger_chain_head", type: .gauge, help: "Hash of the chain at its head (label hash; value 1)"),
        ]) {
            guard let head = try? await store.chain.head() else { return nil }
            return ["ledger_chain_head_position": [(labels: [:], value: Double(head.position))],
                    "ledger_chain_head": [(labels: ["position": "\(head.position)", "hash": head.hex], value: 1)]]
        }
        LedgerApp.registerReadMetrics(metrics, store)
        catalog.registerUnmappedProductsMetric(metrics)
        registerWeChatMetrics()
    }

}

/// One second of the open readiness answer.
private final class OpenAnswerCache: Sendable {
    private let entry = Mutex<(at: ContinuousClock.Instant, ready: Bool)?>(nil)

    func fresh() -> Bool? {
        entry.withLock { e in e.flatMap { ContinuousClock.now - $0.at < .seconds(1) ? $0.ready : nil } }
    }

    func store(_ ready: Bool) { entry.withLock { $0 = (.now, ready) } }
}

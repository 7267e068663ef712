import Foundation
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
    let metrics: Metrics
    let log: Log
    /// The migrations this build expects, read and hashed once at start: the anonymous `/readyz`
    /// must not cost a directory scan and a SHA-256 of every file per request.
    private let expected: Result<[Migration], MigrationError>
    private let openAnswer = OpenAnswerCache()

    init(store: Store, migrationsDirectory: URL?, catalog: CatalogKeeper, metrics: Metrics, log: Log) {
        self.store = store
        self.catalog = catalog
        self.metrics = metrics
        self.log = log
        do throws(MigrationError) {
            let directory: URL
            if let migrationsDirectory { directory = migrationsDirectory } else { directory = try Migrator.locateDirectory() }
            expected = .success(try Migrator(conninfo: store.configuration.databaseURL, directory: directory).loadMigrations())
        } catch {
            expected = .failure(error)
        }
        metrics.describe("ledger_readiness_checks_total", type: "counter",
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
    func metricsText() async -> String {
        var out = metrics.render()
        if let statuses = try? await store.projectionStatuses() {
            out += "# HELP ledger_projection_position Last event position applied by each projection\n# TYPE ledger_projection_position gauge\n"
            for s in statuses { out += "ledger_projection_position{projection=\"\(s.name)\"} \(s.position)\n" }
            out += "# HELP ledger_projection_lag Events appended but not yet applied, per projection\n# TYPE ledger_projection_lag gauge\n"
            for s in statuses { out += "ledger_projection_lag{projection=\"\(s.name)\"} \(s.lag)\n" }
            out += "# HELP ledger_projection_failed 1 when the projection stopped on a failing event (see /readyz)\n# TYPE ledger_projection_failed gauge\n"
            for s in statuses { out += "ledger_projection_failed{projection=\"\(s.name)\"} \(s.isFailed ? 1 : 0)\n" }
        } else {
            out += "# projection status unavailable: the database did not answer\n"
        }
        if let head = try? await store.chain.head() {
            // The value to compare with an anchor kept elsewhere (`ledger verify --anchor-file`).
            out += "# HELP ledger_chain_head_position Last position of the hash chain over the event log\n# TYPE ledger_chain_head_position gauge\n"
            out += "ledger_chain_head_position \(head.position)\n"
            out += "# HELP ledger_chain_head Hash of the chain at its head (label hash; value 1)\n# TYPE ledger_chain_head gauge\n"
            out += "ledger_chain_head{position=\"\(head.position)\",hash=\"\(head.hex)\"} 1\n"
        }
        return out + (await LedgerApp.readMetrics(store)) + (await catalog.unmappedProductsMetric()) + (await wechatMetricsText())
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

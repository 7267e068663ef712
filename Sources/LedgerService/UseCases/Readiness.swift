import Foundation
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
    let migrationsDirectory: URL?
    let catalog: CatalogKeeper
    let metrics: Metrics
    let log: Log

    func report() async -> ReadinessReport {
        var body: [String: JSONValue] = ["database": "ok"]
        let directory: URL
        do { directory = try migrationsDirectory ?? Migrator.locateDirectory() } catch {
            return ReadinessReport(ready: false, detail: ["status": "not_ready", "reason": .string("\(error)")])
        }
        let health = await store.health(migrationsDirectory: directory)
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
        if let outbox = try? await store.outbox.statuses(now: Clock.nowMillis()) {
            out += "# HELP ledger_outbox_items Outbox items per consumer and status\n# TYPE ledger_outbox_items gauge\n"
            for s in outbox {
                for status in OutboxItemStatus.allCases {
                    out += "ledger_outbox_items{consumer=\"\(s.consumer)\",status=\"\(status.rawValue)\"} \(s.counts[status] ?? 0)\n"
                }
            }
            out += "# HELP ledger_outbox_oldest_pending_seconds Age of the oldest undelivered item per consumer (0: none)\n# TYPE ledger_outbox_oldest_pending_seconds gauge\n"
            for s in outbox { out += "ledger_outbox_oldest_pending_seconds{consumer=\"\(s.consumer)\"} \(Double(s.oldestPendingAgeMillis) / 1000)\n" }
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

import Foundation
import HTTPServer
import LedgerStore
import Postgres

extension LedgerApp {
    func addHealthRoutes(to router: inout Router) {
        router.add("GET", "/healthz") { _ in JSONBody.response(200, ["status": "ok"]) }
        router.add("GET", "/readyz") { [self] _ in await readiness() }
        router.add("GET", "/metrics") { [self] _ in
            .text(200, metrics.render() + (await projectionMetrics()) + (await unmappedProductsMetric()),
                  contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
    }

    /// Ready = the database answers, every migration in Migrations/ is applied, and no
    /// projection is stopped on a failing event. The body says which check failed.
    func readiness() async -> HTTPResponse {
        var body: [String: Any] = ["status": "ready", "database": "ok"]
        var ready = true
        do {
            let directory = try migrationsDirectory ?? Migrator.locateDirectory()
            let migrator = Migrator(conninfo: configuration.databaseURL, directory: directory)
            let status = try await migrator.status(pool: pool)
            body["migrations"] = ["applied": status.applied.count, "pending": status.pending.count + status.changed.count]
            if !status.isCurrent {
                ready = false
                body["reason"] = status.changed.isEmpty
                    ? "migrations pending: \(status.pending.joined(separator: ", ")); run `ledger migrate`"
                    : "landed migrations changed on disk: \(status.changed.joined(separator: ", "))"
            }
        } catch MigrationError.database(let e) where e.isUnavailable {
            ready = false
            body["database"] = "unavailable"
            body["reason"] = "the database is not reachable: \(e.message)"
        } catch {
            ready = false
            body["database"] = "unavailable"
            body["reason"] = "\(error)"
        }
        body["projections"] = await projectionHealth(&ready)
        body["catalog"] = await catalogHealth()
        body["status"] = ready ? "ready" : "not_ready"
        return JSONBody.response(ready ? 200 : 503, body)
    }

    /// Checkpoint, lag and stopped state per projection, read at scrape time (one small query).
    func projectionMetrics() async -> String {
        guard let statuses = try? await ProjectionStatusReader.statuses(pool) else {
            return "# projection status unavailable: the database did not answer\n"
        }
        var out = "# HELP ledger_projection_position Last event position applied by each projection\n# TYPE ledger_projection_position gauge\n"
        for s in statuses { out += "ledger_projection_position{projection=\"\(s.name)\"} \(s.position)\n" }
        out += "# HELP ledger_projection_lag Events appended but not yet applied, per projection\n# TYPE ledger_projection_lag gauge\n"
        for s in statuses { out += "ledger_projection_lag{projection=\"\(s.name)\"} \(s.lag)\n" }
        out += "# HELP ledger_projection_failed 1 when the projection stopped on a failing event (see /readyz)\n# TYPE ledger_projection_failed gauge\n"
        for s in statuses { out += "ledger_projection_failed{projection=\"\(s.name)\"} \(s.isFailed ? 1 : 0)\n" }
        return out
    }

    /// Each projection's checkpoint, lag and error; a stopped projection makes the service not ready,
    /// because its answers are stale until the failing event is dealt with.
    func projectionHealth(_ ready: inout Bool) async -> [[String: Any]] {
        guard let statuses = try? await ProjectionStatusReader.statuses(pool) else { return [] }
        return statuses.map { s in
            if s.isFailed { ready = false }
            return ["name": s.name, "position": s.position, "head": s.head, "lag": s.lag, "status": s.status,
                    "lastError": s.lastError ?? NSNull()] as [String: Any]
        }
    }
}

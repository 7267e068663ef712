import Foundation
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import Postgres
import WeChatPay
import XCTest

/// A populated database migrated from 0008 through the current migrations (issue 25 item 6).
///
/// Database A is filled through the live path of today's service (HTTP: Apple notifications and
/// WeChat pushes, live projections). Database B is created at migration 0008 (the files up to
/// 0008 only, applied by the real Migrator) and given A's log as it stood in 0008's schema: the
/// `events` rows (positions handed out by moving event_head first, as append_events does), their
/// `facts` rows and the facts' checkpoint, by plain SQL inserts valid at 0008. B is then migrated to head (0009
/// chains the existing log, 0010 changes storage), and must:
/// - chain exactly as A's live appends chained (same hash at every position),
/// - verify (LogVerifier, what `ledger verify` runs: every link and every signature),
/// - after a rebuild, hold in every projection table what A's live path produced.
final class MigrationUpgradeTests: XCTestCase {
    static func nowMillis() -> EpochMillis { EpochMillis(Date().timeIntervalSince1970 * 1000) }

    func fill(_ h: ServiceHarness) async throws {
        let day: EpochMillis = 86_400_000
        let start: EpochMillis = 1_767_225_600_000
        for n in 0..<3 {
            let otid = "710000000000000\(n)"
            var steps: [(String, String?, EpochMillis)] = [("SUBSCRIBED", "INITIAL_BUY", start), ("DID_RENEW", nil, start + 30 * day)]
            if n == 1 { steps.append(("REFUND", nil, start + 35 * day)) }
            if n == 2 { steps.append(("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", start + 40 * day)) }
            for (type, subtype, signed) in steps {
                var sample = AppleTestAuthority.sample(type: type, subtype: subtype, environment: "Production", originalTransactionId: otid,
                                                       transactionId: "\(otid)\(signed / day)", signedDate: signed, expiresDate: signed + 30 * day)
                if type == "REFUND" {
                    sample.transaction.revocationDate = AppleTime(signed)
                    sample.transaction.revocationReason = 0
                }
                sample.notification.data?.signedTransactionInfo = try h.authority.sign(sample.transaction)
                sample.notification.data?.signedRenewalInfo = try h.authority.sign(sample.renewal)
                let a = try await h.post("/v1/apple/notifications", try AppleTestAuthority.body(signedPayload: h.authority.sign(sample.notification)))
                XCTAssertEqual(a.status, 200, a.text)
            }
        }
        let side = WeChatSide()
        let signed = start + 2 * day
        try await side.push(h, WeChatSide.signing(otid: "7200000000000001", openId: "oMig", product: "vip_monthly", signed: signed, renewal: signed + 30 * day))
        try await side.push(h, WeChatSide.deliver(otid: "7200000000000001", openId: "oMig", product: "vip_monthly", order: "MIG-1",
                                                  paid: signed + 1000, create: signed + 1000, renewal: signed + 30 * day))
        try await side.push(h, WeChatSide.refund(openId: "oMig", mchOrderId: "mch-MIG-1", wxOrderId: "4200-MIG-1", at: signed + 3 * day, refundId: "RF-MIG"))
    }

    /// Every table of the `projections` schema, each as its rows' JSON (minus `drop` columns), sorted.
    /// The reports' tables carry a dimension id, which depends on the order each database first
    /// wrote a set of dimensions: a row shows the dimensions it names (environment, source, product,
    /// currency) instead. `report_dimensions` itself is that dictionary, not an answer: left out.
    func projectionTables(_ c: Connection, drop: [String: [String]]) throws -> [String: [String]] {
        let tables = try c.query("""
            SELECT tablename FROM pg_tables WHERE schemaname = 'projections' AND tablename NOT LIKE '%\\_next' AND tablename NOT LIKE '%\\_old'
              AND tablename NOT LIKE '%\\_retired' AND tablename <> 'report_dimensions'
            ORDER BY tablename
            """, name: "projection tables").rows.map { try $0.decode(String.self, "tablename") }
        var out: [String: [String]] = [:]
        for t in tables {
            let minus = (drop[t] ?? []).map { " - '\($0)'" }.joined()
            let hasDimensions = try c.query("""
                SELECT count(*) AS n FROM information_schema.columns WHERE table_schema = 'projections' AND table_name = $1 AND column_name = 'dimensions'
                """, [.text(t)], name: "dimension column").first!.decode(Int64.self, "n") > 0
            let sql = hasDimensions
                ? "SELECT (to_jsonb(x)\(minus) || jsonb_build_object('dimensions', to_jsonb(d) - 'id'))::text AS j FROM projections.\(t) x JOIN projections.report_dimensions d ON d.id = x.dimensions"
                : "SELECT (to_jsonb(x)\(minus))::text AS j FROM projections.\(t) x"
            out[t] = try c.query(sql, name: "rows of \(t)").rows.map { try $0.decode(String.self, "j") }.sorted()
        }
        return out
    }

    func testPopulatedDatabaseMigratedFrom0008VerifiesAndEqualsTheLivePath() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            try await fill(h)
            // A's projections are the live hook's, compared as they are: no catch-up pass runs.
            let a = h.admin
            let head = try a.query("SELECT position FROM event_head", name: "head").first!.decode(Int64.self, "position")
            XCTAssertGreaterThanOrEqual(head, 10)

            // B at 0008: the real Migrator over a directory holding only 0001…0008.
            let all = try Migrator.locateDirectory()
            let old = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-migrations-0008-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: old, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: old) }
            for name in try FileManager.default.contentsOfDirectory(atPath: all.path) where name.hasSuffix(".sql") && name <= "0008_wechat.sql" {
                try FileManager.default.copyItem(at: all.appendingPathComponent(name), to: old.appendingPathComponent(name))
            }
            let b = try TestDatabase.create(migrate: false)
            defer { try? b.drop() }
            let owner = b.store(as: .admin, poolSize: 1, liveProjections: false)
            defer { owner.close() }
            let applied08 = try owner.migrator(directory: old).migrate()
            XCTAssertEqual(applied08.last, "0008_wechat.sql")
            let bc = try b.connect()
            XCTAssertEqual(try bc.query("SELECT to_regclass('public.event_chain') IS NULL AS absent", name: "no chain at 0008").first!.decode(Bool.self, "absent"), true)

            // A's log into B, as rows valid at 0008 (only B's columns are read from A's JSON).
            try bc.query("UPDATE event_head SET position = $1", [.int64(head)], name: "hand out positions")
            for row in try a.query("SELECT to_jsonb(e)::text AS j FROM events e ORDER BY position", name: "A events").rows {
                try bc.query("INSERT INTO events SELECT * FROM jsonb_populate_record(NULL::events, $1::jsonb)", [.text(try row.decode(String.self, "j"))], name: "B event")
            }
            for row in try a.query("SELECT to_jsonb(f)::text AS j FROM facts f ORDER BY schema_version, position, ordinal", name: "A facts").rows {
                try bc.query("INSERT INTO facts SELECT * FROM jsonb_populate_record(NULL::facts, $1::jsonb)", [.text(try row.decode(String.self, "j"))], name: "B fact")
            }

            // The facts' checkpoint (how far each fact version is derived) travels with them.
            try bc.query("DELETE FROM projection_checkpoints WHERE projection LIKE 'facts.v%'", name: "B fact checkpoints")
            for row in try a.query("SELECT to_jsonb(p)::text AS j FROM projection_checkpoints p WHERE projection LIKE 'facts.v%'", name: "A fact checkpoints").rows {
                try bc.query("INSERT INTO projection_checkpoints SELECT * FROM jsonb_populate_record(NULL::projection_checkpoints, $1::jsonb)",
                             [.text(try row.decode(String.self, "j"))], name: "B fact checkpoint")
            }

            // To head.
            let applied = try owner.migrator(directory: all).migrate()
            XCTAssertEqual(applied.first, "0009_audit_chain.sql", "\(applied)")
            XCTAssertFalse(try owner.migrator(directory: all).status().pending.contains { _ in true })

            // The chain 0009 computed over the old log equals the one A's appends wrote.
            let chainA = try a.query("SELECT position, encode(hash, 'hex') AS h FROM event_chain ORDER BY position", name: "A chain").rows.map { try $0.decode(String.self, "h") }
            let chainB = try bc.query("SELECT position, encode(hash, 'hex') AS h FROM event_chain ORDER BY position", name: "B chain").rows.map { try $0.decode(String.self, "h") }
            XCTAssertEqual(chainB.count, Int(head))
            XCTAssertEqual(chainB, chainA, "0009's chain of existing events differs from the live append's")

            // `ledger verify`'s walk over B: every link and every signature.
            let storeB = Store(.init(databaseURL: b.adminConninfo, poolSize: 2, catalog: h.app.store.configuration.catalog, liveProjections: false))
            defer { storeB.close() }
            let report = try await LogVerifier(store: storeB, evidence: try XCTUnwrap(h.app.audit.evidence)).verify(from: 1, anchors: []) { _, _ in }
            XCTAssertEqual(report.breaks.map { "\($0)" }, [], "the migrated log does not verify")
            XCTAssertEqual(report.eventsChecked, Int(head))
            XCTAssertGreaterThan(report.signaturesVerified, 0)

            // A rebuild of B equals A's live projections, table by table. evaluated_at is when a
            // row was last folded (ingestion vs rebuild), not an answer.
            _ = try await storeB.rebuilder().run(projections: Set(ProjectionName.allCases))
            let drop = ["subscriptions": ["evaluated_at"]]
            // The Apple status check has no live hook: A's worker brings it to the head first.
            _ = try await h.app.store.worker.catchUp()
            let live = try projectionTables(a, drop: drop)
            let rebuilt = try projectionTables(bc, drop: drop)
            XCTAssertEqual(Set(rebuilt.keys), Set(live.keys))
            XCTAssertGreaterThan(live["subscriptions"]?.count ?? 0, 3)
            // The reports are compared too (kept by the catch-up, brought to the head above).
            XCTAssertGreaterThan(live["report_daily"]?.count ?? 0, 0, "A's reports hold nothing to compare")
            XCTAssertGreaterThan(live["report_subscriptions"]?.count ?? 0, 0)
            for (table, rows) in live.sorted(by: { $0.key < $1.key }) {
                XCTAssertEqual(rebuilt[table] ?? [], rows, "projections.\(table): the migrated, rebuilt database differs from the live path")
            }
        }
    }
}

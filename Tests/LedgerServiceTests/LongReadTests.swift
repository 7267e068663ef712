import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Postgres
import Synchronization
import XCTest

/// Issue 22 item 1: long reads (whole exports, folds at a position) run through a per-instance
/// limit (429 + Retry-After beyond it) on connections of their own with a statement timeout, and
/// are cancelled in PostgreSQL when their deadline fires or their client hangs up — so a flood of
/// exports never delays a webhook.
final class LongReadTests: XCTestCase {
    static let exportPath = "/v1/refunds?format=csv"

    /// Long reads of this test database in PostgreSQL right now (they name themselves).
    static func longReadBackends(_ h: ServiceHarness) throws -> Int {
        try h.admin.query(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'ledger long read' AND datname = current_database()",
            name: "long read backends").first!.decode(Int64.self, "n").asInt
    }

    static func waitFor(_ what: String, seconds: Double = 10, _ condition: () throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTFail("timed out waiting for \(what)")
    }

    /// Blocking socket work on threads of its own, never the cooperative pool the server's
    /// handlers run on.
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { c in
            DispatchQueue.global().async { c.resume(with: Result { try body() }) }
        }
    }

    /// Makes every long read of the refund cases wait in PostgreSQL (until cancelled) while
    /// everything else reads and writes them as usual: a refund case is stored, then the table is
    /// put behind an updatable view whose row filter sleeps only in sessions named `ledger long
    /// read`. (A table lock would hold the appends too: they refold refund cases.)
    static func holdLongReadsOfRefundCases(_ h: ServiceHarness) async throws {
        var refund = AppleTestAuthority.sample(type: "REFUND", subtype: nil, originalTransactionId: "7099999999999999")
        refund.transaction.revocationDate = AppleTime(1_767_225_600_000)
        refund.transaction.revocationReason = 0
        let stored = try await h.post("/v1/apple/notifications", try h.authority.signSample(refund))
        XCTAssertEqual(stored.status, 200, stored.text)
        try h.admin.execute(script: """
            ALTER TABLE projections.refund_cases RENAME TO refund_cases_held;
            CREATE FUNCTION projections.hold_long_reads() RETURNS boolean LANGUAGE sql VOLATILE AS $$
                SELECT CASE WHEN current_setting('application_name') = 'ledger long read' THEN pg_sleep(300) IS NOT NULL ELSE true END $$;
            CREATE VIEW projections.refund_cases AS SELECT * FROM projections.refund_cases_held WHERE projections.hold_long_reads();
            GRANT ALL ON projections.refund_cases TO ledger_service, ledger_projector;
            """, name: "hold long reads")
        XCTAssertEqual(try h.admin.query("SELECT count(*) AS n FROM projections.refund_cases_held").first!.decode(Int64.self, "n"), 1)
    }

    /// Opens an export on a socket of its own and leaves it waiting for the answer.
    static func openExport(_ h: ServiceHarness) throws -> RawClient {
        let client = try RawClient(port: h.server.port!, receiveTimeout: 30)
        client.send("GET \(exportPath) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(ServiceHarness.auditorToken)\r\n\r\n")
        return client
    }

    func testAnExportFloodIsLimitedCancelledAndNeverStarvesTheWebhooks() async throws {
        // Every client comes from 127.0.0.1: no per-address connection limit in this test. The
        // exports' deadline is short so that its cancellation is seen within the test.
        try await withService(environment: ["LEDGER_PER_IP_CONNECTION_LIMIT": "0", "LEDGER_ADMIN_DEADLINE_SECONDS": "6"]) { h in
            try await Self.holdLongReadsOfRefundCases(h)

            // The limit's worth of exports is admitted and waits in PostgreSQL on a connection each.
            let held = try (0..<4).map { _ in try Self.openExport(h) }
            try await Self.waitFor("4 long reads in pg_stat_activity") { try Self.longReadBackends(h) == 4 }

            // A steady stream of webhooks while 60 more exports arrive at once.
            let latencies = Mutex<[Double]>([])
            let statuses = Mutex<[Int]>([])
            // On threads of their own: 60 blocked GCD threads would starve the process's executor
            // (and this test's own HTTP client) of GCD's threads.
            let refusedAnswers = Mutex<[RawClient.Response]>([])
            let flood = DispatchGroup()
            for _ in 0..<60 {
                flood.enter()
                Thread {
                    defer { flood.leave() }
                    guard let c = try? Self.openExport(h), let r = try? c.readResponse() else { return }
                    refusedAnswers.withLock { $0.append(r) }
                }.start()
            }
            for i in 0..<60 {
                let body = try h.authority.signSample(AppleTestAuthority.sample(originalTransactionId: String(7_100_000_000_000_000 + i)))
                let started = ContinuousClock.now
                let answer = try await h.post("/v1/apple/notifications", body)
                let d = (ContinuousClock.now - started).components
                latencies.withLock { $0.append(Double(d.seconds) + Double(d.attoseconds) / 1e18) }
                statuses.withLock { $0.append(answer.status) }
                try await Task.sleep(for: .milliseconds(20))
            }
            await withCheckedContinuation { c in flood.notify(queue: .global()) { c.resume() } }
            let refused = refusedAnswers.withLock { $0 }
            XCTAssertEqual(refused.count, 60, "every export beyond the limit is answered at once")
            for r in refused {
                XCTAssertEqual(r.status, 429, String(decoding: r.body, as: UTF8.self))
                XCTAssertEqual(r.errorBody?["error"], "too_many_long_reads")
                XCTAssertNotNil(Int(r.headers["retry-after"] ?? ""), "429 carries Retry-After")
            }
            XCTAssertLessThanOrEqual(try Self.longReadBackends(h), 4, "the flood opened no further connection")
            XCTAssertEqual(statuses.withLock { $0 }, Array(repeating: 200, count: 60), "no webhook was refused or answered 503")
            let sorted = latencies.withLock { $0 }.sorted()
            let p99 = sorted[Int(Double(sorted.count - 1) * 0.99)]
            // Not a speed figure: a bound far above a webhook's normal answer and far below the
            // 6 s an export holds its slot, so a webhook that waited behind the exports fails it.
            XCTAssertLessThan(p99, 2.5, "webhook p99 \(p99) s while exports were held")

            // A client that hangs up: its read is cancelled in PostgreSQL and the backend goes.
            held[0].closeNow()
            try await Self.waitFor("the hung-up export's backend to leave") { try Self.longReadBackends(h) == 3 }

            // The deadline: the others are answered 503 and their backends go too.
            for client in held.dropFirst() {
                nonisolated(unsafe) let one = client
                let answer = try await Self.offPool { try one.readResponse() }
                XCTAssertEqual(answer.status, 503, String(decoding: answer.body, as: UTF8.self))
                XCTAssertEqual(answer.errorBody?["error"], "handler_timeout")
            }
            try await Self.waitFor("every long read's backend to leave") { try Self.longReadBackends(h) == 0 }

            // Long reads not held any more: exports answer, and the slots were all given back.
            try h.admin.execute(script: "CREATE OR REPLACE FUNCTION projections.hold_long_reads() RETURNS boolean LANGUAGE sql AS $$ SELECT true $$", name: "release")
            for _ in 0..<5 {
                let export = try await h.request("GET", Self.exportPath, token: ServiceHarness.auditorToken)
                XCTAssertEqual(export.status, 200, export.text)
            }
            let metrics = try await h.request("GET", "/metrics", token: ServiceHarness.adminToken).text
            XCTAssertTrue(metrics.contains(#"ledger_long_reads_total{outcome="refused"} 60"#), metrics)
            XCTAssertTrue(metrics.contains(#"ledger_long_reads{state="running"} 0"#))
        }
    }

    /// The reports' folds and the auditor's CSV go through the same limit.
    func testReportsAndTheAuditCSVShareTheLimit() async throws {
        try await withService(environment: ["LEDGER_LONG_READS": "1", "LEDGER_PER_IP_CONNECTION_LIMIT": "0",
                                            "LEDGER_ADMIN_DEADLINE_SECONDS": "5"]) { h in
            try await Self.holdLongReadsOfRefundCases(h)
            let held = try Self.openExport(h)
            try await Self.waitFor("the one long read") { try Self.longReadBackends(h) == 1 }
            // Position 1 (the refund above): the harness runs no catch-up worker, so the reporting
            // projection stays at 0 and a report at 1 is folded from the facts — a long read. (At
            // the projection's own position the report is an indexed read of its tables.)
            let report = try await h.request("GET", "/v1/reports/subscriptions?asOfPosition=1", token: ServiceHarness.auditorToken)
            XCTAssertEqual(report.status, 429, report.text)
            XCTAssertEqual(report.errorCode, "too_many_long_reads")
            XCTAssertEqual(report.headers["retry-after"], "5")
            held.closeNow()
            try await Self.waitFor("the export's backend to leave") { try Self.longReadBackends(h) == 0 }
            let after = try await h.request("GET", "/v1/reports/subscriptions?asOfPosition=1", token: ServiceHarness.auditorToken)
            XCTAssertEqual(after.status, 200, after.text)
        }
    }

    func testSettingsAreCheckedAndReachTheStore() throws {
        let c = try LedgerConfiguration.load(environment: ["LEDGER_LONG_READS": "2", "LEDGER_LONG_READ_TIMEOUT_MINUTES": "3"])
        XCTAssertEqual(c.limits.longReads, 2)
        XCTAssertEqual(c.limits.longReadTimeoutMinutes, 3)
        XCTAssertEqual(try LedgerConfiguration.load(environment: [:]).limits.longReads, 4)
        XCTAssertEqual(try LedgerConfiguration.load(environment: ["LEDGER_TIES_PER_SUBSCRIPTION_PER_DAY": "7"]).limits.tiesPerSubscriptionPerDay, 7)
        XCTAssertEqual(try LedgerConfiguration.load(environment: [:]).limits.tiesPerSubscriptionPerDay, 100)
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_TIES_PER_SUBSCRIPTION_PER_DAY": "0"]))
        for bad in ["0", "65", "many"] {
            XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_LONG_READS": bad]))
        }
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_LONG_READ_TIMEOUT_MINUTES": "0"]))
    }
}

private extension Int64 {
    var asInt: Int { Int(self) }
}

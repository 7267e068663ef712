import Foundation
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import XCTest

/// Issue 22 item 4: the anonymous `/readyz` is cheap to ask — its open answer is reused for a
/// second and the migration files are hashed once, at start.
final class ReadinessCostTests: XCTestCase {
    func testOpenReadyzIsAnsweredFromASecondLongCache() async throws {
        try await withService { h in
            let before = h.app.metrics.counterValue("ledger_readiness_checks_total")
            let started = ContinuousClock.now
            for _ in 0..<20 {
                let answer = try await h.request("GET", "/readyz")
                XCTAssertEqual(answer.status, 200, answer.text)
                XCTAssertEqual(answer.json["status"] as? String, "ready")
                XCTAssertNil(answer.json["migrations"], "the open answer must not carry detail")
            }
            let seconds = Double((ContinuousClock.now - started).components.seconds) + 1
            let checks = h.app.metrics.counterValue("ledger_readiness_checks_total") - before
            XCTAssertLessThanOrEqual(checks, seconds, "20 open /readyz ran \(checks) checks in under \(seconds) s")
            XCTAssertGreaterThanOrEqual(checks, 1)
            // The admin's detailed answer is never cached.
            let detailed = try await h.request("GET", "/readyz", token: ServiceHarness.adminToken)
            XCTAssertEqual(detailed.status, 200, detailed.text)
            XCTAssertNotNil(detailed.json["migrations"])
            XCTAssertEqual(h.app.metrics.counterValue("ledger_readiness_checks_total") - before, checks + 1)
        }
    }

    func testMigrationFilesAreHashedOnceAtStart() async throws {
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-migrations-\(UUID().uuidString)")
        try FileManager.default.copyItem(at: Migrator.locateDirectory(), to: copy)
        defer { try? FileManager.default.removeItem(at: copy) }
        try await withService { h in
            let readiness = Readiness(store: h.app.store, migrationsDirectory: copy, catalog: h.app.catalogKeeper,
                                      metrics: h.app.metrics, log: Log(minimum: .error))
            let first = await readiness.report()
            XCTAssertTrue(first.ready, "\(first.detail)")
            // A file that appears after start is not read: the build's migrations were fixed then.
            try Data("SELECT 1;\n".utf8).write(to: copy.appendingPathComponent("9999_after_start.sql"))
            let second = await readiness.report()
            XCTAssertTrue(second.ready, "migrations were re-read from disk on a readiness check: \(second.detail)")
        }
    }
}

final class ReceiveDeadlineConfigurationTests: XCTestCase {
    func testReceiveDeadlineIsOnByDefaultAndConfigurable() throws {
        XCTAssertEqual(try LedgerConfiguration.load(environment: [:]).http.receiveDeadlineSeconds, 30)
        let set = try LedgerConfiguration.load(environment: ["LEDGER_RECEIVE_DEADLINE_SECONDS": "7"])
        XCTAssertEqual(set.http.receiveDeadlineSeconds, 7)
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_RECEIVE_DEADLINE_SECONDS": "0"]))
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_RECEIVE_DEADLINE_SECONDS": "soon"]))
    }
}

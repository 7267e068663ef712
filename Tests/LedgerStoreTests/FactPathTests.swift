import Foundation
import LedgerCore
import LedgerTesting
import Postgres
import XCTest
@testable import LedgerStore

/// The one fact path: facts are derived once by `FactDecoder`, stored, and read by every projection;
/// no projection decodes the payload with SQL.
final class FactPathTests: XCTestCase {
    var database: ProjectionScratchDatabase!
    var db: Store!
    var pool: ConnectionPool!

    override func setUpWithError() throws {
        database = try ProjectionScratchDatabase()
        db = database.store(poolSize: 4)
        pool = db.pool
    }

    override func tearDown() {
        db?.close()
        database?.drop()
    }

    /// A guard against a second decoder creeping back: LedgerStore's SQL never reaches into a
    /// JSON payload (`->>`, `->`, `#>>`, jsonb_*), and no later migration defines a helper for it.
    func testNoProjectionSQLReadsThePayloadJSON() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let sources = root.appendingPathComponent("Sources/LedgerStore")
        var offenders: [String] = []
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
        XCTAssertGreaterThan(files.filter { $0.pathExtension == "swift" }.count, 10)
        for file in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            where line.contains("->>") || line.contains("payload->") || line.contains("#>>") || line.contains("jsonb_") {
                offenders.append("\(file.lastPathComponent):\(n + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        XCTAssertEqual(offenders, [], "projection SQL must read facts, never the payload")
        let migrations = try FileManager.default.contentsOfDirectory(at: root.appendingPathComponent("Migrations"), includingPropertiesForKeys: nil)
            .filter { $0.lastPathComponent >= "0004" }
        for file in migrations {
            let text = try String(contentsOf: file, encoding: .utf8)
            XCTAssertFalse(text.contains("->>"), "\(file.lastPathComponent) extracts JSON fields")
        }
    }

    /// The Swift column list and the migration's table agree, column for column.
    func testFactColumnsMatchTheTable() throws {
        let rows = try database.adminQuery(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'facts' ORDER BY ordinal_position")
        XCTAssertEqual(try rows.rows.map { try $0.decode(String.self, "column_name") }, FactRows.columnNames)
    }

    /// Facts missing for stored events (a database from before the fact path, a new schema
    /// version) are derived by the same decoder, and equal what the append path records.
    func testDerivingMissingFactsEqualsRecordingThemAtAppend() async throws {
        let store = EventStore(pool: pool)
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: 5, seed: 11), to: store)
        let head = try await store.headPosition()
        let recorded = try allFacts()
        XCTAssertGreaterThan(recorded.count, Int(head), "each notification states a transaction and renewal info")

        // Forget them (as a database migrated from before 0004 would have none).
        try database.adminScript("DELETE FROM facts; UPDATE projection_checkpoints SET position = 0 WHERE projection LIKE 'facts.v%'")
        let deriver = db.facts
        let before = try deriver.status()
        XCTAssertEqual(before.derivedUpTo, 0)
        XCTAssertFalse(before.isComplete)
        let progress = ProgressLog()
        let after = try await deriver.run(batch: 7) { done, total in progress.add(done, total) }
        XCTAssertTrue(after.isComplete)
        XCTAssertEqual(after.derivedUpTo, head)
        XCTAssertEqual(progress.last?.0, head)
        XCTAssertEqual(try allFacts(), recorded, "derived facts must equal the ones recorded at append")

        // An append after the catch-up records its own facts again.
        _ = try await store.append(ProjectionFixture.hostileEvent(stream: "9000000000009", customer: "c9"))
        XCTAssertEqual(try deriver.status().derivedUpTo, head + 1)

        // Blue/green: facts of another version stay until dropped, then go; its checkpoint retires.
        let current = try allFacts().count
        XCTAssertEqual(current, recorded.count + 4,
                       "the late purchase states a transaction, its not-revoked statement, renewal info and Apple's status")
        try database.adminScript("""
            INSERT INTO facts SELECT 1, position, ordinal, recorded_at, stream_id, subscription, kind, origin, message, signed_at,
              effective_at, transaction_id, order_alias, customer_id, has_transaction, tx_original_transaction_id,
              web_order_line_item_id, bundle_id, product_id, product_type, purchase_date, expires_date, tx_signed_date,
              revocation_date, revocation_reason, revocation_type, revocation_percentage, is_upgraded, price, currency, offer_type,
              offer_identifier, app_account_token, environment, in_app_ownership_type, has_renewal, r_product_id,
              auto_renew_product_id, auto_renew_status, expiration_intent, is_in_billing_retry_period, grace_period_expires_date,
              price_increase_status, r_offer_type, r_offer_identifier, recent_subscription_start_date, renewal_date,
              r_app_account_token, r_signed_date, detail, offer_discount_type, app_transaction_id, renewal_price, r_currency,
              r_offer_discount_type, r_app_transaction_id FROM facts WHERE schema_version = \(FactDecoder.schemaVersion);
            INSERT INTO projection_checkpoints (projection, position) VALUES ('facts.v1', \(head + 1));
            """)
        XCTAssertEqual(try deriver.status().otherVersions, [1: head + 1])
        let deleted = try deriver.dropOtherVersions()
        XCTAssertEqual(deleted, current)
        XCTAssertEqual(try deriver.status().otherVersions, [:])
        XCTAssertEqual(try allFacts().count, current)
        // Facts are never changed in place.
        XCTAssertThrowsError(try database.adminQuery("UPDATE facts SET kind = 'renewal'"))
    }

    /// An event whose body cannot be interpreted is stored with an `unreadable` fact saying why,
    /// and changes no projection.
    func testAnUninterpretableEventIsKeptAsUnreadableEvidence() async throws {
        let projector = Projector(catalog: .productIds, clock: { ProjectionFixture.start })
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        let odd = NewEvent(streamId: "9000000000010", dedupeKey: "odd-1", source: .apple, type: "DID_RENEW",
                           payload: Data(#"{"notificationType":"DID_RENEW","signedDate":1,"data":{"environment":"Sandbox"},"transactionInfo":{"productId":"x"}}"#.utf8),
                           raw: Data("evidence".utf8))
        let outcome = try await store.append(odd)
        XCTAssertFalse(outcome.duplicate)
        let facts = try allFacts()
        XCTAssertEqual(facts.map(\.kind), [.unreadable])
        XCTAssertTrue(facts.first?.detail?.contains("transactionId") == true, facts.first?.detail ?? "")
        XCTAssertEqual(try database.dumpTables()["subscriptions"], [])
    }

    private func allFacts() throws -> [Fact] {
        try database.connect().query(
            "SELECT \(FactRows.columns) FROM facts WHERE schema_version = $1 ORDER BY position, ordinal",
            [.int64(Int64(FactDecoder.schemaVersion))]).facts()
    }
}

final class ProgressLog: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [(Int64, Int64)] = []
    func add(_ done: Int64, _ total: Int64) { lock.lock(); entries.append((done, total)); lock.unlock() }
    var last: (Int64, Int64)? { lock.lock(); defer { lock.unlock() }; return entries.last }
}

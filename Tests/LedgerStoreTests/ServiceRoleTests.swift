import Foundation
import LedgerCore
import LedgerStore
import LedgerTesting
import Postgres
import XCTest

/// Issue 22 item 7b: the service role does not inherit `ledger_projector`'s ownership — its own
/// statements cannot delete facts or create, alter or drop anything in `projections`; the writes
/// that need the projector state it for their transaction only — and migrations run as a
/// non-superuser owner, so no SECURITY DEFINER function runs with a superuser's rights.
final class ServiceRoleTests: XCTestCase {
    func refusal(_ connection: Connection, _ sql: String, file: StaticString = #filePath, line: UInt = #line) -> String? {
        do {
            try connection.query(sql)
            return nil
        } catch {
            return error.sqlState
        }
    }

    func testTheServiceRoleCannotDeleteFactsOrCreateInProjections() async throws {
        let database = try TestDatabase.create()
        defer { try? database.drop() }
        // A stored event with facts and projection rows, appended the way the service appends.
        let store = Store(.init(databaseURL: database.serviceConninfo))
        defer { store.close() }
        for event in try ProjectionFixture.events(customers: 2, days: 60, seed: 7) { _ = try await store.events.append(event) }
        let service = try Connection(conninfo: database.serviceConninfo)
        XCTAssertGreaterThan(try service.query("SELECT count(*) AS n FROM public.facts").first!.decode(Int64.self, "n"), 0)
        XCTAssertGreaterThan(try service.query("SELECT count(*) AS n FROM projections.subscriptions").first!.decode(Int64.self, "n"), 0,
                             "the service reads projections")
        for sql in [
            "DELETE FROM public.facts",
            "INSERT INTO public.facts SELECT * FROM public.facts LIMIT 1",
            "DELETE FROM projections.subscriptions",
            "UPDATE projections.subscriptions SET subscription = subscription",
            "TRUNCATE projections.refund_cases",
            "CREATE TABLE projections.planted (v int)",
            "CREATE FUNCTION projections.planted() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "ALTER TABLE projections.subscriptions ADD COLUMN planted int",
            "DROP TABLE projections.entitlements",
        ] {
            XCTAssertEqual(refusal(service, sql), "42501", "the service role must not be able to: \(sql)")
        }
        // The projector's rights are stated per transaction and end with it.
        try service.transaction { c in
            try c.query("SET LOCAL ROLE ledger_projector")
            try c.query("DELETE FROM projections.subscriptions WHERE false")
        }
        XCTAssertEqual(refusal(service, "DELETE FROM projections.subscriptions WHERE false"), "42501", "back to the service's rights after COMMIT")
        // A table a rebuild creates (as the projector) is readable by the service.
        try service.transaction { c in
            try c.query("SET LOCAL ROLE ledger_projector")
            try c.query("CREATE TABLE projections.rebuilt_later (v int)")
        }
        XCTAssertNil(refusal(service, "SELECT * FROM projections.rebuilt_later"))
        let inherits = try service.query("SELECT rolinherit FROM pg_roles WHERE rolname = current_user").first!.decode(Bool.self, "rolinherit")
        XCTAssertFalse(inherits)
    }

    /// `scripts/db.sh start` makes `ledger_owner` (LOGIN, CREATEROLE, not a superuser); the whole
    /// migration history applies as that role, and the SECURITY DEFINER functions are its.
    func testMigrationsRunAsANonSuperuserOwner() async throws {
        let database = try TestDatabase.create(migrate: false)
        defer { try? database.drop() }
        let admin = try Connection(conninfo: database.adminConninfo)
        let owner = try admin.query("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = 'ledger_owner'").first
        guard let owner else { return XCTFail("no ledger_owner role: scripts/db.sh start creates it (make test runs it)") }
        XCTAssertFalse(try owner.decode(Bool.self, "rolsuper"))
        try admin.query("ALTER DATABASE \(try admin.quoteIdentifier(database.name)) OWNER TO ledger_owner")
        let ownerConninfo = try ConnectionInfo(parsing: database.adminConninfo).with("user", "ledger_owner").conninfo
        let ownerStore = Store(.init(databaseURL: ownerConninfo))
        defer { ownerStore.close() }
        let applied = try ownerStore.migrator(directory: try Migrator.locateDirectory()).migrate()
        let files = try FileManager.default.contentsOfDirectory(atPath: try Migrator.locateDirectory().path).filter { $0.hasSuffix(".sql") }
        XCTAssertEqual(applied.count, files.count, "every migration applies as the owner")
        let definers = try admin.query("""
            SELECT p.proname, r.rolsuper FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
            WHERE p.prosecdef AND p.pronamespace IN ('public'::regnamespace, 'projections'::regnamespace) ORDER BY p.proname
            """).rows.map { (try $0.decode(String.self, "proname"), try $0.decode(Bool.self, "rolsuper")) }
        XCTAssertTrue(definers.contains { $0.0 == "append_events" }, "\(definers)")
        XCTAssertFalse(definers.contains { $0.1 }, "a SECURITY DEFINER function owned by a superuser: \(definers)")
        // The service works on a database its owner migrated.
        let serviceConninfo = try ConnectionInfo(parsing: database.adminConninfo).with("user", "ledger_service").conninfo
        let store = Store(.init(databaseURL: serviceConninfo))
        defer { store.close() }
        for event in try ProjectionFixture.events(customers: 1, days: 60, seed: 8) { _ = try await store.events.append(event) }
        XCTAssertGreaterThan(try admin.query("SELECT count(*) AS n FROM projections.subscriptions").first!.decode(Int64.self, "n"), 0)
    }
}

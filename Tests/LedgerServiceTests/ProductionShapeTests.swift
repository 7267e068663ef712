import AppStore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Postgres
import XCTest

/// The hardened edges of issue 10, through the real service: limits on by default, the request
/// deadline, `/metrics` and the detailed `/readyz` only for operators, transient database failures
/// answered 503 (retry) and never 500, and `serve`'s lifecycle (two listeners, graceful stop).
final class ProductionShapeTests: XCTestCase {
    private static let minimal = ["LEDGER_DATABASE_URL": "dbname=unused"]

    // MARK: defaults and configuration

    func testLimitsAreOnByDefaultAndConfigurable() throws {
        let defaults = try LedgerConfiguration.load(environment: Self.minimal)
        XCTAssertEqual(defaults.http.perIPConnectionLimit, 64)
        XCTAssertEqual(defaults.http.requestDeadlineSeconds, 10)
        XCTAssertEqual(defaults.http.adminDeadlineSeconds, 3600)
        XCTAssertNil(defaults.adminListen)
        let app = try LedgerApp(configuration: defaults, log: Log(minimum: .error))
        defer { app.shutdown() }
        let http = app.httpConfiguration()
        XCTAssertEqual(http.perIPConnectionLimit, 64)
        XCTAssertEqual(http.handlerTimeout, .seconds(10))
        // The admin rebuild and the refund exports (a whole export may be folded at an old position)
        // and the reports (folded from the facts at a position on their first read) have their own,
        // longer deadline; every other route the request deadline.
        let routes = app.makeRouter().routes
        let long: Set<String> = ["/v1/admin/rebuild", "/v1/refunds", "/audit/refunds.csv",
                                 "/v1/reports/{name}", "/v1/reports/{name}/subscriptions",
                                 "/audit/reports", "/audit/reports/{name}", "/audit/reports/{name}/subscriptions"]
        for route in routes where long.contains(route.pattern) { XCTAssertEqual(route.deadline, .seconds(3600), route.pattern) }
        for route in routes where !long.contains(route.pattern) {
            XCTAssertEqual(route.deadline, .seconds(10), "\(route.method) \(route.pattern)")
        }

        let behindBalancer = try LedgerConfiguration.load(environment: Self.minimal.merging([
            "LEDGER_PER_IP_CONNECTION_LIMIT": "0", "LEDGER_REQUEST_DEADLINE_SECONDS": "3", "LEDGER_ADMIN_DEADLINE_SECONDS": "60",
            "LEDGER_ADMIN_LISTEN": "127.0.0.1:9091",
        ]) { $1 })
        XCTAssertEqual(behindBalancer.http.perIPConnectionLimit, 0)
        XCTAssertEqual(behindBalancer.http.requestDeadlineSeconds, 3)
        XCTAssertEqual(behindBalancer.http.adminDeadlineSeconds, 60)
        XCTAssertEqual(behindBalancer.adminListen?.host, "127.0.0.1")
        XCTAssertEqual(behindBalancer.adminListen?.port, 9091)

        for (name, value) in [("LEDGER_PER_IP_CONNECTION_LIMIT", "-1"), ("LEDGER_PER_IP_CONNECTION_LIMIT", "many"),
                              ("LEDGER_REQUEST_DEADLINE_SECONDS", "0"), ("LEDGER_ADMIN_DEADLINE_SECONDS", "1e3"),
                              ("LEDGER_ADMIN_LISTEN", "nowhere")] {
            XCTAssertThrowsError(try LedgerConfiguration.load(environment: Self.minimal.merging([name: value]) { $1 })) { error in
                XCTAssertTrue("\(error)".contains(name), "\(error)")
            }
        }
    }

    func testOneClientAddressCannotTakeMoreThanItsConnections() async throws {
        try await withService(environment: ["LEDGER_PER_IP_CONNECTION_LIMIT": "2"]) { h in
            let port = h.server.port!
            let first = try RawClient(port: port), second = try RawClient(port: port)
            first.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            second.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            XCTAssertEqual(try first.readResponse().status, 200)
            XCTAssertEqual(try second.readResponse().status, 200)
            let third = try RawClient(port: port)
            third.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            XCTAssertTrue(third.waitForClose(seconds: 3), "a third connection from one address must be dropped")
            first.closeNow()
            // A freed slot is usable again.
            var answered = false
            for _ in 0..<20 where !answered {
                if let r = try? RawClient.request(port: port, path: "/healthz"), r.status == 200 { answered = true } else {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            XCTAssertTrue(answered)
        }
    }

    // MARK: operators only

    func testMetricsAndTheDetailedReadinessAreForTheAdminToken() async throws {
        try await withService { h in
            let anonymous = try await h.request("GET", "/metrics")
            XCTAssertEqual(anonymous.status, 401, anonymous.text)
            XCTAssertEqual(anonymous.headers["www-authenticate"], "Bearer")
            for token in ["app-token-for-tests-0123456789abcdef", "auditor-token-for-tests-0123456789abcdef"] {
                let weak = try await h.request("GET", "/metrics", token: token)
                XCTAssertEqual(weak.status, 403, "\(token): \(weak.text)")
                XCTAssertFalse(weak.text.contains("ledger_"), "no metric leaks into the refusal")
            }
            let admin = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(admin.status, 200)
            XCTAssertTrue(admin.text.contains("ledger_projection_lag"), admin.text)

            // Readiness: everyone may ask whether it is ready; only the admin sees why.
            let open = try await h.request("GET", "/readyz")
            XCTAssertEqual(open.status, 200)
            XCTAssertEqual(open.json.keys.sorted(), ["status"], open.text)
            let app = try await h.request("GET", "/readyz", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(app.json.keys.sorted(), ["status"], app.text)
            let detailed = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(detailed.json["status"] as? String, "ready")
            XCTAssertNotNil(detailed.json["projections"], detailed.text)
            XCTAssertNotNil(detailed.json["migrations"], detailed.text)
        }
    }

    func testTheOpenReadinessNamesNoInternalsWhenTheDatabaseIsDown() async throws {
        try await withService(environment: ["LEDGER_DATABASE_URL": "host=/nonexistent-socket-dir port=1 dbname=ledger connect_timeout=1"]) { h in
            let open = try await h.request("GET", "/readyz")
            XCTAssertEqual(open.status, 503)
            XCTAssertEqual(open.text, #"{"status":"not_ready"}"#)
            let detailed = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(detailed.status, 503)
            XCTAssertEqual(detailed.json["database"] as? String, "unavailable")
            XCTAssertTrue((detailed.json["reason"] as? String ?? "").contains("not reachable"), detailed.text)
            // A query answers 503 with a message of the ledger's, not libpq's.
            let query = try await h.request("GET", "/v1/subscriptions/1000000000000001", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(query.status, 503, query.text)
            XCTAssertEqual(query.headers["retry-after"], "5")
            XCTAssertFalse(query.text.contains("socket"), query.text)
        }
    }

    // MARK: transient failures are 503

    /// Every SQLSTATE that means "retry" (serialization failure, deadlock, admin shutdown, lock and
    /// statement timeouts, a broken connection) answers the webhook 503 — the sender retries and
    /// nothing is stored; a real refusal is a 500 naming no internals. The failures are raised by a
    /// trigger on the events table, so the append goes the whole real way to PostgreSQL.
    func testTransientDatabaseFailuresAnswer503AndRefusalsAnswer500() async throws {
        try await withService { h in
            try h.admin.query("CREATE TABLE inject_failure (sqlstate text NOT NULL)")
            try h.admin.query("GRANT SELECT ON inject_failure TO PUBLIC")
            try h.admin.query("""
                CREATE FUNCTION inject_failure() RETURNS trigger LANGUAGE plpgsql AS $$
                DECLARE code text;
                BEGIN
                  SELECT sqlstate INTO code FROM inject_failure LIMIT 1;
                  IF code IS NOT NULL THEN RAISE EXCEPTION 'injected failure %', code USING ERRCODE = code; END IF;
                  RETURN NEW;
                END $$
                """)
            try h.admin.query("CREATE TRIGGER inject_failure BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION inject_failure()")
            let body = try h.authority.signSample(AppleTestAuthority.sample())
            for code in ["40001", "40P01", "57P01", "08006", "55P03", "57014"] {
                try h.admin.query("DELETE FROM inject_failure")
                try h.admin.query("INSERT INTO inject_failure VALUES ($1)", [.text(code)])
                let answer = try await h.post("/v1/apple/notifications", body)
                XCTAssertEqual(answer.status, 503, "\(code): \(answer.text)")
                XCTAssertEqual(answer.errorCode, "database_unavailable", code)
                XCTAssertEqual(answer.headers["retry-after"], "5", code)
                XCTAssertFalse(answer.text.contains("injected"), "no database message in the answer: \(answer.text)")
                XCTAssertEqual(try h.eventCount(), 0, code)
            }
            try h.admin.query("UPDATE inject_failure SET sqlstate = '23514'")
            let refused = try await h.post("/v1/apple/notifications", body)
            XCTAssertEqual(refused.status, 500, refused.text)
            XCTAssertEqual(refused.errorCode, "storage_rejected")
            XCTAssertFalse(refused.text.contains("injected"), refused.text)
            XCTAssertEqual(try h.eventCount(), 0)

            // Once the cause is gone the same notification is stored: nothing was half-written.
            try h.admin.query("DELETE FROM inject_failure")
            let stored = try await h.post("/v1/apple/notifications", body)
            XCTAssertEqual(stored.status, 200, stored.text)
            XCTAssertEqual(stored.json["status"] as? String, "stored")
            XCTAssertEqual(try h.eventCount(), 1)
        }
    }

    /// A read that waits on a lock is bounded twice: by the service role's lock_timeout (4 s,
    /// Migrations/0005 → 55P03 → 503) and by the request deadline, whichever is shorter.
    func testABlockedReadAnswers503WithinTheRequestDeadline() async throws {
        try await withService(environment: ["LEDGER_REQUEST_DEADLINE_SECONDS": "1"]) { h in
            let locker = try h.database.connect()
            try locker.query("BEGIN")
            try locker.query("LOCK TABLE projections.subscriptions IN ACCESS EXCLUSIVE MODE")
            let started = ContinuousClock.now
            let answer = try await h.request("GET", "/v1/subscriptions/1000000000000001", token: "app-token-for-tests-0123456789abcdef")
            let waited = ContinuousClock.now - started
            try locker.query("ROLLBACK")
            XCTAssertEqual(answer.status, 503, answer.text)
            XCTAssertEqual(answer.errorCode, "handler_timeout")
            XCTAssertLessThan(waited, .seconds(3), "the deadline, not the lock, ended the request")
        }
        try await withService { h in
            let locker = try h.database.connect()
            try locker.query("BEGIN")
            try locker.query("LOCK TABLE projections.subscriptions IN ACCESS EXCLUSIVE MODE")
            let answer = try await h.request("GET", "/v1/subscriptions/1000000000000001", token: "app-token-for-tests-0123456789abcdef")
            try locker.query("ROLLBACK")
            XCTAssertEqual(answer.status, 503, answer.text)
            XCTAssertEqual(answer.errorCode, "database_unavailable", "lock_timeout (55P03) is a retry, not a 500")
        }
    }

    // MARK: serve

    /// `serve` runs both listeners, the worker, the writer and the catalog job under one group;
    /// the admin listener serves only operators' endpoints, without a token; a stop request drains
    /// and returns, after which nothing listens.
    func testServeRunsTheAdminListenerAndStopsGracefully() async throws {
        let database = try TestDatabase.create()
        defer { try? database.drop() }
        let configuration = try LedgerConfiguration.load(environment: [
            "LEDGER_DATABASE_URL": database.serviceConninfo, "LEDGER_LISTEN": "127.0.0.1:0", "LEDGER_ADMIN_LISTEN": "127.0.0.1:0",
            "LEDGER_TOKENS": "admin:admin-token-for-tests-0123456789abcdef",
        ])
        let app = try LedgerApp(configuration: configuration, log: Log(minimum: .error))
        let stop = AsyncStream<Void>.makeStream()
        let (listening, announce) = AsyncStream<[String]>.makeStream()
        let serving = Task { try await app.serve(until: stop.stream) { announce.yield($0) } }
        var addresses: [String] = []
        for await a in listening { addresses = a; break }
        XCTAssertEqual(addresses.count, 2, "\(addresses)")
        let ports = addresses.compactMap { Int($0.split(separator: ":").last ?? "") }
        let (main, admin) = (ports[0], ports[1])

        XCTAssertEqual(try RawClient.request(port: admin, path: "/metrics").status, 200)
        XCTAssertEqual(try RawClient.request(port: admin, path: "/readyz").status, 200)
        let adminReady = try RawClient.request(port: admin, path: "/readyz")
        XCTAssertNotNil((try JSONSerialization.jsonObject(with: adminReady.body) as? [String: Any])?["projections"])
        XCTAssertEqual(try RawClient.request(port: admin, path: "/v1/subscriptions/1").status, 404,
                       "the admin listener serves operators' endpoints only")
        XCTAssertEqual(try RawClient.request(port: main, path: "/metrics").status, 401)
        XCTAssertEqual(try RawClient.request(port: main, path: "/healthz").status, 200)

        // The start-up job recorded the catalog (a job that ends does not stop the service).
        var recorded = false
        for _ in 0..<50 where !recorded {
            let admin = try database.connect()
            recorded = try admin.query("SELECT count(*) AS n FROM events WHERE type = 'config/catalog'").first!.decode(Int64.self, "n") == 1
            if !recorded { try await Task.sleep(for: .milliseconds(100)) }
        }
        XCTAssertTrue(recorded)
        XCTAssertEqual(try RawClient.request(port: main, path: "/healthz").status, 200, "still serving after the job ended")

        stop.continuation.yield()
        try await serving.value
        XCTAssertThrowsError(try RawClient.request(port: main, path: "/healthz"), "nothing listens after a stop")
        XCTAssertThrowsError(try RawClient.request(port: admin, path: "/metrics"))
    }

    /// A port in use fails `serve` at once, naming the address, before anything runs.
    func testServeFailsAtOnceWhenThePortIsTaken() async throws {
        let blocker = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0), router: Router())
        try blocker.start()
        defer { Task { await blocker.shutdown(gracePeriod: .zero) } }
        let configuration = try LedgerConfiguration.load(environment: Self.minimal.merging(["LEDGER_LISTEN": "127.0.0.1:\(blocker.port!)"]) { $1 })
        let app = try LedgerApp(configuration: configuration, log: Log(minimum: .error))
        let stop = AsyncStream<Void>.makeStream()
        do {
            try await app.serve(until: stop.stream)
            XCTFail("serve started on a port in use")
        } catch {
            XCTAssertTrue("\(error)".contains("\(blocker.port!)"), "\(error)")
        }
        app.shutdown()
    }
}

import Foundation
import LedgerTesting
import Synchronization
import XCTest

@testable import Postgres

final class PostgresTests: XCTestCase {
    var database: TestDatabase!

    override func setUpWithError() throws {
        database = try TestDatabase.create(migrate: false)
    }

    override func tearDownWithError() throws {
        try database?.drop()
    }

    func connect() throws -> Connection { try Connection(conninfo: database.adminConninfo) }

    func testTypesRoundTripInBinary() throws {
        let connection = try connect()
        let raw = Data([0x00, 0xff, 0xfe, 0x80, 0x00, 0x41])
        let row = try XCTUnwrap(connection.query(
            """
            SELECT $1::text AS t, $2::bigint AS b, $3::int AS i, $4::bool AS f,
                   $5::timestamptz AS ts, $6::jsonb AS j, $7::bytea AS raw,
                   $8::text AS missing, ''::text AS empty, $9::float8 AS d
            """,
            [.text("héllo 🌍"), .int64(-9_000_000_000_000), .int32(-7), .bool(true),
             .timestamptz(millis: 1_700_000_000_123), .jsonb(Data(#"{"b": [1, 2], "a": "x"}"#.utf8)), .bytea(raw), .null, .double(1.5)]
        ).first)
        XCTAssertEqual(try row.decode(String.self, "t"), "héllo 🌍")
        XCTAssertEqual(try row.decode(Int64.self, "b"), -9_000_000_000_000)
        XCTAssertEqual(try row.decode(Int32.self, "i"), -7)
        XCTAssertEqual(try row.decode(Int.self, "i"), -7)
        XCTAssertEqual(try row.decode(Bool.self, "f"), true)
        XCTAssertEqual(try row.decode(Int64.self, "ts"), 1_700_000_000_123)
        XCTAssertEqual(try row.decode(Date.self, "ts").timeIntervalSince1970, 1_700_000_000.123, accuracy: 0.0005)
        // jsonb normalises: key order and spacing are PostgreSQL's, the meaning is the same.
        XCTAssertEqual(try row.decode(String.self, "j"), #"{"a": "x", "b": [1, 2]}"#)
        XCTAssertEqual(try row.decode(Data.self, "raw"), raw)
        XCTAssertNil(try row.decode(String?.self, "missing"))
        XCTAssertEqual(try row.decode(String.self, "empty"), "")
        XCTAssertEqual(try row.decode(Double.self, "d"), 1.5)
    }

    func testRepeatedTextIsOneStringAndEveryValueStaysItself() throws {
        let connection = try connect()
        let rows = try connection.query(
            """
            SELECT v, n FROM (VALUES (1, 'com.example.premium.monthly', 7), (2, 'com.example.premium.monthly', 7),
                                     (3, NULL, 8), (4, 'com.example.premium.monthly', 9), (5, 'com.example.premium.yearly', 9),
                                     (6, '', 9), (7, '', 9), (8, repeat('x', 200), 9), (9, repeat('x', 200), 9)) AS t(k, v, n)
            ORDER BY k
            """).rows
        let text = RepeatedText(columns: 2)
        let values = try rows.map { try $0.string(at: 0, repeating: text) }
        XCTAssertEqual(values, ["com.example.premium.monthly", "com.example.premium.monthly", nil, "com.example.premium.monthly",
                                "com.example.premium.yearly", "", "", String(repeating: "x", count: 200), String(repeating: "x", count: 200)])
        func storage(_ s: String?) -> UnsafePointer<UInt8>? { s?.utf8.withContiguousStorageIfAvailable { $0.baseAddress } ?? nil }
        // A repeat right after its first reading is the same String.
        XCTAssertEqual(storage(values[0]), storage(values[1]))
        // A NULL between two repeats does not forget the value; another value replaces it.
        XCTAssertEqual(storage(values[0]), storage(values[3]))
        XCTAssertNotEqual(storage(values[3]), storage(values[4]))
        // A value longer than the slot is never remembered: decoded each time.
        XCTAssertNotEqual(storage(values[7]), storage(values[8]))
        // A column that is not text decodes as before (int as a String is refused as it was).
        XCTAssertThrowsError(try rows[0].string(at: 1, repeating: text))
    }

    func testTimestampsBeforeEpochAndAroundPostgresEpoch() throws {
        let connection = try connect()
        for millis: Int64 in [-1, -1_001, 0, 946_684_799_999, 946_684_800_000, 946_684_800_001, 4_102_444_800_000] {
            let back = try connection.query("SELECT $1::timestamptz AS t", [.timestamptz(millis: millis)]).first!.decode(Int64.self, "t")
            XCTAssertEqual(back, millis)
        }
        let text = try connection.query("SELECT ($1::timestamptz AT TIME ZONE 'UTC')::text AS t", [.timestamptz(millis: -1)]).first!.decode(String.self, "t")
        XCTAssertEqual(text, "1969-12-31 23:59:59.999")
    }

    func testDecodingErrorsNameTheColumn() throws {
        let connection = try connect()
        let row = try connection.query("SELECT 'abc'::text AS word, NULL::bigint AS nothing").first!
        XCTAssertThrowsError(try row.decode(Int64.self, "word")) { error in
            let error = error as! PostgresError
            XCTAssertEqual(error.kind, .decoding)
            XCTAssertEqual(error.column, "word")
            XCTAssertTrue(error.description.contains("word"), error.description)
        }
        XCTAssertThrowsError(try row.decode(Int64.self, "nothing")) { error in
            XCTAssertEqual((error as! PostgresError).column, "nothing")
            XCTAssertTrue("\(error)".contains("Int64?"), "\(error)")
        }
        XCTAssertThrowsError(try row.decode(String.self, "no_such_column")) { error in
            XCTAssertTrue("\(error)".contains("word, nothing"), "\(error)")
        }
    }

    func testParametersAreNeverSplicedIntoSQL() throws {
        let connection = try connect()
        try connection.query("CREATE TABLE victims (name text)")
        let hostile = "x'); DROP TABLE victims; --"
        try connection.query("INSERT INTO victims (name) VALUES ($1)", [.text(hostile)])
        let stored = try connection.query("SELECT name FROM victims").first!.decode(String.self, "name")
        XCTAssertEqual(stored, hostile)
        XCTAssertThrowsError(try connection.query("SELECT $1::text", [.text("nul\u{0}inside")])) { error in
            XCTAssertEqual((error as! PostgresError).kind, .invalidArgument)
        }
    }

    func testServerErrorsCarrySQLStateAndStatementName() throws {
        let connection = try connect()
        try connection.query("CREATE TABLE uniq (k text PRIMARY KEY)")
        try connection.query("INSERT INTO uniq VALUES ($1)", ["a"])
        XCTAssertThrowsError(try connection.query("INSERT INTO uniq VALUES ($1)", ["a"], name: "insert uniq")) { error in
            let error = error as! PostgresError
            XCTAssertEqual(error.kind, .server)
            XCTAssertEqual(error.sqlState, "23505")
            XCTAssertEqual(error.statement, "insert uniq")
            XCTAssertFalse(error.isUnavailable)
            XCTAssertNotNil(error.detail)
        }
        XCTAssertThrowsError(try connection.query("SELEC 1")) { error in
            XCTAssertEqual((error as! PostgresError).sqlState, "42601")
            XCTAssertEqual((error as! PostgresError).statement, "SELEC 1")
        }
        // The connection is still usable after errors.
        XCTAssertEqual(try connection.query("SELECT 1::int8 AS one").first!.decode(Int64.self, "one"), 1)
    }

    /// Lost races and cancellations are "retry later" (HTTP 503), not defects: serialization
    /// failure, deadlock, lock not available, statement timeout; the connection stays usable.
    func testTransientServerStatesAreUnavailableAndTheConnectionSurvives() throws {
        let connection = try connect()
        for state in ["40001", "40P01", "55P03"] {
            XCTAssertThrowsError(try connection.query("DO $$ BEGIN RAISE EXCEPTION 'lost a race' USING ERRCODE = '\(state)'; END $$")) { error in
                let error = error as! PostgresError
                XCTAssertEqual(error.sqlState, state)
                XCTAssertEqual(error.kind, .server, "the connection itself is fine")
                XCTAssertTrue(error.isUnavailable, state)
            }
        }
        try connection.query("SET statement_timeout = 20")
        XCTAssertThrowsError(try connection.query("SELECT pg_sleep(1)")) { error in
            let error = error as! PostgresError
            XCTAssertEqual(error.sqlState, "57014")
            XCTAssertTrue(error.isUnavailable)
        }
        try connection.query("RESET statement_timeout")
        XCTAssertEqual(try connection.query("SELECT 1 AS one").first?.decode(Int64.self, "one"), 1)
        XCTAssertThrowsError(try connection.query("DO $$ BEGIN RAISE EXCEPTION 'bad input' USING ERRCODE = '22023'; END $$")) { error in
            XCTAssertFalse((error as! PostgresError).isUnavailable, "a refusal of the input is not transient")
        }
    }

    func testTransactionRollsBackOnThrowAndDetectsSwallowedErrors() throws {
        struct Boom: Error {}
        let connection = try connect()
        try connection.query("CREATE TABLE t (v int8 PRIMARY KEY)")
        XCTAssertThrowsError(try connection.transaction { c in
            try c.query("INSERT INTO t VALUES (1)")
            throw Boom()
        }) { XCTAssertTrue($0 is Boom) }
        XCTAssertFalse(connection.inTransaction)
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM t").first!.decode(Int64.self, "n"), 0)

        try connection.transaction { c in try c.query("INSERT INTO t VALUES (2)") }
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM t").first!.decode(Int64.self, "n"), 1)

        // A body that catches a failed statement and returns normally must not look committed.
        XCTAssertThrowsError(try connection.transaction { c in
            try c.query("INSERT INTO t VALUES (3)")
            _ = try? c.query("INSERT INTO t VALUES (2)")  // duplicate: aborts the transaction
        }) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "25P02") }
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM t").first!.decode(Int64.self, "n"), 1)

        // A savepoint undoes only its own work.
        try connection.transaction { c in
            try c.query("INSERT INTO t VALUES (4)")
            XCTAssertThrowsError(try c.savepoint { c in
                try c.query("INSERT INTO t VALUES (5)")
                try c.query("INSERT INTO t VALUES (4)")
            })
            try c.query("INSERT INTO t VALUES (6)")
        }
        let values = try connection.query("SELECT v FROM t ORDER BY v").rows.map { try $0.decode(Int64.self, "v") }
        XCTAssertEqual(values, [2, 4, 6])
    }

    func testConnectFailureIsUnavailable() throws {
        let info = try ConnectionInfo(parsing: database.adminConninfo).with("port", "1").with("host", "/nonexistent-socket-dir")
        XCTAssertThrowsError(try Connection(conninfo: info.conninfo)) { error in
            XCTAssertEqual((error as! PostgresError).kind, .unavailable)
            XCTAssertTrue((error as! PostgresError).isUnavailable)
        }
    }

    func testConnectionInfoParsesURLsAndKeywordsAndHidesPasswords() throws {
        let url = try ConnectionInfo(parsing: "postgresql://alice:s3cret@db.example:6543/ledger?sslmode=disable")
        XCTAssertEqual(url["host"], "db.example")
        XCTAssertEqual(url["port"], "6543")
        XCTAssertEqual(url["dbname"], "ledger")
        XCTAssertFalse(url.description.contains("s3cret"))
        XCTAssertTrue(url.conninfo.contains("password='s3cret'"))
        let tricky = try ConnectionInfo(parsing: "host=/tmp dbname='it\\'s' application_name='a b\\\\c'")
        let reparsed = try ConnectionInfo(parsing: tricky.conninfo)
        XCTAssertEqual(reparsed, tricky)
        XCTAssertEqual(reparsed["application_name"], "a b\\c")
        XCTAssertThrowsError(try ConnectionInfo(parsing: "nonsense_keyword=1"))
    }

    func testCopyInAndOut() throws {
        let connection = try connect()
        try connection.query("CREATE TABLE copied (id int8, note text, raw bytea)")
        let rows = try connection.copyIn("COPY copied (id, note, raw) FROM STDIN") { writer in
            for i in 1...1000 {
                try writer.write("\(i)\tnote \\t tab \(i)\t\\\\x00ff\(String(i % 256, radix: 16).count == 1 ? "0" : "")\(String(i % 256, radix: 16))\n")
            }
        }
        XCTAssertEqual(rows, 1000)
        let check = try connection.query("SELECT count(*) AS n, sum(id) AS s, max(note) FILTER (WHERE id = 9) AS note, (SELECT raw FROM copied WHERE id = 255) AS raw FROM copied").first!
        XCTAssertEqual(try check.decode(Int64.self, "n"), 1000)
        XCTAssertEqual(try check.decode(String.self, "note"), "note \t tab 9")
        XCTAssertEqual(try check.decode(Data.self, "raw"), Data([0x00, 0xff, 0xff]))

        var lines: [String] = []
        let out = try connection.copyOut("COPY (SELECT id, note FROM copied WHERE id <= 3 ORDER BY id) TO STDOUT") { chunk in
            lines.append(String(decoding: chunk, as: UTF8.self))
        }
        XCTAssertEqual(out, 3)
        XCTAssertEqual(lines, ["1\tnote \\t tab 1\n", "2\tnote \\t tab 2\n", "3\tnote \\t tab 3\n"])

        // A producer that fails aborts the COPY: nothing lands, the connection stays usable.
        struct Stop: Error {}
        XCTAssertThrowsError(try connection.copyIn("COPY copied (id, note, raw) FROM STDIN") { writer in
            try writer.write("5000\tpartial\t\\\\x00\n")
            throw Stop()
        }) { XCTAssertTrue($0 is Stop) }
        // Malformed data is the server's to refuse, with SQLSTATE.
        XCTAssertThrowsError(try connection.copyIn("COPY copied (id, note, raw) FROM STDIN") { writer in
            try writer.write("not-a-number\tx\t\\\\x00\n")
        }) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "22P02") }
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM copied").first!.decode(Int64.self, "n"), 1000)
    }

    func testListenReceivesNotifications() throws {
        let listener = try NotificationListener(conninfo: database.adminConninfo, channels: ["ledger_test", "Mixed Case"])
        XCTAssertEqual(try listener.wait(timeout: .milliseconds(50)), [])
        let sender = try connect()
        try sender.query("SELECT pg_notify($1, $2)", ["ledger_test", "42"])
        try sender.query("SELECT pg_notify($1, $2)", ["Mixed Case", "x"])
        var received: [PostgresNotification] = []
        let deadline = Date().addingTimeInterval(5)
        while received.count < 2 && Date() < deadline {
            received += try listener.wait(timeout: .seconds(1))
        }
        XCTAssertEqual(received.map(\.channel), ["ledger_test", "Mixed Case"])
        XCTAssertEqual(received.map(\.payload), ["42", "x"])
        XCTAssertEqual(received.first?.backendPID, sender.backendPID)
    }

    func testListenStream() async throws {
        let listener = try NotificationListener(conninfo: database.adminConninfo, channels: ["events"])
        let stream = listener.notifications(checkEvery: .milliseconds(50))
        let conninfo = database.adminConninfo
        Task.detached {
            try? await Task.sleep(for: .milliseconds(100))
            let sender = try Connection(conninfo: conninfo)
            try sender.query("NOTIFY events, 'hello'")
        }
        var iterator = stream.makeAsyncIterator()
        let first = try await iterator.next()
        XCTAssertEqual(first?.payload, "hello")
    }

    func testPoolIsBoundedAndTimesOut() async throws {
        let pool = ConnectionPool(conninfo: database.adminConninfo, maxConnections: 3, acquireTimeout: .milliseconds(300))
        let concurrent = Counter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    try await pool.withConnection { connection in
                        concurrent.state.withLock { $0.now += 1; $0.peak = max($0.peak, $0.now) }
                        try connection.query("SELECT pg_sleep(0.01)")
                        concurrent.state.withLock { $0.now -= 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        XCTAssertLessThanOrEqual(concurrent.state.withLock { $0.peak }, 3)
        XCTAssertGreaterThan(concurrent.state.withLock { $0.peak }, 1)
        XCTAssertLessThanOrEqual(pool.statistics.opened, 3)

        // Hold all three; a fourth caller waits out the timeout and gets a typed error.
        let holders = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<3 { group.addTask { try await pool.withConnection { _ = try $0.query("SELECT pg_sleep(1)") } } }
                try await group.waitForAll()
            }
        }
        try await Task.sleep(for: .milliseconds(150))
        do {
            try await pool.withConnection { _ = try $0.query("SELECT 1") }
            XCTFail("expected a pool timeout")
        } catch let error as PostgresError {
            XCTAssertEqual(error.kind, .poolTimeout)
            XCTAssertTrue(error.isUnavailable)
        }
        try await holders.value
        XCTAssertEqual(pool.statistics.timeouts, 1)
        try await pool.withConnection { _ = try $0.query("SELECT 1") }
    }

    func testPoolAgainstAnUnreachableServerFailsFastAsUnavailable() async throws {
        let info = try ConnectionInfo(parsing: database.adminConninfo).with("host", "/nonexistent-socket-dir")
        let pool = ConnectionPool(conninfo: info.conninfo, maxConnections: 2, acquireTimeout: .seconds(10))
        let started = Date()
        for _ in 0..<3 {
            do {
                try await pool.withConnection { _ = try $0.query("SELECT 1") }
                XCTFail("no server there")
            } catch let error as PostgresError {
                XCTAssertEqual(error.kind, .unavailable)
            }
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "must not wait for the acquire timeout")
        XCTAssertEqual(pool.statistics.open, 0, "failed connects must give their slots back")
    }

    func testPoolDiscardsConnectionsLeftInTransaction() async throws {
        let pool = ConnectionPool(conninfo: database.adminConninfo, maxConnections: 1)
        try await pool.withConnection { _ = try $0.query("BEGIN") }
        let inTransaction = try await pool.withConnection { $0.inTransaction }
        XCTAssertFalse(inTransaction)
    }

    func testPoolReplacesKilledConnectionsTransparently() async throws {
        let pool = ConnectionPool(conninfo: database.adminConninfo, maxConnections: 2)
        let pid = try await pool.withConnection { $0.backendPID }
        let killer = try connect()
        try killer.query("SELECT pg_terminate_backend($1)", [.int32(pid)])
        try await Task.sleep(for: .milliseconds(100))
        let newPID = try await pool.withConnection { connection in
            try connection.query("SELECT pg_backend_pid() AS pid").first!.decode(Int32.self, "pid")
        }
        XCTAssertNotEqual(newPID, pid)
        XCTAssertEqual(pool.statistics.discarded, 1)
    }

    func testPoolRecoversAfterServerRestart() async throws {
        let pool = ConnectionPool(conninfo: database.adminConninfo, maxConnections: 2, acquireTimeout: .seconds(2))
        try await pool.withConnection { _ = try $0.query("SELECT 1") }

        try TestServer.run(.stop)
        do {
            try await pool.withConnection { _ = try $0.query("SELECT 1") }
            try? TestServer.run(.start)
            XCTFail("a query against a stopped server must fail")
        } catch let error as PostgresError {
            try TestServer.run(.start)
            XCTAssertTrue(error.isUnavailable, "\(error)")
        }
        // Same pool, no recreation.
        let one = try await pool.withConnection { try $0.query("SELECT 1::int8 AS one").first!.decode(Int64.self, "one") }
        XCTAssertEqual(one, 1)

        try TestServer.run(.restart)
        let two = try await pool.withConnection { try $0.query("SELECT 2::int8 AS two").first!.decode(Int64.self, "two") }
        XCTAssertEqual(two, 2)
        XCTAssertGreaterThanOrEqual(pool.statistics.discarded, 1)
    }
}

final class Counter: Sendable {
    let state = Mutex((now: 0, peak: 0))
}


import Foundation
import LedgerCore
import LedgerTesting
import Postgres
import XCTest

@testable import LedgerStore

func makeEvent(stream: String = "1000000001", key: String = UUID().uuidString, type: String = "DID_RENEW",
               payload: String = #"{"notificationType":"DID_RENEW"}"#, raw: Data = Data("raw".utf8)) -> NewEvent {
    NewEvent(streamId: stream, dedupeKey: key, source: .apple, type: type, environment: "Sandbox",
             signedAt: 1_700_000_000_000, expiresAt: 1_702_592_000_000, payload: Data(payload.utf8), raw: raw)
}

func count(_ connection: Connection, _ sql: String) throws -> Int64 {
    try connection.query(sql).first!.decode(Int64.self, at: 0)
}

/// Waits (briefly) until `condition` holds; the tests use it to line up concurrent steps.
func eventually(_ what: String, timeout: TimeInterval = 5, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return }
        usleep(10_000)
    }
    XCTFail("timed out waiting until \(what)")
}

class StoreTestCase: XCTestCase {
    var database: TestDatabase!
    var db: Store!
    var pool: ConnectionPool!
    var store: EventStore!

    override func setUpWithError() throws {
        database = try TestDatabase.create()
        db = database.store(poolSize: 4, acquireTimeout: .seconds(3), liveProjections: false)
        pool = db.pool
        store = EventStore(pool: pool)
    }

    override func tearDownWithError() throws {
        db?.close()
        try database?.drop()
    }

    func admin() throws -> Connection { try database.connect() }
    func service() throws -> Connection { try database.connect(as: .service) }

    /// Holds the head-row lock from another session so the store's writer blocks on it and later
    /// appends pile up in the queue: lets a test build one known batch.
    func holdingHeadLock(_ body: (Connection) async throws -> Void) async throws {
        let holder = try admin()
        try holder.query("BEGIN")
        try holder.query("SELECT position FROM event_head FOR UPDATE")
        try await body(holder)
        if holder.inTransaction { try holder.query("COMMIT") }
    }

    func waitForBlockedAppender() throws {
        let watcher = try admin()
        try eventually("the appender waits for the head lock") {
            try count(watcher, "SELECT count(*) FROM pg_locks WHERE NOT granted") > 0
        }
    }
}

final class EventStoreTests: StoreTestCase {
    func testSixteenConcurrentAppendsOfOneEventStoreItOnce() async throws {
        let event = makeEvent(key: "notification-uuid-1")
        let store = self.store!
        let outcomes = try await withThrowingTaskGroup(of: AppendOutcome.self) { group in
            for _ in 0..<16 { group.addTask { try await store.append(event) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(outcomes.count, 16)
        XCTAssertEqual(Set(outcomes.map(\.position)), [1])
        XCTAssertEqual(outcomes.filter(\.duplicate).count, 15)
        XCTAssertEqual(Set(outcomes.map(\.recordedAt)).count, 1)
        XCTAssertEqual(try count(admin(), "SELECT count(*) FROM events"), 1)
        let headPosition = try await store.headPosition()
        XCTAssertEqual(headPosition, 1)
        XCTAssertEqual(store.metrics.appended, 1)
        XCTAssertEqual(store.metrics.duplicates, 15)
    }

    func testDuplicatesWithinOneAppendAndAcrossAppends() async throws {
        let a = makeEvent(key: "a")
        let b = makeEvent(key: "b")
        let sameKeyOtherStream = makeEvent(stream: "2000000002", key: "a")
        let first = try await store.append([a, a, b, sameKeyOtherStream])
        XCTAssertEqual(first.map(\.position), [1, 1, 2, 3])
        XCTAssertEqual(first.map(\.duplicate), [false, true, false, false])
        let again = try await store.append([b, makeEvent(key: "c")])
        XCTAssertEqual(again.map(\.position), [2, 4])
        XCTAssertEqual(again.map(\.duplicate), [true, false])
        let headPosition = try await store.headPosition()
        XCTAssertEqual(headPosition, 4, "duplicates must not burn positions")
    }

    func testAppendOfSeveralEventsIsAllOrNothing() async throws {
        do {
            _ = try await store.append([makeEvent(key: "good"), makeEvent(key: "bad", payload: "{nope")])
            XCTFail("the batch holds invalid JSON")
        } catch {
            guard case .rejected(let state, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(state, "22P02")
        }
        XCTAssertEqual(try count(admin(), "SELECT count(*) FROM events"), 0)
        let headPosition = try await store.headPosition()
        XCTAssertEqual(headPosition, 0)
    }

    func testGroupCommitBatchesConcurrentAppends() async throws {
        let store = self.store!
        let outcomes = try await withThrowingTaskGroup(of: AppendOutcome.self) { group in
            for i in 0..<64 { group.addTask { try await store.append(makeEvent(stream: "s\(i % 5)", key: "k\(i)")) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(outcomes.map(\.position).sorted(), Array(1...64))
        let metrics = store.metrics
        XCTAssertEqual(metrics.appended, 64)
        XCTAssertLessThan(metrics.batches, 64, "64 concurrent appends must share transactions")
        XCTAssertEqual(metrics.batchedEvents, 64)
        XCTAssertEqual(metrics.batchSizeCounts.reduce(0, +), metrics.batches)
        XCTAssertEqual(try count(admin(), "SELECT count(*) FROM events"), 64)
    }

    func testRawBytesAndPayloadRoundTrip() async throws {
        var raw = Data((0...255).map { UInt8($0) })
        raw += Data([0x00, 0x00, 0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1, 0xf0, 0x90, 0x28, 0xbc, 0xed, 0xa0, 0x80, 0xff])
        let payload = #"{"b": {"nested": [1, 2.5, null, true]}, "a": "héllo \"quoted\" \\ 🌍", "signedDate": 1700000000000}"#
        var event = makeEvent(stream: "stream-raw", key: "raw-1", payload: payload, raw: raw)
        event.environment = nil
        event.expiresAt = nil
        let outcome = try await store.append(event)
        let stored = try await store.read(stream: "stream-raw")
        XCTAssertEqual(stored.count, 1)
        let recorded = try XCTUnwrap(stored.first)
        XCTAssertEqual(recorded.event.raw, raw, "raw must come back byte for byte")
        XCTAssertEqual(recorded.event.streamId, event.streamId)
        XCTAssertEqual(recorded.event.dedupeKey, event.dedupeKey)
        XCTAssertEqual(recorded.event.source, .apple)
        XCTAssertEqual(recorded.event.type, event.type)
        XCTAssertNil(recorded.event.environment)
        XCTAssertEqual(recorded.event.signedAt, 1_700_000_000_000)
        XCTAssertNil(recorded.event.expiresAt)
        XCTAssertEqual(recorded.position, outcome.position)
        XCTAssertEqual(recorded.recordedAt, outcome.recordedAt)
        // jsonb keeps the meaning, not the spelling.
        let original = try JSONSerialization.jsonObject(with: Data(payload.utf8)) as! NSDictionary
        let back = try JSONSerialization.jsonObject(with: recorded.event.payload) as! NSDictionary
        XCTAssertEqual(original, back)
    }

    func testInvalidJSONIsRejectedWithoutFailingItsBatchNeighbours() async throws {
        let store = self.store!
        try await holdingHeadLock { holder in
            let first = Task { try await store.append(makeEvent(key: "first")) }
            try waitForBlockedAppender()
            // These queue behind the blocked writer and will be written as one batch.
            var tasks: [(String, Task<AppendOutcome, any Error>)] = []
            for i in 0..<10 { tasks.append(("good\(i)", Task { try await store.append(makeEvent(key: "good\(i)")) })) }
            tasks.insert(("bad-syntax", Task { try await store.append(makeEvent(key: "bad-syntax", payload: #"{"notificationType": "#)) }), at: 3)
            tasks.insert(("bad-nul", Task { try await store.append(makeEvent(key: "bad-nul", payload: #"{"a": "\u0000"}"#)) }), at: 7)
            try eventually("twelve appends are queued") { store.metrics.queued == 12 }
            try holder.query("COMMIT")
            _ = try await first.value
            for (name, task) in tasks {
                if name.hasPrefix("bad") {
                    do {
                        _ = try await task.value
                        XCTFail("\(name) must be rejected")
                    } catch let error as StoreError {
                        guard case .rejected(let state, let message) = error else { return XCTFail("\(name): \(error)") }
                        XCTAssertTrue(state == "22P02" || state == "22P05", "\(name): \(error)")
                        XCTAssertTrue(message.lowercased().contains("json") || message.lowercased().contains("unicode"), message)
                    }
                } else {
                    let outcome = try await task.value
                    XCTAssertFalse(outcome.duplicate)
                }
            }
        }
        let metrics = store.metrics
        XCTAssertGreaterThanOrEqual(metrics.splits, 1, "the poisoned batch must have been split")
        XCTAssertEqual(metrics.rejected, 2)
        XCTAssertEqual(try count(admin(), "SELECT count(*) FROM events"), 11)
        let positions = try await store.readAll(after: 0, limit: 100).map(\.position)
        XCTAssertEqual(positions, Array(1...11), "rejections must not leave gaps")
    }

    func testEmptyOrNulKeysAreInvalidBeforeTheDatabase() async throws {
        for event in [makeEvent(stream: ""), makeEvent(key: ""), makeEvent(stream: "a\u{0}b")] {
            do {
                _ = try await store.append(event)
                XCTFail("accepted \(event.streamId.debugDescription)/\(event.dedupeKey.debugDescription)")
            } catch {
                guard case .invalidEvent = error else { return XCTFail("\(error)") }
            }
        }
    }

    func testReadStreamAndReadAllPages() async throws {
        for i in 1...10 { _ = try await store.append(makeEvent(stream: i % 2 == 0 ? "even" : "odd", key: "k\(i)")) }
        let even = try await store.read(stream: "even")
        XCTAssertEqual(even.map(\.position), [2, 4, 6, 8, 10])
        XCTAssertEqual(even.map(\.event.dedupeKey), ["k2", "k4", "k6", "k8", "k10"])
        let none = try await store.read(stream: "missing")
        XCTAssertEqual(none, [])
        var checkpoint: Int64 = 0
        var seen: [Int64] = []
        while true {
            let page = try await store.readAll(after: checkpoint, limit: 3)
            if page.isEmpty { break }
            seen += page.map(\.position)
            checkpoint = page.last!.position
        }
        XCTAssertEqual(seen, Array(1...10))
    }

    func testHooksRunInTheAppendTransactionAndTheirFailuresDoNotLoseEvents() async throws {
        try admin().query("CREATE TABLE hook_log (position bigint, hook text)")
        // Hooks run as the projector (Migrations/0016).
        try admin().query("GRANT INSERT, SELECT ON hook_log TO ledger_service, ledger_projector")
        final class Committed: Sendable { let hooks = Mutex<[String]>([]) }
        let committed = Committed()
        struct Recording: AppendHook {
            let name: String
            let fail: Bool
            let committed: Committed
            func didAppend(_ batch: AppendedBatch, in connection: Connection) throws -> AfterCommit? {
                for event in batch.events {
                    try connection.query("INSERT INTO hook_log VALUES ($1, $2)", [.int64(event.position), .text(name)])
                }
                if fail { throw StoreError.rejected(sqlState: nil, message: "projection bug") }
                return { [name, committed] in committed.hooks.withLock { $0.append(name) } }
            }
        }
        let failures = FailureLog()
        let store = EventStore(pool: pool, hooks: [Recording(name: "good", fail: false, committed: committed),
                                                   Recording(name: "broken", fail: true, committed: committed)],
                               onHookFailure: { failures.add($0) })
        let outcomes = try await store.append([makeEvent(key: "h1"), makeEvent(key: "h2")])
        XCTAssertEqual(outcomes.map(\.position), [1, 2])
        _ = try await store.append(makeEvent(key: "h1"))  // duplicate: hooks see nothing new
        let log = try admin().query("SELECT position, hook FROM hook_log ORDER BY position").rows.map {
            "\(try $0.decode(Int64.self, "position")):\(try $0.decode(String.self, "hook"))"
        }
        XCTAssertEqual(log, ["1:good", "2:good"], "the broken hook's writes must be rolled back, the good one's kept")
        XCTAssertEqual(try count(admin(), "SELECT count(*) FROM events"), 2)
        XCTAssertEqual(failures.all.map(\.hook), ["broken"])
        XCTAssertEqual(failures.all.first?.positions, 1...2)
        XCTAssertEqual(store.metrics.hookFailures, ["broken": 1])
        XCTAssertEqual(committed.hooks.withLock { $0 }, ["good"], "after-commit actions run once per committed batch, never for a failed hook")
    }

    func testAppendNotifiesListenersAtCommit() async throws {
        let listener = try db.connections.listener(channels: ["ledger_events"])
        let outcomes = try await store.append([makeEvent(key: "n1"), makeEvent(key: "n2")])
        XCTAssertEqual(outcomes.map(\.position), [1, 2])
        var received: [PostgresNotification] = []
        try eventually("the append's NOTIFY arrives") {
            received += try listener.wait(timeout: .milliseconds(200))
            return !received.isEmpty
        }
        XCTAssertEqual(received.map(\.payload), ["2"], "the payload is the batch's last position")
        let again = try await store.append([makeEvent(key: "n1")])
        XCTAssertEqual(again.map(\.duplicate), [true])
        XCTAssertEqual(try listener.wait(timeout: .milliseconds(200)), [], "a duplicate commits nothing and notifies nobody")
        do {
            _ = try await store.append([makeEvent(key: "")])
            XCTFail("an event without a dedupe key is refused")
        } catch {
            XCTAssertFalse(error.isUnavailable, "\(error)")
        }
    }

    /// Shutting the writer down: appends already queued commit and are answered, later ones are
    /// told to retry, and the writer's thread ends (nothing keeps running after `finish`).
    func testFinishCommitsWhatIsQueuedAndRefusesTheRest() async throws {
        let events = EventStore(pool: pool, maxBatch: 4)
        let results = AppendResults()
        let appenders = Task {
            await withTaskGroup(of: Void.self) { group in
                for i in 0..<40 {
                    group.addTask {
                        let result: Result<AppendOutcome, StoreError>
                        do throws(StoreError) {
                            result = .success(try await events.append(makeEvent(key: "q\(i)")))
                        } catch {
                            result = .failure(error)
                        }
                        results.list.withLock { $0.append(result) }
                    }
                }
            }
        }
        // Some of the 40 are written or queued when the writer is told to finish.
        while events.metrics.batches == 0 { try await Task.sleep(for: .milliseconds(1)) }
        await events.finish()
        await appenders.value
        let all = results.list.withLock { $0 }
        XCTAssertEqual(all.count, 40, "every append is answered")
        let committed = all.filter { if case .success = $0 { return true } else { return false } }.count
        XCTAssertGreaterThan(committed, 0)
        for case .failure(let error) in all { XCTAssertTrue(error.isUnavailable, "refused appends are told to retry: \(error)") }
        let stored = try admin().query("SELECT count(*)::bigint AS n FROM events").first?.decode(Int64.self, "n") ?? -1
        XCTAssertEqual(stored, Int64(committed), "answered success exactly when stored")
        do {
            _ = try await events.append(makeEvent(key: "late"))
            XCTFail("after finish an append is refused")
        } catch {
            XCTAssertTrue(error.isUnavailable, "\(error)")
        }
        XCTAssertEqual(events.metrics.queued, 0, "nothing is left waiting")
    }

    func testStoreAnswersUnavailableWhileTheServerIsDownAndRecoversAfter() async throws {
        _ = try await store.append(makeEvent(key: "before"))
        try TestServer.run(.stop)
        do {
            _ = try await store.append(makeEvent(key: "during"))
            try? TestServer.run(.start)
            XCTFail("append against a stopped server must fail")
        } catch {
            try TestServer.run(.start)
            XCTAssertTrue(error.isUnavailable, "\(error)")
        }
        do {
            _ = try await store.readAll(after: 0, limit: 1)
        } catch {
            XCTFail("reads must work again after the restart: \(error)")
        }
        let after = try await store.append(makeEvent(key: "after"))
        XCTAssertEqual(after.position, 2, "the failed append must not have taken a position")
        XCTAssertEqual(store.metrics.unavailable, 1)
    }
}

final class AppendResults: Sendable {
    let list = Mutex<[Result<AppendOutcome, StoreError>]>([])
}

final class MigrationResults: Sendable {
    private let results = Mutex<[Result<[String], MigrationError>]>([])
    func add(_ result: Result<[String], MigrationError>) { results.withLock { $0.append(result) } }
    var all: [Result<[String], MigrationError>] { results.withLock { $0 } }
}

/// The group-commit writer has a connection of its own: readers holding every pooled connection
/// (a `/readyz` or read flood) cannot make appends wait for the pool and answer 503.
final class WriterConnectionTests: StoreTestCase {
    func testAppendsDoNotWaitForAnExhaustedPool() async throws {
        let small = database.store(poolSize: 1, acquireTimeout: .milliseconds(200), liveProjections: false)
        defer { small.close() }
        let tiny = small.pool
        let store = EventStore(pool: tiny)
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let reader = Task.detached {
            try await tiny.withConnection { connection in
                _ = try connection.query("SELECT 1")
                holding.signal()
                release.wait()
            }
        }
        holding.wait()
        let outcome = try await store.append(makeEvent(key: "while-the-pool-is-busy"))
        XCTAssertEqual(outcome.position, 1)
        XCTAssertFalse(outcome.duplicate)
        // Reads still go through the pool, and time out while it is held.
        do {
            _ = try await store.headPosition()
            XCTFail("the pool is held: a read must time out")
        } catch {
            XCTAssertTrue(error.isUnavailable, "\(error)")
        }
        release.signal()
        try await reader.value
        let head = try await store.headPosition()
        XCTAssertEqual(head, 1)
    }
}

final class FailureLog: Sendable {
    private let failures = Mutex<[HookFailure]>([])
    func add(_ failure: HookFailure) { failures.withLock { $0.append(failure) } }
    var all: [HookFailure] { failures.withLock { $0 } }
}

import Synchronization

final class ImmutabilityTests: StoreTestCase {
    func testEventsCannotBeUpdatedDeletedOrTruncatedByTheServiceRole() async throws {
        _ = try await store.append(makeEvent(key: "fact"))
        let service = try service()
        for sql in ["UPDATE events SET type = 'REFUND'", "DELETE FROM events", "TRUNCATE events",
                    "UPDATE event_head SET position = 0", "DELETE FROM projection_checkpoints WHERE true"] {
            XCTAssertThrowsError(try service.query(sql), sql) { error in
                XCTAssertEqual((error as? PostgresError)?.sqlState, "42501", "\(sql): \(error)")
            }
        }
        // No direct INSERT at all (0005): the only way in is append_events().
        for position in [1, 2] {
            XCTAssertThrowsError(try service.query(
                "INSERT INTO events (position, stream_id, dedupe_key, source, type, payload, raw) VALUES (\(position), 's', 'k', 'apple', 't', '{}', '\\x00')")) { error in
                XCTAssertEqual((error as? PostgresError)?.sqlState, "42501", "\(error)")
            }
        }
        // Even a superuser's direct insert must claim a position append_events() handed out.
        XCTAssertThrowsError(try admin().query(
            "INSERT INTO events (position, stream_id, dedupe_key, source, type, payload, raw) VALUES (2, 's', 'k', 'apple', 't', '{}', '\\x00')")) { error in
            XCTAssertTrue("\(error)".contains("append_events"), "\(error)")
        }
        // Every statement of the service role is bounded (a hung lock or plan answers 503, not never).
        for (setting, value) in [("statement_timeout", "5s"), ("lock_timeout", "4s"), ("idle_in_transaction_session_timeout", "1min")] {
            XCTAssertEqual(try service.query("SELECT current_setting('\(setting)') AS v").first?.decode(String.self, "v"), value, setting)
        }
        // 0002 seeds the real projections' rows; a projection of its own keeps this independent of them.
        try service.query("INSERT INTO projection_checkpoints (projection) VALUES ('store_test_projection')")
        try service.query("UPDATE projection_checkpoints SET position = 1 WHERE projection = 'store_test_projection'")
    }

    func testEventsCannotBeUpdatedDeletedOrTruncatedEvenBySuperuser() async throws {
        _ = try await store.append(makeEvent(key: "fact"))
        let admin = try admin()
        for sql in ["UPDATE events SET type = 'REFUND'", "DELETE FROM events", "TRUNCATE events", "TRUNCATE events CASCADE",
                    "UPDATE event_head SET position = 0", "DELETE FROM event_head"] {
            XCTAssertThrowsError(try admin.query(sql), sql) { error in
                let error = error as! PostgresError
                XCTAssertEqual(error.sqlState, "42501", "\(sql): \(error)")
                XCTAssertTrue(error.message.contains("append-only") || error.message.contains("forward"), error.message)
            }
        }
        let stored = try await store.readAll(after: 0, limit: 10)
        XCTAssertEqual(stored.map(\.event.type), ["DID_RENEW"])
    }
}

final class OrderingTests: StoreTestCase {
    func testCheckpointReaderSeesContiguousPositionsDuringConcurrentAppends() async throws {
        let store = self.store!
        let writers = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<16 {
                    group.addTask { for i in 0..<15 { _ = try await store.append(makeEvent(stream: "w\(writer)", key: "\(writer)-\(i)")) } }
                }
                try await group.waitForAll()
            }
        }
        var checkpoint: Int64 = 0
        let deadline = Date().addingTimeInterval(30)
        while checkpoint < 240 && Date() < deadline {
            for event in try await store.readAll(after: checkpoint, limit: 37) {
                XCTAssertEqual(event.position, checkpoint + 1, "a reader following positions must never see a gap")
                checkpoint = event.position
            }
        }
        try await writers.value
        XCTAssertEqual(checkpoint, 240)
    }

    /// The classic gap: with a plain sequence, a reader that follows `id > checkpoint` skips a row
    /// whose transaction took its id first but committed last.
    func testNaiveSequenceReaderSkipsALateCommit() throws {
        let setup = try admin()
        try setup.query("CREATE TABLE naive_events (id bigserial PRIMARY KEY, body text)")
        let tx1 = try admin(), tx2 = try admin(), reader = try admin()
        try tx1.query("BEGIN")
        let id1 = try tx1.query("INSERT INTO naive_events (body) VALUES ('first') RETURNING id").first!.decode(Int64.self, "id")
        let id2 = try tx2.query("INSERT INTO naive_events (body) VALUES ('second') RETURNING id").first!.decode(Int64.self, "id")
        XCTAssertEqual([id1, id2], [1, 2])

        var checkpoint: Int64 = 0
        var seen: [Int64] = []
        func poll() throws {
            for row in try reader.query("SELECT id FROM naive_events WHERE id > $1 ORDER BY id", [.int64(checkpoint)]).rows {
                let id = try row.decode(Int64.self, "id")
                seen.append(id)
                checkpoint = id
            }
        }
        try poll()
        try tx1.query("COMMIT")
        try poll()
        XCTAssertEqual(seen, [2], "the naive reader saw 2, moved its checkpoint past 1, and will never see 1")
        XCTAssertEqual(try count(reader, "SELECT count(*) FROM naive_events"), 2)
    }

    /// The same interleaving against the store: the second writer cannot take a position until the
    /// first commits, so the checkpoint reader sees 1 then 2 and skips nothing.
    func testStoreReaderNeverSkipsALateCommit() async throws {
        let tx1 = try service()
        try tx1.query("BEGIN")
        let first = try tx1.query(
            "SELECT event_position FROM append_events(ARRAY['s1'], ARRAY['k1'], ARRAY['apple'], ARRAY['T'], ARRAY[NULL]::text[], ARRAY[NULL]::timestamptz[], ARRAY[NULL]::timestamptz[], ARRAY['{}']::jsonb[], ARRAY['\\x00']::bytea[])"
        ).first!.decode(Int64.self, "event_position")
        XCTAssertEqual(first, 1)

        let store = self.store!
        let second = Task { try await store.append(makeEvent(stream: "s2", key: "k2")) }
        try waitForBlockedAppender()

        var checkpoint: Int64 = 0
        var seen: [Int64] = []
        func poll() async throws {
            for event in try await store.readAll(after: checkpoint, limit: 100) {
                XCTAssertEqual(event.position, checkpoint + 1, "positions must arrive contiguously")
                seen.append(event.position)
                checkpoint = event.position
            }
        }
        try await poll()
        XCTAssertEqual(seen, [], "nothing is committed yet, and the second append cannot have overtaken the first")
        try tx1.query("COMMIT")
        let outcome = try await second.value
        XCTAssertEqual(outcome.position, 2)
        try await poll()
        XCTAssertEqual(seen, [1, 2])
    }
}

final class MigratorTests: XCTestCase {
    var database: TestDatabase!
    var directory: URL!

    override func setUpWithError() throws {
        database = try TestDatabase.create(migrate: false)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("migrations-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
        try database?.drop()
    }

    func write(_ name: String, _ sql: String) throws {
        try Data(sql.utf8).write(to: directory.appendingPathComponent(name))
    }

    func testAppliesInOrderOnceAndRefusesEditedMigrations() throws {
        try write("0002_second.sql", "INSERT INTO applied_log VALUES ('0002');")
        try write("0001_first.sql", "CREATE TABLE applied_log (name text); INSERT INTO applied_log VALUES ('0001');")
        try write("README.md", "not a migration")
        let owner = database.store(as: .admin, poolSize: 1)
        defer { owner.close() }
        let migrator = owner.migrator(directory: directory)
        XCTAssertEqual(try migrator.status().pending, ["0001_first.sql", "0002_second.sql"])
        XCTAssertEqual(try migrator.migrate(), ["0001_first.sql", "0002_second.sql"])
        XCTAssertEqual(try migrator.migrate(), [])
        let admin = try database.connect()
        let order = try admin.query("SELECT name FROM applied_log").rows.map { try $0.decode(String.self, "name") }
        XCTAssertEqual(order, ["0001", "0002"])
        XCTAssertTrue(try migrator.status().isCurrent)

        try write("0001_first.sql", "CREATE TABLE applied_log (name text, sneaky int); INSERT INTO applied_log VALUES ('0001');")
        try write("0003_third.sql", "INSERT INTO applied_log VALUES ('0003');")
        XCTAssertThrowsError(try migrator.migrate()) { error in
            guard case MigrationError.changedAfterApply(let file, _, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(file, "0001_first.sql")
            XCTAssertTrue("\(error)".contains("0001_first.sql"))
        }
        XCTAssertEqual(try count(admin, "SELECT count(*) FROM applied_log"), 2, "nothing may run after a refused check")
        let status = try migrator.status()
        XCTAssertEqual(status.changed, ["0001_first.sql"])
        XCTAssertEqual(status.pending, ["0003_third.sql"])
        XCTAssertFalse(status.isCurrent)
    }

    func testFailedMigrationRollsBackAndIsNotRecorded() throws {
        try write("0001_ok.sql", "CREATE TABLE ok_table (v int);")
        try write("0002_broken.sql", "CREATE TABLE half_done (v int); SELECT no_such_function();")
        let owner = database.store(as: .admin, poolSize: 1)
        defer { owner.close() }
        let migrator = owner.migrator(directory: directory)
        XCTAssertThrowsError(try migrator.migrate()) { error in
            guard case MigrationError.failed(let file, let cause) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(file, "0002_broken.sql")
            XCTAssertTrue(cause.contains("42883"), cause)
        }
        let admin = try database.connect()
        XCTAssertEqual(try count(admin, "SELECT count(*) FROM pg_tables WHERE tablename = 'half_done'"), 0)
        XCTAssertEqual(try migrator.status().pending, ["0002_broken.sql"])
    }

    func testConcurrentMigratorsApplyEachFileOnce() throws {
        // CREATE TABLE fails if a file runs twice, and the sleeps widen the race window.
        try write("0001_a.sql", "CREATE TABLE runs (name text); INSERT INTO runs VALUES ('0001'); SELECT pg_sleep(0.2);")
        try write("0002_b.sql", "CREATE TABLE b (v int); INSERT INTO runs VALUES ('0002'); SELECT pg_sleep(0.1);")
        try write("0003_c.sql", "CREATE TABLE c (v int); INSERT INTO runs VALUES ('0003');")
        let results = MigrationResults()
        let owners = (0..<3).map { _ in database.store(as: .admin, poolSize: 1) }
        defer { for owner in owners { owner.close() } }
        let directory = self.directory!
        DispatchQueue.concurrentPerform(iterations: 3) { i in
            do throws(MigrationError) {
                results.add(.success(try owners[i].migrator(directory: directory).migrate()))
            } catch {
                results.add(.failure(error))
            }
        }
        let applied = try results.all.flatMap { try $0.get() }
        XCTAssertEqual(applied.sorted(), ["0001_a.sql", "0002_b.sql", "0003_c.sql"])
        let admin = try database.connect()
        XCTAssertEqual(try count(admin, "SELECT count(*) FROM runs"), 3)
        XCTAssertEqual(try count(admin, "SELECT count(*) FROM schema_migrations"), 3)
    }

    func testLocatesTheMigrationsDirectory() throws {
        try write("0001_x.sql", "SELECT 1;")
        XCTAssertEqual(try Migrator.locateDirectory(environment: ["LEDGER_MIGRATIONS_DIR": directory.path]).path, directory.path)
        XCTAssertThrowsError(try Migrator.locateDirectory(environment: ["LEDGER_MIGRATIONS_DIR": "/nonexistent"]))
        // Walking up from a nested directory of the project finds the project's Migrations/.
        let nested = directory.appendingPathComponent("a/b/c")
        try FileManager.default.createDirectory(at: nested, withIntermediateDirectories: true)
        let project = directory.deletingLastPathComponent().appendingPathComponent("proj-\(UUID().uuidString)")
        let deep = project.appendingPathComponent("x/y")
        try FileManager.default.createDirectory(at: deep, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: project.appendingPathComponent("Migrations"), withIntermediateDirectories: true)
        try Data("SELECT 1;".utf8).write(to: project.appendingPathComponent("Migrations/0001.sql"))
        defer { try? FileManager.default.removeItem(at: project) }
        let found = try Migrator.locateDirectory(environment: [:], currentDirectory: deep.path, executable: nil)
        XCTAssertEqual(found.standardizedFileURL.path, project.appendingPathComponent("Migrations").standardizedFileURL.path)
        // The repository's own migrations are found from the package directory.
        let real = try Migrator.locateDirectory(environment: [:])
        XCTAssertTrue(FileManager.default.fileExists(atPath: real.appendingPathComponent("0001_events.sql").path))
    }

    func testServiceRoleCanReadStatus() async throws {
        let owner = database.store(as: .admin, poolSize: 1)
        defer { owner.close() }
        try owner.migrator(directory: try Migrator.locateDirectory()).migrate()
        let service = database.store(poolSize: 1)
        defer { service.close() }
        let status = try await service.migrator(directory: try Migrator.locateDirectory()).status(pool: service.pool)
        XCTAssertTrue(status.isCurrent)
        XCTAssertTrue(status.applied.contains("0001_events.sql"))
    }
}

final class AppendBenchmarkTests: XCTestCase {
    /// Small by default so the suite stays fast; `LEDGER_BENCH_EVENTS` / `LEDGER_BENCH_CONCURRENCY`
    /// (comma-separated) turn it into the real measurement.
    func testBenchmarkMeasuresStoreAndPgbenchInOneRun() async throws {
        let environment = ProcessInfo.processInfo.environment
        let server = try XCTUnwrap(environment["LEDGER_TEST_DATABASE_URL"], "run with make test")
        let events = Int(environment["LEDGER_BENCH_EVENTS"] ?? "") ?? 300
        let levels = (environment["LEDGER_BENCH_CONCURRENCY"] ?? "8").split(separator: ",").compactMap { Int($0) }
        for concurrency in levels {
            let report = try await AppendBenchmark.run(conninfo: server, events: events, concurrency: concurrency)
            print(report)
            XCTAssertEqual(report.events, events)
            XCTAssertGreaterThan(report.eventsPerSecond, 0)
            XCTAssertLessThanOrEqual(report.batches, events)
            XCTAssertNil(report.pgbenchNote)
            XCTAssertNotNil(report.ratio, report.pgbenchNote ?? "")
            XCTAssertTrue(report.description.contains("ratio"))
        }
    }
}

import Foundation
import LedgerCore
import Postgres
import Synchronization
import XCTest
@testable import LedgerStore

/// The rebuild's fast path: the COPY row reader against a naive one on generated rows, the
/// COPY text writers read back, the partition bound literals, the chunk queue between the
/// partitions and the table writers, and a failing partition that must leave everything as it was.
final class RebuildPipelineTests: XCTestCase {
    // MARK: reading COPY rows

    /// The obvious splitter the fast one must agree with: split on tabs, `\N` is NULL.
    static func naiveFields(_ line: [UInt8]) -> [[UInt8]?] {
        var line = line
        if line.last == 0x0A { line.removeLast() }
        return line.split(separator: 0x09, omittingEmptySubsequences: false).map { f in
            f.elementsEqual([0x5C, 0x4E]) ? nil : Array(f)
        }
    }

    func testSplitAgreesWithANaiveSplitterOnGeneratedRows() {
        var random = SystemRandomNumberGenerator()
        var seed = UInt64.random(in: 0...UInt64.max, using: &random)
        print("RebuildPipelineTests seed \(seed)")
        func next() -> UInt64 {  // splitmix64: reproducible from the printed seed
            seed &+= 0x9E37_79B9_7F4A_7C15
            var z = seed
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let alphabet: [UInt8] = Array("ab9:-\\N\t é".utf8) + [0x5C, 0x09, 0x4E]
        let reader = CopyRowReader(columns: 12)
        for _ in 0..<5_000 {
            let fields = Int(next() % 14) + 1  // some rows have more fields than the reader keeps
            var line: [UInt8] = []
            for k in 0..<fields {
                if k > 0 { line.append(0x09) }
                switch next() % 5 {
                case 0: line += [0x5C, 0x4E]  // NULL
                case 1: break  // empty
                default:
                    for _ in 0..<(next() % 19) {
                        let b = alphabet[Int(next() % UInt64(alphabet.count))]
                        if b != 0x09 { line.append(b) }
                    }
                }
            }
            if next() % 2 == 0 { line.append(0x0A) }
            let expected = Self.naiveFields(line)
            let count = line.withUnsafeBytes { reader.split($0) }
            XCTAssertEqual(count, expected.count, "\(line)")
            line.withUnsafeBytes { bytes in
                _ = reader.split(bytes)
                for (i, field) in expected.enumerated() where i < reader.capacity {
                    XCTAssertEqual(reader.rawBytes(i), field, "field \(i) of \(line)")
                    XCTAssertEqual(reader.string(i), field.map { f in f.withUnsafeBytes { CopyRowReader.unescaped($0) } },
                                   "field \(i) of \(line)")
                }
                XCTAssertNil(reader.field(min(count, reader.capacity)), "past the last field")
            }
        }
    }

    func testRepeatedValuesAreRememberedPerColumnAndNeverConfused() {
        let reader = CopyRowReader(columns: 3)
        func read(_ row: String) -> [String?] {
            Array(row.utf8).withUnsafeBytes { bytes in
                _ = reader.split(bytes)
                return (0..<3).map { reader.string($0) }
            }
        }
        XCTAssertEqual(read("abc\tabc\t\\N\n"), ["abc", "abc", nil])
        XCTAssertEqual(read("abd\tabc\tabc\n"), ["abd", "abc", "abc"], "same length, different bytes")
        XCTAssertEqual(read("\\N\t\t\\\\N\n"), [nil, "", "\\N"], "an escaped backslash before N is text, not NULL")
        XCTAssertEqual(read("a\\tb\ta\\\\tb\tx\n"), ["a\tb", "a\\tb", "x"])
        let long = String(repeating: "é", count: 100)  // 200 bytes: longer than a cache slot
        XCTAssertEqual(read("\(long)\t\(long)x\t\(long)\n"), [long, long + "x", long])
        XCTAssertEqual(read("\(long)\t\(long)x\tabc\n"), [long, long + "x", "abc"])
    }

    func testIntegersParseLikeTheServerPrintsThemAndRejectTheRest() {
        let reader = CopyRowReader(columns: 1)
        func integer(_ text: String) -> Int64? {
            Array(text.utf8).withUnsafeBytes { bytes in
                _ = reader.split(bytes)
                return reader.integer(0)
            }
        }
        for value: Int64 in [0, 7, -7, 1_735_689_600_000, 999_999_999_999_999_999, -999_999_999_999_999_999,
                             1_000_000_000_000_000_000, .max, .min + 1] {
            XCTAssertEqual(integer(String(value)), value)
        }
        XCTAssertNil(integer("-9223372036854775808"), "Int64.min reads as nil, as it always did (the magnitude overflows)")
        for bad in ["", "-", "+1", "1a", "a1", " 1", "1 ", "9223372036854775808", "99999999999999999999", "1.5", "\\N"] {
            XCTAssertNil(integer(bad), "'\(bad)'")
        }
    }

    func testWrittenFieldsReadBackUnchanged() {
        let strings: [String?] = ["", "plain", "tab\there", "new\nline", "cr\rx", "back\\slash", "\\N", "é✓", "\u{1}\u{B}\u{C}", nil,
                                  String(repeating: "x", count: 300)]
        let integers: [Int64?] = [0, 1, -1, 42, 1_735_689_600_000, .max, .min + 1, nil]
        var row: [UInt8] = []
        for s in strings { row.field(s) }
        for i in integers { row.field(i) }
        row.field(true)
        row.field(false)
        row.field(nil as Bool?, last: true)
        let reader = CopyRowReader(columns: strings.count + integers.count + 3)
        row.withUnsafeBytes { bytes in
            XCTAssertEqual(reader.split(bytes), strings.count + integers.count + 3)
            for (i, s) in strings.enumerated() { XCTAssertEqual(reader.string(i), s) }
            for (i, v) in integers.enumerated() { XCTAssertEqual(reader.integer(strings.count + i), v) }
            XCTAssertEqual(reader.bool(strings.count + integers.count), true)
            XCTAssertEqual(reader.bool(strings.count + integers.count + 1), false)
            XCTAssertNil(reader.bool(strings.count + integers.count + 2))
        }
        XCTAssertEqual(row.last, 0x0A)
        var minimum: [UInt8] = []
        minimum.field(Int64.min, last: true)
        XCTAssertEqual(String(decoding: minimum, as: UTF8.self), "-9223372036854775808\n")
    }

    // MARK: the hand-off between partitions and table writers

    func testTheQueueHandsChunksOverInOrderAndWaitsWhenFull() throws {
        let queue = ChunkQueue(capacity: 2)
        let received = Mutex<[[UInt8]]>([])
        let consumer = Thread {
            while let chunk = try? queue.pop() { received.withLock { $0.append(chunk) } }
        }
        consumer.start()
        for i in 0..<50 { try queue.push([UInt8(i)]) }
        queue.close()
        let deadline = Date().addingTimeInterval(10)
        while received.withLock({ $0.count }) < 50 && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        XCTAssertEqual(received.withLock { $0 }, (0..<50).map { [UInt8($0)] })
        XCTAssertNil(try queue.pop(), "closed and drained")
    }

    func testAFailureStopsBothSides() throws {
        let queue = ChunkQueue(capacity: 1)
        try queue.push([1])
        let blocked = Mutex<(any Error)?>(nil)
        let producer = Thread {
            do { try queue.push([2]) } catch { blocked.withLock { $0 = error } }  // waits: the queue is full
        }
        producer.start()
        Thread.sleep(forTimeInterval: 0.1)
        queue.fail(PostgresError(.server, "disk full"))
        let deadline = Date().addingTimeInterval(10)
        while blocked.withLock({ $0 == nil }) && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        XCTAssertTrue(blocked.withLock { $0 } is ChunkQueue.Aborted, "a waiting producer is released with the failure")
        XCTAssertThrowsError(try queue.pop()) { error in
            XCTAssertTrue(String(describing: error).contains("disk full"), "\(error)")
        }
        XCTAssertThrowsError(try queue.push([3]))
    }

    // MARK: against the database

    func testPartitionBoundLiteralsReadBackAsTheSameText() throws {
        let database = try ProjectionScratchDatabase()
        defer { database.drop() }
        let connection = try database.connect(as: .service)
        let values = ["Production:1", "it's", "''", "back\\slash", "\\'", "E'x'", "$$", "é✓", "a\tb", "new\nline", "'); DROP TABLE events; --", ""]
        for standard in ["on", "off"] {
            try connection.query("SET standard_conforming_strings = \(standard)")
            for value in values {
                let row = try connection.query("SELECT \(Rebuilder.literal(value)) AS v").first
                XCTAssertEqual(try row?.decode(String.self, "v"), value, "standard_conforming_strings \(standard)")
            }
        }
        // A bound must be an index condition, not a filter: each partition reads its range only.
        // (The planner is steered to the index, as on a real log; the point is how it uses it.)
        try connection.query("SET enable_seqscan = off")
        try connection.query("SET enable_bitmapscan = off")
        let plan = try connection.query(
            "EXPLAIN " + Rebuilder.bulkQuery(head: 10, range: (from: "Production:1", to: "Sandbox:1"))
                .replacingOccurrences(of: "COPY (", with: "").replacingOccurrences(of: ") TO STDOUT", with: ""))
            .rows.map { try $0.decode(String.self, "QUERY PLAN") }.joined(separator: "\n")
        XCTAssertFalse(plan.contains("Filter"), plan)
        XCTAssertTrue(plan.contains("subscription >= 'Production:1'::text") && plan.contains("subscription < 'Sandbox:1'::text"), plan)
    }

    func testAFailingPartitionLeavesTheLiveTablesAndNoFreshOnes() async throws {
        let database = try ProjectionScratchDatabase()
        defer { database.drop() }
        let db = database.store(poolSize: 4)
        let pool = db.pool
        defer { pool.close() }
        let projector = Projector(catalog: ProjectionFixture.catalog, clock: { ProjectionFixture.start + 150 * ProjectionFixture.day })
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: 12, seed: 3), to: store)
        let live = try database.dumpTables()
        // A fact this build cannot read, in the middle of the last partition's range.
        _ = try database.adminQuery("""
            INSERT INTO public.facts (schema_version, position, ordinal, recorded_at, stream_id, subscription, kind, origin,
                                      signed_at, effective_at, has_transaction, has_renewal)
            SELECT schema_version, position, 99, recorded_at, stream_id, subscription, 'bogus', origin, signed_at, effective_at, false, false
            FROM public.facts WHERE subscription IS NOT NULL ORDER BY subscription DESC, position LIMIT 1
            """)
        for partitions in [1, 2, 3] {
            var rebuilder = db.rebuilder(projector: projector)
            rebuilder.partitions = partitions
            rebuilder.flushBytes = 512  // many chunks in flight when the partition fails
            do {
                _ = try await rebuilder.run()
                XCTFail("a fact of an unknown kind must fail the rebuild")
            } catch {
                XCTAssertTrue(String(describing: error).contains("kind bogus"), "the partition's own error, not an abort: \(error)")
            }
            XCTAssertEqual(try database.dumpTables(), live, "partitions \(partitions)")
            let fresh = try database.adminQuery("SELECT count(*)::bigint AS n FROM pg_tables WHERE schemaname = 'projections' AND tablename LIKE '%\\_next'")
            XCTAssertEqual(try fresh.first?.decode(Int64.self, "n"), 0, "the writers rolled back their fresh tables")
        }
        _ = try database.adminQuery("DELETE FROM public.facts WHERE kind = 'bogus'")
        _ = try await db.rebuilder(projector: projector).run()
        XCTAssertEqual(try database.dumpTables(), live, "after the bad fact is gone the rebuild succeeds")
    }
}

import Foundation
import LedgerCore
import LedgerTesting
import Postgres
import Synchronization
import XCTest
@testable import LedgerStore

/// The kernel's outbox on real PostgreSQL: items derived in the append transaction, leased
/// claims, per-key order, the retry schedule, attempts as events, replay.
final class OutboxTests: XCTestCase {
    var database: ProjectionScratchDatabase!
    var store: Store!
    let now: EpochMillis = 1_800_000_000_000

    /// A consumer caused by `test/cause` events: payload `{"id", "key"}` (a `"skip": true` causes nothing).
    static func consumer(ordered: Bool, delays: [EpochMillis] = [1_000, 5_000]) -> OutboxConsumer {
        OutboxConsumer(name: "test.consumer", ordered: ordered, schedule: RetrySchedule(delays: delays, jitter: 0), leaseMillis: 60_000) { batch in
            batch.events.compactMap { recorded -> OutboxEffect? in
                guard recorded.event.type == "test/cause",
                      let value = try? JSONDecoder().decode(JSONValue.self, from: recorded.event.payload),
                      let id = value.text("id"), value["skip"] == nil else { return nil }
                return .enqueue(OutboxItemDraft(id: id, orderingKey: value.text("key") ?? "k", payload: value,
                                                causePosition: recorded.position, createdAt: recorded.recordedAt))
            }
        }
    }

    func open(ordered: Bool = false, delays: [EpochMillis] = [1_000, 5_000]) throws {
        database = try ProjectionScratchDatabase()
        var configuration = Store.Configuration(databaseURL: database.service, poolSize: 8, catalog: ProjectionFixture.catalog)
        configuration.outboxConsumers = [Self.consumer(ordered: ordered, delays: delays)]
        store = Store(configuration)
    }

    override func tearDown() {
        store?.close()
        database?.drop()
    }

    var consumer: OutboxConsumer { store.outbox.consumers[0] }

    func cause(_ id: String, key: String = "k", dedupe: String? = nil) -> NewEvent {
        let payload = Data(#"{"id":"\#(id)","key":"\#(key)"}"#.utf8)
        return NewEvent(streamId: "ledger:test", dedupeKey: dedupe ?? "cause:" + id, source: .ledger, type: "test/cause",
                        environment: nil, signedAt: now, payload: payload, raw: payload)
    }

    func outboxEvents() throws -> [(type: String, payload: JSONValue)] {
        try database.adminQuery("SELECT type, payload::text AS p FROM events WHERE stream_id = 'ledger:outbox:test.consumer' ORDER BY position")
            .rows.map { (try $0.decode(String.self, "type"), try JSONDecoder().decode(JSONValue.self, from: Data(try $0.decode(String.self, "p").utf8))) }
    }

    // MARK: - Items exist iff their cause committed

    func testAnItemIsWrittenByTheAppendThatCommitsItsCauseAndOnlyOnce() async throws {
        try open()
        let first = try await store.events.append(cause("a"))
        let items = try await store.outbox.items("test.consumer")
        XCTAssertEqual(items.map(\.id), ["a"])
        XCTAssertEqual(items.first?.causePosition, first.position)
        XCTAssertEqual(items.first?.status, .pending)
        XCTAssertEqual(items.first?.nextAttemptAt, 0, "due at once")
        // A duplicate of the cause is one event and one item.
        let again = try await store.events.append(cause("a"))
        XCTAssertTrue(again.duplicate)
        // A second cause naming the same id (a re-derivation) inserts nothing.
        _ = try await store.events.append(cause("a", dedupe: "other"))
        let after = try await store.outbox.items("test.consumer")
        XCTAssertEqual(after.map(\.id), ["a"])
        XCTAssertEqual(after.first?.causePosition, first.position, "the first cause's row stays")
    }

    func testARefusedAppendLeavesNoItem() async throws {
        try open()
        // One request, all-or-nothing: its second event is refused by the database (not JSON).
        let bad = NewEvent(streamId: "ledger:test", dedupeKey: "bad", source: .ledger, type: "test/cause", environment: nil,
                           signedAt: now, payload: Data("{not json".utf8), raw: Data())
        do {
            _ = try await store.events.append([cause("x"), bad])
            XCTFail("the batch must be refused")
        } catch {}
        let items = try await store.outbox.items("test.consumer")
        XCTAssertEqual(items, [])
        let awaited1 = try await store.events.headPosition()
        XCTAssertEqual(awaited1, 0)
    }

    /// When the item cannot be written the facts roll back with it (the events are kept, as
    /// evidence must be); the catch-up then derives both, so the item still comes to exist.
    func testAnItemThatFailsInTheAppendIsDerivedByTheCatchUpWithItsFacts() async throws {
        try open()
        try database.adminScript("""
            CREATE FUNCTION test_refuse_item() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.id = 'poison' THEN RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER test_refuse_item BEFORE INSERT ON outbox_items FOR EACH ROW EXECUTE FUNCTION test_refuse_item();
            """)
        let stored = try await store.events.append(cause("poison"))
        XCTAssertFalse(stored.duplicate, "the event is stored")
        let awaited2 = try await store.outbox.items("test.consumer")
        XCTAssertEqual(awaited2, [])
        let facts = try database.adminQuery("SELECT position FROM projection_checkpoints WHERE projection = 'facts.v\(FactDecoder.schemaVersion)'")
        XCTAssertEqual(try facts.first?.decode(Int64.self, "position"), 0, "facts and item rolled back together")
        // The catch-up stops on it (recorded, like a projection's failing event), then derives it
        // once the cause is fixed.
        let passes = try await store.worker.runOnce()
        guard case .failed(.factsFailed(_, stored.position, _))? = passes.first(where: { $0.projection == nil })?.outcome else {
            return XCTFail("the catch-up must stop at the event while the item is refused: \(passes)")
        }
        try database.adminScript("DROP TRIGGER test_refuse_item ON outbox_items")
        _ = try await store.worker.catchUp()
        let items = try await store.outbox.items("test.consumer")
        XCTAssertEqual(items.map(\.id), ["poison"])
        XCTAssertEqual(items.first?.causePosition, stored.position)
    }

    // MARK: - Claims

    func testTwoClaimersNeverGetTheSameItem() async throws {
        try open()
        _ = try await store.events.append((0..<40).map { cause("i\($0)", key: "k\($0)") })
        let outbox = store.outbox
        let consumer = self.consumer
        let now = self.now
        let claims = try await withThrowingTaskGroup(of: [String].self) { group in
            for _ in 0..<8 { group.addTask { try await outbox.claim(consumer, limit: 7, now: now).map(\.id) } }
            var all: [[String]] = []
            for try await ids in group { all.append(ids) }
            return all
        }
        let ids = claims.flatMap { $0 }
        XCTAssertEqual(ids.count, Set(ids).count, "an item was claimed twice: \(claims)")
        XCTAssertEqual(Set(ids).count, 40, "8 × 7 claims cover the 40 items")
        // Leased: nothing is claimable until the lease runs out, then all are again.
        let awaited3 = try await outbox.claim(consumer, limit: 100, now: now)
        XCTAssertEqual(awaited3, [])
        let awaited4 = try await outbox.claim(consumer, limit: 100, now: now + consumer.leaseMillis).count
        XCTAssertEqual(awaited4, 40)
    }

    func testPartitionsShareAClaimAndAPartitionWithoutRoomIsNeverTaken() async throws {
        try open()
        // A backlog of 30 in partition "busy", caused before one item each of "a" and "b".
        _ = try await store.events.append((0..<30).map { cause("busy\($0)", key: "busy|k\($0)") })
        _ = try await store.events.append([cause("a0", key: "a|k"), cause("b0", key: "b|k")])
        let outbox = store.outbox
        // Oldest first would have been four of "busy": each partition gets its share instead.
        let first = try await outbox.claim(consumer, limit: 4, now: now)
        XCTAssertEqual(first.filter { $0.partition == "busy" }.count, 2, "busy gets what a and b cannot use: \(first.map(\.id))")
        XCTAssertEqual(Set(first.filter { $0.partition != "busy" }.map(\.id)), ["a0", "b0"])
        // With no room for "busy" nothing else is due: nothing, and nothing of "busy" is leased.
        let excluded = try await outbox.claim(consumer, limit: 10, now: now) { $0 == "busy" ? 0 : .max }
        XCTAssertEqual(excluded, [])
        // A partition's room caps what it gets, whatever the limit.
        let roomed = try await outbox.claim(consumer, limit: 10, now: now) { $0 == "busy" ? 3 : .max }
        XCTAssertEqual(roomed.map(\.id), ["busy2", "busy3", "busy4"])
        let rest = try await outbox.claim(consumer, limit: 100, now: now)
        XCTAssertEqual(rest.map(\.id), (5..<30).map { "busy\($0)" }, "the rest of busy, in cause order")
        // A claim asks for at least one item.
        let leased = try await outbox.claim(consumer, limit: 0, now: now + consumer.leaseMillis)
        XCTAssertEqual(leased.count, 1)
    }

    func testWithFewerSlotsThanPartitionsTheLongestWaitingGoesFirst() async throws {
        try open()
        let outbox = store.outbox
        // "a" sorts first by name, but "z"'s item has been due longer.
        try await outbox.enqueue([OutboxItemDraft(id: "a1", orderingKey: "a|k", payload: .null, causePosition: 1, createdAt: now, notBefore: now - 10),
                                  OutboxItemDraft(id: "z1", orderingKey: "z|k", payload: .null, causePosition: 2, createdAt: now, notBefore: now - 500),
                                  OutboxItemDraft(id: "m1", orderingKey: "m|k", payload: .null, causePosition: 3, createdAt: now, notBefore: now + 60_000)],
                                 consumer: consumer.name)
        let one = try await outbox.claim(consumer, limit: 1, now: now)
        XCTAssertEqual(one.map(\.id), ["z1"])
        let next = try await outbox.claim(consumer, limit: 5, now: now)
        XCTAssertEqual(next.map(\.id), ["a1"], "m1 is not due yet")
    }

    func testAnOrderedConsumerWorksOneItemPerKeyAtATimeInCauseOrder() async throws {
        try open(ordered: true)
        _ = try await store.events.append([cause("a1", key: "A"), cause("a2", key: "A"), cause("b1", key: "B")])
        var claimed = try await store.outbox.claim(consumer, limit: 10, now: now)
        XCTAssertEqual(claimed.map(\.id).sorted(), ["a1", "b1"], "a2 waits for a1")
        let a1 = try XCTUnwrap(claimed.first { $0.id == "a1" })
        try await store.outbox.record(a1, .failed(error: "503"), now: now)
        // a1 is pending (backing off): a2 still waits, even after a1's lease.
        claimed = try await store.outbox.claim(consumer, limit: 10, now: now + 500)
        XCTAssertEqual(claimed.map(\.id), [])
        claimed = try await store.outbox.claim(consumer, limit: 10, now: now + 1_000)
        XCTAssertEqual(claimed.map(\.id), ["a1"])
        try await store.outbox.record(claimed[0], .gaveUp(error: "410 gone"), now: now + 1_000)
        claimed = try await store.outbox.claim(consumer, limit: 10, now: now + 1_000)
        XCTAssertEqual(claimed.map(\.id), ["a2"], "an exhausted item no longer holds its key back")
    }

    // MARK: - Schedule, events, replay

    /// Waits (up to 5 s) until `test.consumer` has no pending item, then stops the run loop.
    func stopWhenNothingPending(_ running: Task<Void, Never>) async throws {
        for _ in 0..<250 {
            if try await store.outbox.items("test.consumer", status: .pending).isEmpty { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        running.cancel()
        await running.value
    }

    func testFailedAttemptsFollowTheScheduleAreRecordedAsEventsAndTheLastExhaustsTheItem() async throws {
        try open(delays: [1_000, 5_000])
        _ = try await store.events.append(cause("s"))
        let awaited5 = try await store.outbox.claim(consumer, limit: 1, now: now).first
        var item = try XCTUnwrap(awaited5)
        try await store.outbox.record(item, .failed(error: "timeout"), now: now)
        let awaited6 = try await store.outbox.item("test.consumer", id: "s")
        var row = try XCTUnwrap(awaited6)
        XCTAssertEqual(row.attempts, 1)
        XCTAssertEqual(row.nextAttemptAt, now + 1_000)
        XCTAssertEqual(row.lastError, "timeout")
        XCTAssertEqual(row.status, .pending)
        // The receiver's Retry-After is honoured up to what is left of the schedule (5 s here).
        let awaited7 = try await store.outbox.claim(consumer, limit: 1, now: now + 1_000).first
        item = try XCTUnwrap(awaited7)
        try await store.outbox.record(item, .failed(error: "429", retryAfter: now + 60_000), now: now + 1_000)
        let awaited8 = try await store.outbox.item("test.consumer", id: "s")
        row = try XCTUnwrap(awaited8)
        XCTAssertEqual(row.attempts, 2)
        XCTAssertEqual(row.nextAttemptAt, now + 6_000)
        let awaited9 = try await store.outbox.claim(consumer, limit: 1, now: now + 5_999)
        XCTAssertEqual(awaited9, [])
        let awaited10 = try await store.outbox.claim(consumer, limit: 1, now: now + 60_000).first
        item = try XCTUnwrap(awaited10)
        try await store.outbox.record(item, .failed(error: "still down"), now: now + 60_000)
        let awaited11 = try await store.outbox.item("test.consumer", id: "s")
        row = try XCTUnwrap(awaited11)
        XCTAssertEqual(row.status, .exhausted, "three attempts for two delays")
        XCTAssertEqual(row.attempts, 3)
        XCTAssertEqual(row.lastError, "still down")
        let recorded = try outboxEvents()
        XCTAssertEqual(recorded.map(\.type), [LedgerEventType.outboxAttemptFailed, LedgerEventType.outboxAttemptFailed, LedgerEventType.outboxExhausted])
        XCTAssertEqual(recorded.map { $0.payload.int64("attempt") }, [1, 2, 3])
        XCTAssertEqual(recorded[1].payload.int64("retryAfter"), now + 60_000)
        let head = try await store.events.headPosition()
        XCTAssertEqual(row.answerPosition, head)
        let statuses = try await store.outbox.statuses(now: now)
        XCTAssertEqual(statuses.first?.counts[.exhausted], 1)
        XCTAssertEqual(statuses.first?.oldestPendingAgeMillis, 0, "nothing pending")
    }

    func testReplayStartsANewGenerationAndDeliveryIsTheFinalAnswer() async throws {
        try open(delays: [])
        _ = try await store.events.append([cause("r1"), cause("r2")])
        for item in try await store.outbox.claim(consumer, limit: 10, now: now) {
            try await store.outbox.record(item, .failed(error: "down"), now: now)
        }
        let awaited12 = try await store.outbox.items("test.consumer", status: .exhausted).count
        XCTAssertEqual(awaited12, 2)
        let replayed = try await store.outbox.replayExhausted("test.consumer", requestedBy: "test", now: now + 10)
        XCTAssertEqual(replayed, ["r1", "r2"])
        let awaited13 = try await store.outbox.replayExhausted("test.consumer", requestedBy: "test", now: now + 10)
        XCTAssertEqual(awaited13, [], "nothing left exhausted")
        var rows = try await store.outbox.items("test.consumer")
        XCTAssertEqual(rows.map(\.status), [.pending, .pending])
        XCTAssertEqual(rows.map(\.generation), [1, 1])
        XCTAssertEqual(rows.map(\.attempts), [0, 0])
        let awaited14 = try await store.outbox.claim(consumer, limit: 10, now: now + 9)
        XCTAssertEqual(awaited14, [], "due from the replay's time")
        let claimed = try await store.outbox.claim(consumer, limit: 10, now: now + 10)
        XCTAssertEqual(claimed.count, 2)
        for item in claimed { try await store.outbox.record(item, .delivered(answer: .object(["status": .integer(200)])), now: now + 20) }
        rows = try await store.outbox.items("test.consumer")
        XCTAssertEqual(rows.map(\.status), [.done, .done])
        // Replay by id: a delivered item can be sent again (generation 2).
        let awaited15 = try await store.outbox.replay("test.consumer", ids: ["r2", "missing"], requestedBy: "ops", now: now + 30)
        XCTAssertEqual(awaited15, ["r2"])
        let awaited16 = try await store.outbox.item("test.consumer", id: "r2")?.generation
        XCTAssertEqual(awaited16, 2)
        let types = try outboxEvents().map(\.type)
        XCTAssertEqual(types.filter { $0 == LedgerEventType.outboxExhausted }.count, 2)
        XCTAssertEqual(types.filter { $0 == LedgerEventType.outboxRequeued }.count, 3)
        XCTAssertEqual(types.filter { $0 == LedgerEventType.outboxDelivered }.count, 2)
        let delivered = try outboxEvents().first { $0.type == LedgerEventType.outboxDelivered }
        XCTAssertEqual(delivered?.payload["answer"]?.int64("status"), 200)
        // Recording the same attempt twice (two writers racing) is one event.
        let before = try await store.events.headPosition()
        let stale = try XCTUnwrap(claimed.first)
        let outcome = try await store.outbox.record(stale, .delivered(answer: .null), now: now + 40)
        XCTAssertEqual(outcome?.duplicate, true)
        let awaited17 = try await store.events.headPosition()
        XCTAssertEqual(awaited17, before)
    }

    func testTheRunLoopWorksEveryDueItemWithChildTasksUntilCancelled() async throws {
        try open()
        _ = try await store.events.append((0..<12).map { cause("w\($0)", key: "k\($0)") })
        let seen = Mutex<[String]>([])
        let outbox = store.outbox
        let consumer = self.consumer
        let running = Task {
            await outbox.run(consumer, concurrency: 3, pollInterval: .milliseconds(20), clock: { 1_800_000_000_000 }) { item in
                seen.withLock { $0.append(item.id) }
                return item.id == "w0" ? .gaveUp(error: "no") : .delivered(answer: .null)
            }
        }
        try await stopWhenNothingPending(running)
        XCTAssertEqual(seen.withLock { $0 }.sorted(), (0..<12).map { "w\($0)" }.sorted(), "each worked once")
        let statuses = try await store.outbox.statuses(now: now)
        XCTAssertEqual(statuses.first?.counts, [.done: 11, .exhausted: 1])
    }

    /// An attempt that returns after the loop was told to stop is still recorded (its record no
    /// longer runs in the attempt's own task): the delivered item is done, never sent again.
    func testAnAttemptThatReturnsWhileTheLoopStopsIsStillRecorded() async throws {
        try open()
        _ = try await store.events.append([cause("late")])
        let started = Mutex(false)
        let outbox = store.outbox
        let consumer = self.consumer
        let running = Task {
            await outbox.run(consumer, concurrency: 2, pollInterval: .milliseconds(20), clock: { 1_800_000_000_000 }) { _ in
                started.withLock { $0 = true }
                // A receiver that answers 100 ms after the stop (a wait the cancellation does not
                // cut short), by when the loop has stopped taking wakes.
                for _ in 0..<1000 {
                    if Task.isCancelled { break }
                    try? await Task.sleep(for: .milliseconds(5))
                }
                await Task.detached { try? await Task.sleep(for: .milliseconds(100)) }.value
                return .delivered(answer: .null)
            }
        }
        for _ in 0..<250 where !started.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertTrue(started.withLock { $0 })
        running.cancel()
        await running.value
        let item = try await store.outbox.item("test.consumer", id: "late")
        XCTAssertEqual(item?.status, .done, "the attempt's answer was recorded before the loop returned")
    }

    /// The loop frees a slot when the attempt returns and records it apart: an ordered key's next
    /// item is still never sent before its previous attempt's record committed (the item stays
    /// pending until then), and each key's items go in cause order.
    func testAnOrderedKeysNextItemWaitsForThePreviousRecordWhileSlotsMoveOn() async throws {
        try open(ordered: true)
        _ = try await store.events.append((0..<5).flatMap { i in [cause("a\(i)", key: "A"), cause("b\(i)", key: "B"), cause("c\(i)", key: "C")] })
        let seen = Mutex<[String]>([])
        let violations = Mutex<[String]>([])
        let outbox = store.outbox
        let consumer = self.consumer
        let running = Task {
            await outbox.run(consumer, concurrency: 4, pollInterval: .milliseconds(20), clock: { 1_800_000_000_000 }) { item in
                seen.withLock { $0.append(item.id) }
                if let n = Int(item.id.dropFirst()), n > 0 {
                    let previous = "\(item.id.first!)\(n - 1)"
                    let status = try? await outbox.item("test.consumer", id: previous)?.status
                    if status != .done { violations.withLock { $0.append("\(item.id) sent while \(previous) was \(String(describing: status))") } }
                }
                return .delivered(answer: .null)
            }
        }
        try await stopWhenNothingPending(running)
        XCTAssertEqual(violations.withLock { $0 }, [])
        let order = seen.withLock { $0 }
        for key in ["a", "b", "c"] {
            XCTAssertEqual(order.filter { $0.hasPrefix(key) }, (0..<5).map { "\(key)\($0)" }, "each key in cause order, each item once")
        }
        let statuses = try await store.outbox.statuses(now: now)
        XCTAssertEqual(statuses.first?.counts, [.done: 15])
    }

    /// A partition (`<endpoint>|…`) whose attempts hang holds at most `perPartition` slots, and the
    /// others' items keep flowing through the rest: each slot is refilled as its attempt finishes,
    /// never after the slowest attempt claimed with it.
    func testAHangingPartitionHoldsOnlyItsShareAndFreedSlotsAreRefilledAtOnce() async throws {
        try open()
        _ = try await store.events.append((0..<6).map { cause("slow\($0)", key: "slow|s\($0)") }
                                          + (0..<30).map { cause("fast\($0)", key: "fast|f\($0)") })
        final class Gate: Sendable {
            let open = Mutex(false)
            let slowStarted = Mutex(0)
            let fastDone = Mutex(0)
            let slowInFlightMax = Mutex(0)
            let slowInFlight = Mutex(0)
        }
        let gate = Gate()
        let outbox = store.outbox
        let consumer = self.consumer
        let running = Task {
            await outbox.run(consumer, concurrency: 4, perPartition: 2, pollInterval: .milliseconds(20), clock: { 1_800_000_000_000 }) { item in
                if item.partition == "slow" {
                    gate.slowStarted.withLock { $0 += 1 }
                    let now = gate.slowInFlight.withLock { $0 += 1; return $0 }
                    gate.slowInFlightMax.withLock { $0 = max($0, now) }
                    // Hangs until the test opens the gate (a black-holed receiver).
                    while !gate.open.withLock({ $0 }) && !Task.isCancelled { try? await Task.sleep(for: .milliseconds(5)) }
                    gate.slowInFlight.withLock { $0 -= 1 }
                } else {
                    try? await Task.sleep(for: .milliseconds(2))
                    gate.fastDone.withLock { $0 += 1 }
                }
                return .delivered(answer: .null)
            }
        }
        // Every fast item is delivered while the slow partition hangs in its two slots.
        for _ in 0..<500 where gate.fastDone.withLock({ $0 }) < 30 { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(gate.fastDone.withLock { $0 }, 30, "the healthy partition was held up by the hanging one")
        XCTAssertEqual(gate.slowStarted.withLock { $0 }, 2, "the hanging partition holds its share of the slots, no more")
        gate.open.withLock { $0 = true }
        try await stopWhenNothingPending(running)
        XCTAssertEqual(gate.slowStarted.withLock { $0 }, 6)
        XCTAssertLessThanOrEqual(gate.slowInFlightMax.withLock { $0 }, 2)
        let statuses = try await store.outbox.statuses(now: now)
        XCTAssertEqual(statuses.first?.counts, [.done: 36])
    }

    func testTheScheduleSpreadsDelaysByTheJitterAndGivesUpAfterTheLastAttempt() {
        let schedule = RetrySchedule(delays: [10_000, 20_000], jitter: 0.5)
        XCTAssertEqual(schedule.nextAttempt(after: 1, now: 0, random: 0), 5_000)
        XCTAssertEqual(schedule.nextAttempt(after: 1, now: 0, random: 1), 15_000)
        XCTAssertEqual(schedule.nextAttempt(after: 2, now: 100, random: 0.5), 20_100)
        XCTAssertEqual(schedule.nextAttempt(after: 1, now: 0, retryAfter: 25_000, random: 0.5), 25_000, "Retry-After honoured")
        XCTAssertEqual(schedule.nextAttempt(after: 2, now: 0, retryAfter: 50_000, random: 0.5), 20_000,
                       "no longer than what is left of the schedule")
        XCTAssertNil(schedule.nextAttempt(after: 3, now: 0))
        XCTAssertEqual(schedule.maxAttempts, 3)
        XCTAssertNil(RetrySchedule(delays: []).nextAttempt(after: 1, now: 0))
        // A receiver asking for a year waits a day at most.
        let long = RetrySchedule(delays: [1_000, 5 * 86_400_000, 5 * 86_400_000], jitter: 0)
        XCTAssertEqual(long.nextAttempt(after: 1, now: 7, retryAfter: 365 * 86_400_000), 7 + RetrySchedule.retryAfterCap)
    }

    /// What another party wrote is stored and shown without NUL or controls (PostgreSQL refuses
    /// NUL in text and jsonb), capped.
    func testReceiverTextIsMadeStorable() {
        XCTAssertEqual(StorableText.from(Array("ok\u{0}\u{1B}[31m\tx\ny\r\u{7F}".utf8), limit: 100), "ok\u{FFFD}\u{FFFD}[31m\tx\ny\r\u{FFFD}")
        XCTAssertEqual(StorableText.from([0x61, 0xFF, 0x62], limit: 100), "a\u{FFFD}b", "not UTF-8")
        XCTAssertEqual(StorableText.clean("abcdef", limit: 3), "abc")
        XCTAssertEqual(StorableText.clean("", limit: 3), "")
    }
}

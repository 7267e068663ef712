import Foundation

/// The one bridge between Swift concurrency and long blocking database work (rebuilds, fact
/// derivation, exports, job locks). Every libpq call blocks its thread, so such work never runs
/// on the cooperative pool (two threads on two cores: one rebuild would stall every request): it
/// runs on a dedicated thread of its own, and its result comes back through a continuation. Short
/// statements go through `ConnectionPool.withConnection` (its connections' own threads); the
/// group-commit writers and the catch-up's waits have dedicated threads of their own
/// (`EventStore`, `ProjectionWorker`).
enum BlockingWork {
    /// Runs `body` on a new thread and resumes with its result.
    static func run<T: Sendable>(name: String = "ledger.store.job", _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.name = name
            thread.start()
        }
    }

    /// `body(0..<count)` concurrently, each index on a thread of its own (index 0 on the caller's),
    /// and waits for all; results in order.
    static func inParallel<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) -> T) -> [T] {
        if count == 1 { return [body(0)] }
        let results = ResultSlots<T>(count: count)
        for index in 1..<count {
            let thread = Thread { results.set(index, body(index)) }
            thread.name = "ledger.store.parallel\(index)"
            thread.start()
        }
        results.set(0, body(0))
        return results.waitForAll()
    }
}

/// Results written by concurrent jobs, one slot each; `waitForAll` sleeps on the condition until
/// every slot is set.
private final class ResultSlots<T: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var slots: [T?]
    private var missing: Int

    init(count: Int) {
        slots = Array(repeating: nil, count: count)
        missing = count
    }

    func set(_ index: Int, _ value: T) {
        condition.lock()
        slots[index] = value
        missing -= 1
        if missing == 0 { condition.broadcast() }
        condition.unlock()
    }

    func waitForAll() -> [T] {
        condition.lock()
        defer { condition.unlock() }
        while missing > 0 { condition.wait() }
        return slots.map { $0! }
    }
}

/// One dedicated thread running short blocking jobs in order, for a loop that waits on a socket
/// often (the catch-up worker's wait on its LISTEN session, once per pass): a thread per wait
/// would cost a thread start each time, the cooperative pool must not block. The thread starts
/// with the first job and ends after idling; the next job starts it again.
final class DedicatedThread: @unchecked Sendable {
    static let idleExit: TimeInterval = 5

    let name: String
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var jobs: [@Sendable () -> Void] = []
    private var running = false

    init(name: String) { self.name = name }

    /// Runs `body` on the thread, after the jobs before it, and resumes with its result.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try body() }) }
        }
    }

    private func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(job)
        let start = !running
        running = true
        condition.signal()
        condition.unlock()
        guard start else { return }
        let thread = Thread { [self] in
            while let job = next() { job() }
        }
        thread.name = name
        thread.start()
    }

    private func next() -> (@Sendable () -> Void)? {
        condition.lock()
        defer { condition.unlock() }
        while jobs.isEmpty {
            if !condition.wait(until: Date(timeIntervalSinceNow: Self.idleExit)) && jobs.isEmpty {
                running = false
                return nil
            }
        }
        return jobs.removeFirst()
    }
}

import Dispatch
import Foundation

/// The one bridge between Swift concurrency and blocking database work. Every libpq call blocks its
/// thread, so blocking work never runs on the cooperative pool: it runs on a dispatch queue (a
/// caller's serial queue, or the shared one for long jobs) and its result comes back through a
/// continuation.
enum BlockingWork {
    /// Long jobs (rebuilds, derivations): their own threads, never the cooperative pool.
    static let longJobs = DispatchQueue(label: "ledger.store.long-jobs", attributes: .concurrent)

    static func run<T: Sendable>(on queue: DispatchQueue = longJobs, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
            }
        }
    }

    /// `body(0..<count)` on the long-job queue, concurrently; results in order.
    static func inParallel<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) -> T) -> [T] {
        if count == 1 { return [body(0)] }
        let results = ResultSlots<T>(count: count)
        let group = DispatchGroup()
        for index in 0..<count {
            longJobs.async(group: group) { results.set(index, body(index)) }
        }
        group.wait()
        return results.values
    }
}

/// Results written by concurrent jobs, one slot each.
private final class ResultSlots<T: Sendable>: @unchecked Sendable {
    private let lock = DispatchQueue(label: "ledger.store.result-slots")
    private var slots: [T?]
    init(count: Int) { slots = Array(repeating: nil, count: count) }
    func set(_ index: Int, _ value: T) { lock.sync { slots[index] = value } }
    var values: [T] { lock.sync { slots.map { $0! } } }
}

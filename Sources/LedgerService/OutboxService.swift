import Foundation
import LedgerCore
import LedgerStore

/// Works one outbox consumer's queue as a service of the ServiceGroup (`Outbox.run`): `work`
/// runs as child tasks of `run()`; `shutdown()` cancels them and `run()` returns once they have
/// (an attempt cut short is not recorded, so its lease runs out and it is tried again).
///
/// A slice adds one per consumer to the group: `OutboxService(store: store, consumer: MyOutbox.consumer, log: log) { item in … }`.
final class OutboxService: LifecycleService {
    let name: String
    let store: Store
    let consumer: OutboxConsumer
    let concurrency: Int
    let perPartition: Int?
    let pollInterval: Duration
    let log: Log
    let work: @Sendable (OutboxItem) async -> OutboxAttemptResult
    private let stop = AsyncStream<Void>.makeStream()

    init(store: Store, consumer: OutboxConsumer, concurrency: Int = 4, perPartition: Int? = nil, pollInterval: Duration = .seconds(1),
         log: Log, work: @escaping @Sendable (OutboxItem) async -> OutboxAttemptResult) {
        name = "outbox-" + consumer.name
        self.store = store
        self.consumer = consumer
        self.concurrency = concurrency
        self.perPartition = perPartition
        self.pollInterval = pollInterval
        self.log = log
        self.work = work
    }

    func run() async throws {
        let (outbox, consumer, concurrency, perPartition, pollInterval, log, work) = (store.outbox, consumer, concurrency, perPartition, pollInterval, log, work)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await outbox.run(consumer, concurrency: concurrency, perPartition: perPartition, pollInterval: pollInterval, onError: { error in
                    log.warn("outbox pass failed; retrying", ["consumer": consumer.name, "error": "\(error)"])
                }, work: work)
            }
            for await _ in stop.stream { break }
            group.cancelAll()
        }
    }

    func shutdown() async { stop.continuation.finish() }
}

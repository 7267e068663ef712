import Foundation
import HTTPServer
import LedgerStore
import Synchronization

/// A long-running part of the service: it runs until asked to shut down, and shutting down drains
/// what is in flight. `ledger serve` runs its parts in one `ServiceGroup`.
public protocol LifecycleService: Sendable {
    var name: String { get }
    /// Runs until `shutdown()` (or fails).
    func run() async throws
    /// Stops taking new work, finishes what is in flight, and makes `run()` return.
    func shutdown() async
    /// Whether `run()` returning on its own means something is wrong (true for listeners and
    /// workers: the group then shuts down; false for a start-up job, which is simply done).
    var runsUntilShutdown: Bool { get }
}

extension LifecycleService {
    public var runsUntilShutdown: Bool { true }
}

/// Runs services together under one task group. A stop request (SIGTERM) or any service failing
/// shuts them all down in reverse start order, so each part drains before what it depends on:
/// the HTTP listeners finish their requests while the store (its catch-up worker and group-commit
/// writer) still runs, then the store stops its worker and commits what is queued.
public struct ServiceGroup: Sendable {
    public let services: [any LifecycleService]
    let log: Log

    public init(_ services: [any LifecycleService], log: Log) {
        self.services = services
        self.log = log
    }

    /// Runs every service until `stop` yields once (or a service fails), then shuts all down;
    /// rethrows the first failure.
    public func run(until stop: AsyncStream<Void>) async throws {
        let services = self.services, log = self.log
        let failure: (any Error)? = await withTaskGroup(of: (any Error)?.self) { group in
            let (ended, endedSignal) = AsyncStream<Void>.makeStream()
            for service in services {
                group.addTask {
                    var failed = false
                    defer { if failed || service.runsUntilShutdown { endedSignal.yield() } }
                    do { try await service.run() } catch {
                        failed = true
                        log.error("service failed; shutting down", ["service": service.name, "error": "\(error)"])
                        return error
                    }
                    return nil
                }
            }
            group.addTask {
                // Whichever comes first: the stop request, or a service ending on its own (a
                // start-up job ending is normal and does not stop the others).
                await withTaskGroup(of: Void.self) { race in
                    race.addTask { for await _ in stop { return } }
                    race.addTask { for await _ in ended { return } }
                    await race.next()
                    race.cancelAll()
                }
                for service in services.reversed() {
                    log.info("stopping", ["service": service.name])
                    await service.shutdown()
                }
                endedSignal.finish()
                return nil
            }
            var first: (any Error)?
            for await result in group where first == nil { first = result }
            return first
        }
        if let failure { throw failure }
    }
}

/// An HTTP listener as a service: it serves until `shutdown()`, which stops accepting and lets
/// requests in flight finish within the grace period. The listener is bound before the group runs
/// (`LedgerApp.serve`), so a port in use fails the start at once; `run()` binds it otherwise.
final class HTTPService: LifecycleService {
    let name: String
    let server: HTTPServer
    let grace: Duration
    private let stopped = AsyncStream<Void>.makeStream()

    init(name: String, server: HTTPServer, grace: Duration = .seconds(10)) {
        self.name = name
        self.server = server
        self.grace = grace
    }

    func run() async throws {
        if server.port == nil { try server.start() }
        for await _ in stopped.stream { break }
    }

    func shutdown() async {
        await server.shutdown(gracePeriod: grace)
        stopped.continuation.finish()
    }
}

/// The store is a service of its own (`Store.run()`: the catch-up worker; its shutdown refuses
/// new appends, commits and answers the queued ones, then closes the pools). It runs first, so it
/// stops last, after the listeners have finished their requests.
extension Store: LifecycleService {}

/// A job that runs once at start (retrying while the database is down) and then is done.
final class StartupJob: LifecycleService {
    let name: String
    let attempts: Int
    let pause: Duration
    let log: Log
    let job: @Sendable () async throws -> Void
    private let stopped = Atomic<Bool>(false)

    init(name: String, attempts: Int = 60, pause: Duration = .seconds(5), log: Log, job: @escaping @Sendable () async throws -> Void) {
        self.name = name
        self.attempts = attempts
        self.pause = pause
        self.log = log
        self.job = job
    }

    func run() async throws {
        for attempt in 0..<attempts where !stopped.load(ordering: .relaxed) {
            do { try await job(); return } catch {
                if attempt == 0 { log.warn("start-up job failed; retrying", ["job": name, "error": "\(error)"]) }
                try? await Task.sleep(for: pause)
            }
        }
    }

    func shutdown() async { stopped.store(true, ordering: .relaxed) }

    var runsUntilShutdown: Bool { false }
}

import Dispatch
import Synchronization

/// How busy a pool is, for `/metrics` and `/readyz`.
public struct PoolStatistics: Sendable, Equatable {
    public var maxConnections: Int
    /// Connections open or being opened.
    public var open: Int
    public var idle: Int
    public var inUse: Int
    /// Callers queued for a connection right now.
    public var waiting: Int
    /// Connections opened since the pool was made (reconnects included).
    public var opened: Int
    /// Connections thrown away because they broke (server restart, network).
    public var discarded: Int
    /// Acquires that gave up after the acquire timeout.
    public var timeouts: Int

    public init(maxConnections: Int = 0, open: Int = 0, idle: Int = 0, inUse: Int = 0, waiting: Int = 0, opened: Int = 0, discarded: Int = 0, timeouts: Int = 0) {
        self.maxConnections = maxConnections
        self.open = open
        self.idle = idle
        self.inUse = inUse
        self.waiting = waiting
        self.opened = opened
        self.discarded = discarded
        self.timeouts = timeouts
    }
}

/// A bounded set of connections to one database.
///
/// Every libpq call is blocking, so each connection slot owns a serial DispatchQueue and the work
/// runs there: async callers suspend instead of parking a cooperative-pool thread, and at most
/// `maxConnections` threads ever block in libpq. Waiting callers are served first come, first
/// served, and fail with `.poolTimeout` after `acquireTimeout`.
///
/// Reconnecting is transparent: an idle connection that the server closed (restart, failover,
/// `pg_terminate_backend`) is noticed before reuse and replaced; one that breaks while a statement
/// runs makes that statement fail with `.connectionLost` (the caller cannot know whether it
/// committed, so it must decide whether to retry) and is replaced on the next acquire. While the
/// server is down every acquire fails fast with `.unavailable`.
public final class ConnectionPool: Sendable {
    public let conninfo: String
    public let maxConnections: Int
    public let acquireTimeout: Duration
    private let queues: [DispatchQueue]
    private let state: Mutex<State>

    struct Lease: Sendable {
        let slot: Int
        let connection: Connection
    }

    private enum Grant: Sendable {
        case reuse(Lease)
        case open(slot: Int)
        case failure(PostgresError)
    }

    private struct Waiter: Sendable {
        let id: UInt64
        let deliver: @Sendable (Result<Lease, PostgresError>) -> Void
    }

    private struct State: Sendable {
        var idle: [Lease] = []
        var freeSlots: [Int]
        var waiters: [Waiter] = []
        var nextWaiter: UInt64 = 0
        var inUse = 0
        var opened = 0
        var discarded = 0
        var timeouts = 0
        var closed = false
    }

    public init(conninfo: String, maxConnections: Int = 10, acquireTimeout: Duration = .seconds(5)) {
        precondition(maxConnections > 0, "a pool needs at least one connection")
        self.conninfo = conninfo
        self.maxConnections = maxConnections
        self.acquireTimeout = acquireTimeout
        queues = (0..<maxConnections).map { DispatchQueue(label: "postgres.pool.slot\($0)") }
        state = Mutex(State(freeSlots: Array((0..<maxConnections).reversed())))
    }

    deinit { close() }

    public var statistics: PoolStatistics {
        state.withLock { s in
            PoolStatistics(
                maxConnections: maxConnections, open: maxConnections - s.freeSlots.count, idle: s.idle.count,
                inUse: s.inUse, waiting: s.waiters.count, opened: s.opened, discarded: s.discarded, timeouts: s.timeouts)
        }
    }

    /// Runs `body` with a connection of its own on the connection's thread and returns its result.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            acquire { result in
                switch result {
                case .failure(let error):
                    continuation.resume(throwing: error)
                case .success(let lease):
                    let outcome = Result { try body(lease.connection) }
                    self.release(lease)
                    continuation.resume(with: outcome)
                }
            }
        }
    }

    /// `withConnection` wrapped in a transaction.
    @discardableResult
    public func transaction<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await withConnection { connection in try connection.transaction(body) }
    }

    /// The blocking form, for code on its own threads (C callbacks, a dedicated writer queue).
    /// Never call it from a Swift concurrency task: it parks the thread while it waits.
    @discardableResult
    public func withConnectionBlocking<T>(_ body: (Connection) throws -> T) throws -> T {
        let lease: Lease
        // Fast path: a free connection is checked (or opened) right here, on the caller's thread,
        // instead of hopping to the slot's queue and back.
        switch state.withLock({ s -> Grant? in s.closed ? .failure(PostgresError(.poolClosed, "acquire after close")) : Self.takeImmediately(&s) }) {
        case .failure(let error)?:
            throw error
        case .reuse(let idle)?:
            if idle.connection.isAliveWhenIdle() {
                lease = idle
            } else {
                state.withLock { $0.discarded += 1 }
                lease = try openBlocking(slot: idle.slot)
            }
        case .open(let slot)?:
            lease = try openBlocking(slot: slot)
        case nil:
            let delivered = Mutex<Result<Lease, PostgresError>?>(nil)
            let ready = DispatchSemaphore(value: 0)
            acquire { result in
                delivered.withLock { $0 = result }
                ready.signal()
            }
            ready.wait()
            lease = try delivered.withLock { $0! }.get()
        }
        defer { release(lease) }
        return try body(lease.connection)
    }

    private func openBlocking(slot: Int) throws(PostgresError) -> Lease {
        do {
            let connection = try Connection(conninfo: conninfo)
            state.withLock { $0.opened += 1 }
            return Lease(slot: slot, connection: connection)
        } catch {
            handBack(slot: slot, connection: nil)
            throw error
        }
    }

    private static func takeImmediately(_ s: inout State) -> Grant? {
        if let lease = s.idle.popLast() {
            s.inUse += 1
            return .reuse(lease)
        }
        if let slot = s.freeSlots.popLast() {
            s.inUse += 1
            return .open(slot: slot)
        }
        return nil
    }

    /// Closes idle connections and fails waiting callers; connections in use close when returned.
    public func close() {
        let (waiters, idle) = state.withLock { s -> ([Waiter], [Lease]) in
            s.closed = true
            defer { s.waiters = []; s.idle = [] }
            return (s.waiters, s.idle)
        }
        _ = idle  // dropping the leases closes the connections
        for waiter in waiters { waiter.deliver(.failure(PostgresError(.poolClosed, "the pool was closed while waiting"))) }
    }

    // MARK: internals

    private func acquire(_ deliver: @escaping @Sendable (Result<Lease, PostgresError>) -> Void) {
        let (grant, waiterID) = state.withLock { s -> (Grant?, UInt64?) in
            if s.closed { return (.failure(PostgresError(.poolClosed, "acquire after close")), nil) }
            if let grant = Self.takeImmediately(&s) { return (grant, nil) }
            s.nextWaiter += 1
            s.waiters.append(Waiter(id: s.nextWaiter, deliver: deliver))
            return (nil, s.nextWaiter)
        }
        if let grant {
            fulfil(grant, deliver)
        } else if let waiterID {
            let timeout = acquireTimeout
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(timeout.nanoseconds))) { [weak self] in
                guard let self else { return }
                let expired = self.state.withLock { s -> Waiter? in
                    guard let index = s.waiters.firstIndex(where: { $0.id == waiterID }) else { return nil }
                    s.timeouts += 1
                    return s.waiters.remove(at: index)
                }
                expired?.deliver(.failure(PostgresError(
                    .poolTimeout, "waited \(timeout) for one of \(self.maxConnections) connections")))
            }
        }
    }

    private func fulfil(_ grant: Grant, _ deliver: @escaping @Sendable (Result<Lease, PostgresError>) -> Void) {
        switch grant {
        case .failure(let error):
            deliver(.failure(error))
        case .reuse(let lease):
            queues[lease.slot].async {
                if lease.connection.isAliveWhenIdle() {
                    deliver(.success(lease))
                } else {
                    self.state.withLock { $0.discarded += 1 }
                    self.open(slot: lease.slot, deliver)
                }
            }
        case .open(let slot):
            queues[slot].async { self.open(slot: slot, deliver) }
        }
    }

    /// Runs on the slot's queue.
    private func open(slot: Int, _ deliver: @escaping @Sendable (Result<Lease, PostgresError>) -> Void) {
        do {
            let connection = try Connection(conninfo: conninfo)
            state.withLock { $0.opened += 1 }
            deliver(.success(Lease(slot: slot, connection: connection)))
        } catch {
            handBack(slot: slot, connection: nil)
            deliver(.failure(error))
        }
    }

    private func release(_ lease: Lease) {
        let connection = lease.connection
        var healthy = !connection.isBroken
        if healthy && connection.inTransaction {
            // A borrower left a transaction open (it threw past its own ROLLBACK); never hand
            // that state to the next borrower.
            healthy = (try? connection.query("ROLLBACK", name: "ROLLBACK")) != nil && !connection.inTransaction
        }
        if !healthy { state.withLock { $0.discarded += 1 } }
        handBack(slot: lease.slot, connection: healthy ? connection : nil)
    }

    private func handBack(slot: Int, connection: Connection?) {
        let next = state.withLock { s -> (Waiter, Grant)? in
            if s.closed {
                s.inUse -= 1
                s.freeSlots.append(slot)
                return nil
            }
            if !s.waiters.isEmpty {
                let waiter = s.waiters.removeFirst()
                return (waiter, connection.map { .reuse(Lease(slot: slot, connection: $0)) } ?? .open(slot: slot))
            }
            s.inUse -= 1
            if let connection { s.idle.append(Lease(slot: slot, connection: connection)) } else { s.freeSlots.append(slot) }
            return nil
        }
        if let (waiter, grant) = next { fulfil(grant, waiter.deliver) }
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}

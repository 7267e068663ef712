import Dispatch
import Foundation
import LedgerCore
internal import Postgres
import Synchronization

/// What one pass of the worker did for one projection.
public struct ProjectionPass: Sendable, Equatable {
    public enum Outcome: Sendable, Equatable {
        /// Nothing after the checkpoint.
        case idle
        /// Another worker holds the checkpoint row (SKIP LOCKED): it is that worker's turn.
        case busy
        /// Applied events `from`…`to`; more may be waiting when the batch was full.
        case advanced(from: Int64, to: Int64)
        /// Stopped: the error is recorded on the checkpoint row; earlier events of the batch
        /// were applied and the checkpoint is right before the failing one.
        case failed(ProjectionError)
    }
    /// Nil for the facts derivation that precedes the projections.
    public var projection: ProjectionName?
    public var outcome: Outcome
}

/// The catch-up worker: advances each projection's checkpoint over events the live hook did not
/// apply (hook failure, events appended before the projection existed, a stopped projection).
///
/// Each pass per projection is one transaction: lock the checkpoint row with
/// `FOR UPDATE SKIP LOCKED` (no row: another process has it), read the next events in position
/// order, require them to start right after the checkpoint (never skip), refold the subscriptions their facts
/// touch (each projection's `apply`, Projection.swift), advance the checkpoint, commit — so any number of workers can run without a leader and
/// none double-applies. A failing event stops its projection with `status = 'failed'`, the error
/// and its position recorded; every later pass retries it (never skipping it), so fixing the cause
/// resumes the projection.
public final class ProjectionWorker: Sendable {
    let pool: ConnectionPool
    public let projector: Projector
    public let batchSize: Int
    public let projections: [ProjectionName]
    /// The registered projections (`Projections.registered`), each applied through its `apply`.
    let registered: [any Projection]
    /// Outbox items of the facts the catch-up derives.
    let outbox: OutboxDerivation
    private let stopped = Atomic<Bool>(false)
    private let waiter = DispatchQueue(label: "ledger.projection.worker.wait")

    init(pool: ConnectionPool, projector: Projector, batchSize: Int = 1000, projections: [ProjectionName] = ProjectionName.allCases,
         outbox: OutboxDerivation = OutboxDerivation(consumers: OutboxConsumer.registered), registered: [any Projection]? = nil) {
        self.outbox = outbox
        self.registered = registered ?? Projections.registered(projector: projector)
        precondition(batchSize > 0, "batchSize must be positive")
        self.pool = pool
        self.projector = projector
        self.batchSize = batchSize
        self.projections = projections
    }

    /// One pass over every projection, after deriving the facts of up to `batchSize` events the
    /// append path did not record (the projections never read past the facts).
    public func runOnce() async throws(ProjectionError) -> [ProjectionPass] {
        var passes: [ProjectionPass] = []
        do {
            let derived = try await pool.withConnection { connection in try FactStore.derive(limit: self.batchSize, outbox: self.outbox, on: connection) }
            if let derived { passes.append(ProjectionPass(projection: nil, outcome: .advanced(from: derived.lowerBound, to: derived.upperBound))) }
        } catch {
            throw ProjectionError(error)
        }
        for projection in projections {
            do {
                let outcome = try await pool.withConnection { connection in try self.pass(projection, on: connection) }
                passes.append(ProjectionPass(projection: projection, outcome: outcome))
            } catch {
                throw ProjectionError(error)
            }
        }
        return passes
    }

    /// Passes until no projection advances any more (each stops when idle, busy or failed).
    public func catchUp() async throws(ProjectionError) -> [ProjectionPass] {
        var all: [ProjectionPass] = []
        while true {
            let passes = try await runOnce()
            all += passes
            if !passes.contains(where: { if case .advanced = $0.outcome { return true } else { return false } }) { return all }
        }
    }

    /// Runs until `stop()`: a pass, then waits for an append's NOTIFY on `ledger_events` or one
    /// `pollInterval`, whichever comes first. Errors (database down) are reported and retried.
    public func run(pollInterval: Duration = .seconds(1), onError: @escaping @Sendable (ProjectionError) -> Void = { _ in }) async {
        var listener: NotificationListener?
        while !stopped.load(ordering: .relaxed) {
            // (Re)connects after the database was down; until then the poll interval applies.
            if listener == nil { listener = try? NotificationListener(conninfo: pool.conninfo, channels: ["ledger_events"]) }
            var more = false
            do {
                let passes = try await runOnce()
                more = passes.contains { pass in
                    if case .advanced(let from, let to) = pass.outcome { return to - from + 1 >= Int64(batchSize) }
                    return false
                }
            } catch {
                onError(error)
            }
            if more || stopped.load(ordering: .relaxed) { continue }
            if let current = listener {
                let healthy = (try? await BlockingWork.run(on: waiter) { _ = try current.wait(timeout: pollInterval) }) != nil
                if !healthy {
                    listener = nil
                    try? await Task.sleep(for: pollInterval)
                }
            } else {
                try? await Task.sleep(for: pollInterval)
            }
        }
    }

    public func stop() { stopped.store(true, ordering: .relaxed) }

    // MARK: one pass

    /// The one catch-up pass, for every registered projection.
    func pass(_ projection: ProjectionName, on connection: Connection) throws -> ProjectionPass.Outcome {
        guard let owner = registered.first(where: { $0.names.contains(projection) }) else { throw ProjectionError.unknownProjection(projection.rawValue) }
        // Look before locking: the live hook keeps a running projection at the head, and every
        // append's NOTIFY wakes this worker. Taking the checkpoint row FOR UPDATE just to find
        // nothing to do made each append batch's hook wait for this transaction (measured: 5
        // events per batch and 1.2k notifications/s instead of full batches).
        // The facts bound every projection: it never folds an event whose facts are not derived.
        let peek = try connection.query(
            """
            SELECT c.position, coalesce(f.position, 0) AS head FROM projection_checkpoints c
            LEFT JOIN projection_checkpoints f ON f.projection = $2 WHERE c.projection = $1
            """,
            [.text(projection.rawValue), .text(FactStore.checkpoint)], name: "checkpoint behind facts?")
        guard let peeked = peek.first else { return .idle }
        let factsHead = try peeked.decode(Int64.self, "head")
        if try peeked.decode(Int64.self, "position") >= factsHead { return .idle }
        return try connection.transaction { connection -> ProjectionPass.Outcome in
            try connection.asProjector()
            let locked = try connection.query(
                "SELECT position FROM projection_checkpoints WHERE projection = $1 FOR UPDATE SKIP LOCKED",
                [.text(projection.rawValue)], name: "lock checkpoint")
            guard let row = locked.first else { return .busy }
            let checkpoint = try row.decode(Int64.self, "position")
            let events = try connection.query(
                "SELECT position FROM events WHERE position > $1 AND position <= $3 ORDER BY position LIMIT $2",
                [.int64(checkpoint), .int64(Int64(batchSize)), .int64(factsHead)], name: "events after checkpoint")
            var batch: [(position: Int64, Void)] = []
            for row in events.rows {
                batch.append((try row.decode(Int64.self, "position"), ()))
            }
            guard let first = batch.first, let last = batch.last else { return .idle }
            for (offset, event) in batch.enumerated() where event.position != checkpoint + 1 + Int64(offset) {
                let error = ProjectionError.gap(projection: projection, checkpoint: checkpoint + Int64(offset), found: event.position)
                try Self.record(projection, position: checkpoint + Int64(offset), failure: error, failedAt: event.position, on: connection)
                return .failed(error)
            }
            do {
                try connection.savepoint { connection in try owner.apply(first.position...last.position, to: projection, on: connection) }
                try Self.record(projection, position: last.position, failure: nil, failedAt: nil, on: connection)
                return .advanced(from: first.position, to: last.position)
            } catch {
                if connection.isBroken { throw error }
            }
            // Something in the batch fails: apply event by event to stop right before it.
            var applied = checkpoint
            for event in batch {
                do {
                    try connection.savepoint { connection in try owner.apply(event.position...event.position, to: projection, on: connection) }
                    applied = event.position
                } catch {
                    if connection.isBroken { throw error }
                    let failure = ProjectionError.eventFailed(projection: projection, position: event.position, message: String(describing: error))
                    try Self.record(projection, position: applied, failure: failure, failedAt: event.position, on: connection)
                    return .failed(failure)
                }
            }
            // The batch failed as a whole but no single event did (e.g. a transient conflict).
            try Self.record(projection, position: applied, failure: nil, failedAt: nil, on: connection)
            return .advanced(from: first.position, to: applied)
        }
    }

    static func record(
        _ projection: ProjectionName, position: Int64, failure: ProjectionError?, failedAt: Int64?, on connection: Connection
    ) throws {
        try connection.query(
            """
            UPDATE projection_checkpoints
            SET position = $2, status = $3, last_error = $4, failed_position = $5, updated_at = now()
            WHERE projection = $1
            """,
            [.text(projection.rawValue), .int64(position), .text(failure == nil ? "running" : "failed"),
             .optional(failure.map(\.description)), .optional(failedAt)],
            name: "record checkpoint")
    }
}

/// A projection's progress, for `/metrics` and `/readyz`.
public struct ProjectionStatus: Sendable, Equatable, Codable {
    public var name: String
    public var position: Int64
    /// The event log's last position.
    public var head: Int64
    /// Events not applied yet (`head - position`).
    public var lag: Int64
    /// `running` or `failed`.
    public var status: String
    public var lastError: String?
    /// The position of the event it stopped at, when failed.
    public var failedPosition: Int64?

    public var isFailed: Bool { status == "failed" }
}

enum ProjectionStatusReader {
    /// Every projection's checkpoint against the head, in name order (one query).
    static func statuses(_ pool: ConnectionPool) async throws(ProjectionError) -> [ProjectionStatus] {
        do {
            return try await pool.withConnection { connection in try statuses(on: connection) }
        } catch {
            throw ProjectionError(error)
        }
    }

    static func statuses(on connection: Connection) throws -> [ProjectionStatus] {
        let result = try connection.query(
            """
            SELECT c.projection, c.position, h.position AS head, c.status, c.last_error, c.failed_position
            FROM projection_checkpoints c CROSS JOIN event_head h WHERE c.status <> 'retired' ORDER BY c.projection
            """, name: "projection statuses")
        return try result.rows.map { row in
            let position = try row.decode(Int64.self, "position")
            let head = try row.decode(Int64.self, "head")
            return ProjectionStatus(
                name: try row.decode(String.self, "projection"), position: position, head: head,
                lag: max(head - position, 0), status: try row.decode(String.self, "status"),
                lastError: try row.decode(String?.self, "last_error"),
                failedPosition: try row.decode(Int64?.self, "failed_position"))
        }
    }
}

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

/// The catch-up worker: advances the facts and each projection's checkpoint over events the
/// append path did not apply (hook failure, events appended before the projection existed, a
/// stopped projection, facts the append could not record).
///
/// Each pass per lane (`CatchUp.Lane`: the facts of this build's schema version first, then every
/// registered projection) is one transaction: lock the checkpoint row with
/// `FOR UPDATE SKIP LOCKED` (no row: another process has it), read the next events in position
/// order, require them to start right after the checkpoint (never skip), apply them (derive their
/// facts; or the projection's `apply`, Projection.swift), advance the checkpoint, commit — so any
/// number of workers can run without a leader and none double-applies. A failing event stops its
/// lane with `status = 'failed'`, the error and its position recorded; every later pass retries
/// it (never skipping it), so fixing the cause resumes the lane.
public final class ProjectionWorker: Sendable {
    let pool: ConnectionPool
    /// Opens the LISTEN session that wakes it on appends.
    let connections: Connections
    public let projector: Projector
    public let batchSize: Int
    /// Projections whose pass may take more events than `batchSize` (`Store` says why).
    let passLimits: [ProjectionName: Int]
    public let projections: [ProjectionName]
    /// The registered projections (`Projections.registered`), each applied through its `apply`.
    let registered: [any Projection]
    /// Outbox items of the facts the catch-up derives.
    let outbox: OutboxDerivation
    private let stopped = Atomic<Bool>(false)
    /// Where `run` waits on its LISTEN session (a blocking poll on the socket).
    private let waiter = DedicatedThread(name: "ledger.catch-up.wait")

    init(pool: ConnectionPool, connections: Connections? = nil, projector: Projector, batchSize: Int = 1000,
         passLimits: [ProjectionName: Int] = [:], projections: [ProjectionName] = ProjectionName.allCases,
         outbox: OutboxDerivation = OutboxDerivation(consumers: OutboxConsumer.registered), registered: [any Projection]? = nil) {
        self.passLimits = passLimits
        self.outbox = outbox
        self.registered = registered ?? Projections.registered(projector: projector)
        precondition(batchSize > 0, "batchSize must be positive")
        self.pool = pool
        self.connections = connections ?? Connections(conninfo: pool.conninfo)
        self.projector = projector
        self.batchSize = batchSize
        self.projections = projections
    }

    /// One pass over the facts (up to `batchSize` events the append path did not derive), then
    /// over every projection (the projections never read past the facts).
    public func runOnce() async throws(ProjectionError) -> [ProjectionPass] {
        var passes: [ProjectionPass] = []
        let facts = CatchUp.Lane.facts(outbox: outbox)
        do {
            let outcome = try await pool.withConnection { connection in try CatchUp.pass(facts, batchSize: self.batchSize, on: connection) }
            switch outcome {
            case .advanced, .failed: passes.append(ProjectionPass(projection: nil, outcome: outcome))
            case .idle, .busy: break
            }
        } catch {
            throw ProjectionError(error)
        }
        for projection in projections {
            do {
                guard let owner = registered.first(where: { $0.names.contains(projection) }) else { throw ProjectionError.unknownProjection(projection.rawValue) }
                let lane = CatchUp.Lane.projection(projection, of: owner)
                let limit = passLimits[projection] ?? batchSize
                let outcome = try await pool.withConnection { connection in try CatchUp.pass(lane, batchSize: limit, on: connection) }
                passes.append(ProjectionPass(projection: projection, outcome: outcome))
            } catch {
                throw ProjectionError(error)
            }
        }
        return passes
    }

    /// Passes until no lane advances any more (each stops when idle, busy or failed).
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
            if listener == nil { listener = try? connections.listener(channels: ["ledger_events"]) }
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
                let healthy = (try? await waiter.run { _ = try current.wait(timeout: pollInterval) }) != nil
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
}

/// The runner's catch-up, once for every checkpointed lane: the facts derivation and each
/// projection. The live side of the same checkpoints is `advanceLive`, used by the append for the
/// facts and by `LiveProjectionHook` for every live projection.
enum CatchUp {
    /// One checkpoint row the runner advances over committed positions.
    struct Lane: Sendable {
        /// Its row in `projection_checkpoints`.
        let checkpoint: String
        /// Nil for the facts.
        let projection: ProjectionName?
        /// How far it may advance, as SQL without parameters: the facts checkpoint for a
        /// projection (it never folds an event whose facts are not derived), the event head for
        /// the facts.
        let bound: String
        /// Before the peek (the facts' row of a new schema version may not exist yet).
        let prepare: @Sendable (Connection) throws -> Void
        let apply: @Sendable (ClosedRange<Int64>, Connection) throws -> Void

        static func projection(_ name: ProjectionName, of owner: any Projection) -> Lane {
            let pass = PassProjection(owner)
            return Lane(checkpoint: name.rawValue, projection: name,
                        bound: "coalesce((SELECT position FROM projection_checkpoints WHERE projection = '\(FactStore.checkpoint)'), 0)",
                        prepare: { _ in pass.begin() },
                        apply: { range, connection in try pass.current.apply(range, to: [name], next: false, on: connection) })
        }

        /// The projection a lane's pass applies with (`Projection.forPass`), taken anew by each
        /// pass's `prepare`.
        final class PassProjection: Sendable {
            private let owner: any Projection
            private let pass: Mutex<(any Projection)?> = Mutex(nil)
            init(_ owner: any Projection) { self.owner = owner }
            func begin() { pass.withLock { $0 = owner.forPass() } }
            var current: any Projection { pass.withLock { $0 } ?? owner }
        }

        /// The facts of this build's schema version: derived from the stored events with the
        /// append's decoder, with the outbox items they cause (as the append would have written
        /// them). Deriving runs through the same pass as the projections, so a failing event stops
        /// the facts at that event with the error recorded (the event is retried, never skipped),
        /// and the events before it in the batch keep their facts.
        static func facts(outbox: OutboxDerivation) -> Lane {
            Lane(checkpoint: FactStore.checkpoint, projection: nil, bound: "(SELECT position FROM event_head)",
                 prepare: FactStore.ensureCheckpoint(on:),
                 apply: { range, connection in try FactStore.derive(range, outbox: outbox, on: connection) })
        }

        func gap(checkpoint at: Int64, found: Int64) -> ProjectionError {
            projection.map { .gap(projection: $0, checkpoint: at, found: found) }
                ?? .factsGap(version: FactStore.version, checkpoint: at, found: found)
        }

        func failure(at position: Int64, _ error: any Error) -> ProjectionError {
            projection.map { .eventFailed(projection: $0, position: position, message: String(describing: error)) }
                ?? .factsFailed(version: FactStore.version, position: position, message: String(describing: error))
        }
    }

    /// One pass of `lane` over at most `batchSize` events.
    static func pass(_ lane: Lane, batchSize: Int, on connection: Connection) throws -> ProjectionPass.Outcome {
        try lane.prepare(connection)
        // Look before locking: the live hook keeps a running projection at the head, and every
        // append's NOTIFY wakes this worker. Taking the checkpoint row FOR UPDATE just to find
        // nothing to do made each append batch's hook wait for this transaction (measured: 5
        // events per batch and 1.2k notifications/s instead of full batches).
        // Prepared, as the two below: every append wakes every lane, and planning these took
        // longer than running them.
        let peek = try connection.queryPrepared(
            "SELECT c.position, \(lane.bound) AS head FROM projection_checkpoints c WHERE c.projection = $1",
            [.text(lane.checkpoint)], name: "checkpoint behind its bound?")
        guard let peeked = peek.first else { return .idle }
        let bound = try peeked.decode(Int64.self, "head")
        if try peeked.decode(Int64.self, "position") >= bound { return .idle }
        return try connection.transaction { connection -> ProjectionPass.Outcome in
            try connection.asProjector()
            let locked = try connection.queryPrepared(
                "SELECT position FROM projection_checkpoints WHERE projection = $1 FOR UPDATE SKIP LOCKED",
                [.text(lane.checkpoint)], name: "lock checkpoint")
            guard let row = locked.first else { return .busy }
            let checkpoint = try row.decode(Int64.self, "position")
            let events = try connection.queryPrepared(
                "SELECT position FROM events WHERE position > $1 AND position <= $3 ORDER BY position LIMIT $2",
                [.int64(checkpoint), .int64(Int64(batchSize)), .int64(bound)], name: "events after checkpoint")
            let batch = try events.rows.map { try $0.decode(Int64.self, "position") }
            guard let first = batch.first, let last = batch.last else { return .idle }
            for (offset, position) in batch.enumerated() where position != checkpoint + 1 + Int64(offset) {
                let error = lane.gap(checkpoint: checkpoint + Int64(offset), found: position)
                try record(lane.checkpoint, position: checkpoint + Int64(offset), failure: error, failedAt: position, on: connection)
                return .failed(error)
            }
            do {
                try connection.savepoint { connection in try lane.apply(first...last, connection) }
                try record(lane.checkpoint, position: last, failure: nil, failedAt: nil, on: connection)
                return .advanced(from: first, to: last)
            } catch {
                if connection.isBroken { throw error }
            }
            // Something in the batch fails: apply event by event to stop right before it.
            var applied = checkpoint
            for position in batch {
                do {
                    try connection.savepoint { connection in try lane.apply(position...position, connection) }
                    applied = position
                } catch {
                    if connection.isBroken { throw error }
                    let failure = lane.failure(at: position, error)
                    try record(lane.checkpoint, position: applied, failure: failure, failedAt: position, on: connection)
                    return .failed(failure)
                }
            }
            // The batch failed as a whole but no single event did (e.g. a transient conflict).
            try record(lane.checkpoint, position: applied, failure: nil, failedAt: nil, on: connection)
            return .advanced(from: first, to: applied)
        }
    }

    /// Passes of `lane` until it is at its bound (or busy: another process has it); throws the
    /// failure a pass stopped at. The rebuild and `ledger rederive` derive the facts this way.
    static func untilIdle(_ lane: Lane, batchSize: Int, on connection: Connection, progress: (ClosedRange<Int64>) -> Void = { _ in }) throws {
        while true {
            switch try pass(lane, batchSize: batchSize, on: connection) {
            case .advanced(let from, let to): progress(from...to)
            case .failed(let error): throw error
            case .idle, .busy: return
            }
        }
    }

    /// Advances the checkpoints of `names` that sit exactly right before `batch` and are running,
    /// to the batch's last position, in the append transaction; returns those it advanced. The
    /// others are behind (or stopped): the catch-up owns their gap and applies these events in
    /// order, so the caller must not apply the batch to them. Locks the rows: a worker holding one
    /// makes this wait for its commit, and then the WHERE is evaluated again on the row it committed.
    static func advanceLive(_ names: [String], over batch: ClosedRange<Int64>, on connection: Connection) throws -> Set<String> {
        let advanced = try connection.query(
            """
            UPDATE projection_checkpoints SET position = $2, updated_at = now()
            WHERE projection = ANY($3) AND position = $1 AND status = 'running'
            RETURNING projection
            """,
            [.int64(batch.lowerBound - 1), .int64(batch.upperBound), .array(names.map { .text($0) }, of: .text)],
            name: "advance live checkpoints")
        return Set(try advanced.rows.map { try $0.decode(String.self, "projection") })
    }

    static func record(_ checkpoint: String, position: Int64, failure: ProjectionError?, failedAt: Int64?, on connection: Connection) throws {
        try connection.query(
            """
            UPDATE projection_checkpoints
            SET position = $2, status = $3, last_error = $4, failed_position = $5, updated_at = now()
            WHERE projection = $1
            """,
            [.text(checkpoint), .int64(position), .text(failure == nil ? "running" : "failed"),
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

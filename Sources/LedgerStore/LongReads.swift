import Foundation
internal import Postgres
import Synchronization

/// The limits of long reads (see `LongReads`).
public struct LongReadSettings: Sendable, Equatable {
    /// Long reads one instance runs at once; the next one is refused (`LongReadError.busy`) rather
    /// than queued, so a flood of exports holds at most this many connections and threads.
    public var concurrent: Int
    /// The statement timeout of a long read's session: a read that takes longer is ended by the
    /// server (`LongReadError.timedOut`), whoever asked for it.
    public var statementTimeout: Duration
    /// What a refusal tells the caller to wait before asking again.
    public var retryAfterSeconds: Int

    public init(concurrent: Int = 4, statementTimeout: Duration = .seconds(600), retryAfterSeconds: Int = 5) {
        self.concurrent = concurrent
        self.statementTimeout = statementTimeout
        self.retryAfterSeconds = retryAfterSeconds
    }
}

/// Why a long read did not answer.
public enum LongReadError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `limit` long reads are running on this instance; ask again after `retryAfterSeconds`.
    case busy(limit: Int, retryAfterSeconds: Int)
    /// The read ran longer than the statement timeout and the server ended it.
    case timedOut(minutes: Int)
    /// Its caller went away or its deadline passed: the read was cancelled in PostgreSQL.
    case cancelled

    public var description: String {
        switch self {
        case .busy(let limit, let seconds):
            "\(limit) long reads (exports, reads at an earlier position) are running on this instance, its limit; retry in \(seconds) s, or narrow the read (a page with limit=, no asOfPosition)"
        case .timedOut(let minutes):
            "the read ran longer than the long-read statement timeout (\(minutes) min) and was stopped; narrow it (a filter, a page with limit=) or raise LEDGER_LONG_READ_TIMEOUT_MINUTES"
        case .cancelled:
            "the read was cancelled because its caller went away or its deadline passed"
        }
    }
}

/// Long reads: whole exports and folds of the facts at an earlier position, which may read the
/// whole log and legitimately take minutes. They must never cost the webhooks anything, so each one:
/// - is admitted only while fewer than `concurrent` run on this instance (else `.busy` at once:
///   no queue that could grow, no connection taken);
/// - runs on a connection of its own (never the pool that reads and health checks share, never
///   the writers'), named `ledger long read` in `pg_stat_activity`, with the statement timeout of
///   `settings` instead of the service role's short one;
/// - is cancelled in PostgreSQL (`PQcancel`) as soon as the task awaiting it is cancelled — the
///   HTTP server cancels a handler whose deadline fired or whose client hung up — and its
///   connection closed, so the backend goes away with it.
final class LongReads: Sendable {
    let connections: Connections
    let settings: LongReadSettings
    static let applicationName = "ledger long read"
    private let state = Mutex(Counters())

    struct Counters: Sendable, Equatable {
        var running = 0
        var admitted = 0
        var refused = 0
        var cancelled = 0
        var timedOut = 0
    }

    init(connections: Connections, settings: LongReadSettings) {
        precondition(settings.concurrent > 0, "at least one long read")
        self.connections = connections
        self.settings = settings
    }

    var statistics: LongReadStatistics {
        let c = state.withLock { $0 }
        return LongReadStatistics(limit: settings.concurrent, running: c.running, admitted: c.admitted, refused: c.refused,
                                  cancelled: c.cancelled, timedOut: c.timedOut)
    }

    /// Runs `body` on a long-read connection (see the type's rules). Errors of `body` come back as
    /// they are, except the server's cancel (57014), which becomes `.cancelled` or `.timedOut`.
    func run<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let admitted = state.withLock { c -> Bool in
            guard c.running < settings.concurrent else { c.refused += 1; return false }
            c.running += 1
            c.admitted += 1
            return true
        }
        guard admitted else { throw LongReadError.busy(limit: settings.concurrent, retryAfterSeconds: settings.retryAfterSeconds) }
        defer { state.withLock { $0.running -= 1 } }
        let slot = CancelSlot()
        do {
            return try await withTaskCancellationHandler {
                try await BlockingWork.run { [settings, connections] in
                    let connection = try connections.open()
                    guard slot.install(try connection.makeCanceller()) else { throw LongReadError.cancelled }
                    let millis = settings.statementTimeout.components.seconds * 1000
                        + settings.statementTimeout.components.attoseconds / 1_000_000_000_000_000
                    try connection.query("SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $1, false), set_config('application_name', $2, false)",
                                         [.text(String(millis)), .text(Self.applicationName)], name: "long read limits")
                    return try body(connection)
                }
            } onCancel: {
                slot.cancel()
            }
        } catch {
            let mapped = classify(error, cancelledByUs: slot.isCancelled)
            if case .cancelled? = mapped as? LongReadError { state.withLock { $0.cancelled += 1 } }
            if case .timedOut? = mapped as? LongReadError { state.withLock { $0.timedOut += 1 } }
            throw mapped
        }
    }

    private func classify(_ error: any Error, cancelledByUs: Bool) -> any Error {
        if error is LongReadError { return error }
        if cancelledByUs { return LongReadError.cancelled }
        if let p = error as? PostgresError, p.kind == .server, p.sqlState == "57014" {
            return LongReadError.timedOut(minutes: max(1, Int(settings.statementTimeout.components.seconds / 60)))
        }
        return error
    }
}

/// The counters of `LongReads`, for `/metrics`.
public struct LongReadStatistics: Sendable, Equatable {
    public var limit: Int
    public var running: Int
    public var admitted: Int
    public var refused: Int
    public var cancelled: Int
    public var timedOut: Int
}

/// Where the cancellation handler finds the canceller of a connection that may not be open yet.
private final class CancelSlot: Sendable {
    private enum State { case waiting, installed(StatementCanceller), cancelled }
    private let state = Mutex<State>(.waiting)

    var isCancelled: Bool {
        state.withLock { s in
            switch s {
            case .cancelled: true
            case .installed(let c): c.isCancelled
            case .waiting: false
            }
        }
    }

    /// False when the read was cancelled before its connection opened.
    func install(_ canceller: StatementCanceller) -> Bool {
        state.withLock { s in
            if case .cancelled = s { return false }
            s = .installed(canceller)
            return true
        }
    }

    func cancel() {
        let installed = state.withLock { s -> StatementCanceller? in
            if case .installed(let c) = s { return c }
            s = .cancelled
            return nil
        }
        installed?.cancel()
    }
}

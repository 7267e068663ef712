internal import Postgres

/// Why the store could not do what was asked, phrased for the operator or the caller that must
/// react: `.unavailable` means "retry later" (HTTP 503), `.rejected` and `.invalidEvent` mean
/// "this input will never be accepted as is" (HTTP 4xx/500 and a log line).
public enum StoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// PostgreSQL cannot be reached, the connection broke, or no connection was free in time.
    /// Nothing is half-stored; an append may or may not have committed, and retrying it is safe
    /// because appends are idempotent.
    case unavailable(String)
    /// PostgreSQL refused the event or statement (constraint, invalid JSON, permission).
    case rejected(sqlState: String?, message: String)
    /// The event is malformed before it reaches the database.
    case invalidEvent(String)
    /// A stored row does not decode into the envelope: the schema and this build disagree.
    case corrupt(String)

    public var description: String {
        switch self {
        case .unavailable(let why):
            return "the event store is unavailable: \(why)"
        case .rejected(let state, let why):
            return "the database refused the event\(state.map { " (SQLSTATE \($0))" } ?? ""): \(why)"
        case .invalidEvent(let why):
            return "invalid event: \(why)"
        case .corrupt(let why):
            return "a stored event cannot be read: \(why). Check that every migration is applied and that this build matches the schema."
        }
    }

    public var isUnavailable: Bool {
        if case .unavailable = self { return true }
        return false
    }

    init(_ error: any Error) {
        if let store = error as? StoreError {
            self = store
        } else if let postgres = error as? PostgresError {
            if postgres.isUnavailable {
                self = .unavailable(postgres.description)
            } else {
                switch postgres.kind {
                case .decoding: self = .corrupt(postgres.description)
                case .invalidArgument: self = .invalidEvent(postgres.description)
                default: self = .rejected(sqlState: postgres.sqlState, message: postgres.description)
                }
            }
        } else {
            self = .rejected(sqlState: nil, message: String(describing: error))
        }
    }
}

extension Connection {
    /// Switches this transaction to `ledger_projector`, the owner of the projections and the only
    /// role that may write facts (Migrations/0016): the service role inherits none of that, so
    /// every write of facts and projections states it, and the rights end at COMMIT or ROLLBACK.
    func asProjector() throws {
        try query("SET LOCAL ROLE ledger_projector", name: "projector role")
    }
}

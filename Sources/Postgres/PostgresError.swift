/// Every failure of the Postgres module: what went wrong, the server's SQLSTATE when there is one,
/// and the statement that failed, so a log line is enough to find the cause.
public struct PostgresError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// No connection could be opened (server down, wrong host/port/database, auth refused).
        case unavailable
        /// An open connection broke while a statement ran; whether it took effect is unknown.
        case connectionLost
        /// The server refused the statement; `sqlState` says why.
        case server
        /// A row value could not be turned into the requested Swift type.
        case decoding
        /// No pooled connection became free within the acquire timeout.
        case poolTimeout
        /// The pool was closed.
        case poolClosed
        /// The caller passed something libpq or the protocol cannot carry.
        case invalidArgument
        /// COPY did not go the way the protocol requires.
        case copy
        /// This process cancelled the work (`StatementCanceller`): not sent, or stopped in the server.
        case cancelled
    }

    public var kind: Kind
    /// Five-character SQLSTATE (e.g. `23505` unique violation) when the server sent one.
    public var sqlState: String?
    public var message: String
    public var detail: String?
    public var hint: String?
    /// The statement's name, or the start of its SQL text when it has none.
    public var statement: String?
    /// The column that failed to decode.
    public var column: String?

    public init(
        _ kind: Kind, _ message: String, sqlState: String? = nil, detail: String? = nil,
        hint: String? = nil, statement: String? = nil, column: String? = nil
    ) {
        self.kind = kind
        self.message = message
        self.sqlState = sqlState
        self.detail = detail
        self.hint = hint
        self.statement = statement
        self.column = column
    }

    /// True when the database could not be reached, the connection broke, or the statement lost
    /// a race it may win on a retry: the caller should answer "try again later" (HTTP 503), not
    /// "your input is wrong" (4xx) or "the ledger is broken" (500).
    public var isUnavailable: Bool {
        switch kind {
        case .unavailable, .connectionLost, .poolTimeout, .poolClosed: return true
        case .server: return sqlState.map(Self.isTransientState) ?? false
        default: return false
        }
    }

    /// Class 08 (connection exception), 57P01–57P03 (shutdown, crash, not yet accepting) and
    /// 53300 (too many connections) mean "the server is not there for you right now"; 40001
    /// (serialization failure), 40P01 (deadlock), 55P03 (lock not available) and 57014 (cancelled,
    /// e.g. by `statement_timeout`) mean "this attempt lost; the same request may succeed".
    static func isTransientState(_ state: String) -> Bool {
        isConnectionState(state) || ["40001", "40P01", "55P03", "57014"].contains(state)
    }

    /// The states that mean the connection itself is gone or refused (the session is unusable).
    static func isConnectionState(_ state: String) -> Bool {
        state.hasPrefix("08") || state == "57P01" || state == "57P02" || state == "57P03" || state == "53300"
    }

    public var description: String {
        var text: String
        switch kind {
        case .unavailable:
            text = "PostgreSQL is unavailable: \(message). Check that the server is running and that the connection string (host, port, dbname, user) is right; retry later."
        case .connectionLost:
            text = "the PostgreSQL connection was lost: \(message). The statement may or may not have taken effect; retry it if it is idempotent."
        case .server:
            text = "PostgreSQL refused the statement: \(message)"
        case .decoding:
            text = "cannot decode a PostgreSQL value: \(message)"
        case .poolTimeout:
            text = "no database connection became free in time: \(message). Raise the pool size or acquire timeout, or find what holds connections."
        case .poolClosed:
            text = "the connection pool is closed: \(message)"
        case .invalidArgument:
            text = "invalid argument: \(message)"
        case .copy:
            text = "COPY failed: \(message)"
        case .cancelled:
            text = "cancelled: \(message)"
        }
        if let sqlState { text += " [SQLSTATE \(sqlState)]" }
        if let column { text += " [column \(column)]" }
        if let statement { text += " [statement \(statement)]" }
        if let detail { text += " DETAIL: \(detail)" }
        if let hint { text += " HINT: \(hint)" }
        return text
    }
}

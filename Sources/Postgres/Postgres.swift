/// Postgres owns every call into libpq: connections, a bounded pool, parameterised statements
/// with binary rows, transactions and savepoints, LISTEN/NOTIFY and COPY. No libpq type appears in
/// its public API, and it knows nothing about the ledger's schema (that SQL lives in LedgerStore).
public enum Postgres {
    /// Opens one connection; prefer a `ConnectionPool` for service code.
    public static func connect(_ conninfo: String) throws(PostgresError) -> Connection {
        try Connection(conninfo: conninfo)
    }
}

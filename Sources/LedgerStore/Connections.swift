import Foundation
internal import Postgres

/// The one place the store opens a connection of its own, outside its pool: the group-commit
/// writers' sessions, the catch-up's LISTEN session, and long work (rebuilds, fact derivation,
/// exports, job locks, migrations). `Store` owns it and hands it to each part that needs such a
/// connection, so nothing else in the kernel holds a conninfo or calls `Connection(conninfo:)`.
struct Connections: Sendable {
    let conninfo: String

    /// A session with the role's own settings (the service role's statement and lock timeouts
    /// bound request work: Migrations/0005).
    func open() throws(PostgresError) -> Connection {
        try Connection(conninfo: conninfo)
    }

    /// A session for work that legitimately runs long (rebuild, rederive, exports): the service
    /// role's default `statement_timeout` / `lock_timeout` are lifted for this session only.
    func unbounded() throws -> Connection {
        let connection = try open()
        try connection.query("SET statement_timeout = 0", name: "unbounded statements")
        try connection.query("SET lock_timeout = 0", name: "unbounded locks")
        return connection
    }

    /// A session that LISTENs on `channels` (the catch-up's wake-up on appends).
    func listener(channels: [String]) throws(PostgresError) -> NotificationListener {
        try NotificationListener(conninfo: conninfo, channels: channels)
    }
}

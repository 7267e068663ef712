import Crypto
import Foundation
internal import Postgres

/// One SQL file from `Migrations/`.
public struct Migration: Sendable, Equatable {
    public let name: String
    public let sql: String
    /// Lower-case hex SHA-256 of the file's bytes.
    public let sha256: String
}

/// Which migrations a database has, for `ledger migrate` and `/readyz`.
public struct MigrationStatus: Sendable, Equatable {
    public var applied: [String]
    public var pending: [String]
    /// Applied files whose content has since changed (the migrator refuses to run).
    public var changed: [String]
    /// Recorded in the database but not in this build's directory (a newer build migrated it).
    public var unknown: [String]

    /// Ready to serve: nothing pending and nothing edited after it landed.
    public var isCurrent: Bool { pending.isEmpty && changed.isEmpty }
}

public enum MigrationError: Error, Equatable, Sendable, CustomStringConvertible {
    case directoryNotFound(searched: [String])
    case unreadable(file: String, reason: String)
    case changedAfterApply(file: String, recorded: String, current: String)
    /// The file's SQL was refused and rolled back; `reason` is PostgreSQL's message with its SQLSTATE.
    case failed(file: String, reason: String)
    /// The database could not be reached or refused the bookkeeping (`unavailable`: retry later).
    case database(String, unavailable: Bool)

    public var description: String {
        switch self {
        case .directoryNotFound(let searched):
            return "no Migrations directory with .sql files found; set LEDGER_MIGRATIONS_DIR. Looked in: \(searched.joined(separator: ", "))"
        case .unreadable(let file, let reason):
            return "cannot read migration \(file): \(reason)"
        case .changedAfterApply(let file, let recorded, let current):
            return "migration \(file) was edited after it was applied (recorded sha256 \(recorded), file now \(current)); landed migrations must never change — restore the file and put the change in a new migration"
        case .failed(let file, let reason):
            return "migration \(file) failed and was rolled back: \(reason)"
        case .database(let reason, _):
            return "cannot migrate: \(reason)"
        }
    }
}

/// Applies `Migrations/*.sql` in lexical order, each exactly once and in its own transaction,
/// recording name and SHA-256 in `schema_migrations`. A session advisory lock makes concurrent
/// migrators (several instances starting at once) take turns, so each file runs once. Migration
/// files must not contain transaction control or `CREATE INDEX CONCURRENTLY`.
public struct Migrator: Sendable {
    let connections: Connections
    public let directory: URL

    /// Arbitrary constant ('LEDGMIGR'); every ledger migrator uses the same one.
    static let advisoryLockKey: Int64 = 0x4C45_4447_4D49_4752

    init(connections: Connections, directory: URL) {
        self.connections = connections
        self.directory = directory
    }

    /// `LEDGER_MIGRATIONS_DIR` if set; else the first `Migrations/` holding `.sql` files found
    /// walking up from the current directory, then from the executable's directory.
    public static func locateDirectory(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        currentDirectory: String = FileManager.default.currentDirectoryPath,
        executable: String? = Bundle.main.executablePath
    ) throws(MigrationError) -> URL {
        if let configured = environment["LEDGER_MIGRATIONS_DIR"], !configured.isEmpty {
            let url = URL(fileURLWithPath: configured, isDirectory: true)
            guard holdsMigrations(url) else { throw .directoryNotFound(searched: ["LEDGER_MIGRATIONS_DIR=\(configured)"]) }
            return url
        }
        var searched: [String] = []
        var starts = [URL(fileURLWithPath: currentDirectory, isDirectory: true)]
        if let executable {
            starts.append(URL(fileURLWithPath: executable).resolvingSymlinksInPath().deletingLastPathComponent())
        }
        for start in starts {
            var directory = start.standardizedFileURL
            while true {
                let candidate = directory.appendingPathComponent("Migrations", isDirectory: true)
                searched.append(candidate.path)
                if holdsMigrations(candidate) { return candidate }
                let parent = directory.deletingLastPathComponent()
                if parent.path == directory.path { break }
                directory = parent
            }
        }
        throw .directoryNotFound(searched: searched)
    }

    static func holdsMigrations(_ url: URL) -> Bool {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
        return files.contains { $0.hasSuffix(".sql") }
    }

    /// The migration files, in the order they apply.
    public func loadMigrations() throws(MigrationError) -> [Migration] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw .unreadable(file: directory.path, reason: error.localizedDescription)
        }
        // Byte-wise order so "0002_x" < "0010_y" on every platform, independent of locale.
        let sqlFiles = names.filter { $0.hasSuffix(".sql") }.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        var migrations: [Migration] = []
        for name in sqlFiles {
            let url = directory.appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: url.path) else {
                throw .unreadable(file: name, reason: "the file cannot be read")
            }
            guard let sql = String(data: data, encoding: .utf8) else {
                throw .unreadable(file: name, reason: "the file is not UTF-8")
            }
            migrations.append(Migration(name: name, sql: sql, sha256: Hex.encode(Digest.sha256(data))))
        }
        return migrations
    }

    /// Applies every pending migration; returns the names applied by this call.
    @discardableResult
    public func migrate() throws(MigrationError) -> [String] {
        let migrations = try loadMigrations()
        let connection: Connection
        do { connection = try connections.open() } catch { throw .database(error.description, unavailable: error.isUnavailable) }
        do {
            try connection.query("SELECT pg_advisory_lock($1)", [.int64(Self.advisoryLockKey)], name: "migration lock")
            try connection.query("""
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    name       text        PRIMARY KEY,
                    sha256     text        NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """, name: "create schema_migrations")
        } catch {
            throw .database(error.description, unavailable: error.isUnavailable)
        }
        // The lock is session-level; closing the connection (on return) releases it even if an
        // unlock fails.
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", [.int64(Self.advisoryLockKey)], name: "migration unlock") }

        let recorded = try Self.recorded(connection)
        try Self.refuseChanged(migrations, recorded: recorded)
        var applied: [String] = []
        for migration in migrations where recorded[migration.name] == nil {
            do {
                try connection.transaction { connection in
                    try connection.execute(script: migration.sql, name: migration.name)
                    try connection.query(
                        "INSERT INTO schema_migrations (name, sha256) VALUES ($1, $2)",
                        [.text(migration.name), .text(migration.sha256)], name: "record migration")
                }
            } catch let error as PostgresError {
                throw .failed(file: migration.name, reason: error.description)
            } catch {
                throw .failed(file: migration.name, reason: String(describing: error))
            }
            applied.append(migration.name)
        }
        return applied
    }

    /// What is applied and what is pending, on a connection of the caller's (the service role
    /// can read `schema_migrations`).
    func status(using connection: Connection) throws(MigrationError) -> MigrationStatus {
        try status(using: connection, migrations: loadMigrations())
    }

    /// Against migrations loaded once by the caller (readiness checks must not re-read and
    /// re-hash every file per request).
    func status(using connection: Connection, migrations: [Migration]) throws(MigrationError) -> MigrationStatus {
        let exists: Bool
        do {
            exists = try connection.query("SELECT to_regclass('public.schema_migrations') IS NOT NULL AS present", name: "migrations table")
                .first?.decode(Bool.self, "present") ?? false
        } catch { throw .database(error.description, unavailable: error.isUnavailable) }
        let recorded = exists ? try Self.recorded(connection) : [:]
        let known = Set(migrations.map(\.name))
        return MigrationStatus(
            applied: migrations.filter { recorded[$0.name] != nil }.map(\.name),
            pending: migrations.filter { recorded[$0.name] == nil }.map(\.name),
            changed: migrations.filter { migration in recorded[migration.name].map { $0 != migration.sha256 } ?? false }.map(\.name),
            unknown: recorded.keys.filter { !known.contains($0) }.sorted())
    }

    public func status() throws(MigrationError) -> MigrationStatus {
        let connection: Connection
        do { connection = try connections.open() } catch { throw .database(error.description, unavailable: error.isUnavailable) }
        return try status(using: connection)
    }

    func status(pool: ConnectionPool) async throws(MigrationError) -> MigrationStatus {
        try await status(pool: pool, migrations: loadMigrations())
    }

    func status(pool: ConnectionPool, migrations: [Migration]) async throws(MigrationError) -> MigrationStatus {
        do {
            return try await pool.withConnection { connection in try self.status(using: connection, migrations: migrations) }
        } catch let error as MigrationError {
            throw error
        } catch let error as PostgresError {
            throw .database(error.description, unavailable: error.isUnavailable)
        } catch {
            throw .database(String(describing: error), unavailable: false)
        }
    }

    static func recorded(_ connection: Connection) throws(MigrationError) -> [String: String] {
        do {
            var out: [String: String] = [:]
            for row in try connection.query("SELECT name, sha256 FROM schema_migrations", name: "applied migrations").rows {
                out[try row.decode(String.self, "name")] = try row.decode(String.self, "sha256")
            }
            return out
        } catch {
            throw .database(error.description, unavailable: error.isUnavailable)
        }
    }

    static func refuseChanged(_ migrations: [Migration], recorded: [String: String]) throws(MigrationError) {
        for migration in migrations {
            if let sha = recorded[migration.name], sha != migration.sha256 {
                throw .changedAfterApply(file: migration.name, recorded: sha, current: migration.sha256)
            }
        }
    }
}

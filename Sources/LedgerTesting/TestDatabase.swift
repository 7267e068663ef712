import Foundation
import LedgerCore
import LedgerStore
import Postgres
#if canImport(Glibc)
import Glibc
#endif

public enum TestDatabaseError: Error, CustomStringConvertible {
    case missingEnvironment(String)

    public var description: String {
        switch self {
        case .missingEnvironment(let variable):
            return "\(variable) is not set: run the tests with `make test`, or `scripts/db.sh start && eval \"$(scripts/db.sh env)\"` first"
        }
    }
}

/// A fresh, uniquely named, migrated database on the project-local PostgreSQL, so every test (or
/// benchmark) starts from an empty ledger and never sees another's rows. Call `drop()` when done.
public struct TestDatabase: Sendable {
    public let name: String
    /// Superuser on this database (for setup, and for proving what even a superuser cannot do).
    public let adminConninfo: String
    /// The restricted `ledger_service` role on this database: what the service runs as.
    public let serviceConninfo: String
    /// Superuser on the maintenance database, from which this one was created.
    public let serverConninfo: String

    /// - Parameter serverConninfo: a superuser connection; defaults to `LEDGER_TEST_DATABASE_URL`.
    public static func create(migrate: Bool = true, serverConninfo: String? = nil, prefix: String = "ledger_test") throws -> TestDatabase {
        let server: String
        if let serverConninfo {
            server = serverConninfo
        } else if let fromEnvironment = ProcessInfo.processInfo.environment["LEDGER_TEST_DATABASE_URL"], !fromEnvironment.isEmpty {
            server = fromEnvironment
        } else {
            throw TestDatabaseError.missingEnvironment("LEDGER_TEST_DATABASE_URL")
        }
        let suffix = UInt64.random(in: 0...UInt64.max) & 0xffff_ffff_ffff
        let name = "\(prefix)_\(ProcessInfo.processInfo.processIdentifier)_\(String(suffix, radix: 16))"
        let info = try ConnectionInfo(parsing: server)
        let connection = try connect(server)
        dropAbandoned(prefix: prefix, on: connection)
        try connection.query("CREATE DATABASE \(try connection.quoteIdentifier(name))", name: "create test database")
        let database = TestDatabase(
            name: name,
            adminConninfo: info.with("dbname", name).conninfo,
            serviceConninfo: info.with("dbname", name).with("user", "ledger_service").conninfo,
            serverConninfo: server)
        if migrate {
            do {
                let owner = database.store(as: .admin, poolSize: 1)
                defer { owner.close() }
                try owner.migrator(directory: try Migrator.locateDirectory()).migrate()
            } catch {
                try? database.drop()
                throw error
            }
        }
        return database
    }

    /// Test processes that crash or are killed leave their databases behind; the name carries the
    /// creating pid, so drop those whose process is gone (another live run's are left alone).
    static func dropAbandoned(prefix: String, on connection: Connection) {
        guard let rows = try? connection.query(
            "SELECT datname FROM pg_database WHERE starts_with(datname, $1)", [.text(prefix + "_")], name: "list test databases") else { return }
        for row in rows.rows {
            guard let name = try? row.decode(String.self, "datname") else { continue }
            let parts = name.dropFirst(prefix.count + 1).split(separator: "_")
            guard parts.count == 2, let pid = Int32(parts[0]), pid != ProcessInfo.processInfo.processIdentifier else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH, let quoted = try? connection.quoteIdentifier(name) {
                _ = try? connection.query("DROP DATABASE IF EXISTS \(quoted) WITH (FORCE)", name: "drop abandoned test database")
            }
        }
    }

    /// This database on the streaming replica (`scripts/db.sh replica-start`, LEDGER_TEST_REPLICA_URL)
    /// as `user` (the restricted role by default); nil when no replica is configured. The database
    /// reaches the replica by replication, typically within milliseconds of its creation.
    public func replicaConninfo(user: String = "ledger_service") -> String? {
        guard let replica = ProcessInfo.processInfo.environment["LEDGER_TEST_REPLICA_URL"], !replica.isEmpty,
              let info = try? ConnectionInfo(parsing: replica) else { return nil }
        return info.with("dbname", name).with("user", user).conninfo
    }

    /// Waits until the replica has replayed this database's creation and migrations (its event
    /// head exists there); false after `timeout`.
    public func waitForReplica(timeout: Duration = .seconds(15)) -> Bool {
        guard let conninfo = replicaConninfo(user: "postgres") else { return false }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let c = try? connect(conninfo), (try? c.query("SELECT position FROM event_head")) != nil { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }

    /// Drops the database, disconnecting anything still connected to it.
    public func drop() throws {
        let connection = try Self.connect(serverConninfo)
        try connection.query("DROP DATABASE IF EXISTS \(try connection.quoteIdentifier(name)) WITH (FORCE)", name: "drop test database")
    }
}

/// The tests' ways into a test database: a `Store` (what the product uses, so a test exercises the
/// same pool, writers and factory), and, for what only a test does — set up, wreck a table, hold a
/// lock, prove what a role cannot do — raw SQL through the one connection helper here, instead of
/// a `Connection(conninfo:)` of its own in every test.
extension TestDatabase {
    public enum Role: Sendable {
        /// Superuser on this database.
        case admin
        /// The restricted role the service runs as.
        case service
    }

    public func conninfo(_ role: Role) -> String {
        switch role {
        case .admin: adminConninfo
        case .service: serviceConninfo
        }
    }

    /// A store on this database as `role` (the service role by default). Close it (`close()` or
    /// `shutdown()`) when done.
    public func store(
        as role: Role = .service, poolSize: Int = 4, acquireTimeout: Duration = .seconds(5), catalog: ProductCatalog = .productIds,
        clock: (@Sendable () -> EpochMillis)? = nil, liveProjections: Bool = true, configure: (inout Store.Configuration) -> Void = { _ in }
    ) -> Store {
        var configuration = Store.Configuration(
            databaseURL: conninfo(role), poolSize: poolSize, acquireTimeout: acquireTimeout, catalog: catalog,
            liveProjections: liveProjections)
        if let clock { configuration.clock = LedgerClock(clock) }
        configure(&configuration)
        return Store(configuration)
    }

    /// A connection of the test's own as `role` (superuser by default).
    public func connect(as role: Role = .admin) throws -> Connection { try Self.connect(conninfo(role)) }

    /// A connection to this database on the streaming replica as `user`; nil when none is configured.
    public func connectReplica(user: String = "postgres") throws -> Connection? {
        try replicaConninfo(user: user).map { try Self.connect($0) }
    }

    /// One statement as `role` (superuser by default).
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = [], as role: Role = .admin) throws -> QueryResult {
        try connect(as: role).query(sql, parameters, name: "test query")
    }

    /// Several statements as `role` (superuser by default).
    public func script(_ sql: String, as role: Role = .admin) throws {
        try connect(as: role).execute(script: sql, name: "test script")
    }

    /// A connection to `conninfo` for test tools that are handed a server rather than a
    /// `TestDatabase` (benchmarks' seeding, scale and ingest suites): the one place test support
    /// opens a libpq connection.
    public static func connect(_ conninfo: String) throws -> Connection { try Connection(conninfo: conninfo) }
    func connect(_ conninfo: String) throws -> Connection { try Self.connect(conninfo) }
}

/// Stops, starts and restarts the project-local server through `scripts/db.sh`, for tests that
/// prove the ledger survives a database restart.
public enum TestServer {
    public enum Command: String { case stop, start, restart }

    public static func run(_ command: Command) throws {
        guard let script = ProcessInfo.processInfo.environment["LEDGER_TEST_DB_SCRIPT"], !script.isEmpty else {
            throw TestDatabaseError.missingEnvironment("LEDGER_TEST_DB_SCRIPT")
        }
        // posix_spawn + waitpid rather than Foundation.Process: `start` leaves a daemonised
        // postmaster holding inherited descriptors, and Process.waitUntilExit then never returns.
        let shell = "exec '\(script.replacingOccurrences(of: "'", with: "'\\''"))' \(command.rawValue) </dev/null >/dev/null 2>&1"
        var pid: pid_t = 0
        let arguments = ["/bin/bash", "-c", shell]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let spawned = posix_spawn(&pid, "/bin/bash", nil, nil, &argv, environ)
        guard spawned == 0 else { throw TestServerError(command: command.rawValue, status: spawned) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exitCode = (status >> 8) & 0xff
        guard status & 0x7f == 0, exitCode == 0 else { throw TestServerError(command: command.rawValue, status: status) }
    }
}

public struct TestServerError: Error, CustomStringConvertible {
    public let command: String
    public let status: Int32
    public var description: String { "scripts/db.sh \(command) failed (wait status \(status)); see .pg/server.log" }
}

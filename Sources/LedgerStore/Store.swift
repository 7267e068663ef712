import Foundation
import LedgerCore
internal import Postgres

/// LedgerStore's one entry point for the service and the command line: it owns the connection
/// pool and hands out everything that touches the database — the event log (`events`), the
/// projection reads (`projections`, `refunds`), the catch-up worker, rebuilds, fact derivation,
/// migrations and health. Nothing of libpq or of the pool appears in its API.
public final class Store: Sendable {
    public struct Configuration: Sendable {
        /// libpq connection string or URL.
        public var databaseURL: String
        /// Connections in the pool shared by reads, the worker and health checks (each
        /// group-commit writer has a connection of its own besides).
        public var poolSize: Int
        /// How long a read waits for a pooled connection before answering "unavailable".
        public var acquireTimeout: Duration
        /// Product → entitlements for the projections.
        public var catalog: ProductCatalog
        /// The projections' evaluation time (tests fix it).
        public var clock: @Sendable () -> EpochMillis
        /// Fold live projections in the append transaction (the service does; a store used only to
        /// record, e.g. by the command line, need not).
        public var liveProjections: Bool
        /// Told when a live projection failed for a batch (its events were stored anyway).
        public var onProjectionFailure: (@Sendable (HookFailure) -> Void)?

        public init(
            databaseURL: String, poolSize: Int = 16, acquireTimeout: Duration = .seconds(5),
            catalog: ProductCatalog = .productIds, clock: @escaping @Sendable () -> EpochMillis = Projector.wallClock,
            liveProjections: Bool = true, onProjectionFailure: (@Sendable (HookFailure) -> Void)? = nil
        ) {
            self.databaseURL = databaseURL
            self.poolSize = poolSize
            self.acquireTimeout = acquireTimeout
            self.catalog = catalog
            self.clock = clock
            self.liveProjections = liveProjections
            self.onProjectionFailure = onProjectionFailure
        }
    }

    public let configuration: Configuration
    let pool: ConnectionPool
    public let projector: Projector
    /// Appends (group commit) and reads of the event log.
    public let events: EventStore
    /// Subscription states, entitlements, transactions and facts for time travel.
    public let projections: ProjectionQueries
    /// Refund cases' facts.
    public let refunds: RefundFactQueries
    /// Advances projections (and derives missing facts) from their checkpoints.
    public let worker: ProjectionWorker
    /// `ledger rederive`: facts of this build's schema version for every event.
    public let facts: FactDeriver
    /// The hash chain over the log (head, anchors, the walk `ledger verify` makes).
    public let chain: ChainStore
    /// The refund-case projection: pages, exports at a position, single cases.
    public let refundCases: RefundCaseQueries

    public init(_ configuration: Configuration) {
        self.configuration = configuration
        pool = ConnectionPool(conninfo: configuration.databaseURL, maxConnections: configuration.poolSize,
                              acquireTimeout: configuration.acquireTimeout)
        projector = Projector(catalog: configuration.catalog, clock: configuration.clock)
        events = EventStore(
            pool: pool, hooks: configuration.liveProjections ? [LiveProjectionHook(projector: projector), RefundCaseHook()] : [],
            onHookFailure: configuration.onProjectionFailure)
        projections = ProjectionQueries(pool: pool, catalog: configuration.catalog)
        refunds = RefundFactQueries(pool: pool)
        worker = ProjectionWorker(pool: pool, projector: projector)
        facts = FactDeriver(conninfo: configuration.databaseURL)
        chain = ChainStore(pool: pool)
        refundCases = RefundCaseQueries(pool: pool, conninfo: configuration.databaseURL)
    }

    /// A rebuild of the projections under this store's catalog (each run opens its own connections).
    public func rebuilder() -> Rebuilder {
        Rebuilder(conninfo: configuration.databaseURL, projector: projector)
    }

    /// Migrations from `directory` (run them as the database owner, not the service role).
    public func migrator(directory: URL) -> Migrator {
        Migrator(conninfo: configuration.databaseURL, directory: directory)
    }

    /// Every projection's (and the facts') checkpoint against the head, in name order.
    public func projectionStatuses() async throws(ProjectionError) -> [ProjectionStatus] {
        try await ProjectionStatusReader.statuses(pool)
    }

    /// What `/readyz` reports: the database answers, migrations are current, no projection stopped.
    public func health(migrationsDirectory: URL) async -> StoreHealth {
        var health = StoreHealth()
        do {
            let status = try await Migrator(conninfo: configuration.databaseURL, directory: migrationsDirectory).status(pool: pool)
            health.migrations = status
        } catch {
            if case .database(let reason, let unavailable) = error, unavailable {
                health.databaseReachable = false
                health.problem = "the database is not reachable: \(reason)"
            } else {
                health.problem = "\(error)"
            }
        }
        if health.databaseReachable, let statuses = try? await projectionStatuses() {
            health.projections = statuses
        }
        return health
    }

    /// Counters of the event log and the pool, for `/metrics`.
    public var statistics: EventStoreMetrics { events.metrics }

    /// Closes the pool (in-flight reads finish; appends already queued are answered).
    public func close() {
        pool.close()
    }
}

/// The store's side of readiness.
public struct StoreHealth: Sendable {
    public var databaseReachable = true
    public var migrations: MigrationStatus?
    public var projections: [ProjectionStatus] = []
    /// Why the store is not fit to serve, for operators (never shown on the open `/readyz`).
    public var problem: String?

    public var isReady: Bool {
        databaseReachable && problem == nil && (migrations?.isCurrent ?? false) && !projections.contains { $0.isFailed }
    }
}

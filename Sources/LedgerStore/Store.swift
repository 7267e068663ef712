import Foundation
import LedgerCore
internal import Postgres

/// LedgerStore's one entry point for the service, the command line and the tests: it owns the
/// connection pool, the connections opened outside it (`Connections`: the group-commit writers',
/// the catch-up's LISTEN session, long work), the group-commit writers and the catch-up worker,
/// and hands out everything that touches the database — the event log (`events`), the projection
/// reads (`projections`, `refunds`), the catch-up worker, rebuilds, fact derivation, migrations
/// and health. Nothing of libpq or of the pool appears in its API.
///
/// A lifecycle service in the shape of postgres-nio's `PostgresClient`: `run()` is where the
/// store's background work lives (the catch-up worker, unless `catchUpInRun` is off) and lasts
/// until `shutdown()` or the task's cancellation; either then stops the worker, lets every queued
/// append commit and be answered (new appends are told to retry), and closes the pools. A store
/// used for one command (or a test) need not run: appends and reads work without `run()`, and
/// `shutdown()` (or `close()`) ends it.
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
        /// The outbox's consumers (`OutboxConsumer`): their items are derived in the append
        /// transaction whether or not `liveProjections` is set (an item exists iff its cause did).
        public var outboxConsumers: [OutboxConsumer] = OutboxConsumer.registered
        /// The projections' evaluation time (tests fix or move it).
        public var clock: LedgerClock
        /// Fold live projections in the append transaction (the service does; a store used only to
        /// record, e.g. by the command line, need not).
        public var liveProjections: Bool
        /// Told when a live projection failed for a batch (its events were stored anyway).
        public var onProjectionFailure: (@Sendable (HookFailure) -> Void)?
        /// A streaming replica (hot standby) for app and auditor reads; nil reads the primary.
        public var readDatabaseURL: String?
        /// A read without a position goes to the replica only when it is at most this far behind.
        public var replicaMaxLag: Duration
        /// Exports and folds at a position (LongReads.swift): how many at once, their statement timeout.
        public var longReads: LongReadSettings
        /// `run()` keeps the projections caught up (`worker`), woken by appends or every
        /// `catchUpInterval`; off for a store that only records or reads.
        public var catchUpInRun = true
        public var catchUpInterval: Duration = .seconds(1)
        /// `WebhookDerivation.expirySettle` of the webhook projection.
        public var webhookExpirySettle: EpochMillis = WebhookDerivation.defaultExpirySettle
        /// Told when a catch-up pass in `run()` failed (database down: it is retried).
        public var onCatchUpError: (@Sendable (ProjectionError) -> Void)?

        public init(
            databaseURL: String, poolSize: Int = 16, acquireTimeout: Duration = .seconds(5),
            catalog: ProductCatalog = .productIds, clock: LedgerClock = .system,
            liveProjections: Bool = true, readDatabaseURL: String? = nil, replicaMaxLag: Duration = .seconds(2),
            longReads: LongReadSettings = LongReadSettings(), onProjectionFailure: (@Sendable (HookFailure) -> Void)? = nil
        ) {
            self.longReads = longReads
            self.readDatabaseURL = readDatabaseURL
            self.replicaMaxLag = replicaMaxLag
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
    /// Every connection the store opens outside the pool.
    let connections: Connections
    /// Ends `run()`: finished by `shutdown()` or the cancellation of `run()`'s task.
    private let stop = AsyncStream<Void>.makeStream()
    let foldSnapshots = FoldSnapshots()
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
    /// The reports: the reporting projection at its checkpoint, folds of the facts at other positions.
    public let reports: ReportQueries
    /// The primary's read side.
    public let primaryReads: Reads
    let replica: ReadReplica?
    /// Reconciliation runs, job locks and the consumption outbox (Migrations/0007).
    public let reconciliation: ReconciliationStore
    /// WeChat: the order alias index, refund-decision reads, plaintext nonces, orphans.
    public let wechat: WeChatQueries
    /// Outbound webhooks: the endpoints (Migrations/0014).
    public let webhookEndpoints: WebhookEndpointStore
    /// Outbound webhooks: the derived events, their deliveries and attempts (Migrations/0021).
    public let webhookEvents: WebhookEventStore
    /// Exports and folds at a position: limited, timed out, cancelled with their request.
    let longReads: LongReads
    /// The one outbox (Outbox/Outbox.swift): claim, record attempts, replay, statuses.
    public let outbox: Outbox

    public init(_ configuration: Configuration) {
        self.configuration = configuration
        pool = ConnectionPool(conninfo: configuration.databaseURL, maxConnections: configuration.poolSize,
                              acquireTimeout: configuration.acquireTimeout)
        connections = Connections(conninfo: configuration.databaseURL)
        projector = Projector(catalog: configuration.catalog, webhookExpirySettle: configuration.webhookExpirySettle, clock: configuration.clock)
        let derivation = OutboxDerivation(consumers: configuration.outboxConsumers)
        // One fold step for every live projection: the batch's fold is computed once and shared.
        let folder = SharedFold(snapshots: foldSnapshots, catalogPeriods: projector.catalogPeriods)
        events = EventStore(
            pool: pool, connections: connections,
            hooks: (configuration.liveProjections ? Projections.registered(projector: projector).filter(\.isLive).map {
                LiveProjectionHook($0, folder: folder) as any AppendHook
            } : [])
                + [WeChatNonceHook()],
            outbox: derivation, onHookFailure: configuration.onProjectionFailure)
        outbox = Outbox(pool: pool, events: events, consumers: configuration.outboxConsumers)
        projections = ProjectionQueries(pool: pool, catalog: configuration.catalog)
        refunds = RefundFactQueries(pool: pool)
        // A pass of the reports or the Apple status checks reads and folds each subscription its
        // range touches once: over a backlog of 30,000 renewals of 300 subscriptions, passes of
        // 1,000 events did that 30 times per subscription (80–108 s to catch up in `bench
        // ingest`; 25–32 s with only the reports' pass wider, 10–11 s with both), and a reports
        // pass that ends behind the append's snapshots often cannot start from them
        // (ReportProjection.contributions). Both hold 64 subscriptions' histories at a time,
        // whatever the pass's length.
        worker = ProjectionWorker(pool: pool, connections: connections, projector: projector,
                                  passLimits: [.reports: 10_000, .appleStatus: 10_000], outbox: derivation,
                                  registered: Projections.registered(projector: projector, snapshots: configuration.liveProjections ? foldSnapshots : nil))
        var deriver = FactDeriver(connections: connections)
        deriver.outbox = derivation
        facts = deriver
        chain = ChainStore(pool: pool)
        longReads = LongReads(connections: connections, settings: configuration.longReads)
        refundCases = RefundCaseQueries(pool: pool, longReads: longReads)
        reports = ReportQueries(pool: pool, longReads: longReads, catalogPeriods: configuration.catalog.periods)
        primaryReads = Reads(source: .primary, projections: projections, refunds: refunds, events: events)
        replica = configuration.readDatabaseURL.map {
            ReadReplica(conninfo: $0, poolSize: configuration.poolSize, acquireTimeout: configuration.acquireTimeout,
                        catalog: configuration.catalog, maxLag: configuration.replicaMaxLag)
        }
        reconciliation = ReconciliationStore(pool: pool, connections: connections)
        wechat = WeChatQueries(pool: pool, catalogPeriods: configuration.catalog.periods)
        webhookEndpoints = WebhookEndpointStore(pool: pool)
        webhookEvents = WebhookEventStore(pool: pool)
    }

    /// Runs a read on the replica when it may answer it (see `ReadReplica`: it has replayed
    /// `minPosition`, or without one it is within `replicaMaxLag`), else on the primary. A read
    /// that fails on the replica is run again on the primary, so a replica problem never reaches
    /// the caller. Writes never go through here.
    public func read<T: Sendable>(atLeast minPosition: Int64? = nil, _ body: (Reads) async throws -> T) async throws -> T {
        guard let replica, await replica.mayServe(atLeast: minPosition, primary: pool) else {
            replica?.count(.primary)
            return try await body(primaryReads)
        }
        do {
            let value = try await body(replica.reads)
            replica.count(.replica)
            return value
        } catch let error as StoreError where error.isUnavailable {
            replica.countFallback()
        } catch let error as ProjectionError {
            guard case .database = error else { throw error }
            replica.countFallback()
        }
        replica.count(.primary)
        return try await body(primaryReads)
    }

    /// Reads served by where, and the replica's state (checked now unless checked within the TTL).
    public func readStatistics() async -> ReadStatistics {
        guard let replica else { return ReadStatistics() }
        return ReadStatistics(served: replica.servedCounts, replicaFallbacks: replica.fallbackCount,
                              replica: await replica.status(primary: pool), replicaConfigured: true)
    }

    /// A rebuild of the projections under this store's catalog (each run opens its own connections).
    public func rebuilder() -> Rebuilder { rebuilder(projector: projector) }

    /// A rebuild folding with `projector` (a dry run under another catalog, in tests).
    func rebuilder(projector: Projector) -> Rebuilder {
        var rebuilder = Rebuilder(connections: connections, projector: projector)
        rebuilder.outbox = OutboxDerivation(consumers: configuration.outboxConsumers)
        return rebuilder
    }

    /// Migrations from `directory` (open the store as the database owner to run them, not as the
    /// service role).
    public func migrator(directory: URL) -> Migrator {
        Migrator(connections: connections, directory: directory)
    }

    /// Every projection's (and the facts') checkpoint against the head, in name order.
    public func projectionStatuses() async throws(ProjectionError) -> [ProjectionStatus] {
        try await ProjectionStatusReader.statuses(pool)
    }

    /// What `/readyz` reports: the database answers, migrations are current, no projection stopped.
    /// Health against the migrations this build expects, loaded once by the caller.
    public func health(migrations: [Migration]) async -> StoreHealth {
        var health = StoreHealth()
        do {
            let status = try await Migrator(connections: connections, directory: URL(fileURLWithPath: "/"))
                .status(pool: pool, migrations: migrations)
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
        if let replica {
            // A replica that cannot be asked does not make the service unready (reads go to the
            // primary), but operators see why.
            health.replica = await replica.status(primary: pool)
            health.replicaProblem = replica.problem.withLock { $0 }
        }
        return health
    }

    /// Counters of the event log and the pool, for `/metrics`.
    public var statistics: EventStoreMetrics { events.metrics }

    /// Long reads running, admitted and refused since start, for `/metrics`.
    public var longReadStatistics: LongReadStatistics { longReads.statistics }

    /// The live hook's fold snapshots (LiveFold.swift): subscriptions refolded from a snapshot
    /// (hits) or from all their facts (misses), and those that take the full path.
    public var liveFoldStatistics: LiveFoldStatistics {
        let c = foldSnapshots.counters
        return LiveFoldStatistics(hits: c.hits, misses: c.misses, fullRefolds: c.unsnapshotted, snapshots: c.entries, facts: c.facts,
                                  reportSnapshotFolds: c.peeked, reportFullFolds: c.peekMissed,
                                  statusSnapshotChecks: c.statusFromSnapshot, statusFullChecks: c.statusRead)
    }

    /// Closes the pools (in-flight reads finish; appends already queued are answered).
    public func close() {
        pool.close()
        replica?.pool.close()
    }

    // MARK: lifecycle

    /// The service's name in the lifecycle's logs.
    public var name: String { "store" }

    /// Runs the store's background work — the catch-up worker (`catchUpInRun`) — until
    /// `shutdown()` or until this task is cancelled; then drains and closes the store (see the
    /// type's comment) and returns.
    public func run() async throws {
        let stop = self.stop
        await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { group in
                if configuration.catchUpInRun {
                    let (worker, interval, onError) = (self.worker, configuration.catchUpInterval, configuration.onCatchUpError)
                    group.addTask { await worker.run(pollInterval: interval) { onError?($0) } }
                }
                for await _ in stop.stream {}
                worker.stop()
                await group.waitForAll()
            }
        } onCancel: {
            stop.continuation.finish()
        }
        await drain()
    }

    /// Stops the catch-up worker, lets every queued append commit and be answered (new appends
    /// are told to retry), closes the pools, and makes `run()` return. Also ends a store that
    /// never ran.
    public func shutdown() async {
        stop.continuation.finish()
        worker.stop()
        await drain()
    }

    private func drain() async {
        await events.finish()
        close()
    }
}

/// The store's side of readiness.
public struct StoreHealth: Sendable {
    public var databaseReachable = true
    public var migrations: MigrationStatus?
    public var projections: [ProjectionStatus] = []
    /// Why the store is not fit to serve, for operators (never shown on the open `/readyz`).
    public var problem: String?
    /// The read replica's state when one is configured (nil: none, or it could not be asked).
    public var replica: ReplicaStatus?
    /// Why the replica could not be asked.
    public var replicaProblem: String?

    public var isReady: Bool {
        databaseReachable && problem == nil && (migrations?.isCurrent ?? false) && !projections.contains { $0.isFailed }
    }
}

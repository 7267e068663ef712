import Foundation
import HTTPServer
import LedgerCore
import LedgerStore
import Postgres
import Synchronization

/// The running service: configuration, the database pool and event store, metrics, and the
/// router that ties the HTTP endpoints to them. `ServeCommand` builds one and serves it; tests
/// build one against a throw-away database and serve it on an ephemeral port.
public final class LedgerApp: Sendable {
    public let configuration: LedgerConfiguration
    public let pool: ConnectionPool
    public let store: EventStore
    public let metrics: Metrics
    public let tokens: TokenAuthority
    public let log: Log
    let migrationsDirectory: URL?
    let apple: AppleWebhook
    let wechat: WeChatWebhook
    public let catalog: ProductCatalog
    public let projector: Projector
    public let queries: ProjectionQueries
    let worker: ProjectionWorker
    /// Unmapped products already logged (each is logged once per process).
    let unmappedLogged = Mutex<Set<String>>([])

    /// - Parameter environment: where LEDGER_APPLE_ALLOW_TEST_ROOTS is read (the process's own by
    ///   default): a service accepting Production refuses to start under a trusted root that is not
    ///   Apple's unless it is `true` (`AppleRootPolicy`).
    public init(configuration: LedgerConfiguration, log: Log = .shared, migrationsDirectory: URL? = nil,
                environment: [String: String] = ProcessInfo.processInfo.environment) throws(LedgerAppError) {
        self.configuration = configuration
        let allowTestRoots = try Self.allowTestRoots(environment)
        let apple: AppleWebhook
        do { apple = try AppleWebhook(configuration: configuration.apple, allowTestRoots: allowTestRoots) } catch {
            throw .configuration("Apple: \(error)")
        }
        self.apple = apple
        for root in apple.allowedTestRoots {
            log.warn("accepting Production under a trusted root that is not Apple's (LEDGER_APPLE_ALLOW_TEST_ROOTS=true): never in a real deployment",
                     ["root": root.certificate.subject, "file": root.path, "sha256": AppleRootPolicy.fingerprint(root.certificate)])
        }
        self.wechat = try WeChatWebhook(configuration: configuration.wechat)
        self.log = log
        self.migrationsDirectory = migrationsDirectory
        let metrics = Metrics()
        self.metrics = metrics
        do { self.catalog = try configuration.catalog() } catch {
            throw .configuration("products: \(error)")
        }
        self.projector = Projector(catalog: catalog)
        self.pool = ConnectionPool(
            conninfo: configuration.databaseURL, maxConnections: configuration.databasePoolSize,
            acquireTimeout: .seconds(5))
        self.queries = ProjectionQueries(pool: pool, catalog: catalog)
        self.worker = ProjectionWorker(pool: pool, projector: projector)
        self.store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)], onHookFailure: { failure in
            metrics.increment("ledger_projection_hook_failures_total", ["hook": failure.hook])
            log.error("projection hook failed; events were stored", ["hook": failure.hook, "error": failure.message])
        })
        self.tokens = TokenAuthority(tokens: configuration.tokens)
        describeMetrics()
    }

    /// LEDGER_APPLE_ALLOW_TEST_ROOTS: `true` (or `1`) allows; unset, empty, `false` or `0` does not;
    /// anything else is refused rather than guessed, since it decides whether test roots count.
    static func allowTestRoots(_ environment: [String: String]) throws(LedgerAppError) -> Bool {
        switch environment["LEDGER_APPLE_ALLOW_TEST_ROOTS"] ?? "" {
        case "true", "1": return true
        case "", "false", "0": return false
        case let other:
            throw .configuration("LEDGER_APPLE_ALLOW_TEST_ROOTS='\(other)' is not a boolean: set it to true (test set-ups only) or unset it")
        }
    }

    private func describeMetrics() {
        metrics.describe("ledger_http_requests_total", type: "counter", help: "HTTP requests by route, method and status")
        metrics.describe("ledger_http_request_duration_seconds", type: "histogram", help: "HTTP request latency by route")
        metrics.describe("ledger_notifications_total", type: "counter", help: "Notifications received by source and outcome")
        let store = self.store
        metrics.gauge("ledger_events_appended_total", help: "Events appended since start (new, not duplicates)") {
            [(labels: [:], value: Double(store.metrics.appended))]
        }
        metrics.gauge("ledger_events_duplicates_total", help: "Appends answered with an already stored event since start") {
            [(labels: [:], value: Double(store.metrics.duplicates))]
        }
        metrics.gauge("ledger_append_batches_total", help: "Group-commit transactions since start") {
            [(labels: [:], value: Double(store.metrics.batches))]
        }
        metrics.gauge("ledger_append_queue", help: "Appends waiting for the group-commit writer") {
            [(labels: [:], value: Double(store.metrics.queued))]
        }
        metrics.gauge("ledger_db_pool_connections", help: "Database pool connections by state") {
            let s = store.metrics.pool
            return [(labels: ["state": "in_use"], value: Double(s.inUse)),
                    (labels: ["state": "idle"], value: Double(s.idle)),
                    (labels: ["state": "waiting"], value: Double(s.waiting)),
                    (labels: ["state": "max"], value: Double(s.maxConnections))]
        }
    }

    /// Records one finished exchange (called on a server thread: counting only).
    public func observe(_ exchange: HTTPExchange) {
        let status = String(exchange.status)
        metrics.increment("ledger_http_requests_total", ["route": exchange.route, "method": exchange.method, "status": status])
        let seconds = Double(exchange.duration.components.seconds) + Double(exchange.duration.components.attoseconds) / 1e18
        metrics.observe("ledger_http_request_duration_seconds", ["route": exchange.route], value: seconds)
    }

    public func makeRouter() -> Router {
        var router = Router()
        addHealthRoutes(to: &router)
        addAppleRoutes(to: &router)
        addQueryRoutes(to: &router)
        addWeChatRoutes(to: &router)
        addRefundRoutes(to: &router)
        addCustomerRoutes(to: &router)
        return router
    }

    public func httpConfiguration() -> HTTPServerConfiguration {
        var c = HTTPServerConfiguration(host: configuration.listenHost, port: configuration.listenPort)
        c.maxBodyBytes = configuration.http.maxBodyBytes
        c.connectionLimit = configuration.http.connectionLimit
        c.perIPConnectionLimit = configuration.http.perIPConnectionLimit
        c.connectionTimeoutSeconds = configuration.http.connectionTimeoutSeconds
        c.threadPoolSize = configuration.http.threadPoolSize
        return c
    }

    public func shutdown() {
        pool.close()
    }
}

public enum LedgerAppError: Error, CustomStringConvertible {
    case configuration(String)
    public var description: String {
        switch self { case .configuration(let m): return "configuration: \(m)" }
    }
}

/// JSON bodies for answers, built with JSONSerialization so every value is escaped correctly.
enum JSONBody {
    // No .sortedKeys: on Linux it sorts with locale-aware NSString comparison (ICU), which was
    // the largest cost of a subscription read; key order means nothing in JSON.
    static func data(_ object: Any) -> Data {
        (try? JSONSerialization.data(withJSONObject: object, options: [.withoutEscapingSlashes])) ?? Data("{}".utf8)
    }

    static func response(_ status: Int, _ object: Any) -> HTTPResponse {
        .json(status, data(object))
    }
}

extension LedgerApp {
    /// Starts the projection catch-up worker beside the HTTP server: it advances projections that
    /// fell behind the live hook (after a failure was fixed, or a restart) from their checkpoints.
    public func startBackgroundWork() async {
        // The catalog this instance runs with is on record before it answers with it; a database
        // that is down now is retried in the background.
        Task.detached { [self] in
            for attempt in 0..<60 {
                do { try await recordCatalogIfChanged(); return } catch {
                    if attempt == 0 { self.log.warn("could not record the product catalog yet; retrying", ["error": "\(error)"]) }
                    try? await Task.sleep(for: .seconds(5))
                }
            }
        }
        let worker = self.worker, log = self.log
        Task.detached {
            await worker.run(pollInterval: .seconds(1)) { error in
                log.error("projection worker", ["error": "\(error)"])
            }
        }
    }

    /// Stops it; a batch in progress commits or rolls back as a whole.
    public func stopBackgroundWork() async { worker.stop() }
}

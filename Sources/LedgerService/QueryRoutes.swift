import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// The query API for app backends and auditors. Answers come from the projection tables (one
/// indexed read, status re-evaluated at the time asked); `?at=` and `?recordedAt=` fold the
/// subscription's stored facts instead — time travel without history tables.
extension LedgerApp {
    func addQueryRoutes(to router: inout Router) {
        router.add("GET", "/v1/subscriptions/{originalTransactionId}") { [self] request in
            await authorized(request, .app) { await subscription(request) }
        }
        router.add("GET", "/v1/subscriptions/{originalTransactionId}/events") { [self] request in
            await authorized(request, .auditor) { await subscriptionEvents(request) }
        }
        router.add("GET", "/v1/customers/{customerId}/entitlements") { [self] request in
            await authorized(request, .app) { await entitlements(request) }
        }
        router.add("POST", "/v1/admin/rebuild") { [self] request in
            await authorized(request, .admin) { await adminRebuild(request) }
        }
    }

    /// Runs `body` when the bearer token grants `role`; 401/403 JSON otherwise.
    func authorized(_ request: HTTPRequest, _ role: Role, _ body: () async -> HTTPResponse) async -> HTTPResponse {
        switch tokens.authorize(header: request.headers["authorization"], needs: role) {
        case .success: return await body()
        case .failure(.unauthenticated(let message)):
            return .error(status: 401, code: "unauthenticated", message: message, headers: [("WWW-Authenticate", "Bearer")])
        case .failure(.forbidden(let message)):
            return .error(status: 403, code: "forbidden", message: message)
        }
    }

    /// When the question is asked about. Bitemporal: `at` is the business time the answer is
    /// about (every known fact, each in effect from its own time), `recordedAt` what the ledger
    /// knew (only events recorded by then). Neither: now, as known now. `recordedAt` alone: the
    /// state at that moment as known then.
    struct Moment {
        var at: EpochMillis
        var recordedBy: EpochMillis?
        var isNow: Bool
    }

    func moment(_ request: HTTPRequest) -> Result<Moment, Refusal> {
        func millis(_ name: String) -> Result<EpochMillis?, Refusal> {
            guard let text = request.query[name] else { return .success(nil) }
            guard let v = Int64(text), v >= 0 else {
                return .failure(Refusal(.error(status: 400, code: "invalid_parameter",
                                       message: "\(name) must be milliseconds since 1970-01-01T00:00:00Z as a non-negative integer, e.g. \(name)=1767225600000")))
            }
            return .success(v)
        }
        let at: EpochMillis?, recorded: EpochMillis?
        switch millis("at") { case .success(let v): at = v; case .failure(let r): return .failure(r) }
        switch millis("recordedAt") { case .success(let v): recorded = v; case .failure(let r): return .failure(r) }
        switch (at, recorded) {
        case (nil, nil): return .success(Moment(at: Self.nowMillis(), recordedBy: nil, isNow: true))
        case (let t?, nil): return .success(Moment(at: t, recordedBy: nil, isNow: false))
        case (nil, let r?): return .success(Moment(at: r, recordedBy: r, isNow: false))
        case (let t?, let r?): return .success(Moment(at: t, recordedBy: r, isNow: false))
        }
    }

    /// `?environment=` (Production by default).
    func environment(_ request: HTTPRequest) -> Result<String, Refusal> {
        guard let raw = request.query["environment"] else { return .success(SubscriptionKey.production) }
        guard let env = SubscriptionKey.environment(raw), raw != "PROD" else {
            return .failure(Refusal(.error(status: 400, code: "invalid_parameter",
                                           message: "environment must be Production or Sandbox (Apple's spelling); it defaults to Production")))
        }
        return .success(env)
    }

    /// The path's originalTransactionId: Apple's ids are 1–20 decimal digits.
    func originalTransactionId(_ request: HTTPRequest) -> Result<String, Refusal> {
        let id = request.pathParameters["originalTransactionId"] ?? ""
        guard OriginalTransactionId.isValid(id) else {
            return .failure(Refusal(.error(status: 400, code: "invalid_parameter",
                                           message: "originalTransactionId must be 1–20 decimal digits, as Apple issues them")))
        }
        return .success(id)
    }

    static func nowMillis() -> EpochMillis { EpochMillis((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    func subscription(_ request: HTTPRequest) async -> HTTPResponse {
        let id: String, env: String, when: Moment
        switch originalTransactionId(request) { case .success(let v): id = v; case .failure(let r): return r.response }
        switch environment(request) { case .success(let v): env = v; case .failure(let r): return r.response }
        switch moment(request) { case .success(let m): when = m; case .failure(let r): return r.response }
        let key = SubscriptionKey(environment: env, originalTransactionId: id)
        do {
            let state: SubscriptionState?
            if when.isNow {
                state = try await queries.subscription(key, now: when.at)
            } else {
                let facts = try await queries.facts(of: [key])
                state = SubscriptionProjection.view(at: when.at, recordedBy: when.recordedBy, facts: facts).subscription(key)
            }
            guard let state else {
                return .error(status: 404, code: "not_found",
                              message: "no \(env) subscription with originalTransactionId \(id) is known\(when.isNow ? "" : " at that time")"
                                + (env == SubscriptionKey.production ? " (Sandbox purchases: add ?environment=Sandbox)" : ""))
            }
            return JSONBody.response(200, Representation.subscription(state))
        } catch {
            return projectionFailure(error)
        }
    }

    /// Every event of the subscription's stream (both environments share Apple's id; each event
    /// names its environment), with the facts the ledger derived from it.
    func subscriptionEvents(_ request: HTTPRequest) async -> HTTPResponse {
        let id: String, env: String
        switch originalTransactionId(request) { case .success(let v): id = v; case .failure(let r): return r.response }
        switch environment(request) { case .success(let v): env = v; case .failure(let r): return r.response }
        do {
            let events = try await store.read(stream: id)
            let facts = try await queries.facts(positions: events.map(\.position))
            let byPosition = Dictionary(grouping: facts, by: \.position)
            let key = SubscriptionKey(environment: env, originalTransactionId: id)
            // An event belongs to the asked environment when one of its facts does, or (no facts)
            // when its own environment column says so.
            let mine = events.filter { e in
                if let fs = byPosition[e.position], fs.contains(where: { $0.subscription != nil }) {
                    return fs.contains { $0.subscription == key }
                }
                return (SubscriptionKey.environment(e.event.environment) ?? env) == env
            }
            guard !mine.isEmpty else {
                return .error(status: 404, code: "not_found", message: "no events are stored for the \(env) subscription \(id)")
            }
            return JSONBody.response(200, [
                "originalTransactionId": id, "environment": env,
                "events": mine.map { Representation.event($0, facts: byPosition[$0.position] ?? []) },
            ])
        } catch let error as StoreError {
            return storeFailure(error, source: "query")
        } catch let error as ProjectionError {
            return projectionFailure(error)
        } catch {
            return .error(status: 500, code: "internal", message: "\(error)")
        }
    }

    func entitlements(_ request: HTTPRequest) async -> HTTPResponse {
        let customer = CustomerId.normalised(request.pathParameters["customerId"] ?? "")
        let env: String, when: Moment
        switch environment(request) { case .success(let v): env = v; case .failure(let r): return r.response }
        switch moment(request) { case .success(let m): when = m; case .failure(let r): return r.response }
        do {
            let grants: [EntitlementGrant]
            if when.isNow {
                grants = try await queries.entitlements(customerId: customer, environment: env, now: when.at)
            } else {
                let keys = try await queries.subscriptions(customerId: customer).filter { $0.environment == env }
                let facts = try await queries.facts(of: keys)
                let catalog = try await catalog(recordedBy: when.recordedBy)
                grants = SubscriptionProjection.view(at: when.at, recordedBy: when.recordedBy, facts: facts)
                    .entitlements(catalog: catalog, customerId: customer, environment: env)
            }
            return JSONBody.response(200, ["customerId": customer, "environment": env, "asOf": when.at,
                                           "entitlements": grants.map(Representation.entitlement)])
        } catch {
            return projectionFailure(error)
        }
    }

    /// The catalog in force when the ledger knew only what was recorded by `recorded`: the last
    /// one a service recorded by then (the current one when none was, or for "now").
    func catalog(recordedBy recorded: EpochMillis?) async throws(ProjectionError) -> ProductCatalog {
        guard let recorded else { return catalog }
        let recordedCatalogs = try await queries.recordedCatalogs().filter { $0.recordedAt <= recorded }
        guard let last = recordedCatalogs.last else { return catalog }
        return CatalogRecord.catalog(of: last) ?? catalog
    }

    func projectionFailure(_ error: ProjectionError) -> HTTPResponse {
        if case .database(let message) = error {
            log.error("projection read failed", ["error": message])
            return .error(status: 503, code: "database_unavailable", message: "the ledger's database is unavailable; retry later")
        }
        if case .refused(let message) = error {
            log.warn("projection query refused", ["error": message])
            return .error(status: 400, code: "invalid_parameter", message: "the database refused the request's values: \(message)")
        }
        log.error("projection read failed", ["error": "\(error)"])
        return .error(status: 500, code: "projection_error", message: "\(error)")
    }
}

/// A request refused before any work: the answer to send.
struct Refusal: Error {
    let response: HTTPResponse
    init(_ response: HTTPResponse) { self.response = response }
}

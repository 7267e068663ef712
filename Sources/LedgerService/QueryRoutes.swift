import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// The query API for app backends and auditors. Answers come from the projection tables (one
/// indexed read, status re-evaluated at the time asked); `?at=` and `?recordedAt=` fold the
/// stream's events instead — time travel without history tables.
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

    /// When the question is asked about: now, a business time (`at`), or a recording time (`recordedAt`).
    enum Moment {
        case now(EpochMillis)
        case businessTime(EpochMillis)
        case recordedTime(EpochMillis)
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
        case (nil, nil): return .success(.now(Self.nowMillis()))
        case (let t?, nil): return .success(.businessTime(t))
        case (nil, let r?): return .success(.recordedTime(r))
        default:
            return .failure(Refusal(.error(status: 400, code: "invalid_parameter",
                                   message: "give either at (business time) or recordedAt (what the ledger knew then), not both")))
        }
    }

    static func nowMillis() -> EpochMillis { EpochMillis((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    func view(facts: [SubscriptionFact], at moment: Moment) -> ProjectionView {
        switch moment {
        case .now(let t): return SubscriptionProjection(facts: facts).view(at: t)
        case .businessTime(let t): return SubscriptionProjection.asOfBusinessTime(t, facts: facts)
        case .recordedTime(let r): return SubscriptionProjection.asKnownAt(recordedTime: r, facts: facts)
        }
    }

    func subscription(_ request: HTTPRequest) async -> HTTPResponse {
        let id = request.pathParameters["originalTransactionId"] ?? ""
        let when: Moment
        switch moment(request) { case .success(let m): when = m; case .failure(let r): return r.response }
        do {
            let state: SubscriptionState?
            if case .now(let now) = when {
                state = try await queries.subscription(id, now: now)
            } else {
                state = view(facts: try await queries.facts(id), at: when).subscription(id)
            }
            guard let state else {
                return .error(status: 404, code: "not_found",
                              message: "no subscription with originalTransactionId \(id) is known\(when.isNow ? "" : " at that time")")
            }
            return JSONBody.response(200, Representation.subscription(state, source: nil))
        } catch {
            return projectionFailure(error)
        }
    }

    func subscriptionEvents(_ request: HTTPRequest) async -> HTTPResponse {
        let id = request.pathParameters["originalTransactionId"] ?? ""
        do {
            let events = try await store.read(stream: id)
            guard !events.isEmpty else {
                return .error(status: 404, code: "not_found", message: "no events are stored for \(id)")
            }
            return JSONBody.response(200, ["originalTransactionId": id, "events": events.map(Representation.event)])
        } catch {
            return storeFailure(error, source: "query")
        }
    }

    func entitlements(_ request: HTTPRequest) async -> HTTPResponse {
        let customer = request.pathParameters["customerId"] ?? ""
        let when: Moment
        switch moment(request) { case .success(let m): when = m; case .failure(let r): return r.response }
        do {
            let grants: [EntitlementGrant]
            let asOf: EpochMillis
            switch when {
            case .now(let now):
                grants = try await queries.entitlements(customerId: customer, now: now)
                asOf = now
            case .businessTime(let t), .recordedTime(let t):
                var facts: [SubscriptionFact] = []
                for stream in try await queries.streams(customerId: customer) {
                    facts += try await queries.facts(stream)
                }
                grants = view(facts: facts, at: when).entitlements(catalog: catalog, customerId: customer)
                    .filter { $0.status.isEntitled }
                asOf = t
            }
            return JSONBody.response(200, ["customerId": customer, "asOf": asOf, "entitlements": grants.map(Representation.entitlement)])
        } catch {
            return projectionFailure(error)
        }
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

extension LedgerApp.Moment {
    var isNow: Bool { if case .now = self { return true } else { return false } }
}

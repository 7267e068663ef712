import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerMetrics

/// Failed authentication of every kind — a bearer token, the pages' sign-in, the V1 password —
/// counted in `/metrics` (`ledger_auth_failures_total{kind}`), logged with the client's address
/// (never what it sent), and slowed per client: past `authFailureBurst` failures (refilled at
/// `authFailuresPerMinute`), the client's failing attempts are answered 429 with `Retry-After`
/// (`ledger_auth_throttled_total{kind}`), so guessing costs a minute per few tries. The credential
/// is checked first: a valid one is never throttled, so a guesser behind the same address (a
/// load balancer, a NAT) cannot lock the others out. One `RateLimiter` for all kinds: guesses at
/// the V1 password and at tokens share a client's budget.
///
/// The client is the socket's peer, or — when the peer is one of `LEDGER_TRUSTED_PROXIES` — the
/// address the proxies forwarded (`ClientAddress`); IPv6 clients count by their /64 and
/// IPv4-mapped addresses as IPv4 (`IPAddress.clientKey`).
struct AuthenticationFailures: Sendable {
    enum Kind: String, Sendable, CaseIterable {
        case bearer
        case auditLogin = "audit_login"
        case appleV1 = "apple_v1"
    }

    let limiter: RateLimiter
    let metrics: MetricsRegistry
    let log: Log
    let trustedProxies: [IPNetwork]

    init(limits: LedgerConfiguration.Limits, trustedProxies: [IPNetwork] = [], metrics: MetricsRegistry, log: Log,
         now: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        limiter = RateLimiter(.init(burst: limits.authFailureBurst, perMinute: limits.authFailuresPerMinute), now: now)
        self.trustedProxies = trustedProxies
        self.metrics = metrics
        self.log = log
        metrics.describe("ledger_auth_failures_total", type: .counter,
                         help: "Failed authentications by kind (bearer, audit_login, apple_v1); the address is in the log")
        metrics.describe("ledger_auth_throttled_total", type: .counter,
                         help: "Failed authentication attempts answered 429 because their client failed too often")
    }

    /// The client a request came from, as failures are counted: requests without an address (a
    /// test handler) share one bucket.
    func client(_ request: HTTPRequest) -> String {
        let address = ClientAddress.resolve(
            peer: request.remoteAddress, forwardedFor: Self.joined(request.headers.values(for: "x-forwarded-for")),
            forwarded: Self.joined(request.headers.values(for: "forwarded")), trustedProxies: trustedProxies)
        guard let address else { return "-" }
        return IPAddress(address)?.clientKey ?? address
    }

    private static func joined(_ values: [String]) -> String? { values.isEmpty ? nil : values.joined(separator: ",") }

    /// 429 when the request's client failed too often lately; nil otherwise. Asked only once its
    /// credential has failed.
    func throttled(_ kind: Kind, _ request: HTTPRequest) -> TooManyFailures? {
        guard let wait = limiter.waitingTime(client(request)) else { return nil }
        metrics.increment("ledger_auth_throttled_total", ["kind": kind.rawValue])
        return TooManyFailures(retryAfterSeconds: wait)
    }

    /// Counts and logs one failure of the request's client, and spends from its budget.
    func failed(_ kind: Kind, _ request: HTTPRequest) {
        let client = client(request)
        metrics.increment("ledger_auth_failures_total", ["kind": kind.rawValue])
        _ = limiter.spend(client)
        log.warn("authentication failed", ["kind": kind.rawValue, "client": client, "remote": request.remoteAddress ?? "-",
                                           "path": String(request.path.prefix(200))])
    }

    /// A failed credential's answer: 429 when its client failed too often (not counted again),
    /// else the failure is counted and nil comes back (answer 401/403 as usual).
    func refuse(_ kind: Kind, _ request: HTTPRequest) -> TooManyFailures? {
        if let refusal = throttled(kind, request) { return refusal }
        failed(kind, request)
        return nil
    }
}

/// The answer to an address that failed authentication too often, or a token over its append rate.
struct TooManyFailures: HTTPRenderableError {
    var retryAfterSeconds: Int
    var httpStatus: Int { 429 }
    var httpCode: String { "too_many_failures" }
    var httpMessage: String {
        "too many failed authentications from this client; wait \(retryAfterSeconds) s before trying again, with a valid credential (a valid one is never refused)"
    }
    var httpHeaders: [(String, String)] { [("Retry-After", String(retryAfterSeconds))] }
}

/// The append budget of app tokens (ties, unties, consent, receipts, sign-params): each token may
/// append `appAppendBurst` times at once, then `appAppendsPerMinute` a minute; past it 429 with
/// `Retry-After` (`ledger_rate_limited_total{limit="app_appends"}`). Keyed by the token's SHA-256,
/// so every holder of one token shares its budget and the token itself is never held.
struct AppendBudget: Sendable {
    let limiter: RateLimiter
    let metrics: MetricsRegistry

    init(limits: LedgerConfiguration.Limits, metrics: MetricsRegistry,
         now: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        limiter = RateLimiter(.init(burst: limits.appAppendBurst, perMinute: limits.appAppendsPerMinute), now: now)
        self.metrics = metrics
        metrics.describe("ledger_rate_limited_total", type: .counter, help: "Requests answered 429 because a token exceeded its rate, by limit")
    }

    /// Runs appends (every method but GET and HEAD) through the budget of their bearer token.
    var middleware: Middleware {
        { [self] request, next in
            guard request.method != "GET", request.method != "HEAD" else { return await next(request) }
            let token = request.headers["authorization"].flatMap(TokenAuthority.bearerToken) ?? []
            let key = Hex.encode(Digest.sha256(token))
            if let wait = limiter.spend(key) {
                metrics.increment("ledger_rate_limited_total", ["limit": "app_appends"])
                return .error(status: 429, code: "rate_limited",
                              message: "this token made more appends than its limit (\(limiter.rule.burst) at once, then \(limiter.rule.perMinute) a minute); retry in \(wait) s",
                              headers: [("Retry-After", String(wait))])
            }
            return await next(request)
        }
    }
}

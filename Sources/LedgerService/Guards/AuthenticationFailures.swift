import Crypto
import Foundation
import HTTPServer
import LedgerMetrics

/// Failed authentication of every kind — a bearer token, the pages' sign-in, the V1 password —
/// counted in `/metrics` (`ledger_auth_failures_total{kind}`), logged with the client's address
/// (never what it sent), and slowed per address: past `authFailureBurst` failures (refilled at
/// `authFailuresPerMinute`), the address's attempts are answered 429 with `Retry-After` before
/// any credential is looked at (`ledger_auth_throttled_total{kind}`), so guessing costs a minute
/// per few tries. One `RateLimiter` for all kinds: guesses at the V1 password and at tokens
/// share an address's budget.
struct AuthenticationFailures: Sendable {
    enum Kind: String, Sendable, CaseIterable {
        case bearer
        case auditLogin = "audit_login"
        case appleV1 = "apple_v1"
    }

    let limiter: RateLimiter
    let metrics: MetricsRegistry
    let log: Log

    init(limits: LedgerConfiguration.Limits, metrics: MetricsRegistry, log: Log,
         now: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        limiter = RateLimiter(.init(burst: limits.authFailureBurst, perMinute: limits.authFailuresPerMinute), now: now)
        self.metrics = metrics
        self.log = log
        metrics.describe("ledger_auth_failures_total", type: .counter,
                         help: "Failed authentications by kind (bearer, audit_login, apple_v1); the address is in the log")
        metrics.describe("ledger_auth_throttled_total", type: .counter,
                         help: "Authentication attempts answered 429 unchecked because their address failed too often")
    }

    /// The address's key: requests without one (a test handler) share one bucket.
    static func key(_ address: String?) -> String { address ?? "-" }

    /// 429 when `address` failed too often lately (the credential is not checked); nil otherwise.
    func throttled(_ kind: Kind, address: String?) -> TooManyFailures? {
        guard let wait = limiter.waitingTime(Self.key(address)) else { return nil }
        metrics.increment("ledger_auth_throttled_total", ["kind": kind.rawValue])
        return TooManyFailures(retryAfterSeconds: wait)
    }

    /// Counts and logs one failure of `address`, and spends from its budget.
    func failed(_ kind: Kind, address: String?, path: String) {
        metrics.increment("ledger_auth_failures_total", ["kind": kind.rawValue])
        _ = limiter.spend(Self.key(address))
        log.warn("authentication failed", ["kind": kind.rawValue, "remote": address ?? "-", "path": String(path.prefix(200))])
    }
}

/// The answer to an address that failed authentication too often, or a token over its append rate.
struct TooManyFailures: HTTPRenderableError {
    var retryAfterSeconds: Int
    var httpStatus: Int { 429 }
    var httpCode: String { "too_many_failures" }
    var httpMessage: String {
        "too many failed authentications from this address; wait \(retryAfterSeconds) s before trying again, with a valid credential"
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

import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Synchronization
import XCTest

/// Issue 22 items 2, 4, 7 and 9: what is refused at start (V1 with Production unless trusted,
/// plaintext WeChat outside development, short tokens), the app tokens' append budget, and failed
/// authentication of every kind counted, logged with the address and slowed per address.
final class GuardTests: XCTestCase {
    /// Log lines written during a test.
    final class Lines: Sendable {
        let lines = Mutex<[String]>([])
        var log: Log { Log(minimum: .info) { line in self.lines.withLock { $0.append(line) } } }
        var all: [String] { lines.withLock { $0 } }
    }

    static let base: [String: String] = [
        "LEDGER_DATABASE_URL": "host=/nonexistent dbname=none", "LEDGER_APPLE_BUNDLE_IDS": "com.example",
        "LEDGER_APPLE_APP_APPLE_IDS": "1234",
    ]

    func startRefusal(_ extra: [String: String]) -> String? {
        do {
            let c = try LedgerConfiguration.load(environment: Self.base.merging(extra) { $1 })
            let app = try LedgerApp(configuration: c, log: Log(minimum: .error))
            app.shutdown()
            return nil
        } catch {
            return "\(error)"
        }
    }

    func testV1WithProductionIsRefusedAtStartUnlessTrusted() {
        let secret = "the-shared-secret-value"
        let refused = startRefusal(["LEDGER_APPLE_SHARED_SECRET": secret, "LEDGER_APPLE_ENVIRONMENTS": "Production,Sandbox"])
        XCTAssertNotNil(refused, "a V1 secret with Production must not serve")
        XCTAssertTrue(refused?.contains("LEDGER_APPLE_V1_TRUSTED=true") ?? false, refused ?? "")
        XCTAssertTrue(refused?.contains("can set any subscription's state") ?? false, refused ?? "")
        XCTAssertFalse(refused?.contains(secret) ?? true, "the secret is never echoed")
        XCTAssertNil(startRefusal(["LEDGER_APPLE_SHARED_SECRET": secret, "LEDGER_APPLE_ENVIRONMENTS": "Production", "LEDGER_APPLE_V1_TRUSTED": "true"]))
        XCTAssertNil(startRefusal(["LEDGER_APPLE_SHARED_SECRET": secret, "LEDGER_APPLE_ENVIRONMENTS": "Sandbox"]))
        XCTAssertNil(startRefusal(["LEDGER_APPLE_ENVIRONMENTS": "Production"]), "no secret: V1 is refused per request anyway")
        XCTAssertNotNil(startRefusal(["LEDGER_APPLE_V1_TRUSTED": "yes"]), "not a clear boolean")
    }

    func testPlaintextWeChatIsRefusedOutsideDevelopment() {
        let wechat = ["LEDGER_WECHAT_APPID": "wxba5fad812f8e6fb9", "LEDGER_WECHAT_TOKEN": "t0kenForTests", "LEDGER_WECHAT_ALLOW_PLAINTEXT": "true"]
        let refused = startRefusal(wechat)
        XCTAssertTrue(refused?.contains("LEDGER_DEVELOPMENT=true") ?? false, refused ?? "plaintext served")
        XCTAssertNil(startRefusal(wechat.merging(["LEDGER_DEVELOPMENT": "true"]) { $1 }))
        XCTAssertNil(startRefusal(wechat.merging(["LEDGER_WECHAT_ALLOW_PLAINTEXT": "false"]) { $1 }))
    }

    func testTokensShorterThan32BytesAreRefusedNamingTheRoleNeverTheValue() {
        let short = "auditor-but-short-31-bytes-long"
        XCTAssertEqual(short.utf8.count, 31)
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_TOKENS": "app:\(ServiceHarness.appToken),auditor:\(short)"])) { error in
            XCTAssertTrue("\(error)".contains("the auditor token is shorter than 32 bytes"), "\(error)")
            XCTAssertFalse("\(error)".contains(short), "the value is never echoed")
        }
        XCTAssertNoThrow(try LedgerConfiguration.load(environment: ["LEDGER_TOKENS": "auditor:\(short)x"]))
    }

    func testAppTokensAppendBudget() async throws {
        try await withService(environment: ["LEDGER_APP_APPEND_BURST": "3", "LEDGER_APP_APPENDS_PER_MINUTE": "1"]) { h in
            func tie(_ n: Int, token: String = ServiceHarness.appToken) async throws -> ServiceHarness.Answer {
                try await h.request("POST", "/v1/customers/customer-\(n)/subscriptions",
                                    body: Data(#"{"originalTransactionId": "100000000000000\#(n)"}"#.utf8), token: token)
            }
            for n in 1...3 {
                let ok = try await tie(n)
                XCTAssertEqual(ok.status, 200, ok.text)
            }
            let refused = try await tie(4)
            XCTAssertEqual(refused.status, 429, refused.text)
            XCTAssertEqual(refused.errorCode, "rate_limited")
            XCTAssertGreaterThanOrEqual(Int(refused.headers["retry-after"] ?? "") ?? 0, 1)
            let untie = try await h.request("DELETE", "/v1/customers/customer-1/subscriptions/1000000000000001", token: ServiceHarness.appToken)
            XCTAssertEqual(untie.status, 429, "unties, consent, receipts and sign-params share the budget")
            let consent = try await h.request("POST", "/v1/customers/customer-1/consent", body: Data(#"{"consented": true}"#.utf8),
                                              token: ServiceHarness.appToken)
            XCTAssertEqual(consent.status, 429)
            // Reads are not appends; another token has a budget of its own.
            let read = try await h.request("GET", "/v1/customers/customer-1/entitlements", token: ServiceHarness.appToken)
            XCTAssertEqual(read.status, 200, read.text)
            let other = try await tie(5, token: ServiceHarness.adminToken)
            XCTAssertEqual(other.status, 200, other.text)
            XCTAssertEqual(h.app.metrics.counterValue("ledger_rate_limited_total", ["limit": "app_appends"]), 3)
            XCTAssertEqual(try h.eventCount(), 4, "nothing refused was stored")
        }
    }

    func testFailedAuthenticationIsCountedLoggedWithTheAddressAndSlowed() async throws {
        let lines = Lines()
        try await withService(environment: ["LEDGER_AUTH_FAILURE_BURST": "3", "LEDGER_AUTH_FAILURES_PER_MINUTE": "1"], log: lines.log) { h in
            let wrong = "wrong-token-guessed-by-someone-0123456789"
            for _ in 0..<3 {
                let a = try await h.request("GET", "/v1/refunds?limit=1", token: wrong)
                XCTAssertEqual(a.status, 401, a.text)
            }
            // Slowed: the next wrong attempt is answered 429 ...
            let slowed = try await h.request("GET", "/v1/refunds?limit=1", token: wrong)
            XCTAssertEqual(slowed.status, 429, slowed.text)
            XCTAssertEqual(slowed.errorCode, "too_many_failures")
            XCTAssertGreaterThanOrEqual(Int(slowed.headers["retry-after"] ?? "") ?? 0, 1)
            // ... but the credential is checked first: a right one from the same address (every
            // client behind one load balancer or NAT) is never held back by someone's guesses.
            let right = try await h.request("GET", "/v1/refunds?limit=1", token: ServiceHarness.auditorToken)
            XCTAssertEqual(right.status, 200, right.text)
            let v1 = try await h.post("/v1/apple/notifications/v1", AppleWebhookTests.v1Body(password: "v1-shared-secret"))
            XCTAssertEqual(v1.status, 200, v1.text)
            // The same address's wrong V1 passwords share the budget.
            let v1Wrong = try await h.post("/v1/apple/notifications/v1", AppleWebhookTests.v1Body(password: "guess"))
            XCTAssertEqual(v1Wrong.status, 429, v1Wrong.text)
            let detailed = try await h.request("GET", "/readyz", token: ServiceHarness.adminToken)
            XCTAssertNotNil(detailed.json["migrations"], "the admin token still gets the detailed /readyz: \(detailed.text)")
            XCTAssertEqual(h.app.metrics.counterValue("ledger_auth_failures_total", ["kind": "bearer"]), 3)
            XCTAssertEqual(h.app.metrics.counterValue("ledger_auth_throttled_total", ["kind": "bearer"]), 1)
            XCTAssertEqual(h.app.metrics.counterValue("ledger_auth_throttled_total", ["kind": "apple_v1"]), 1)
            let logged = lines.all.filter { $0.contains("authentication failed") }
            XCTAssertEqual(logged.count, 3, "\(lines.all)")
            for line in logged {
                XCTAssertTrue(line.contains(#""remote":"127.0.0.1"#), line)
                XCTAssertTrue(line.contains(#""kind":"bearer""#), line)
                XCTAssertFalse(line.contains(wrong), "a token is never logged: \(line)")
            }
        }
    }

    func testFailedV1PasswordsAndSignInsAreCounted() async throws {
        let lines = Lines()
        try await withService(environment: ["LEDGER_AUTH_FAILURE_BURST": "2", "LEDGER_AUTH_FAILURES_PER_MINUTE": "1"], log: lines.log) { h in
            let guess = "not-the-shared-secret"
            for _ in 0..<2 {
                let a = try await h.post("/v1/apple/notifications/v1", AppleWebhookTests.v1Body(password: guess))
                XCTAssertEqual(a.status, 401, a.text)
            }
            let slowed = try await h.post("/v1/apple/notifications/v1", AppleWebhookTests.v1Body(password: guess))
            XCTAssertEqual(slowed.status, 429, "the address's wrong passwords are slowed: \(slowed.text)")
            let right = try await h.post("/v1/apple/notifications/v1", AppleWebhookTests.v1Body(password: "v1-shared-secret"))
            XCTAssertEqual(right.status, 200, "Apple's right password is never slowed: \(right.text)")
            XCTAssertEqual(h.app.metrics.counterValue("ledger_auth_failures_total", ["kind": "apple_v1"]), 2)
            XCTAssertEqual(try h.eventCount(), 1)
            XCTAssertFalse(lines.all.joined().contains(guess), "a password is never logged")
            XCTAssertEqual(lines.all.filter { $0.contains(#""kind":"apple_v1""#) && $0.contains("127.0.0.1") }.count, 2)
        }
        try await withService(environment: ["LEDGER_AUTH_FAILURE_BURST": "1", "LEDGER_AUTH_FAILURES_PER_MINUTE": "1"]) { h in
            let failed = try Self.signIn(h, token: "not-a-token-0123456789abcdef0123456789")
            XCTAssertEqual(failed.status, 401)
            XCTAssertEqual(h.app.metrics.counterValue("ledger_auth_failures_total", ["kind": "audit_login"]), 1)
            let slowed = try Self.signIn(h, token: "still-not-a-token-0123456789abcdef01234")
            XCTAssertEqual(slowed.status, 429, "a slowed address's wrong tokens wait until its budget refills")
            XCTAssertNotNil(slowed.headers["retry-after"])
            let right = try Self.signIn(h, token: ServiceHarness.auditorToken)
            XCTAssertEqual(right.status, 303, "a right token signs in whatever the address's failures")
            XCTAssertTrue(right.headers["set-cookie"] != nil)
        }
    }

    /// Behind the README's load balancer every request arrives from the balancer's address: with
    /// its network in LEDGER_TRUSTED_PROXIES each client behind it has its own failure budget,
    /// taken from the right-most forwarded address the proxies did not write themselves; without
    /// it, forwarding headers are ignored (a client cannot pick its own address).
    func testBehindATrustedProxyEachClientHasItsOwnBudget() async throws {
        let wrong = "wrong-token-guessed-by-someone-0123456789"
        let limits = ["LEDGER_AUTH_FAILURE_BURST": "2", "LEDGER_AUTH_FAILURES_PER_MINUTE": "1"]
        try await withService(environment: limits.merging(["LEDGER_TRUSTED_PROXIES": "127.0.0.0/8, ::1"]) { $1 }) { h in
            func expect(_ headers: [String: String], token: String? = nil, _ status: Int, _ why: String = "",
                        line: UInt = #line) async throws {
                let got = try await h.request("GET", "/v1/refunds?limit=1", token: token ?? wrong, headers: headers).status
                XCTAssertEqual(got, status, why, line: line)
            }
            for _ in 0..<2 { try await expect(["X-Forwarded-For": "203.0.113.5"], 401) }
            try await expect(["X-Forwarded-For": "203.0.113.5"], 429, "the guessing client is slowed")
            try await expect(["X-Forwarded-For": "198.51.100.7, 203.0.113.5"], 429,
                           "what the client wrote left of the proxy's entry does not change who it is")
            try await expect(["X-Forwarded-For": "203.0.113.5, 127.0.0.9"], 429, "hops through trusted proxies are skipped")
            try await expect(["Forwarded": #"for="203.0.113.5:4711";proto=https"#], 429, "RFC 7239 Forwarded alike")
            try await expect(["X-Forwarded-For": "::ffff:203.0.113.5"], 429, "an IPv4-mapped address is the IPv4 client")
            try await expect(["X-Forwarded-For": "203.0.113.6"], 401, "another client behind the same balancer is not slowed")
            try await expect(["X-Forwarded-For": "203.0.113.5"], token: ServiceHarness.auditorToken, 200)
            // IPv6 clients count by their /64.
            for _ in 0..<2 { try await expect(["X-Forwarded-For": "2001:db8:1:2::1"], 401) }
            try await expect(["X-Forwarded-For": "2001:db8:1:2:ffff::9"], 429, "the same /64")
            try await expect(["X-Forwarded-For": "2001:db8:1:3::1"], 401, "another /64")
        }
        try await withService(environment: limits) { h in
            for client in ["203.0.113.1", "203.0.113.2"] {
                let a = try await h.request("GET", "/v1/refunds?limit=1", token: wrong, headers: ["X-Forwarded-For": client])
                XCTAssertEqual(a.status, 401)
            }
            let third = try await h.request("GET", "/v1/refunds?limit=1", token: wrong, headers: ["X-Forwarded-For": "203.0.113.3"])
            XCTAssertEqual(third.status, 429, "no trusted proxy: the forwarded address is the client's own claim, ignored")
        }
        for bad in ["10.0.0.0/33", "127.1", "0x7f000001", "10.0.0.0/8,example.com", "::1/129"] {
            XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_TRUSTED_PROXIES": bad]), bad) { error in
                XCTAssertTrue("\(error)".contains("LEDGER_TRUSTED_PROXIES"), "\(error)")
            }
        }
        XCTAssertEqual(try LedgerConfiguration.load(environment: ["LEDGER_TRUSTED_PROXIES": "10.0.0.0/8, fd00::/8"]).http.trustedProxies.map(\.description),
                       ["10.0.0.0/8", "fd00::/8"])
    }

    /// Posts the sign-in form (with its CSRF token and cookie) as a browser would.
    static func signIn(_ h: ServiceHarness, token: String) throws -> RawClient.Response {
        let page = try RawClient.request(port: h.server.port!, path: "/audit/login", headers: [:])
        let html = String(decoding: page.body, as: UTF8.self)
        let start = try XCTUnwrap(html.range(of: "name=\"csrf\" value=\"")).upperBound
        let csrf = String(html[start...].prefix { $0 != "\"" })
        let cookie = String(try XCTUnwrap(page.headers["set-cookie"]).prefix { $0 != ";" })
        let form = ["csrf": csrf, "token": token].map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)" }
            .joined(separator: "&")
        return try RawClient.request(port: h.server.port!, method: "POST", path: "/audit/login",
                                     headers: ["Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie], body: Array(form.utf8))
    }

    /// The limiter itself: a burst, then the rate; a refusal says how long to wait; memory bounded.
    func testRateLimiterBucket() {
        let clock = Mutex<Double>(0)
        let limiter = RateLimiter(.init(burst: 2, perMinute: 6), maxKeys: 3, now: { clock.withLock { $0 } })
        XCTAssertNil(limiter.spend("a"))
        XCTAssertNil(limiter.spend("a"))
        XCTAssertEqual(limiter.spend("a"), 10, "one unit every 10 s at 6 a minute")
        XCTAssertEqual(limiter.waitingTime("a"), 10)
        XCTAssertNil(limiter.waitingTime("b"), "another key is not limited")
        clock.withLock { $0 = 10 }
        XCTAssertNil(limiter.spend("a"))
        XCTAssertNotNil(limiter.spend("a"))
        // Fifty new keys at the same instant (every bucket equally old: age alone cannot choose,
        // and a dictionary's order would evict "a" sooner or later): the limited key stays.
        for key in (0..<50).map({ "k\($0)" }) { XCTAssertNil(limiter.spend(key)) }
        XCTAssertNotNil(limiter.waitingTime("a"), "a limited key is kept while keys that may act are forgotten")
        XCTAssertNil(limiter.waitingTime("k49"), "the newest key is kept and may act")
    }
}

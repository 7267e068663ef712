import Foundation
import HTTPServer
import LedgerMetrics
import Synchronization
import XCTest
@testable import Outbound

/// A loopback server for the client to talk to: records every request it sees.
final class LoopbackServer: Sendable {
    let server: HTTPServer
    private let seen = Mutex<[HTTPRequest]>([])

    init(_ answer: @escaping @Sendable (HTTPRequest) async -> HTTPResponse) throws {
        let box = Mutex<LoopbackServer?>(nil)
        var router = Router()
        for method in ["GET", "POST", "PUT"] {
            for pattern in ["/{a}", "/{a}/{b}", "/{a}/{b}/{c}"] {
                router.add(method, pattern) { request in
                    box.withLock { $0 }?.record(request)
                    return await answer(request)
                }
            }
        }
        server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 4), router: router)
        box.withLock { $0 = self }
        try server.start()
    }

    func record(_ r: HTTPRequest) { seen.withLock { $0.append(r) } }
    var requests: [HTTPRequest] { seen.withLock { $0 } }
    var port: Int { server.port! }
    var base: URL { URL(string: "http://127.0.0.1:\(port)")! }
    func shutdown() async { await server.shutdown(gracePeriod: .seconds(1)) }
}

final class OutboundClientTests: XCTestCase {
    func loopback(_ base: URL?, allow: Bool = true, timeout: Duration = .seconds(5), maxBytes: Int = 1 << 20,
                  metrics: MetricsRegistry? = nil) -> OutboundClient {
        OutboundClient(target: OutboundTarget(name: "test_api", baseURL: base, setting: "LEDGER_TEST_BASE_URL", allowsPlainHTTPLoopback: allow,
                                              connectTimeout: .seconds(2), timeout: timeout, maxResponseBytes: maxBytes),
                       metrics: metrics)
    }

    // MARK: https only

    /// Plain http to a host that is not loopback is refused before anything is sent, even when
    /// the loopback setting is on: the error comes back at once, names the target and the fix,
    /// and shows no path or query.
    func testPlainHTTPToANonLoopbackHostIsRefusedWithoutTraffic() async throws {
        for base in ["http://10.255.255.1:1/x", "http://api.example.test", "http://127.0.0.1.example.test", "http://[::2]:8080"] {
            let client = loopback(URL(string: base)!, allow: true)
            let started = ContinuousClock.now
            do {
                _ = try await client.send(OutboundRequest(method: "POST", path: "/secret/path", query: [("access_token", "TOKEN123")], body: Data("s".utf8)))
                XCTFail("\(base) accepted")
            } catch {
                guard case .plainHTTPRefused(let target, let setting, _, let loopback) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(target, "test_api")
                XCTAssertEqual(setting, "LEDGER_TEST_BASE_URL")
                XCTAssertFalse(loopback)
                XCTAssertTrue(error.message.contains("https"), error.message)
                XCTAssertFalse(error.message.contains("TOKEN123"), error.message)
                XCTAssertFalse(error.message.contains("/secret/path"), error.message)
            }
            XCTAssertLessThan(ContinuousClock.now - started, .milliseconds(200), "no connection was attempted")
            XCTAssertThrowsError(try client.target.validate(), base)
        }
        // Absolute URLs (webhooks) are checked the same way.
        let webhooks = loopback(nil, allow: true)
        do {
            _ = try await webhooks.send(OutboundRequest(method: "POST", path: "http://hooks.example.test/x?sig=1"))
            XCTFail("plain http webhook accepted")
        } catch {
            XCTAssertEqual(error.outcome, "refused")
        }
        for bad in ["ftp://example.test/", "https://user:pw@example.test/", "/relative"] {
            let c = loopback(URL(string: bad)!)
            XCTAssertThrowsError(try c.target.validate(), bad) { e in
                XCTAssertFalse("\(e)".contains("pw"), "\(e)")
            }
        }
        XCTAssertNoThrow(try loopback(URL(string: "https://api.example.test/prefix")!, allow: false).target.validate())
    }

    /// Loopback over plain http is refused unless the target allows it; the fake sees nothing.
    func testPlainHTTPToLoopbackNeedsTheSetting() async throws {
        let server = try LoopbackServer { _ in HTTPResponse(status: 200, body: Data("ok".utf8)) }
        defer { Task { await server.shutdown() } }
        for host in ["127.0.0.1", "localhost"] {
            let base = URL(string: "http://\(host):\(server.port)")!
            do {
                _ = try await loopback(base, allow: false).send(OutboundRequest(method: "GET", path: "/x"))
                XCTFail("loopback accepted without the setting")
            } catch {
                guard case .plainHTTPRefused(_, _, _, true) = error else { return XCTFail("\(error)") }
                XCTAssertTrue(error.message.contains(OutboundTarget.plainHTTPLoopbackSetting), error.message)
            }
        }
        XCTAssertEqual(server.requests.count, 0, "a refused request reaches nobody")
        let answer = try await loopback(server.base, allow: true).send(OutboundRequest(method: "GET", path: "/x"))
        XCTAssertEqual(answer.status, 200)
        XCTAssertEqual(answer.body, Data("ok".utf8))
        XCTAssertEqual(server.requests.count, 1)
        XCTAssertTrue(OutboundTarget.isLoopback("127.8.9.10"))
        XCTAssertTrue(OutboundTarget.isLoopback("[::1]"))
        XCTAssertFalse(OutboundTarget.isLoopback("128.0.0.1"))
        XCTAssertFalse(OutboundTarget.isLoopback("127.0.0.1.nip.io"))
        XCTAssertTrue(OutboundTarget.allowsPlainHTTPLoopback(environment: ["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]))
        XCTAssertFalse(OutboundTarget.allowsPlainHTTPLoopback(environment: ["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "no"]))
        XCTAssertFalse(OutboundTarget.allowsPlainHTTPLoopback(environment: [:]))
    }

    // MARK: redirects

    /// A 302 to another port is the answer: the second server never sees the request, whether it
    /// carried a bearer token, a body, or nothing at all.
    func testRedirectsAreNeverFollowed() async throws {
        let elsewhere = try LoopbackServer { _ in HTTPResponse(status: 200, body: Data("stolen".utf8)) }
        let location = "http://127.0.0.1:\(elsewhere.port)/collect"
        let redirector = try LoopbackServer { _ in HTTPResponse(status: 302, headers: [("Location", location)]) }
        defer { Task { await redirector.shutdown(); await elsewhere.shutdown() } }
        let client = loopback(redirector.base)
        let requests = [
            OutboundRequest(method: "GET", path: "/a", headers: [("Authorization", "Bearer SECRET")]),
            OutboundRequest(method: "POST", path: "/b", headers: [("Content-Type", "application/json")], body: Data(#"{"password":"x"}"#.utf8)),
            OutboundRequest(method: "GET", path: "/c"),
        ]
        for r in requests {
            let answer = try await client.send(r)
            XCTAssertEqual(answer.status, 302)
            XCTAssertTrue(answer.isRedirect)
            XCTAssertEqual(answer.header("Location"), location)
        }
        XCTAssertEqual(redirector.requests.count, 3)
        XCTAssertEqual(elsewhere.requests.count, 0, "the redirect target saw nothing")
    }

    // MARK: Retry-After, timeouts, size

    func testRetryAfterInBothFormsIsReturned() async throws {
        let server = try LoopbackServer { r in
            switch r.path {
            case "/seconds": HTTPResponse(status: 429, headers: [("Retry-After", "7")])
            case "/date": HTTPResponse(status: 503, headers: [("Retry-After", "Fri, 15 Jan 2027 08:00:00 GMT")])
            case "/apple": HTTPResponse(status: 429, headers: [("Retry-After", "1800000005000")])
            case "/junk": HTTPResponse(status: 429, headers: [("Retry-After", "soon")])
            default: HTTPResponse(status: 200)
            }
        }
        defer { Task { await server.shutdown() } }
        let now: Int64 = 1_799_999_000_000
        let client = OutboundClient(target: OutboundTarget(name: "t", baseURL: server.base, setting: "S", allowsPlainHTTPLoopback: true), clock: { now })
        let seconds = try await client.send(OutboundRequest(method: "GET", path: "/seconds"))
        XCTAssertEqual(seconds.status, 429)
        XCTAssertEqual(seconds.retryAt, now + 7_000)
        let date = try await client.send(OutboundRequest(method: "GET", path: "/date"))
        XCTAssertEqual(date.status, 503)
        XCTAssertEqual(date.retryAt, 1_800_000_000_000)
        let apple = try await client.send(OutboundRequest(method: "GET", path: "/apple"))
        XCTAssertEqual(apple.retryAt, 1_800_000_005_000)
        let junk = try await client.send(OutboundRequest(method: "GET", path: "/junk"))
        XCTAssertNil(junk.retryAt)
        let none = try await client.send(OutboundRequest(method: "GET", path: "/none"))
        XCTAssertNil(none.retryAt)
        XCTAssertEqual(RetryAfter.absoluteMillis("1800000005", now: now), 1_800_000_005_000, "absolute seconds")
        XCTAssertEqual(RetryAfter.absoluteMillis("Friday, 15-Jan-27 08:00:00 GMT", now: 0), 1_800_000_000_000, "RFC 850 date")
        XCTAssertNil(RetryAfter.absoluteMillis("-5", now: now))
    }

    /// A request made by a task already cancelled (a delivery claimed as the service stops) ends
    /// at once as `cancelled` and reaches nobody; one cancelled mid-flight ends as `cancelled`
    /// too. Neither may wait for URLSession to report the cancelled task: a shutdown once waited
    /// for ever on such a request (its server ignored SIGTERM after `make demo`).
    func testACancelledRequestEndsAtOnceWhetherOrNotItHadBegun() async throws {
        let server = try LoopbackServer { _ in
            try? await Task.sleep(for: .seconds(3))
            return HTTPResponse(status: 200)
        }
        defer { Task { await server.shutdown() } }
        let client = loopback(server.base, timeout: .seconds(30))
        for delay in [Duration.zero, .milliseconds(300)] {
            let started = ContinuousClock.now
            let request = Task { () -> OutboundError? in
                if delay == .zero { withUnsafeCurrentTask { $0?.cancel() } } else { try? await Task.sleep(for: delay) }
                do { _ = try await client.send(OutboundRequest(method: "GET", path: "/slow")); return nil } catch { return error as? OutboundError }
            }
            if delay > .zero {
                try await Task.sleep(for: delay + .milliseconds(200))
                request.cancel()
            }
            // Bounded: a request that never ends fails the test instead of hanging it.
            enum Outcome: Sendable { case ended(OutboundError?), stillRunning }
            let outcome = await withTaskGroup(of: Outcome.self) { group in
                group.addTask { .ended(await request.value) }
                group.addTask { try? await Task.sleep(for: .seconds(5)); return .stillRunning }
                let first = await group.next() ?? .stillRunning
                group.cancelAll()
                return first
            }
            guard case .ended(let ended) = outcome else { return XCTFail("a cancelled request (delay \(delay)) did not end within 5 s") }
            guard case .cancelled? = ended else { return XCTFail("delay \(delay): \(String(describing: ended))") }
            XCTAssertLessThan(ContinuousClock.now - started, .seconds(2), "delay \(delay)")
        }
        XCTAssertEqual(server.requests.count, 1, "the request cancelled before it began reached nobody; the other did")
    }

    func testASlowAnswerTimesOutTyped() async throws {
        let server = try LoopbackServer { _ in
            try? await Task.sleep(for: .seconds(3))
            return HTTPResponse(status: 200)
        }
        defer { Task { await server.shutdown() } }
        let client = loopback(server.base, timeout: .milliseconds(500))
        let started = ContinuousClock.now
        do {
            _ = try await client.send(OutboundRequest(method: "GET", path: "/slow"))
            XCTFail("a 3 s answer beat a 0.5 s timeout")
        } catch {
            guard case .timedOut(let target, _, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(target, "test_api")
            XCTAssertTrue(error.isRetryable)
        }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(2))
    }

    func testAnAnswerOverTheCapIsRefused() async throws {
        let big = Data(repeating: 0x41, count: 300_000)
        let server = try LoopbackServer { r in HTTPResponse(status: 200, body: r.path == "/big" ? big : Data(repeating: 0x42, count: 1000)) }
        defer { Task { await server.shutdown() } }
        let client = loopback(server.base, maxBytes: 100_000)
        do {
            _ = try await client.send(OutboundRequest(method: "GET", path: "/big"))
            XCTFail("300 kB read past a 100 kB cap")
        } catch {
            XCTAssertEqual(error, .responseTooLarge(target: "test_api", limit: 100_000))
        }
        let small = try await client.send(OutboundRequest(method: "GET", path: "/small"))
        XCTAssertEqual(small.body.count, 1000, "the same client still answers under the cap")
    }

    func testUnreachableIsTypedAndCancellationToo() async throws {
        let client = loopback(URL(string: "http://127.0.0.1:1")!)
        do {
            _ = try await client.send(OutboundRequest(method: "GET", path: "/x", query: [("token", "T0K")]))
            XCTFail("nothing listens on port 1")
        } catch {
            guard case .unreachable("test_api", _) = error else { return XCTFail("\(error)") }
            XCTAssertFalse(error.message.contains("T0K"))
        }
        let server = try LoopbackServer { _ in
            try? await Task.sleep(for: .seconds(3))
            return HTTPResponse(status: 200)
        }
        defer { Task { await server.shutdown() } }
        let slow = loopback(server.base)
        let task = Task { try await slow.send(OutboundRequest(method: "GET", path: "/slow")) }
        try await Task.sleep(for: .milliseconds(200))
        task.cancel()
        do {
            _ = try await task.value
            XCTFail("cancelled, yet answered")
        } catch {
            XCTAssertEqual(error as? OutboundError, .cancelled(target: "test_api"))
        }
    }

    /// Paths keep the base URL's prefix; query values are escaped so `+`, `/`, `=` arrive intact.
    func testURLsAndQueryEncoding() async throws {
        let server = try LoopbackServer { _ in HTTPResponse(status: 200) }
        defer { Task { await server.shutdown() } }
        let client = loopback(server.base.appendingPathComponent("prefix/"))
        _ = try await client.send(OutboundRequest(method: "POST", path: "/x/y", query: [("access_token", "AT+/=x y"), ("pay_sig", "ab")],
                                                   headers: [("Content-Type", "application/json")], body: Data("{}".utf8)))
        let seen = try XCTUnwrap(server.requests.last)
        XCTAssertEqual(seen.path, "/prefix/x/y")
        XCTAssertEqual(seen.query["access_token"], "AT+/=x y")
        XCTAssertEqual(seen.query["pay_sig"], "ab")
        XCTAssertEqual(seen.body, Data("{}".utf8))
        XCTAssertEqual(seen.headers["Cookie"], nil)
        XCTAssertThrowsError(try client.url(for: OutboundRequest(method: "GET", path: "https://elsewhere.example/x")))
    }

    // MARK: metrics

    func testOneMetricsFamilyPerTargetByOutcome() async throws {
        let server = try LoopbackServer { r in HTTPResponse(status: r.path == "/missing" ? 404 : 200) }
        defer { Task { await server.shutdown() } }
        let registry = MetricsRegistry()
        let a = loopback(server.base, metrics: registry)
        let b = OutboundClient(target: OutboundTarget(name: "other_api", baseURL: URL(string: "http://example.test")!, setting: "S"), metrics: registry)
        _ = try await a.send(OutboundRequest(method: "GET", path: "/ok"))
        _ = try await a.send(OutboundRequest(method: "GET", path: "/ok"))
        _ = try await a.send(OutboundRequest(method: "GET", path: "/missing"))
        _ = try? await b.send(OutboundRequest(method: "GET", path: "/x?token=SECRET"))
        let text = await registry.render()
        XCTAssertTrue(text.contains(#"ledger_outbound_requests_total{outcome="2xx",target="test_api"} 2"#), text)
        XCTAssertTrue(text.contains(#"ledger_outbound_requests_total{outcome="4xx",target="test_api"} 1"#), text)
        XCTAssertTrue(text.contains(#"ledger_outbound_requests_total{outcome="refused",target="other_api"} 1"#), text)
        XCTAssertTrue(text.contains(#"ledger_outbound_request_duration_seconds_count{target="test_api"} 3"#), text)
        XCTAssertEqual(text.components(separatedBy: "# TYPE ledger_outbound_requests_total counter").count, 2, text)
        XCTAssertFalse(text.contains("SECRET"))
    }
}

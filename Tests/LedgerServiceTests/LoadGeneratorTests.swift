import AppStore
import Foundation
import HTTPServer
@testable import LedgerTesting
import Postgres
import Synchronization
import XCTest
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The load generator against a real HTTPServer on loopback: it must count exactly what the
/// server saw, report statuses by index, keep connections alive, and refuse non-loopback targets.
final class LoadGeneratorTests: XCTestCase {
    private final class Counter: Sendable {
        let requests = Atomic<Int>(0)
        let bodyBytes = Atomic<Int>(0)
        let remotePorts = Mutex<Set<String>>([])
    }

    private var server: HTTPServer?

    override func tearDown() {
        if let server {
            let done = DispatchSemaphore(value: 0)
            Task {
                await server.shutdown(gracePeriod: .seconds(2))
                done.signal()
            }
            done.wait()
        }
        server = nil
        super.tearDown()
    }

    /// GET /ok → 200 "ok"; GET /status/{code} → that status; POST /echo → 200 with the body length.
    private func start(_ counter: Counter) throws -> LoopbackTarget {
        var router = Router()
        router.add("GET", "/ok") { request in
            counter.requests.add(1, ordering: .relaxed)
            counter.remotePorts.withLock { _ = $0.insert(request.remoteAddress ?? "?") }
            return .text(200, "ok")
        }
        router.add("GET", "/status/{code}") { request in
            counter.requests.add(1, ordering: .relaxed)
            return .error(status: Int(request.pathParameters["code"] ?? "") ?? 500, code: "chosen", message: "status chosen by the test")
        }
        router.add("POST", "/echo") { request in
            counter.requests.add(1, ordering: .relaxed)
            counter.bodyBytes.add(request.body.count, ordering: .relaxed)
            return .text(200, "\(request.body.count)")
        }
        router.add("GET", "/slow") { _ in
            try? await Task.sleep(for: .milliseconds(300))
            return .text(200, "late")
        }
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2), router: router)
        try server.start()
        self.server = server
        return try LoopbackTarget(host: "127.0.0.1", port: XCTUnwrap(server.port))
    }

    func testCountLimitSendsExactlyThatManyOverKeptAliveConnections() async throws {
        let counter = Counter()
        let target = try start(counter)
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: 4, limit: .count(400)),
                                          cycling: [LoadRequest(path: "/ok")])
        let report = await generator.run()
        XCTAssertEqual(report.attempted, 400)
        XCTAssertEqual(report.count(200), 400)
        XCTAssertEqual(report.transportErrors, 0)
        XCTAssertEqual(counter.requests.load(ordering: .relaxed), 400, "the server saw exactly what the generator reports")
        XCTAssertEqual(report.latency.count, 400)
        XCTAssertLessThanOrEqual(report.latency.p50, report.latency.p99)
        XCTAssertLessThanOrEqual(report.latency.p99, report.latency.max)
        XCTAssertGreaterThan(report.requestsPerSecond, 0)
        // Keep-alive: 400 requests arrived from no more than 4 client sockets.
        let ports = counter.remotePorts.withLock { $0 }
        XCTAssertLessThanOrEqual(ports.count, 4, "\(ports)")
    }

    func testStatusesAndBodiesAreReportedPerRequestIndex() async throws {
        let counter = Counter()
        let target = try start(counter)
        let body = Data(repeating: 0x61, count: 3000)
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: 3, limit: .count(90), recordOutcomes: true)) { i in
            switch i % 3 {
            case 0: return LoadRequest(path: "/ok")
            case 1: return LoadRequest(path: "/status/503")
            default: return LoadRequest(method: "POST", path: "/echo", headers: [("Content-Type", "application/octet-stream")], body: body)
            }
        }
        let report = await generator.run()
        XCTAssertEqual(report.statusCounts, [200: 60, 503: 30])
        XCTAssertEqual(report.outcomes.count, 90)
        for (i, outcome) in report.outcomes.enumerated() {
            XCTAssertEqual(outcome, .status(i % 3 == 1 ? 503 : 200), "request \(i)")
        }
        XCTAssertEqual(counter.bodyBytes.load(ordering: .relaxed), 30 * 3000, "bodies arrived whole")
        XCTAssertTrue(report.sampleBodies[503]?.contains("chosen") ?? false, "\(report.sampleBodies)")
    }

    func testSourceEndingStopsTheRun() async throws {
        let counter = Counter()
        let target = try start(counter)
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: 5, limit: .duration(.seconds(10)))) { i in
            i < 37 ? LoadRequest(path: "/ok") : nil
        }
        let report = await generator.run()
        XCTAssertEqual(report.attempted, 37)
        XCTAssertEqual(report.count(200), 37)
        XCTAssertLessThan(report.seconds, 5, "nil from the source ends the run before its duration")
    }

    func testDurationLimitAndFixedRate() async throws {
        let counter = Counter()
        let target = try start(counter)
        // 200 req/s for 0.5 s: 100 requests are due, none later than the deadline.
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: 4, limit: .duration(.milliseconds(500)), rate: 200),
                                          cycling: [LoadRequest(path: "/ok")])
        let report = await generator.run()
        XCTAssertEqual(report.attempted, 100)
        XCTAssertEqual(report.count(200), 100)
        XCTAssertGreaterThanOrEqual(report.seconds, 0.49)
        XCTAssertLessThan(report.seconds, 3)
    }

    func testRequestTimeoutIsATransportErrorNotAHang() async throws {
        let counter = Counter()
        let target = try start(counter)
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: 2, limit: .count(2), requestTimeout: .milliseconds(100),
                                                                              recordOutcomes: true),
                                          cycling: [LoadRequest(path: "/slow")])
        let report = await generator.run()
        XCTAssertEqual(report.transportErrors, 2)
        XCTAssertEqual(report.transportErrorKinds["timeout"], 2, "\(report.transportErrorKinds)")
        XCTAssertEqual(report.outcomes, [.transportError, .transportError])
        XCTAssertLessThan(report.seconds, 0.3 + 0.2)
    }

    func testNothingListeningCountsConnectErrorsAndEnds() async throws {
        // A port that was just free: bind, note it, close.
        let probe = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 1)) { _ in .text(200, "") }
        try probe.start()
        let port = try XCTUnwrap(probe.port)
        await probe.shutdown(gracePeriod: .seconds(1))
        let generator = try LoadGenerator(target: LoopbackTarget(host: "127.0.0.1", port: port),
                                          options: LoadOptions(connections: 2, limit: .count(10), reconnectDelay: .milliseconds(1),
                                                               recordOutcomes: true),
                                          cycling: [LoadRequest(path: "/ok")])
        let report = await generator.run()
        XCTAssertEqual(report.attempted, 0, "nothing was written")
        XCTAssertEqual(report.answered, 0)
        XCTAssertEqual(report.transportErrorKinds["connect"], 10)
        XCTAssertEqual(report.outcomes, Array(repeating: .notConnected, count: 10))
    }

    func testStopEndsADurationRunEarly() async throws {
        let counter = Counter()
        let target = try start(counter)
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: 2, limit: .duration(.seconds(30))),
                                          cycling: [LoadRequest(path: "/ok")])
        let running = Task { await generator.run() }
        while generator.progress.ok < 20 { try await Task.sleep(for: .milliseconds(5)) }
        generator.stop()
        let report = await running.value
        XCTAssertLessThan(report.seconds, 10)
        XCTAssertEqual(report.answered, counter.requests.load(ordering: .relaxed))
        XCTAssertGreaterThanOrEqual(report.answered, 20)
    }

    func testOnlyLoopbackTargetsAreAccepted() throws {
        for url in ["http://127.0.0.1:8080", "http://127.1.2.3:80/x", "http://localhost:9", "http://[::1]:8080"] {
            XCTAssertNoThrow(try LoopbackTarget(url: url), url)
        }
        let refused = ["http://10.0.0.1:80", "http://8.8.8.8:80", "http://0.0.0.0:8080", "http://128.0.0.1:80",
                       "http://example.com:80", "http://127.0.0.1.nip.io:80", "http://[::2]:80", "http://[::ffff:8.8.8.8]:80",
                       "http://[::]:80"]
        for url in refused {
            XCTAssertThrowsError(try LoopbackTarget(url: url), url) { error in
                guard case LoadGeneratorError.notLoopback = error else { return XCTFail("\(url): \(error)") }
            }
        }
        for url in ["https://127.0.0.1:443", "ftp://127.0.0.1:21", "127.0.0.1:80", "http://:80"] {
            XCTAssertThrowsError(try LoopbackTarget(url: url), url) { error in
                guard case LoadGeneratorError.invalidURL = error else { return XCTFail("\(url): \(error)") }
            }
        }
        XCTAssertThrowsError(try LoopbackTarget(host: "127.0.0.1", port: 0))
        XCTAssertThrowsError(try LoadGenerator(target: LoopbackTarget(host: "127.0.0.1", port: 1), options: LoadOptions(limit: LoadLimit())) { _ in nil })
        XCTAssertThrowsError(try LoadGenerator(target: LoopbackTarget(host: "127.0.0.1", port: 1), options: LoadOptions(connections: 0, limit: .count(1))) { _ in nil })
    }

    /// The ingest benchmark's notifications pass the real verifier (chain, OIDs, nested JWS
    /// agreeing with the outer) and are all distinct; the report carries the given baseline.
    func testIngestBenchmarkPostsDistinctVerifiableNotifications() async throws {
        var chain = AppleTestAuthority.ChainOptions()
        chain.caCurve = .p256
        let authority = try AppleTestAuthority.mint(chain)
        let ingestor = AppleNotificationIngestor(
            verifier: authority.verifier(),
            acceptance: try AppleAcceptance(bundleIds: ["com.example"], appAppleIds: [], environments: ["Sandbox"]))
        final class Seen: Sendable {
            let keys = Mutex<[String: Int]>([:])
            let refused = Atomic<Int>(0)
        }
        let seen = Seen()
        var router = Router()
        router.add("POST", "/v1/apple/notifications") { request in
            do throws(AppleVerificationError) {
                let event = try ingestor.ingestV2(body: request.body)
                seen.keys.withLock { $0[event.dedupeKey, default: 0] += 1 }
                return .text(200, "stored")
            } catch {
                seen.refused.add(1, ordering: .relaxed)
                return .error(status: 401, code: error.code, message: error.message)
            }
        }
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2), router: router)
        try server.start()
        self.server = server
        let options = IngestBenchmark.Options(
            baseURL: "http://127.0.0.1:\(try XCTUnwrap(server.port))", notifications: 120, connections: 4, warmup: 10,
            baseline: { connections in BaselineMeasurement(name: "fixed", perSecond: 50, detail: "\(connections) clients") })
        let report = try await IngestBenchmark.run(options, authority: authority)
        XCTAssertEqual(seen.refused.load(ordering: .relaxed), 0)
        let counted = seen.keys.withLock { $0 }
        XCTAssertEqual(counted.count, 130, "warm-up and measured notifications are all distinct")
        XCTAssertTrue(counted.values.allSatisfy { $0 == 1 })
        XCTAssertEqual(report.notifications, 120)
        XCTAssertEqual(report.load.count(200), 120)
        XCTAssertEqual(report.baseline?.detail, "4 clients")
        XCTAssertEqual(try XCTUnwrap(report.ratio), report.notificationsPerSecond / 50, accuracy: 1e-9)
        XCTAssertTrue(report.text.contains("ratio"), report.text)

        // A service that does not trust the authority refuses everything: the benchmark says so.
        let stranger = try AppleTestAuthority.mint(chain)
        do {
            _ = try await IngestBenchmark.run(IngestBenchmark.Options(baseURL: options.baseURL, notifications: 5, connections: 2, warmup: 0), authority: stranger)
            XCTFail("a refused benchmark must throw")
        } catch let error as BenchmarkError {
            guard case .rejected(401, 5, _, _) = error else { return XCTFail("\(error)") }
        }
    }

    func testReadBenchmarkSendsTheTokenAndMeasuresBothModes() async throws {
        final class Seen: Sendable { let ids = Mutex<[String: Int]>([:]) }
        let seen = Seen()
        var router = Router()
        router.add("GET", "/v1/subscriptions/{id}") { request in
            guard request.headers["Authorization"] == "Bearer app-token-for-tests-0123456789abcdef" else { return .error(status: 401, code: "unauthorized", message: "token") }
            let id = request.pathParameters["id"] ?? ""
            seen.ids.withLock { $0[id, default: 0] += 1 }
            return .text(200, "{\"originalTransactionId\":\"\(id)\"}")
        }
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2), router: router)
        try server.start()
        self.server = server
        let base = "http://127.0.0.1:\(try XCTUnwrap(server.port))"
        let report = try await ReadBenchmark.run(ReadBenchmark.Options(
            baseURL: base, ids: ["1000000000000001", "1000000000000002"], token: "app-token-for-tests-0123456789abcdef", connections: 2,
            duration: .milliseconds(300), fixedRate: 100, warmup: .zero))
        XCTAssertGreaterThan(report.maximum.count(200), 0)
        XCTAssertEqual(report.atFixedRate?.attempted, 30, "100 req/s for 0.3 s")
        XCTAssertEqual(Set(seen.ids.withLock { $0 }.keys), ["1000000000000001", "1000000000000002"])
        XCTAssertTrue(report.text.contains("at   100/s"), report.text)
        do {
            _ = try await ReadBenchmark.run(ReadBenchmark.Options(baseURL: base, ids: ["1"], token: "wrong", connections: 1,
                                                                  duration: .milliseconds(50), fixedRate: nil, warmup: .zero))
            XCTFail("a wrong token must end the benchmark")
        } catch let error as BenchmarkError {
            guard case .rejected(401, _, _, _) = error else { return XCTFail("\(error)") }
        }
    }

    /// Opt-in (LEDGER_MEASURE_URLSESSION=1): the measurement behind the choice of a socket client
    /// (see LoadGenerator.swift). Prints both rates; asserts only that both got every answer.
    func testURLSessionComparison() async throws {
        guard ProcessInfo.processInfo.environment["LEDGER_MEASURE_URLSESSION"] == "1" else {
            throw XCTSkip("set LEDGER_MEASURE_URLSESSION=1 to measure URLSession against the socket client")
        }
        let counter = Counter()
        let target = try start(counter)
        let total = 20_000
        let connections = 32
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = connections
        let session = URLSession(configuration: configuration)
        let url = URL(string: "\(target)/ok")!
        let next = Counter()
        let clock = ContinuousClock()
        let started = clock.now
        let ok = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<connections {
                group.addTask {
                    var ok = 0
                    while next.requests.wrappingAdd(1, ordering: .relaxed).oldValue < total {
                        if let (_, response) = try? await session.data(from: url), (response as? HTTPURLResponse)?.statusCode == 200 { ok += 1 }
                    }
                    return ok
                }
            }
            return await group.reduce(0, +)
        }
        let urlSessionSeconds = (clock.now - started) / .seconds(1)
        session.invalidateAndCancel()
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(total)),
                                          cycling: [LoadRequest(path: "/ok")])
        let report = await generator.run()
        print(String(format: "URLSession: %.0f req/s; socket client: %.0f req/s (%d connections, %d requests)",
                     Double(total) / urlSessionSeconds, report.requestsPerSecond, connections, total))
        XCTAssertEqual(ok, total)
        XCTAssertEqual(report.count(200), total)
    }
}

/// The reliability suite's audit must see loss, duplicates and phantom events when they exist —
/// otherwise its "lost 0" proves nothing. Real PostgreSQL: rows are appended through
/// append_events() into a scratch database, then tallied against invented client outcomes.
final class ReliabilityAuditTests: XCTestCase {
    func testTallyReportsLossDuplicatesAndPhantoms() throws {
        let options = try ReliabilityOptions(ledgerBinary: "/bin/true")
        let harness = try Harness(scenario: "audit-test", options: options)
        defer { harness.finish() }
        let mint = NotificationMint(authority: harness.authority, runTag: 0xfeed)
        let connection = try harness.database.connect()
        func store(stream: String, key: String) throws {
            _ = try connection.query("""
                SELECT * FROM append_events(ARRAY[$1], ARRAY[$2], ARRAY['apple'], ARRAY['DID_RENEW'], ARRAY[NULL]::text[],
                    ARRAY[NULL]::timestamptz[], ARRAY[NULL]::timestamptz[], ARRAY['{}']::jsonb[], ARRAY['\\x00']::bytea[])
                """, [.text(stream), .text(key)])
        }
        // Notification 0 stored once; 1 acknowledged but missing; 2 stored under two streams
        // (one key, two rows); 3 failed in transit and was not stored; a key nobody sent.
        try store(stream: "s0", key: mint.dedupeKey(0))
        try store(stream: "s2", key: mint.dedupeKey(2))
        try store(stream: "other", key: mint.dedupeKey(2))
        try store(stream: "s9", key: "never-sent")
        var report = ReliabilityReport(scenario: "audit-test")
        try harness.tally(&report, outcomes: [.status(200), .status(200), .status(200), .transportError, .notConnected, .notSent], mint: mint)
        XCTAssertEqual(report.sent, 4)
        XCTAssertEqual(report.acknowledged, 3)
        XCTAssertEqual(report.stored, 2)
        XCTAssertEqual(report.duplicates, 1)
        XCTAssertEqual(report.lost, 1)
        XCTAssertFalse(report.passed)
        XCTAssertEqual(report.checks.filter { !$0.passed }.map(\.name), ["no event that was never sent"])
        XCTAssertTrue(ReliabilitySuite.table([report]).contains("FAIL"))

        var clean = ReliabilityReport(scenario: "clean")
        try harness.tally(&clean, outcomes: [.status(200), .status(503)], mint: mint, notificationOf: { _ in 0 })
        XCTAssertEqual(clean.lost, 0)
        XCTAssertEqual(clean.stored, 1)
    }

    /// The ingest benchmark's baseline really runs pgbench (AppendBenchmark's runner) in a scratch database.
    func testPgbenchBaselineMeasuresSingleRowInserts() async throws {
        let server = try XCTUnwrap(ProcessInfo.processInfo.environment["LEDGER_TEST_DATABASE_URL"], "run under make test")
        let baseline = try await IngestBenchmark.pgbenchBaseline(serverConninfo: server, transactionsPerClient: 20, rawBytes: 2048)(2)
        XCTAssertGreaterThan(baseline.perSecond, 0)
        XCTAssertTrue(baseline.detail.contains("2 clients"), baseline.detail)
    }

    func testUnknownScenarioIsRefused() async throws {
        let options = try ReliabilityOptions(ledgerBinary: "/bin/true")
        do {
            _ = try await ReliabilitySuite.run(name: "meteor-strike", options)
            XCTFail("unknown scenario accepted")
        } catch let error as ReliabilityError {
            guard case .unknownScenario = error else { return XCTFail("\(error)") }
        }
    }
}

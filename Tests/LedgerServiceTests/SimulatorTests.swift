import AppStore
import CryptoTesting
import Foundation
import HTTPServer
import LedgerCore
import LedgerTesting
import Synchronization
import XCTest

/// The simulator against a stub of the Apple webhook: a real HTTPServer whose handler verifies
/// every body with the authority's verifier (signatures, chain, nested JWS, app and environment,
/// through the production `AppleNotificationIngestor`) and answers stored / duplicate by UUID.
final class SimulatorTests: XCTestCase {
    /// 2026-01-01T00:00:00Z: inside the minted chains' validity, so verification at signedDate works.
    static let start: EpochMillis = 1_767_225_600_000

    private var servers: [HTTPServer] = []

    override func tearDown() async throws {
        for s in servers { await s.shutdown(gracePeriod: .seconds(2)) }
        servers = []
    }

    func options(customers: Int = 6, days: Int = 120, seed: UInt64 = 7) -> SimulationOptions {
        var o = SimulationOptions(customers: customers, days: days, start: Self.start)
        o.seed = seed
        return o
    }

    // MARK: - the stub webhook

    final class Stub: Sendable {
        let ingestor: AppleNotificationIngestor
        /// Arrival order of dedupe keys, refusals, and statuses forced for the first N requests.
        let state = Mutex((arrivals: [String](), seen: Set<String>(), refusals: [String](), forceStatus: [Int]()))

        init(trusting authority: AppleTestAuthority, environments: Set<String> = ["Sandbox"], appAppleIds: Set<Int64> = []) throws {
            ingestor = AppleNotificationIngestor(
                verifier: authority.verifier(),
                acceptance: try AppleAcceptance(bundleIds: ["com.example.app"], appAppleIds: appAppleIds, environments: environments))
        }

        var arrivals: [String] { state.withLock { $0.arrivals } }
        var refusals: [String] { state.withLock { $0.refusals } }

        func respond(_ request: HTTPRequest) -> HTTPResponse {
            if let forced = state.withLock({ s in s.forceStatus.isEmpty ? nil : s.forceStatus.removeFirst() }) {
                return .error(status: forced, code: "forced", message: "stub answers \(forced) on purpose")
            }
            do {
                let event = try ingestor.ingestV2(body: request.body)
                let duplicate = state.withLock { s in
                    s.arrivals.append(event.dedupeKey)
                    return !s.seen.insert(event.dedupeKey).inserted
                }
                return .json(200, Data(#"{"status":"\#(duplicate ? "duplicate" : "stored")","position":1}"#.utf8))
            } catch {
                state.withLock { $0.refusals.append(error.code) }
                return .error(status: 401, code: error.code, message: error.message)
            }
        }
    }

    func serve(_ stub: Stub) throws -> String {
        var router = Router()
        router.add("POST", NotificationPoster.path) { request in stub.respond(request) }
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2), router: router)
        try server.start()
        servers.append(server)
        return "http://127.0.0.1:\(try XCTUnwrap(server.port))"
    }

    func uuids(_ s: Simulator) -> [String] {
        s.lifecycles().flatMap(\.notifications).map(\.notificationUUID)
    }

    // MARK: - tests

    func testEveryNotificationIsPostedOnceVerifiedAndInDeliveryOrder() async throws {
        let simulator = try Simulator(options: options())
        let deliveries = try simulator.deliveries()
        let generated = uuids(simulator)
        XCTAssertGreaterThan(generated.count, 12, "six customers over 120 days make more than two notifications each")
        XCTAssertEqual(Set(generated).count, generated.count, "the generator's retries are off: every UUID once")
        XCTAssertEqual(deliveries.count, generated.count)

        let stub = try Stub(trusting: simulator.authority)
        let poster = try NotificationPoster(baseURL: serve(stub), concurrency: 1)
        let progress = Mutex(0)
        let tally = await poster.post(deliveries) { n in progress.withLock { $0 = max($0, n) } }

        XCTAssertEqual(stub.refusals, [], "every simulated body verifies: signatures, chain, nested JWS, app, environment")
        XCTAssertEqual(tally.sent, deliveries.count)
        XCTAssertEqual(tally.stored, deliveries.count)
        XCTAssertEqual(tally.duplicate, 0)
        XCTAssertEqual(tally.failures, 0)
        XCTAssertEqual(progress.withLock { $0 }, deliveries.count)
        // One connection: the service sees exactly the simulator's order, which is delivery order.
        XCTAssertEqual(stub.arrivals, deliveries.map(\.notificationUUID))
        XCTAssertEqual(Set(stub.arrivals), Set(generated))
        let notifications = simulator.lifecycles().flatMap(\.notifications)
        let delivered = Dictionary(uniqueKeysWithValues: notifications.map { ($0.notificationUUID, $0.deliveredAt) })
        let times = deliveries.map { delivered[$0.notificationUUID]! }
        XCTAssertEqual(times, times.sorted(), "chronological mode follows the App Store's delivery times")
    }

    func testShuffleChangesTheOrderButNotTheSet() async throws {
        let plain = try Simulator(options: options()).deliveries()
        var o = options()
        o.shuffle = true
        let simulator = try Simulator(options: o)
        let shuffled = try simulator.deliveries()
        XCTAssertNotEqual(shuffled.map(\.notificationUUID), plain.map(\.notificationUUID))
        XCTAssertEqual(shuffled.map(\.notificationUUID).sorted(), plain.map(\.notificationUUID).sorted())
        XCTAssertEqual(try simulator.deliveries().map(\.notificationUUID), shuffled.map(\.notificationUUID),
                       "the shuffle is seeded: the same options give the same order")

        let stub = try Stub(trusting: simulator.authority)
        let tally = try await NotificationPoster(baseURL: serve(stub), concurrency: 4).post(shuffled)
        XCTAssertEqual(tally.stored, plain.count)
        XCTAssertEqual(tally.failures, 0)
        XCTAssertEqual(stub.arrivals.sorted(), plain.map(\.notificationUUID).sorted())
    }

    func testDuplicatesRepeatEveryNotificationExactlyKTimes() async throws {
        var o = options(customers: 4)
        o.duplicates = 2
        let simulator = try Simulator(options: o)
        let deliveries = try simulator.deliveries()
        let distinct = Set(uuids(simulator))
        XCTAssertEqual(deliveries.count, distinct.count * 3)
        // A retry is the same bytes, not a re-signed copy.
        let bodies = Dictionary(grouping: deliveries, by: \.notificationUUID).mapValues { Set($0.map(\.body)) }
        XCTAssertTrue(bodies.values.allSatisfy { $0.count == 1 })

        let stub = try Stub(trusting: simulator.authority)
        let tally = try await NotificationPoster(baseURL: serve(stub), concurrency: 6).post(deliveries)
        XCTAssertEqual(tally.sent, distinct.count * 3)
        XCTAssertEqual(tally.stored, distinct.count)
        XCTAssertEqual(tally.duplicate, distinct.count * 2)
        let counts = Dictionary(grouping: stub.arrivals, by: { $0 }).mapValues(\.count)
        XCTAssertEqual(Set(counts.keys), distinct)
        XCTAssertEqual(Set(counts.values), [3], "each notification arrives once plus exactly K = 2 retries")
    }

    func testSameSeedGivesSameNotificationsAndAStableAuthority() throws {
        let first = try Simulator(options: options(seed: 99))
        let again = try Simulator(options: options(seed: 99))
        let other = try Simulator(options: options(seed: 100))
        let a = try first.deliveries()
        let b = try again.deliveries()
        XCTAssertEqual(a.map(\.notificationUUID), b.map(\.notificationUUID))
        XCTAssertEqual(a.map(\.type), b.map(\.type))
        XCTAssertNotEqual(try other.deliveries().map(\.notificationUUID), a.map(\.notificationUUID))

        // A restarted simulate (a new process re-deriving the authority) is trusted by a service
        // that was given the first run's root; another seed's is not.
        XCTAssertEqual(try first.authority.root.publicKey().subjectPublicKeyInfoDER,
                       try again.authority.root.publicKey().subjectPublicKeyInfoDER)
        let ingestor = try Stub(trusting: first.authority).ingestor
        XCTAssertNoThrow(try ingestor.ingestV2(body: b[0].body))
        XCTAssertThrowsError(try ingestor.ingestV2(body: other.deliveries()[0].body)) { error in
            XCTAssertEqual((error as? AppleVerificationError)?.code, "untrusted_chain")
        }
    }

    func testWriteRootKeepsAnEquivalentFileAndTheInspectorVerifiesABody() throws {
        let simulator = try Simulator(options: options(customers: 1))
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sim-root-\(UUID().uuidString).der").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        XCTAssertTrue(try simulator.writeRoot(to: path))
        let written = try Data(contentsOf: URL(fileURLWithPath: path))
        XCTAssertFalse(try Simulator(options: options(customers: 1)).writeRoot(to: path), "same seed: the service's file is left alone")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), written)
        XCTAssertTrue(try Simulator(options: options(customers: 1, seed: 8)).writeRoot(to: path), "another seed replaces it")

        let env = Dictionary(uniqueKeysWithValues: simulator.serviceEnvironment(rootPath: path).map { ($0.name, $0.value) })
        XCTAssertEqual(env["LEDGER_APPLE_ROOT_CERTS"], path)
        XCTAssertEqual(env["LEDGER_APPLE_BUNDLE_IDS"], "com.example.app")
        XCTAssertEqual(env["LEDGER_APPLE_ENVIRONMENTS"], "Sandbox")

        let report = try PayloadInspector(verifier: simulator.authority.verifier()).inspect(simulator.deliveries()[0].body)
        XCTAssertTrue(report.allVerified)
        XCTAssertEqual(report.outcomes.map(\.path), ["signedPayload", "data.signedTransactionInfo", "data.signedRenewalInfo"])
    }

    func testBulkSigningDecodesExactlyLikeTheAuthoritysOwnSigning() throws {
        let simulator = try Simulator(options: options(customers: 2))
        let inspector = PayloadInspector(verifier: simulator.authority.verifier())
        func decoded(_ body: Data) throws -> NSDictionary {
            let report = try inspector.inspect(body)
            XCTAssertTrue(report.allVerified)
            var object = try XCTUnwrap(JSONSerialization.jsonObject(with: report.decodedJSON) as? [String: Any])
            // The nested JWS strings differ run to run (ECDSA); what they decode to must not.
            var data = try XCTUnwrap(object["data"] as? [String: Any])
            XCTAssertNotNil(data.removeValue(forKey: "signedTransactionInfo"))
            XCTAssertNotNil(data.removeValue(forKey: "signedRenewalInfo"))
            object["data"] = data
            return object as NSDictionary
        }
        for n in simulator.lifecycles().flatMap(\.notifications).prefix(4) {
            var notification = n.notification
            notification.data?.bundleVersion = "1"
            let reference = try simulator.authority.signNotification(notification, transaction: n.transaction, renewal: n.renewal)
            XCTAssertEqual(try decoded(simulator.delivery(for: n).body), try decoded(reference))
        }
    }

    func testProductionCarriesTheAppAppleIdTheServiceRequires() async throws {
        var o = options(customers: 2)
        o.environment = "Production"
        o.appAppleId = 555
        let simulator = try Simulator(options: o)
        let deliveries = try simulator.deliveries()
        let accepting = try Stub(trusting: simulator.authority, environments: ["Production"], appAppleIds: [555])
        let tally = try await NotificationPoster(baseURL: serve(accepting), concurrency: 2).post(deliveries)
        XCTAssertEqual(tally.stored, deliveries.count)
        XCTAssertEqual(accepting.refusals, [])

        let otherApp = try Stub(trusting: simulator.authority, environments: ["Production"], appAppleIds: [556])
        let refused = try await NotificationPoster(baseURL: serve(otherApp), concurrency: 2).post(deliveries)
        XCTAssertEqual(refused.stored, 0)
        XCTAssertEqual(refused.otherStatuses, [401: deliveries.count])
        XCTAssertEqual(Set(otherApp.refusals), ["app_mismatch"])
    }

    func testFailuresAreCountedWithTheirFirstBodies() async throws {
        let simulator = try Simulator(options: options(customers: 3))
        let deliveries = try simulator.deliveries()
        let stub = try Stub(trusting: simulator.authority)
        stub.state.withLock { $0.forceStatus = [503, 503, 500] }
        let tally = try await NotificationPoster(baseURL: serve(stub), concurrency: 1).post(deliveries)
        XCTAssertEqual(tally.otherStatuses, [503: 2, 500: 1])
        XCTAssertEqual(tally.stored, deliveries.count - 3)
        XCTAssertEqual(tally.failures, 3)
        XCTAssertEqual(tally.firstErrors.count, 3)
        XCTAssertTrue(tally.firstErrors[0].hasPrefix("HTTP 503 for \(deliveries[0].type) \(deliveries[0].notificationUUID)"), tally.firstErrors[0])
        XCTAssertTrue(tally.firstErrors[0].contains("stub answers 503 on purpose"))

        // Nothing listens on this port any more: every request is a transport error, none hangs.
        let closed = try serve(stub)
        await servers.removeLast().shutdown(gracePeriod: .seconds(1))
        let none = try await NotificationPoster(baseURL: closed, concurrency: 2, timeout: 5).post(Array(deliveries.prefix(3)))
        XCTAssertEqual(none.sent, 3)
        XCTAssertEqual(none.transportErrors, 3)
        XCTAssertEqual(none.stored, 0)
    }

    func testTargetsAndOptionsAreChecked() throws {
        for url in ["http://10.0.0.1:8080", "http://example.com", "https://127.0.0.1.evil.test/"] {
            XCTAssertThrowsError(try NotificationPoster(baseURL: url, concurrency: 1)) { error in
                guard case .remoteTarget = error as? SimulatorError else { return XCTFail("\(url): \(error)") }
            }
        }
        for url in ["ftp://127.0.0.1", "127.0.0.1:8080", "http://"] {
            XCTAssertThrowsError(try NotificationPoster(baseURL: url, concurrency: 1)) { error in
                guard case .invalidURL = error as? SimulatorError else { return XCTFail("\(url): \(error)") }
            }
        }
        for url in ["http://127.0.0.1:8080/", "http://localhost:1", "http://[::1]:8080", "http://127.1.2.3"] {
            XCTAssertNoThrow(try NotificationPoster(baseURL: url, concurrency: 1), url)
        }
        XCTAssertEqual(try NotificationPoster(baseURL: "http://127.0.0.1:8080//", concurrency: 1).endpoint.absoluteString,
                       "http://127.0.0.1:8080/v1/apple/notifications")
        XCTAssertNoThrow(try NotificationPoster(baseURL: "http://10.0.0.1", concurrency: 1, allowRemote: true))
        XCTAssertThrowsError(try NotificationPoster(baseURL: "http://127.0.0.1", concurrency: 0))

        var o = options()
        o.environment = "Xcode"
        XCTAssertThrowsError(try Simulator(options: o))
        o = options(customers: 0)
        XCTAssertThrowsError(try Simulator(options: o))
        o = options()
        o.duplicates = 101
        XCTAssertThrowsError(try Simulator(options: o))
        o = options(days: 9_201)
        XCTAssertThrowsError(try Simulator(options: o))
        o = SimulationOptions(customers: 1, days: 30, start: 1_500_000_000_000)  // 2017: before the chain
        XCTAssertThrowsError(try Simulator(options: o))
        o = SimulationOptions(customers: 1, days: 30, start: 2_366_841_600_000 - 86_400_000)  // ends after 2045
        XCTAssertThrowsError(try Simulator(options: o))
        o = SimulationOptions(customers: 1, days: 30, start: .max - 1)
        XCTAssertThrowsError(try Simulator(options: o))
    }
}

import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerTesting
import Outbound
import Synchronization
import XCTest
@testable import AppStore

/// The App Store Server API client and the verifyReceipt client against the local fakes
/// (`FakeAppStoreServer`, `FakeVerifyReceipt`: real HTTP on loopback, every JWT checked), and the
/// builders that turn Apple's answers into ledger events.
final class ServerAPIClientTests: XCTestCase {
    static let otid = "1000000000000001"

    var fake: FakeAppStoreServer!
    var key: ECPrivateKey!
    /// Every wait the client asked for, instead of sleeping.
    let waits = Recorder<Duration>()
    var cleanups: [@Sendable () async -> Void] = []

    override func setUp() async throws {
        (fake, key) = try FakeAppStoreServer.make(authority: Fixtures.authority)
        try fake.start()
        let fake = self.fake!
        cleanups.append { await fake.shutdown() }
    }

    override func tearDown() async throws {
        for c in cleanups { await c() }
        cleanups = []
    }

    func configuration(keyId: String? = nil, issuer: String? = nil, bundle: String? = nil, key: ECPrivateKey? = nil,
                       lifetime: Int64 = 300, maxAttempts: Int = 4, base: URL? = nil) throws -> AppStoreServerAPIConfiguration {
        var c = try AppStoreServerAPIConfiguration(
            issuerId: issuer ?? fake.credentials.issuerId, keyId: keyId ?? fake.credentials.keyId, privateKey: key ?? self.key,
            bundleId: bundle ?? fake.credentials.bundleId, baseURL: base ?? fake.baseURL, allowsPlainHTTPLoopback: true)
        c.tokenLifetimeSeconds = lifetime
        c.retry.maxAttempts = maxAttempts
        c.retry.random = { 0.5 }
        let waits = self.waits
        c.retry.sleep = { d in waits.append(d) }
        return c
    }

    func client(_ c: AppStoreServerAPIConfiguration? = nil) throws -> AppStoreServerAPIClient {
        AppStoreServerAPIClient(configuration: try c ?? configuration(), environment: .sandbox)
    }

    /// A subscription bought on day 0 and renewed monthly `renewals` times.
    func subscription(otid: String = otid, renewals: Int = 0, autoRenew: Int = 1, status: Int = 1) -> FakeAppStoreServer.Subscription {
        let base = AppleTestAuthority.sample(originalTransactionId: otid)
        var txs: [AppleTransaction] = []
        for i in 0...renewals {
            var t = base.transaction
            t.transactionId = i == 0 ? otid : String(Int64(otid)! + Int64(i))
            t.purchaseDate = AppleTime(1_767_225_600_000 + Int64(i) * 2_592_000_000)
            t.expiresDate = AppleTime(1_767_225_600_000 + Int64(i + 1) * 2_592_000_000)
            txs.append(t)
        }
        var r = base.renewal
        r.autoRenewStatus = autoRenew
        return FakeAppStoreServer.Subscription(originalTransactionId: otid, status: status, transactions: txs, renewal: r)
    }

    func assertAPIError(_ handling: AppStoreServerAPIError.Handling, code: Int? = nil, file: StaticString = #filePath, line: UInt = #line,
                        _ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("expected an \(handling) error", file: file, line: line)
        } catch let e as AppStoreServerAPIError {
            XCTAssertEqual(e.handling, handling, "\(e)", file: file, line: line)
            if let code { XCTAssertEqual(e.errorCode, code, "\(e)", file: file, line: line) }
            XCTAssertFalse(e.message.isEmpty, file: file, line: line)
        } catch {
            XCTFail("expected AppStoreServerAPIError, got \(error)", file: file, line: line)
        }
    }

    // MARK: - The token

    func testTheTokenIsAppleShapedES256WithRawSignatureAndSecondsClaims() throws {
        let token = try AppStoreAPIToken.make(issuerId: "iss-1", keyId: "KID1", bundleId: "com.example", key: key,
                                              issuedAt: 1_767_225_600, lifetime: 300)
        let parts = token.split(separator: ".").map(String.init)
        XCTAssertEqual(parts.count, 3)
        let header = String(decoding: try XCTUnwrap(Base64.decodeURL(parts[0].utf8)), as: UTF8.self)
        XCTAssertEqual(header, #"{"alg":"ES256","kid":"KID1","typ":"JWT"}"#)
        let claims = try jsonObject(Data(try XCTUnwrap(Base64.decodeURL(parts[1].utf8))))
        XCTAssertEqual(claims["iss"] as? String, "iss-1")
        XCTAssertEqual(claims["aud"] as? String, "appstoreconnect-v1")
        XCTAssertEqual(claims["bid"] as? String, "com.example")
        XCTAssertEqual((claims["iat"] as? NSNumber)?.int64Value, 1_767_225_600, "seconds, not ms")
        XCTAssertEqual((claims["exp"] as? NSNumber)?.int64Value, 1_767_225_900)
        XCTAssertFalse(parts.joined().contains("="), "unpadded base64url")
        let signature = try XCTUnwrap(Base64.decodeURL(parts[2].utf8))
        XCTAssertEqual(signature.count, 64, "raw r‖s, not DER")
        XCTAssertTrue(key.publicKey.verifyES256(signature: signature, message: Array("\(parts[0]).\(parts[1])".utf8)))
        // A lifetime over an hour is clamped to Apple's limit.
        let long = try AppStoreAPIToken.make(issuerId: "i", keyId: "k", bundleId: "b", key: key, issuedAt: 100, lifetime: 86_400)
        let longClaims = try jsonObject(Data(try XCTUnwrap(Base64.decodeURL(long.split(separator: ".")[1].utf8))))
        XCTAssertEqual((longClaims["exp"] as? NSNumber)?.int64Value, 3700)
    }

    func testEveryRequestCarriesAFreshTokenTheFakeAccepts() async throws {
        fake.setSubscription(subscription())
        let c = try client()
        _ = try await c.allSubscriptionStatuses(transactionId: Self.otid)
        _ = try await c.allSubscriptionStatuses(transactionId: Self.otid)
        let seen = fake.requests
        XCTAssertEqual(seen.count, 2)
        XCTAssertEqual(fake.refusals, [])
        for s in seen {
            let claims = try XCTUnwrap(s.claims, "the fake verified the token")
            XCTAssertEqual(claims["bid"], "com.example")
            XCTAssertEqual(Int64(claims["exp"]!)! - Int64(claims["iat"]!)!, 300)
        }
    }

    /// Each claim and header field tampered in turn, sent straight to the fake: all refused with
    /// 401 and no body, for the reason the test names.
    func testTheFakeRefusesEveryTamperedToken() async throws {
        let now = Int64(Date().timeIntervalSince1970)
        let stranger = try ECPrivateKey.generate(curve: .p256)
        func token(header: [String: Any] = [:], claims: [String: Any?] = [:], key: ECPrivateKey? = nil,
                   derSignature: Bool = false) throws -> String {
            var h: [String: Any] = ["alg": "ES256", "kid": fake.credentials.keyId, "typ": "JWT"]
            for (k, v) in header { h[k] = v }
            var c: [String: Any] = ["iss": fake.credentials.issuerId, "iat": now, "exp": now + 300, "aud": "appstoreconnect-v1",
                                    "bid": fake.credentials.bundleId]
            for (k, v) in claims { c[k] = v }
            let input = Base64.encodeURL([UInt8](try JSONSerialization.data(withJSONObject: h))) + "."
                + Base64.encodeURL([UInt8](try JSONSerialization.data(withJSONObject: c)))
            var sig = try (key ?? self.key).signES256(Array(input.utf8))
            if derSignature { sig = [0x30, 0x44, 0x02, 0x20] + sig.prefix(32) + [0x02, 0x20] + sig.suffix(32) }
            return input + "." + Base64.encodeURL(sig)
        }
        let cases: [(String, String?)] = [
            ("alg", try token(header: ["alg": "ES384"])),
            ("kid", try token(header: ["kid": "OTHERKEY00"])),
            ("typ", try token(header: ["typ": "JWS"])),
            ("iss", try token(claims: ["iss": "57246542-0000-0000-0000-000000000000"])),
            ("aud", try token(claims: ["aud": "appstoreconnect-v2"])),
            ("bid", try token(claims: ["bid": "com.example.other"])),
            ("bid", try token(claims: ["bid": nil])),
            ("exp has passed", try token(claims: ["iat": now - 4000, "exp": now - 10])),
            ("lifetime over an hour", try token(claims: ["exp": now + 3601])),
            ("iat/exp look like milliseconds", try token(claims: ["iat": now * 1000, "exp": now * 1000 + 300_000])),
            ("iat is in the future", try token(claims: ["iat": now + 600, "exp": now + 900])),
            ("signature", try token(key: stranger)),
            ("signature is not 64 raw bytes (r‖s)", try token(derSignature: true)),
            ("no bearer token", nil),
        ]
        // The outbound client itself, straight at the fake (no retries, no token of its own).
        let transport = OutboundClient(target: OutboundTarget(name: "apple_api", baseURL: fake.baseURL, setting: "LEDGER_APPLE_API_BASE_URL",
                                                              allowsPlainHTTPLoopback: true))
        let path = "/inApps/v1/subscriptions/\(Self.otid)"
        for (reason, t) in cases {
            let before = fake.refusals.count
            var headers: [(String, String)] = []
            if let t { headers.append(("Authorization", "Bearer \(t)")) }
            let response = try await transport.send(OutboundRequest(method: "GET", path: path, headers: headers))
            XCTAssertEqual(response.status, 401, reason)
            XCTAssertEqual(response.body, Data(), "Apple's 401 has no body (\(reason))")
            XCTAssertEqual(fake.refusals.count, before + 1)
            XCTAssertEqual(fake.refusals.last, reason)
        }
        // The untampered token passes the same checks.
        fake.setSubscription(subscription())
        let ok = try await transport.send(OutboundRequest(method: "GET", path: path, headers: [("Authorization", "Bearer \(try token())")]))
        XCTAssertEqual(ok.status, 200)
    }

    func testAMisconfiguredClientGetsUnauthorizedOnceAndIsNotRetried() async throws {
        fake.setSubscription(subscription())
        for c in [try configuration(keyId: "WRONGKEY00"), try configuration(issuer: "wrong-issuer"),
                  try configuration(bundle: "com.example.other"), try configuration(key: try ECPrivateKey.generate(curve: .p256))] {
            let before = fake.requests.count
            let api = try client(c)
            do {
                _ = try await api.allSubscriptionStatuses(transactionId: Self.otid)
                XCTFail("expected 401")
            } catch {
                XCTAssertEqual(error, .unauthorized(endpoint: "Get All Subscription Statuses"))
                XCTAssertEqual(error.handling, .final)
                XCTAssertTrue(error.message.contains("LEDGER_APPLE_API_KEY_ID"), error.message)
            }
            XCTAssertEqual(fake.requests.count, before + 1, "a 401 is final: sent once")
        }
        XCTAssertEqual(waits.all, [])
    }

    // MARK: - Endpoints

    func testNotificationHistoryWalksEveryPageWithTheSameBody() async throws {
        fake.pageSize = 2
        let start: Int64 = 1_767_225_600_000
        var bodies: [Data] = []
        for i in 0..<7 {
            let s = AppleTestAuthority.sample(uuid: "uuid-\(i)", signedDate: start + Int64(i) * 1000)
            let body = try Fixtures.authority.signSample(s)
            bodies.append(body)
            fake.addNotification(body: body, date: start + Int64(i) * 1000)
        }
        fake.addNotification(body: bodies[0], date: start + 100_000_000, failed: true) // outside the window
        let request = NotificationHistoryRequest(startDate: start, endDate: start + 10_000)
        var pages: [NotificationHistoryResponse] = []
        try await client().forEachNotificationHistoryPage(request) { pages.append($0) }
        XCTAssertEqual(pages.count, 4, "7 items, 2 per page")
        XCTAssertEqual(pages.map(\.hasMore), [true, true, true, false])
        XCTAssertEqual(pages.flatMap(\.notificationHistory).count, 7)
        // Each item is the original signedPayload, ingestible through the V2 path.
        let ingestor = Fixtures.ingestor()
        var uuids: [String] = []
        for item in pages.flatMap(\.notificationHistory) {
            let event = try ingestor.ingestV2(body: try AppleTestAuthority.body(signedPayload: try XCTUnwrap(item.signedPayload)))
            uuids.append(event.dedupeKey)
            XCTAssertEqual(item.sendAttempts?.first?.sendAttemptResult, "SUCCESS")
        }
        XCTAssertEqual(uuids, (0..<7).map { "uuid-\($0)" })
        // Paging re-sends the same body with the token (whose + / = must survive the query string).
        let seen = fake.requests
        XCTAssertEqual(seen.count, 4)
        XCTAssertEqual(Set(seen.map(\.body)).count, 1)
        XCTAssertNil(seen[0].query["paginationToken"])
        XCTAssertEqual(seen[1].query["paginationToken"], pages[0].paginationToken)
        XCTAssertTrue(pages[0].paginationToken?.contains("+/=") ?? false)
        // The convenience collects the same items; onlyFailures sees the failed one.
        let all = try await client().notificationHistory(request)
        XCTAssertEqual(all.count, 7)
        let failures = try await client().notificationHistory(NotificationHistoryRequest(startDate: start, endDate: start + 200_000_000, onlyFailures: true))
        XCTAssertEqual(failures.count, 1)
    }

    func testAnExpiredPaginationTokenRestartsPagingOnceFromTheFirstPage() async throws {
        fake.pageSize = 1
        let start: Int64 = 1_767_225_600_000
        for i in 0..<3 {
            fake.addNotification(body: try Fixtures.authority.signSample(AppleTestAuthority.sample(uuid: "u\(i)")), date: start + Int64(i))
        }
        let fake = self.fake!
        var delivered = 0
        var expired = false
        try await client().forEachNotificationHistoryPage(NotificationHistoryRequest(startDate: start, endDate: start + 10)) { _ in
            delivered += 1
            if delivered == 2, !expired { expired = true; fake.expirePaginationTokens() }
        }
        XCTAssertEqual(delivered, 2 + 3, "two pages, then all three again from the start")
        // Expiring on every page: the second expiry is not restarted again.
        var count = 0
        await assertAPIError(.restartPaging, code: 4_000_017) {
            try await self.client().forEachNotificationHistoryPage(NotificationHistoryRequest(startDate: start, endDate: start + 10)) { _ in
                count += 1
                fake.expirePaginationTokens()
            }
        }
        XCTAssertEqual(count, 2)
    }

    func testNotificationHistoryRequestsAppleWouldRefuseAreNotSent() async throws {
        let c = try client()
        await assertAPIError(.final) { _ = try await c.notificationHistoryPage(NotificationHistoryRequest(startDate: 10, endDate: 10)) }
        await assertAPIError(.final) {
            _ = try await c.notificationHistoryPage(NotificationHistoryRequest(startDate: 1, endDate: 10, notificationType: "REFUND", transactionId: "1"))
        }
        XCTAssertEqual(fake.requests.count, 0)
    }

    func testGetAllSubscriptionStatusesAnswersEverySubscriptionOfTheCustomerSignedAtRequestTime() async throws {
        var a = subscription()
        a.customer = "c1"
        var b = subscription(otid: "2000000000000001")
        b.customer = "c1"
        b.groupIdentifier = "21000002"
        fake.setSubscription(a)
        fake.setSubscription(b)
        let c = try client()
        let first = try await c.allSubscriptionStatuses(transactionId: Self.otid)
        XCTAssertEqual(first.environment, "Sandbox")
        XCTAssertEqual(first.bundleId, "com.example")
        XCTAssertEqual(first.data.count, 2)
        let items = first.data.flatMap { $0.lastTransactions ?? [] }
        XCTAssertEqual(items.map(\.originalTransactionId), [Self.otid, "2000000000000001"])
        let verifier = Fixtures.authority.verifier()
        for item in items {
            XCTAssertNoThrow(try verifier.verify(try XCTUnwrap(item.signedTransactionInfo), kind: .transaction))
            XCTAssertNoThrow(try verifier.verify(try XCTUnwrap(item.signedRenewalInfo), kind: .renewalInfo))
        }
        // Any transaction of the customer finds the same subscriptions; another call re-signs.
        try await Task.sleep(for: .milliseconds(5))
        let again = try await c.allSubscriptionStatuses(transactionId: "2000000000000001")
        XCTAssertEqual(again.data.count, 2)
        XCTAssertNotEqual(again.body, first.body, "Apple signs at request time")
        // Unknown: 404 4040010, final here, "ask the other environment".
        let before = fake.requests.count
        await assertAPIError(.otherEnvironment, code: 4_040_010) { _ = try await c.allSubscriptionStatuses(transactionId: "999") }
        XCTAssertEqual(fake.requests.count, before + 1, "not retried")
        await assertAPIError(.final, code: 4_000_006) { _ = try await c.allSubscriptionStatuses(transactionId: "12ab") }
    }

    func testTransactionHistoryWalksEveryRevisionPage() async throws {
        fake.historyPageSize = 2
        fake.setSubscription(subscription(renewals: 4))
        let pages = try await client().transactionHistory(transactionId: Self.otid)
        XCTAssertEqual(pages.count, 3)
        XCTAssertEqual(pages.map(\.hasMore), [true, true, false])
        let verifier = Fixtures.authority.verifier()
        let ids = try pages.flatMap(\.signedTransactions).map { jws in
            try verifier.verify(jws, kind: .transaction).payloadObject()["transactionId"] as? String
        }
        XCTAssertEqual(ids, (0...4).map { String(Int64(Self.otid)! + Int64($0)) })
        let seen = fake.requests
        XCTAssertEqual(seen.map { $0.query["revision"] }, [nil, "rev-2", "rev-4"])
        // A bad revision is Apple's 4000005: restart paging.
        await assertAPIError(.restartPaging, code: 4_000_005) {
            _ = try await self.client().transactionHistoryPage(transactionId: Self.otid, revision: "bogus")
        }
        // Filters reach Apple as query parameters.
        var q = TransactionHistoryQuery()
        q.sort = .descending
        q.productTypes = ["AUTO_RENEWABLE"]
        q.revoked = false
        _ = try await client().transactionHistoryPage(transactionId: Self.otid, query: q)
        let last = try XCTUnwrap(fake.requests.last)
        XCTAssertEqual(last.query["sort"], "DESCENDING")
        XCTAssertEqual(last.query["productType"], "AUTO_RENEWABLE")
        XCTAssertEqual(last.query["revoked"], "false")
    }

    func testSendConsumptionInformationSendsTheV2RequestAndChecksAppleRulesFirst() async throws {
        fake.setSubscription(subscription())
        let c = try client()
        let request = ConsumptionRequest(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false,
                                         refundPreference: .decline)
        try await c.sendConsumptionInformation(transactionId: Self.otid, request, productType: "Auto-Renewable Subscription")
        let sent = try XCTUnwrap(fake.consumptionRequests.first)
        XCTAssertEqual(sent.transactionId, Self.otid)
        XCTAssertEqual(sent.request, request)
        XCTAssertEqual(String(decoding: sent.body, as: UTF8.self),
                       #"{"customerConsented":true,"deliveryStatus":"DELIVERED","refundPreference":"DECLINE","sampleContentProvided":false}"#)
        let put = try XCTUnwrap(fake.requests.last)
        XCTAssertEqual(put.method, "PUT")
        XCTAssertEqual(put.path, "/inApps/v2/transactions/consumption/\(Self.otid)")
        // Apple's rules, refused before anything is sent.
        let refused: [(ConsumptionRequest, String?)] = [
            (ConsumptionRequest(customerConsented: false, deliveryStatus: .delivered, sampleContentProvided: false), nil),
            (ConsumptionRequest(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 5000),
             "Auto-Renewable Subscription"),
            (ConsumptionRequest(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 100_001), "Consumable"),
            (ConsumptionRequest(customerConsented: true, deliveryStatus: .undeliveredOther, sampleContentProvided: false, consumptionPercentage: 10), "Consumable"),
            (ConsumptionRequest(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 100_000,
                                refundPreference: .grantProrated), "Consumable"),
        ]
        let before = fake.requests.count
        for (r, type) in refused {
            await assertAPIError(.final) { try await c.sendConsumptionInformation(transactionId: Self.otid, r, productType: type) }
        }
        XCTAssertEqual(fake.requests.count, before, "nothing sent")
        // A consumable may state its share.
        var coins = AppleTestAuthority.sample(originalTransactionId: "3000000000000001").transaction
        coins.type = "Consumable"
        coins.expiresDate = nil
        fake.setSubscription(.init(originalTransactionId: "3000000000000001", transactions: [coins], renewal: nil))
        try await c.sendConsumptionInformation(transactionId: "3000000000000001", ConsumptionRequest(
            customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: true, consumptionPercentage: 25_000,
            refundPreference: .grantProrated), productType: "Consumable")
        XCTAssertEqual(fake.consumptionRequests.count, 2)
        // Apple's side refuses what slips through: the fake holds the same rule for the product type.
        await assertAPIError(.fixRequest, code: 4_000_040) {
            try await c.sendConsumptionInformation(transactionId: Self.otid, ConsumptionRequest(
                customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: true, consumptionPercentage: 1), productType: nil)
        }
        await assertAPIError(.otherEnvironment, code: 4_040_010) {
            try await c.sendConsumptionInformation(transactionId: "42", request)
        }
    }

    func testATestNotificationIsPostedToTheWebhookAndItsStatusReported() async throws {
        // The ledger's webhook, played by a bare HTTP server that keeps what it receives.
        let received = Recorder<Data>()
        var router = Router()
        router.add("POST", "/v1/apple/notifications") { request in
            received.append(request.body)
            return HTTPResponse(status: 200)
        }
        let webhook = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 1), router: router)
        try webhook.start()
        cleanups.append { await webhook.shutdown(gracePeriod: .seconds(1)) }
        let c = try client()
        // Without a configured URL Apple answers 404 4040007.
        await assertAPIError(.final, code: 4_040_007) { _ = try await c.requestTestNotification() }
        fake.webhookURL = URL(string: "http://127.0.0.1:\(webhook.port!)/v1/apple/notifications")!
        let token = try await c.requestTestNotification()
        var status: TestNotificationStatus?
        for _ in 0..<200 {
            status = try await c.testNotificationStatus(token: token)
            if status != nil { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        let s = try XCTUnwrap(status, "the fake sent it")
        XCTAssertTrue(s.delivered)
        let body = try XCTUnwrap(received.all.first)
        let event = try Fixtures.ingestor().ingestV2(body: body)
        XCTAssertEqual(event.type, "TEST")
        XCTAssertEqual(event.streamId, StreamId.appleTest.text)
        XCTAssertEqual(try jsonObject(body)["signedPayload"] as? String, s.signedPayload)
        await assertAPIError(.fixRequest, code: 4_000_020) { _ = try await c.testNotificationStatus(token: "unknown") }
    }

    func testTestNotificationStatusIsNilUntilSent() async throws {
        fake.enqueueFailure(.init(status: 404, errorCode: 4_040_008), endpoint: .testNotificationStatus)
        let status = try await client().testNotificationStatus(token: "anything")
        XCTAssertNil(status)
    }

    // MARK: - Retries

    func testA429IsRetriedAtTheAbsoluteMillisecondTimeAppleGivesAndInSecondsToo() async throws {
        fake.setSubscription(subscription())
        var c = try configuration()
        // A fixed clock (the real time: the fake checks the token's iat against it).
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        c.retry.now = { now }
        fake.enqueueFailure(.rateLimited(retryAtMillis: now + 1_500))
        fake.enqueueFailure(.init(status: 429, errorCode: 4_290_000, retryAfter: "2"))
        fake.enqueueFailure(.init(status: 429))
        _ = try await client(c).allSubscriptionStatuses(transactionId: Self.otid)
        XCTAssertEqual(fake.requests.count, 4)
        XCTAssertEqual(waits.all, [.milliseconds(1_500), .milliseconds(2_000), .milliseconds(1_000)],
                       "Apple's absolute ms, RFC seconds, then exponential backoff (attempt 3: 4 × 500 ms × 0.5)")
    }

    func testARetryAfterTooFarAwayFailsAtOnceWithTheTimeAndExhaustedAttemptsFailRateLimited() async throws {
        fake.setSubscription(subscription())
        var c = try configuration()
        // A fixed clock (the real time: the fake checks the token's iat against it).
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        c.retry.now = { now }
        fake.enqueueFailure(.rateLimited(retryAtMillis: now + 3_600_000))
        let api = try client(c)
        do {
            _ = try await api.allSubscriptionStatuses(transactionId: Self.otid)
            XCTFail("expected rateLimited")
        } catch {
            XCTAssertEqual(error, .rateLimited(endpoint: "Get All Subscription Statuses", retryAt: now + 3_600_000))
            XCTAssertTrue(error.isRetryable, "the caller re-queues it")
        }
        XCTAssertEqual(waits.all, [], "not waited for")
        fake.enqueueFailure(.rateLimited(retryAtMillis: nil), times: 4)
        await assertAPIError(.retryable, code: 4_290_000) { _ = try await self.client(c).allSubscriptionStatuses(transactionId: Self.otid) }
        XCTAssertEqual(fake.requests.count, 1 + 4, "bounded: maxAttempts")
    }

    func testA5xxIsRetriedThenSucceedsAndAppleRetryableNotFoundTwinsToo() async throws {
        fake.historyPageSize = 1
        fake.setSubscription(subscription(renewals: 2))
        fake.enqueueFailure(.init(status: 500, errorCode: 5_000_001), endpoint: .transactionHistory)
        fake.enqueueFailure(.init(status: 503), endpoint: .transactionHistory)
        fake.enqueueFailure(.init(status: 404, errorCode: 4_040_006), endpoint: .transactionHistory)
        let pages = try await client().transactionHistory(transactionId: Self.otid)
        XCTAssertEqual(pages.flatMap(\.signedTransactions).count, 3)
        XCTAssertEqual(waits.all, [.milliseconds(250), .milliseconds(500), .milliseconds(1_000)], "exponential backoff")
        // Apple's 500 without errorCode is retryable too; a final 404 is not.
        XCTAssertEqual(AppStoreServerAPIError.apple(endpoint: "e", httpStatus: 500, errorCode: nil, errorMessage: nil).handling, .retryable)
        XCTAssertEqual(AppStoreServerAPIError.apple(endpoint: "e", httpStatus: 404, errorCode: 4_040_005, errorMessage: nil).handling, .final)
        XCTAssertEqual(AppStoreServerAPIError.apple(endpoint: "e", httpStatus: 400, errorCode: 4_000_012, errorMessage: nil).handling, .fixRequest)
    }

    func testFinalErrorsAreNotRetried() async throws {
        fake.setSubscription(subscription())
        for (status, code, handling) in [(400, 4_000_006, AppStoreServerAPIError.Handling.final), (404, 4_040_005, .final),
                                         (400, 4_000_187, .fixRequest), (404, 4_040_010, .otherEnvironment)] {
            fake.enqueueFailure(.init(status: status, errorCode: code))
            let before = fake.requests.count
            await assertAPIError(handling, code: code) { _ = try await self.client().allSubscriptionStatuses(transactionId: Self.otid) }
            XCTAssertEqual(fake.requests.count, before + 1, "\(code) sent once")
        }
        XCTAssertEqual(waits.all, [])
    }

    func testAnUnreachableHostIsRetriedThenReportedAsTransport() async throws {
        let closed = URL(string: "http://127.0.0.1:1")!
        let c = try client(configuration(maxAttempts: 3, base: closed))
        do {
            _ = try await c.allSubscriptionStatuses(transactionId: Self.otid)
            XCTFail("expected a transport error")
        } catch {
            guard case .transport(_, let reason) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("connection refused"), reason)
            XCTAssertTrue(error.isRetryable)
        }
        XCTAssertEqual(waits.all.count, 2)
    }

    func testABaseURLPathIsKeptAsAPrefixAndEnvironmentsHaveTheirHosts() throws {
        let c = try configuration(base: URL(string: "https://proxy.example:8443/apple/")!)
        let url = try AppStoreServerAPIClient(configuration: c, environment: .production).url(path: "/inApps/v1/x", query: [("a", "1 +/=")])
        XCTAssertEqual(url.absoluteString, "https://proxy.example:8443/apple/inApps/v1/x?a=1%20%2B%2F%3D")
        var direct = c
        direct.baseURL = nil
        XCTAssertEqual(direct.baseURL(for: .production).absoluteString, "https://api.storekit.apple.com")
        XCTAssertEqual(direct.baseURL(for: .sandbox).absoluteString, "https://api.storekit-sandbox.apple.com")
    }

    func testConfigurationFromTheEnvironment() throws {
        XCTAssertNil(try AppStoreServerAPIConfiguration.fromEnvironment([:]))
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("key-\(UUID().uuidString).p8").path
        try Data(try key.pkcs8PEM().utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let env = ["LEDGER_APPLE_API_ISSUER_ID": "iss", "LEDGER_APPLE_API_KEY_ID": "KID", "LEDGER_APPLE_API_PRIVATE_KEY": path,
                   "LEDGER_APPLE_BUNDLE_IDS": " com.example , com.other", "LEDGER_APPLE_API_BASE_URL": "http://127.0.0.1:9",
                   "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]
        let c = try XCTUnwrap(try AppStoreServerAPIConfiguration.fromEnvironment(env))
        // Plain http: only to loopback, and only with the setting.
        var strict = env
        strict["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK"] = nil
        XCTAssertThrowsError(try AppStoreServerAPIConfiguration.fromEnvironment(strict)) { error in
            XCTAssertTrue("\(error)".contains("LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK"), "\(error)")
        }
        var remote = env
        remote["LEDGER_APPLE_API_BASE_URL"] = "http://proxy.example:8080"
        XCTAssertThrowsError(try AppStoreServerAPIConfiguration.fromEnvironment(remote)) { error in
            XCTAssertTrue("\(error)".contains("LEDGER_APPLE_API_BASE_URL"), "\(error)")
        }
        XCTAssertEqual(c.bundleId, "com.example", "the first of LEDGER_APPLE_BUNDLE_IDS")
        XCTAssertEqual(c.baseURL?.absoluteString, "http://127.0.0.1:9")
        var explicit = env
        explicit["LEDGER_APPLE_API_BUNDLE_ID"] = "com.explicit"
        XCTAssertEqual(try AppStoreServerAPIConfiguration.fromEnvironment(explicit)?.bundleId, "com.explicit")
        var partial = env
        partial["LEDGER_APPLE_API_KEY_ID"] = nil
        XCTAssertThrowsError(try AppStoreServerAPIConfiguration.fromEnvironment(partial)) { error in
            XCTAssertTrue("\(error)".contains("LEDGER_APPLE_API_KEY_ID"), "\(error)")
        }
        var missingKey = env
        missingKey["LEDGER_APPLE_API_PRIVATE_KEY"] = path + ".missing"
        XCTAssertThrowsError(try AppStoreServerAPIConfiguration.fromEnvironment(missingKey))
        let p384 = FileManager.default.temporaryDirectory.appendingPathComponent("p384-\(UUID().uuidString).p8").path
        try Data(try ECPrivateKey.generate(curve: .p384).pkcs8PEM().utf8).write(to: URL(fileURLWithPath: p384))
        defer { try? FileManager.default.removeItem(atPath: p384) }
        var wrongCurve = env
        wrongCurve["LEDGER_APPLE_API_PRIVATE_KEY"] = p384
        XCTAssertThrowsError(try AppStoreServerAPIConfiguration.fromEnvironment(wrongCurve)) { error in
            XCTAssertTrue("\(error)".contains("P-256"), "\(error)")
        }
        var badURL = env
        badURL["LEDGER_APPLE_API_BASE_URL"] = "ftp://x"
        XCTAssertThrowsError(try AppStoreServerAPIConfiguration.fromEnvironment(badURL))
    }

    func testRetryAfterParsing() {
        let now: Int64 = 1_800_000_000_000
        XCTAssertEqual(RetryAfter.absoluteMillis("1800000005000", now: now), 1_800_000_005_000, "Apple: absolute ms")
        XCTAssertEqual(RetryAfter.absoluteMillis("7", now: now), now + 7_000, "RFC 9110 delay-seconds")
        XCTAssertEqual(RetryAfter.absoluteMillis("1800000005", now: now), 1_800_000_005_000, "absolute seconds")
        XCTAssertEqual(RetryAfter.absoluteMillis("Fri, 15 Jan 2027 08:00:00 GMT", now: 0), 1_800_000_000_000, "HTTP-date")
        XCTAssertNil(RetryAfter.absoluteMillis(nil, now: now))
        XCTAssertNil(RetryAfter.absoluteMillis("soon", now: now))
        XCTAssertNil(RetryAfter.absoluteMillis("-5", now: now))
    }

    // MARK: - Answers as events

    var events: AppleAPIAnswerEvents { AppleAPIAnswerEvents(verifier: Fixtures.authority.verifier(), acceptance: Fixtures.sandbox) }

    func testAStatusesAnswerBecomesOneVerifiedEventPerSubscriptionWithAStableDedupeKey() async throws {
        var a = subscription()
        a.customer = "c"
        var b = subscription(otid: "2000000000000001")
        b.customer = "c"
        fake.setSubscription(a)
        fake.setSubscription(b)
        let c = try client()
        let answer = try await c.allSubscriptionStatuses(transactionId: Self.otid)
        let built = try events.subscriptionStatusEvents(answer)
        XCTAssertEqual(built.map(\.streamId), [Self.otid, "2000000000000001"])
        XCTAssertEqual(Set(built.map(\.type)), [AppleAPIEvents.subscriptionStatus])
        XCTAssertEqual(Set(built.map(\.source)), [.apple])
        XCTAssertEqual(Set(built.map(\.environment)), ["Sandbox"])
        XCTAssertEqual(built[0].raw, answer.body, "raw: Apple's answer as received")
        XCTAssertEqual(built[0].expiresAt, a.latest?.expiresDate?.millis)
        XCTAssertNotNil(built[0].signedAt)
        let payload = try jsonObject(built[0].payload)
        let body = try XCTUnwrap(payload[AppleAPIEvents.statusResponseKey] as? [String: Any])
        XCTAssertEqual(Set(payload.keys), [AppleAPIEvents.statusResponseKey], "its own namespace")
        let group = try XCTUnwrap((body["data"] as? [[String: Any]])?.first)
        let items = try XCTUnwrap(group["lastTransactions"] as? [[String: Any]])
        XCTAssertEqual(items.count, 1, "cut to this subscription")
        XCTAssertNil(items[0]["signedTransactionInfo"], "the JWS stay in raw")
        XCTAssertEqual((items[0]["transactionInfo"] as? [String: Any])?["transactionId"] as? String, Self.otid)
        XCTAssertEqual((items[0]["renewalInfo"] as? [String: Any])?["autoRenewStatus"] as? Int, 1)
        // Its facts fold (no unreadable).
        let facts = FactDecoder.facts(of: built[0])
        XCTAssertEqual(facts.map(\.kind), [.transaction, .reversal, .renewal, .appleStatus], "a transaction not revoked states a reversal; the item's status is Apple's word")
        XCTAssertEqual(Set(facts.map(\.origin)), [.appleAPI])

        // Asked again: re-signed (different bytes), same keys. Changed: a new key for that one only.
        try await Task.sleep(for: .milliseconds(5))
        let again = try await c.allSubscriptionStatuses(transactionId: Self.otid)
        XCTAssertNotEqual(again.body, answer.body)
        XCTAssertEqual(try events.subscriptionStatusEvents(again).map(\.dedupeKey), built.map(\.dedupeKey))
        var changed = a
        changed.renewal?.autoRenewStatus = 0
        fake.setSubscription(changed)
        let after = try events.subscriptionStatusEvents(try await c.allSubscriptionStatuses(transactionId: Self.otid))
        XCTAssertNotEqual(after[0].dedupeKey, built[0].dedupeKey)
        XCTAssertEqual(after[1].dedupeKey, built[1].dedupeKey)
        // `after`: the same answer after the ledger learned something else is a new event.
        let keyed = try events.subscriptionStatusEvents(again, after: [Self.otid: 17])
        XCTAssertEqual(keyed[0].dedupeKey, built[0].dedupeKey + "@17")
        XCTAssertEqual(keyed[1].dedupeKey, built[1].dedupeKey)
        XCTAssertTrue(built[0].dedupeKey.hasPrefix("api:status:"))
        XCTAssertEqual(AppleAPIAnswerEvents.dedupeKey(type: built[0].type, payload: try JSONDecoder().decode(JSONValue.self, from: built[0].payload)),
                       built[0].dedupeKey, "the key is a function of the stored payload")
    }

    func testStatusAnswersThatAreNotAppleOrNotOursAreRefused() async throws {
        fake.setSubscription(subscription())
        let good = try await client().allSubscriptionStatuses(transactionId: Self.otid)
        let object = try jsonObject(good.body)
        func answer(_ edit: (inout [String: Any]) throws -> Void) throws -> StatusResponse {
            var o = object
            try edit(&o)
            var r = good
            r.body = try JSONSerialization.data(withJSONObject: o)
            return r
        }
        func item(_ o: inout [String: Any], _ edit: (inout [String: Any]) throws -> Void) rethrows {
            var data = o["data"] as! [[String: Any]]
            var items = data[0]["lastTransactions"] as! [[String: Any]]
            try edit(&items[0])
            data[0]["lastTransactions"] = items
            o["data"] = data
        }
        let stranger = Fixtures.stranger
        let sample = AppleTestAuthority.sample(originalTransactionId: Self.otid)
        assertRefused("untrusted_chain", .unauthenticated) {
            try self.events.subscriptionStatusEvents(try answer { o in try item(&o) { $0["signedTransactionInfo"] = try stranger.sign(sample.transaction) } })
        }
        assertRefused("bad_signature", .unauthenticated) {
            var o = JWSOpts()
            o.corruptSignature = true
            let jws = try Fixtures.authority.sign(sample.transaction, o)
            return try self.events.subscriptionStatusEvents(try answer { o in item(&o) { $0["signedTransactionInfo"] = jws } })
        }
        assertRefused("wrong_nested_type", .malformed) {
            let renewal = try Fixtures.authority.sign(sample.renewal)
            return try self.events.subscriptionStatusEvents(try answer { o in item(&o) { $0["signedTransactionInfo"] = renewal } })
        }
        assertRefused("app_mismatch", .notAccepted) { try self.events.subscriptionStatusEvents(try answer { $0["bundleId"] = "com.other" }) }
        assertRefused("environment_mismatch", .notAccepted) { try self.events.subscriptionStatusEvents(try answer { $0["environment"] = "Production" }) }
        assertRefused("nested_mismatch", .notAccepted) {
            try self.events.subscriptionStatusEvents(try answer { o in item(&o) { $0["originalTransactionId"] = "2000000000000001" } })
        }
        assertRefused("nested_mismatch", .notAccepted) {
            var other = sample.renewal
            other.originalTransactionId = "3000000000000001"
            let jws = try Fixtures.authority.sign(other)
            return try self.events.subscriptionStatusEvents(try answer { o in item(&o) { $0["signedRenewalInfo"] = jws } })
        }
        assertRefused("malformed", .malformed) { try self.events.subscriptionStatusEvents(try answer { $0["data"] = "x" }) }
    }

    func testTransactionHistoryPagesBecomeOneEventPerTransactionWhoseRawReverifies() async throws {
        var s = subscription(renewals: 2)
        s.transactions[1].revocationDate = AppleTime(1_770_000_000_000)
        s.transactions[1].revocationReason = 0
        fake.setSubscription(s)
        let pages = try await client().transactionHistory(transactionId: Self.otid)
        let built = try pages.flatMap { try events.transactionHistoryEvents($0) }
        XCTAssertEqual(built.count, 3)
        XCTAssertEqual(Set(built.map(\.streamId)), [Self.otid])
        XCTAssertEqual(Set(built.map(\.type)), [AppleAPIEvents.transaction])
        XCTAssertEqual(Set(built.map(\.dedupeKey)).count, 3)
        XCTAssertTrue(built.allSatisfy { $0.dedupeKey.hasPrefix("api:tx:") })
        let inspector = PayloadInspector(verifier: Fixtures.authority.verifier())
        for e in built {
            let report = try inspector.inspect(e.raw)
            XCTAssertTrue(report.allVerified, "raw is the compact JWS as Apple sent it")
        }
        XCTAssertEqual(FactDecoder.facts(of: built[1]).map(\.kind), [.transaction, .revocation])
        // Fetched again (re-signed), the same keys: nothing new would be stored.
        try await Task.sleep(for: .milliseconds(5))
        let again = try await client().transactionHistory(transactionId: Self.otid).flatMap { try events.transactionHistoryEvents($0) }
        XCTAssertNotEqual(again.map(\.raw), built.map(\.raw))
        XCTAssertEqual(again.map(\.dedupeKey), built.map(\.dedupeKey))
        // A page from another app is refused.
        var foreign = pages[0]
        foreign.bundleId = "com.other"
        assertRefused("app_mismatch", .notAccepted) { try self.events.transactionHistoryEvents(foreign) }
    }

    // MARK: - verifyReceipt

    static let receiptA = Data("receipt-a".utf8).base64EncodedString()
    static let receiptS = Data("receipt-sandbox".utf8).base64EncodedString()

    static func receiptAnswer(expires: Int64 = 1_769_904_000_000, autoRenew: String = "1", appItemId: Int64 = 1234) -> JSONValue {
        let json: [String: Any] = [
            "receipt": ["bundle_id": "com.example", "receipt_creation_date_ms": "1767225600000", "app_item_id": appItemId],
            "latest_receipt": "MIIblob==",
            "latest_receipt_info": [
                ["transaction_id": "1000000000000001", "original_transaction_id": "1000000000000001", "product_id": "com.example.monthly",
                 "purchase_date_ms": "1767225600000", "expires_date_ms": String(expires)],
                ["transaction_id": "5000000000000001", "original_transaction_id": "5000000000000001", "product_id": "com.example.coins",
                 "purchase_date_ms": "1768225600000"],
            ],
            "pending_renewal_info": [["original_transaction_id": "1000000000000001", "auto_renew_product_id": "com.example.monthly",
                                      "auto_renew_status": autoRenew]],
        ]
        return try! JSONDecoder().decode(JSONValue.self, from: JSONSerialization.data(withJSONObject: json))
    }

    func receiptFake(secret: String? = "s3cret") throws -> FakeVerifyReceipt {
        let f = FakeVerifyReceipt(sharedSecret: secret)
        try f.start()
        cleanups.append { await f.shutdown() }
        f.register(receiptData: Self.receiptA, .init(environment: .production, answer: Self.receiptAnswer()))
        f.register(receiptData: Self.receiptS, .init(environment: .sandbox, answer: Self.receiptAnswer()))
        return f
    }

    func receiptClient(_ f: FakeVerifyReceipt, secret: String? = "s3cret", edit: (inout VerifyReceiptConfiguration) -> Void = { _ in }) -> VerifyReceiptClient {
        var c = VerifyReceiptConfiguration(baseURL: f.baseURL, sharedSecret: secret, allowsPlainHTTPLoopback: true)
        c.retry.random = { 0.5 }
        let waits = self.waits
        c.retry.sleep = { d in waits.append(d) }
        edit(&c)
        return VerifyReceiptClient(configuration: c)
    }

    func assertReceiptStatus(_ status: Int, retryable: Bool, file: StaticString = #filePath, line: UInt = #line,
                             _ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("expected status \(status)", file: file, line: line)
        } catch let e as VerifyReceiptError {
            XCTAssertEqual(e.statusCode, status, "\(e)", file: file, line: line)
            XCTAssertEqual(e.isRetryable, retryable, "\(e)", file: file, line: line)
            XCTAssertFalse(e.message.contains("s3cret"), "the secret is never echoed", file: file, line: line)
            XCTAssertTrue(e.message.contains(String(status)), e.message, file: file, line: line)
        } catch {
            XCTFail("expected VerifyReceiptError, got \(error)", file: file, line: line)
        }
    }

    func testVerifyReceiptGoesToProductionFirstAndToSandboxOn21007() async throws {
        let f = try receiptFake()
        let c = receiptClient(f)
        let production = try await c.verify(receiptData: Self.receiptA)
        XCTAssertEqual(production.environment, .production)
        XCTAssertEqual(f.requests.map(\.environment), [.production])
        XCTAssertEqual(f.requests.first?.password, "s3cret")
        XCTAssertEqual(f.requests.first?.excludeOldTransactions, false)
        let sandbox = try await c.verify(receiptData: Self.receiptS)
        XCTAssertEqual(sandbox.environment, .sandbox)
        XCTAssertEqual(f.requests.map(\.environment), [.production, .production, .sandbox], "21007 → Sandbox")
        // Starting in Sandbox, a Production receipt is 21008 → Production.
        let fromSandbox = receiptClient(f) { $0.startWith = .sandbox }
        let moved = try await fromSandbox.verify(receiptData: Self.receiptA)
        XCTAssertEqual(moved.environment, .production)
        XCTAssertEqual(f.requests.suffix(2).map(\.environment), [.sandbox, .production])
        // At most one switch: Production says 21007, Sandbox then 21008 → an error, not a loop.
        f.enqueueStatus(21007)
        f.enqueueStatus(21008)
        await assertReceiptStatus(21008, retryable: false) { _ = try await c.verify(receiptData: Self.receiptA) }
    }

    func testVerifyReceiptStatusesBecomeTypedErrorsAndTemporaryOnesAreRetried() async throws {
        let f = try receiptFake()
        await assertReceiptStatus(21004, retryable: false) { _ = try await self.receiptClient(f, secret: "wrong").verify(receiptData: Self.receiptA) }
        XCTAssertEqual(f.requests.count, 1, "21004 is final")
        await assertReceiptStatus(21002, retryable: true) {
            _ = try await self.receiptClient(f).verify(receiptData: Data("not a receipt".utf8).base64EncodedString())
        }
        XCTAssertEqual(f.requests.count, 1 + 3, "21002 retried up to maxStatusAttempts")
        f.enqueueStatus(21005)
        f.enqueueStatus(21100, isRetryable: true)
        _ = try await receiptClient(f).verify(receiptData: Self.receiptA)
        XCTAssertEqual(f.requests.count, 4 + 3)
        f.enqueueStatus(21199, isRetryable: false)
        await assertReceiptStatus(21199, retryable: false) { _ = try await self.receiptClient(f).verify(receiptData: Self.receiptA) }
        XCTAssertEqual(f.requests.count, 7 + 1)
        for status in [21003, 21010, 21006] {
            f.enqueueStatus(status)
            await assertReceiptStatus(status, retryable: false) { _ = try await self.receiptClient(f).verify(receiptData: Self.receiptA) }
        }
        // HTTP failures are retried at the HTTP level.
        f.enqueueHTTP(503, times: 2)
        let ok = try await receiptClient(f).verify(receiptData: Self.receiptA)
        XCTAssertEqual(ok.environment, .production)
        // Not base64: refused before sending.
        let before = f.requests.count
        do {
            _ = try await receiptClient(f).verify(receiptData: "%%% not base64 %%%")
            XCTFail("expected invalidRequest")
        } catch {
            guard case .invalidRequest = error else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(f.requests.count, before)
    }

    func testAVerifyReceiptAnswerBecomesOneEventKeyedWithoutItsRequestDate() async throws {
        let f = try receiptFake()
        let c = receiptClient(f)
        let answer = try await c.verify(receiptData: Self.receiptA)
        var acceptance = try AppleAcceptance(bundleIds: ["com.example"], appAppleIds: [1234], environments: ["Production"])
        let builder = AppleAPIAnswerEvents(verifier: Fixtures.authority.verifier(), acceptance: acceptance)
        let e = try builder.verifyReceiptEvent(answer)
        XCTAssertEqual(e.streamId, "1000000000000001", "the subscription, not the consumable")
        XCTAssertEqual(e.type, AppleAPIEvents.verifyReceipt)
        XCTAssertEqual(e.environment, "Production")
        XCTAssertEqual(e.raw, answer.body)
        XCTAssertEqual(e.expiresAt, 1_769_904_000_000)
        XCTAssertNotNil(e.signedAt, "receipt.request_date_ms")
        let stored = try XCTUnwrap(try jsonObject(e.payload)[AppleAPIEvents.verifyReceiptKey] as? [String: Any])
        XCTAssertNil(stored["latest_receipt"], "the blob stays in raw")
        XCTAssertEqual(FactDecoder.facts(of: e).map(\.kind), [.transaction, .renewal])
        try await Task.sleep(for: .milliseconds(5))
        let again = try await c.verify(receiptData: Self.receiptA)
        XCTAssertNotEqual(again.body, answer.body, "Apple stamps its request date")
        XCTAssertEqual(try builder.verifyReceiptEvent(again).dedupeKey, e.dedupeKey)
        f.register(receiptData: Self.receiptA, .init(environment: .production, answer: Self.receiptAnswer(autoRenew: "0")))
        let changed = try await c.verify(receiptData: Self.receiptA)
        XCTAssertNotEqual(try builder.verifyReceiptEvent(changed).dedupeKey, e.dedupeKey)
        // Not ours: refused.
        acceptance = try AppleAcceptance(bundleIds: ["com.other"], appAppleIds: [1234], environments: ["Production"])
        assertRefused("app_mismatch", .notAccepted) {
            try AppleAPIAnswerEvents(verifier: Fixtures.authority.verifier(), acceptance: acceptance).verifyReceiptEvent(answer)
        }
        assertRefused("environment_mismatch", .notAccepted) { try self.events.verifyReceiptEvent(answer) }
        f.register(receiptData: Self.receiptA, .init(environment: .production, answer: Self.receiptAnswer(appItemId: 999)))
        let foreign = try await c.verify(receiptData: Self.receiptA)
        assertRefused("app_mismatch", .notAccepted) { try builder.verifyReceiptEvent(foreign) }
    }
}

typealias JWSOpts = AppleTestAuthority.JWSOptions

/// Values appended from any thread (the client's sleeps, a webhook's bodies).
final class Recorder<T: Sendable>: Sendable {
    private let storage = Mutex<[T]>([])
    func append(_ value: T) { storage.withLock { $0.append(value) } }
    var all: [T] { storage.withLock { $0 } }
}

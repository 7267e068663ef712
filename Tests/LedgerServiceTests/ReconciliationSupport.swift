import AppStore
import Crypto
import CryptoTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import Postgres
import XCTest

/// A fake App Store Server API (real HTTP on loopback, every JWT checked) and the variables that
/// point a service at it, with the In-App Purchase key written to a .p8 file as an operator would.
final class AppleAPIFixture: @unchecked Sendable {
    let fake: FakeAppStoreServer
    let key: ECPrivateKey
    let keyFile: URL

    init(authority: AppleTestAuthority, environment: String = "Sandbox") throws {
        (fake, key) = try FakeAppStoreServer.make(authority: authority, environment: environment)
        try fake.start()
        keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("iap-\(UUID().uuidString).p8")
        try Data(try key.pkcs8PEM().utf8).write(to: keyFile)
    }

    var environment: [String: String] {
        ["LEDGER_APPLE_API_ISSUER_ID": fake.credentials.issuerId, "LEDGER_APPLE_API_KEY_ID": fake.credentials.keyId,
         "LEDGER_APPLE_API_PRIVATE_KEY": keyFile.path, "LEDGER_APPLE_API_BASE_URL": fake.baseURL.absoluteString,
         "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]
    }

    func stop() async {
        await fake.shutdown()
        try? FileManager.default.removeItem(at: keyFile)
    }
}

/// Runs `body` with a service whose App Store Server API is the fake (both on loopback), and
/// always stops both.
func withReconciliation(
    environment extra: [String: String] = [:], configJSON: String? = ReconciliationFixtures.catalog,
    _ body: (ServiceHarness, FakeAppStoreServer) async throws -> Void
) async throws {
    let authority = try AppleTestAuthority.mint()
    let api = try AppleAPIFixture(authority: authority)
    do {
        try await withService(authority: authority, environment: api.environment.merging(extra) { $1 }, configJSON: configJSON) { h in
            try await body(h, api.fake)
        }
    } catch {
        await api.stop()
        throw error
    }
    await api.stop()
}

/// Subscriptions, dates and helpers shared by the reconciliation tests. Times are around the real
/// clock (the fake signs at request time, and "not expired for more than 60 days" is measured from now).
enum ReconciliationFixtures {
    static let day: Int64 = 86_400_000
    static let monthly = "com.example.monthly"
    static let yearly = "com.example.yearly"
    static let catalog = #"{"products": {"com.example.monthly": {"entitlements": ["premium"]}, "com.example.yearly": {"entitlements": ["premium", "yearly-extras"]}}}"#

    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    static func transaction(_ id: String, otid: String, product: String = monthly, purchase: Int64, expires: Int64,
                            token: String? = nil, upgraded: Bool = false, revoked: Int64? = nil) -> AppleTransaction {
        var t = AppleTestAuthority.sample(originalTransactionId: otid, transactionId: id).transaction
        t.productId = product
        t.purchaseDate = AppleTime(purchase)
        t.originalPurchaseDate = AppleTime(purchase)
        t.expiresDate = AppleTime(expires)
        t.signedDate = AppleTime(purchase)
        t.appAccountToken = token
        if upgraded { t.isUpgraded = true }
        if let revoked {
            t.revocationDate = AppleTime(revoked)
            t.revocationReason = 0
            t.revocationType = "REFUND_FULL"
        }
        return t
    }

    static func renewal(otid: String, product: String = monthly, next: String? = nil, autoRenew: Int = 1, renews: Int64) -> AppleRenewalInfo {
        var r = AppleTestAuthority.sample(originalTransactionId: otid).renewal
        r.productId = product
        r.autoRenewProductId = next ?? product
        r.autoRenewStatus = autoRenew
        r.renewalDate = AppleTime(renews)
        return r
    }

    /// A monthly subscription bought 40 days ago and renewed once (its second period runs 20 more days).
    /// Bought at `t0`, renewed once after `period` (30 days; tests inside Apple's 30 days of Sandbox
    /// notification history use shorter periods).
    static func renewedMonthly(otid: String, token: String, t0: Int64, period: Int64 = 30 * day) -> FakeAppStoreServer.Subscription {
        FakeAppStoreServer.Subscription(
            originalTransactionId: otid,
            transactions: [transaction(otid, otid: otid, purchase: t0, expires: t0 + period, token: token),
                           transaction(next(otid, 1), otid: otid, purchase: t0 + period, expires: t0 + 2 * period, token: token)],
            renewal: renewal(otid: otid, renews: t0 + 2 * period))
    }

    static func next(_ otid: String, _ n: Int64) -> String { String(Int64(otid)! + n) }

    /// Posts a V2 body to the webhook and checks it was stored.
    static func deliver(_ h: ServiceHarness, _ body: Data, file: StaticString = #filePath, line: UInt = #line) async throws {
        let a = try await h.post("/v1/apple/notifications", body)
        XCTAssertEqual(a.status, 200, a.text, file: file, line: line)
    }

    static func events(_ h: ServiceHarness, type: String) throws -> [(stream: String, payload: [String: Any])] {
        try h.admin.query("SELECT stream_id, payload::text AS p FROM events WHERE type = $1 ORDER BY position", [.text(type)],
                          name: "events of type").rows.map {
            (try $0.decode(String.self, "stream_id"),
             (try JSONSerialization.jsonObject(with: Data(try $0.decode(String.self, "p").utf8)) as? [String: Any]) ?? [:])
        }
    }

    static func count(_ h: ServiceHarness, typePrefix: String) throws -> Int64 {
        try h.admin.query("SELECT count(*) AS n FROM events WHERE type LIKE $1", [.text(typePrefix + "%")], name: "count type")
            .first!.decode(Int64.self, "n")
    }

    static func entitlements(_ h: ServiceHarness, _ customer: String) async throws -> [String] {
        let a = try await h.request("GET", "/v1/customers/\(customer)/entitlements?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        return ((a.json["entitlements"] as? [[String: Any]]) ?? []).compactMap { $0["entitlement"] as? String }.sorted()
    }

    static func subscription(_ h: ServiceHarness, _ otid: String) async throws -> [String: Any] {
        let a = try await h.request("GET", "/v1/subscriptions/\(otid)?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        return a.json
    }
}

/// A second (third, …) service instance on an existing database, as another process would run it.
final class ServiceInstance: @unchecked Sendable {
    let app: LedgerApp
    let server: HTTPServer
    var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port!)")! }

    init(database: TestDatabase, rootFile: URL, environment extra: [String: String], configJSON: String? = ReconciliationFixtures.catalog) throws {
        var env: [String: String] = [
            "LEDGER_DATABASE_URL": database.serviceConninfo, "LEDGER_LISTEN": "127.0.0.1:0", "LEDGER_APPLE_ROOT_CERTS": rootFile.path,
            "LEDGER_APPLE_BUNDLE_IDS": "com.example", "LEDGER_APPLE_APP_APPLE_IDS": "1234",
            "LEDGER_APPLE_ENVIRONMENTS": "Sandbox,Production", "LEDGER_APPLE_ALLOW_TEST_ROOTS": "true",
            "LEDGER_TOKENS": ServiceHarness.tokens,
        ]
        if let configJSON {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-config-\(UUID().uuidString).json")
            try Data(configJSON.utf8).write(to: file)
            env["LEDGER_CONFIG"] = file.path
        }
        env.merge(extra) { $1 }
        app = try LedgerApp(configuration: try LedgerConfiguration.load(environment: env), log: Log(minimum: .error))
        server = HTTPServer(configuration: app.httpConfiguration(), router: app.makeRouter())
        try server.start()
    }

    func post(_ path: String, _ body: Data) async throws -> (Int, Data) {
        var r = URLRequest(url: URL(string: path, relativeTo: baseURL)!)
        r.httpMethod = "POST"
        r.httpBody = body
        r.setValue("application/json", forHTTPHeaderField: "Content-Type")
        r.setValue("Bearer app-token-for-tests-0123456789abcdef", forHTTPHeaderField: "Authorization")
        let (data, response) = try await URLSession.shared.data(for: r)
        return ((response as! HTTPURLResponse).statusCode, data)
    }

    func stop() async {
        await server.shutdown(gracePeriod: .seconds(2))
        app.shutdown()
    }
}

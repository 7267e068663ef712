import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import XCTest

/// The query API end to end: notifications in through the webhook, answers out of the
/// projections (and of the folds, for time travel), with roles enforced.
final class QueryAPITests: XCTestCase {
    static let catalog = #"{"products": {"com.example.monthly": {"entitlements": ["premium"]}, "com.example.yearly": {"entitlements": ["premium", "archive"]}}}"#
    let day: EpochMillis = 86_400_000
    let t0: EpochMillis = 1_767_225_600_000  // 2026-01-01

    /// SUBSCRIBED on day 0 for a month, DID_RENEW on day 30 for another month, a REFUND of the
    /// renewal on day 40: the subscription is revoked from then on.
    func lifecycle(_ h: ServiceHarness, otid: String, token: String) throws -> [Data] {
        var first = AppleTestAuthority.sample(environment: "Production", originalTransactionId: otid, transactionId: otid + "1",
                                              signedDate: t0, expiresDate: t0 + 30 * day)
        first.transaction.appAccountToken = token
        var renew = AppleTestAuthority.sample(type: "DID_RENEW", subtype: nil, environment: "Production", originalTransactionId: otid,
                                              transactionId: otid + "2", signedDate: t0 + 30 * day, expiresDate: t0 + 60 * day)
        renew.transaction.appAccountToken = token
        renew.transaction.purchaseDate = AppleTime(t0 + 30 * day)
        var refund = renew
        refund.notification.notificationType = "REFUND"
        refund.notification.notificationUUID = UUID().uuidString.lowercased()
        refund.notification.signedDate = AppleTime(t0 + 40 * day)
        refund.notification.data?.status = 5
        refund.transaction.signedDate = AppleTime(t0 + 40 * day)
        refund.transaction.revocationDate = AppleTime(t0 + 40 * day)
        refund.transaction.revocationReason = 0
        return try [first, renew, refund].map { try h.authority.signSample($0) }
    }

    func testSubscriptionStateTimeTravelAndEntitlements() async throws {
        try await withService(configJSON: Self.catalog) { h in
            let token = "6f0c1b2a-0000-4000-8000-000000000001"
            let bodies = try lifecycle(h, otid: "8000000000000001", token: token)
            // Out of order on purpose: the refund first, the purchase last.
            for body in bodies.reversed() {
                let a = try await h.post("/v1/apple/notifications", body)
                XCTAssertEqual(a.status, 200, a.text)
            }
            let now = try await h.request("GET", "/v1/subscriptions/8000000000000001", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(now.status, 200, now.text)
            XCTAssertEqual(now.json["status"] as? String, "revoked")
            XCTAssertEqual(now.json["latestTransactionId"] as? String, "80000000000000012")
            XCTAssertEqual(now.json["productId"] as? String, "com.example.monthly")

            // Business time: on day 35 the renewal was in force and not yet refunded.
            let day35 = try await h.request("GET", "/v1/subscriptions/8000000000000001?at=\(t0 + 35 * day)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(day35.status, 200, day35.text)
            XCTAssertEqual(day35.json["status"] as? String, "active")
            XCTAssertEqual(day35.json["expiresDate"] as? Int64, t0 + 60 * day)
            XCTAssertEqual(day35.json["asOf"] as? Int64, t0 + 35 * day)
            // Before the first event was signed the subscription did not exist.
            let before = try await h.request("GET", "/v1/subscriptions/8000000000000001?at=\(t0 - day)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(before.status, 404)
            // Recorded time: before anything was recorded the ledger knew nothing.
            let known = try await h.request("GET", "/v1/subscriptions/8000000000000001?recordedAt=1000", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(known.status, 404)

            // Entitlements: revoked now, premium on day 35.
            let ents = try await h.request("GET", "/v1/customers/\(token)/entitlements", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(ents.status, 200, ents.text)
            XCTAssertEqual((ents.json["entitlements"] as? [Any])?.count, 0)
            let ents35 = try await h.request("GET", "/v1/customers/\(token)/entitlements?at=\(t0 + 35 * day)", token: "app-token-for-tests-0123456789abcdef")
            let list = ents35.json["entitlements"] as? [[String: Any]] ?? []
            XCTAssertEqual(list.map { $0["entitlement"] as? String }, ["premium"], ents35.text)
            XCTAssertEqual(list.first?["originalTransactionId"] as? String, "8000000000000001")

            // The auditor sees every event with its exact signed evidence.
            let events = try await h.request("GET", "/v1/subscriptions/8000000000000001/events", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(events.status, 200)
            let stored = events.json["events"] as? [[String: Any]] ?? []
            XCTAssertEqual(stored.count, 3)
            XCTAssertEqual(Set(stored.compactMap { $0["raw"] as? String }), Set(bodies.map { String(decoding: $0, as: UTF8.self) }))
            XCTAssertEqual(stored.first?["rawEncoding"] as? String, "utf8")
        }
    }

    func testEntitlementsFollowTheCatalogAndAnActiveSubscription() async throws {
        try await withService(configJSON: Self.catalog) { h in
            let token = "6f0c1b2a-0000-4000-8000-000000000002"
            let now = LedgerApp.nowMillis()
            var s = AppleTestAuthority.sample(environment: "Production", originalTransactionId: "8000000000000002",
                                              signedDate: now - day, expiresDate: now + 300 * day)
            s.transaction.productId = "com.example.yearly"
            s.renewal.productId = "com.example.yearly"
            s.transaction.appAccountToken = token
            let answer1 = try await h.post("/v1/apple/notifications", h.authority.signSample(s))
            XCTAssertEqual(answer1.status, 200)
            let ents = try await h.request("GET", "/v1/customers/\(token)/entitlements", token: "app-token-for-tests-0123456789abcdef")
            let list = ents.json["entitlements"] as? [[String: Any]] ?? []
            XCTAssertEqual(Set(list.compactMap { $0["entitlement"] as? String }), ["premium", "archive"], ents.text)
            XCTAssertEqual(list.first?["status"] as? String, "active")
            let unknown = try await h.request("GET", "/v1/customers/nobody/entitlements", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(unknown.status, 200)
            XCTAssertEqual((unknown.json["entitlements"] as? [Any])?.count, 0)
        }
    }

    func testRolesAndBadParameters() async throws {
        try await withService { h in
            let path = "/v1/subscriptions/8000000000000003"
            let none = try await h.request("GET", path)
            XCTAssertEqual(none.status, 401)
            XCTAssertEqual(none.errorCode, "unauthenticated")
            let answer2 = try await h.request("GET", path, token: "wrong")
            XCTAssertEqual(answer2.status, 401)
            let answer3 = try await h.request("GET", path, token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(answer3.status, 404)
            let forbidden = try await h.request("GET", path + "/events", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(forbidden.status, 403)
            XCTAssertEqual(forbidden.errorCode, "forbidden")
            let answer4 = try await h.request("GET", path + "/events", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(answer4.status, 404)
            let answer5 = try await h.request("POST", "/v1/admin/rebuild", body: Data("{}".utf8), token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(answer5.status, 403)
            for bad in ["at=yesterday", "at=-5", "recordedAt=1e3", "at=1&recordedAt=x", "at=99999999999999999999",
                        "environment=PROD", "environment=Xcode", "environment="] {
                let a = try await h.request("GET", path + "?" + bad, token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 400, bad)
                XCTAssertEqual(a.errorCode, "invalid_parameter", bad)
            }
            // SQL in a path parameter is not an originalTransactionId (1–20 digits).
            let injection = try await h.request("GET", "/v1/subscriptions/x'%3B%20DROP%20TABLE%20events%3B--", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(injection.status, 400)
            XCTAssertEqual(injection.errorCode, "invalid_parameter")
            for badId in ["123456789012345678901", "12a4", "%20123", "ledger:admin"] {
                let a = try await h.request("GET", "/v1/subscriptions/\(badId)", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 400, badId)
            }
            XCTAssertEqual(try h.eventCount(), 0)
        }
    }

    func testAdminRebuildIsRecordedAndAnswersWithAReport() async throws {
        try await withService(configJSON: Self.catalog) { h in
            for body in try lifecycle(h, otid: "8000000000000004", token: "c-4") {
                let answer6 = try await h.post("/v1/apple/notifications", body)
                XCTAssertEqual(answer6.status, 200)
            }
            let dry = try await h.request("POST", "/v1/admin/rebuild", body: Data(#"{"dryRun": true}"#.utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(dry.status, 200, dry.text)
            XCTAssertEqual(dry.json["status"] as? String, "dry_run")
            let run = try await h.request("POST", "/v1/admin/rebuild", body: Data("{}".utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(run.status, 200, run.text)
            XCTAssertEqual(run.json["status"] as? String, "rebuilt")
            let bad = try await h.request("POST", "/v1/admin/rebuild", body: Data(#"{"projection": "nope"}"#.utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(bad.status, 400)
            let audit = try h.events(stream: StreamId.ledgerAdmin.text)
            XCTAssertEqual(audit.map(\.type), ["admin/rebuild-dry-run", "admin/rebuild"])
            let record = String(decoding: audit[1].raw, as: UTF8.self)
            XCTAssertTrue(record.contains("\"role\":\"admin\""), record)
            XCTAssertFalse(record.contains("admin-token-for-tests-0123456789abcdef"), "the token itself is never recorded")
            // After the rebuild the answer is unchanged.
            let state = try await h.request("GET", "/v1/subscriptions/8000000000000004", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(state.json["status"] as? String, "revoked")
        }
    }

    func testHealthReadinessMetricsAndUnknownRoutes() async throws {
        try await withService { h in
            let answer7 = try await h.request("GET", "/healthz")
            XCTAssertEqual(answer7.json["status"] as? String, "ok")
            let ready = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(ready.status, 200, ready.text)
            XCTAssertEqual(ready.json["status"] as? String, "ready")
            XCTAssertEqual((ready.json["migrations"] as? [String: Any])?["pending"] as? Int, 0)
            let missing = try await h.request("GET", "/v1/nothing-here")
            XCTAssertEqual(missing.status, 404)
            XCTAssertEqual(missing.errorCode, "not_found")
            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertTrue(metrics.text.contains("ledger_http_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"} 1"), metrics.text)
            XCTAssertTrue(metrics.text.contains("ledger_db_pool_connections{state=\"max\"}"), metrics.text)
            XCTAssertTrue(metrics.text.contains("ledger_projection_lag{projection=\"subscriptions\"} 0"), metrics.text)
        }
    }

    func testReadinessIs503WhileTheDatabaseIsUnreachable() async throws {
        try await withService(environment: ["LEDGER_DATABASE_URL": "host=/nonexistent-socket-dir port=1 dbname=ledger connect_timeout=1"]) { h in
            let ready = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(ready.status, 503, ready.text)
            XCTAssertEqual(ready.json["database"] as? String, "unavailable")
            let body = try h.authority.signSample(AppleTestAuthority.sample())
            let post = try await h.post("/v1/apple/notifications", body)
            XCTAssertEqual(post.status, 503, post.text)
            XCTAssertEqual(post.errorCode, "database_unavailable")
        }
    }
}

/// Every route the router serves is in docs/openapi.yaml, and every documented operation is served.
final class OpenAPIContractTests: XCTestCase {
    func testRouterAndOpenAPIListTheSameOperations() throws {
        let spec = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/openapi.yaml")
        let text = try String(contentsOf: spec, encoding: .utf8)
        var documented = Set<String>()
        var inPaths = false, current: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("paths:") { inPaths = true; continue }
            if inPaths, let first = line.first, first != " ", first != "#" { inPaths = false }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), line.hasSuffix(":") { current = String(line.dropFirst(2).dropLast()); continue }
            for method in ["get", "post", "put", "delete", "patch"] where line == "    \(method):" {
                if let current { documented.insert("\(method.uppercased()) \(current)") }
            }
        }
        let configuration = try LedgerConfiguration.load(environment: ["LEDGER_DATABASE_URL": "dbname=unused"])
        let app = try LedgerApp(configuration: configuration, log: Log(minimum: .error))
        defer { app.shutdown() }
        // The auditor's pages (/audit) are HTML for people, not the JSON API: they are left out of
        // the contract (AuditPageTests checks they answer HTML under the Content-Security-Policy).
        let served = Set(app.makeRouter().table.filter { !$0.pattern.hasPrefix(LedgerApp.auditPrefix + "/") && $0.pattern != LedgerApp.auditPrefix }
            .map { "\($0.method) \($0.pattern)" })
        XCTAssertFalse(documented.isEmpty)
        XCTAssertEqual(served.subtracting(documented).sorted(), [], "served but not documented in docs/openapi.yaml")
        XCTAssertEqual(documented.subtracting(served).sorted(), [], "documented but not served")
    }
}

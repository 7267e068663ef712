import AppStore
import Foundation
import LedgerCore
import LedgerMetrics
@testable import LedgerService
import LedgerStore
import LedgerTesting
import XCTest

/// Issue 20 items 2 and 3 through the real path (the service on a scratch database, the fake App
/// Store Server API on loopback checking every JWT). Expected values from Apple's documents:
/// - `data.status` "The status of an auto-renewable subscription as of the signedDate"
///   (https://developer.apple.com/documentation/appstoreservernotifications/status);
/// - Get Notification History: `onlyFailures`, and history kept for 180 days in Production and
///   30 in Sandbox (reference/apple.md §2.7; https://developer.apple.com/documentation/appstoreserverapi/get-notification-history);
/// - Production answers 401 until the app has had a release (reference/appstore-server-api.md §1);
/// - Get Transaction History v2 answers with the customer's whole history, `productType`
///   AUTO_RENEWABLE filters it (https://developer.apple.com/documentation/appstoreserverapi/get-transaction-history).
final class AppleWordTests: XCTestCase {
    typealias F = ReconciliationFixtures
    let day = ReconciliationFixtures.day

    func reconciliation(_ h: ServiceHarness) throws -> AppleReconciliation {
        try XCTUnwrap(h.app.appleAPI.reconciliation, "the API is configured")
    }

    /// The Apple status check is kept by the catch-up worker (not in the append transaction).
    func catchUp(_ h: ServiceHarness) async throws {
        _ = try await h.app.store.worker.catchUp()
    }

    // MARK: - Apple's word as a cross-check (item 2)

    /// A REFUND is lost; Apple's next notification (renewal info only, auto-renew turned off) says
    /// `status` 5. The ledger says active: a disagreement — counted, listed with both statuses and
    /// the notification as evidence — and the next reconciliation fetches the customer's history.
    /// The run backfills the REFUND (signed before Apple's statement): then the ledger agrees, and
    /// the count of disagreements on arrival stays.
    func testADisagreementIsCountedListedAndMakesTheNextRunFetchTheCustomersHistory() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 10 * day
            let otid = "1000000000002101", token = "aaaaaaaa-0000-4000-8000-000000002101"
            var sub = F.renewedMonthly(otid: otid, token: token, t0: t0)
            sub.transactions = [sub.transactions[0]]
            fake.setSubscription(sub)
            try await F.deliver(h, try fake.notify("SUBSCRIBED", subtype: "INITIAL_BUY", about: otid, date: t0))
            // Refunded on day 3 (the REFUND never arrives), auto-renew off on day 4: Apple says 5.
            sub.transactions[0] = F.transaction(otid, otid: otid, purchase: t0, expires: t0 + 30 * day, token: token, revoked: t0 + 3 * day)
            sub.status = 5
            sub.renewal = F.renewal(otid: otid, autoRenew: 0, renews: t0 + 30 * day)
            fake.setSubscription(sub)
            _ = try fake.notify("REFUND", about: otid, date: t0 + 3 * day, failed: true)
            let offBody = try fake.notify("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", about: otid, date: t0 + 4 * day,
                                          withTransaction: false)
            try await F.deliver(h, offBody)
            try await catchUp(h)
            let active = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(active, "active", "the ledger cannot know of the refund")

            // Listed with both statuses and the evidence.
            var drift = try await h.request("GET", "/v1/admin/drift", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(drift.status, 200, drift.text)
            var apple = try XCTUnwrap(drift.json["apple"] as? [String: Any])
            XCTAssertEqual((apple["checked"] as? NSNumber)?.intValue, 2, "SUBSCRIBED (1) and the auto-renew change (5)")
            XCTAssertEqual((apple["disagreeing"] as? NSNumber)?.intValue, 1)
            let listed = try XCTUnwrap((apple["disagreements"] as? [[String: Any]])?.first)
            XCTAssertEqual(listed["originalTransactionId"] as? String, otid)
            XCTAssertEqual(listed["environment"] as? String, "Sandbox")
            XCTAssertEqual((listed["appleStatus"] as? NSNumber)?.intValue, 5)
            XCTAssertEqual(listed["appleStatusName"] as? String, "REVOKED")
            XCTAssertEqual(listed["ledgerStatus"] as? String, "active")
            XCTAssertEqual((listed["ledgerAppleStatus"] as? NSNumber)?.intValue, 1)
            XCTAssertEqual(listed["message"] as? String, "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED")
            XCTAssertEqual((listed["signedDate"] as? NSNumber)?.int64Value, t0 + 4 * day)
            XCTAssertEqual(listed["customerId"] as? String, token)
            let evidence = try XCTUnwrap((listed["evidence"] as? [String: Any])?["position"] as? NSNumber).int64Value
            let stored = try h.admin.query("SELECT type FROM events WHERE position = $1", [.int64(evidence)], name: "evidence").first
            XCTAssertEqual(try stored?.decode(String.self, "type"), "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED")
            // Counted.
            var metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
            XCTAssertTrue(metrics.contains(#"ledger_apple_status_disagreements_total{environment="Sandbox",source="notification"} 1"#), metrics)
            XCTAssertTrue(metrics.contains("ledger_apple_status_disagreeing 1"), metrics)

            // The next run asks for that customer's transaction history (auto-renewables only).
            let report = try await reconciliation(h).run(ReconcileRequest(since: t0 + 2 * day, environments: ["Sandbox"]))
            XCTAssertEqual(report.counts.appleFlagged, 1)
            XCTAssertEqual(report.counts.notificationsBackfilled, 1, "the lost REFUND")
            XCTAssertEqual(report.counts.historySubscriptionsAsked, 1)
            let history = fake.requests.filter { $0.path.hasPrefix("/inApps/v2/history/") }
            XCTAssertEqual(history.count, 1)
            XCTAssertEqual(history.first?.query["productType"], "AUTO_RENEWABLE")
            XCTAssertEqual(report.appleDisagreements, [], "after the run the ledger agrees with Apple")
            let revoked = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(revoked, "revoked")
            try await catchUp(h)
            drift = try await h.request("GET", "/v1/admin/drift", token: "auditor-token-for-tests-0123456789abcdef")
            apple = try XCTUnwrap(drift.json["apple"] as? [String: Any])
            XCTAssertEqual((apple["disagreeing"] as? NSNumber)?.intValue, 0, "healed")
            XCTAssertEqual((apple["disagreedOnArrival"] as? NSNumber)?.intValue, 1, "it did disagree when it arrived")
            metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
            XCTAssertTrue(metrics.contains(#"ledger_apple_status_disagreements_total{environment="Sandbox",source="notification"} 1"#),
                          "a counter never goes down")
            XCTAssertTrue(metrics.contains("ledger_apple_status_disagreeing 0"), metrics)
            // The report of the run compares the ledger with Apple too.
            let reportJSON = try XCTUnwrap(drift.json["report"] as? [String: Any])
            XCTAssertEqual(((reportJSON["apple"] as? [String: Any])?["flaggedSubscriptions"] as? NSNumber)?.intValue, 1)

            // A second run flags nothing new: the disagreement was addressed.
            let again = try await reconciliation(h).run(ReconcileRequest(since: t0 + 2 * day, environments: ["Sandbox"]))
            XCTAssertEqual(again.counts.appleFlagged, 0)
        }
    }

    // MARK: - Reconciliation that survives a real account (item 3)

    /// Production answers 401 (the app has had no release); the Sandbox pass still runs, the
    /// Production failure is a problem of the report, and the run succeeds.
    func testAProduction401IsReportedAndTheSandboxPassStillRuns() async throws {
        try await withReconciliation { h, sandbox in
            let production = try AppleAPIFixture(authority: h.authority, environment: "Production")
            let t0 = F.now - 10 * day
            let otid = "1000000000002201", token = "aaaaaaaa-0000-4000-8000-000000002201"
            sandbox.setSubscription(F.renewedMonthly(otid: otid, token: token, t0: t0, period: 6 * day))
            _ = try sandbox.notify("SUBSCRIBED", subtype: "INITIAL_BUY", about: otid, date: t0, failed: true)
            production.fake.enqueueFailure(FakeAppStoreServer.Failure(status: 401), endpoint: .notificationHistory, times: 10)
            let c = try reconciliation(h)
            let sandboxClient = try XCTUnwrap(c.clients.client(environment: "Sandbox", bundleId: nil))
            let productionClient = AppStoreServerAPIClient(
                configuration: try AppStoreServerAPIConfiguration(
                    issuerId: production.fake.credentials.issuerId, keyId: production.fake.credentials.keyId, privateKey: production.key,
                    bundleId: "com.example", baseURL: production.fake.baseURL, allowsPlainHTTPLoopback: true),
                environment: .production)
            let both = AppleReconciliation(store: h.app.store, ingestor: c.ingestor,
                                           clients: AppStoreServerAPIClients([sandboxClient, productionClient]),
                                           catalog: c.catalog, metrics: MetricsRegistry(), log: Log(minimum: .error))
            let report = try await both.run(ReconcileRequest(since: t0 - day))
            XCTAssertEqual(report.environments, ["Production", "Sandbox"])
            XCTAssertEqual(report.outcomes, ["Production": "failed", "Sandbox": "ok"])
            let problem = try XCTUnwrap(report.problems.first { $0.stage == "environment" })
            XCTAssertEqual(problem.environment, "Production")
            XCTAssertTrue(problem.message.contains("first Production release"), problem.message)
            XCTAssertEqual(report.counts.notificationsBackfilled, 1, "the Sandbox history was read")
            let status = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(status, "active")
            let runs = try h.admin.query("SELECT status FROM reconciliation_runs", name: "runs").rows
            XCTAssertEqual(try runs.map { try $0.decode(String.self, "status") }, ["succeeded"])
            await production.stop()
        }
    }

    /// A Sandbox window older than the 30 days Apple keeps is clamped (and said), never refused.
    func testTheSandboxWindowIsClampedToTheThirtyDaysAppleKeeps() async throws {
        try await withReconciliation { h, fake in
            let otid = "1000000000002301"
            fake.setSubscription(F.renewedMonthly(otid: otid, token: "aaaaaaaa-0000-4000-8000-000000002301", t0: F.now - 10 * day, period: 5 * day))
            _ = try fake.notify("SUBSCRIBED", about: otid, date: F.now - 10 * day, failed: true)
            let asked = F.now - 90 * day
            let report = try await reconciliation(h).run(ReconcileRequest(since: asked, environments: ["Sandbox"]))
            XCTAssertEqual(report.counts.windowsClamped, 1)
            XCTAssertTrue(report.problems.contains { $0.message.contains("30 days of history Apple keeps for Sandbox") }, "\(report.problems)")
            let body = try XCTUnwrap(fake.requests.first { $0.path == "/inApps/v1/notifications/history" }?.body)
            let request = try JSONDecoder().decode(NotificationHistoryRequest.self, from: body)
            XCTAssertGreaterThanOrEqual(request.startDate, F.now - 30 * day, "inside Apple's Sandbox limit")
            XCTAssertLessThan(request.startDate, F.now - 29 * day)
            XCTAssertNil(request.onlyFailures, "an operator's run reads the full history")
            XCTAssertEqual(report.counts.notificationsBackfilled, 1)
            XCTAssertEqual(AppleReconciliation.historyLimit(environment: "Production"), 180 * day - 3_600_000)
        }
    }

    /// The periodic runner asks only for the notifications Apple could not deliver, saves how far
    /// it read after every page, stops at its page budget and the next periodic run resumes there.
    func testThePeriodicBackfillAsksOnlyFailuresAndResumesWhereItStopped() async throws {
        try await withReconciliation { h, fake in
            let otid = "1000000000002401", token = "aaaaaaaa-0000-4000-8000-000000002401"
            let t0 = F.now - 50 * 60_000
            fake.setSubscription(F.renewedMonthly(otid: otid, token: token, t0: t0, period: 30 * day))
            try await F.deliver(h, try fake.notify("SUBSCRIBED", about: otid, date: t0))  // delivered: not a failure
            for i in 1...5 {
                _ = try fake.notify("DID_CHANGE_RENEWAL_STATUS", about: otid, date: t0 + Int64(i) * 60_000, failed: true)
            }
            fake.pageSize = 1
            let c = try reconciliation(h)
            // The fake is Sandbox's (the service accepts Production too).
            let sandboxOnly = AppStoreServerAPIClients(c.clients.clients(environment: "Sandbox").map(\.client))
            let first = AppleReconciliation(store: h.app.store, ingestor: c.ingestor, clients: sandboxOnly, catalog: c.catalog,
                                            metrics: MetricsRegistry(), log: Log(minimum: .error), backfillPageBudget: 2)
            let report = try await XCTUnwrapAsync(try await first.runIfDue(every: .seconds(60)))
            XCTAssertEqual(report.trigger, "periodic")
            XCTAssertEqual(report.counts.notificationsSeen, 2, "two pages of one, the budget")
            XCTAssertTrue(report.problems.contains { $0.message.contains("the next periodic run continues") }, "\(report.problems)")
            let bodies = fake.requests.filter { $0.path == "/inApps/v1/notifications/history" }.map(\.body)
            XCTAssertTrue(bodies.allSatisfy { (try? JSONDecoder().decode(NotificationHistoryRequest.self, from: $0))?.onlyFailures == true })
            let cursor = try XCTUnwrap(try h.admin.query(
                "SELECT cursor_ms FROM reconciliation_progress WHERE environment = 'Sandbox' AND bundle_id = 'com.example'",
                name: "cursor").first?.decode(Int64.self, "cursor_ms"))
            XCTAssertEqual(cursor, t0 + 2 * 60_000, "saved after the second page: the last notification read")

            // The next period (the clock two minutes on): the window starts at the saved cursor less the overlap.
            let later = AppleReconciliation(store: h.app.store, ingestor: c.ingestor, clients: sandboxOnly, catalog: c.catalog,
                                            metrics: MetricsRegistry(), log: Log(minimum: .error),
                                            clock: { Clock.nowMillis() + 120_000 }, backfillPageBudget: 100)
            let before = fake.requests.count
            let second = try await XCTUnwrapAsync(try await later.runIfDue(every: .seconds(60)))
            let secondBody = try XCTUnwrap(fake.requests.dropFirst(before).first { $0.path == "/inApps/v1/notifications/history" }?.body)
            let asked = try JSONDecoder().decode(NotificationHistoryRequest.self, from: secondBody)
            XCTAssertEqual(asked.startDate, max(cursor - AppleReconciliation.overlap, report.until - AppleReconciliation.overlap))
            XCTAssertEqual(second.counts.notificationsBackfilled, 3, "the three the first run did not reach")
            XCTAssertEqual(try F.events(h, type: "DID_CHANGE_RENEWAL_STATUS").count, 5, "each stored once")
            let saved = try h.admin.query("SELECT cursor_ms FROM reconciliation_progress", name: "cursor").first?.decode(Int64.self, "cursor_ms")
            XCTAssertEqual(saved, second.until, "read to the end of the window")
        }
    }

    /// Two subscriptions of one customer drifted: Get Transaction History is asked once (it
    /// answers with the customer's whole history), filtered to auto-renewable subscriptions.
    func testHistoryIsAskedOncePerCustomerAndOnlyForAutoRenewables() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 20 * day
            let a = "1000000000002501", b = "1000000000002601", token = "aaaaaaaa-0000-4000-8000-000000002501"
            fake.setSubscription(FakeAppStoreServer.Subscription(originalTransactionId: a, customer: "one",
                transactions: F.renewedMonthly(otid: a, token: token, t0: t0, period: 15 * day).transactions,
                renewal: F.renewal(otid: a, renews: t0 + 30 * day)))
            fake.setSubscription(FakeAppStoreServer.Subscription(originalTransactionId: b, customer: "one", groupIdentifier: "21000002",
                transactions: F.renewedMonthly(otid: b, token: token, t0: t0, period: 15 * day).transactions,
                renewal: F.renewal(otid: b, renews: t0 + 30 * day)))
            for otid in [a, b] {
                try await F.deliver(h, try fake.notify("SUBSCRIBED", about: otid, date: t0, transactionId: otid))
                _ = try fake.notify("DID_RENEW", about: otid, date: t0 + 15 * day, failed: true)
            }
            let report = try await reconciliation(h).run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"]))
            XCTAssertEqual(Set(report.drift.map(\.key.originalTransactionId)), [a, b], "both renewals were lost")
            let history = fake.requests.filter { $0.path.hasPrefix("/inApps/v2/history/") }
            XCTAssertEqual(history.count, 1, "one customer, one history")
            XCTAssertEqual(history.first?.query["productType"], "AUTO_RENEWABLE")
            XCTAssertEqual(report.counts.historySubscriptionsAsked, 1)
            XCTAssertEqual(report.counts.historyTransactionsStored, 4, "both subscriptions' transactions")
        }
    }

    /// One client per configured app: each asks with its own `bid`; the fake knows only
    /// com.example, so the other app's pass fails alone and says so.
    func testOneClientPerConfiguredBundleId() async throws {
        try await withReconciliation(environment: ["LEDGER_APPLE_BUNDLE_IDS": "com.example,com.example.other"]) { h, fake in
            let c = try reconciliation(h)
            XCTAssertEqual(c.clients.bundleIds, ["com.example", "com.example.other"])
            XCTAssertEqual(c.clients.clients(environment: "Sandbox").map(\.bundleId), ["com.example", "com.example.other"])
            let report = try await c.run(ReconcileRequest(since: F.now - day, environments: ["Sandbox"]))
            XCTAssertEqual(report.outcomes, ["Sandbox/com.example": "ok", "Sandbox/com.example.other": "failed"])
            XCTAssertTrue(fake.refusals.contains("bid"), "\(fake.refusals)")
            let bids = Set(fake.requests.compactMap { $0.claims?["bid"] })
            XCTAssertEqual(bids, ["com.example"], "only the app the fake knows got through")
        }
    }

    /// RENEWAL_EXTENSION/SUMMARY says three subscriptions were extended; the ledger received two
    /// RENEWAL_EXTENDED: a drift problem, on the page and in the report.
    func testARenewalExtensionShortfallIsADriftProblem() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 10 * day
            var otids: [String] = []
            for i in 0..<2 {
                let otid = "10000000000027\(i)1"
                otids.append(otid)
                fake.setSubscription(F.renewedMonthly(otid: otid, token: "aaaaaaaa-0000-4000-8000-0000000027\(i)1", t0: t0, period: 20 * day))
                try await F.deliver(h, try fake.notify("RENEWAL_EXTENDED", about: otid, date: t0 + 2 * day))
            }
            var n = AppleNotification()
            n.notificationType = "RENEWAL_EXTENSION"
            n.subtype = "SUMMARY"
            n.notificationUUID = UUID().uuidString.lowercased()
            n.version = "2.0"
            n.signedDate = AppleTime(t0 + 3 * day)
            var summary = AppleNotification.NotificationSummary()
            summary.environment = "Sandbox"
            summary.appAppleId = 1234
            summary.bundleId = "com.example"
            summary.productId = F.monthly
            summary.requestIdentifier = "mass-extension-1"
            summary.succeededCount = 3
            summary.failedCount = 0
            n.summary = summary
            try await F.deliver(h, try h.authority.signNotification(n))
            let drift = try await h.request("GET", "/v1/admin/drift", token: "auditor-token-for-tests-0123456789abcdef")
            let short = try XCTUnwrap(((drift.json["apple"] as? [String: Any])?["renewalExtensionShortfalls"] as? [[String: Any]])?.first)
            XCTAssertEqual(short["requestIdentifier"] as? String, "mass-extension-1")
            XCTAssertEqual((short["succeededCount"] as? NSNumber)?.intValue, 3)
            XCTAssertEqual((short["renewalExtendedReceived"] as? NSNumber)?.intValue, 2)
            XCTAssertEqual((short["shortfall"] as? NSNumber)?.intValue, 1)
            let report = try await reconciliation(h).run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"]))
            XCTAssertTrue(report.problems.contains { $0.stage == "renewalExtension" && $0.message.contains("1 missing") }, "\(report.problems)")
        }
    }
}

import AppStore
import LedgerMetrics
import Foundation
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import Postgres
import XCTest

/// Reconciliation with Apple through the real path: a service on a scratch database (restricted
/// role), the fake App Store Server API on loopback checking every JWT, Apple-shaped signatures
/// verified by the real `SignedDataVerifier` under the test authority's root.
final class ReconciliationTests: XCTestCase {
    typealias F = ReconciliationFixtures
    let day = ReconciliationFixtures.day

    func reconciliation(_ h: ServiceHarness) throws -> AppleReconciliation {
        try XCTUnwrap(h.app.appleAPI.reconciliation, "the API is configured")
    }

    // MARK: - Backfill

    func testBackfillStoresTheMissedNotificationsOnceAndASecondRunStoresNothing() async throws {
        try await withReconciliation { h, fake in
            // Inside the 30 days of Sandbox history Apple keeps (20-day periods).
            let t0 = F.now - 25 * day
            let otid = "1000000000000101", token = "aaaaaaaa-0000-4000-8000-000000000101"
            fake.setSubscription(F.renewedMonthly(otid: otid, token: token, t0: t0, period: 20 * day))
            // SUBSCRIBED reached the webhook; DID_RENEW was lost (Apple's history has both).
            try await F.deliver(h, try fake.notify("SUBSCRIBED", subtype: "INITIAL_BUY", about: otid, date: t0, transactionId: otid))
            _ = try fake.notify("DID_RENEW", about: otid, date: t0 + 20 * day, failed: true)
            let awaited1 = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(awaited1, "expired", "the ledger missed the renewal")
            let awaited2 = try await F.entitlements(h, token)
            XCTAssertEqual(awaited2, [])

            let before = try h.eventCount()
            let report = try await reconciliation(h).run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"]))
            XCTAssertEqual(report.counts.notificationsSeen, 2)
            XCTAssertEqual(report.counts.notificationsBackfilled, 1)
            XCTAssertEqual(report.counts.notificationsAlreadyStored, 1)
            XCTAssertEqual(report.counts.subscriptionsAsked, 1)
            XCTAssertEqual(report.counts.statusAnswersStored, 1)
            XCTAssertEqual(report.problems.map(\.message), [])
            let drift = try XCTUnwrap(report.drift.first)
            XCTAssertEqual(report.drift.count, 1)
            XCTAssertEqual(drift.key, SubscriptionKey(environment: "Sandbox", originalTransactionId: otid))
            XCTAssertEqual(drift.before?.status, .expired)
            XCTAssertEqual(drift.after?.status, .active)
            XCTAssertEqual(drift.before?.entitlements, [])
            XCTAssertEqual(drift.after?.entitlements, ["premium"])
            XCTAssertEqual(drift.after?.expiresDate, t0 + 40 * day)
            XCTAssertEqual(drift.changed, ["status", "expiresDate", "entitlements"])
            // The backfilled notification went through the V2 path: its stored raw is the body.
            let renewals = try F.events(h, type: "DID_RENEW")
            XCTAssertEqual(renewals.map(\.stream), [otid])
            let awaited3 = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(awaited3, "active")
            let awaited4 = try await F.entitlements(h, token)
            XCTAssertEqual(awaited4, ["premium"])
            // The drifted subscription's transaction history was asked for and stored.
            XCTAssertEqual(report.counts.historySubscriptionsAsked, 1)
            XCTAssertEqual(report.counts.historyTransactionsStored, 2)
            XCTAssertEqual(try F.count(h, typePrefix: AppleAPIEvents.transaction), 2)
            // Stored: the notification, the statuses answer, two history transactions, the report.
            XCTAssertEqual(try h.eventCount() - before, 1 + 1 + 2 + 1)
            XCTAssertEqual(try F.events(h, type: LedgerEventType.reconciliationReport).count, 1)

            // A second run over the same window stores nothing at all.
            let stored = try h.eventCount()
            let again = try await reconciliation(h).run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"]))
            XCTAssertEqual(try h.eventCount(), stored, "a second run stores nothing new")
            XCTAssertEqual(again.counts.stored, 0)
            XCTAssertEqual(again.counts.notificationsAlreadyStored, 2)
            XCTAssertEqual(again.counts.statusAnswersUnchanged, 1)
            XCTAssertEqual(again.drift, [])
            // Both runs are on record; only the first stored a report.
            let runs = try h.admin.query("SELECT status, report_position FROM reconciliation_runs ORDER BY started_at", name: "runs").rows
            XCTAssertEqual(try runs.map { try $0.decode(String.self, "status") }, ["succeeded", "succeeded"])
            XCTAssertNotNil(try runs[0].decode(Int64?.self, "report_position"))
            XCTAssertNil(try runs[1].decode(Int64?.self, "report_position"))
        }
    }

    // MARK: - Drift healed by the status call

    /// The upgrade notification never reached the ledger and is outside the window: only Get All
    /// Subscription Statuses can tell. The report shows before → after and the entitlements move.
    func testALostUpgradeIsHealedByTheStatusCallAndTheDriftReportShowsBeforeAndAfter() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 40 * day
            let otid = "1000000000000201", token = "aaaaaaaa-0000-4000-8000-000000000201"
            var sub = F.renewedMonthly(otid: otid, token: token, t0: t0)
            fake.setSubscription(sub)
            try await F.deliver(h, try fake.notify("SUBSCRIBED", subtype: "INITIAL_BUY", about: otid, date: t0, transactionId: otid))
            try await F.deliver(h, try fake.notify("DID_RENEW", about: otid, date: t0 + 30 * day))
            // Day 35: upgrade to yearly (Apple marks the monthly period upgraded); the notification is lost.
            let upgradedAt = t0 + 35 * day
            sub.transactions[1].isUpgraded = true
            sub.transactions.append(F.transaction(F.next(otid, 2), otid: otid, product: F.yearly, purchase: upgradedAt,
                                                  expires: upgradedAt + 365 * day, token: token))
            sub.renewal = F.renewal(otid: otid, product: F.yearly, renews: upgradedAt + 365 * day)
            fake.setSubscription(sub)
            _ = try fake.notify("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", about: otid, date: upgradedAt, failed: true)
            let awaited5 = try await F.subscription(h, otid)["productId"] as? String
            XCTAssertEqual(awaited5, F.monthly)
            let awaited6 = try await F.entitlements(h, token)
            XCTAssertEqual(awaited6, ["premium"])

            let report = try await reconciliation(h).run(ReconcileRequest(since: upgradedAt + day, environments: ["Sandbox"]))
            XCTAssertEqual(report.counts.notificationsSeen, 0, "the upgrade is outside the window")
            XCTAssertEqual(report.counts.subscriptionsAsked, 1, "known to the ledger and not expired: asked")
            XCTAssertEqual(report.counts.statusAnswersStored, 1)
            let drift = try XCTUnwrap(report.drift.first)
            XCTAssertEqual(drift.before?.productId, F.monthly)
            XCTAssertEqual(drift.after?.productId, F.yearly)
            XCTAssertEqual(drift.before?.expiresDate, t0 + 60 * day)
            XCTAssertEqual(drift.after?.expiresDate, upgradedAt + 365 * day)
            XCTAssertEqual(drift.before?.entitlements, ["premium"])
            XCTAssertEqual(drift.after?.entitlements, ["premium", "yearly-extras"])
            XCTAssertTrue(report.text.contains("\(otid): active \(F.monthly)"), report.text)
            XCTAssertTrue(report.text.contains("→ active \(F.yearly)"), report.text)
            // Healed for the app backends.
            let state = try await F.subscription(h, otid)
            XCTAssertEqual(state["productId"] as? String, F.yearly)
            XCTAssertEqual((state["expiresDate"] as? NSNumber)?.int64Value, upgradedAt + 365 * day)
            let awaited7 = try await F.entitlements(h, token)
            XCTAssertEqual(awaited7, ["premium", "yearly-extras"])
            // History of the drifted subscription: the three transactions, stored as API answers.
            XCTAssertEqual(report.counts.historyTransactionsStored, 3)

            // Auditors read the same report from any instance.
            let answer = try await h.request("GET", "/v1/admin/drift", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(answer.status, 200, answer.text)
            let stored = try XCTUnwrap(answer.json["report"] as? [String: Any])
            XCTAssertEqual(stored["runId"] as? String, report.runId)
            let entry = try XCTUnwrap((stored["drift"] as? [[String: Any]])?.first)
            XCTAssertEqual(entry["originalTransactionId"] as? String, otid)
            XCTAssertEqual((entry["before"] as? [String: Any])?["productId"] as? String, F.monthly)
            XCTAssertEqual((entry["after"] as? [String: Any])?["entitlements"] as? [String], ["premium", "yearly-extras"])
            XCTAssertEqual((answer.json["latestRun"] as? [String: Any])?["status"] as? String, "succeeded")
            let awaited8 = try await h.request("GET", "/v1/admin/drift", token: "app-token-for-tests-0123456789abcdef").status
            XCTAssertEqual(awaited8, 403)
            let awaited9 = try await h.request("GET", "/v1/admin/drift").status
            XCTAssertEqual(awaited9, 401)
            // /metrics says when and what.
            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
            XCTAssertTrue(metrics.contains("ledger_reconcile_subscriptions_drifted_total 1"), metrics)
            XCTAssertTrue(metrics.contains("ledger_reconcile_notifications_backfilled_total 0"), metrics)
            XCTAssertFalse(metrics.contains("ledger_reconcile_last_run_timestamp_seconds 0\n"), "a run finished")
        }
    }

    func testADryRunStoresNothingButReportsWhatWouldChange() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 40 * day
            let otid = "1000000000000301", token = "aaaaaaaa-0000-4000-8000-000000000301"
            fake.setSubscription(F.renewedMonthly(otid: otid, token: token, t0: t0))
            try await F.deliver(h, try fake.notify("SUBSCRIBED", subtype: "INITIAL_BUY", about: otid, date: t0, transactionId: otid))
            _ = try fake.notify("DID_RENEW", about: otid, date: t0 + 30 * day, failed: true)
            let before = try h.eventCount()
            let report = try await reconciliation(h).run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"], dryRun: true))
            XCTAssertEqual(try h.eventCount(), before, "a dry run stores nothing")
            XCTAssertTrue(report.dryRun)
            XCTAssertEqual(report.counts.notificationsBackfilled, 1, "would store")
            XCTAssertEqual(report.counts.statusAnswersStored, 1, "would store")
            XCTAssertEqual(report.drift.first?.before?.status, .expired)
            XCTAssertEqual(report.drift.first?.after?.status, .active, "what the run would change")
            XCTAssertEqual(report.counts.historyTransactionsStored, 2, "would store")
            let awaited10 = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(awaited10, "expired", "unchanged")
            XCTAssertTrue(report.text.contains("dry run: nothing stored"))
            // The run itself is on record (operational bookkeeping, not an event).
            XCTAssertEqual(try h.admin.query("SELECT count(*) AS n FROM reconciliation_runs WHERE dry_run", name: "dry runs")
                .first!.decode(Int64.self, "n"), 1)
        }
    }

    // MARK: - A lost REFUND_REVERSED

    func testALostRefundReversalIsHealedAndTheRefundCaseShowsWhoSaidSo() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 10 * day
            let otid = "1000000000000401", token = "aaaaaaaa-0000-4000-8000-000000000401"
            var sub = FakeAppStoreServer.Subscription(
                originalTransactionId: otid,
                transactions: [F.transaction(otid, otid: otid, purchase: t0, expires: t0 + 30 * day, token: token)],
                renewal: F.renewal(otid: otid, renews: t0 + 30 * day))
            fake.setSubscription(sub)
            try await F.deliver(h, try fake.notify("SUBSCRIBED", subtype: "INITIAL_BUY", about: otid, date: t0))
            // Refunded on day 2 (delivered), reversed on day 3 (lost, outside the window).
            sub.transactions[0] = F.transaction(otid, otid: otid, purchase: t0, expires: t0 + 30 * day, token: token, revoked: t0 + 2 * day)
            sub.status = 5
            fake.setSubscription(sub)
            try await F.deliver(h, try fake.notify("REFUND", about: otid, date: t0 + 2 * day))
            sub.transactions[0] = F.transaction(otid, otid: otid, purchase: t0, expires: t0 + 30 * day, token: token)
            sub.status = 1
            fake.setSubscription(sub)
            _ = try fake.notify("REFUND_REVERSED", about: otid, date: t0 + 3 * day, failed: true)
            let awaited11 = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(awaited11, "revoked")

            let report = try await reconciliation(h).run(ReconcileRequest(since: t0 + 4 * day, environments: ["Sandbox"]))
            XCTAssertEqual(report.drift.first?.before?.status, .revoked)
            XCTAssertEqual(report.drift.first?.after?.status, .active)
            let awaited12 = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(awaited12, "active", "Apple's answer reverses the refund")
            let awaited13 = try await F.entitlements(h, token)
            XCTAssertEqual(awaited13, ["premium"])
            // Time travel: revoked between the refund and Apple's answer, as the ledger knows it now.
            let during = try await h.request("GET", "/v1/subscriptions/\(otid)?environment=Sandbox&at=\(t0 + 3 * day)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(during.json["status"] as? String, "revoked")

            // The auditor's case: REFUND (notification) then REFUND_REVERSED stated by Apple's API.
            let c = try await h.request("GET", "/v1/refunds/apple:\(otid)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(c.status, 200, c.text)
            XCTAssertEqual(c.json["outcome"] as? String, "reversed")
            let entries = try XCTUnwrap(c.json["appleNotifications"] as? [[String: Any]])
            XCTAssertEqual(entries.map { $0["notificationType"] as? String }, ["REFUND", "REFUND_REVERSED"])
            XCTAssertEqual(entries.map { $0["origin"] as? String }, ["apple.v2", "apple.api"])
            // Asking again (nothing changed) adds no entry: API answers restate, they do not repeat.
            _ = try await reconciliation(h).run(ReconcileRequest(since: t0 + 4 * day, environments: ["Sandbox"], all: true))
            let again = try await h.request("GET", "/v1/refunds/apple:\(otid)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual((again.json["appleNotifications"] as? [[String: Any]])?.count, 2)
        }
    }

    // MARK: - Paging and Apple's rate limits

    func testEveryPageIsWalkedAnd429sWithRetryAfterSlowTheRunDownButNeverStopIt() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 20 * day
            let otid = "1000000000000501", token = "aaaaaaaa-0000-4000-8000-000000000501"
            fake.setSubscription(F.renewedMonthly(otid: otid, token: token, t0: t0))
            fake.pageSize = 2
            for i in 0..<5 {
                _ = try fake.notify(i == 0 ? "SUBSCRIBED" : "DID_CHANGE_RENEWAL_STATUS", about: otid, date: t0 + Int64(i) * day, failed: true)
            }
            // One 429 on the history (the client waits Retry-After, absolute ms as Apple sends it),
            // then more 429s on the statuses than the client's own attempts: the run waits them out.
            fake.enqueueFailure(.rateLimited(retryAtMillis: F.now + 300), endpoint: .notificationHistory)
            fake.enqueueFailure(.rateLimited(retryAtMillis: F.now + 200), endpoint: .subscriptionStatuses, times: 6)
            let started = ContinuousClock.now
            let report = try await reconciliation(h).run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"]))
            XCTAssertGreaterThanOrEqual(ContinuousClock.now - started, .milliseconds(300), "Retry-After was waited for")
            XCTAssertEqual(report.counts.notificationsSeen, 5)
            XCTAssertEqual(report.counts.notificationsBackfilled, 5)
            let pages = fake.requests.filter { $0.path == "/inApps/v1/notifications/history" }
            XCTAssertEqual(pages.count, 1 + 3, "a 429, then three pages of two")
            XCTAssertEqual(Set(pages.map(\.body)).count, 1, "every page asks with the same body")
            XCTAssertEqual(pages.compactMap { $0.query["paginationToken"] }.count, 2)
            XCTAssertEqual(report.counts.rateLimitedWaits, 1, "the client's attempts ran out once; the run waited")
            XCTAssertEqual(fake.requests.filter { $0.path.hasPrefix("/inApps/v1/subscriptions/") }.count, 7)
            XCTAssertEqual(report.counts.statusAnswersStored, 1)
            XCTAssertEqual(fake.refusals, [], "every token was accepted")
        }
    }

    // MARK: - Hostile and broken answers

    func testHostileAndMalformedAnswersAreRefusedReportedAndNothingOfThemIsStored() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 10 * day
            let otid = "1000000000000601"
            fake.setSubscription(FakeAppStoreServer.Subscription(
                originalTransactionId: otid, transactions: [F.transaction(otid, otid: otid, purchase: t0, expires: t0 + 30 * day)],
                renewal: F.renewal(otid: otid, renews: t0 + 30 * day)))
            try await F.deliver(h, try fake.notify("SUBSCRIBED", about: otid, date: t0))
            // A history item signed under another root, a body that is not JSON, an answer for another app.
            let stranger = try AppleTestAuthority.mint()
            var n = AppleTestAuthority.sample(environment: "Sandbox", originalTransactionId: "1000000000000699")
            n.notification.signedDate = AppleTime(t0 + day)
            fake.addNotification(body: try stranger.signSample(n), date: t0 + day)
            fake.enqueueFailure(.answer(Data("<html>proxy error</html>".utf8)), endpoint: .subscriptionStatuses)
            let before = try h.eventCount()
            var report = try await reconciliation(h).run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"]))
            XCTAssertEqual(report.counts.notificationsRefused, 1)
            XCTAssertTrue(report.problems.contains { $0.stage == "notificationHistory" && $0.message.contains("refused") }, "\(report.problems)")
            XCTAssertTrue(report.problems.contains { $0.stage == "statuses" && $0.message.contains("could not be read") }, "\(report.problems)")
            XCTAssertEqual(try h.eventCount(), before, "nothing of a refused answer is stored")
            XCTAssertEqual(try h.events(stream: "1000000000000699").count, 0)

            // An answer for another app (Apple-signed, wrong bundle): refused, reported.
            let foreign = #"{"environment":"Sandbox","bundleId":"com.other","appAppleId":1234,"data":[]}"#
            fake.enqueueFailure(.answer(Data(foreign.utf8)), endpoint: .subscriptionStatuses)
            report = try await reconciliation(h).run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"]))
            XCTAssertTrue(report.problems.contains { $0.message.contains("app_mismatch") }, "\(report.problems)")

            // A key Apple does not know: the fake refuses the JWT (401); the run fails, saying what to check.
            let wrongKey = try AppleAPIFixture(authority: h.authority)
            let c = try XCTUnwrap(h.app.appleAPI.reconciliation)
            let misconfigured = AppleReconciliation(
                store: h.app.store, ingestor: c.ingestor,
                clients: AppStoreServerAPIClients(byEnvironment: ["Sandbox": AppStoreServerAPIClient(
                    configuration: try AppStoreServerAPIConfiguration(issuerId: fake.credentials.issuerId, keyId: fake.credentials.keyId,
                                                                      privateKey: wrongKey.key, bundleId: "com.example", baseURL: fake.baseURL,
                                                                      allowsPlainHTTPLoopback: true),
                    environment: .sandbox)]),
                catalog: c.catalog, metrics: MetricsRegistry(), log: Log(minimum: .error))
            do {
                _ = try await misconfigured.run(ReconcileRequest(since: t0 - day, environments: ["Sandbox"]))
                XCTFail("a refused key must fail the run")
            } catch let failure as ReconciliationError {
                guard case .apple(let apple) = failure else { return XCTFail("\(failure)") }
                XCTAssertEqual(apple.httpStatus, 401)
                XCTAssertTrue(failure.description.contains("LEDGER_APPLE_API_KEY_ID"), failure.description)
            }
            XCTAssertEqual(fake.refusals.last, "signature")
            await wrongKey.stop()
            let failed = try h.admin.query("SELECT error FROM reconciliation_runs WHERE status = 'failed'", name: "failed").rows
            XCTAssertEqual(failed.count, 1)
        }
    }

    // MARK: - The admin route

    func testAdminReconcileAnswers202WithARunIdRecordsWhoAskedAndRefusesASecondRunMeanwhile() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 40 * day
            let otid = "1000000000000701", token = "aaaaaaaa-0000-4000-8000-000000000701"
            fake.setSubscription(F.renewedMonthly(otid: otid, token: token, t0: t0))
            try await F.deliver(h, try fake.notify("SUBSCRIBED", about: otid, date: t0, transactionId: otid))
            _ = try fake.notify("DID_RENEW", about: otid, date: t0 + 30 * day, failed: true)
            let body = Data(#"{"since": \#(t0 - day), "environment": "Sandbox"}"#.utf8)
            let awaited14 = try await h.request("POST", "/v1/admin/reconcile", body: body, token: "auditor-token-for-tests-0123456789abcdef").status
            XCTAssertEqual(awaited14, 403)
            let awaited15 = try await h.request("POST", "/v1/admin/reconcile", body: body).status
            XCTAssertEqual(awaited15, 401)
            for bad in [#"{"since": "yesterday"}"#, #"{"environment": "PROD"}"#, #"{"dryRun": "yes"}"#, #"[1]"#,
                        #"{"since": 2000, "until": 1000}"#] {
                let a = try await h.request("POST", "/v1/admin/reconcile", body: Data(bad.utf8), token: "admin-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 400, "\(bad): \(a.text)")
                XCTAssertNotNil(a.errorCode)
            }
            // Another run holds the lock: 409, naming nothing secret.
            let held = try await XCTUnwrapAsync(try await h.app.store.reconciliation.tryLock(.reconciliation))
            let busy = try await h.request("POST", "/v1/admin/reconcile", body: body, token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(busy.status, 409, busy.text)
            XCTAssertEqual(busy.errorCode, "reconciliation_running")
            await held.release()

            let started = try await h.request("POST", "/v1/admin/reconcile", body: body, token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(started.status, 202, started.text)
            let runId = try XCTUnwrap(started.json["runId"] as? String)
            XCTAssertEqual(started.headers["location"], "/v1/admin/drift?runId=\(runId)")
            var run: [String: Any] = [:]
            for _ in 0..<100 {
                run = (try await h.request("GET", "/v1/admin/drift?runId=\(runId)", token: "auditor-token-for-tests-0123456789abcdef").json["run"] as? [String: Any]) ?? [:]
                if run["status"] as? String != "running" { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            XCTAssertEqual(run["status"] as? String, "succeeded", "\(run)")
            XCTAssertEqual((run["requestedBy"] as? [String: Any])?["role"] as? String, "admin")
            let admin = try F.events(h, type: "admin/reconcile")
            XCTAssertEqual(admin.count, 1)
            XCTAssertEqual(admin.first?.payload["runId"] as? String, runId)
            let awaited16 = try await F.subscription(h, otid)["status"] as? String
            XCTAssertEqual(awaited16, "active")
            let drift = try await h.request("GET", "/v1/admin/drift?runId=\(runId)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(((drift.json["report"] as? [String: Any])?["drift"] as? [Any])?.count, 1)
            let awaited17 = try await h.request("GET", "/v1/admin/drift?runId=nope", token: "auditor-token-for-tests-0123456789abcdef").status
            XCTAssertEqual(awaited17, 404)
        }
    }

    func testWithoutAPICredentialsReconciliationSaysWhatToConfigure() async throws {
        try await withService { h in
            let a = try await h.request("POST", "/v1/admin/reconcile", body: Data("{}".utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(a.status, 422, a.text)
            XCTAssertEqual(a.errorCode, "apple_api_not_configured")
            XCTAssertTrue(a.text.contains("LEDGER_APPLE_API_ISSUER_ID"), a.text)
            let drift = try await h.request("GET", "/v1/admin/drift", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(drift.status, 200)
            XCTAssertTrue(drift.json["report"] is NSNull)
        }
    }

    // MARK: - Exactly one periodic runner

    func testExactlyOnePeriodicRunAcrossTwoInstancesOnOneDatabase() async throws {
        let authority = try AppleTestAuthority.mint()
        let api = try AppleAPIFixture(authority: authority)
        let database = try TestDatabase.create()
        let rootFile = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-root-\(UUID().uuidString).pem")
        try Data(authority.root.pem.utf8).write(to: rootFile)
        let a = try ServiceInstance(database: database, rootFile: rootFile, environment: api.environment)
        let b = try ServiceInstance(database: database, rootFile: rootFile, environment: api.environment)
        let t0 = F.now - 40 * day
        api.fake.setSubscription(F.renewedMonthly(otid: "1000000000000801", token: "aaaaaaaa-0000-4000-8000-000000000801", t0: t0))
        _ = try api.fake.notify("SUBSCRIBED", about: "1000000000000801", date: F.now - 1000, failed: true)
        let ra = try XCTUnwrap(a.app.appleAPI.reconciliation), rb = try XCTUnwrap(b.app.appleAPI.reconciliation)
        // Ticks of both instances race, several times each.
        let results = await withTaskGroup(of: Bool.self) { group in
            for r in [ra, rb, ra, rb] { group.addTask { ((try? await r.runIfDue(every: .seconds(3600))) ?? nil) != nil } }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        XCTAssertEqual(results.filter { $0 }.count, 1, "one run per period, whichever instance")
        // The services themselves, ticking every 50 ms on both instances for a while: still one.
        let services = [ReconciliationService(reconciliation: ra, every: .seconds(3600), log: Log(minimum: .error), check: .milliseconds(50)),
                        ReconciliationService(reconciliation: rb, every: .seconds(3600), log: Log(minimum: .error), check: .milliseconds(50))]
        let running = services.map { s in Task { try await s.run() } }
        try await Task.sleep(for: .milliseconds(600))
        for s in services { await s.shutdown() }
        for t in running { _ = try await t.value }
        let admin = try database.connect()
        XCTAssertEqual(try admin.query("SELECT count(*) AS n FROM reconciliation_runs WHERE trigger = 'periodic'", name: "periodic")
            .first!.decode(Int64.self, "n"), 1)
        XCTAssertEqual(try admin.query("SELECT count(*) AS n FROM events WHERE type = 'SUBSCRIBED'", name: "backfilled")
            .first!.decode(Int64.self, "n"), 1, "backfilled once")
        await a.stop()
        await b.stop()
        await api.stop()
        try? FileManager.default.removeItem(at: rootFile)
        try database.drop()
    }

    // MARK: - Test notification

    func testATestNotificationRequestedFromAppleArrivesThroughTheWebhook() async throws {
        try await withReconciliation { h, fake in
            let r = try reconciliation(h)
            // No URL configured at Apple: a clear error.
            do {
                _ = try await r.testNotification(environment: "Sandbox", timeout: .seconds(2))
                XCTFail("4040007 expected")
            } catch {
                XCTAssertTrue("\(error)".contains("4040007"), "\(error)")
                XCTAssertTrue("\(error)".contains("App Store Connect"), "\(error)")
            }
            fake.webhookURL = h.baseURL.appendingPathComponent("v1/apple/notifications")
            let outcome = try await r.testNotification(environment: "Sandbox", timeout: .seconds(20), poll: .milliseconds(100))
            let position = try XCTUnwrap(outcome.position, "stored through the webhook")
            XCTAssertEqual(outcome.sendAttempts.last?.sendAttemptResult, "SUCCESS")
            let stored = try h.events(stream: StreamId.appleTest.text)
            XCTAssertEqual(stored.count, 1)
            XCTAssertEqual(stored.first?.dedupeKey, outcome.notificationUUID)
            XCTAssertGreaterThan(position, 0)
        }
    }
}

/// `XCTUnwrap` for an async expression.
func XCTUnwrapAsync<T>(_ value: @autoclosure () async throws -> T?, file: StaticString = #filePath, line: UInt = #line) async throws -> T {
    let v = try await value()
    return try XCTUnwrap(v, file: file, line: line)
}

import AppStore
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import XCTest

/// The drift report page: the report reconciliation stored (made here by a real run against the
/// fake App Store Server API), read over HTTP with an auditor's session.
extension AuditPageTests {
    func testDriftPageShowsTheLatestReportBeforeAndAfter() async throws {
        typealias F = ReconciliationFixtures
        let day = F.day
        try await withReconciliation { h, fake in
            let (_, cookie) = try signIn(h)
            let session = try XCTUnwrap(cookie)

            // Empty state: said in words, with how to start a run.
            let empty = try get(h, "/audit/drift", cookie: session)
            assertPage(empty, 200)
            let e = String(decoding: empty.body, as: UTF8.self)
            XCTAssertTrue(e.contains("No reconciliation has run yet"), e)
            XCTAssertTrue(e.contains("ledger reconcile --since") && e.contains("POST /v1/admin/reconcile"), e)
            XCTAssertFalse(e.contains("cannot reconcile yet"), "credentials are configured here")
            XCTAssertTrue(e.contains("<a href=\"/audit/drift\" aria-current=\"page\">Drift report</a>"), "in the navigation, current")

            // A lost upgrade to a product whose id holds markup (Apple's data: it signs whatever the app defined).
            let hostileProduct = "com.example.<img src=x onerror=alert(1)>"
            let t0 = F.now - 40 * day
            let otid = "1000000000000801", token = "aaaaaaaa-0000-4000-8000-000000000801"
            var sub = F.renewedMonthly(otid: otid, token: token, t0: t0)
            fake.setSubscription(sub)
            try await F.deliver(h, try fake.notify("SUBSCRIBED", subtype: "INITIAL_BUY", about: otid, date: t0, transactionId: otid))
            try await F.deliver(h, try fake.notify("DID_RENEW", about: otid, date: t0 + 30 * day))
            let upgradedAt = t0 + 35 * day
            sub.transactions[1].isUpgraded = true
            sub.transactions.append(F.transaction(F.next(otid, 2), otid: otid, product: hostileProduct, purchase: upgradedAt,
                                                  expires: upgradedAt + 365 * day, token: token))
            sub.renewal = F.renewal(otid: otid, product: hostileProduct, renews: upgradedAt + 365 * day)
            fake.setSubscription(sub)
            let reconciliation = try XCTUnwrap(h.app.appleAPI.reconciliation)
            let report = try await reconciliation.run(ReconcileRequest(since: upgradedAt + day, environments: ["Sandbox"]))
            XCTAssertEqual(report.drift.count, 1)

            let shown = try get(h, "/audit/drift", cookie: session)
            assertPage(shown, 200)
            let s = String(decoding: shown.body, as: UTF8.self)
            XCTAssertTrue(s.contains("<code id=\"report-run\">\(report.runId)</code>"), "the report of the run")
            XCTAssertTrue(s.contains("its report is shown below"), s)
            XCTAssertTrue(s.contains("<span class=\"ok\">succeeded</span>"))
            XCTAssertTrue(s.contains("href=\"/audit/subscriptions/\(otid)?environment=Sandbox\""), "each subscription links to its timeline")
            XCTAssertTrue(s.contains("changed: autoRenewProductId, entitlements, expiresDate, productId"), s)
            // Before → after, the changed rows marked: product, expiry, entitlements.
            XCTAssertTrue(s.contains("<td data-label=\"Before\">\(F.monthly)</td>"), s)
            XCTAssertTrue(s.contains("<strong>com.example.&lt;img src=x onerror=alert(1)&gt;</strong>"), "Apple's value, escaped")
            XCTAssertFalse(s.contains("<img src=x"), "never markup")
            XCTAssertTrue(s.contains("<td data-label=\"Before\">premium</td>"), s)
            XCTAssertTrue(s.contains(PageTime.utc(t0 + 60 * day)) && s.contains(PageTime.utc(upgradedAt + 365 * day)), "expiry before and after")
            XCTAssertTrue(s.contains("<strong>1</strong> answers stored"), "the run's counts")
            XCTAssertTrue(s.contains("id=\"no-problems\""))
            // The stored report is downloadable as evidence, and is the API's.
            let api = try await h.request("GET", "/v1/admin/drift", token: "auditor-token-for-tests-0123456789abcdef")
            let position = try XCTUnwrap((api.json["reportPosition"] as? NSNumber)?.int64Value)
            XCTAssertTrue(s.contains("href=\"/audit/events/\(position)/raw\""))
            XCTAssertEqual(try get(h, "/audit/events/\(position)/raw", cookie: session).status, 200)

            // A second run finds the ledger in step: the latest run says so, the report stays the first run's.
            let again = try await reconciliation.run(ReconcileRequest(since: upgradedAt + day, environments: ["Sandbox"]))
            XCTAssertEqual(again.drift, [])
            let second = String(decoding: try get(h, "/audit/drift", cookie: session).body, as: UTF8.self)
            XCTAssertTrue(second.contains("<code>\(again.runId)</code>"), "the latest run")
            XCTAssertTrue(second.contains("found the ledger in step with Apple; the report below is from run \(report.runId)"), second)

            // Error state: a failed run, its error (any text) shown escaped.
            try h.admin.execute(script:
                """
                INSERT INTO reconciliation_runs (run_id, trigger, environments, window_since, window_until, dry_run, all_known,
                    requested_by, started_at, finished_at, status, error)
                VALUES ('failed-run', 'admin', '{Sandbox}', 1, 2, false, false, '{"role": "admin", "fingerprint": "<b>x</b>"}',
                        \(F.now + 1000), \(F.now + 2000), 'failed', 'Apple said 401 <script>alert(1)</script>: check LEDGER_APPLE_API_KEY_ID')
                """, name: "failed run")
            let failed = try get(h, "/audit/drift", cookie: session)
            assertPage(failed, 200)
            let f = String(decoding: failed.body, as: UTF8.self)
            XCTAssertTrue(f.contains("<span class=\"bad\">failed</span>"), f)
            XCTAssertTrue(f.contains("Apple said 401 &lt;script&gt;alert(1)&lt;/script&gt;: check LEDGER_APPLE_API_KEY_ID"), f)
            XCTAssertTrue(f.contains("fingerprint &lt;b&gt;x&lt;/b&gt;"), f)
            XCTAssertFalse(f.contains("<script>alert") || f.contains("<b>x"))
            XCTAssertTrue(f.contains("it stored no report; the report below (if any) is from an earlier run"))
            XCTAssertTrue(f.contains(report.runId), "the last report is still shown")

            // An admin session reads it too; an app token and no session do not.
            let (_, adminCookie) = try signIn(h, token: "admin-token-for-tests-0123456789abcdef")
            assertPage(try get(h, "/audit/drift", cookie: try XCTUnwrap(adminCookie)), 200)
            assertPage(try get(h, "/audit/drift", headers: ["Authorization": "Bearer app-token-for-tests-0123456789abcdef"]), 403)
            let anonymous = try get(h, "/audit/drift")
            XCTAssertEqual(anonymous.status, 303)
            XCTAssertEqual(anonymous.headers["location"], "/audit/login?next=%2Faudit%2Fdrift")
        }
    }

    func testDriftPageWithoutAPICredentialsSaysWhatToConfigure() async throws {
        try await withService { h in
            let (_, cookie) = try signIn(h)
            let page = try get(h, "/audit/drift", cookie: try XCTUnwrap(cookie))
            assertPage(page, 200)
            let p = String(decoding: page.body, as: UTF8.self)
            XCTAssertTrue(p.contains("No reconciliation has run yet"), p)
            XCTAssertTrue(p.contains("This service cannot reconcile yet: set LEDGER_APPLE_API_ISSUER_ID"), p)
        }
    }
}

/// The pages' UTC rendering, for asserting dates.
enum PageTime {
    static func utc(_ ms: Int64) -> String { AuditPages.utc(ms) }
}

extension AuditHTMLTests {
    /// A stored report is read field by field: hostile strings everywhere, wrong types, missing
    /// fields and a report that is not an object all render as text, never as markup or a crash.
    func testDriftPageRendersHostileAndMisshapenReportsAsText() throws {
        for value in Self.hostile {
            let snapshot: JSONValue = .object(["status": .string(value), "productId": .string(value), "expiresDate": .string(value),
                                               "autoRenewStatus": .string(value), "autoRenewProductId": .string(value),
                                               "customerId": .string(value), "entitlements": .array([.string(value), .integer(3)])])
            let report: JSONValue = .object([
                "runId": .string(value), "trigger": .string(value), "requestedBy": .object(["role": .string(value)]),
                "environments": .array([.string(value)]), "window": .string(value), "all": .string(value),
                "notifications": .object(["seen": .string(value)]), "statuses": .array([]),
                "drift": .array([
                    .object(["environment": .string(value), "originalTransactionId": .string(value), "changed": .array([.string(value)]),
                             "before": snapshot, "after": snapshot]),
                    .object(["originalTransactionId": .integer(5), "before": .null, "after": .string(value)]),
                    .string(value), .null,
                ]),
                "problems": .array([.object(["stage": .string(value), "environment": .string(value),
                                             "originalTransactionId": .string(value), "message": .string(value)]), .integer(1)]),
            ])
            var run = ReconciliationStore.Run(runId: value, trigger: value, environments: [value], since: 1, until: 2, dryRun: false,
                                              all: false, requestedBy: .object([value: .string(value)]), startedAt: 3)
            run.status = value
            run.error = value
            run.summary = .object(["notifications": .string(value)])
            for view in [DriftReports.View(report: report, reportPosition: 9, reportRecordedAt: 4, run: run),
                         DriftReports.View(report: .string(value), reportPosition: 9, reportRecordedAt: nil, run: nil),
                         DriftReports.View(report: .array([report]), reportPosition: nil, reportRecordedAt: nil, run: run)] {
                let page = AuditPages.drift(DriftPageModel(view: view, unavailable: value), csrf: value).rendered
                for needle in ["<script>", "<img", "<svg", "onmouseover='"] {
                    XCTAssertFalse(page.contains(needle) && value.contains(needle), "\(needle) from \(value) leaked")
                }
                XCTAssertFalse(page.contains("<script>"), "no inline script at all")
                XCTAssertFalse(page.contains("style=\""), "no inline style at all")
            }
            let escaped = AuditPages.drift(DriftPageModel(view: DriftReports.View(report: report, reportPosition: 9, reportRecordedAt: 4,
                                                                                  run: run)), csrf: "t").rendered
            XCTAssertTrue(escaped.contains(HTML.escape(value)), "the value is shown, as text")
            XCTAssertTrue(escaped.contains("(unknown to the ledger before the run)"), "a subscription new to the ledger")
        }
        // Over the limit: the first ones, and where the rest are.
        let entry: JSONValue = .object(["environment": .string("Sandbox"), "originalTransactionId": .string("1"), "changed": .array([]),
                                        "before": .null, "after": .null])
        let many = AuditPages.drift(DriftPageModel(view: DriftReports.View(report: .object(["drift": .array(Array(repeating: entry, count: 5))]),
                                                                           reportPosition: 1, reportRecordedAt: 1, run: nil), limit: 2),
                                    csrf: "t").rendered
        XCTAssertTrue(many.contains("Only the first 2 of 5 are shown"), many)
        XCTAssertEqual(many.components(separatedBy: "<section class=\"event drift\"").count - 1, 2)
    }
}

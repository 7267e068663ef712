import Foundation
@testable import LedgerCore
@testable import LedgerService
import LedgerTesting
import XCTest

/// `GET /v1/reports/{name}` through HTTP: a generated population posted as signed notifications;
/// each report's CSV equals the generator's own model (`ReportModel`) rendered the same way; a
/// report names its position and `?asOfPosition=` gives the same bytes after more appends; bad
/// parameters are 400s that say what to send.
final class ReportAPITests: XCTestCase {
    static let start: EpochMillis = 1_767_225_600_000  // 2026-01-01, inside the minted chains' validity

    func post(_ h: ServiceHarness, _ notes: [SimulatedNotification]) async throws {
        for n in notes {
            let body = try h.authority.signNotification(n.notification, transaction: n.transaction, renewal: n.renewal)
            let a = try await h.post("/v1/apple/notifications", body)
            XCTAssertEqual(a.status, 200, a.text)
        }
    }

    func testReportsEqualTheModelAndReproduceAtTheirPosition() async throws {
        try await withService { h in
            let generator = LifecycleGenerator(customers: 10, days: 150, start: Self.start, seed: 23, bundleId: "com.example",
                                               environment: "Sandbox", duplicateRate: 0.1)
            let all = generator.lifecycles()
            let early = Array(all.prefix(7)), late = Array(all.suffix(3))
            try await post(h, early.flatMap(\.notifications).sorted { $0.deliveredAt < $1.deliveredAt })
            // The reporting projection is kept after the commit by the catch-up worker (the service
            // runs it; the harness drives it): until then reports name the projection's position.
            _ = try await h.app.store.worker.catchUp()

            let from = ReportDay(containing: Self.start), to = from.adding(days: 149)
            var model = ReportRollup()
            model.cells = ReportModel.cells(of: early)
            var csvAt: [String: Data] = [:], jsonAt: [String: Data] = [:]
            for name in ReportName.allCases where name != .retention {
                for interval in ReportInterval.allCases {
                    let q = "from=\(from.text)&to=\(to.text)&interval=\(interval.rawValue)"
                    let csv = try await h.request("GET", "/v1/reports/\(name.rawValue)?\(q)&format=csv", token: "auditor-token-for-tests-0123456789abcdef")
                    XCTAssertEqual(csv.status, 200, csv.text)
                    let lines = csv.text.components(separatedBy: "\r\n")
                    XCTAssertTrue(lines[0].hasPrefix("# ledger report \(name.rawValue); position=\(try h.eventCount()); chain_hash="), lines[0])
                    let expected = model.table(ReportQuery(name: name, from: from, to: to, interval: interval)).csv
                    XCTAssertEqual(lines.dropFirst().joined(separator: "\r\n"), expected, "\(name) \(interval)")
                    csvAt[q + name.rawValue] = csv.body
                    let json = try await h.request("GET", "/v1/reports/\(name.rawValue)?\(q)", token: "auditor-token-for-tests-0123456789abcdef")
                    XCTAssertEqual(json.status, 200, json.text)
                    XCTAssertEqual(json.headers["ledger-position"], String(try h.eventCount()))
                    jsonAt[q + name.rawValue] = json.body
                }
            }
            let month = try await h.request("GET", "/v1/reports/subscriptions?interval=month&environment=Sandbox&source=apple", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(month.status, 200, month.text)
            let retention = try await h.request("GET", "/v1/reports/retention?to=\(to.text)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(retention.status, 200, retention.text)
            let cohorts = try XCTUnwrap(retention.json["cohorts"] as? [[String: Any]], retention.text)
            XCTAssertFalse(cohorts.isEmpty)
            for c in cohorts {
                // The share beside each count: retained / members, four decimals.
                let members = try XCTUnwrap(c["members"] as? Int), retained = try XCTUnwrap(c["retained"] as? [Int])
                let shares = try XCTUnwrap(c["retainedShare"] as? [String], "\(c)")
                XCTAssertEqual(shares, retained.map { ReportModel.share(Int64($0), of: Int64(members)) }, "\(c)")
            }
            let retentionCSV = try await h.request("GET", "/v1/reports/retention?to=\(to.text)&format=csv", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertTrue(retentionCSV.text.components(separatedBy: "\r\n")[1].hasPrefix("cohort,members,month_0,"), retentionCSV.text)
            XCTAssertTrue(retentionCSV.text.contains(",share_0,"), retentionCSV.text)
            let position = try h.eventCount()

            // The subscriptions behind a point: every active one on the range's last day.
            let activeOnLast = early.filter { l in
                ReportModel.cells(of: l).contains { $0.key.day == to && $0.value[.active] > 0 }
            }.count
            let drill = try await h.request("GET", "/v1/reports/subscriptions/subscriptions?from=\(from.text)&to=\(to.text)&period=\(to.text)&metric=active",
                                            token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(drill.status, 200, drill.text)
            XCTAssertEqual((drill.json["subscriptions"] as? [Any])?.count, activeOnLast, drill.text)

            // More happens; the old answers come back byte for byte at their position.
            try await post(h, late.flatMap(\.notifications))
            _ = try await h.app.store.worker.catchUp()
            for name in ReportName.allCases where name != .retention {
                let q = "from=\(from.text)&to=\(to.text)&interval=day"
                let now = try await h.request("GET", "/v1/reports/\(name.rawValue)?\(q)&format=csv", token: "auditor-token-for-tests-0123456789abcdef")
                XCTAssertNotEqual(now.body, csvAt[q + name.rawValue], "\(name) moved with the new subscriptions")
                let csv = try await h.request("GET", "/v1/reports/\(name.rawValue)?\(q)&format=csv&asOfPosition=\(position)", token: "auditor-token-for-tests-0123456789abcdef")
                XCTAssertEqual(csv.body, csvAt[q + name.rawValue], "\(name) CSV at asOfPosition=\(position)")
                let json = try await h.request("GET", "/v1/reports/\(name.rawValue)?\(q)&asOfPosition=\(position)", token: "auditor-token-for-tests-0123456789abcdef")
                XCTAssertEqual(json.body, jsonAt[q + name.rawValue], "\(name) JSON at asOfPosition=\(position)")
            }

            // Refusals.
            for bad in ["from=2026-02-30", "from=yesterday", "to=2026-1-1", "from=2026-03-01&to=2026-02-01", "interval=year",
                        "source=google", "environment=production", "asOfPosition=-1", "asOfPosition=99999999", "format=xml",
                        "from=1900-01-01&to=2026-01-01", "colour=red", "product="] {
                let a = try await h.request("GET", "/v1/reports/revenue?" + bad, token: "auditor-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 400, "\(bad): \(a.text)")
                XCTAssertEqual(a.errorCode, "invalid_parameter", bad)
            }
            for bad in ["period=2026-01-01&metric=gross_revenue", "metric=active", "period=x&metric=active"] {
                let a = try await h.request("GET", "/v1/reports/subscriptions/subscriptions?" + bad, token: "auditor-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 400, "\(bad): \(a.text)")
            }
            let unknown = try await h.request("GET", "/v1/reports/mrr", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(unknown.status, 404, unknown.text)
            XCTAssertTrue(unknown.text.contains("subscriptions"), unknown.text)
            let app = try await h.request("GET", "/v1/reports/revenue", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(app.status, 403, app.text)
        }
    }

    /// A currency is whatever the signed transaction says: the revenue report files it under its
    /// ISO 4217 code in upper case, or under `XXX` when it is not three letters, and a text cell
    /// never reaches a spreadsheet as a formula.
    func testReportCurrenciesAreCodesAndCSVCellsAreNeverFormulas() async throws {
        try await withService { h in
            for (otid, currency) in [("7300000000000001", "=HYPERLINK(\"http://x\")"), ("7300000000000002", "usd"), ("7300000000000003", "USD")] {
                var sample = AppleTestAuthority.sample(originalTransactionId: otid)
                sample.transaction.currency = currency
                let a = try await h.post("/v1/apple/notifications", try h.authority.signSample(sample))
                XCTAssertEqual(a.status, 200, a.text)
            }
            _ = try await h.app.store.worker.catchUp()
            let csv = try await h.request("GET", "/v1/reports/revenue?from=2026-01-01&to=2026-01-31&interval=month&format=csv",
                                          token: ServiceHarness.auditorToken)
            XCTAssertEqual(csv.status, 200, csv.text)
            let rows = csv.text.components(separatedBy: "\r\n").dropFirst(2).filter { !$0.isEmpty }
            XCTAssertEqual(Set(rows.map { $0.split(separator: ",")[1] }), ["USD", "XXX"], csv.text)
            XCTAssertFalse(csv.text.contains("HYPERLINK"), csv.text)
        }
        XCTAssertEqual(ReportTable.csvField("=1+1"), "'=1+1")
        XCTAssertEqual(ReportTable.csvField("-2,3"), "\"'-2,3\"")
        XCTAssertEqual(ReportDimensions.currencyCode("cny"), "CNY")
        for bad in ["", "US", "USDT", "U$D", "ÉUR", "=1+"] { XCTAssertEqual(ReportDimensions.currencyCode(bad), "XXX", bad) }
    }
}

/// The charts on the auditor's desk: the overview and a report page answer HTML under the strict
/// CSP, each chart has one circle per period and series, the table under it holds the API's CSV
/// figures, and a point's drill-down lists the subscriptions the API names.
final class ReportPageTests: XCTestCase {
    func get(_ h: ServiceHarness, _ path: String, cookie: String? = nil) throws -> RawClient.Response {
        try RawClient.request(port: h.server.port!, path: path, headers: cookie.map { ["Cookie": $0] } ?? [:])
    }

    func signIn(_ h: ServiceHarness) throws -> String {
        let page = try get(h, "/audit/login")
        let html = String(decoding: page.body, as: UTF8.self)
        let start = try XCTUnwrap(html.range(of: "name=\"csrf\" value=\"")).upperBound
        let csrf = String(html[start...].prefix { $0 != "\"" })
        let nonce = String(try XCTUnwrap(page.headers["set-cookie"]).prefix { $0 != ";" })
        let body = "csrf=\(csrf)&token=auditor-token-for-tests-0123456789abcdef&next=%2Faudit%2Freports"
        let r = try RawClient.request(port: h.server.port!, method: "POST", path: "/audit/login",
                                      headers: ["Content-Type": "application/x-www-form-urlencoded", "Cookie": nonce], body: Array(body.utf8))
        XCTAssertEqual(r.status, 303)
        return String(try XCTUnwrap(r.headers["set-cookie"]).prefix { $0 != ";" })
    }

    func count(_ needle: String, in text: String) -> Int { text.components(separatedBy: needle).count - 1 }

    func testOverviewAndAReportPage() async throws {
        try await withService(environment: ["LEDGER_SESSION_KEY": String(repeating: "k", count: 40)]) { h in
            let generator = LifecycleGenerator(customers: 8, days: 200, start: ReportAPITests.start, seed: 5, bundleId: "com.example",
                                               environment: "Sandbox")
            for n in generator.lifecycles().flatMap(\.notifications) {
                let a = try await h.post("/v1/apple/notifications", try h.authority.signNotification(n.notification, transaction: n.transaction, renewal: n.renewal))
                XCTAssertEqual(a.status, 200, a.text)
            }
            _ = try await h.app.store.worker.catchUp()
            let cookie = try signIn(h)
            let overview = try get(h, "/audit/reports", cookie: cookie)
            XCTAssertEqual(overview.status, 200, String(decoding: overview.body, as: UTF8.self).prefix(300).description)
            XCTAssertEqual(overview.headers["content-security-policy"], AuditAssets.contentSecurityPolicy)
            let html = String(decoding: overview.body, as: UTF8.self)
            XCTAssertFalse(html.contains("<script>") || html.contains("style="), "no inline script or style")
            let subs = try XCTUnwrap(html.components(separatedBy: "id=\"chart-subscriptions\"").last?.components(separatedBy: "</section>").first)
            XCTAssertEqual(count("<circle class=\"point\"", in: subs), 2 * 12, "active and trial, 12 months")
            XCTAssertTrue(subs.contains("<title>active "), "a hover title per point")

            let page = try get(h, "/audit/reports/movements?interval=month", cookie: cookie)
            XCTAssertEqual(page.status, 200)
            let text = String(decoding: page.body, as: UTF8.self)
            let api = try await h.request("GET", "/v1/reports/movements?interval=month&format=csv", token: "auditor-token-for-tests-0123456789abcdef")
            let lines = api.text.components(separatedBy: "\r\n").dropFirst(2).filter { !$0.isEmpty }
            let rows = text.components(separatedBy: "<tr><th scope=\"row\">").dropFirst().map { row -> String in
                let cells = row.components(separatedBy: "</tr>")[0].replacingOccurrences(of: "</th>", with: ",")
                    .replacingOccurrences(of: "<td>", with: "").replacingOccurrences(of: "</td>", with: ",")
                return String(cells.dropLast())
            }
            XCTAssertEqual(rows, Array(lines), "the table under the chart is the API's CSV")
            XCTAssertEqual(count("<circle class=\"point\"", in: text), ReportName.movements.metrics.count * lines.count)

            // A point drills down to the subscriptions behind it.
            let drill = try XCTUnwrap(text.components(separatedBy: "<a href=\"/audit/reports/movements/subscriptions?").dropFirst().first?.prefix { $0 != "\"" })
            let members = try get(h, "/audit/reports/movements/subscriptions?" + String(drill).replacingOccurrences(of: "&amp;", with: "&"), cookie: cookie)
            XCTAssertEqual(members.status, 200)
            XCTAssertTrue(String(decoding: members.body, as: UTF8.self).contains("id=\"member-count\""))
            let bogus = try get(h, "/audit/reports/mrr", cookie: cookie)
            XCTAssertEqual(bogus.status, 404)
        }
    }
}

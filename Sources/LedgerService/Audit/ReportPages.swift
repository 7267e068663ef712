import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// The auditor's charts: an overview (headline figures now and 12-month charts) and one page per
/// report with its filters, each chart an `SVGChart` with a table of the same figures under it
/// (the table is the report's CSV as cells), every point linking to what is behind it.
enum ReportPages {
    static func money(_ v: Int64) -> String {
        let units = v / 1000, frac = abs(v % 1000) / 10
        return "\(v < 0 && units == 0 ? "-" : "")\(units).\(CivilTime.padded(frac, 2))"
    }

    /// Where a point drills down to: refund counts to the refund cases of the period; everything
    /// else to the subscriptions behind it.
    static func link(_ answer: ReportAnswer, _ metric: ReportMetric, period: ReportDay) -> AuditURL {
        let q = answer.table.query
        if metric == .refunds || metric == .refundAmount {
            let start = max(q.interval.start(of: period), q.from), last = min(q.interval.end(of: period), q.to)
            return AuditURL("refunds", query: [("from", String(start.start)), ("to", String(last.adding(days: 1).start))])
        }
        return AuditURL("reports", q.name.rawValue, "subscriptions", query: [
            ("period", period.text), ("metric", metric.rawValue), ("from", q.from.text), ("to", q.to.text),
            ("interval", q.interval.rawValue), ("environment", q.filter.environment), ("source", q.filter.source?.rawValue),
            ("product", q.filter.product), ("currency", q.filter.currency), ("asOfPosition", String(answer.position)),
        ])
    }

    /// The chart of `metrics` of a report (money reports: one currency's rows).
    static func chart(_ answer: ReportAnswer, metrics: [ReportMetric], id: String) -> (SVGChart, String?) {
        let table = answer.table
        let currencies = Array(Set(table.rows.compactMap(\.currency))).sorted()
        let currency = table.query.name.perCurrency ? (table.query.filter.currency ?? currencies.first { $0 != ReportDimensions.noPrice } ?? currencies.first) : nil
        let rows = table.rows.filter { $0.currency == currency }
        let periods = rows.map { table.query.interval == .month ? $0.period.monthText : $0.period.text }
        let series = metrics.compactMap { m -> SVGChart.Series? in
            guard let i = table.metrics.firstIndex(of: m) else { return nil }
            return SVGChart.Series(label: m.rawValue, values: rows.map { $0.values[i] }, links: rows.map { link(answer, m, period: $0.period) })
        }
        let isMoney = metrics.allSatisfy(\.isMoney)
        let title: String = table.query.name.title + (currency.map { " (" + $0 + ")" } ?? "")
        var chart = SVGChart(title: title, periods: periods, series: series)
        if isMoney { chart.format = { (v: Int64) -> String in ReportPages.money(v) } }
        return (chart, currency)
    }

    /// The figures as a table (the CSV's cells, money in milliunits as in the CSV).
    static func table(_ answer: ReportAnswer, id: String) -> HTML {
        let t = answer.table
        if t.query.name == .retention {
            // The CSV's columns: counts, then the same months as shares of the cohort.
            let width = t.cohorts.map(\.retained.count).max() ?? 0
            let head = HTML.join((["cohort", "members"] + (0..<width).map { "month_\($0)" } + (0..<width).map { "share_\($0)" })
                .map { "<th scope=\"col\">\($0)</th>" })
            let body = HTML.join(t.cohorts.map { c in
                let pad = Array(repeating: "", count: width - c.retained.count)
                let cells = HTML.join((c.retained.map(String.init) + pad + c.shares + pad).map { "<td>\($0)</td>" })
                return "<tr><th scope=\"row\">\(c.cohort.monthText)</th><td>\(c.members)</td>\(cells)</tr>"
            })
            return "<div class=\"table-scroll\"><table id=\"\(id)\" class=\"report-table\"><thead><tr>\(head)</tr></thead><tbody>\(body)</tbody></table></div>"
        }
        let columns = ["period"] + (t.query.name.perCurrency ? ["currency"] : []) + t.metrics.map(\.rawValue)
        let head = HTML.join(columns.map { "<th scope=\"col\">\($0)</th>" })
        let body = HTML.join(t.rows.map { r in
            let values = HTML.join(r.values.map { "<td>\($0)</td>" })
            let currency: HTML = r.currency.map { "<td>\($0)</td>" } ?? .empty
            return "<tr><th scope=\"row\">\(r.period.text)</th>\(currency)\(values)</tr>"
        })
        return "<div class=\"table-scroll\"><table id=\"\(id)\" class=\"report-table\"><thead><tr>\(head)</tr></thead><tbody>\(body)</tbody></table></div>"
    }

    static func provenance(_ a: ReportAnswer) -> HTML {
        "<p class=\"muted\" id=\"report-position\">As of log position \(a.position), chain hash <code>\(String(a.chainHashHex.prefix(16)))…</code>, fact schema version \(Int64(a.reading.factSchemaVersion)), catalog <code>\(String(a.catalogDigest.prefix(12)))</code>. Amounts are gross, in each currency, before store commission; App Store Connect stays the financial record.</p>"
    }

    /// The overview: headline figures at `to` and four 12-month charts.
    static func overview(_ answers: [ReportName: ReportAnswer], csrf: String) -> HTML {
        var sections: [HTML] = []
        if let subs = answers[.subscriptions], let last = subs.table.rows.last {
            let cards = HTML.join(zip(subs.table.metrics, last.values).map { m, v in
                "<div class=\"card\"><span class=\"figure\" id=\"headline-\(m.rawValue)\">\(v)</span><span class=\"muted\">\(m.rawValue) on \(subs.table.query.to.text)</span></div>"
            })
            sections.append("<section class=\"cards\">\(cards)</section>")
            sections.append(provenance(subs))
        }
        let charts: [(ReportName, [ReportMetric])] = [(.subscriptions, [.active, .trial]), (.movements, [.new, .churned]),
                                                      (.refunds, [.refunds]), (.revenue, [.recognisedRevenue, .deferredRevenue])]
        for (name, metrics) in charts {
            guard let a = answers[name] else { continue }
            let (chart, _) = chart(a, metrics: metrics, id: name.rawValue)
            let csv = AuditURL("reports", name.rawValue + ".csv", query: [("interval", "month"), ("from", a.table.query.from.text), ("to", a.table.query.to.text),
                                                                          ("asOfPosition", String(a.position))])
            sections.append("""
            <section class="report" id="chart-\(name.rawValue)"><h2><a href="\(AuditURL("reports", name.rawValue, query: [("interval", "month")]))">\(name.title)</a></h2>
            \(chart.svg)
            <details><summary>The figures</summary>\(table(a, id: "table-\(name.rawValue)"))<p><a class="button" href="\(csv)">CSV</a></p></details></section>
            """)
        }
        let links = HTML.join(ReportName.allCases.map { "<a href=\"\(AuditURL("reports", $0.rawValue))\">\($0.title)</a>" }, separator: " · ")
        return AuditPages.layout(title: "Charts", current: .reports, csrf: csrf,
                                 "<h1>Charts</h1><p>Reports: \(links)</p>\(sections)")
    }

    static func filters(_ a: ReportAnswer) -> HTML {
        let q = a.table.query
        func option(_ v: String, _ label: String, _ selected: String?) -> HTML {
            v == (selected ?? "") ? "<option value=\"\(v)\" selected>\(label)</option>" : "<option value=\"\(v)\">\(label)</option>"
        }
        let intervals = HTML.join(ReportInterval.allCases.map { option($0.rawValue, $0.rawValue, q.interval.rawValue) })
        let envs = HTML.join([option("", "any", q.filter.environment), option("Production", "Production", q.filter.environment),
                              option("Sandbox", "Sandbox", q.filter.environment)])
        let sources = HTML.join([option("", "any", q.filter.source?.rawValue), option("apple", "apple", q.filter.source?.rawValue),
                                 option("wechat", "wechat", q.filter.source?.rawValue)])
        return """
        <form method="get" class="filters" action="\(AuditURL("reports", q.name.rawValue))">
        <label>From <input name="from" type="date" value="\(q.from.text)"></label>
        <label>To <input name="to" type="date" value="\(q.to.text)"></label>
        <label>Interval <select name="interval">\(intervals)</select></label>
        <label>Environment <select name="environment">\(envs)</select></label>
        <label>Source <select name="source">\(sources)</select></label>
        <label>Product <input name="product" value="\(q.filter.product ?? "")"></label>
        <label>Currency <input name="currency" value="\(q.filter.currency ?? "")" size="5"></label>
        <label>As of position <input name="asOfPosition" inputmode="numeric" value="\(a.position)"></label>
        <button type="submit">Show</button></form>
        """
    }

    static func report(_ a: ReportAnswer, csrf: String, csv: AuditURL) -> HTML {
        let name = a.table.query.name
        let chartHTML: HTML = name == .retention ? .empty : chart(a, metrics: a.table.metrics, id: name.rawValue).0.svg
        return AuditPages.layout(title: name.title, current: .reports, csrf: csrf, """
        <h1>\(name.title)</h1>\(filters(a))\(provenance(a))
        <section class="report" id="chart-\(name.rawValue)">\(chartHTML)\(table(a, id: "report-table"))
        <p><a class="button" id="csv" href="\(csv)">Download CSV</a></p></section>
        """)
    }

    static func members(_ a: ReportAnswer, period: ReportDay, metric: ReportMetric, keys: [SubscriptionKey], csrf: String) -> HTML {
        let items = HTML.join(keys.map { k in
            "<li><a href=\"\(AuditURL("subscriptions", k.originalTransactionId, query: [("environment", k.environment)]))\">\(k.environment) \(k.originalTransactionId)</a></li>"
        })
        return AuditPages.layout(title: "Behind a point", current: .reports, csrf: csrf, """
        <h1>\(metric.rawValue), \(a.table.query.interval.rawValue) of \(period.text)</h1>\(provenance(a))
        <p id="member-count">\(Int64(keys.count)) subscriptions</p><ul id="members">\(items)</ul>
        """)
    }
}

extension LedgerApp {
    func addReportPages(to group: inout RouteGroup) {
        let longDeadline = Duration.seconds(configuration.http.adminDeadlineSeconds)
        group.add("GET", "/audit/reports", deadline: longDeadline) { [self] request in
            try await page(request) { csrf in
                var answers: [ReportName: ReportAnswer] = [:]
                for name in [ReportName.subscriptions, .movements, .refunds, .revenue] {
                    var raw = request.query
                    raw["interval"] = "month"
                    answers[name] = try await reports.report(try ReportRequest(name: name.rawValue, raw, defaultInterval: .month))
                }
                return ReportPages.overview(answers, csrf: csrf)
            }
        }
        group.add("GET", "/audit/reports/{name}", deadline: longDeadline) { [self] request in
            let raw = request.pathParameters["name"] ?? ""
            if raw.hasSuffix(".csv") {
                return try await page(request, html: false) { _ in HTML.empty } rawAnswer: { [self] in
                    var q = request.query
                    q["format"] = "csv"
                    let answer = try await reports.report(try ReportRequest(name: String(raw.dropLast(4)), q.filter { !$0.value.isEmpty }))
                    return HTTPResponse(status: 200, headers: [("Content-Type", "text/csv; charset=utf-8"),
                                                               ("Content-Disposition", "attachment; filename=\"\(answer.table.query.name.rawValue)-at-\(answer.position).csv\"")]
                                            + answer.headers + AuditAssets.securityHeaders, body: Data(answer.csv.utf8))
                }
            }
            return try await page(request) { csrf in
                let query = request.query.filter { !$0.value.isEmpty }
                let answer = try await reports.report(try ReportRequest(name: raw, query))
                var csvQuery = query.map { ($0.key, Optional($0.value)) }.sorted { $0.0 < $1.0 }
                csvQuery.removeAll { $0.0 == "asOfPosition" }
                csvQuery.append(("asOfPosition", String(answer.position)))
                return ReportPages.report(answer, csrf: csrf, csv: AuditURL("reports", raw + ".csv", query: csvQuery))
            }
        }
        group.add("GET", "/audit/reports/{name}/subscriptions", deadline: longDeadline) { [self] request in
            try await page(request) { csrf in
                let query = request.query.filter { !$0.value.isEmpty }
                let (answer, period, metric, keys) = try await reports.members(try ReportRequest(name: request.pathParameters["name"] ?? "", query),
                                                                               period: query["period"], metric: query["metric"])
                return ReportPages.members(answer, period: period, metric: metric, keys: keys, csrf: csrf)
            }
        }
    }
}

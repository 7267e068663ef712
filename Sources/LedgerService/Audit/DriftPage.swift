import Foundation
import LedgerCore
import LedgerStore

/// What the drift page shows: the last stored report (a `reconcile/report` event, JSON shaped by
/// `DriftReport.json`), the latest run, and — when the service cannot reconcile — why not.
struct DriftPageModel: Sendable {
    var view: DriftReports.View
    /// Nil when this service can run reconciliation; else what to configure.
    var unavailable: String?
    /// Apple's word beside the ledger's (issue 20 item 2); nil when it could not be read.
    var apple: DriftReports.AppleChecks?
    /// Subscriptions listed at most; the rest are in `GET /v1/admin/drift`.
    var limit = 300

    init(view: DriftReports.View, unavailable: String? = nil, apple: DriftReports.AppleChecks? = nil, limit: Int = 300) {
        self.view = view
        self.unavailable = unavailable
        self.apple = apple
        self.limit = limit
    }
}

/// The drift report page. The report is read as stored JSON, field by field, never trusted to
/// have the shape `DriftReport` writes: it holds data from Apple (ids, product ids, messages from
/// its answers), so every value goes through `HTML` escaping, a missing or odd field shows "—",
/// and a report that is not a JSON object is said to be unreadable rather than failing the page.
extension AuditPages {
    static func drift(_ model: DriftPageModel, csrf: String) -> HTML {
        let view = model.view
        var body: HTML = "<h1>Drift report</h1>"
        // Apple's word first: it needs no reconciliation run (every notification states a status).
        if let apple = model.apple { body = body + appleChecks(apple, limit: model.limit) }
        if view.report == nil && view.run == nil {
            let how: HTML = model.unavailable.map { why in
                "<p class=\"notice error\" id=\"drift-unavailable\">This service cannot reconcile yet: \(why).</p>" as HTML
            } ?? .empty
            body = body + """
            <div class="card" id="no-drift"><p><strong>No reconciliation has run yet</strong>, so there is no drift report to show.</p>
            <p>Reconciliation asks Apple’s App Store Server API what the ledger may have missed (lost notifications, upgrades,
            refunds reversed) and stores what it finds; this page then lists every subscription whose state it changed, before → after.</p>
            <p>To start one: an admin runs <code>ledger reconcile --since &lt;epoch ms&gt;</code>, or sends
            <code>POST /v1/admin/reconcile</code> with an admin token, or sets <code>LEDGER_RECONCILE_EVERY</code> (e.g. <code>6h</code>)
            for periodic runs. Each needs App Store Server API credentials (<code>LEDGER_APPLE_API_ISSUER_ID</code>,
            <code>LEDGER_APPLE_API_KEY_ID</code>, <code>LEDGER_APPLE_API_PRIVATE_KEY</code>).</p></div>
            \(how)
            """
            return layout(title: "Drift report", current: .drift, csrf: csrf, body)
        }
        if let run = view.run { body = body + latestRun(run, report: view) }
        if let report = view.report {
            body = body + storedReport(report, position: view.reportPosition, recordedAt: view.reportRecordedAt, limit: model.limit)
        } else if view.reportPosition != nil {
            body = body + "<p class=\"notice error\" id=\"drift-unreadable\">The stored report at position \(view.reportPosition ?? 0) is not JSON, so it cannot be shown. Download its raw bytes: <a href=\"\(AuditURL("events", String(view.reportPosition ?? 0), "raw"))\">report event</a>.</p>"
        } else {
            body = body + "<p class=\"notice\" id=\"no-report\">No run has stored a drift report yet. A run stores one only when it changed something (a backfilled notification, a new status answer or drift); dry runs and runs that found the ledger in step with Apple store none.</p>"
        }
        return layout(title: "Drift report", current: .drift, csrf: csrf, body)
    }

    /// The latest run, whatever its outcome, and how it relates to the report shown below it.
    static func latestRun(_ run: ReconciliationStore.Run, report view: DriftReports.View) -> HTML {
        let status: HTML = switch run.status {
        case "succeeded": "<span class=\"ok\">succeeded</span>"
        case "failed": "<span class=\"bad\">failed</span>"
        case "running": "<span class=\"warn\">running</span>"
        default: "\(run.status)"
        }
        let reportRunId = view.report?.text("runId")
        let relation: HTML
        if let position = run.reportPosition, position == view.reportPosition {
            relation = "its report is shown below (position \(position))"
        } else if run.status == "running" {
            relation = "still running; the report below (if any) is from an earlier run — reload to see this one’s"
        } else if run.dryRun {
            relation = "a dry run: it stored nothing, so the report below (if any) is from an earlier run"
        } else if run.status == "failed" {
            relation = "it stored no report; the report below (if any) is from an earlier run"
        } else {
            relation = "it stored no report: it found the ledger in step with Apple\(reportRunId.map { "; the report below is from run \($0)" as HTML } ?? .empty)"
        }
        var card: HTML = """
        <h2>Latest run</h2>
        <div class="card" id="latest-run"><dl class="facts">
        <dt>Run</dt><dd><code>\(run.runId)</code> — \(status)\(run.dryRun ? " (dry run)" as HTML : .empty)</dd>
        <dt>Started by</dt><dd>\(run.trigger) \(requester(run.requestedBy))</dd>
        <dt>Environments</dt><dd>\(run.environments.joined(separator: ", "))</dd>
        <dt>Window</dt><dd>\(time(run.since)) → \(time(run.until))</dd>
        <dt>Started</dt><dd>\(time(run.startedAt))</dd><dt>Finished</dt><dd>\(run.finishedAt.map { time($0) } ?? "not yet")</dd>
        <dt>Report</dt><dd>\(relation)</dd>
        """
        if let error = run.error {
            card = card + "<dt>Error</dt><dd class=\"bad\" id=\"run-error\">\(error)</dd>"
        }
        card = card + "</dl></div>"
        if let summary = run.summary, run.reportPosition == nil || run.reportPosition != view.reportPosition {
            card = card + (summary["notifications"]?.objectValue != nil ? counts(summary, id: "run-counts")
                : "<details><summary>What the run counted</summary><pre>\(String(decoding: summary.canonicalJSON(), as: UTF8.self))</pre></details>")
        }
        return card
    }

    /// The stored report: its run, counts, every drifted subscription before → after, problems.
    static func storedReport(_ r: JSONValue, position: Int64?, recordedAt: EpochMillis?, limit: Int) -> HTML {
        guard r.objectValue != nil else {
            return "<p class=\"notice error\" id=\"drift-unreadable\">The stored report is not a JSON object, so it cannot be shown\(position.map { p in "; download its raw bytes (position \(p))" as HTML } ?? .empty).</p>"
        }
        let raw: HTML = position.map { p in "<a class=\"raw\" href=\"\(AuditURL("events", String(p), "raw"))\">download the report as stored</a>" } ?? .empty
        let environments = (r["environments"]?.arrayValue ?? []).compactMap(\.text).joined(separator: ", ")
        var body: HTML = """
        <h2>Report of run <code id="report-run">\(r.text("runId"))</code></h2>
        <div class="card" id="report"><dl class="facts">
        <dt>Stored</dt><dd>position \(position.map(String.init)) \(time(recordedAt)) \(raw)</dd>
        <dt>Started by</dt><dd>\(r.text("trigger")) \(requester(r["requestedBy"] ?? .null))</dd>
        <dt>Environments</dt><dd>\(environments.isEmpty ? "—" : environments)</dd>
        <dt>Window</dt><dd>\(time(r["window"]?.int64("since"))) → \(time(r["window"]?.int64("until")))\(r["all"] == .bool(true) ? " (every known subscription asked)" as HTML : .empty)</dd>
        <dt>Ran</dt><dd>\(time(r.int64("startedAt"))) → \(time(r.int64("finishedAt")))</dd>
        </dl></div>
        \(counts(r, id: "report-counts"))
        """
        let drift = r["drift"]?.arrayValue ?? []
        body = body + "<h2>Subscriptions the run changed (\(drift.count))</h2>"
        if drift.isEmpty {
            body = body + "<p class=\"notice\" id=\"no-drift-entries\">No subscription’s state changed: what the run stored (counted above) left every state, product, expiry, auto-renewal, customer and entitlement as it was.</p>"
        } else {
            if drift.count > limit {
                body = body + "<p class=\"notice\">Only the first \(limit) of \(drift.count) are shown; the whole report is GET /v1/admin/drift (auditor token) or the stored report above.</p>"
            }
            body = body + HTML.join(drift.prefix(limit).map(driftEntry))
        }
        let problems = r["problems"]?.arrayValue ?? []
        body = body + "<h2>Problems (\(problems.count))</h2>"
        if problems.isEmpty {
            body = body + "<p class=\"muted\" id=\"no-problems\">None: every answer Apple gave was read and stored or found already stored.</p>"
        } else {
            let rows = HTML.join(problems.map { p in
                let otid = p.text("originalTransactionId")
                let subscription: HTML = otid.map { o in
                    "<a href=\"\(AuditURL("subscriptions", o, query: [("environment", p.text("environment"))]))\">\(o)</a>" as HTML
                } ?? "—"
                return """
                <tr><td data-label="Stage">\(p.text("stage"))</td><td data-label="Environment">\(p.text("environment"))</td>
                <td data-label="Subscription">\(subscription)</td><td data-label="Message">\(p.text("message"))</td></tr>
                """
            })
            body = body + """
            <div class="scroll"><table class="responsive" id="problems"><thead><tr><th>Stage</th><th>Environment</th><th>Subscription</th><th>Message</th></tr></thead>
            <tbody>\(rows)</tbody></table></div>
            """
        }
        return body
    }

    /// The run's counts (the report's, or a run summary of the same shape).
    static func counts(_ r: JSONValue, id: String) -> HTML {
        func n(_ group: String, _ key: String) -> HTML {
            guard let v = r[group]?.int64(key) else { return "—" }
            return "\(v)"
        }
        return """
        <div class="scroll"><table class="responsive" id="\(id)"><thead><tr><th>Asked Apple for</th><th>Counts</th></tr></thead><tbody>
        <tr><td data-label="Asked Apple for">Notification history</td><td data-label="Counts">\(n("notifications", "seen")) in the window,
        <strong>\(n("notifications", "backfilled"))</strong> backfilled (the webhook had missed them), \(n("notifications", "alreadyStored")) already stored,
        \(n("notifications", "refused")) refused</td></tr>
        <tr><td data-label="Asked Apple for">Subscription statuses</td><td data-label="Counts">\(n("statuses", "subscriptionsAsked")) subscriptions asked,
        <strong>\(n("statuses", "answersStored"))</strong> answers stored, \(n("statuses", "answersUnchanged")) unchanged,
        \(n("statuses", "unknownToApple")) unknown to Apple, \(n("statuses", "rateLimitedWaits")) waits for rate limits</td></tr>
        <tr><td data-label="Asked Apple for">Transaction history</td><td data-label="Counts">\(n("transactions", "subscriptionsAsked")) subscriptions asked,
        <strong>\(n("transactions", "stored"))</strong> transactions stored</td></tr>
        </tbody></table></div>
        """
    }

    /// One drifted subscription: each field before → after, the changed ones marked.
    static func driftEntry(_ d: JSONValue) -> HTML {
        let otid = d.text("originalTransactionId") ?? "?"
        let environment = d.text("environment")
        let changed = Set((d["changed"]?.arrayValue ?? []).compactMap(\.text))
        let before = d["before"]?.objectValue != nil ? d["before"] : nil
        let after = d["after"]?.objectValue != nil ? d["after"] : nil
        func value(_ s: JSONValue?, _ key: String) -> HTML {
            guard let s else { return "<span class=\"muted\">—</span>" }
            switch key {
            case "expiresDate": return time(s.int64(key))
            case "entitlements":
                let items = (s[key]?.arrayValue ?? []).compactMap(\.text)
                return items.isEmpty ? "<span class=\"muted\">none</span>" : "\(items.joined(separator: ", "))"
            case "autoRenewStatus":
                return switch s.int64(key) {
                case 1?: "on (1)"
                case 0?: "off (0)"
                case let other?: "\(other)"
                case nil: "—"
                }
            default: return "\(s.text(key))"
            }
        }
        let fields: [(String, String)] = [("status", "Status"), ("productId", "Product"), ("expiresDate", "Expires"),
                                          ("autoRenewStatus", "Auto-renew"), ("autoRenewProductId", "Renews to"),
                                          ("customerId", "Customer"), ("entitlements", "Entitlements")]
        let rows = HTML.join(fields.map { key, label in
            let moved = changed.contains(key) || changed.contains("subscription")
            return """
            <tr\(moved ? " class=\"changed\"" as HTML : .empty)><td data-label="Field">\(label)\(moved ? " <span class=\"warn\">changed</span>" as HTML : .empty)</td>
            <td data-label="Before">\(value(before, key))</td><td data-label="After">\(moved ? "<strong>\(value(after, key))</strong>" as HTML : value(after, key))</td></tr>
            """
        })
        let note: HTML = before == nil ? " <span class=\"muted\">(unknown to the ledger before the run)</span>"
            : after == nil ? " <span class=\"muted\">(no state after the run)</span>" : .empty
        return """
        <section class="event drift" id="drift-\(AuditURL.encode(environment ?? "") + "-" + AuditURL.encode(otid))">
        <div class="head"><strong><a class="subscription" href="\(AuditURL("subscriptions", otid, query: [("environment", environment)]))">\(otid)</a></strong>
        <span class="muted">\(environment)</span><span>changed: \(changed.sorted().joined(separator: ", "))</span>\(note)</div>
        <div class="body scroll"><table class="responsive"><thead><tr><th>Field</th><th>Before the run</th><th>After the run</th></tr></thead>
        <tbody>\(rows)</tbody></table></div></section>
        """
    }

    /// Apple's stated statuses the ledger disagrees with (both statuses, the evidence), and the
    /// mass-extension summaries whose RENEWAL_EXTENDED notifications fell short.
    static func appleChecks(_ a: DriftReports.AppleChecks, limit: Int) -> HTML {
        var body: HTML = """
        <h2>Apple’s word vs the ledger</h2>
        <div class="card" id="apple-status"><p>Every Apple notification of an auto-renewable subscription states its status as of
        its signedDate (<code>data.status</code>), as does every answer of Get All Subscription Statuses. The ledger compares each
        with its own status at that time, folded from the facts signed by then. <strong>\(a.counts.checked)</strong> statements
        checked, <strong id="apple-status-disagreeing">\(a.counts.disagreeing)</strong> disagree now,
        \(a.counts.onArrival.values.reduce(0, +)) disagreed when they arrived. A disagreement makes the next reconciliation
        fetch that customer’s transaction history.</p></div>
        """
        if a.disagreements.isEmpty {
            body = body + "<p class=\"notice\" id=\"no-apple-disagreements\">The ledger agrees with every status Apple stated.</p>"
        } else {
            let rows = HTML.join(a.disagreements.prefix(limit).map { c in
                let evidence = AuditURL("events", String(c.position), "raw")
                return """
                <tr class="changed"><td data-label="Subscription"><a class="subscription" href="\(AuditURL("subscriptions", c.key.originalTransactionId, query: [("environment", c.key.environment)]))">\(c.key.originalTransactionId)</a>
                <span class="muted">\(c.key.environment)</span></td>
                <td data-label="Apple said"><strong class="apple-status">\(AppleStatusCheck.name(of: c.appleStatus)) (\(c.appleStatus))</strong></td>
                <td data-label="Ledger says"><strong class="ledger-status">\(c.ledgerStatus?.rawValue ?? "nothing in effect")\(c.ledgerStatus.map { " (\($0.appleStatus))" as HTML } ?? .empty)</strong></td>
                <td data-label="Signed">\(time(c.signedAt))</td>
                <td data-label="Evidence">\(c.source) \(c.message ?? "") — <a href="\(evidence)">event \(c.position)</a></td>
                <td data-label="Customer">\(c.customerId ?? "—")</td></tr>
                """
            })
            body = body + """
            <div class="scroll"><table class="responsive" id="apple-status-disagreements"><thead><tr><th>Subscription</th><th>Apple said</th>
            <th>Ledger says</th><th>Signed</th><th>Evidence</th><th>Customer</th></tr></thead><tbody>\(rows)</tbody></table></div>
            """
        }
        let short = a.extensions.filter { $0.shortfall > 0 }
        if !short.isEmpty {
            let rows = HTML.join(short.map { e in
                """
                <tr><td data-label="Request">\(e.requestIdentifier)</td><td data-label="Product">\(e.productId ?? "—")</td>
                <td data-label="Apple extended">\(e.succeededCount)</td><td data-label="Ledger received">\(e.received)</td>
                <td data-label="Missing"><strong>\(e.shortfall)</strong></td><td data-label="Summary">\(time(e.signedAt)) —
                <a href="\(AuditURL("events", String(e.position), "raw"))">event \(e.position)</a></td></tr>
                """
            })
            body = body + """
            <h3>Renewal-date extensions with missing notifications</h3>
            <div class="scroll"><table class="responsive" id="extension-shortfalls"><thead><tr><th>Request</th><th>Product</th>
            <th>Apple extended</th><th>Ledger received</th><th>Missing</th><th>Summary</th></tr></thead><tbody>\(rows)</tbody></table></div>
            """
        }
        return body
    }

    /// Who asked for a run, from its stored `requestedBy` (role and token fingerprint, or the
    /// command line's user and host; never a token), every field as text.
    static func requester(_ v: JSONValue) -> HTML {
        guard let o = v.objectValue else { return .empty }
        let parts = o.sorted { $0.key < $1.key }.compactMap { k, value in value.text.map { "\(k) \($0)" } }
        return parts.isEmpty ? .empty : "<span class=\"muted\">(\(parts.joined(separator: ", ")))</span>"
    }
}

import Foundation
import LedgerCore
import LedgerStore

/// The navigation of the auditor's pages.
enum AuditNavigation: String, CaseIterable {
    case search, refunds, reports, projections, drift, webhooks

    var title: String {
        switch self {
        case .search: "Search"
        case .refunds: "Refund cases"
        case .reports: "Charts"
        case .projections: "Projection status"
        case .drift: "Drift report"
        case .webhooks: "Webhooks"
        }
    }

    var url: AuditURL {
        switch self {
        case .search: AuditURL("search")
        case .refunds: AuditURL("refunds")
        case .reports: AuditURL("reports")
        case .projections: AuditURL("projections")
        case .drift: AuditURL("drift")
        case .webhooks: AuditURL("webhooks")
        }
    }
}

/// One row of a subscription's timeline: the event, what the ledger derived from it, how it moved
/// the state, and whether its evidence and its chain link hold now.
struct TimelineEntry: Sendable {
    var event: RecordedEvent
    var facts: [Fact]
    var before: SubscriptionState?
    var after: SubscriptionState?
    var evidence: EvidenceCheck
    var chainHolds: Bool?
}

/// Server-rendered pages (every value escaped by `HTML`). Pure functions of their data, so the
/// escaping is tested with hostile values without a server.
enum AuditPages {
    // MARK: frame

    static func layout(title: String, current: AuditNavigation?, csrf: String?, notice: HTML? = nil, _ body: HTML) -> HTML {
        let nav = HTML.join(AuditNavigation.allCases.map { item -> HTML in
            item == current ? "<a href=\"\(item.url)\" aria-current=\"page\">\(item.title)</a>" : "<a href=\"\(item.url)\">\(item.title)</a>"
        })
        let session: HTML = csrf.map { token in
            "<form method=\"post\" action=\"\(AuditURL("logout"))\"><input type=\"hidden\" name=\"csrf\" value=\"\(token)\"><button type=\"submit\" id=\"logout\">Log out</button></form>"
        } ?? .empty
        let header: HTML = csrf == nil
            ? "<header><a class=\"brand\" href=\"\(AuditURL("login"))\">Subscription Ledger · Auditor’s desk</a></header>"
            : "<header><a class=\"brand\" href=\"\(AuditURL("search"))\">Subscription Ledger · Auditor’s desk</a><nav>\(nav)</nav>\(session)</header>"
        return """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(title) · Auditor’s desk</title>
        <link rel="icon" href="\(AuditURL("static", "favicon.svg"))"><link rel="stylesheet" href="\(AuditURL("static", "audit.css"))"><script src="\(AuditURL("static", "audit.js"))" defer></script></head>
        <body>\(header)<main>\(notice ?? .empty)\(body)</main></body></html>
        """
    }

    static func time(_ ms: EpochMillis?) -> HTML {
        guard let ms, CivilTime(epochMillis: ms) != nil else { return "—" }
        return "<time data-ms=\"\(ms)\">\(utc(ms))</time>"
    }

    /// `2026-04-04 10:53:20.000 UTC`.
    static func utc(_ ms: EpochMillis) -> String {
        guard let t = CivilTime(epochMillis: ms) else { return String(ms) }
        let p = CivilTime.padded
        return "\(p(t.year, 4))-\(p(t.month, 2))-\(p(t.day, 2)) \(p(t.hour, 2)):\(p(t.minute, 2)):\(p(t.second, 2)).\(p(t.millisecond, 3)) UTC"
    }

    static func money(_ m: RefundCase.Money?) -> HTML {
        guard let m else { return "—" }
        let units = m.milliunits / 1000, frac = abs(m.milliunits % 1000)
        // Milliunits are Apple's unit; most amounts have cents only (WeChat's fen × 10).
        let decimals = frac % 10 == 0 ? CivilTime.padded(Int64(frac / 10), 2) : CivilTime.padded(Int64(frac), 3)
        return "\(m.milliunits < 0 && units == 0 ? "-" : "")\(units).\(decimals) \(m.currency ?? "")"
    }

    // MARK: sign-in, refusals, errors

    static func login(csrf: String, message: String?, next: String?) -> HTML {
        let notice: HTML? = message.map { "<p class=\"notice error\" id=\"login-error\">\($0)</p>" }
        return layout(title: "Sign in", current: nil, csrf: nil, notice: notice, """
        <div class="card login"><h1>Sign in</h1>
        <p class="muted">With an auditor or admin token (the ones in LEDGER_TOKENS). App tokens cannot open these pages.
        The session lasts 8 hours on this browser.</p>
        <form method="post" action="\(AuditURL("login"))">
        <input type="hidden" name="csrf" value="\(csrf)"><input type="hidden" name="next" value="\(next ?? "")">
        <label for="token">Token</label><input id="token" name="token" type="password" autocomplete="off" required>
        <button class="primary" type="submit" id="sign-in">Sign in</button></form></div>
        """)
    }

    static func refusal(_ message: String) -> HTML {
        layout(title: "Not allowed", current: nil, csrf: nil, """
        <div class="card"><h1 id="refusal">Not allowed</h1><p>\(message)</p>
        <p><a href="\(AuditURL("login"))">Sign in with an auditor or admin token</a></p></div>
        """)
    }

    static func error(title: String, message: String, csrf: String?) -> HTML {
        layout(title: title, current: nil, csrf: csrf, """
        <div class="card"><h1>\(title)</h1><p class="notice error">\(message)</p>
        <p><a href="\(AuditURL("search"))">Back to search</a></p></div>
        """)
    }

    // MARK: search

    struct SearchResults: Sendable {
        var query: String
        var subscriptions: [(SubscriptionKey, String)] = []
        var cases: [RefundCase] = []
    }

    static func search(_ r: SearchResults?, csrf: String) -> HTML {
        var body: HTML = """
        <h1>Search</h1>
        <form class="filters card" method="get" action="\(AuditURL("search"))">
        <label>originalTransactionId, customer id / openid, order id or refund case id
        <input id="q" name="q" value="\(r?.query ?? "")" size="48" autofocus></label>
        <button class="primary" type="submit" id="search">Search</button></form>
        """
        guard let r else {
            return layout(title: "Search", current: .search, csrf: csrf, body + "<p class=\"muted\">Type an id: a subscription (originalTransactionId), a customer (appAccountToken or WeChat openid), an order (pay_order_id, OutTradeNo, transactionId) or a refund case id such as wechat:ORDER or apple:2000000….</p>")
        }
        if r.subscriptions.isEmpty && r.cases.isEmpty {
            body = body + "<p class=\"notice\" id=\"no-results\">Nothing in the ledger is known by “\(r.query)”. Ids are matched exactly; check for spaces or a missing digit.</p>"
        }
        if !r.subscriptions.isEmpty {
            let rows = HTML.join(r.subscriptions.map { key, why in
                "<tr><td data-label=\"Subscription\"><a class=\"subscription\" href=\"\(AuditURL("subscriptions", key.originalTransactionId, query: [("environment", key.environment)]))\">\(key.originalTransactionId)</a></td><td data-label=\"Environment\">\(key.environment)</td><td data-label=\"Why\">\(why)</td></tr>"
            })
            body = body + "<h2>Subscriptions</h2><div class=\"scroll\"><table class=\"responsive\"><thead><tr><th>originalTransactionId</th><th>Environment</th><th>Found by</th></tr></thead><tbody>\(rows)</tbody></table></div>"
        }
        if !r.cases.isEmpty {
            body = body + "<h2>Refund cases</h2>" + caseTable(r.cases)
        }
        return layout(title: "Search", current: .search, csrf: csrf, body)
    }

    // MARK: timeline

    static func timeline(_ key: SubscriptionKey, entries: [TimelineEntry], truncated: Bool, csrf: String) -> HTML {
        let other = key.environment == SubscriptionKey.production ? SubscriptionKey.sandbox : SubscriptionKey.production
        var body: HTML = """
        <h1 id="timeline-title">Subscription \(key.originalTransactionId) <span class="muted">(\(key.environment))</span></h1>
        <p class="muted">Every stored event in signed-time order: when it was recorded, its type, the facts the ledger derived from it,
        how it moved the subscription (the state just before and just after it, when it took effect), whether its signatures re-verify now at their signedDate,
        and whether its hash-chain link holds. <a href="\(AuditURL("subscriptions", key.originalTransactionId, query: [("environment", other)]))">Show the \(other) subscription</a>.</p>
        """
        if entries.isEmpty {
            return layout(title: "Timeline", current: .search, csrf: csrf, body + "<p class=\"notice\" id=\"empty-timeline\">No events are stored for this subscription in \(key.environment). It may be in the other environment, or the id may be mistyped.</p>")
        }
        if truncated {
            body = body + "<p class=\"notice\">Only the first \(entries.count) events are shown; the full history is GET /v1/subscriptions/\(key.originalTransactionId)/events.</p>"
        }
        let items = entries.map { e -> HTML in
            let ev = e.event.event
            let verification: HTML
            switch e.evidence {
            case .verified(let d): verification = "<span class=\"ok\">signature verified</span> <span class=\"muted\">\(d)</span>"
            case .unsigned(let r): verification = "<span class=\"warn\">unsigned</span> <span class=\"muted\">\(r)</span>"
            case .refused(let r): verification = "<span class=\"bad\">signature refused</span> \(r)"
            }
            let chain: HTML = switch e.chainHolds {
            case true?: "<span class=\"ok\">chain link holds</span>"
            case false?: "<span class=\"bad\">chain link broken</span>"
            case nil: "<span class=\"muted\">no chain link</span>"
            }
            let facts = e.facts.isEmpty ? "<span class=\"muted\">no facts (nothing this projection reads)</span>" as HTML
                : HTML.join(e.facts.map { f in "<code>\(f.kind.rawValue)</code>\(f.transactionId.map { " tx \($0)" } ?? "")" as HTML }, separator: ", ")
            return """
            <section class="event" id="event-\(e.event.position)">
            <div class="head"><strong>#\(e.event.position) \(ev.type)</strong><span>signed \(time(ev.signedAt))</span>
            <span class="muted">recorded \(time(e.event.recordedAt))</span><span class="muted">source \(ev.source.rawValue)</span></div>
            <div class="body"><dl class="facts">
            <dt>Facts</dt><dd>\(facts)</dd>
            <dt>State</dt><dd>\(changes(e.before, e.after))</dd>
            <dt>Evidence</dt><dd>\(verification)</dd>
            <dt>Hash chain</dt><dd>\(chain)</dd>
            <dt>Raw</dt><dd><a class="raw" href="\(AuditURL("events", String(e.event.position), "raw"))">download the \(ev.raw.count) bytes received</a> <span class="muted">dedupe key \(ev.dedupeKey)</span></dd>
            </dl></div></section>
            """
        }
        return layout(title: "Timeline \(key.originalTransactionId)", current: .search, csrf: csrf, body + HTML.join(items))
    }

    /// The fields an event changed, "before → after".
    static func changes(_ before: SubscriptionState?, _ after: SubscriptionState?) -> HTML {
        guard let after else { return "<span class=\"muted\">no subscription state yet</span>" }
        func show<T>(_ v: T?) -> String { v.map { "\($0)" } ?? "—" }
        func date(_ v: EpochMillis?) -> String { v.map(utc) ?? "—" }
        let fields: [(String, String, String)] = [
            ("status", show(before?.status.rawValue), after.status.rawValue),
            ("product", show(before?.productId), show(after.productId)),
            ("expires", date(before?.expiresDate), date(after.expiresDate)),
            ("auto-renew", show(before?.autoRenewStatus), show(after.autoRenewStatus)),
            ("renews to", show(before?.autoRenewProductId), show(after.autoRenewProductId)),
            ("billing retry", show(before?.isInBillingRetryPeriod), show(after.isInBillingRetryPeriod)),
            ("grace until", date(before?.gracePeriodExpiresDate), date(after.gracePeriodExpiresDate)),
            ("revoked", date(before?.revocationDate), date(after.revocationDate)),
            ("customer", show(before?.customerId), show(after.customerId)),
        ]
        let moved = fields.filter { before == nil ? $0.2 != "—" : $0.1 != $0.2 }
        if moved.isEmpty { return "<span class=\"muted\">unchanged (status \(after.status.rawValue))</span>" }
        return HTML.join(moved.map { name, from, to in
            before == nil ? "<span class=\"change\">\(name): <strong>\(to)</strong></span>" as HTML
                : "<span class=\"change\">\(name): \(from) → <strong>\(to)</strong></span>"
        })
    }

    // MARK: refund cases

    static func caseTable(_ cases: [RefundCase]) -> HTML {
        let rows = HTML.join(cases.map { c in
            """
            <tr><td data-label="Case"><a class="case" href="\(AuditURL("refunds", c.caseId))">\(c.caseId)</a></td>
            <td data-label="Source">\(c.source.rawValue)</td><td data-label="Opened">\(time(c.openedAt))</td>
            <td data-label="Customer">\(c.customerId)</td><td data-label="Decision">\(c.decision?.rawValue ?? "none")</td>
            <td data-label="Outcome">\(c.outcome.rawValue)</td><td data-label="Amount">\(money(c.orderAmount))</td>
            <td data-label="Askings">\(c.inquiries.count)</td></tr>
            """
        })
        return """
        <div class="scroll"><table class="responsive" id="cases"><thead><tr><th>Case</th><th>Source</th><th>Opened</th><th>Customer</th>
        <th>Decision</th><th>Outcome</th><th>Order amount</th><th>Askings</th></tr></thead><tbody>\(rows)</tbody></table></div>
        """
    }

    static func refunds(_ export: RefundExport, query: [String: String], csrf: String) -> HTML {
        func option(_ name: String, _ values: [String]) -> HTML {
            HTML.join(([""] + values).map { v in
                query[name] == v || (v.isEmpty && query[name] == nil)
                    ? "<option value=\"\(v)\" selected>\(v.isEmpty ? "any" : v)</option>" as HTML
                    : "<option value=\"\(v)\">\(v.isEmpty ? "any" : v)</option>"
            })
        }
        let filters: [(String, String?)] = ["from", "to", "originalTransactionId", "openid", "decision", "outcome", "source"].map { ($0, query[$0]) }
        let csv = AuditURL("refunds.csv", query: filters)
        var body: HTML = """
        <h1>Refund cases</h1>
        <form class="filters card" method="get" action="\(AuditURL("refunds"))">
        <label>From (ms)<input name="from" value="\(query["from"] ?? "")" inputmode="numeric"></label>
        <label>To (ms)<input name="to" value="\(query["to"] ?? "")" inputmode="numeric"></label>
        <label>originalTransactionId<input name="originalTransactionId" value="\(query["originalTransactionId"] ?? "")"></label>
        <label>openid<input name="openid" value="\(query["openid"] ?? "")"></label>
        <label>Decision<select name="decision">\(option("decision", ["allow", "refuse", "none"]))</select></label>
        <label>Outcome<select name="outcome">\(option("outcome", RefundCase.Outcome.allCases.map(\.rawValue)))</select></label>
        <label>Source<select name="source">\(option("source", ["wechat", "apple"]))</select></label>
        <button class="primary" type="submit">Filter</button></form>
        <p class="muted" id="export-position">As of log position \(export.snapshot.position), chain hash <code>\(String(export.chainHashHex.prefix(16)))…</code>,
        fact schema version \(export.snapshot.factSchemaVersion). <a class="button" id="csv" href="\(csv)">Download CSV</a></p>
        """
        if export.snapshot.cases.isEmpty {
            body = body + "<p class=\"notice\" id=\"no-cases\">No refund cases match these filters\(query["cursor"] == nil ? "" : " on this page").</p>"
        } else {
            body = body + caseTable(export.snapshot.cases)
        }
        var pager: [HTML] = []
        if query["cursor"] != nil { pager.append("<a href=\"\(AuditURL("refunds", query: filters))\">First page</a>") }
        if let next = export.snapshot.nextCursor {
            pager.append("<a id=\"next-page\" href=\"\(AuditURL("refunds", query: filters + [("cursor", next.text)]))\">Next page →</a>")
        }
        if !pager.isEmpty { body = body + "<div class=\"pager\">\(pager)</div>" }
        return layout(title: "Refund cases", current: .refunds, csrf: csrf, body)
    }

    static func refundCase(_ c: RefundCase, evidence: [(EvidencedEvent, EvidenceCheck)], json: String, csrf: String) -> HTML {
        var body: HTML = """
        <h1 id="case-title">Refund case \(c.caseId)</h1>
        <div class="card"><dl class="facts">
        <dt>Source</dt><dd>\(c.source.rawValue)</dd><dt>Order</dt><dd>\(c.orderId)</dd>
        <dt>Subscription</dt><dd>\(subscriptionLink(c.originalTransactionId))</dd>
        <dt>Customer</dt><dd>\(c.customerId)</dd><dt>Product</dt><dd>\(c.productId)</dd>
        <dt>Opened</dt><dd>\(time(c.openedAt))</dd><dt>Reason</dt><dd>\(c.reason)</dd>
        <dt>Decision</dt><dd>\(c.decision?.rawValue ?? "none (the ledger did not decide)")\(c.decisionRule.map { " — rule \($0)" } ?? "")</dd>
        <dt>Outcome</dt><dd id="outcome">\(c.outcome.rawValue) \(c.outcomeAt.map { time($0) } ?? .empty)</dd>
        <dt>Order amount</dt><dd>\(money(c.orderAmount))</dd><dt>Refunded</dt><dd>\(money(c.refundedAmount))</dd>
        </dl></div>
        """
        if c.source == .wechat {
            let askings = c.inquiries.isEmpty ? "<p class=\"muted\">No refund inquiry was received for this order (a refund arrived without one).</p>" as HTML
                : """
                <div class="scroll"><table class="responsive"><thead><tr><th>Event</th><th>Asked</th><th>Recorded</th><th>Reason</th><th>Provide status</th><th>Answered by</th></tr></thead><tbody>
                \(HTML.join(c.inquiries.map { q in
                    "<tr><td data-label=\"Event\"><a href=\"#event-\(q.position)\">#\(q.position)</a></td><td data-label=\"Asked\">\(time(q.askedAt))</td><td data-label=\"Recorded\">\(time(q.recordedAt))</td><td data-label=\"Reason\">\(q.reason)</td><td data-label=\"Provide status\">\(q.provideStatus.map { String($0) })</td><td data-label=\"Answered by\">\(q.answerPosition.map { "#\($0)\(q.repeatedAnswer ? " (repeated)" : "")" })</td></tr>" as HTML
                }))</tbody></table></div>
                """
            let answers = c.answers.isEmpty ? "<p class=\"muted\">The ledger has not answered an inquiry for this order.</p>" as HTML
                : HTML.join(c.answers.map { a in
                    """
                    <div class="card"><dl class="facts"><dt>Answer</dt><dd><a href="#event-\(a.position)">#\(a.position)</a> recorded \(time(a.recordedAt))</dd>
                    <dt>Decision</dt><dd>\(a.decision?.rawValue) (result_code \(a.resultCode.map { String($0) }))</dd><dt>Rule</dt><dd>\(a.rule)</dd>
                    <dt>Result info</dt><dd>\(a.resultInfo)</dd><dt>Latency</dt><dd>\(a.latencyMs.map { "\($0) ms after the asking was recorded" })</dd>
                    <dt>Evidence sent</dt><dd><pre>\(a.evidence ?? "—")</pre></dd></dl></div>
                    """
                })
            let outcomes = c.refundOutcomes.isEmpty ? "<p class=\"muted\">No refund notice from WeChat yet.</p>" as HTML
                : """
                <div class="scroll"><table class="responsive"><thead><tr><th>Event</th><th>Result</th><th>Refund id</th><th>Fee</th><th>Succeeded</th></tr></thead><tbody>
                \(HTML.join(c.refundOutcomes.map { o in
                    "<tr><td data-label=\"Event\"><a href=\"#event-\(o.position)\">#\(o.position)</a></td><td data-label=\"Result\">\(o.succeeded ? "succeeded" : "failed") \(o.retMsg ?? "")</td><td data-label=\"Refund id\">\(o.wxRefundId)</td><td data-label=\"Fee\">\(money(o.refundFee))</td><td data-label=\"Succeeded\">\(time(o.succeededAt))</td></tr>" as HTML
                }))</tbody></table></div>
                """
            body = body + "<h2>Inquiry</h2>\(askings)<h2>The ledger’s answer</h2>\(answers)<h2>Outcome</h2>\(outcomes)"
        } else {
            let notes = HTML.join(c.appleNotifications.map { n in
                let from: HTML = n.origin == FactOrigin.appleAPI.rawValue ? "App Store Server API answer (reconciliation)" : "notification"
                return "<tr><td data-label=\"Event\"><a href=\"#event-\(n.position)\">#\(n.position)</a></td><td data-label=\"Type\">\(n.notificationType)\(n.subtype.map { "/\($0)" } ?? "")</td><td data-label=\"Stated by\">\(from)</td><td data-label=\"Signed\">\(time(n.signedDate))</td><td data-label=\"Reason\">\(n.consumptionRequestReason ?? n.revocationReason.map { "revocationReason \($0)" })</td></tr>" as HTML
            })
            let consumption: HTML = c.consumptionAnswers.isEmpty
                ? "<p class=\"muted\" id=\"consumption\">No consumption information sent to Apple is recorded for this case.</p>"
                : HTML.join(c.consumptionAnswers.map { a in
                    """
                    <div class="card consumption"><dl class="facts"><dt>Answer</dt><dd><a href="#event-\(a.position)">#\(a.position)</a> recorded \(time(a.recordedAt))\(a.requestPosition.map { " to the request #\($0)" as HTML } ?? .empty)</dd>
                    <dt>Outcome</dt><dd>\(a.outcome)\(a.reason.map { " — \($0)" as HTML } ?? .empty)</dd>
                    <dt>Message</dt><dd>\(a.message)</dd><dt>Attempts</dt><dd>\(a.attempts.map { String($0) })</dd>
                    <dt>Sent to Apple</dt><dd><pre>\(a.request ?? "nothing")</pre></dd><dt>Apple’s answer</dt><dd><pre>\(a.answer ?? "—")</pre></dd></dl></div>
                    """
                })
            body = body + """
            <h2>Apple notifications</h2><div class="scroll"><table class="responsive"><thead><tr><th>Event</th><th>Type</th><th>Stated by</th><th>Signed</th><th>Reason</th></tr></thead><tbody>\(notes)</tbody></table></div>
            <h2>Apple consumption answer</h2>\(consumption)
            """
        }
        let trail = HTML.join(evidence.map { e, check in
            let ev = e.event
            let mark: HTML = switch check {
            case .verified: "<span class=\"ok\">verified</span>"
            case .unsigned: "<span class=\"warn\">unsigned</span>"
            case .refused(let r): "<span class=\"bad\">refused</span> \(r)"
            }
            return """
            <tr id="event-\(ev.position)"><td data-label="Event">#\(ev.position)</td><td data-label="Type">\(ev.event.type)</td>
            <td data-label="Recorded">\(time(ev.recordedAt))</td><td data-label="Facts">\(HTML.join(e.facts.map { "<code>\($0.kind.rawValue)</code>" as HTML }, separator: " "))</td>
            <td data-label="Evidence">\(mark)</td><td data-label="Raw"><a class="raw" href="\(AuditURL("events", String(ev.position), "raw"))">raw (\(ev.event.raw.count) bytes)</a></td></tr>
            """
        })
        body = body + """
        <h2>Every message of the case</h2><div class="scroll"><table class="responsive"><thead><tr><th>Event</th><th>Type</th><th>Recorded</th><th>Facts</th><th>Signature</th><th>Raw</th></tr></thead><tbody>\(trail)</tbody></table></div>
        <details><summary>The case as the API gives it (JSON)</summary><pre>\(json)</pre></details>
        """
        return layout(title: "Refund case \(c.caseId)", current: .refunds, csrf: csrf, body)
    }

    static func subscriptionLink(_ otid: String?) -> HTML {
        guard let otid else { return "—" }
        return "<a href=\"\(AuditURL("subscriptions", otid))\">\(otid)</a>"
    }

    // MARK: projections

    static func projections(_ statuses: [ProjectionStatus], chain: ChainAnchor?, csrf: String) -> HTML {
        let rows = HTML.join(statuses.map { s in
            """
            <tr><td data-label="Projection">\(s.name)</td><td data-label="Position">\(s.position)</td><td data-label="Lag">\(s.lag)</td>
            <td data-label="Status">\(s.isFailed ? "<span class=\"bad\">stopped</span>" as HTML : "<span class=\"ok\">running</span>")</td>
            <td data-label="Last error">\(s.lastError)\(s.failedPosition.map { " (at #\($0))" } ?? "")</td></tr>
            """
        })
        let head: HTML = chain.map { "<p>Log head: position <strong id=\"head\">\($0.position)</strong>, chain hash <code>\($0.hex)</code>. Keep such a pair elsewhere (<code>ledger verify --anchor</code>) to prove later that the log was not rewritten.</p>" }
            ?? "<p class=\"notice error\">The chain head could not be read.</p>"
        return layout(title: "Projection status", current: .projections, csrf: csrf, """
        <h1>Projection status</h1>\(head)
        <div class="scroll"><table class="responsive" id="projections"><thead><tr><th>Projection</th><th>Position</th><th>Lag</th><th>Status</th><th>Last error</th></tr></thead>
        <tbody>\(rows)</tbody></table></div>
        <p class="muted">A stopped projection waits on the event named; fix the cause and it resumes (<code>ledger project --once</code>), it never skips.</p>
        """)
    }
}

import Foundation
import LedgerCore
import LedgerStore

/// What the webhooks page shows: the endpoints (never a secret: `WebhookEndpointRecord.json`
/// holds only fingerprints) and one page of events, newest first, as `WebhookOperations.page`
/// answers them for `GET /v1/admin/webhooks/events` — the same data, the same cursor.
struct WebhookPageModel: Sendable {
    var endpoints: [JSONValue]
    var events: [JSONValue]
    /// The cursor of the next (older) page; nil on the last.
    var next: String?
    /// Filters of the shown page: only this endpoint's / this status's deliveries.
    var endpoint: String?
    var status: String?
    var limit: Int
    var isFirstPage: Bool

    static let statuses = ["pending", "delivered", "failed", "exhausted"]
}

/// The webhooks page. Everything on it came from outside at some point — URLs, reasons, and the
/// receivers' answers above all (a receiver may answer `<script>`) — so every value goes through
/// `HTML` escaping, and a field of an odd shape shows "—" rather than failing the page.
extension AuditPages {
    static func webhooks(_ model: WebhookPageModel, csrf: String) -> HTML {
        var body: HTML = "<h1>Webhooks</h1>" + webhookEndpoints(model.endpoints)
        body = body + "<h2>Events, newest first</h2>" + webhookFilter(model)
        let shown: [(JSONValue, [JSONValue])] = model.events.compactMap { e in
            let deliveries = (e["deliveries"]?.arrayValue ?? []).filter { d in
                (model.endpoint == nil || d.text("endpoint") == model.endpoint) && (model.status == nil || d.text("status") == model.status)
            }
            let filtered = model.endpoint != nil || model.status != nil
            return filtered && deliveries.isEmpty ? nil : (e, deliveries)
        }
        if model.events.isEmpty {
            body = body + (model.isFirstPage
                ? "<p class=\"notice\" id=\"no-webhook-events\">No webhook event has been derived yet: events come from committed facts (a subscription started, renewed, refunded…) or from <code>POST /v1/admin/webhooks/test</code>.</p>" as HTML
                : "<p class=\"notice\" id=\"no-webhook-events\">No older events.</p>" as HTML)
        } else if shown.isEmpty {
            body = body + "<p class=\"notice\" id=\"no-webhook-matches\">None of the \(model.events.count) events on this page has a delivery matching the filter; the next page may.</p>"
        } else {
            body = body + HTML.join(shown.map { webhookEvent($0.0, deliveries: $0.1) })
        }
        if let next = model.next {
            let url = AuditURL("webhooks", query: [("cursor", next), ("limit", model.limit == 50 ? nil : String(model.limit)),
                                                   ("endpoint", model.endpoint), ("status", model.status)])
            body = body + "<p><a id=\"older\" href=\"\(url)\">Older events →</a></p>"
        }
        return layout(title: "Webhooks", current: .webhooks, csrf: csrf, body)
    }

    static func webhookEndpoints(_ endpoints: [JSONValue]) -> HTML {
        guard !endpoints.isEmpty else {
            return "<p class=\"notice\" id=\"no-endpoints\">No webhook endpoint is configured: add one in the configuration file (<code>webhooks.endpoints</code>) or with <code>POST /v1/admin/webhooks/endpoints</code>.</p>"
        }
        let rows = HTML.join(endpoints.map { e in
            let state: HTML = e["enabled"] == .bool(true) ? "<span class=\"ok\">enabled</span>"
                : "<span class=\"bad\">disabled</span> \(e.text("disabledReason"), absent: "")"
            let types = (e["eventTypes"]?.arrayValue ?? []).compactMap(\.text).joined(separator: ", ")
            let envs = (e["environments"]?.arrayValue ?? []).compactMap(\.text).joined(separator: ", ")
            let rotation: HTML = e["rotation"]?.objectValue != nil
                ? " <span class=\"muted\">(also signing with \(e["rotation"]?.text("previousSecretFingerprint")) until \(time(e["rotation"]?.int64("until"))))</span>"
                : .empty
            return """
            <tr class="endpoint" data-endpoint="\(e.text("name"))"><td data-label="Name"><code>\(e.text("name"))</code></td>
            <td data-label="URL"><code>\(e.text("url"))</code></td><td data-label="State">\(state)</td>
            <td data-label="Secret"><code>\(e.text("secretFingerprint"))</code>\(rotation)</td>
            <td data-label="Filters">\(types.isEmpty ? "every type" : types) · \(envs.isEmpty ? "every environment" : envs)</td>
            <td data-label="Origin">\(e.text("origin"))</td></tr>
            """
        })
        return """
        <h2>Endpoints (\(endpoints.count))</h2>
        <div class="scroll"><table class="responsive" id="endpoints"><thead><tr><th>Name</th><th>URL</th><th>State</th><th>Secret (fingerprint)</th><th>Filters</th><th>Origin</th></tr></thead>
        <tbody>\(rows)</tbody></table></div>
        """
    }

    /// A GET form (no state changes, so no CSRF token): the filter applies to the page's events.
    static func webhookFilter(_ model: WebhookPageModel) -> HTML {
        let names = model.endpoints.compactMap { $0.text("name") }
        func options(_ values: [String], selected: String?, all: String) -> HTML {
            "<option value=\"\"\(selected == nil ? " selected" as HTML : .empty)>\(all)</option>"
                + HTML.join(values.map { v in "<option value=\"\(v)\"\(v == selected ? " selected" as HTML : .empty)>\(v)</option>" })
        }
        return """
        <form method="get" action="\(AuditURL("webhooks"))" class="filters" id="webhook-filter">
        <label>Endpoint <select name="endpoint">\(options(names, selected: model.endpoint, all: "every endpoint"))</select></label>
        <label>Status <select name="status">\(options(WebhookPageModel.statuses, selected: model.status, all: "every status"))</select></label>
        <button type="submit">Show</button> <span class="muted">The filter applies to each page of \(model.limit) events.</span></form>
        """
    }

    static func webhookEvent(_ e: JSONValue, deliveries: [JSONValue]) -> HTML {
        let subscription: HTML
        if let s = e.text("subscription"), let colon = s.firstIndex(of: ":") {
            let environment = String(s[..<colon]), otid = String(s[s.index(after: colon)...])
            subscription = "<a class=\"subscription\" href=\"\(AuditURL("subscriptions", otid, query: [("environment", environment)]))\">\(otid)</a> <span class=\"muted\">\(environment)</span>"
        } else {
            subscription = "<span class=\"muted\">\(e.text("subscription"), absent: "no subscription")</span>"
        }
        let customer: HTML = e.text("customerId").map { " · customer <code>\($0)</code>" as HTML } ?? .empty
        let position: HTML = e.int64("position").map { p in
            p > 0 ? "<a href=\"\(AuditURL("events", String(p), "raw"))\">\(p)</a>" as HTML : "\(p)"
        } ?? "—"
        let rows: HTML = deliveries.isEmpty
            ? "<p class=\"muted\">Sent to no endpoint: none enabled took it when it was derived.</p>"
            : HTML.join(deliveries.map(webhookDelivery))
        return """
        <section class="event webhook" id="webhook-\(e.text("id"))" data-event-id="\(e.text("id"))">
        <div class="head"><strong class="type">\(e.text("type"))</strong><span>\(subscription)\(customer)</span>
        <span>effective \(time(e.int64("effectiveDate")))</span><span>position \(position)</span><code class="muted">\(e.text("id"))</code></div>
        <div class="body">\(rows)</div></section>
        """
    }

    static func webhookDelivery(_ d: JSONValue) -> HTML {
        let status = d.text("status") ?? "?"
        let mark: HTML = switch status {
        case "delivered": "<span class=\"ok\">delivered</span>"
        case "failed", "exhausted": "<span class=\"bad\">\(status)</span>"
        case "pending": "<span class=\"warn\">pending</span>"
        default: "\(status)"
        }
        // A pending item with no time yet waits for an earlier event of its subscription (delivery is
        // ordered per endpoint and subscription), so it has no attempt time to show.
        let next: HTML = d.int64("nextAttemptAt").map { at in
            at > 0 ? " · next attempt \(time(at))" as HTML : " · waits for an earlier event of its subscription" as HTML
        } ?? .empty
        let history = d["history"]?.arrayValue ?? []
        let rows = HTML.join(history.map { a in
            let outcome: HTML = a.text("outcome") == "delivered" ? "<span class=\"ok\">delivered</span>" : "<span class=\"bad\">failed</span>"
            let http: HTML = a.int64("status").map { "\($0)" as HTML } ?? "<span class=\"muted\">no answer</span>"
            return """
            <tr class="attempt"><td data-label="Attempt">\(a.int64("generation").map { "\($0)." as HTML } ?? .empty)\(a.int64("attempt") ?? 0)</td>
            <td data-label="Time">\(time(a.int64("at")))</td><td data-label="HTTP">\(http) \(outcome)</td>
            <td data-label="Latency">\(a.int64("latencyMs").map { "\($0) ms" as HTML } ?? "—")</td>
            <td data-label="Answer"><code class="excerpt">\(a.text("excerpt"), absent: "")</code></td></tr>
            """
        })
        let table: HTML = history.isEmpty ? "<p class=\"muted\">No attempt yet.</p>" : """
        <div class="scroll"><table class="responsive attempts"><thead><tr><th>Attempt</th><th>Time</th><th>HTTP</th><th>Latency</th><th>Answer (excerpt)</th></tr></thead>
        <tbody>\(rows)</tbody></table></div>
        """
        return """
        <div class="delivery" data-endpoint="\(d.text("endpoint"))" data-status="\(status)"><p><code>\(d.text("endpoint"))</code> \(mark)
        · \(d.int64("attempts") ?? 0) attempt(s)\(next)</p>\(table)</div>
        """
    }
}

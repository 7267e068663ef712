import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import XCTest

/// The auditor's webhooks page (`/audit/webhooks`, issue 21 item 5), through HTTP on a real
/// database: a real delivery to two loopback receivers — one accepts, one answers 500 with a
/// hostile HTML body until the event is exhausted — then the page read with an auditor's session.
extension WebhookDeliveryTests {
    static let hostile = #"<script>alert("from the receiver")</script>"#

    func pageGet(_ h: ServiceHarness, _ path: String, cookie: String? = nil, headers: [String: String] = [:]) throws -> RawClient.Response {
        var all = headers
        if let cookie { all["Cookie"] = cookie }
        return try RawClient.request(port: h.server.port!, path: path, headers: all)
    }

    /// Signs in through the form with `token`; the session cookie.
    func pageSignIn(_ h: ServiceHarness, token: String = ServiceHarness.auditorToken) throws -> String? {
        let form = try pageGet(h, "/audit/login")
        let html = String(decoding: form.body, as: UTF8.self)
        let start = try XCTUnwrap(html.range(of: "name=\"csrf\" value=\"")).upperBound
        let csrf = String(html[start...].prefix { $0 != "\"" })
        let nonce = String(try XCTUnwrap(form.headers["set-cookie"]).prefix { $0 != ";" })
        let body = "csrf=\(csrf.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&token=\(token)"
        let r = try RawClient.request(port: h.server.port!, method: "POST", path: "/audit/login",
                                      headers: ["Content-Type": "application/x-www-form-urlencoded", "Cookie": nonce], body: Array(body.utf8))
        XCTAssertEqual(r.status, 303)
        return r.headers["set-cookie"].map { String($0.prefix { $0 != ";" }) }
    }

    func assertHTMLPage(_ r: RawClient.Response, _ status: Int, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(r.status, status, String(decoding: r.body, as: UTF8.self).prefix(400).description, file: file, line: line)
        XCTAssertEqual(r.headers["content-security-policy"], AuditAssets.contentSecurityPolicy, file: file, line: line)
        XCTAssertEqual(r.headers["x-content-type-options"], "nosniff", file: file, line: line)
    }

    func testTheWebhooksPageShowsEndpointsEventsAndEveryAttemptEscaped() async throws {
        let secret = WebhookSecret.generate(), flakySecret = WebhookSecret.generate()
        let good = WebhookReceiver(secrets: [secret]), flaky = WebhookReceiver(secrets: [flakySecret])
        try good.start()
        try flaky.start()
        defer { Task { await good.stop(); await flaky.stop() } }
        flaky.behave(.fail(status: 500, retryAfter: nil, body: Self.hostile))
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", good, secret: secret)
            // Only the starts go to the flaky one, so its two exhaust in parallel (one per subscription).
            let body = try JSONSerialization.data(withJSONObject: ["name": "flaky", "url": flaky.url, "secret": flakySecret.text,
                                                                   "eventTypes": ["subscription.started"]])
            let created = try await h.request("POST", "/v1/admin/webhooks/endpoints", body: body, token: Self.admin)
            XCTAssertEqual(created.status, 201, created.text)
            try await post(h, try lifecycle(h.authority))
            try await deliver([h.app], h)
            XCTAssertEqual(try pending(h), 0)
            let disabled = try await h.request("POST", "/v1/admin/webhooks/endpoints/flaky/disable",
                                               body: Data(#"{"reason": "<i>receiver moved</i>"}"#.utf8), token: Self.admin)
            XCTAssertEqual(disabled.status, 200, disabled.text)

            // The API's view of the same events, oldest first.
            let api = try await h.request("GET", "/v1/admin/webhooks/events?limit=500", token: Self.admin)
            let events = try XCTUnwrap(api.json["events"] as? [[String: Any]])
            XCTAssertGreaterThanOrEqual(events.count, 10)

            // Not signed in: to the form; an app token: refused, even beside a session.
            let anonymous = try pageGet(h, "/audit/webhooks")
            XCTAssertEqual(anonymous.status, 303)
            XCTAssertEqual(anonymous.headers["location"], "/audit/login?next=%2Faudit%2Fwebhooks")
            assertHTMLPage(try pageGet(h, "/audit/webhooks", headers: ["Authorization": "Bearer \(ServiceHarness.appToken)"]), 403)
            let session = try XCTUnwrap(try pageSignIn(h))
            assertHTMLPage(try pageGet(h, "/audit/webhooks", cookie: session, headers: ["Authorization": "Bearer \(ServiceHarness.appToken)"]), 403)

            let page = try pageGet(h, "/audit/webhooks", cookie: session)
            assertHTMLPage(page, 200)
            let html = String(decoding: page.body, as: UTF8.self)
            // Navigation, endpoints (fingerprints, never a secret), the disabled one's reason escaped.
            XCTAssertTrue(html.contains(#"<a href="/audit/webhooks" aria-current="page">Webhooks</a>"#))
            XCTAssertTrue(html.contains(#"data-endpoint="backend""#) && html.contains(#"data-endpoint="flaky""#))
            XCTAssertTrue(html.contains(secret.fingerprint) && html.contains(flakySecret.fingerprint))
            XCTAssertFalse(html.contains(secret.text) || html.contains(flakySecret.text), "a secret on the page")
            XCTAssertTrue(html.contains(good.url) && html.contains(flaky.url))
            XCTAssertTrue(html.contains("&lt;i&gt;receiver moved&lt;/i&gt;"))
            XCTAssertFalse(html.contains("<i>receiver moved"))
            // Every event, newest first, with its subscription linked to the timeline.
            let ids = html.components(separatedBy: #"data-event-id=""#).dropFirst().map { String($0.prefix { $0 != "\"" }) }
            XCTAssertEqual(ids, events.reversed().compactMap { $0["id"] as? String })
            XCTAssertTrue(html.contains(#"href="/audit/subscriptions/\#(Self.subA)?environment=Sandbox""#))
            XCTAssertTrue(html.contains("subscription.started") && html.contains("subscription.refunded"))
            // Delivered and exhausted deliveries, their attempts: 204 and 500, the hostile answer as text.
            XCTAssertTrue(html.contains(#"data-endpoint="backend" data-status="delivered""#))
            XCTAssertTrue(html.contains(#"data-endpoint="flaky" data-status="exhausted""#), html)
            XCTAssertTrue(html.contains("<span class=\"bad\">exhausted</span>"))
            XCTAssertTrue(html.contains("204 <span class=\"ok\">delivered</span>"))
            XCTAssertTrue(html.contains("500 <span class=\"bad\">failed</span>"))
            XCTAssertTrue(html.contains("&lt;script&gt;alert("), "the receiver's answer shown as text")
            XCTAssertFalse(html.contains("<script>alert"), "the receiver's answer ran as HTML")
            XCTAssertEqual(html.components(separatedBy: "<script").count - 1, 1, "only the page's own script tag")

            // Paging by the API's cursor, older events on the next page; the filter.
            let first = String(decoding: try pageGet(h, "/audit/webhooks?limit=2", cookie: session).body, as: UTF8.self)
            let older = try XCTUnwrap(first.range(of: #"id="older" href=""#)).upperBound
            let next = String(first[older...].prefix { $0 != "\"" }).replacingOccurrences(of: "&amp;", with: "&")
            XCTAssertTrue(next.hasPrefix("/audit/webhooks?cursor="), next)
            let second = String(decoding: try pageGet(h, next, cookie: session).body, as: UTF8.self)
            let secondIds = second.components(separatedBy: #"data-event-id=""#).dropFirst().map { String($0.prefix { $0 != "\"" }) }
            XCTAssertEqual(secondIds, Array(ids.dropFirst(2).prefix(2)))
            let exhausted = String(decoding: try pageGet(h, "/audit/webhooks?status=exhausted", cookie: session).body, as: UTF8.self)
            XCTAssertTrue(exhausted.contains(#"data-status="exhausted""#))
            XCTAssertFalse(exhausted.contains(#"data-status="delivered""#))
            XCTAssertEqual(exhausted.components(separatedBy: #"data-event-id=""#).count - 1, 2, "the two starts")

            // Hostile query values: a page with a status and a message, never a 500.
            for bad in ["cursor=12", "cursor=a.b", "limit=0", "limit=9999", "status=%3Cscript%3E", "endpoint=..%2F%3Cx%3E"] {
                let r = try pageGet(h, "/audit/webhooks?\(bad)", cookie: session)
                assertHTMLPage(r, 400)
                XCTAssertFalse(String(decoding: r.body, as: UTF8.self).contains("<script>"), bad)
            }
        }
    }
}

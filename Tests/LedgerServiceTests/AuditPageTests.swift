import Crypto
import Foundation
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerTesting
import XCTest

/// The HTML builder escapes whatever the log holds.
final class AuditHTMLTests: XCTestCase {
    static let hostile = [
        "<script>alert(1)</script>", "\"><img src=x onerror=alert(1)>", "' onmouseover='alert(1)", "`${alert(1)}`",
        "javascript:alert(1)", "&lt;already&gt;", "a\u{0}b", "</textarea><svg/onload=alert(1)>", "é✓ 中文",
    ]

    func testInterpolatedTextNeverBecomesMarkup() {
        for value in Self.hostile {
            let page: HTML = "<p title=\"\(value)\">\(value)</p>"
            let body = page.rendered.dropFirst("<p title=\"".count).dropLast("</p>".count)
            XCTAssertFalse(body.contains("<"), "\(value) → \(page)")
            XCTAssertFalse(body.dropFirst().contains("\"") && !body.contains("\">"), "\(value) → \(page)")
            XCTAssertEqual(page.rendered.filter { $0 == "\"" }.count, 2, "only the literal's quotes remain: \(page)")
            XCTAssertFalse(page.rendered.contains("'"), "\(page)")
            XCTAssertFalse(page.rendered.contains("\u{0}"))
        }
        XCTAssertEqual(HTML.escape("&lt;"), "&amp;lt;", "escaping is not undone by pre-escaped input")
        let inner: HTML = "<b>\("<i>")</b>"
        XCTAssertEqual(("<p>\(inner)</p>" as HTML).rendered, "<p><b>&lt;i&gt;</b></p>", "safe HTML nests as is")
        XCTAssertEqual(("\(nil as String?)" as HTML).rendered, "—")
    }

    func testLinksAreFixedPathsWithEncodedSegments() {
        XCTAssertEqual(AuditURL("refunds", "wechat:a/b?c#d", query: [("x", "1 2&3"), ("empty", ""), ("none", nil)]).text,
                       "/audit/refunds/wechat%3Aa%2Fb%3Fc%23d?x=1%202%263")
        XCTAssertEqual(AuditURL("refunds", "javascript:alert(1)").text, "/audit/refunds/javascript%3Aalert%281%29")
        XCTAssertEqual(AuditURL("refunds", "..").text, "/audit/refunds/..", "a dot segment stays inside /audit (the router matches it literally)")
    }

    /// A case whose every text is `value` (decoded, as the projection stores cases); `apple`: an
    /// Apple case with a hostile notification and consumption answer.
    func hostileCase(_ value: String, apple: Bool = false) throws -> RefundCase {
        var object: [String: Any] = [
            "caseId": "wechat:" + value, "source": "wechat", "orderId": value, "openId": value, "customerId": value, "productId": value,
            "openedAt": 1, "lastRecordedAt": 2, "decision": "refuse", "decisionRule": value, "outcome": "pending", "reason": value,
            "inquiries": [["position": 1, "recordedAt": 1, "askedAt": 1, "reason": value, "channelBill": value, "productId": value,
                           "streamId": value, "repeatedAnswer": false]],
            "answers": [["position": 2, "recordedAt": 2, "resultCode": 1, "decision": "refuse", "rule": value, "resultInfo": value,
                         "evidence": value, "inquiryPosition": 1, "latencyMs": 1]],
            "refundOutcomes": [], "appleNotifications": [], "links": [1, 2], "consumptionAnswers": [],
        ]
        if apple {
            object["source"] = "apple"
            object["appleNotifications"] = [["position": 3, "recordedAt": 3, "notificationType": value, "subtype": value,
                                             "consumptionRequestReason": value, "origin": value]]
            object["consumptionAnswers"] = [["position": 4, "recordedAt": 4, "outcome": value, "reason": value, "message": value,
                                             "requestPosition": 3, "request": value, "answer": value, "attempts": 1]]
        }
        return try JSONDecoder().decode(RefundCase.self, from: JSONSerialization.data(withJSONObject: object))
    }

    func testPagesRenderHostileCasesEscaped() throws {
        for value in Self.hostile {
            let c = try hostileCase(value)
            let pages = [AuditPages.refundCase(c, evidence: [], json: value, csrf: value), AuditPages.caseTable([c]),
                         AuditPages.refundCase(try hostileCase(value, apple: true), evidence: [], json: value, csrf: value),
                         AuditPages.search(.init(query: value, cases: [c]), csrf: "t"), AuditPages.refusal(value),
                         AuditPages.error(title: value, message: value, csrf: nil), AuditPages.login(csrf: value, message: value, next: value)]
            for page in pages {
                for needle in ["<script>", "<img", "<svg", "onmouseover='"] {
                    XCTAssertFalse(page.rendered.contains(needle) && value.contains(needle), "\(needle) from \(value) leaked")
                }
                XCTAssertFalse(page.rendered.contains("<script>"), "no inline script at all")
                XCTAssertFalse(page.rendered.contains("style=\""), "no inline style at all")
            }
        }
    }
}

/// The pages over HTTP (no browser: `make test-ui` drives Chromium): sign-in with CSRF, the
/// session cookie's attributes and checks, refusals of app tokens, CSP on every answer.
final class AuditPageTests: XCTestCase {
    let wx = WeChatTestSender()

    func get(_ h: ServiceHarness, _ path: String, cookie: String? = nil, headers: [String: String] = [:]) throws -> RawClient.Response {
        var all = headers
        if let cookie { all["Cookie"] = cookie }
        return try RawClient.request(port: h.server.port!, path: path, headers: all)
    }

    func post(_ h: ServiceHarness, _ path: String, form: [String: String], cookie: String? = nil, headers: [String: String] = [:]) throws -> RawClient.Response {
        var all = headers
        all["Content-Type"] = "application/x-www-form-urlencoded"
        if let cookie { all["Cookie"] = cookie }
        let body = form.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)" }.joined(separator: "&")
        return try RawClient.request(port: h.server.port!, method: "POST", path: path, headers: all, body: Array(body.utf8))
    }

    /// The login form's CSRF field and nonce cookie.
    func loginForm(_ h: ServiceHarness) throws -> (csrf: String, cookie: String) {
        let page = try get(h, "/audit/login")
        XCTAssertEqual(page.status, 200)
        let html = String(decoding: page.body, as: UTF8.self)
        let marker = "name=\"csrf\" value=\""
        let start = try XCTUnwrap(html.range(of: marker)).upperBound
        let csrf = String(html[start...].prefix { $0 != "\"" })
        let setCookie = try XCTUnwrap(page.headers["set-cookie"])
        return (csrf, String(setCookie.prefix { $0 != ";" }))
    }

    func signIn(_ h: ServiceHarness, token: String = "auditor-token-for-tests-0123456789abcdef") throws -> (response: RawClient.Response, cookie: String?) {
        let (csrf, cookie) = try loginForm(h)
        let r = try post(h, "/audit/login", form: ["csrf": csrf, "token": token, "next": "/audit/projections"], cookie: cookie)
        return (r, r.headers["set-cookie"].map { String($0.prefix { $0 != ";" }) })
    }

    func assertPage(_ r: RawClient.Response, _ status: Int, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(r.status, status, String(decoding: r.body, as: UTF8.self).prefix(400).description, file: file, line: line)
        XCTAssertEqual(r.headers["content-security-policy"], AuditAssets.contentSecurityPolicy, file: file, line: line)
        XCTAssertEqual(r.headers["x-content-type-options"], "nosniff", file: file, line: line)
    }

    func testSignInSessionAndRefusals() async throws {
        try await withService(environment: WeChatTestSender.environment.merging(["LEDGER_SESSION_KEY": String(repeating: "k", count: 40)]) { $1 }) { h in
            // Not signed in: every page sends to the form, keeping where it was going.
            let anonymous = try get(h, "/audit/refunds")
            XCTAssertEqual(anonymous.status, 303)
            XCTAssertEqual(anonymous.headers["location"], "/audit/login?next=%2Faudit%2Frefunds")

            let (ok, cookie) = try signIn(h)
            XCTAssertEqual(ok.status, 303)
            XCTAssertEqual(ok.headers["location"], "/audit/projections")
            let setCookie = try XCTUnwrap(ok.headers["set-cookie"])
            for attribute in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/audit", "Max-Age=28800"] {
                XCTAssertTrue(setCookie.contains(attribute), "\(attribute) in \(setCookie)")
            }
            let session = try XCTUnwrap(cookie)
            let page = try get(h, "/audit/projections", cookie: session)
            assertPage(page, 200)
            XCTAssertTrue(String(decoding: page.body, as: UTF8.self).contains("refund_cases"))
            assertPage(try get(h, "/audit/search?q=nothing-known", cookie: session), 200)
            assertPage(try get(h, "/audit/refunds/wechat%3ANOPE", cookie: session), 404)

            // A forged or altered cookie is no session.
            let parts = session.split(separator: ".")
            let forged = parts.dropLast().joined(separator: ".") + "." + String(repeating: "A", count: 43)
            XCTAssertEqual(try get(h, "/audit/projections", cookie: forged).status, 303)
            XCTAssertEqual(try get(h, "/audit/projections", cookie: "ledger_audit=v1.e30.AAAA").status, 303)

            // Another instance with the same key accepts it; one with another key, or without the token, refuses it.
            let sameKey = AuditSessions(configuration: h.app.configuration.audit)
            let request = HTTPRequest(method: "GET", path: "/audit", headers: HTTPHeaders([("Cookie", session)]))
            XCTAssertNotNil(sameKey.session(from: request))
            var other = h.app.configuration.audit
            other.sessionKey = Secret(String(repeating: "z", count: 40))
            XCTAssertNil(AuditSessions(configuration: other).session(from: request))
            XCTAssertNil(AuditSessions(configuration: h.app.configuration.audit, now: { Int64(Date().timeIntervalSince1970) + 8 * 3600 + 1 })
                .session(from: request), "8 hours later the session has expired")
            let withoutToken = TokenAuthority(tokens: h.app.configuration.tokens.filter { $0.role != .auditor })
            XCTAssertNil(sameKey.session(from: request).flatMap { withoutToken.role(forTokenSHA256: $0.tokenHash) })

            // App tokens never open a page: not by the form, not as a bearer.
            let (app, appCookie) = try signIn(h, token: "app-token-for-tests-0123456789abcdef")
            assertPage(app, 403)
            XCTAssertNil(appCookie)
            XCTAssertTrue(String(decoding: app.body, as: UTF8.self).contains("app role"))
            assertPage(try get(h, "/audit/refunds", headers: ["Authorization": "Bearer app-token-for-tests-0123456789abcdef"]), 403)
            assertPage(try get(h, "/audit/refunds", cookie: session, headers: ["Authorization": "Bearer app-token-for-tests-0123456789abcdef"]), 403)
            let (wrong, _) = try signIn(h, token: "not-a-token")
            assertPage(wrong, 401)

            // CSRF: no token, another form's token, a cross-site post.
            let (_, nonce) = try loginForm(h)
            assertPage(try post(h, "/audit/login", form: ["token": "auditor-token-for-tests-0123456789abcdef"], cookie: nonce), 403)
            let (otherCsrf, _) = try loginForm(h)
            assertPage(try post(h, "/audit/login", form: ["csrf": otherCsrf, "token": "auditor-token-for-tests-0123456789abcdef"], cookie: nonce), 403)
            let (csrf, nonce2) = try loginForm(h)
            assertPage(try post(h, "/audit/login", form: ["csrf": csrf, "token": "auditor-token-for-tests-0123456789abcdef"], cookie: nonce2,
                                headers: ["Sec-Fetch-Site": "cross-site"]), 403)
            assertPage(try post(h, "/audit/login", form: ["csrf": csrf, "token": "auditor-token-for-tests-0123456789abcdef"], cookie: nonce2,
                                headers: ["Origin": "https://evil.example"]), 403)
            // An open redirect is not possible through next.
            let (c3, n3) = try loginForm(h)
            let evil = try post(h, "/audit/login", form: ["csrf": c3, "token": "auditor-token-for-tests-0123456789abcdef", "next": "//evil.example/audit/x"], cookie: n3)
            XCTAssertEqual(evil.headers["location"], "/audit/search")

            // Sign-out needs the session's own token.
            assertPage(try post(h, "/audit/logout", form: ["csrf": "x"], cookie: session), 403)
            let logoutToken = sameKey.sessionToken(try XCTUnwrap(sameKey.session(from: request)))
            let out = try post(h, "/audit/logout", form: ["csrf": logoutToken], cookie: session)
            XCTAssertEqual(out.status, 303)
            XCTAssertTrue(out.headers["set-cookie"]?.contains("Max-Age=0") ?? false)

            // Static assets: same origin, no inline anything, and every /audit route answers HTML or an asset.
            let css = try get(h, "/audit/static/audit.css")
            XCTAssertEqual(css.status, 200)
            XCTAssertEqual(css.headers["content-type"], "text/css; charset=utf-8")
            XCTAssertFalse(String(decoding: css.body, as: UTF8.self).contains("http"), "no outside font or CDN")
            XCTAssertEqual(try get(h, "/audit/static/audit.js").headers["content-type"], "text/javascript; charset=utf-8")
        }
    }

    func testInsecureCookiesOnlyWhenAsked() async throws {
        try await withService(environment: ["LEDGER_INSECURE_COOKIES": "true"]) { h in
            let (ok, _) = try signIn(h)
            XCTAssertEqual(ok.status, 303)
            XCTAssertFalse(ok.headers["set-cookie"]?.contains("Secure") ?? true)
        }
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_INSECURE_COOKIES": "yes"]))
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_SESSION_KEY": "tiny-key-value"])) { error in
            XCTAssertFalse("\(error)".contains("tiny-key-value"), "the key is never echoed")
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("session-key-\(UUID().uuidString)")
        try Data((String(repeating: "f", count: 32) + "\n").utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let c = try LedgerConfiguration.load(environment: ["LEDGER_SESSION_KEY_FILE": file.path])
        XCTAssertEqual(c.audit.sessionKey?.value, String(repeating: "f", count: 32))
    }

    func testTimelineAndCasePagesShowTheEvidence() async throws {
        try await withService(environment: WeChatTestSender.environment) { h in
            let otid = "2000001147426510"
            try await wx.push(h, [wx.deliver(order: "ORDER-P", otid: otid), wx.inquiry(order: "ORDER-P"),
                                  wx.inquiry(order: RefundExportTests.hostileOrder, reason: "<script>alert(1)</script>")])
            let apple = try h.authority.signSample(AppleTestAuthority.sample(originalTransactionId: "7300000000000001"))
            let posted = try await h.post("/v1/apple/notifications", apple)
            XCTAssertEqual(posted.status, 200)
            let (_, cookie) = try signIn(h)
            let session = try XCTUnwrap(cookie)

            let timeline = try get(h, "/audit/subscriptions/7300000000000001?environment=Sandbox", cookie: session)
            assertPage(timeline, 200)
            let t = String(decoding: timeline.body, as: UTF8.self)
            XCTAssertTrue(t.contains("SUBSCRIBED/INITIAL_BUY"))
            XCTAssertTrue(t.contains("signature verified"), "the JWS re-verified at its signedDate")
            XCTAssertTrue(t.contains("chain link holds"))
            XCTAssertTrue(t.contains("status: <strong>active</strong>"), t)
            let raw = try get(h, "/audit/events/1/raw", cookie: session)
            XCTAssertEqual(raw.status, 200)
            XCTAssertEqual(raw.headers["content-disposition"], "attachment; filename=\"event-1.raw\"")
            assertPage(try get(h, "/audit/events/999/raw", cookie: session), 404)
            XCTAssertEqual(try get(h, "/audit/events/1/raw").status, 303, "raw evidence needs a session too")
            assertPage(try get(h, "/audit/subscriptions/not-digits", cookie: session), 400)
            let empty = try get(h, "/audit/subscriptions/7300000000000001", cookie: session)
            XCTAssertTrue(String(decoding: empty.body, as: UTF8.self).contains("No events are stored"), "Production has none: said in words")

            let casePage = try get(h, "/audit/refunds/wechat%3AORDER-P", cookie: session)
            assertPage(casePage, 200)
            let c = String(decoding: casePage.body, as: UTF8.self)
            XCTAssertTrue(c.contains("UNINTENDED_PURCHASE") && c.contains("The ledger’s answer"))
            let hostileId = AuditURL.encode("wechat:" + RefundExportTests.hostileOrder)
            let hostile = String(decoding: try get(h, "/audit/refunds/" + hostileId, cookie: session).body, as: UTF8.self)
            XCTAssertTrue(hostile.contains("&lt;img src=x onerror=alert(1)&gt;"), hostile)
            XCTAssertFalse(hostile.contains("<img src=x") || hostile.contains("<script>alert"))

            let list = String(decoding: try get(h, "/audit/refunds?source=wechat", cookie: session).body, as: UTF8.self)
            XCTAssertTrue(list.contains("wechat:ORDER-P"))
            let none = String(decoding: try get(h, "/audit/refunds?source=apple", cookie: session).body, as: UTF8.self)
            XCTAssertTrue(none.contains("No refund cases match these filters"))
            let csv = try get(h, "/audit/refunds.csv?source=wechat", cookie: session)
            let api = try await h.request("GET", "/v1/refunds?format=csv&source=wechat", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(csv.body, api.body, "the page's CSV is the API's")
            let found = String(decoding: try get(h, "/audit/search?q=ORDER-P", cookie: session).body, as: UTF8.self)
            XCTAssertTrue(found.contains("wechat:ORDER-P"))
            let byCustomer = String(decoding: try get(h, "/audit/search?q=oUser1", cookie: session).body, as: UTF8.self)
            XCTAssertTrue(byCustomer.contains(otid), byCustomer)
            let bySubscription = String(decoding: try get(h, "/audit/search?q=7300000000000001", cookie: session).body, as: UTF8.self)
            XCTAssertTrue(bySubscription.contains("/audit/subscriptions/7300000000000001?environment=Sandbox"))
        }
    }
}

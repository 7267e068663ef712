import AppStore
import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// What the auditor's pages need beyond the API's use cases: sessions and the evidence verifier.
struct AuditDesk: Sendable {
    let sessions: AuditSessions
    /// Nil when the Apple roots or the WeChat key history cannot be loaded (`evidenceProblem`
    /// says which): the pages still open, and every evidence check says why it could not run.
    let evidence: EvidenceVerifier?
    let evidenceProblem: EvidenceKeysError?

    init(configuration: LedgerConfiguration) {
        sessions = AuditSessions(configuration: configuration.audit)
        do {
            evidence = try EvidenceVerifier(configuration: configuration)
            evidenceProblem = nil
        } catch {
            evidence = nil
            evidenceProblem = error
        }
    }

    func check(_ event: RecordedEvent) -> EvidenceCheck {
        evidence?.check(event) ?? .refused(reason: "not re-verified: \(evidenceProblem?.description ?? "no evidence verifier")")
    }
}

/// The auditor's pages at `/audit`: server-rendered HTML (`AuditPages`), a session cookie from a
/// sign-in form (`AuditSessions`), the same use cases as the JSON API. Not part of
/// docs/openapi.yaml, which describes the JSON API (the contract test leaves `/audit` out and
/// checks these answer HTML with the Content-Security-Policy instead).
extension LedgerApp {
    static let auditPrefix = "/audit"

    func addAuditRoutes(to router: inout Router) {
        let deadline = Duration.seconds(configuration.http.requestDeadlineSeconds)
        let longDeadline = Duration.seconds(configuration.http.adminDeadlineSeconds)
        router.group(deadline: deadline) { group in
            group.add("GET", "/audit/static/audit.css") { _ in
                HTTPResponse(status: 200, headers: [("Content-Type", "text/css; charset=utf-8"), ("ETag", AuditAssets.cssETag),
                                                    ("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-cache")],
                             body: Data(AuditAssets.css.utf8))
            }
            group.add("GET", "/audit/static/audit.js") { _ in
                HTTPResponse(status: 200, headers: [("Content-Type", "text/javascript; charset=utf-8"), ("ETag", AuditAssets.jsETag),
                                                    ("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-cache")],
                             body: Data(AuditAssets.js.utf8))
            }
            group.add("GET", "/audit/static/favicon.svg") { _ in
                HTTPResponse(status: 200, headers: [("Content-Type", "image/svg+xml"), ("X-Content-Type-Options", "nosniff"),
                                                    ("Content-Security-Policy", AuditAssets.contentSecurityPolicy), ("Cache-Control", "max-age=86400")],
                             body: Data(AuditAssets.favicon.utf8))
            }
            group.add("GET", "/audit") { [self] request in
                if let refused = refuseAppToken(request) { return refused }
                return redirect(signedIn(request) == nil ? AuditURL("login").text : AuditURL("search").text)
            }
            group.add("GET", "/audit/login") { [self] request in
                if let refused = refuseAppToken(request) { return refused }
                if signedIn(request) != nil { return redirect(AuditURL("search").text) }
                return loginPage(status: 200, message: nil, next: request.query["next"])
            }
            group.add("POST", "/audit/login") { [self] request in try await signIn(request) }
            group.add("POST", "/audit/logout") { [self] request in
                if AuditSessions.isCrossSite(request) { return refusal(403, "This form was sent from another site, so it was refused.") }
                guard let (session, _) = signedIn(request) else { return redirect(AuditURL("login").text) }
                guard audit.sessions.sessionTokenHolds(session, form: FormBody.parse(request.body)) else {
                    return refusal(403, "The sign-out form did not carry this session’s token; reload the page and try again.")
                }
                var response = redirect(AuditURL("login").text)
                response.headers.append(("Set-Cookie", audit.sessions.cleared))
                return response
            }
            group.add("GET", "/audit/search") { [self] request in
                try await page(request) { csrf in AuditPages.search(try await search(request.query["q"]), csrf: csrf) }
            }
            group.add("GET", "/audit/subscriptions/{originalTransactionId}") { [self] request in
                try await page(request) { csrf in try await timelinePage(request, csrf: csrf) }
            }
            group.add("GET", "/audit/events/{position}/raw") { [self] request in
                try await page(request, html: false) { _ in HTML.empty } rawAnswer: { [self] in
                    guard let p = Int64(request.pathParameters["position"] ?? ""), p > 0 else {
                        throw ServiceFailure.invalidParameter("the position must be a positive integer")
                    }
                    guard let event = try await store.events.events(positions: [p]).first else {
                        throw ServiceFailure.notFound("no event is stored at position \(p)")
                    }
                    return HTTPResponse(status: 200, headers: [("Content-Type", "application/octet-stream"),
                                                               ("Content-Disposition", "attachment; filename=\"event-\(p).raw\"")]
                                            + AuditAssets.securityHeaders, body: event.event.raw)
                }
            }
            group.add("GET", "/audit/refunds") { [self] request in
                try await page(request) { csrf in
                    let query = try RefundListQuery(request.query, defaultLimit: 50)
                    let export = try await refunds.export(matching: query.filter, after: query.cursor, limit: query.limit,
                                                          asOfPosition: query.asOfPosition)
                    return AuditPages.refunds(export, query: request.query, csrf: csrf)
                }
            }
            group.add("GET", "/audit/refunds.csv", deadline: longDeadline) { [self] request in
                try await page(request, html: false) { _ in HTML.empty } rawAnswer: { [self] in
                    var raw = request.query
                    raw.removeValue(forKey: "cursor")
                    raw.removeValue(forKey: "limit")
                    raw["format"] = "csv"
                    let query = try RefundListQuery(raw)
                    let export = try await refunds.export(matching: query.filter, asOfPosition: query.asOfPosition)
                    return HTTPResponse(status: 200, headers: [("Content-Type", "text/csv; charset=utf-8"),
                                                               ("Content-Disposition", "attachment; filename=\"refunds-at-\(export.snapshot.position).csv\"")]
                                            + export.headers + AuditAssets.securityHeaders, body: Data(export.csv.utf8))
                }
            }
            group.add("GET", "/audit/refunds/{caseId}") { [self] request in
                try await page(request) { csrf in try await casePage(request.pathParameters["caseId"] ?? "", csrf: csrf) }
            }
            addReportPages(to: &group)
            group.add("GET", "/audit/drift") { [self] request in
                try await page(request) { csrf in
                    AuditPages.drift(DriftPageModel(view: try await appleAPI.drift.latest(),
                                                    unavailable: appleAPI.reconciliation == nil ? appleAPI.notConfigured : nil,
                                                    apple: try await appleAPI.drift.appleChecks()), csrf: csrf)
                }
            }
            group.add("GET", "/audit/webhooks") { [self] request in
                try await page(request) { csrf in try await webhooksPage(request, csrf: csrf) }
            }
            group.add("GET", "/audit/projections") { [self] request in
                try await page(request) { csrf in
                    AuditPages.projections(try await store.projectionStatuses(), chain: try? await store.chain.head(), csrf: csrf)
                }
            }
        }
    }

    // MARK: plumbing

    func html(_ status: Int, _ page: HTML, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "text/html; charset=utf-8")] + AuditAssets.securityHeaders + headers,
                     body: Data(page.rendered.utf8))
    }

    func redirect(_ location: String) -> HTTPResponse {
        HTTPResponse(status: 303, headers: [("Location", location)] + AuditAssets.securityHeaders)
    }

    func refusal(_ status: Int, _ message: String) -> HTTPResponse { html(status, AuditPages.refusal(message)) }

    /// An app token never opens a page, however it is presented.
    func refuseAppToken(_ request: HTTPRequest) -> HTTPResponse? {
        guard tokens.role(forAuthorizationHeader: request.headers["authorization"]) == .app else { return nil }
        return refusal(403, "This token has the app role. The auditor’s desk needs an auditor or admin token.")
    }

    /// The session of a request, when its cookie holds and its token is still configured with a
    /// role that may read these pages (the weaker of the cookie's and the configuration's).
    func signedIn(_ request: HTTPRequest) -> (AuditSession, csrf: String)? {
        guard let session = audit.sessions.session(from: request),
              let role = tokens.role(forTokenSHA256: session.tokenHash), min(role, session.role) >= .auditor else { return nil }
        return (session, audit.sessions.sessionToken(session))
    }

    /// A signed-in page: app tokens refused, no session → the sign-in form, errors as pages.
    func page(_ request: HTTPRequest, html isHTML: Bool = true, _ render: (String) async throws -> HTML,
              rawAnswer: (() async throws -> HTTPResponse)? = nil) async throws -> HTTPResponse {
        if let refused = refuseAppToken(request) { return refused }
        guard let (_, csrf) = signedIn(request) else {
            return redirect(AuditURL("login", query: [("next", request.path.hasPrefix(Self.auditPrefix + "/") ? request.path : nil)]).text)
        }
        do {
            if let rawAnswer { return try await rawAnswer() }
            return html(200, try await render(csrf))
        } catch {
            let answer = HTTPResponse.rendering(error)
            let message = (try? JSONDecoder().decode(ErrorBody.self, from: answer.body))?.message ?? "The page could not be made."
            let title = answer.status == 404 ? "Not found" : answer.status == 503 ? "Try again shortly" : answer.status < 500 ? "Cannot show this" : "Something went wrong"
            return html(answer.status, AuditPages.error(title: title, message: message, csrf: csrf),
                        headers: answer.headers.filter { $0.0 == "Retry-After" })
        }
    }

    func loginPage(status: Int, message: String?, next: String?) -> HTTPResponse {
        let (token, cookie) = audit.sessions.loginToken()
        return html(status, AuditPages.login(csrf: token, message: message, next: safeNext(next)), headers: [("Set-Cookie", cookie)])
    }

    /// Only a path of these pages (never another site, never `//host`).
    func safeNext(_ next: String?) -> String? {
        guard let next, next.hasPrefix(Self.auditPrefix + "/"), !next.hasPrefix("//"), !next.contains("\\"),
              !next.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F }) else { return nil }
        return next
    }

    func signIn(_ request: HTTPRequest) async throws -> HTTPResponse {
        if AuditSessions.isCrossSite(request) { return refusal(403, "This sign-in form was sent from another site, so it was refused.") }
        let form = FormBody.parse(request.body)
        guard audit.sessions.loginTokenHolds(request, form: form) else {
            return loginPage(status: 403, message: "The sign-in form expired or did not come from this page; sign in again.", next: form["next"])
        }
        let token = (form["token"] ?? "").trimmingCharacters(in: .whitespaces)
        guard !token.isEmpty, let role = tokens.role(forAuthorizationHeader: "Bearer " + token) else {
            if let refusal = failures.refuse(.auditLogin, request) {
                var page = loginPage(status: 429, message: "Too many failed sign-ins from this address; wait \(refusal.retryAfterSeconds) seconds and try again.",
                                     next: form["next"])
                page.headers.append(("Retry-After", String(refusal.retryAfterSeconds)))
                return page
            }
            return loginPage(status: 401, message: "That token is not valid here; use an auditor or admin token from LEDGER_TOKENS.", next: form["next"])
        }
        guard role >= .auditor else {
            return refusal(403, "This token has the app role. The auditor’s desk needs an auditor or admin token.")
        }
        let (_, cookie) = audit.sessions.issue(tokenHash: Digest.sha256(Array(token.utf8)), role: role)
        var response = redirect(safeNext(form["next"]) ?? AuditURL("search").text)
        response.headers.append(("Set-Cookie", audit.sessions.cookie(AuditSessions.loginCookieName, "", maxAge: 0)))
        response.headers.append(("Set-Cookie", cookie))
        return response
    }

    // MARK: pages

    func search(_ raw: String?) async throws -> AuditPages.SearchResults? {
        guard let q = raw?.trimmingCharacters(in: .whitespacesAndNewlines), !q.isEmpty else { return nil }
        guard q.utf8.count <= 256, !q.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw ServiceFailure.invalidParameter("a search is one id of at most 256 characters without control characters")
        }
        var results = AuditPages.SearchResults(query: q)
        var seen = Set<SubscriptionKey>()
        if OriginalTransactionId.isValid(q) {
            for environment in [SubscriptionKey.production, SubscriptionKey.sandbox] {
                let key = SubscriptionKey(environment: environment, originalTransactionId: q)
                if !(try await queries.events(of: key)).isEmpty, seen.insert(key).inserted {
                    results.subscriptions.append((key, "originalTransactionId"))
                }
            }
        }
        for key in try await store.projections.subscriptions(customerId: CustomerId.normalised(q)) where seen.insert(key).inserted {
            results.subscriptions.append((key, "customer \(q)"))
        }
        var cases: [String: RefundCase] = [:]
        if let c = try await store.refundCases.refundCase(id: q) { cases[c.caseId] = c }
        for c in try await store.refundCases.cases(orderId: q) { cases[c.caseId] = c }
        for c in try await refunds.export(matching: RefundCaseFilter(openId: q), limit: 50).snapshot.cases { cases[c.caseId] = c }
        for c in try await refunds.export(matching: RefundCaseFilter(originalTransactionId: q), limit: 50).snapshot.cases { cases[c.caseId] = c }
        results.cases = cases.values.sorted { RefundCaseQueriesOrder.precedes($0, $1) }
        return results
    }

    func timelinePage(_ request: HTTPRequest, csrf: String) async throws -> HTML {
        let key = try request.subscriptionKey()
        let limit = 500
        let all = try await queries.events(of: key)
        let ordered = all.sorted { ($0.event.event.signedAt ?? $0.event.recordedAt, $0.event.position)
            < ($1.event.event.signedAt ?? $1.event.recordedAt, $1.event.position) }
        let shown = Array(ordered.prefix(limit))
        let holds = try await store.chain.linkHolds(positions: shown.map(\.event.position))
        // One fold, each event's facts applied once as the page goes (the fold is order-free, so
        // this is the fold of every fact so far): not a fresh fold of the whole prefix per event.
        var fold = SubscriptionFold(key: key)
        fold.catalogPeriods = store.configuration.catalog.periods
        var folded = 0
        var entries: [TimelineEntry] = []
        for e in shown {
            // When it took effect: a renewal signed early moves the subscription at its purchaseDate.
            let own = e.facts.filter { $0.subscription == key }
            let at = max(e.event.event.signedAt ?? e.event.recordedAt, own.map(\.effectiveAt).max() ?? .min)
            let before = folded == 0 ? nil : fold.state(at: at)
            for fact in own { fold.apply(fact) }
            folded += own.count
            let after = folded == 0 ? nil : fold.state(at: at)
            let check = audit.check(e.event)
            entries.append(TimelineEntry(event: e.event, facts: e.facts, before: before, after: after, evidence: check,
                                         chainHolds: holds[e.event.position]))
        }
        return AuditPages.timeline(key, entries: entries, truncated: ordered.count > limit, csrf: csrf)
    }

    /// The events of `GET /v1/admin/webhooks/events` (the same operation and cursor), newest first.
    func webhooksPage(_ request: HTTPRequest, csrf: String) async throws -> HTML {
        var limit = 50
        if let l = request.query["limit"] {
            guard let n = Int(l), (1...200).contains(n) else { throw ServiceFailure.invalidParameter("limit must be an integer from 1 to 200") }
            limit = n
        }
        let after = try Self.webhookCursor(request.query["cursor"])
        let endpoint = request.query["endpoint"].flatMap { $0.isEmpty ? nil : $0 }
        if let endpoint, !WebhookEndpointSettings.validName(endpoint) {
            throw ServiceFailure.invalidParameter("endpoint must be an endpoint name (lowercase letters, digits and _.-)")
        }
        let status = request.query["status"].flatMap { $0.isEmpty ? nil : $0 }
        if let status, !WebhookPageModel.statuses.contains(status) {
            throw ServiceFailure.invalidParameter("status must be one of \(WebhookPageModel.statuses.joined(separator: ", "))")
        }
        let operations = WebhookOperations(store: store, endpoints: webhookEndpoints)
        let (events, next) = try await operations.page(after: after, limit: limit, positions: nil, newestFirst: true)
        let endpoints = try await webhookEndpoints.list().map(\.json)
        return AuditPages.webhooks(WebhookPageModel(endpoints: endpoints, events: events, next: next, endpoint: endpoint, status: status,
                                                    limit: limit, isFirstPage: after == nil), csrf: csrf)
    }

    func casePage(_ id: String, csrf: String) async throws -> HTML {
        guard let (found, evidence) = try await refunds.refundCase(id) else {
            throw ServiceFailure.notFound("There is no refund case “\(id.prefix(200))”. Case ids look like wechat:<pay_order_id> or apple:<transactionId>; search by order id instead.")
        }
        var json = try Representation.encoded(found)
        if case .object(var o) = json {
            o["events"] = .array(evidence.map(Representation.event))
            json = .object(o)
        }
        let checks = evidence.map { e in (e, audit.check(e.event)) }
        return AuditPages.refundCase(found, evidence: checks, json: String(decoding: json.canonicalJSON(), as: UTF8.self), csrf: csrf)
    }
}

/// The refund list's order for results gathered from several queries.
enum RefundCaseQueriesOrder {
    static func precedes(_ a: RefundCase, _ b: RefundCase) -> Bool {
        if a.openedAt != b.openedAt { return a.openedAt < b.openedAt }
        return a.caseId.utf8.lexicographicallyPrecedes(b.caseId.utf8)
    }
}

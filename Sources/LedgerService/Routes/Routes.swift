import AppStore
import Foundation
import HTTPServer
import LedgerCore
import LedgerStore
import WeChatPay

/// The HTTP surface: each route maps a request to one use case and its answer to JSON, nothing
/// more. Authentication is middleware on route groups, errors render themselves
/// (`HTTPRenderableError`), and each group states its deadline.
extension LedgerApp {
    public func makeRouter() -> Router {
        var router = Router()
        let deadline = Duration.seconds(configuration.http.requestDeadlineSeconds)
        let adminDeadline = Duration.seconds(configuration.http.adminDeadlineSeconds)
        let logFailures = logFailures

        // Open: liveness, readiness status only (no internal messages), and the senders' webhooks
        // (authenticated by their signatures, not by tokens).
        router.group(logFailures, deadline: deadline) { open in
            open.add("GET", "/healthz") { _ in .json(200, ["status": "ok"] as JSONValue) }
            open.add("GET", "/readyz") { [self] request in
                // The detail is for operators: with the admin token here, or on the admin listener.
                // A wrong token gets the open answer, and counts as a failed authentication (the
                // detail would otherwise tell a guesser which token is right, unlimited).
                guard let header = request.headers["authorization"] else { return await readyz(detailed: false) }
                let detailed = tokens.authorize(header: header, needs: .admin).isSuccess
                if !detailed, tokens.role(forAuthorizationHeader: header) == nil {
                    _ = failures.refuse(.bearer, request)
                }
                return await readyz(detailed: detailed)
            }
            addWebhookRoutes(to: &open)
            addWeChatWebhookRoutes(to: &open)
        }
        router.group(logFailures, tokens.require(.app), appendBudget.middleware, deadline: deadline) { app in
            addAppRoutes(to: &app)
            addReconciliationAppRoutes(to: &app)
            addWeChatAppRoutes(to: &app)
        }
        router.group(logFailures, tokens.require(.auditor), deadline: deadline) { auditor in
            addAuditorRoutes(to: &auditor)
            addReconciliationAuditorRoutes(to: &auditor)
            addWeChatAuditorRoutes(to: &auditor)
            addReportRoutes(to: &auditor)
        }
        router.group(logFailures, tokens.require(.admin), deadline: deadline) { admin in
            addReconciliationAdminRoutes(to: &admin)
            addWebhookAdminRoutes(to: &admin)
            addWebhookOperationRoutes(to: &admin)
            admin.add("GET", "/metrics") { [self] _ in await metricsAnswer() }
            admin.add("POST", "/v1/admin/rebuild", deadline: adminDeadline) { [self] request in try await rebuild(request) }
        }
        addAuditRoutes(to: &router)
        return router
    }

    /// The admin listener (`LEDGER_ADMIN_LISTEN`): `/metrics` and the detailed `/readyz` without a
    /// token, for a scraper on a private network; nothing else is served there.
    public func makeAdminRouter() -> Router {
        var router = Router()
        router.group(logFailures, deadline: .seconds(configuration.http.requestDeadlineSeconds)) { open in
            open.add("GET", "/metrics") { [self] _ in await metricsAnswer() }
            open.add("GET", "/readyz") { [self] _ in await readyz(detailed: true) }
            open.add("GET", "/healthz") { _ in .json(200, ["status": "ok"] as JSONValue) }
        }
        return router
    }

    /// Logs answers the ledger itself failed to give (5xx other than "retry later"), once, here.
    private var logFailures: Middleware {
        let log = self.log
        return { request, next in
            let response = await next(request)
            if response.status >= 500 && response.status != 503 {
                log.error("request failed", ["method": request.method, "path": String(request.path.prefix(200)),
                                             "status": response.status])
            }
            return response
        }
    }

    func readyz(detailed: Bool) async -> HTTPResponse {
        guard detailed else {
            let ready = await readiness.isReady()
            return .json(ready ? 200 : 503, ["status": .string(ready ? "ready" : "not_ready")])
        }
        let report = await readiness.report()
        let status = report.ready ? 200 : 503
        return .json(status, detailed ? report.detail : ["status": .string(report.ready ? "ready" : "not_ready")])
    }

    func metricsAnswer() async -> HTTPResponse {
        .text(200, await readiness.metricsText(), contentType: "text/plain; version=0.0.4; charset=utf-8")
    }

    // MARK: Webhooks

    private func addWebhookRoutes(to group: inout RouteGroup) {
        group.add("POST", "/v1/apple/notifications") { [self] request in
            try await receipt(apple.ingest(.v2, body: request.body, remoteAddress: request.remoteAddress))
        }
        // The V1 password is a credential: a wrong one counts as a failed authentication of its
        // client, and a client that failed too often has its wrong passwords answered 429. The
        // password is checked first, so Apple's right one is never throttled.
        group.add("POST", "/v1/apple/notifications/v1") { [self] request in
            do {
                return try await receipt(apple.ingest(.v1, body: request.body, remoteAddress: request.remoteAddress))
            } catch let error as AppleVerificationError where error.code == "bad_shared_secret" {
                if let refusal = failures.refuse(.appleV1, request) { throw refusal }
                throw error
            }
        }
    }

    private func receipt(_ r: NotificationReceipt) -> HTTPResponse {
        .json(200, ["status": .string(r.status), "position": .integer(r.position)])
    }

    // MARK: App backends

    private func addAppRoutes(to group: inout RouteGroup) {
        group.add("GET", "/v1/subscriptions/{originalTransactionId}") { [self] request in
            let key = try request.subscriptionKey()
            let moment = try request.moment()
            guard let state = try await queries.subscription(key, at: moment) else {
                throw ServiceFailure.notFound(
                    "no \(key.environment) subscription with originalTransactionId \(key.originalTransactionId) is known\(moment.isNow ? "" : " at that time")"
                        + (key.environment == SubscriptionKey.production ? " (Sandbox purchases: add ?environment=Sandbox)" : ""))
            }
            return .json(200, Representation.subscriptionJSON(state))
        }
        group.add("GET", "/v1/customers/{customerId}/entitlements") { [self] request in
            let customer = CustomerId.normalised(request.pathParameters["customerId"] ?? "")
            let environment = try request.environment()
            let moment = try request.moment()
            let answer = try await queries.customerAnswer(customer: customer, environment: environment, at: moment)
            return .json(200, Representation.entitlementsJSON(customerId: customer, environment: environment, asOf: moment.at, grants: answer.grants,
                                                              consentRescinded: answer.consentRescinded))
        }
        group.add("POST", "/v1/customers/{customerId}/subscriptions") { [self] request in
            let customer = try request.customerId()
            let body = try request.jsonObject(example: #"{"originalTransactionId": "1000000123456789", "environment": "Production"}"#)
            guard let otid = body["originalTransactionId"], case .string(let id) = otid, OriginalTransactionId.isValid(id) else {
                throw ServiceFailure.invalidParameter("originalTransactionId must be a string of 1–20 decimal digits")
            }
            var environment = SubscriptionKey.production
            if let raw = body["environment"] {
                guard case .string(let text) = raw, text != "PROD", let env = SubscriptionKey.environment(text) else {
                    throw ServiceFailure.invalidParameter("environment must be Production or Sandbox")
                }
                environment = env
            }
            let key = SubscriptionKey(environment: environment, originalTransactionId: id)
            return .json(200, tieAnswer(try await ties.tie(customer, to: key, requestedBy: tokens.requester(of: request))))
        }
        group.add("DELETE", "/v1/customers/{customerId}/subscriptions/{originalTransactionId}") { [self] request in
            let customer = try request.customerId()
            let key = try request.subscriptionKey()
            return .json(200, tieAnswer(try await ties.untie(customer, from: key, requestedBy: tokens.requester(of: request))))
        }
    }

    private func tieAnswer(_ r: TieReceipt) -> JSONValue {
        var answer: [String: JSONValue] = [
            "status": .string(r.tied ? "tied" : "untied"), "customerId": .string(r.customerId),
            "originalTransactionId": .string(r.key.originalTransactionId), "environment": .string(r.key.environment),
            "position": .integer(r.position),
        ]
        if let state = r.subscription { answer["subscription"] = Representation.subscription(state) }
        return .object(answer)
    }

    // MARK: Auditors

    private func addAuditorRoutes(to group: inout RouteGroup) {
        // Paged by cursor: a subscription's history (raw evidence included) can be long.
        group.add("GET", "/v1/subscriptions/{originalTransactionId}/events") { [self] request in
            let key = try request.subscriptionKey()
            let (after, limit) = try request.eventsPage()
            let (events, next) = try await queries.eventsPage(of: key, after: after, limit: limit, minPosition: try request.minPosition())
            guard !events.isEmpty || after > 0 || next != nil else {
                throw ServiceFailure.notFound("no events are stored for the \(key.environment) subscription \(key.originalTransactionId)")
            }
            return .json(200, ["originalTransactionId": .string(key.originalTransactionId), "environment": .string(key.environment),
                               "events": .array(events.map(Representation.event)), "next": .optional(next.map(String.init))])
        }
        // An export may be the whole list folded at an old position: the long deadline.
        group.add("GET", "/v1/refunds", deadline: .seconds(configuration.http.adminDeadlineSeconds)) { [self] request in
            let query = try RefundListQuery(request.query)
            let export = try await refunds.export(matching: query.filter, after: query.cursor, limit: query.limit,
                                                  asOfPosition: query.asOfPosition)
            if query.format == "csv" {
                return HTTPResponse(status: 200, headers: [("Content-Type", "text/csv; charset=utf-8"),
                                                           ("Content-Disposition", "attachment; filename=\"refunds-at-\(export.snapshot.position).csv\"")]
                                        + export.headers,
                                    body: Data(export.csv.utf8))
            }
            var answer: [String: JSONValue] = ["export": export.json, "cases": try Representation.encoded(export.snapshot.cases)]
            if query.limit != nil { answer["nextCursor"] = .optional(export.snapshot.nextCursor?.text) }
            return .json(200, .object(answer), headers: export.headers)
        }
        group.add("GET", "/v1/refunds/{caseId}") { [self] request in
            let id = request.pathParameters["caseId"] ?? ""
            guard let (found, evidence) = try await refunds.refundCase(id) else {
                throw ServiceFailure.notFound("no refund case \(id); list them with GET /v1/refunds")
            }
            guard case .object(var object) = try Representation.encoded(found) else {
                throw ServiceFailure(.defect, "internal", "the refund case could not be represented; report it with the case id")
            }
            object["events"] = .array(evidence.map(Representation.event))
            return .json(200, .object(object))
        }
    }

    // MARK: Admin

    private func rebuild(_ request: HTTPRequest) async throws -> HTTPResponse {
        let body = try request.jsonObject(allowEmpty: true, example: #"{"projection": "subscriptions", "dryRun": true}"#)
        var rebuild = RebuildRequest()
        if let p = body["projection"] {
            guard case .string(let name) = p else { throw ServiceFailure.invalidParameter("projection must be a string") }
            do { rebuild.projections = [try ProjectionName.parse(name)] } catch {
                throw ServiceFailure(.invalid, "unknown_projection", "\(error)")
            }
        }
        if let d = body["dryRun"] {
            guard case .bool(let b) = d else { throw ServiceFailure.invalidParameter("dryRun must be true or false") }
            rebuild.dryRun = b
        }
        let report = try await admin.rebuild(rebuild, requestedBy: tokens.requester(of: request))
        return .json(200, Representation.rebuild(report))
    }
}

private extension Result {
    var isSuccess: Bool { if case .success = self { true } else { false } }
}

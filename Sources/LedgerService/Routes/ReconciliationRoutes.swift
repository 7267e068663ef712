import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// The routes of reconciliation with Apple, consumption consent and legacy receipts; each group's
/// registration is one line in `makeRouter`.
extension LedgerApp {
    // MARK: app

    /// `POST /v1/customers/{customerId}/consent`, `POST /v1/apple/receipts`.
    func addReconciliationAppRoutes(to group: inout RouteGroup) {
        group.add("POST", "/v1/customers/{customerId}/consent") { [self] request in
            let customer = try request.customerId()
            let body = try request.jsonObject(example: #"{"consented": true}"#)
            guard case .bool(let consented)? = body["consented"] else {
                throw ServiceFailure.invalidParameter("consented must be true or false: whether the customer agrees that the ledger tells Apple about their use of a purchase they ask to have refunded")
            }
            let receipt = try await appleAPI.consent.record(customerId: customer, consented: consented,
                                                            requestedBy: tokens.requester(of: request))
            return .json(200, ["customerId": .string(receipt.customerId), "consented": .bool(receipt.consented),
                               "position": .integer(receipt.position), "recordedAt": .integer(receipt.recordedAt)])
        }
        group.add("POST", "/v1/apple/receipts") { [self] request in
            let body = try request.jsonObject(example: #"{"receipt": "MIIT…(the base64 app receipt)"}"#)
            guard case .string(let receipt)? = body["receipt"], !receipt.isEmpty else {
                throw ServiceFailure.invalidParameter("receipt must be the base64 app receipt (Bundle.main.appStoreReceiptURL) as a string")
            }
            let outcome = try await appleAPI.receipts.verify(receipt: receipt)
            var answer: [String: JSONValue] = [
                "status": .string(outcome.duplicate ? "duplicate" : "stored"), "position": .integer(outcome.position),
                "environment": .string(outcome.environment), "originalTransactionId": .string(outcome.originalTransactionId),
            ]
            if let state = outcome.subscription { answer["subscription"] = Representation.subscription(state) }
            return .json(200, .object(answer))
        }
    }

    // MARK: auditor

    /// `GET /v1/admin/drift`: the last stored drift report and the latest run (`?runId=` one run).
    func addReconciliationAuditorRoutes(to group: inout RouteGroup) {
        group.add("GET", "/v1/admin/drift") { [self] request in
            if let id = request.query["runId"] {
                guard let view = try await appleAPI.drift.run(id: id) else {
                    throw ServiceFailure.notFound("no reconciliation run \(id.prefix(64)); GET /v1/admin/drift without runId shows the latest")
                }
                return .json(200, ["run": view.run?.json ?? .null, "report": view.report ?? .null,
                                   "reportPosition": .optional(view.reportPosition)])
            }
            let view = try await appleAPI.drift.latest()
            // Apple's word beside the ledger's, whatever the runs did (issue 20 item 2).
            let apple = try await appleAPI.drift.appleChecks()
            return .json(200, [
                "report": view.report ?? .null, "reportPosition": .optional(view.reportPosition),
                "reportRecordedAt": .optional(view.reportRecordedAt), "latestRun": view.run?.json ?? .null,
                "apple": apple.json,
            ])
        }
    }

    // MARK: admin

    /// `POST /v1/admin/reconcile`: starts a run in the background, 202 with its id.
    func addReconciliationAdminRoutes(to group: inout RouteGroup) {
        group.add("POST", "/v1/admin/reconcile") { [self] request in
            let reconciliation = try appleAPI.requireReconciliation()
            let example = #"{"since": 1767225600000, "until": 1767312000000, "environment": "Production", "all": false, "dryRun": false}"#
            let body = try request.jsonObject(allowEmpty: true, example: example)
            func millis(_ name: String) throws -> EpochMillis? {
                guard let v = body[name] else { return nil }
                guard case .integer(let n) = v, n >= 0 else {
                    throw ServiceFailure.invalidParameter("\(name) must be epoch milliseconds (a non-negative integer), e.g. \(example)")
                }
                return n
            }
            func flag(_ name: String) throws -> Bool {
                guard let v = body[name] else { return false }
                guard case .bool(let b) = v else { throw ServiceFailure.invalidParameter("\(name) must be true or false") }
                return b
            }
            var environments: [String]?
            if let v = body["environment"] {
                guard case .string(let text) = v, text != "PROD", let env = SubscriptionKey.environment(text) else {
                    throw ServiceFailure.invalidParameter("environment must be Production or Sandbox")
                }
                environments = [env]
            }
            let now = Clock.nowMillis()
            var since = try millis("since")
            if since == nil { since = try await appleAPI.drift.defaultSince(now: now) }
            let run = try await reconciliation.start(
                ReconcileRequest(since: since!, until: try millis("until"), environments: environments, dryRun: try flag("dryRun"),
                                 all: try flag("all")),
                requestedBy: tokens.requester(of: request))
            return .json(202, ["runId": .string(run.runId), "status": .string(run.status), "dryRun": .bool(run.dryRun),
                               "environments": .array(run.environments.map(JSONValue.string)),
                               "window": .object(["since": .integer(run.since), "until": .integer(run.until)]),
                               "check": .string("/v1/admin/drift?runId=\(run.runId)")],
                         headers: [("Location", "/v1/admin/drift?runId=\(run.runId)")])
        }
    }
}

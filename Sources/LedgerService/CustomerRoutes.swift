import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// Explicit ties between a customer and a subscription, for purchases without an appAccountToken
/// (or with one that names the wrong customer). Each tie and untie is an event of the ledger's own
/// (`customer/tied`, `customer/untied`, in the subscription's stream) naming who asked; the folds
/// order them by recording time and an explicit tie wins over the token.
extension LedgerApp {
    func addCustomerRoutes(to router: inout Router) {
        router.add("POST", "/v1/customers/{customerId}/subscriptions") { [self] request in
            await authorized(request, .app) { await tie(request) }
        }
        router.add("DELETE", "/v1/customers/{customerId}/subscriptions/{originalTransactionId}") { [self] request in
            await authorized(request, .app) { await untie(request) }
        }
    }

    /// `POST /v1/customers/{customerId}/subscriptions {"originalTransactionId", "environment"?}`.
    func tie(_ request: HTTPRequest) async -> HTTPResponse {
        guard let customer = customerPath(request) else { return Self.badCustomer }
        guard let body = try? JSONSerialization.jsonObject(with: request.body) as? [String: Any] else {
            return .error(status: 400, code: "malformed",
                          message: #"the body must be a JSON object like {"originalTransactionId": "1000000123456789", "environment": "Production"}"#)
        }
        guard let otid = body["originalTransactionId"] as? String, OriginalTransactionId.isValid(otid) else {
            return .error(status: 400, code: "invalid_parameter", message: "originalTransactionId must be a string of 1–20 decimal digits")
        }
        var environment = SubscriptionKey.production
        if let raw = body["environment"] {
            guard let text = raw as? String, text != "PROD", let env = SubscriptionKey.environment(text) else {
                return .error(status: 400, code: "invalid_parameter", message: "environment must be Production or Sandbox")
            }
            environment = env
        }
        let event = CustomerTie.event(customerId: customer, key: SubscriptionKey(environment: environment, originalTransactionId: otid),
                                      tied: true, requestedBy: requesterFingerprint(request))
        return await recordTie(event, customer: customer, key: SubscriptionKey(environment: environment, originalTransactionId: otid))
    }

    /// `DELETE /v1/customers/{customerId}/subscriptions/{originalTransactionId}?environment=`: only
    /// the customer the subscription is tied to can be untied from it (404 otherwise).
    func untie(_ request: HTTPRequest) async -> HTTPResponse {
        guard let customer = customerPath(request) else { return Self.badCustomer }
        let otid: String, environment: String
        switch originalTransactionId(request) { case .success(let v): otid = v; case .failure(let r): return r.response }
        switch self.environment(request) { case .success(let v): environment = v; case .failure(let r): return r.response }
        let key = SubscriptionKey(environment: environment, originalTransactionId: otid)
        do {
            let facts = try await queries.facts(of: [key])
            guard CustomerTie.current(facts) == customer else {
                return .error(status: 404, code: "not_tied",
                              message: "the \(environment) subscription \(otid) is not tied to customer \(customer); nothing to untie")
            }
        } catch {
            return projectionFailure(error)
        }
        let event = CustomerTie.event(customerId: customer, key: key, tied: false, requestedBy: requesterFingerprint(request))
        return await recordTie(event, customer: customer, key: key)
    }

    private func recordTie(_ event: NewEvent, customer: String, key: SubscriptionKey) async -> HTTPResponse {
        let outcome: AppendOutcome
        do { outcome = try await store.append(event) } catch { return storeFailure(error, source: "customer") }
        var answer: [String: Any] = [
            "status": event.type == LedgerEventType.customerTied ? "tied" : "untied", "customerId": customer,
            "originalTransactionId": key.originalTransactionId, "environment": key.environment, "position": outcome.position,
        ]
        if let state = try? await queries.subscription(key, now: Self.nowMillis()) {
            answer["subscription"] = Representation.subscription(state)
        }
        return JSONBody.response(200, answer)
    }

    private func customerPath(_ request: HTTPRequest) -> String? {
        let raw = request.pathParameters["customerId"] ?? ""
        guard !raw.isEmpty, raw.utf8.count <= 256, !raw.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            return nil
        }
        return CustomerId.normalised(raw)
    }

    static let badCustomer = HTTPResponse.error(
        status: 400, code: "invalid_parameter", message: "customerId must be 1–256 bytes without control characters")
}

/// The events that tie and untie customers, and the tie in force among a subscription's facts.
enum CustomerTie {
    static func event(customerId: String, key: SubscriptionKey, tied: Bool, requestedBy: [String: Any]) -> NewEvent {
        let now = LedgerApp.nowMillis()
        var body: [String: Any] = [
            "environment": key.environment, "originalTransactionId": key.originalTransactionId,
            "requestedBy": requestedBy, "requestedAt": now,
        ]
        if tied { body["customerId"] = customerId } else { body["formerCustomerId"] = customerId }
        let data = JSONBody.data(body)
        return NewEvent(
            streamId: key.originalTransactionId, dedupeKey: "customer:\(UUID().uuidString.lowercased())", source: .ledger,
            type: tied ? LedgerEventType.customerTied : LedgerEventType.customerUntied, environment: key.environment,
            signedAt: now, payload: data, raw: data)
    }

    /// The customer the latest tie names (nil: none, or untied), by recording time.
    static func current(_ facts: [Fact]) -> String? {
        facts.filter { $0.kind == .customerTie }.max { ($0.recordedAt, $0.position) < ($1.recordedAt, $1.position) }?.customerId
    }
}

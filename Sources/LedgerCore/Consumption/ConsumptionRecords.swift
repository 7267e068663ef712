import Foundation

// The ledger's own events about Apple's CONSUMPTION_REQUEST and the customer's consent. Written
// by LedgerService (ConsumptionResponder, Consent), read back only through their facts
// (`LedgerFacts`), so each has exactly one shape, built and decoded here.

extension LedgerEventType {
    /// `{"customerId", "consented", "requestedBy", "requestedAt"}` in stream `ledger:consent`: the
    /// app says whether the customer agrees that the ledger shares consumption data with Apple.
    public static let consent = "customer/consent"
    /// Consumption information was sent and Apple accepted it (HTTP 202).
    public static let consumptionSent = "consumption/sent"
    /// Consumption information was sent and Apple refused it with an answer retrying cannot change.
    public static let consumptionRefused = "consumption/refused"
    /// Nothing was sent, and why (`reason`): no consent, no API credentials, Apple's 12-hour window
    /// passed, the transaction is unknown to the ledger.
    public static let consumptionNotSent = "consumption/not-sent"
    /// The drift report of a reconciliation run (`DriftReport`), in stream `ledger:reconciliation`.
    public static let reconciliationReport = "reconcile/report"
}

/// A customer's consent to sharing consumption data with Apple (Apple: send consumption
/// information only with it; `customerConsented` must be true).
public enum ConsentRecord {
    /// The payload of a `customer/consent` event.
    public static func payload(customerId: String, consented: Bool, requestedBy: JSONValue, requestedAt: EpochMillis) -> JSONValue {
        .object([
            "customerId": .string(customerId), "consented": .bool(consented),
            "requestedBy": requestedBy, "requestedAt": .integer(requestedAt),
        ])
    }

    static func fact(_ value: JSONValue, event: NewEvent) throws(FactDecodingError) -> Fact {
        guard let customer = value.text("customerId"), !customer.isEmpty else {
            throw FactDecodingError("a consent record names no customerId")
        }
        guard case .bool(let consented)? = value["consented"] else {
            throw FactDecodingError("a consent record has no boolean consented")
        }
        return Fact(subscription: nil, kind: .consent, origin: .ledger, message: event.type, signedAt: event.signedAt ?? 0,
                    customerId: CustomerId.normalised(customer), detail: Detail.json(["consented": .bool(consented)]))
    }

    /// Whether the latest consent among `facts` (by recording time, then position) that was
    /// recorded by `asOf` says yes; false when there is none.
    public static func consented(_ facts: [Fact], asOf: EpochMillis) -> Bool {
        let latest = facts.filter { $0.kind == .consent && $0.recordedAt <= asOf }
            .max { ($0.recordedAt, $0.position) < ($1.recordedAt, $1.position) }
        return latest?.details["consented"] == .bool(true)
    }
}

/// The ledger's answer to one CONSUMPTION_REQUEST (`consumption/sent`, `/refused`, `/not-sent`).
///
/// Payload: `{"environment", "originalTransactionId", "transactionId", "requestPosition",
/// "requestSignedAt", "outcome", "reason"?, "message"?, "request"? (the ConsumptionRequest as sent),
/// "answer"? ({"httpStatus", "errorCode"?, "errorMessage"?}), "basis"? (how each field was derived),
/// "attempts"}`. Its fact (`consumption_answer`) carries the subscription, the transactionId and
/// a detail with everything but the basis.
public enum ConsumptionAnswerRecord {
    public enum Outcome: String, Sendable, Codable, CaseIterable {
        case sent
        case refused
        case notSent = "not_sent"

        public var eventType: String {
            switch self {
            case .sent: LedgerEventType.consumptionSent
            case .refused: LedgerEventType.consumptionRefused
            case .notSent: LedgerEventType.consumptionNotSent
            }
        }
    }

    /// Why nothing was sent.
    public enum Reason: String, Sendable, Codable, CaseIterable {
        /// The app has not recorded the customer's consent (or withdrew it).
        case noConsent = "no_consent"
        /// The ledger cannot tell whose purchase it is, so it cannot know of a consent.
        case noCustomer = "no_customer"
        /// LEDGER_APPLE_API_* are not configured: nothing can be sent.
        case noCredentials = "no_credentials"
        /// Apple's 12-hour window passed before an attempt succeeded.
        case windowExpired = "window_expired"
        /// The ledger holds no transaction with the request's transactionId.
        case unknownTransaction = "unknown_transaction"
        /// The transaction is a family member's (`inAppOwnershipType` FAMILY_SHARED): Apple's
        /// endpoint refuses it (FamilyTransactionNotSupportedError, App Store Server API error codes).
        case familyShared = "family_shared"
    }

    public static func payload(
        key: SubscriptionKey, transactionId: String, requestPosition: Int64, requestSignedAt: EpochMillis, outcome: Outcome,
        reason: Reason?, message: String?, request: JSONValue?, answer: JSONValue?, basis: JSONValue?, attempts: Int
    ) -> JSONValue {
        var o: [String: JSONValue] = [
            "environment": .string(key.environment), "originalTransactionId": .string(key.originalTransactionId),
            "transactionId": .string(transactionId), "requestPosition": .integer(requestPosition),
            "requestSignedAt": .integer(requestSignedAt), "outcome": .string(outcome.rawValue), "attempts": .integer(Int64(attempts)),
        ]
        if let reason { o["reason"] = .string(reason.rawValue) }
        if let message { o["message"] = .string(message) }
        if let request { o["request"] = request }
        if let answer { o["answer"] = answer }
        if let basis { o["basis"] = basis }
        return .object(o)
    }

    static func fact(_ value: JSONValue, event: NewEvent) throws(FactDecodingError) -> Fact {
        guard let environment = SubscriptionKey.environment(value.text("environment")),
              let otid = value.text("originalTransactionId"), let tx = value.text("transactionId"),
              let outcome = value.text("outcome"), Outcome(rawValue: outcome) != nil else {
            throw FactDecodingError("a consumption answer names no environment, originalTransactionId, transactionId or known outcome")
        }
        var detail: [String: JSONValue?] = ["outcome": .string(outcome)]
        for field in ["reason", "message", "request", "answer", "requestPosition", "requestSignedAt", "attempts"] {
            detail[field] = value[field]
        }
        return Fact(subscription: SubscriptionKey(environment: environment, originalTransactionId: otid), kind: .consumptionAnswer,
                    origin: .ledger, message: event.type, signedAt: event.signedAt ?? 0, transactionId: tx, detail: Detail.json(detail))
    }
}

import Foundation

/// Apple RESCIND_CONSENT as the entitlements answer shows it (issue 20 item 1). The notification
/// names the customer's app transaction (`appData.signedAppTransactionInfo.appTransactionId`,
/// App Store Server Notifications 2.19); the same `appTransactionId` is on every transaction and
/// renewal info of that customer's purchases. The ledger changes no entitlement for it: it states
/// beside the grants that the customer of those purchases rescinded consent, and the app decides.
///
/// Rule: a rescission is in force at T for a customer when it was signed by T, names an
/// appTransactionId one of the customer's subscriptions' transactions carry, and is of the same
/// environment. Nothing Apple sends gives consent back, so it stays in force.
/// Example: RESCIND_CONSENT for appTransactionId 7042… signed at T₀; the customer's monthly
/// subscription's transactions carry 7042… → `GET /v1/customers/{id}/entitlements` at T ≥ T₀
/// lists `{"appTransactionId": "7042…", "rescindedAt": T₀, "position": …}` under
/// `consentRescinded`, the grants unchanged.
public struct ConsentRescission: Sendable, Hashable {
    public var appTransactionId: String
    public var rescindedAt: EpochMillis
    /// The RESCIND_CONSENT event (the evidence).
    public var position: Int64

    public init(appTransactionId: String, rescindedAt: EpochMillis, position: Int64) {
        self.appTransactionId = appTransactionId
        self.rescindedAt = rescindedAt
        self.position = position
    }

    /// The rescissions among `facts` (`consent_rescinded`) in force at `at` for a customer whose
    /// transactions carry `appTransactionIds`, in `environment`, oldest first.
    public static func inForce(_ facts: [Fact], appTransactionIds: Set<String>, environment: String, at: EpochMillis,
                               recordedBy: EpochMillis? = nil) -> [ConsentRescission] {
        facts.compactMap { f -> ConsentRescission? in
            guard f.kind == .consentRescinded, f.signedAt <= at, recordedBy.map({ f.recordedAt <= $0 }) ?? true else { return nil }
            let d = f.details
            guard let id = d["appTransactionId"]?.text, appTransactionIds.contains(id) else { return nil }
            if let env = d["environment"]?.text, env != environment { return nil }
            return ConsentRescission(appTransactionId: id, rescindedAt: f.signedAt, position: f.position)
        }.sorted { ($0.rescindedAt, $0.position) < ($1.rescindedAt, $1.position) }
    }

    /// The appTransactionIds the transactions (and renewal infos) among `facts` carry.
    public static func appTransactionIds(in facts: [Fact]) -> Set<String> {
        var ids = Set<String>()
        for f in facts {
            if let id = f.transaction?.extra("appTransactionId")?.text { ids.insert(id) }
            if let id = f.renewal?.extra("appTransactionId")?.text { ids.insert(id) }
        }
        return ids
    }

    public var json: JSONValue {
        .object(["appTransactionId": .string(appTransactionId), "rescindedAt": .integer(rescindedAt), "position": .integer(position)])
    }
}

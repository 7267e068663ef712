import Foundation
import LedgerCore

/// Reading the service's answers as the model's terms: one reading for the differential test and
/// the soak (`ledger-dev soak`), so both compare the same fields the same way.
extension DiffAnswer {
    public var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] }

    static func int64(_ v: Any?) -> EpochMillis? { (v as? NSNumber)?.int64Value }

    /// A subscription answer: its state (nil for a 404: nothing then), or why it is no answer.
    public var subscription: (state: ExpectedSubscription?, error: String?) {
        if status == 404 { return (nil, nil) }
        guard status == 200, let o = json else { return (nil, "HTTP \(status): \(text.prefix(300))") }
        let customer = (o["customer"] as? [String: Any])?["id"] as? String
        return (ExpectedSubscription(
            status: o["status"] as? String ?? "?", productId: o["productId"] as? String, expiresDate: Self.int64(o["expiresDate"]),
            autoRenewStatus: (o["autoRenewStatus"] as? NSNumber)?.intValue, customerId: customer,
            latestTransactionId: o["latestTransactionId"] as? String), nil)
    }

    /// An entitlements answer: its grants, sorted, or why it is no answer.
    public var grants: (grants: [ExpectedGrant], error: String?) {
        guard status == 200, let o = json, let list = o["entitlements"] as? [[String: Any]] else {
            return ([], "HTTP \(status): \(text.prefix(300))")
        }
        return (list.map {
            ExpectedGrant(environment: $0["environment"] as? String ?? "?", entitlement: $0["entitlement"] as? String ?? "?",
                          productId: $0["productId"] as? String ?? "?", originalTransactionId: $0["originalTransactionId"] as? String ?? "?",
                          status: $0["status"] as? String ?? "?", expiresDate: Self.int64($0["expiresDate"]))
        }.sorted(), nil)
    }
}

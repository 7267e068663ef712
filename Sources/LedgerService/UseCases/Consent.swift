import Foundation
import LedgerCore
import LedgerStore

/// What recording a consent did.
struct ConsentReceipt: Sendable {
    var customerId: String
    var consented: Bool
    var position: Int64
    var recordedAt: EpochMillis
}

/// Use case: the app records whether a customer consents to the ledger sharing consumption data
/// with Apple when they ask for a refund (Apple: send consumption information only with the
/// customer's consent). Each call is a `customer/consent` event in stream `ledger:consent` naming
/// who asked; the latest recorded is in force (`ConsentRecord.consented`), so consent can be
/// withdrawn.
struct ConsentDesk: Sendable {
    let store: Store

    func record(customerId: String, consented: Bool, requestedBy: Requester) async throws(StoreError) -> ConsentReceipt {
        let now = Clock.nowMillis()
        let customer = CustomerId.normalised(customerId)
        let data = ConsentRecord.payload(customerId: customer, consented: consented, requestedBy: requestedBy.json, requestedAt: now)
            .canonicalJSON()
        let outcome = try await store.events.append(NewEvent(
            streamId: StreamId.ledgerConsent.text, dedupeKey: DedupeKey.consent(), source: .ledger, type: LedgerEventType.consent,
            signedAt: now, payload: data, raw: data))
        return ConsentReceipt(customerId: customer, consented: consented, position: outcome.position, recordedAt: outcome.recordedAt)
    }

    /// Whether the customer's consent in force at `asOf` says yes.
    func consented(customerId: String, asOf: EpochMillis = Clock.nowMillis()) async throws(StoreError) -> Bool {
        ConsentRecord.consented(try await store.reconciliation.consentFacts(customerId: CustomerId.normalised(customerId)), asOf: asOf)
    }
}

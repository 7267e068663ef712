import AppStore
import Foundation
import LedgerCore
import LedgerStore

/// What verifying a receipt did.
struct ReceiptOutcome: Sendable {
    var position: Int64
    var duplicate: Bool
    var environment: String
    var originalTransactionId: String
    /// The subscription as it stands after the answer (nil when the read failed; the answer is
    /// stored either way).
    var subscription: SubscriptionState?
}

/// Use case: a legacy app receipt (`POST /v1/apple/receipts`, seeds 002/003) verified with Apple's
/// verifyReceipt — Production first, Sandbox on 21007, Production on 21008, the shared secret as
/// `password` — and Apple's answer stored as an `API/verify-receipt` event whose facts project
/// `latest_receipt_info` / `pending_renewal_info` like a V1 notification (`AppleAPIFacts`). An
/// unchanged answer is not stored again (its key leaves out Apple's request time).
struct ReceiptVerification: Sendable {
    let client: VerifyReceiptClient
    /// Nil when the deployment accepts no Apple app or has no shared secret (`refusal` says which).
    let answers: AppleAPIAnswerEvents?
    /// Why receipts are refused when `answers` is nil: `.notConfigured` with this code and message.
    let refusal: (code: String, message: String)
    let store: Store

    func verify(receipt: String) async throws -> ReceiptOutcome {
        guard let answers else { throw ServiceFailure(.notConfigured, refusal.code, refusal.message) }
        let answer = try await client.verify(receiptData: receipt)
        let built = try answers.verifyReceiptEvent(answer)
        let after = try await store.reconciliation.latestPositionsBesidesAPIAnswers(streams: [built.streamId])
        let event = try answers.verifyReceiptEvent(answer, after: after)
        let outcome = try await store.events.append(event)
        let key = SubscriptionKey(environment: event.environment ?? answer.environment.rawValue, originalTransactionId: event.streamId)
        let state = try? await store.projections.subscription(key, now: Clock.nowMillis())
        return ReceiptOutcome(position: outcome.position, duplicate: outcome.duplicate, environment: key.environment,
                              originalTransactionId: key.originalTransactionId, subscription: state ?? nil)
    }
}

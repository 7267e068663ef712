import AppStore
import Foundation
import HTTPServer
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
    /// Why receipts are refused when `answers` is nil: 422 with this code and message.
    let refusal: (code: String, message: String)
    let store: Store

    func verify(receipt: String) async throws -> ReceiptOutcome {
        guard let answers else { throw ServiceFailure(422, refusal.code, refusal.message) }
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

/// verifyReceipt's statuses as answers (reference/apple.md §4.3): what the app can fix is 4xx,
/// what the deployment must fix or Apple must recover from is 5xx (503 with Retry-After when
/// retrying later helps).
extension VerifyReceiptError: HTTPRenderableError {
    public var httpStatus: Int {
        switch self {
        case .invalidRequest: 400
        case .transport: 503
        case .status(let code, _, let retryable):
            switch code {
            case 21002: 400
            case 21003, 21006, 21007, 21008, 21010: 422
            case 21005, 21009: 503
            case 21100...21199: retryable ? 503 : 502
            default: 502
            }
        }
    }

    public var httpCode: String {
        switch self {
        case .invalidRequest: "invalid_receipt"
        case .transport: "apple_unavailable"
        case .status(let code, _, let retryable):
            switch code {
            case 21000: "receipt_request_refused"
            case 21002: "receipt_malformed"
            case 21003: "receipt_not_authentic"
            case 21004: "shared_secret_mismatch"
            case 21005, 21009: "apple_unavailable"
            case 21006: "receipt_expired"
            case 21007, 21008: "receipt_wrong_environment"
            case 21010: "account_not_found"
            case 21100...21199: retryable ? "apple_unavailable" : "apple_internal_error"
            default: "apple_unexpected_status"
            }
        }
    }

    public var httpMessage: String { message }

    public var httpHeaders: [(String, String)] { httpStatus == 503 ? [("Retry-After", "30")] : [] }
}

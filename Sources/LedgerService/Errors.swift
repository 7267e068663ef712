import AppStore
import Foundation
import HTTPServer
import LedgerStore
import WeChatPay

/// A use case's refusal at the HTTP edge: each kind of "no" (UseCaseFailure.swift, in the
/// domain's words) is given its status here, the one place that knows statuses.
extension ServiceFailure: HTTPRenderableError {
    var httpStatus: Int {
        switch refusal {
        case .invalid: 400
        case .notFound: 404
        case .conflict: 409
        case .notConfigured: 422
        case .defect: 500
        case .upstream: 502
        case .unavailable: 503
        case .exhausted: 429
        }
    }
    var httpCode: String { code }
    var httpMessage: String { message }
    var httpHeaders: [(String, String)] {
        switch refusal {
        case .unavailable(let seconds?), .exhausted(let seconds): [("Retry-After", String(seconds))]
        default: []
        }
    }
}

/// Reconciliation's refusals (AppleReconciliation.swift) as answers.
extension ReconciliationError: HTTPRenderableError {
    public var httpStatus: Int { rendered.httpStatus }
    public var httpCode: String { rendered.httpCode }
    public var httpMessage: String { rendered.httpMessage }
    public var httpHeaders: [(String, String)] { rendered.httpHeaders }

    private var rendered: any HTTPRenderableError {
        switch self {
        case .notConfigured: ServiceFailure(.notConfigured, "apple_api_not_configured", description)
        case .busy: ServiceFailure(.conflict, "reconciliation_running", description)
        case .invalidRequest: ServiceFailure(.invalid, "invalid_parameter", description)
        case .apple(let e): ServiceFailure(.upstream, "apple_api_error", e.message)
        case .store(let e): e
        case .cancelled: ServiceFailure(.unavailable(retryAfterSeconds: 5), "shutting_down", description)
        }
    }
}

/// The database side: unavailable or a lost race → 503 (retry later; nothing half-stored), a
/// refusal of the input → 400, anything else is a ledger defect → 500 naming no internals.
extension StoreError: HTTPRenderableError {
    public var httpStatus: Int {
        switch self {
        case .unavailable: 503
        case .invalidEvent: 400
        case .rejected, .corrupt: 500
        }
    }
    public var httpCode: String {
        switch self {
        case .unavailable: "database_unavailable"
        case .invalidEvent: "invalid_event"
        case .rejected: "storage_rejected"
        case .corrupt: "storage_corrupt"
        }
    }
    public var httpMessage: String {
        switch self {
        case .unavailable: "the ledger's database is unavailable; nothing was stored — retry later"
        case .invalidEvent(let why): "the event cannot be stored: \(why)"
        case .rejected, .corrupt:
            "the database refused the request; nothing was stored. This is a ledger defect: report it with the time of the request"
        }
    }
    public var httpHeaders: [(String, String)] { isUnavailable ? [("Retry-After", "5")] : [] }
}

extension ProjectionError: HTTPRenderableError {
    public var httpStatus: Int {
        switch self {
        case .database: 503
        case .refused: 400
        case .unknownProjection: 400
        case .rebuildInProgress: 409
        default: 500
        }
    }
    public var httpCode: String {
        switch self {
        case .database: "database_unavailable"
        case .refused: "invalid_parameter"
        case .unknownProjection: "unknown_projection"
        case .rebuildInProgress: "rebuild_in_progress"
        default: "projection_error"
        }
    }
    public var httpMessage: String {
        switch self {
        case .database: "the ledger's database is unavailable; retry later"
        case .refused(let why): "the database refused the request's values: \(why)"
        default: description
        }
    }
    public var httpHeaders: [(String, String)] { httpStatus == 503 ? [("Retry-After", "5")] : [] }
}

extension AppleVerificationError: HTTPRenderableError {
    public var httpStatus: Int { kind.httpStatus }
    public var httpCode: String { code }
    public var httpMessage: String { message }
}

extension WeChatPushError: HTTPRenderableError {
    public var httpStatus: Int { kind.httpStatus }
    public var httpCode: String { code }
    public var httpMessage: String { message }
}

/// Long reads (exports, folds at a position): the instance's limit → 429 with `Retry-After`; the
/// long statement timeout → 503; a read cancelled because its caller left → 503 (nobody reads it).
extension LongReadError: HTTPRenderableError {
    public var httpStatus: Int {
        switch self {
        case .busy: 429
        case .timedOut, .cancelled: 503
        }
    }
    public var httpCode: String {
        switch self {
        case .busy: "too_many_long_reads"
        case .timedOut: "long_read_timeout"
        case .cancelled: "cancelled"
        }
    }
    public var httpMessage: String { description }
    public var httpHeaders: [(String, String)] {
        if case .busy(_, let seconds) = self { return [("Retry-After", String(seconds))] }
        return []
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

import Foundation

/// Everything an App Store Server API call can fail with. Apple's `{"errorCode","errorMessage"}`
/// is decoded when there is one (a 401 has no body). `handling` says what the caller should do
/// (reference/appstore-server-api.md §4); messages say how to fix the cause and never contain
/// the token or the key.
public enum AppStoreServerAPIError: Error, Equatable, CustomStringConvertible {
    /// The client is not configured well enough to sign a request.
    case configuration(String)
    /// The request broke a rule the client checks before sending (e.g. a ConsumptionRequest rule).
    case invalidRequest(String)
    /// HTTP 401: Apple refused the token (no body).
    case unauthorized(endpoint: String)
    /// Any other non-success answer from Apple.
    case apple(endpoint: String, httpStatus: Int, errorCode: Int?, errorMessage: String?)
    /// Still rate limited after the allowed attempts, or told to wait longer than the policy allows.
    /// `retryAt`: when Apple said to come back (ms since the epoch), if it said.
    case rateLimited(endpoint: String, retryAt: Int64?)
    /// The request did not get an HTTP answer (connection, TLS, timeout).
    case transport(endpoint: String, reason: String)
    /// A success answer whose body is not what Apple documents.
    case unreadableAnswer(endpoint: String, reason: String)
    /// Paging did not end (the same token twice, or more pages than the bound).
    case paging(endpoint: String, reason: String)

    /// What to do about an error.
    public enum Handling: String, Sendable, Equatable {
        /// Retrying the same request will not help.
        case final
        /// Retry later, with backoff (rate limits, Apple's internal errors, the network).
        case retryable
        /// A pagination token or revision is bad or expired: start paging again from the first page.
        case restartPaging
        /// Apple knows no such transaction in this environment (4040010): ask the other environment.
        case otherEnvironment
        /// The request itself must change (a date window, a filter combination, an id kind).
        case fixRequest
        /// Get Test Notification Status: not sent yet (4040008); ask again later.
        case notReady
    }

    /// Apple's `errorCode`, when the answer carried one (429 without a body counts as 4290000).
    public var errorCode: Int? {
        switch self {
        case .apple(_, _, let code, _): code
        case .rateLimited: 4_290_000
        default: nil
        }
    }

    public var httpStatus: Int? {
        switch self {
        case .apple(_, let status, _, _): status
        case .unauthorized: 401
        case .rateLimited: 429
        default: nil
        }
    }

    public var handling: Handling {
        switch self {
        case .configuration, .invalidRequest, .unauthorized, .unreadableAnswer, .paging: return .final
        case .rateLimited, .transport: return .retryable
        case .apple(_, let status, let code, _):
            if let code, let h = Self.byCode[code] { return h }
            if status == 429 || status >= 500 { return .retryable }
            if status == 400 { return .fixRequest }
            return .final
        }
    }

    public var isRetryable: Bool { handling == .retryable }

    /// reference/appstore-server-api.md §4, "Codes worth handling".
    static let byCode: [Int: Handling] = [
        4_000_005: .restartPaging, 4_000_014: .restartPaging, 4_000_017: .restartPaging,
        4_000_006: .final,
        4_000_012: .fixRequest, 4_000_013: .fixRequest, 4_000_019: .fixRequest, 4_000_187: .fixRequest,
        4_040_001: .final, 4_040_003: .final, 4_040_005: .final,
        4_040_002: .retryable, 4_040_004: .retryable, 4_040_006: .retryable,
        4_040_007: .final, 4_040_008: .notReady, 4_040_010: .otherEnvironment,
        4_290_000: .retryable, 5_000_000: .retryable, 5_000_001: .retryable,
    ]

    /// What a code means and what to do, for the codes the ledger meets.
    static func advice(_ code: Int) -> String? {
        switch code {
        case 4_000_005: "the revision is invalid; restart transaction history paging without one"
        case 4_000_006: "the transaction id is not one Apple issued; check the id (it must be a transactionId, originalTransactionId or appTransactionId)"
        case 4_000_012: "startDate is too far back (Apple keeps 180 days of notification history in Production, 30 in Sandbox); move the window"
        case 4_000_013: "startDate is after endDate; give a window whose start comes first"
        case 4_000_014, 4_000_017: "the pagination token is invalid or expired; restart paging from the first page"
        case 4_000_019: "transactionId and notificationType cannot be combined in a notification history request; drop one"
        case 4_000_035: "customerConsented must be true; send consumption information only with the customer's consent"
        case 4_000_187: "the id is not an originalTransactionId; pass the subscription's originalTransactionId"
        case 4_040_001, 4_040_002: "Apple knows no such account\(code == 4_040_002 ? " yet; retry later" : "")"
        case 4_040_003, 4_040_004: "Apple knows no such app\(code == 4_040_004 ? " yet; retry later" : ""); check LEDGER_APPLE_API_BUNDLE_ID"
        case 4_040_005, 4_040_006: "Apple knows no such original transaction\(code == 4_040_006 ? " yet; retry later" : "")"
        case 4_040_007: "no App Store Server Notifications URL is configured for this environment; set it in App Store Connect → App Information"
        case 4_040_008: "the test notification has not been sent yet; ask again later"
        case 4_040_010: "no such transaction in this environment; ask the other environment (Sandbox ↔ Production)"
        case 4_290_000: "rate limited; wait until Retry-After"
        case 5_000_000, 5_000_001: "Apple had an internal error; retry later"
        default: nil
        }
    }

    public var message: String {
        switch self {
        case .configuration(let why):
            return "the App Store Server API client is not usable: \(why)"
        case .invalidRequest(let why):
            return "the request was not sent: \(why)"
        case .unauthorized(let endpoint):
            return "\(endpoint): Apple refused the bearer token (401). Check LEDGER_APPLE_API_ISSUER_ID, LEDGER_APPLE_API_KEY_ID, that LEDGER_APPLE_API_PRIVATE_KEY is that In-App Purchase key, that LEDGER_APPLE_API_BUNDLE_ID is the app's bundle id and the clock is right; Production also answers 401 until the app has had a production release."
        case .apple(let endpoint, let status, let code, let text):
            var s = "\(endpoint): Apple answered HTTP \(status)"
            if let code { s += " errorCode \(code)" }
            if let text, !text.isEmpty { s += " (\(text.prefix(300)))" }
            if let code, let advice = Self.advice(code) { s += ": \(advice)" } else if status >= 500 { s += ": Apple's side failed; retry later" }
            return s
        case .rateLimited(let endpoint, let retryAt):
            return "\(endpoint): rate limited by Apple (429)" + (retryAt.map { "; retry after \($0) ms since the epoch" } ?? "; retry later")
                + ". Apple's limits are per app and endpoint, enforced per hour: spread the work out."
        case .transport(let endpoint, let reason):
            return "\(endpoint): no answer from Apple (\(reason)); check the network path to the API host (or LEDGER_APPLE_API_BASE_URL) and retry"
        case .unreadableAnswer(let endpoint, let reason):
            return "\(endpoint): Apple's answer could not be read: \(reason)"
        case .paging(let endpoint, let reason):
            return "\(endpoint): paging stopped: \(reason)"
        }
    }

    public var description: String { message }
}

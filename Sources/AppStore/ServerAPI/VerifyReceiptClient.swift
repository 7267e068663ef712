import Foundation
import LedgerCore
import LedgerMetrics
import Outbound

/// Where verifyReceipt is and what to send it (reference/apple.md §4.3).
public struct VerifyReceiptConfiguration: Sendable {
    public static let productionURL = URL(string: "https://buy.itunes.apple.com/verifyReceipt")!
    public static let sandboxURL = URL(string: "https://sandbox.itunes.apple.com/verifyReceipt")!

    public var productionURL: URL
    public var sandboxURL: URL
    /// The app-specific shared secret (`password`); Apple requires it for receipts with
    /// auto-renewable subscriptions. Never logged, never echoed in errors.
    public var sharedSecret: String?
    /// true: only the latest renewal of each subscription; false (default): every transaction, so
    /// refunds of earlier periods are seen.
    public var excludeOldTransactions = false
    /// Where the first request goes. Apple's advice is Production first (a Sandbox receipt then
    /// answers 21007 and is re-sent to Sandbox); a Sandbox-only deployment may start there (a
    /// Production receipt then answers 21008 and is re-sent to Production).
    public var startWith = AppStoreEnvironment.production
    public var requestTimeoutSeconds: Double = 30
    public var retry = RetryPolicy()
    /// Attempts for Apple's "temporary" statuses (21002 may be temporary, 21005, 21009, 211xx
    /// with is-retryable) — on top of the HTTP-level retries of each request.
    public var maxStatusAttempts = 3
    /// The URLs may be plain http to a loopback fake (tests; `LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK`).
    public var allowsPlainHTTPLoopback = false

    public init(productionURL: URL = productionURL, sandboxURL: URL = sandboxURL, sharedSecret: String?, allowsPlainHTTPLoopback: Bool = false) {
        self.productionURL = productionURL
        self.sandboxURL = sandboxURL
        self.sharedSecret = sharedSecret
        self.allowsPlainHTTPLoopback = allowsPlainHTTPLoopback
    }

    /// Both URLs under one base (tests, proxies): `<base>/production/verifyReceipt` and
    /// `<base>/sandbox/verifyReceipt`.
    public init(baseURL: URL, sharedSecret: String?, allowsPlainHTTPLoopback: Bool = false) {
        self.init(productionURL: baseURL.appendingPathComponent("production/verifyReceipt"),
                  sandboxURL: baseURL.appendingPathComponent("sandbox/verifyReceipt"), sharedSecret: sharedSecret,
                  allowsPlainHTTPLoopback: allowsPlainHTTPLoopback)
    }

    /// The outbound target `verify_receipt` (absolute URLs: the two endpoints are on two hosts).
    public var outboundTarget: OutboundTarget {
        OutboundTarget(name: "verify_receipt", baseURL: nil, setting: "LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL",
                       allowsPlainHTTPLoopback: allowsPlainHTTPLoopback,
                       timeout: .milliseconds(Int64(max(requestTimeoutSeconds, 0.001) * 1000)))
    }

    /// Refuses URLs the client would refuse (plain http but to an allowed loopback fake).
    public func validate() throws(OutboundError) {
        try outboundTarget.check(productionURL)
        try outboundTarget.check(sandboxURL)
    }
}

/// A verifyReceipt answer with status 0.
public struct VerifyReceiptAnswer: Sendable, Equatable {
    /// Which endpoint answered (after any 21007/21008 redirect).
    public var environment: AppStoreEnvironment
    /// Apple's answer as received.
    public var body: Data
}

/// Why a receipt could not be verified; each status says what to do (reference/apple.md §4.3).
public enum VerifyReceiptError: Error, Equatable, CustomStringConvertible {
    /// A non-zero `status` Apple answered (after redirects and retries).
    case status(Int, environment: AppStoreEnvironment, retryable: Bool)
    /// No usable HTTP answer (network, HTTP error, unreadable JSON).
    case transport(String)
    case invalidRequest(String)

    public var statusCode: Int? { if case .status(let s, _, _) = self { s } else { nil } }

    /// Worth trying again later (Apple said the failure is temporary, or the network failed).
    public var isRetryable: Bool {
        switch self {
        case .status(_, _, let r): r
        case .transport: true
        case .invalidRequest: false
        }
    }

    public var message: String {
        switch self {
        case .invalidRequest(let why): return why
        case .transport(let why): return "verifyReceipt could not be reached: \(why); retry later"
        case .status(let code, let env, _):
            let what: String = switch code {
            case 21000: "Apple could not read the request (21000): the body must be a JSON POST with receipt-data; this is a bug in the caller"
            case 21001: "Apple no longer sends this status (21001); retry, and report it if it persists"
            case 21002: "the receipt data is malformed (21002): send the base64 app receipt exactly as the app read it from Bundle.main.appStoreReceiptURL (Apple also uses 21002 for temporary issues; it was retried)"
            case 21003: "the receipt could not be authenticated (21003): it is not a genuine App Store receipt"
            case 21004: "the shared secret does not match (21004): set LEDGER_APPLE_SHARED_SECRET to the app-specific (or primary) shared secret from App Store Connect"
            case 21005: "the receipt server is temporarily unavailable (21005); retry later"
            case 21006: "the receipt is valid but its subscription has expired (21006, iOS 6-style receipts only); ask the app for a current receipt"
            case 21007: "a Sandbox receipt was sent to Production (21007) and the Sandbox retry did not settle it"
            case 21008: "a Production receipt was sent to Sandbox (21008) and the Production retry did not settle it"
            case 21009: "Apple had an internal data access error (21009); retry later"
            case 21010: "the account was not found or deleted (21010): the receipt cannot be verified any more"
            case 21100...21199: "Apple had an internal error (\(code)); it was retried if Apple said it may be"
            default: "Apple answered status \(code), which is not documented"
            }
            return "verifyReceipt (\(env.rawValue)): \(what)"
        }
    }

    public var description: String { message }
}

/// The legacy verifyReceipt endpoint: Production first (`startWith`), Sandbox on 21007,
/// Production on 21008 (at most one switch, so two endpoints cannot bounce a receipt forever), the shared secret as `password`, Apple's temporary statuses retried
/// with backoff. Apple deprecated verifyReceipt; it is kept for apps that still send receipts.
public struct VerifyReceiptClient: Sendable {
    public let configuration: VerifyReceiptConfiguration
    /// The one outbound client, target `verify_receipt` (the body carries the shared secret:
    /// https only, redirects never followed).
    let http: OutboundClient

    public init(configuration: VerifyReceiptConfiguration, metrics: MetricsRegistry? = nil) {
        self.configuration = configuration
        http = OutboundClient(target: configuration.outboundTarget, metrics: metrics, clock: configuration.retry.now)
    }

    /// `receiptData`: the base64 app receipt.
    public func verify(receiptData: String) async throws(VerifyReceiptError) -> VerifyReceiptAnswer {
        // Line breaks (base64 as some clients wrap it) are dropped; anything else must be base64.
        let trimmed = String(receiptData.unicodeScalars.filter { !" \r\n\t".unicodeScalars.contains($0) })
        guard !trimmed.isEmpty else { throw .invalidRequest("the receipt is empty; send the base64 app receipt") }
        guard let decoded = Data(base64Encoded: trimmed), !decoded.isEmpty else {
            throw .invalidRequest("the receipt is not standard base64; send the app receipt (Bundle.main.appStoreReceiptURL) base64-encoded")
        }
        var request: [String: Any] = ["receipt-data": trimmed, "exclude-old-transactions": configuration.excludeOldTransactions]
        if let secret = configuration.sharedSecret, !secret.isEmpty { request["password"] = secret }
        let body: Data
        do { body = try JSONSerialization.data(withJSONObject: request, options: [.sortedKeys, .withoutEscapingSlashes]) } catch {
            throw .invalidRequest("the request could not be encoded")
        }
        var environment = configuration.startWith
        var switched = false
        var statusAttempts = 0
        while true {
            let (status, retryable, answer) = try await post(body, to: environment)
            switch status {
            case 0:
                return VerifyReceiptAnswer(environment: environment, body: answer)
            case 21007 where environment == .production && !switched, 21008 where environment == .sandbox && !switched:
                environment = environment == .production ? .sandbox : .production
                switched = true
                continue
            default:
                statusAttempts += 1
                let temporary = [21002, 21005, 21009].contains(status) || ((21100...21199).contains(status) && retryable)
                guard temporary, statusAttempts < configuration.maxStatusAttempts else {
                    throw .status(status, environment: environment, retryable: temporary)
                }
                do { try await configuration.retry.sleep(configuration.retry.backoff(afterAttempt: statusAttempts)) } catch {
                    throw .transport("cancelled while waiting to retry")
                }
            }
        }
    }

    /// One POST with HTTP-level retries (429, 5xx, network); returns status, is-retryable and the body.
    func post(_ body: Data, to environment: AppStoreEnvironment) async throws(VerifyReceiptError) -> (Int, Bool, Data) {
        let url = environment == .production ? configuration.productionURL : configuration.sandboxURL
        let policy = configuration.retry
        var attempt = 0
        while true {
            attempt += 1
            let request = OutboundRequest(
                method: "POST", path: url.absoluteString, headers: [("Content-Type", "application/json"), ("Accept", "application/json")],
                body: body)
            var failure: String
            var retryAt: Int64?
            do {
                let response = try await http.send(request)
                if response.status == 200 {
                    // A tree, not JSONSerialization: on Linux an NSNumber 0 also reads as a Bool.
                    guard let object = (try? JSONDecoder().decode(JSONValue.self, from: response.body))?.objectValue,
                          case .integer(let status)? = object["status"] else {
                        throw VerifyReceiptError.transport("the answer is not JSON with a numeric status")
                    }
                    let retryable: Bool = switch object["is-retryable"] {
                    case .bool(let b)?: b
                    case .integer(let n)?: n == 1
                    case .string(let s)?: s == "1" || s == "true"
                    default: false
                    }
                    return (Int(clamping: status), retryable, response.body)
                }
                failure = "HTTP \(response.status)"
                guard response.status == 429 || response.status >= 500 else { throw VerifyReceiptError.transport(failure) }
                retryAt = response.retryAt
            } catch let e as VerifyReceiptError {
                throw e
            } catch let e as OutboundError {
                guard e.isRetryable else { throw VerifyReceiptError.transport(e.message) }
                failure = e.reason
            } catch {
                failure = "\(error)"
            }
            guard attempt < policy.maxAttempts else { throw .transport(failure) }
            var wait = policy.backoff(afterAttempt: attempt)
            if let retryAt { wait = .milliseconds(max(0, retryAt - policy.now())) }
            guard wait <= policy.maxRetryAfter else { throw .transport("\(failure); Apple asked to retry after \(retryAt ?? 0) ms since the epoch") }
            do { try await policy.sleep(wait) } catch { throw .transport("cancelled while waiting to retry") }
        }
    }
}

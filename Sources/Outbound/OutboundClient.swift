import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LedgerMetrics
import Synchronization

/// One outbound HTTP request. `path` is under the target's base URL (already percent-encoded, as
/// `/inApps/v1/history/123`), or an absolute URL for a target without a base (webhooks); `query`
/// is encoded here, every byte but the unreserved ones escaped (a token's `+`, `/`, `=` survive).
public struct OutboundRequest: Sendable {
    public var method: String
    public var path: String
    public var query: [(String, String)]
    public var headers: [(String, String)]
    public var body: Data?

    public init(method: String, path: String, query: [(String, String)] = [], headers: [(String, String)] = [], body: Data? = nil) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }
}

/// An HTTP answer, whatever its status (a 3xx is an answer too: redirects are never followed).
public struct OutboundResponse: Sendable, Equatable {
    public var status: Int
    /// Header fields, names lowercased.
    public var headers: [String: String]
    public var body: Data
    /// `Retry-After`, as an absolute time (ms since the epoch), when the answer carried a readable one.
    public var retryAt: Int64?

    public init(status: Int, headers: [String: String] = [:], body: Data = Data(), retryAt: Int64? = nil) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        self.body = body
        self.retryAt = retryAt
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
    public var isSuccess: Bool { (200..<300).contains(status) }
    public var isRedirect: Bool { (300..<400).contains(status) }
}

/// The one outbound HTTP client of the ledger: every call to Apple (App Store Server API,
/// verifyReceipt), WeChat and webhook receivers goes through one of these, one per
/// `OutboundTarget`. What it guarantees, for every target alike:
/// - **https only**: plain `http://` is refused before anything is sent, unless the target allows
///   plain http and the host is loopback (a test fake; `LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK`).
/// - **Redirects are never followed** (requests carry bearer tokens, signatures in the query, the
///   shared secret in the body; a 3xx is handed back as the answer for the caller to judge).
///   Never following, even for a credential-free GET, keeps one rule with no exceptions.
/// - Typed timeouts (no progress for `connectTimeout`; the whole exchange past `timeout`), answers
///   capped at `maxResponseBytes` while they stream in, `Retry-After` parsed into `retryAt`.
/// - Metrics (when given a registry): `ledger_outbound_requests_total{target,outcome}` (outcome
///   `2xx`…`5xx`, `timeout`, `unreachable`, `too_large`, `refused`, `cancelled`) and
///   `ledger_outbound_request_duration_seconds{target}`.
/// - No cookies, no cache, no credentials from the environment; errors carry no URL path or query.
/// Retries are the caller's: each API knows what is safe to repeat.
///
/// FoundationNetworking's URLSession (libcurl and OpenSSL underneath on Linux) does the HTTP and
/// TLS, with the system's CA store; one session per client keeps connections alive between calls.
public final class OutboundClient: Sendable, CustomStringConvertible {
    public let target: OutboundTarget
    let metrics: MetricsRegistry?
    let clock: @Sendable () -> Int64
    private let session: URLSession
    private let exchanges: Exchanges

    public static let requestsFamily = "ledger_outbound_requests_total"
    public static let durationFamily = "ledger_outbound_request_duration_seconds"

    public init(target: OutboundTarget, metrics: MetricsRegistry? = nil,
                clock: @escaping @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }) {
        self.target = target
        self.metrics = metrics
        self.clock = clock
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCache = nil
        configuration.urlCredentialStorage = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.timeoutIntervalForRequest = Self.seconds(target.connectTimeout)
        configuration.timeoutIntervalForResource = Self.seconds(target.timeout)
        exchanges = Exchanges(limit: target.maxResponseBytes)
        session = URLSession(configuration: configuration, delegate: exchanges, delegateQueue: nil)
        if let metrics { Self.describe(metrics) }
    }

    deinit { session.finishTasksAndInvalidate() }

    /// Describes the outbound families in `registry` (done by every client; idempotent).
    public static func describe(_ registry: MetricsRegistry) {
        registry.describe(requestsFamily, type: .counter, help: "Outbound HTTP requests by target and outcome (status class, timeout, unreachable, too_large, refused, cancelled)")
        registry.describe(durationFamily, type: .histogram, help: "Outbound HTTP request duration by target, in seconds (answers and failures alike)")
    }

    public var description: String { "OutboundClient(\(target))" }

    /// The URL a request goes to (checked: https, or plain http to an allowed loopback).
    public func url(for request: OutboundRequest) throws(OutboundError) -> URL {
        let invalid = OutboundError.invalidURL(target: target.name, setting: target.setting, reason: "the request does not form a URL")
        let encodedQuery = request.query.map { "\(Self.escape($0.0))=\(Self.escape($0.1))" }.joined(separator: "&")
        var components: URLComponents
        if let base = target.baseURL {
            try target.check(base)
            guard !request.path.contains("://") else {
                throw .invalidURL(target: target.name, setting: target.setting, reason: "a request names an absolute URL but the target has a base URL")
            }
            guard let c = URLComponents(url: base, resolvingAgainstBaseURL: false) else { throw invalid }
            components = c
            var prefix = c.percentEncodedPath
            while prefix.hasSuffix("/") { prefix.removeLast() }
            let path = request.path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
            components.percentEncodedPath = prefix + (path[0].hasPrefix("/") ? "" : "/") + path[0]
            components.percentEncodedQuery = path.count > 1 ? String(path[1]) : nil
        } else {
            guard let c = URLComponents(string: request.path) else { throw invalid }
            components = c
        }
        if !encodedQuery.isEmpty {
            components.percentEncodedQuery = components.percentEncodedQuery.map { $0 + "&" + encodedQuery } ?? encodedQuery
        }
        guard let url = components.url else { throw invalid }
        try target.check(url)
        return url
    }

    /// Sends `request` once. Every HTTP answer is returned (2xx…5xx and 3xx alike); no answer is
    /// an `OutboundError`.
    public func send(_ request: OutboundRequest) async throws(OutboundError) -> OutboundResponse {
        let started = ContinuousClock.now
        let result: Result<OutboundResponse, OutboundError>
        do {
            let url = try url(for: request)
            result = .success(try await exchange(request, url))
        } catch {
            result = .failure(error)
        }
        if let metrics {
            let outcome: String = switch result {
            case .success(let r): "\(min(max(r.status / 100, 1), 5))xx"
            case .failure(let e): e.outcome
            }
            metrics.increment(Self.requestsFamily, ["target": target.name, "outcome": outcome])
            metrics.observe(Self.durationFamily, ["target": target.name], value: Self.seconds(ContinuousClock.now - started))
        }
        return try result.get()
    }

    private func exchange(_ request: OutboundRequest, _ url: URL) async throws(OutboundError) -> OutboundResponse {
        var r = URLRequest(url: url)
        r.httpMethod = request.method
        r.timeoutInterval = Self.seconds(target.connectTimeout)
        r.httpShouldHandleCookies = false
        for (name, value) in request.headers { r.addValue(value, forHTTPHeaderField: name) }
        r.httpBody = request.body
        let task = session.dataTask(with: r)
        let id = task.taskIdentifier
        let target = self.target
        let outcome: Result<(HTTPURLResponse, Data), OutboundError> = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<(HTTPURLResponse, Data), OutboundError>, Never>) in
                exchanges.begin(id, continuation)
                // Cancelled before it began (onCancel then ran first and found no entry): finish
                // it here and never start the task — a URLSession task cancelled before `resume`
                // may never report completion, which once left a shutdown waiting for ever.
                if Task.isCancelled {
                    exchanges.fail(id, .cancelled(target: target.name))
                    task.cancel()
                    return
                }
                // The overall deadline, whatever libcurl's progress timer thinks. After the
                // exchange finished it finds no entry and cancels a finished task: a no-op.
                DispatchQueue.global().asyncAfter(deadline: .now() + Self.seconds(target.timeout)) { [exchanges] in
                    exchanges.fail(id, .timedOut(target: target.name, phase: .overall, after: target.timeout))
                    task.cancel()
                }
                task.resume()
            }
        } onCancel: { [exchanges] in
            exchanges.fail(id, .cancelled(target: target.name))
            task.cancel()
        }
        let (http, data): (HTTPURLResponse, Data)
        switch outcome {
        case .success(let v): (http, data) = v
        case .failure(let e): throw Self.named(e, target)
        }
        var headers: [String: String] = [:]
        for (k, v) in http.allHeaderFields {
            if let name = k as? String { headers[name.lowercased()] = "\(v)" }
        }
        let retryAt = RetryAfter.absoluteMillis(headers["retry-after"], now: clock())
        return OutboundResponse(status: http.statusCode, headers: headers, body: data, retryAt: retryAt)
    }

    private static func named(_ e: OutboundError, _ target: OutboundTarget) -> OutboundError {
        switch e {
        case .unreachable(_, let reason): .unreachable(target: target.name, reason: reason)
        case .timedOut(_, let phase, _): .timedOut(target: target.name, phase: phase, after: phase == .overall ? target.timeout : target.connectTimeout)
        case .responseTooLarge: .responseTooLarge(target: target.name, limit: target.maxResponseBytes)
        case .cancelled: .cancelled(target: target.name)
        default: e
        }
    }

    /// Only unreserved characters stay as they are (RFC 3986 §2.3).
    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    public static func escape(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: unreserved) ?? s
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    static func describe(_ code: URLError.Code) -> String {
        switch code {
        case .cannotConnectToHost: "connection refused"
        case .cannotFindHost, .dnsLookupFailed: "host not found"
        case .networkConnectionLost: "connection lost"
        case .notConnectedToInternet: "no network"
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
             .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected:
            "TLS failed"
        case .badServerResponse: "bad server response"
        default: "network error \(code.rawValue)"
        }
    }
}

/// The session's delegate: one entry per task in flight, each finished exactly once (the first of
/// completion, size cap, deadline or cancellation wins).
final class Exchanges: NSObject, URLSessionDataDelegate, Sendable {
    typealias Outcome = Result<(HTTPURLResponse, Data), OutboundError>

    struct Entry {
        var continuation: CheckedContinuation<Outcome, Never>
        var response: HTTPURLResponse?
        var data = Data()
        var failure: OutboundError?
    }

    let limit: Int
    private let entries = Mutex<[Int: Entry]>([:])

    init(limit: Int) { self.limit = limit }

    func begin(_ id: Int, _ continuation: CheckedContinuation<Outcome, Never>) {
        entries.withLock { $0[id] = Entry(continuation: continuation) }
    }

    /// Finishes the exchange now with `error` (a deadline or a cancellation): the caller does not
    /// wait for URLSession to report the cancelled task, which it may never do for a task it had
    /// not started; a completion arriving later finds no entry.
    func fail(_ id: Int, _ error: OutboundError) {
        let entry = entries.withLock { e -> Entry? in
            guard let entry = e[id] else { return nil }
            e[id] = nil
            return entry
        }
        guard let entry else { return }
        entry.continuation.resume(returning: .failure(entry.failure ?? error))
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        let tooLarge = response.expectedContentLength > Int64(limit)
        entries.withLock { e in
            e[dataTask.taskIdentifier]?.response = response as? HTTPURLResponse
            if tooLarge, e[dataTask.taskIdentifier]?.failure == nil {
                e[dataTask.taskIdentifier]?.failure = .responseTooLarge(target: "", limit: limit)
            }
        }
        completionHandler(tooLarge ? .cancel : .allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let over = entries.withLock { e -> Bool in
            guard var entry = e[dataTask.taskIdentifier], entry.failure == nil else { return false }
            if entry.data.count + data.count > limit {
                entry.failure = .responseTooLarge(target: "", limit: limit)
                entry.data = Data()
                e[dataTask.taskIdentifier] = entry
                return true
            }
            entry.data.append(data)
            e[dataTask.taskIdentifier] = entry
            return false
        }
        if over { dataTask.cancel() }
    }

    /// Never follow: the 3xx itself is completed as the answer.
    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let entry = entries.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        if let failure = entry.failure { return entry.continuation.resume(returning: .failure(failure)) }
        if let error {
            let code = (error as? URLError)?.code ?? URLError.Code(rawValue: (error as NSError).code) ?? .unknown
            let failure: OutboundError = switch code {
            case .timedOut: .timedOut(target: "", phase: .connect, after: .zero)
            case .cancelled: .cancelled(target: "")
            default: .unreachable(target: "", reason: OutboundClient.describe(code))
            }
            return entry.continuation.resume(returning: .failure(failure))
        }
        guard let http = entry.response ?? (task.response as? HTTPURLResponse) else {
            return entry.continuation.resume(returning: .failure(.unreachable(target: "", reason: "the answer is not HTTP")))
        }
        entry.continuation.resume(returning: .success((http, entry.data)))
    }
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One outbound HTTP request to Apple (App Store Server API or verifyReceipt).
public struct AppleHTTPRequest: Sendable {
    public var method: String
    public var url: URL
    public var headers: [(String, String)]
    public var body: Data?
    public var timeoutSeconds: Double

    public init(method: String, url: URL, headers: [(String, String)] = [], body: Data? = nil, timeoutSeconds: Double = 30) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutSeconds = timeoutSeconds
    }
}

/// Apple's answer: status, header fields (names lowercased) and the exact body bytes.
public struct AppleHTTPResponse: Sendable, Equatable {
    public var status: Int
    public var headers: [String: String]
    public var body: Data

    public init(status: Int, headers: [String: String] = [:], body: Data = Data()) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        self.body = body
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// The request got no HTTP answer (connection refused, TLS, timeout, cancelled).
public struct AppleTransportError: Error, Equatable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// Sends requests to Apple. The default is `URLSessionAppleTransport`; tests may substitute one.
public protocol AppleHTTPTransport: Sendable {
    func send(_ request: AppleHTTPRequest) async throws(AppleTransportError) -> AppleHTTPResponse
}

/// FoundationNetworking's URLSession (libcurl underneath on Linux, OpenSSL for TLS): HTTPS with
/// the system's CA store, keep-alive between requests of one transport, no cookies or cache
/// (ephemeral). It served every need measured here (TLS, PUT/POST bodies, headers, timeouts), so
/// no libcurl system-library target is needed.
public final class URLSessionAppleTransport: AppleHTTPTransport {
    private let session: URLSession

    public init() {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        session = URLSession(configuration: configuration)
    }

    deinit { session.finishTasksAndInvalidate() }

    public func send(_ request: AppleHTTPRequest) async throws(AppleTransportError) -> AppleHTTPResponse {
        var r = URLRequest(url: request.url)
        r.httpMethod = request.method
        r.timeoutInterval = request.timeoutSeconds
        for (name, value) in request.headers { r.addValue(value, forHTTPHeaderField: name) }
        r.httpBody = request.body
        let data: Data, response: URLResponse
        do { (data, response) = try await session.data(for: r) } catch {
            if let u = error as? URLError {
                throw AppleTransportError("\(Self.describe(u.code)) (\(u.code.rawValue))")
            }
            throw AppleTransportError("\(error)")
        }
        guard let http = response as? HTTPURLResponse else { throw AppleTransportError("the answer is not HTTP") }
        var headers: [String: String] = [:]
        for (k, v) in http.allHeaderFields {
            if let name = k as? String { headers[name.lowercased()] = "\(v)" }
        }
        return AppleHTTPResponse(status: http.statusCode, headers: headers, body: data)
    }

    static func describe(_ code: URLError.Code) -> String {
        switch code {
        case .timedOut: "timed out"
        case .cannotConnectToHost: "connection refused"
        case .cannotFindHost, .dnsLookupFailed: "host not found"
        case .networkConnectionLost: "connection lost"
        case .notConnectedToInternet: "no network"
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
             .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected:
            "TLS failed"
        case .cancelled: "cancelled"
        case .badServerResponse: "bad server response"
        default: "network error"
        }
    }
}

/// `Retry-After` as Apple sends it on 429: an absolute UNIX time in **milliseconds**
/// (reference/appstore-server-api.md §4), also RFC 9110's delay-seconds and HTTP-date. Returns the
/// absolute time (ms); nil when absent or unreadable.
public enum RetryAfter {
    public static func absoluteMillis(_ value: String?, now: Int64) -> Int64? {
        guard let text = value?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let n = Int64(text), n >= 0 {
            // ≥ 10^12 is a time in ms (after 2001); ≥ 10^9 a time in seconds (a delay of 31 years
            // is no delay anyone means); smaller numbers are RFC delay-seconds.
            if n >= 1_000_000_000_000 { return n }
            if n >= 1_000_000_000 { return n.multipliedReportingOverflow(by: 1000).overflow ? nil : n * 1000 }
            return now + n * 1000
        }
        if let d = Double(text), d.isFinite, d >= 0, d < 1e9 { return now + Int64(d * 1000) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        if let date = formatter.date(from: text) { return Int64(date.timeIntervalSince1970 * 1000) }
        return nil
    }
}

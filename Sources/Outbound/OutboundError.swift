import Foundation

/// Why an outbound request got no usable answer. Every case names the target; none carries a
/// URL's path or query, a header or a body, so an error can be logged and returned as it is.
public enum OutboundError: Error, Equatable, CustomStringConvertible {
    /// `http://` refused before anything was sent.
    case plainHTTPRefused(target: String, setting: String, origin: String, loopback: Bool)
    /// Not an absolute https URL (or one with credentials in it), refused before anything was sent.
    case invalidURL(target: String, setting: String, reason: String)
    /// No answer within the target's timeout (`connect`: no progress for the connect timeout;
    /// `overall`: the exchange as a whole).
    case timedOut(target: String, phase: TimeoutPhase, after: Duration)
    /// The answer was longer than the target's limit; it was cut off, not read.
    case responseTooLarge(target: String, limit: Int)
    /// No HTTP answer: connection refused, host not found, TLS failed, connection lost.
    case unreachable(target: String, reason: String)
    /// The caller's task was cancelled.
    case cancelled(target: String)

    public enum TimeoutPhase: String, Sendable, Equatable {
        case connect, overall
    }

    public var target: String {
        switch self {
        case .plainHTTPRefused(let t, _, _, _), .invalidURL(let t, _, _), .timedOut(let t, _, _),
             .responseTooLarge(let t, _), .unreachable(let t, _), .cancelled(let t): t
        }
    }

    /// The metrics outcome (`ledger_outbound_requests_total{outcome}`).
    public var outcome: String {
        switch self {
        case .plainHTTPRefused, .invalidURL: "refused"
        case .timedOut: "timeout"
        case .responseTooLarge: "too_large"
        case .unreachable: "unreachable"
        case .cancelled: "cancelled"
        }
    }

    /// Worth trying again later (the network or the remote may recover; a refused URL will not).
    public var isRetryable: Bool {
        switch self {
        case .timedOut, .unreachable: true
        case .plainHTTPRefused, .invalidURL, .responseTooLarge, .cancelled: false
        }
    }

    public var message: String {
        switch self {
        case .plainHTTPRefused(let t, let setting, let origin, let loopback):
            loopback
                ? "\(t): plain http to \(origin) refused: set \(setting) to an https URL, or, for a loopback test fake only, set \(OutboundTarget.plainHTTPLoopbackSetting)=true"
                : "\(t): plain http to \(origin) refused: requests carry credentials, so \(setting) must be an https URL (plain http is allowed only for a loopback test fake)"
        case .invalidURL(let t, let setting, let reason):
            "\(t): the URL from \(setting) is refused: \(reason); give an https URL such as https://host[:port][/prefix]"
        case .timedOut(let t, let phase, let after):
            "\(t): no answer within \(after) (\(phase.rawValue) timeout); the remote is slow or unreachable, retry later"
        case .responseTooLarge(let t, let limit):
            "\(t): the answer exceeded \(limit) bytes and was refused; the remote (or what stands in for it) is not the documented API"
        case .unreachable(let t, let reason):
            "\(t): no answer (\(reason)); check the network path to the host and retry"
        case .cancelled(let t):
            "\(t): the request was cancelled"
        }
    }

    public var description: String { message }
}

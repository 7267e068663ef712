import AppStore
import Foundation
import HTTPServer
import LedgerStore
import WeChatPay

/// An answer that is not a success, produced by a use case: status, code and a message that says
/// what to do. Use cases throw these (or the module errors below, which render themselves), and
/// the routes never build error bodies of their own.
struct ServiceFailure: HTTPRenderableError, CustomStringConvertible {
    var httpStatus: Int
    var httpCode: String
    var httpMessage: String
    var httpHeaders: [(String, String)] = []

    init(_ status: Int, _ code: String, _ message: String, headers: [(String, String)] = []) {
        httpStatus = status
        httpCode = code
        httpMessage = message
        httpHeaders = headers
    }

    var description: String { "\(httpStatus) \(httpCode): \(httpMessage)" }

    static func invalidParameter(_ message: String) -> ServiceFailure { ServiceFailure(400, "invalid_parameter", message) }
    static func malformed(_ message: String) -> ServiceFailure { ServiceFailure(400, "malformed", message) }
    static func notFound(_ message: String) -> ServiceFailure { ServiceFailure(404, "not_found", message) }
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

/// What kind of "no" a use case answers, in the domain's words. Use cases throw these (or their
/// modules' own errors); only the HTTP edge (Errors.swift) turns a kind into a status, so a use
/// case can be called from the CLI or a lifecycle service without knowing HTTP exists.
enum Refusal: Sendable, Equatable {
    /// The caller's input is wrong: the message says which field and how to fix it.
    case invalid
    case notFound
    /// The ledger's state forbids it now (a run in progress, a paid period still running).
    case conflict
    /// The deployment lacks a setting the request needs: the message names it.
    case notConfigured
    /// Try again later (the database, a lock, shutting down).
    case unavailable(retryAfterSeconds: Int?)
    /// The caller (or the subject) used up an allowance: wait that long.
    case exhausted(retryAfterSeconds: Int)
    /// Apple or WeChat refused in a way retrying will not fix.
    case upstream
    /// A ledger defect: the message names no internals.
    case defect
}

/// A use case's refusal: its kind, a stable machine code and a message that says what to do.
struct ServiceFailure: Error, CustomStringConvertible {
    var refusal: Refusal
    var code: String
    var message: String

    init(_ refusal: Refusal, _ code: String, _ message: String) {
        self.refusal = refusal
        self.code = code
        self.message = message
    }

    var description: String { "\(code): \(message)" }

    static func invalidParameter(_ message: String) -> ServiceFailure { ServiceFailure(.invalid, "invalid_parameter", message) }
    static func malformed(_ message: String) -> ServiceFailure { ServiceFailure(.invalid, "malformed", message) }
    static func notFound(_ message: String) -> ServiceFailure { ServiceFailure(.notFound, "not_found", message) }
}

import Foundation

/// Wraps handlers: runs before (and may answer instead of) the handler, or after it. Attached to a
/// group of routes (`Router.group`), so a concern such as authentication is stated once per group
/// instead of inside every handler.
public typealias Middleware = @Sendable (HTTPRequest, _ next: HTTPHandler) async -> HTTPResponse

/// An error that knows its HTTP answer: status, a stable machine-readable code and a message a
/// person can act on. Handlers `throw` these (or return `.error(e)`), and the answer is the API's
/// one error shape `{"error": code, "message": text}`.
public protocol HTTPRenderableError: Error {
    var httpStatus: Int { get }
    var httpCode: String { get }
    var httpMessage: String { get }
    /// Extra headers (e.g. `WWW-Authenticate`, `Retry-After`).
    var httpHeaders: [(String, String)] { get }
}

extension HTTPRenderableError {
    public var httpHeaders: [(String, String)] { [] }
}

extension HTTPResponse {
    /// The answer an error renders to.
    public static func error(_ error: some HTTPRenderableError) -> HTTPResponse {
        .error(status: error.httpStatus, code: error.httpCode, message: error.httpMessage, headers: error.httpHeaders)
    }
}

/// A handler that may throw: a renderable error is the answer; anything else is a 500 that names no
/// internals (the group's error observer sees it).
public typealias ThrowingHTTPHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse

extension HTTPResponse {
    /// The answer for an error thrown by a handler.
    public static func rendering(_ error: any Error) -> HTTPResponse {
        if let renderable = error as? any HTTPRenderableError {
            return .error(status: renderable.httpStatus, code: renderable.httpCode, message: renderable.httpMessage,
                          headers: renderable.httpHeaders)
        }
        return .error(status: 500, code: "internal",
                      message: "The server failed to answer; nothing was changed by this request. Report it with the time of the request.")
    }
}

extension Router {
    /// Routes registered inside `body` run through `middleware` (outermost first), and get
    /// `deadline` unless they set their own.
    public mutating func group(_ middleware: Middleware..., deadline: Duration? = nil, _ body: (inout RouteGroup) -> Void) {
        var group = RouteGroup(middleware: middleware, deadline: deadline)
        body(&group)
        for entry in group.entries { add(entry.method, entry.pattern, name: entry.name, deadline: entry.deadline, entry.handler) }
    }
}

/// Routes being registered under shared middleware (see `Router.group`).
public struct RouteGroup {
    struct Entry {
        var method: String
        var pattern: String
        var name: String?
        var deadline: Duration?
        var handler: HTTPHandler
    }

    let middleware: [Middleware]
    let deadline: Duration?
    var entries: [Entry] = []

    public mutating func add(_ method: String, _ pattern: String, name: String? = nil, deadline: Duration? = nil,
                             _ handler: @escaping ThrowingHTTPHandler) {
        let wrapped: HTTPHandler = { request in
            do { return try await handler(request) } catch { return .rendering(error) }
        }
        let chained = middleware.reversed().reduce(wrapped) { next, layer in
            { request in await layer(request, next) }
        }
        entries.append(Entry(method: method, pattern: pattern, name: name, deadline: deadline ?? self.deadline, handler: chained))
    }
}

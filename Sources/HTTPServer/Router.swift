import Foundation

public typealias HTTPHandler = @Sendable (HTTPRequest) async -> HTTPResponse

/// One registered route. `label` is what metrics should use: the route's name, else its pattern,
/// never the concrete path (which would give one time series per subscription id).
public struct Route: Sendable {
    public let method: String
    public let pattern: String
    public let name: String?
    /// This route's whole-request deadline, instead of the server's `handlerTimeout` (long
    /// operations such as a rebuild or an export get their own, longer limit).
    public let deadline: Duration?
    public let handler: HTTPHandler
    fileprivate let segments: [PatternSegment]

    public var label: String { name ?? pattern }
}

/// The outcome of looking a request up in the routing table.
public enum RouteMatch: Sendable {
    case matched(Route, parameters: [String: String])
    /// The path exists, but not for this method; `allowed` is the `Allow` header's list.
    case methodNotAllowed(allowed: [String])
    case notFound
}

fileprivate enum PatternSegment: Sendable, Equatable {
    case literal(String)
    case parameter(String)
}

/// Maps (method, path pattern) to handlers. Patterns are literal segments and `{name}` segments;
/// a `{name}` matches exactly one non-empty segment. When several patterns fit a path the one with
/// a literal segment earliest wins, so `/a/v1` beats `/a/{id}` whatever the order of registration.
public struct Router: Sendable {
    /// Metrics label for requests that matched no route, so unknown paths share one series.
    public static let unmatchedLabel = "unmatched"

    public private(set) var routes: [Route] = []

    public init() {}

    /// Registers a handler. A malformed pattern or a duplicate (method, pattern) is a programming
    /// error in the route table, caught at start-up by a trap with the offending pattern named.
    public mutating func add(
        _ method: String, _ pattern: String, name: String? = nil, deadline: Duration? = nil, _ handler: @escaping HTTPHandler
    ) {
        let method = method.uppercased()
        let segments = Router.parse(pattern)
        precondition(
            !routes.contains { $0.method == method && $0.segments == segments },
            "Router: \(method) \(pattern) is registered twice; remove one of the registrations."
        )
        precondition(deadline.map { $0 > .zero } ?? true, "Router: \(method) \(pattern) has a non-positive deadline.")
        routes.append(Route(method: method, pattern: pattern, name: name, deadline: deadline, handler: handler, segments: segments))
    }

    /// (method, pattern) of every route, for cross-checking against the OpenAPI document.
    public var table: [(method: String, pattern: String)] {
        routes.map { ($0.method, $0.pattern) }
    }

    public func match(method: String, path: String) -> RouteMatch {
        let method = method.uppercased()
        let parts = Router.split(path)
        var best: (route: Route, parameters: [String: String], rank: [Bool])?
        var allowed: Set<String> = []
        for route in routes {
            guard let parameters = Router.bind(route.segments, to: parts) else { continue }
            allowed.insert(route.method)
            // HEAD is answered by the GET handler; libmicrohttpd sends the headers without the body.
            guard route.method == method || (method == "HEAD" && route.method == "GET") else { continue }
            let rank = route.segments.map { if case .literal = $0 { true } else { false } }
            if let current = best {
                let better = rank.lexicographicallyPrecedes(current.rank) { $0 && !$1 }
                let exactBeatsHeadFallback = rank == current.rank && route.method == method
                if better || exactBeatsHeadFallback { best = (route, parameters, rank) }
            } else {
                best = (route, parameters, rank)
            }
        }
        if let best { return .matched(best.route, parameters: best.parameters) }
        if allowed.isEmpty { return .notFound }
        if allowed.contains("GET") { allowed.insert("HEAD") }
        return .methodNotAllowed(allowed: allowed.sorted())
    }

    /// Routes `request` and runs its handler; 404 and 405 come back as JSON error bodies.
    public func respond(to request: HTTPRequest) async -> HTTPResponse {
        switch match(method: request.method, path: request.path) {
        case let .matched(route, parameters):
            var request = request
            request.pathParameters = parameters
            return await route.handler(request)
        case let .methodNotAllowed(allowed):
            return Router.methodNotAllowed(request, allowed: allowed)
        case .notFound:
            return Router.notFound(request)
        }
    }

    static func notFound(_ request: HTTPRequest) -> HTTPResponse {
        .error(
            status: 404, code: "not_found",
            message: "No resource at \(Router.quoted(request.path)); check the path against the API documentation."
        )
    }

    static func methodNotAllowed(_ request: HTTPRequest, allowed: [String]) -> HTTPResponse {
        let list = allowed.joined(separator: ", ")
        return .error(
            status: 405, code: "method_not_allowed",
            message: "\(Router.quoted(request.method)) is not supported on \(Router.quoted(request.path)); use one of: \(list).",
            headers: [("Allow", list)]
        )
    }

    /// Echoing a client's path back is useful, but it is attacker-chosen: cap its length.
    private static func quoted(_ text: String) -> String {
        text.count > 200 ? "\(text.prefix(200))…" : text
    }

    private static func split(_ path: String) -> [Substring] {
        // Keep empty segments: "/a//b" and "/a/b/" are different resources from "/a/b".
        Array(path.split(separator: "/", omittingEmptySubsequences: false).dropFirst())
    }

    private static func parse(_ pattern: String) -> [PatternSegment] {
        precondition(pattern.hasPrefix("/"), "Router: pattern \(pattern) must start with \"/\".")
        var names: Set<String> = []
        return split(pattern).map { part in
            if part.hasPrefix("{") && part.hasSuffix("}") && part.count > 2 {
                let name = String(part.dropFirst().dropLast())
                precondition(
                    !name.contains("{") && !name.contains("}") && names.insert(name).inserted,
                    "Router: pattern \(pattern) has a malformed or repeated parameter {\(name)}."
                )
                return .parameter(name)
            }
            precondition(
                !part.contains("{") && !part.contains("}"),
                "Router: pattern \(pattern) has a brace inside segment \"\(part)\"; a parameter is a whole segment {name}."
            )
            return .literal(String(part))
        }
    }

    private static func bind(_ segments: [PatternSegment], to parts: [Substring]) -> [String: String]? {
        guard segments.count == parts.count else { return nil }
        var parameters: [String: String] = [:]
        for (segment, part) in zip(segments, parts) {
            switch segment {
            case let .literal(text):
                guard part == text else { return nil }
            case let .parameter(name):
                guard !part.isEmpty else { return nil }
                parameters[name] = String(part)
            }
        }
        return parameters
    }
}

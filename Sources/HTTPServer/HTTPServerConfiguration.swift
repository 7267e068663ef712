import Foundation

/// Listening address and the limits that protect the process from clients.
public struct HTTPServerConfiguration: Sendable {
    /// IPv4 or IPv6 literal, or `localhost`; `0.0.0.0` / `::` listen on every interface.
    public var host: String
    /// 0 asks the kernel for a free port; `HTTPServer.port` then reports the one bound.
    public var port: Int
    /// Larger bodies are answered 413 without being buffered.
    public var maxBodyBytes: Int
    /// Connections open at once across the whole server; further clients wait in the kernel backlog.
    public var connectionLimit: Int
    /// Connections one client IP may hold open; 0 means no per-IP limit.
    public var perIPConnectionLimit: Int
    /// Idle time after which a connection is closed: bounds slow (slowloris) clients and idle
    /// keep-alive sockets. A connection whose handler is still running is not idle and is not timed out.
    public var connectionTimeoutSeconds: Int
    /// Total time a connection may take to deliver one request's headers and body, counted from
    /// its accept (or the end of its previous answer); past it the socket is shut down. The idle
    /// timeout alone never ends a client that sends one byte every `connectionTimeoutSeconds - 1`
    /// (slowloris). 0 disables it. Time spent in a handler does not count.
    public var receiveDeadlineSeconds: Int = 30
    /// libmicrohttpd I/O threads. Handlers do not run on them (they run as Swift tasks while the
    /// connection is suspended), so a small pool serves many slow handlers.
    public var threadPoolSize: Int
    /// A handler still running after this long is answered 503 `handler_timeout` and cancelled;
    /// nil lets handlers run as long as they like (a hung handler then holds its connection).
    public var handlerTimeout: Duration?
    /// How handlers are run; only tests measuring the alternative change it.
    var handlerExecution = HandlerExecution.suspendConnection

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        maxBodyBytes: Int = 1 << 20,
        connectionLimit: Int = 1024,
        perIPConnectionLimit: Int = 0,
        connectionTimeoutSeconds: Int = 30,
        threadPoolSize: Int = max(1, ProcessInfo.processInfo.activeProcessorCount),
        handlerTimeout: Duration? = nil
    ) {
        self.handlerTimeout = handlerTimeout
        self.host = host
        self.port = port
        self.maxBodyBytes = maxBodyBytes
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
        self.threadPoolSize = threadPoolSize
    }

    func validated() throws(HTTPServerError) -> HTTPServerConfiguration {
        func check(_ ok: Bool, _ field: String, _ fix: String) throws(HTTPServerError) {
            if !ok { throw .invalidConfiguration(field: field, fix: fix) }
        }
        try check((0...65535).contains(port), "port", "use 0 (ephemeral) or a port between 1 and 65535, not \(port)")
        try check(maxBodyBytes >= 0, "maxBodyBytes", "use a non-negative byte count, not \(maxBodyBytes)")
        try check((1...1_000_000).contains(connectionLimit), "connectionLimit", "use between 1 and 1000000, not \(connectionLimit)")
        try check((0...1_000_000).contains(perIPConnectionLimit), "perIPConnectionLimit", "use 0 (no limit) or a positive count, not \(perIPConnectionLimit)")
        try check((0...86_400).contains(connectionTimeoutSeconds), "connectionTimeoutSeconds", "use 0 (never) to 86400 seconds, not \(connectionTimeoutSeconds)")
        try check((0...86_400).contains(receiveDeadlineSeconds), "receiveDeadlineSeconds", "use 0 (no total bound) to 86400 seconds, not \(receiveDeadlineSeconds)")
        try check((1...256).contains(threadPoolSize), "threadPoolSize", "use between 1 and 256 threads, not \(threadPoolSize)")
        try check(handlerTimeout.map { $0 > .zero } ?? true, "handlerTimeout", "use a positive duration or nil (no limit)")
        return self
    }
}

enum HandlerExecution: Sendable {
    /// The connection is suspended while the handler's task runs: I/O threads never wait.
    case suspendConnection
    /// The I/O thread blocks until the handler returns (measured, not used).
    case blockIOThread
}

/// Errors starting the server; each says what to change.
public enum HTTPServerError: Error, Equatable, CustomStringConvertible {
    case invalidConfiguration(field: String, fix: String)
    case invalidHost(String)
    case alreadyStarted
    case startFailed(host: String, port: Int, reason: String)

    public var description: String {
        switch self {
        case let .invalidConfiguration(field, fix):
            "HTTP server configuration field \(field) is invalid: \(fix)."
        case let .invalidHost(host):
            "Cannot listen on host \"\(host)\": give an IPv4 or IPv6 address literal (e.g. 127.0.0.1, 0.0.0.0, ::1) or localhost."
        case .alreadyStarted:
            "The HTTP server was already started; create a new HTTPServer to serve again."
        case let .startFailed(host, port, reason):
            "Could not listen on \(host):\(port): \(reason). Check that no other process uses the port (or pick port 0) and that the address belongs to this machine."
        }
    }
}

/// What the server reports after each response, for metrics: `route` is the route's label
/// (name or pattern), `Router.unmatchedLabel` for 404s, never the raw path.
public struct HTTPExchange: Sendable {
    public var route: String
    public var method: String
    public var status: Int
    /// From the first byte of the request headers being parsed to the response being fully sent.
    public var duration: Duration
}

public typealias HTTPObserver = @Sendable (HTTPExchange) -> Void

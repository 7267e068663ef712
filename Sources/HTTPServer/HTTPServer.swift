internal import CMicroHTTPD
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The HTTP/1.1 front door: owns the libmicrohttpd daemon, turns its callbacks into `HTTPRequest`s,
/// runs each handler as a Swift task while the connection is suspended (so a handler waiting on a
/// database commit holds no I/O thread), and enforces the body, connection and idle limits.
public final class HTTPServer: Sendable {
    public let configuration: HTTPServerConfiguration
    private let core: ServerCore
    private let daemon = Mutex<DaemonState>(.notStarted)

    /// Serves `router`: unknown paths get 404 JSON, known paths with another method 405 JSON with `Allow`.
    public init(configuration: HTTPServerConfiguration, router: Router) {
        self.configuration = configuration
        self.core = ServerCore(configuration: configuration, dispatch: .router(router))
    }

    /// Serves every request with one handler (no routing, metrics label "handler").
    public init(configuration: HTTPServerConfiguration, handler: @escaping HTTPHandler) {
        self.configuration = configuration
        self.core = ServerCore(configuration: configuration, dispatch: .handler(handler))
    }

    deinit {
        // Nobody called shutdown: stop hard rather than leave a daemon calling into freed memory.
        let running = daemon.withLock { state -> DaemonHandle? in
            defer { state = .stopped }
            if case let .running(handle, _) = state { return handle }
            return nil
        }
        if let running { core.stop(running, listenSocket: nil) }
    }

    /// Called on a libmicrohttpd thread after each response is sent; keep it short (count, don't block).
    public var observer: HTTPObserver? {
        get { core.observer.withLock { $0?.observe } }
        set { core.observer.withLock { $0 = newValue.map(ObserverBox.init) } }
    }

    /// The bound port (useful with port 0); nil before `start` and after `shutdown`.
    public var port: Int? {
        daemon.withLock { state in
            switch state {
            case let .running(_, port), let .draining(port): port
            case .notStarted, .stopped: nil
            }
        }
    }

    private var isDraining: Bool {
        daemon.withLock { if case .draining = $0 { true } else { false } }
    }

    /// Requests received and not yet fully answered.
    public var inFlightRequests: Int { core.inFlight }

    public func start() throws(HTTPServerError) {
        let config = try configuration.validated()
        try daemon.withLock { (state: inout DaemonState) throws(HTTPServerError) in
            guard case .notStarted = state else { throw .alreadyStarted }
            let (handle, port) = try core.start(config)
            state = .running(handle, port: port)
        }
    }

    /// Stops accepting connections at once (new clients are refused), lets requests in flight
    /// finish for up to `gracePeriod`, answers any handler still running after that with 503, then
    /// stops the daemon. Idle keep-alive connections are closed. Safe to call more than once.
    public func shutdown(gracePeriod: Duration = .seconds(10)) async {
        let taken = daemon.withLock { state -> (DaemonHandle, Int)? in
            guard case let .running(handle, port) = state else { return nil }
            state = .draining(port: port)
            return (handle, port)
        }
        guard let (handle, _) = taken else {
            // A concurrent caller returns only once the first one has finished stopping.
            while isDraining { try? await Task.sleep(for: .milliseconds(5)) }
            return
        }
        core.draining.store(true, ordering: .releasing)
        // MHD requires the listening socket to stay open until MHD_stop_daemon; shutting it down
        // makes the kernel refuse new connections now instead of queueing them in the backlog.
        let listenSocket = MHD_quiesce_daemon(handle.raw)
        if listenSocket >= 0 { _ = Glibc.shutdown(listenSocket, Int32(SHUT_RDWR)) }

        let clock = ContinuousClock()
        let deadline = clock.now + gracePeriod
        while core.inFlight > 0, clock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        if core.inFlight > 0 {
            core.abandonRunningHandlers()
            // Give the 503s a moment to be written; stop_daemon closes whatever is left.
            let flushDeadline = clock.now + .milliseconds(500)
            while core.inFlight > 0, clock.now < flushDeadline {
                try? await Task.sleep(for: .milliseconds(5))
            }
        }
        core.stop(handle, listenSocket: listenSocket >= 0 ? listenSocket : nil)
        daemon.withLock { $0 = .stopped }
    }
}

/// `struct MHD_Daemon *` is not Sendable; the daemon itself is thread-safe for the calls made on it.
struct DaemonHandle: @unchecked Sendable {
    let raw: OpaquePointer
}

enum DaemonState: Sendable {
    case notStarted
    case running(DaemonHandle, port: Int)
    case draining(port: Int)
    case stopped
}

struct ActiveRequests {
    var states: [ObjectIdentifier: RequestState] = [:]
    /// Set when shutdown abandons handlers: a suspended connection left at MHD_stop_daemon aborts the process.
    var refusingSuspension = false
}

struct ObserverBox: Sendable {
    let observe: HTTPObserver
}

enum Dispatch: Sendable {
    case router(Router)
    case handler(HTTPHandler)
}

/// State shared between the daemon's threads and Swift tasks; handed to C as the callbacks' `cls`.
final class ServerCore: Sendable {
    let configuration: HTTPServerConfiguration
    let dispatch: Dispatch
    /// Boxed, not a bare closure: `Mutex.withLock` hands its value over `inout` through a generic,
    /// and a bare function value written back that way was re-abstracted on every read — two more
    /// thunk layers per request, so each call walked a chain as long as the server's history
    /// (measured: 58% of the service's CPU after a few thousand requests).
    let observer = Mutex<ObserverBox?>(nil)
    let draining = Atomic<Bool>(false)
    /// Every request between its first callback and its completion callback, so shutdown can count
    /// them and answer those whose handler outlives the grace period.
    private let active = Mutex(ActiveRequests())
    /// Retain held on behalf of libmicrohttpd while the daemon may call back into this object.
    private let retainedForDaemon = Mutex<Unmanaged<ServerCore>?>(nil)

    /// Nil when `receiveDeadlineSeconds` is 0.
    let receiveDeadline: ReceiveDeadline?

    init(configuration: HTTPServerConfiguration, dispatch: Dispatch) {
        self.configuration = configuration
        self.dispatch = dispatch
        receiveDeadline = configuration.receiveDeadlineSeconds > 0 ? ReceiveDeadline(seconds: configuration.receiveDeadlineSeconds) : nil
    }

    var inFlight: Int { active.withLock { $0.states.count } }

    func start(_ config: HTTPServerConfiguration) throws(HTTPServerError) -> (DaemonHandle, Int) {
        let address = try SocketAddress(host: config.host, port: config.port)
        // poll(), not epoll: with epoll and its own threads, MHD_quiesce_daemon (graceful shutdown)
        // races the polling threads to remove the listening socket from the epoll set, and the
        // loser's unguarded MHD_PANIC aborts the process ("Failed to remove listen FD from epoll
        // set", an open defect in 0.9.75). With poll() quiescing only signals the threads. Each
        // pool thread polls only its own connections (bench-smoke measures the request path).
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_POLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ITC.rawValue
        if address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }

        let unmanaged = Unmanaged.passRetained(self)
        let completed: MHD_RequestCompletedCallback = mhdRequestCompleted
        let notified: MHD_NotifyConnectionCallback = mhdConnectionNotified
        let uriReceived: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?) -> UnsafeMutableRawPointer? = mhdURIReceived
        let started: OpaquePointer? = address.withSockaddr { sockaddr in
            var options: [any CVarArg] = [
                option(.SOCK_ADDR), OpaquePointer(sockaddr),
                option(.NOTIFY_COMPLETED), unsafeBitCast(completed, to: OpaquePointer.self), OpaquePointer(unmanaged.toOpaque()),
                option(.URI_LOG_CALLBACK), unsafeBitCast(uriReceived, to: OpaquePointer.self), OpaquePointer(unmanaged.toOpaque()),
                option(.CONNECTION_LIMIT), CUnsignedInt(config.connectionLimit),
                option(.PER_IP_CONNECTION_LIMIT), CUnsignedInt(config.perIPConnectionLimit),
                option(.CONNECTION_TIMEOUT), CUnsignedInt(config.connectionTimeoutSeconds),
                option(.LISTEN_BACKLOG_SIZE), CUnsignedInt(511),
                // Strict parsing: reject (400) what HTTP/1.1 forbids, such as a missing Host or
                // whitespace before a header colon, which request-smuggling attacks rely on.
                option(.STRICT_FOR_CLIENT), CInt(1),
            ]
            if receiveDeadline != nil {
                options += [option(.NOTIFY_CONNECTION), unsafeBitCast(notified, to: OpaquePointer.self), OpaquePointer(unmanaged.toOpaque())]
            }
            if config.threadPoolSize > 1 {
                options += [option(.THREAD_POOL_SIZE), CUnsignedInt(config.threadPoolSize)]
            }
            options.append(option(.END))
            return withVaList(options) { arguments in
                MHD_start_daemon_va(
                    flags, UInt16(config.port), nil, nil, mhdAccessHandler, unmanaged.toOpaque(), arguments
                )
            }
        }
        guard let started else {
            let reason = String(cString: strerror(errno))
            unmanaged.release()
            throw .startFailed(host: config.host, port: config.port, reason: reason)
        }
        retainedForDaemon.withLock { $0 = unmanaged }
        receiveDeadline?.start()
        return (DaemonHandle(raw: started), Int(cmhd_daemon_bound_port(started)))
    }

    func stop(_ handle: DaemonHandle, listenSocket: Int32?) {
        // MHD_stop_daemon aborts the process if a connection is still suspended.
        abandonRunningHandlers()
        MHD_stop_daemon(handle.raw)
        receiveDeadline?.stop()
        if let listenSocket { close(listenSocket) }
        retainedForDaemon.withLock { retained in
            retained?.release()
            retained = nil
        }
    }

    func abandonRunningHandlers() {
        // From here on no connection is suspended any more (see `suspend`), so this snapshot holds
        // every one that MHD_stop_daemon could find suspended.
        let states = active.withLock { active in
            active.refusingSuspension = true
            return Array(active.states.values)
        }
        for state in states {
            state.abandon(with: .error(
                status: 503, code: "shutting_down",
                message: "The server shut down before this request finished; retry it, nothing was acknowledged."
            ))
        }
    }

    // MARK: Request lifecycle, called on libmicrohttpd threads

    func begin(_ connection: OpaquePointer, url: String, method: String) -> RequestState {
        let state = RequestState(connection: connection, method: method, path: url)
        switch dispatch {
        case let .router(router):
            state.match = router.match(method: method, path: url)
            if case let .matched(route, _) = state.match { state.label = route.label }
        case .handler:
            state.label = "handler"
        }
        active.withLock { $0.states[ObjectIdentifier(state)] = state }
        return state
    }

    /// The request is fully received (or its handler has finished): answer, or start the handler.
    func requestReceived(_ state: RequestState, _ connection: OpaquePointer) -> MHD_Result {
        switch state.currentPhase {
        case .running, .answered:
            return .YES
        case let .ready(response):
            return queue(response, for: state, on: connection)
        case .receiving:
            break
        }
        receiveDeadline?.received(connection)
        if state.overLimit { return queue(tooLarge(), for: state, on: connection) }
        var request = HTTPRequest(
            method: state.method, path: state.path, query: queryArguments(connection),
            headers: requestHeaders(connection), body: state.body, remoteAddress: clientAddress(connection)
        )
        state.body = Data()
        // No handler wants a NUL in a query value (nor can PostgreSQL text hold one): refuse it here,
        // as a NUL in the path is refused, instead of letting it surface deep inside as a 5xx.
        if let name = request.query.first(where: { $0.key.utf8.contains(0) || $0.value.utf8.contains(0) })?.key {
            return queue(.error(
                status: 400, code: "invalid_query",
                message: "The query parameter \(name.utf8.contains(0) ? "name" : "'\(name)'") contains an encoded NUL byte (%00); remove it."
            ), for: state, on: connection)
        }
        let handler: HTTPHandler
        var deadline = configuration.handlerTimeout
        switch (dispatch, state.match) {
        case let (.router, .matched(route, parameters)?):
            request.pathParameters = parameters
            handler = route.handler
            if let own = route.deadline { deadline = own }
        case let (.router, .methodNotAllowed(allowed)?):
            return queue(Router.methodNotAllowed(request, allowed: allowed), for: state, on: connection)
        case (.router, _):
            return queue(Router.notFound(request), for: state, on: connection)
        case let (.handler(single), _):
            handler = single
        }
        let frozen = request
        if configuration.handlerExecution == .blockIOThread {
            return queue(runBlocking(handler, frozen), for: state, on: connection)
        }
        guard suspend(state, connection) else {
            return queue(.error(
                status: 503, code: "shutting_down",
                message: "The server is shutting down; retry the request, nothing was acknowledged."
            ), for: state, on: connection)
        }
        // The handler runs as a task; a second task answers in its place when the deadline
        // passes or the client hangs up, and the handler is then cancelled (long reads stop in
        // PostgreSQL on that cancellation: nothing keeps working for a client that is gone).
        let socket = cmhd_connection_fd(connection)
        let clock = ContinuousClock()
        let limit = deadline
        let end = limit.map { clock.now + $0 }
        state.runs(Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { state.resume(with: await handler(frozen)) }
                group.addTask {
                    while true {
                        var step = ServerCore.hangUpPollInterval
                        if let end { step = min(step, max(end - clock.now, .zero)) }
                        do { try await Task.sleep(for: step) } catch { return }
                        if let end, clock.now >= end, let limit {
                            state.resume(with: .error(
                                status: 503, code: "handler_timeout",
                                message: "The request was not finished within \(limit); retry it later, nothing was acknowledged."
                            ))
                            return
                        }
                        if ServerCore.peerHungUp(socket) {
                            state.resume(with: .error(
                                status: 503, code: "client_closed",
                                message: "The client closed the connection before the answer; the request was cancelled."
                            ))
                            return
                        }
                    }
                }
                // First to finish answers; the other is cancelled (a handler may ignore that, but
                // the connection no longer waits for it).
                await group.next()
                group.cancelAll()
            }
        })
        return .YES
    }

    /// How often a running handler's connection is checked for a client that hung up.
    static let hangUpPollInterval = Duration.milliseconds(250)

    /// True when the client closed its side of the connection (FIN or reset) while its request was
    /// being handled. The connection is suspended then, so libmicrohttpd does not read the socket
    /// and the descriptor stays open until the answer is queued; polling it reads nothing.
    static func peerHungUp(_ socket: CInt) -> Bool {
        guard socket >= 0 else { return false }
        // POLLRDHUP (0x2000, Linux): the peer shut down its writing side.
        let rdhup: Int16 = 0x2000
        var descriptor = pollfd(fd: socket, events: rdhup, revents: 0)
        guard poll(&descriptor, 1, 0) == 1 else { return false }
        return descriptor.revents & (rdhup | Int16(POLLHUP) | Int16(POLLERR)) != 0
    }

    /// Suspends under the registry lock, so a request that arrives on a kept-alive connection while
    /// shutdown abandons handlers is either in the abandoned snapshot or refused here.
    private func suspend(_ state: RequestState, _ connection: OpaquePointer) -> Bool {
        active.withLock { active in
            guard !active.refusingSuspension else { return false }
            state.startRunning()
            MHD_suspend_connection(connection)
            return true
        }
    }

    /// The rejected alternative, kept for the comparison in HTTPServerThroughputTests: the I/O
    /// thread waits for the handler, so at most `threadPoolSize` handlers run at once and a 50 ms
    /// database wait caps a 2-thread server at 40 requests/s.
    private func runBlocking(_ handler: @escaping HTTPHandler, _ request: HTTPRequest) -> HTTPResponse {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<HTTPResponse?>(nil)
        Task {
            let response = await handler(request)
            result.withLock { $0 = response }
            done.signal()
        }
        done.wait()
        return result.withLock { $0 } ?? .error(status: 500, code: "no_response", message: "The handler produced no response; report this as a bug.")
    }

    func tooLarge() -> HTTPResponse {
        .error(
            status: 413, code: "body_too_large",
            message: "The request body exceeds \(configuration.maxBodyBytes) bytes; send a smaller body."
        )
    }

    func queue(_ response: HTTPResponse, for state: RequestState, on connection: OpaquePointer) -> MHD_Result {
        state.markAnswered()
        var response = response
        if !(200...599).contains(response.status) {
            response = .error(
                status: 500, code: "invalid_status",
                message: "The handler answered with HTTP status \(response.status), which is not a final status; report this as a bug."
            )
        }
        if draining.load(ordering: .acquiring) { response.headers.append(("Connection", "close")) }
        state.status = response.status
        // MUST_COPY: the Data's storage is not guaranteed to outlive this call. An empty body still
        // passes a valid pointer, which older libmicrohttpd releases insist on.
        let storage = response.body.isEmpty ? Data([0]) : response.body
        let count = response.body.count
        let created: OpaquePointer? = storage.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
            MHD_create_response_from_buffer(count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), mustCopy)
        }
        guard let created else { return .NO }
        defer { MHD_destroy_response(created) }
        for (name, value) in response.headers where Self.isSendable(name: name, value: value) {
            _ = MHD_add_response_header(created, name, value)
        }
        return MHD_queue_response(connection, CUnsignedInt(response.status), created)
    }

    /// Framing headers belong to libmicrohttpd; CR, LF or NUL in a header would let a handler
    /// (or data it echoes) inject headers or split the response.
    static func isSendable(name: String, value: String) -> Bool {
        let lowered = name.lowercased()
        if lowered == "content-length" || lowered == "transfer-encoding" || name.isEmpty { return false }
        let forbidden: (UInt8) -> Bool = { $0 == 0x0D || $0 == 0x0A || $0 == 0 }
        if name.utf8.contains(where: { forbidden($0) || $0 == 0x3A || $0 == 0x20 }) { return false }
        return !value.utf8.contains(where: forbidden)
    }

    func completed(_ state: RequestState) {
        state.markAnswered()
        active.withLock { _ = $0.states.removeValue(forKey: ObjectIdentifier(state)) }
        guard let status = state.status, let box = observer.withLock({ $0 }) else { return }
        box.observe(HTTPExchange(
            route: state.label, method: Self.metricMethod(state.method), status: status,
            duration: ContinuousClock.now - state.started
        ))
    }

    /// Methods are client-chosen; unknown ones share one label so metrics cannot be flooded.
    static func metricMethod(_ method: String) -> String {
        switch method {
        case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS": method
        default: "OTHER"
        }
    }
}

private func option(_ value: MHD_OPTION) -> CInt {
    CInt(bitPattern: value.rawValue)
}

/// MHD_RESPMEM_MUST_COPY; the importer gives this closed enum's cases names that vary by Swift version.
private let mustCopy = MHD_ResponseMemoryMode(rawValue: 2)!

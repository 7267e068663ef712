import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// Why a POSIX socket client and not URLSession: measured on this 2-core machine against the
// project's HTTPServer answering a 2-byte body (LoadGeneratorTests.testURLSessionComparison, kept
// as an opt-in test), URLSession (FoundationNetworking over libcurl, HTTPMaximumConnectionsPerHost
// = 32) completed 3.3k req/s where this client completed 24k req/s (debug builds, 32 connections,
// 20k requests), so URLSession
// cannot tell a 10k req/s server from a 3k one. This client is deliberately minimal: it writes
// prepared HTTP/1.1 requests on keep-alive connections and reads answers framed by Content-Length
// only — enough for our own server, whose buffered responses always carry one. (The rule "never
// hand-write HTTP parsing" is about the service, which faces the internet; this talks to loopback.)

/// Errors of the load generator; each says what to change.
public enum LoadGeneratorError: Error, Equatable, CustomStringConvertible {
    case invalidURL(String)
    case notLoopback(String)
    case invalidOptions(String)

    public var description: String {
        switch self {
        case .invalidURL(let url):
            return "cannot load-test \(url): give an http:// URL with a literal loopback host and a port, e.g. http://127.0.0.1:8080"
        case .notLoopback(let host):
            return "refusing to send load to \(host): only loopback addresses (127.0.0.0/8, ::1, localhost) may be targeted"
        case .invalidOptions(let why):
            return "invalid load options: \(why)"
        }
    }
}

/// A loopback address and port the generator may connect to. Anything that is not loopback is
/// refused at construction, so a typo cannot turn a benchmark into an attack on someone's server.
public struct LoopbackTarget: Sendable, Equatable, CustomStringConvertible {
    public let host: String
    public let port: Int
    let isIPv6: Bool

    public init(host: String, port: Int) throws(LoadGeneratorError) {
        guard (1...65535).contains(port) else { throw .invalidURL("\(host):\(port)") }
        var h = host
        if h.hasPrefix("["), h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        if h.lowercased() == "localhost" { h = "127.0.0.1" }
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, h, &v4) == 1 {
            // s_addr is in network order: the first octet is the lowest byte.
            guard UInt32(bigEndian: v4.s_addr) >> 24 == 127 else { throw .notLoopback(host) }
            isIPv6 = false
        } else if inet_pton(AF_INET6, h, &v6) == 1 {
            let bytes = withUnsafeBytes(of: v6) { Array($0) }
            guard bytes == [UInt8](repeating: 0, count: 15) + [1] else { throw .notLoopback(host) }
            isIPv6 = true
        } else {
            // Names other than localhost could resolve anywhere: refuse rather than trust DNS.
            throw .notLoopback(host)
        }
        self.host = h
        self.port = port
    }

    /// `http://host:port[/…]`; https and non-loopback hosts are refused.
    public init(url: String) throws(LoadGeneratorError) {
        guard let components = URLComponents(string: url), components.scheme?.lowercased() == "http",
              let host = components.host, !host.isEmpty else { throw .invalidURL(url) }
        try self.init(host: host, port: components.port ?? 80)
    }

    /// The Host header value.
    public var authority: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }
    public var description: String { "http://\(authority)" }
}

/// One request as the generator sends it.
public struct LoadRequest: Sendable {
    public var method: String
    public var path: String
    public var headers: [(String, String)]
    public var body: Data

    public init(method: String = "GET", path: String, headers: [(String, String)] = [], body: Data = Data()) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
    }

    /// The bytes on the wire; bodies always carry Content-Length (never chunked).
    func encoded(authority: String) -> [UInt8] {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(authority)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" || method == "PUT" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        var bytes = [UInt8](head.utf8)
        bytes.reserveCapacity(bytes.count + body.count)
        bytes.append(contentsOf: body)
        return bytes
    }
}

/// When a run stops: after `count` requests, at `duration`, or at whichever comes first.
public struct LoadLimit: Sendable {
    public var count: Int?
    public var duration: Duration?
    public init(count: Int? = nil, duration: Duration? = nil) {
        self.count = count
        self.duration = duration
    }
    public static func count(_ n: Int) -> LoadLimit { LoadLimit(count: n) }
    public static func duration(_ d: Duration) -> LoadLimit { LoadLimit(duration: d) }
}

public struct LoadOptions: Sendable {
    /// Concurrent keep-alive connections (one blocking thread each).
    public var connections: Int
    public var limit: LoadLimit
    /// Open-loop fixed rate (requests/s across all connections): request i is due at start + i/rate
    /// and its latency is measured from when it was due, so a stalled server is not flattered by
    /// the clients politely waiting (coordinated omission). nil: each connection sends back-to-back.
    public var rate: Double?
    /// Send and receive timeout of one request; a request past it counts as a transport error.
    public var requestTimeout: Duration
    /// Pause of a connection after it failed to connect, so a dead server is not spun on.
    public var reconnectDelay: Duration
    /// Keep the status of every request by index (the reliability suite needs to know which
    /// notifications were acknowledged).
    public var recordOutcomes: Bool

    public init(
        connections: Int = 32, limit: LoadLimit, rate: Double? = nil, requestTimeout: Duration = .seconds(30),
        reconnectDelay: Duration = .milliseconds(20), recordOutcomes: Bool = false
    ) {
        self.connections = connections
        self.limit = limit
        self.rate = rate
        self.requestTimeout = requestTimeout
        self.reconnectDelay = reconnectDelay
        self.recordOutcomes = recordOutcomes
    }
}

/// Latency percentiles in milliseconds (nearest rank over every sample).
public struct LatencySummary: Sendable, Equatable {
    public var count: Int
    public var p50: Double
    public var p90: Double
    public var p99: Double
    public var max: Double
    public var mean: Double

    init(microseconds samples: [UInt32]) {
        let sorted = samples.sorted()
        count = sorted.count
        func rank(_ q: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            let i = Swift.min(sorted.count - 1, Swift.max(0, Int((q * Double(sorted.count)).rounded(.up)) - 1))
            return Double(sorted[i]) / 1000
        }
        p50 = rank(0.50)
        p90 = rank(0.90)
        p99 = rank(0.99)
        max = Double(sorted.last ?? 0) / 1000
        mean = sorted.isEmpty ? 0 : Double(sorted.reduce(0) { $0 + UInt64($1) }) / Double(sorted.count) / 1000
    }
}

/// What happened to one request.
public enum RequestOutcome: Sendable, Equatable {
    /// Never sent (the run ended first or the source ran dry).
    case notSent
    case status(Int)
    /// No connection could be opened: nothing was sent.
    case notConnected
    /// Send or receive failed or timed out: the server may or may not have acted on it.
    case transportError
}

public struct LoadReport: Sendable {
    /// Requests written (or being written) on a connection: answered, or failed in transit.
    public var attempted: Int
    /// Responses received, by status code.
    public var statusCounts: [Int: Int]
    public var transportErrors: Int
    /// Transport errors by kind (connect, send, receive, timeout, protocol).
    public var transportErrorKinds: [String: Int]
    /// Latency of answered requests.
    public var latency: LatencySummary
    public var elapsed: Duration
    /// One body (first 300 bytes) per non-2xx status, for diagnosis.
    public var sampleBodies: [Int: String]
    /// By request index, when `recordOutcomes` was set.
    public var outcomes: [RequestOutcome]

    public var answered: Int { statusCounts.values.reduce(0, +) }
    public func count(_ status: Int) -> Int { statusCounts[status] ?? 0 }
    public var seconds: Double { Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18 }
    /// Answered requests per second of wall-clock time.
    public var requestsPerSecond: Double { seconds > 0 ? Double(answered) / seconds : 0 }

    public var summary: String {
        let statuses = statusCounts.keys.sorted().map { "\($0)×\(statusCounts[$0]!)" }.joined(separator: " ")
        let errors = transportErrorKinds.keys.sorted().map { "\($0)×\(transportErrorKinds[$0]!)" }.joined(separator: " ")
        return String(format: "%d answered in %.2f s = %.0f req/s; p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms; statuses: %@; transport errors: %d%@",
                      answered, seconds, requestsPerSecond, latency.p50, latency.p90, latency.p99, latency.max,
                      statuses.isEmpty ? "none" : statuses, transportErrors, errors.isEmpty ? "" : " (\(errors))")
    }
}

/// Live counters a caller can watch while a run is going (e.g. kill the service once load is on).
public struct LoadProgress: Sendable {
    public var attempted: Int
    public var answered: Int
    public var ok: Int
    public var transportErrors: Int
}

/// Sends a stream of requests over C concurrent keep-alive HTTP/1.1 connections to a loopback
/// server and measures what comes back. Requests come from `source(index)`, called once per
/// index 0, 1, 2… (nil ends the run); a request that fails is not retried, so index i is
/// attempted at most once. Each connection runs on its own thread with blocking sockets, keeping
/// the Swift cooperative pool free for whatever else the process is doing.
public final class LoadGenerator: Sendable {
    public let target: LoopbackTarget
    public let options: LoadOptions
    private let source: @Sendable (Int) -> LoadRequest?
    private let state = SharedState()

    public init(target: LoopbackTarget, options: LoadOptions, source: @escaping @Sendable (Int) -> LoadRequest?) throws(LoadGeneratorError) {
        guard (1...4096).contains(options.connections) else { throw .invalidOptions("connections must be 1…4096, not \(options.connections)") }
        guard options.limit.count != nil || options.limit.duration != nil else {
            throw .invalidOptions("give a request count, a duration or both, so every run ends")
        }
        if let rate = options.rate, !(rate > 0 && rate.isFinite) { throw .invalidOptions("rate must be a positive number of requests per second") }
        self.target = target
        self.options = options
        self.source = source
    }

    /// Cycles through `requests` (a count or duration limit ends the run).
    public convenience init(target: LoopbackTarget, options: LoadOptions, cycling requests: [LoadRequest]) throws(LoadGeneratorError) {
        guard !requests.isEmpty else { throw .invalidOptions("no requests to send") }
        try self.init(target: target, options: options) { requests[$0 % requests.count] }
    }

    public var progress: LoadProgress {
        LoadProgress(attempted: state.attempted.load(ordering: .relaxed), answered: state.answered.load(ordering: .relaxed),
                     ok: state.ok.load(ordering: .relaxed), transportErrors: state.transportErrors.load(ordering: .relaxed))
    }

    /// Ends the run early: connections finish the request in hand and stop.
    public func stop() { state.stopped.store(true, ordering: .relaxed) }

    /// Runs to the limit on dedicated threads; the awaiting task is suspended, not blocked.
    public func run() async -> LoadReport {
        await withCheckedContinuation { (continuation: CheckedContinuation<LoadReport, Never>) in
            let thread = Thread { continuation.resume(returning: self.runBlocking()) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    /// Runs to the limit on the calling thread (plus one thread per connection).
    public func runBlocking() -> LoadReport {
        let start = monotonicNanos()
        let deadline = options.limit.duration.map { start + nanos($0) }
        let results = Collected()
        let group = DispatchGroup()
        for _ in 0..<options.connections {
            group.enter()
            let thread = Thread {
                let result = self.work(start: start, deadline: deadline)
                results.all.withLock { $0.append(result) }
                group.leave()
            }
            thread.stackSize = 256 << 10
            thread.start()
        }
        group.wait()
        let elapsed = monotonicNanos() - start
        return report(results.all.withLock { $0 }, elapsedNanos: elapsed)
    }

    // MARK: workers

    private final class SharedState: Sendable {
        let next = Atomic<Int>(0)
        let stopped = Atomic<Bool>(false)
        let attempted = Atomic<Int>(0)
        let answered = Atomic<Int>(0)
        let ok = Atomic<Int>(0)
        let transportErrors = Atomic<Int>(0)
    }

    private final class Collected: Sendable {
        let all = Mutex<[WorkerResult]>([])
    }

    private struct WorkerResult: Sendable {
        var statusCounts: [Int: Int] = [:]
        var errorKinds: [String: Int] = [:]
        var latencies: [UInt32] = []
        var outcomes: [(Int, RequestOutcome)] = []
        var sampleBodies: [Int: String] = [:]
        var attempted = 0
    }

    private func work(start: UInt64, deadline: UInt64?) -> WorkerResult {
        var result = WorkerResult()
        var connection: LoopbackConnection?
        defer { connection?.close() }
        let timeout = options.requestTimeout
        let perRequest = options.rate.map { 1e9 / $0 }
        while !state.stopped.load(ordering: .relaxed) {
            if let deadline, monotonicNanos() >= deadline { break }
            let index = state.next.wrappingAdd(1, ordering: .relaxed).oldValue
            if let count = options.limit.count, index >= count { break }
            var due = monotonicNanos()
            if let perRequest {
                due = start + UInt64(Double(index) * perRequest)
                if let deadline, due >= deadline { break }
                sleepUntil(due)
            }
            if connection == nil {
                do {
                    connection = try LoopbackConnection(target, timeout: timeout)
                } catch {
                    // Nothing was written: the request was not sent, and is not minted either
                    // (a dead server must not cost the source any work).
                    result.errorKinds["connect", default: 0] += 1
                    state.transportErrors.add(1, ordering: .relaxed)
                    if options.recordOutcomes { result.outcomes.append((index, .notConnected)) }
                    Thread.sleep(forTimeInterval: Double(nanos(options.reconnectDelay)) / 1e9)
                    continue
                }
            }
            guard let request = source(index) else { break }
            result.attempted += 1
            state.attempted.add(1, ordering: .relaxed)
            func fail(_ kind: String) {
                result.errorKinds[kind, default: 0] += 1
                state.transportErrors.add(1, ordering: .relaxed)
                if options.recordOutcomes { result.outcomes.append((index, .transportError)) }
                connection?.close()
                connection = nil
            }
            if perRequest == nil { due = monotonicNanos() }
            let answer: LoopbackConnection.Response
            do {
                try connection!.send(request.encoded(authority: target.authority))
                answer = try connection!.readResponse()
            } catch {
                fail(error.kind)
                continue
            }
            let micros = (monotonicNanos() &- due) / 1000
            result.latencies.append(UInt32(clamping: micros))
            result.statusCounts[answer.status, default: 0] += 1
            state.answered.add(1, ordering: .relaxed)
            if (200..<300).contains(answer.status) {
                state.ok.add(1, ordering: .relaxed)
            } else if result.sampleBodies[answer.status] == nil {
                result.sampleBodies[answer.status] = String(decoding: answer.body.prefix(300), as: UTF8.self)
            }
            if options.recordOutcomes { result.outcomes.append((index, .status(answer.status))) }
            if answer.closes {
                connection?.close()
                connection = nil
            }
        }
        return result
    }

    private func report(_ results: [WorkerResult], elapsedNanos: UInt64) -> LoadReport {
        var statusCounts: [Int: Int] = [:]
        var kinds: [String: Int] = [:]
        var samples: [UInt32] = []
        var bodies: [Int: String] = [:]
        var attempted = 0
        for r in results {
            attempted += r.attempted
            r.statusCounts.forEach { statusCounts[$0.key, default: 0] += $0.value }
            r.errorKinds.forEach { kinds[$0.key, default: 0] += $0.value }
            samples.append(contentsOf: r.latencies)
            r.sampleBodies.forEach { if bodies[$0.key] == nil { bodies[$0.key] = $0.value } }
        }
        var outcomes: [RequestOutcome] = []
        if options.recordOutcomes {
            let highest = results.flatMap { $0.outcomes.map(\.0) }.max() ?? -1
            outcomes = Array(repeating: .notSent, count: highest + 1)
            for r in results { for (i, o) in r.outcomes { outcomes[i] = o } }
        }
        return LoadReport(
            attempted: attempted, statusCounts: statusCounts, transportErrors: kinds.values.reduce(0, +),
            transportErrorKinds: kinds, latency: LatencySummary(microseconds: samples),
            elapsed: .nanoseconds(Int64(elapsedNanos)), sampleBodies: bodies, outcomes: outcomes)
    }
}

// MARK: socket plumbing (also used by the reliability scenarios for raw, slow connections)

enum LoopbackSocketError: Error {
    case connect(Int32)
    case send(Int32)
    case receive(Int32)
    case timedOut
    case closed
    case malformed(String)

    var kind: String {
        switch self {
        case .connect: return "connect"
        case .send: return "send"
        case .receive: return "receive"
        case .timedOut: return "timeout"
        case .closed: return "closed"
        case .malformed: return "protocol"
        }
    }
}

extension Error {
    fileprivate var kind: String { (self as? LoopbackSocketError)?.kind ?? "other" }
}

/// One blocking TCP connection to a loopback target with send/receive timeouts.
final class LoopbackConnection {
    struct Response {
        var status: Int
        var body: [UInt8]
        /// The server said `Connection: close` (or answered HTTP/1.0): do not reuse.
        var closes: Bool
    }

    private(set) var fd: Int32
    private var buffer = [UInt8]()
    private var scratch = [UInt8](repeating: 0, count: 64 << 10)

    init(_ target: LoopbackTarget, timeout: Duration) throws(LoopbackSocketError) {
        fd = socket(target.isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw .connect(errno) }
        let ns = nanos(timeout)
        var tv = timeval(tv_sec: Int(ns / 1_000_000_000), tv_usec: Int(ns % 1_000_000_000 / 1000))
        // SO_SNDTIMEO also bounds connect() on Linux.
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let rc: Int32
        if target.isIPv6 {
            var a = sockaddr_in6()
            a.sin6_family = sa_family_t(AF_INET6)
            a.sin6_port = in_port_t(UInt16(target.port).bigEndian)
            inet_pton(AF_INET6, target.host, &a.sin6_addr)
            rc = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_port = in_port_t(UInt16(target.port).bigEndian)
            inet_pton(AF_INET, target.host, &a.sin_addr)
            rc = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        if rc != 0 {
            let code = errno
            Glibc.close(fd)
            fd = -1
            throw .connect(code)
        }
    }

    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    func send(_ bytes: [UInt8]) throws(LoopbackSocketError) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                throw (code == EAGAIN || code == EWOULDBLOCK) ? .timedOut : .send(code)
            }
            offset += n
        }
    }

    /// Reads more bytes into the buffer; throws when the peer closed or the timeout passed.
    private func fill() throws(LoopbackSocketError) {
        while true {
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer.append(contentsOf: scratch[0..<n])
                return
            }
            if n == 0 { throw .closed }
            let code = errno
            if code == EINTR { continue }
            throw (code == EAGAIN || code == EWOULDBLOCK) ? .timedOut : .receive(code)
        }
    }

    /// One response framed by Content-Length.
    func readResponse() throws(LoopbackSocketError) -> Response {
        var headerEnd: Int?
        var searchFrom = 0
        while headerEnd == nil {
            if buffer.count >= 4 {
                var i = Swift.max(0, searchFrom - 3)
                while i + 3 < buffer.count {
                    if buffer[i] == 13, buffer[i + 1] == 10, buffer[i + 2] == 13, buffer[i + 3] == 10 { headerEnd = i + 4; break }
                    i += 1
                }
                searchFrom = buffer.count
            }
            if headerEnd == nil {
                if buffer.count > 64 << 10 { throw .malformed("response head over 64 KiB") }
                try fill()
            }
        }
        let head = String(decoding: buffer[0..<headerEnd!], as: UTF8.self)
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: true)
        guard let statusLine = lines.first else { throw .malformed("empty response") }
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw .malformed("bad status line")
        }
        var length: Int?
        var closes = parts[0] == "HTTP/1.0"
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if name == "content-length" { length = Int(value) }
            if name == "connection", value.lowercased() == "close" { closes = true }
            if name == "transfer-encoding" { throw .malformed("chunked responses are not read by this client") }
        }
        guard let length, length >= 0 else { throw .malformed("response without Content-Length") }
        while buffer.count < headerEnd! + length { try fill() }
        let body = Array(buffer[headerEnd!..<(headerEnd! + length)])
        buffer.removeFirst(headerEnd! + length)
        return Response(status: status, body: body, closes: closes)
    }
}

func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

func nanos(_ d: Duration) -> UInt64 {
    let c = d.components
    return UInt64(max(0, c.seconds)) * 1_000_000_000 + UInt64(max(0, c.attoseconds) / 1_000_000_000)
}

private func sleepUntil(_ due: UInt64) {
    let now = monotonicNanos()
    guard due > now else { return }
    var ts = timespec(tv_sec: Int((due - now) / 1_000_000_000), tv_nsec: Int((due - now) % 1_000_000_000))
    nanosleep(&ts, nil)
}

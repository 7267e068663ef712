import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One request of the differential test.
public struct DiffRequest: Sendable {
    public var method: String
    public var path: String
    public var body: Data
    public var contentType: String?
    public var token: String?

    public init(method: String, path: String, body: Data = Data(), contentType: String? = nil, token: String? = nil) {
        self.method = method
        self.path = path
        self.body = body
        self.contentType = contentType
        self.token = token
    }
}

public struct DiffAnswer: Sendable {
    /// 0 when no answer came (the body then says why).
    public var status: Int
    public var body: Data
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// Sends the differential test's requests over keep-alive loopback connections (the load
/// generator's `LoopbackConnection`), each job's requests in order on one connection, jobs spread
/// over `workers` threads of their own. URLSession (libcurl) cost a fifth of the test's CPU on
/// this 2-core machine; the socket client costs next to nothing. The threads are not Swift
/// concurrency's: blocking reads on the cooperative pool could starve the in-process service's
/// own async handlers.
public final class DiffLoopbackClient: Sendable {
    let target: LoopbackTarget

    public init(port: Int) throws {
        target = try LoopbackTarget(host: "127.0.0.1", port: port)
    }

    func encode(_ r: DiffRequest) -> [UInt8] {
        var head = "\(r.method) \(r.path) HTTP/1.1\r\nHost: \(target.authority)\r\n"
        if let token = r.token { head += "Authorization: Bearer \(token)\r\n" }
        if let type = r.contentType { head += "Content-Type: \(type)\r\n" }
        if r.method == "POST" || !r.body.isEmpty { head += "Content-Length: \(r.body.count)\r\n" }
        head += "\r\n"
        return [UInt8](head.utf8) + [UInt8](r.body)
    }

    /// Answers in job order, each job's in request order.
    public func run(_ jobs: [[DiffRequest]], workers: Int) async -> [[DiffAnswer]] {
        let count = max(1, min(workers, jobs.count))
        let state = RunState(jobs: jobs.count, workers: count)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            for _ in 0..<count {
                let thread = Thread { [self] in
                    var connection: LoopbackConnection?
                    while let j = state.take() {
                        var answers: [DiffAnswer] = []
                        for r in jobs[j] { answers.append(send(r, on: &connection)) }
                        state.put(j, answers)
                    }
                    connection?.close()
                    if state.finish() { done.resume() }
                }
                thread.stackSize = 1 << 20
                thread.start()
            }
        }
        return state.results()
    }

    private func send(_ r: DiffRequest, on connection: inout LoopbackConnection?) -> DiffAnswer {
        let bytes = encode(r)
        var lastError = ""
        // A keep-alive connection the server closed is reopened once; the request is idempotent
        // for the ledger (a delivery twice is a duplicate), so a retry cannot change the outcome.
        for _ in 0..<3 {
            do {
                if connection == nil { connection = try LoopbackConnection(target, timeout: .seconds(60)) }
                try connection!.send(bytes)
                let response = try connection!.readResponse()
                if response.closes { connection?.close(); connection = nil }
                return DiffAnswer(status: response.status, body: Data(response.body))
            } catch {
                lastError = "\(error)"
                connection?.close()
                connection = nil
            }
        }
        return DiffAnswer(status: 0, body: Data("no answer: \(lastError)".utf8))
    }

    private final class RunState: Sendable {
        private let state: Mutex<(next: Int, running: Int, answers: [[DiffAnswer]?])>
        private let jobs: Int

        init(jobs: Int, workers: Int) {
            self.jobs = jobs
            state = Mutex((0, workers, Array(repeating: nil, count: jobs)))
        }

        /// True for the last worker to finish.
        func finish() -> Bool { state.withLock { s in s.running -= 1; return s.running == 0 } }

        func take() -> Int? {
            state.withLock { s in
                guard s.next < jobs else { return nil }
                defer { s.next += 1 }
                return s.next
            }
        }

        func put(_ j: Int, _ a: [DiffAnswer]) { state.withLock { $0.answers[j] = a } }
        func results() -> [[DiffAnswer]] { state.withLock { $0.answers.map { $0 ?? [] } } }
    }
}

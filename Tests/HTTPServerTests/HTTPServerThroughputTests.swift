import Foundation
@testable import HTTPServer
import XCTest

/// Measures the two ways of running async handlers on libmicrohttpd's threads. Prints figures;
/// the assertions only guard against gross regressions so the suite stays stable on a busy machine.
final class HTTPServerThroughputTests: ServerTestCase {
    private func measure(
        _ execution: HandlerExecution, handlerDelay: Duration, connections: Int, requestsPerConnection: Int
    ) throws -> Double {
        var router = Router()
        router.add("POST", "/v1/work") { request in
            if handlerDelay > .zero { try? await Task.sleep(for: handlerDelay) }
            return json(["bytes": request.body.count])
        }
        let (_, port) = try serve(router) {
            $0.threadPoolSize = 2
            $0.handlerExecution = execution
        }
        let failures = Box<Int>(0)
        let group = DispatchGroup()
        let started = Date()
        for _ in 0..<connections {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                guard let client = try? RawClient(port: port) else { return failures.update { $0 += requestsPerConnection } }
                let body = String(repeating: "x", count: 256)
                for _ in 0..<requestsPerConnection {
                    client.send("POST /v1/work HTTP/1.1\r\nHost: x\r\nContent-Length: 256\r\n\r\n\(body)")
                    if (try? client.readResponse())?.status != 200 { failures.update { $0 += 1 } }
                }
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertEqual(failures.value, 0)
        return Double(connections * requestsPerConnection) / elapsed
    }

    func testSuspendedConnectionsOutperformBlockedThreadsForSlowHandlers() throws {
        let suspended = try measure(.suspendConnection, handlerDelay: .milliseconds(10), connections: 50, requestsPerConnection: 8)
        let blocked = try measure(.blockIOThread, handlerDelay: .milliseconds(10), connections: 50, requestsPerConnection: 2)
        print(String(format: "10 ms handler, 50 keep-alive connections, 2 I/O threads: suspend %.0f req/s, block %.0f req/s", suspended, blocked))
        // Blocking is capped at 2 threads / 10 ms = 200 req/s; suspension is not.
        XCTAssertLessThan(blocked, 260)
        XCTAssertGreaterThan(suspended, 2 * blocked)
    }

    func testFastHandlerThroughput() throws {
        let suspended = try measure(.suspendConnection, handlerDelay: .zero, connections: 8, requestsPerConnection: 400)
        let blocked = try measure(.blockIOThread, handlerDelay: .zero, connections: 8, requestsPerConnection: 400)
        print(String(format: "instant handler, 8 keep-alive connections, 2 I/O threads: suspend %.0f req/s, block %.0f req/s", suspended, blocked))
        XCTAssertGreaterThan(suspended, 300)
    }
}

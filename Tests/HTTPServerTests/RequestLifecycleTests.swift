import Foundation
@testable import HTTPServer
import LedgerTesting
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// Every request's state is retained for libmicrohttpd in the first callback and must be released
/// exactly once, whatever way the request ends.
final class RequestLifecycleTests: ServerTestCase {
    private func waitForNoLiveRequests(seconds: Double) -> Int {
        let deadline = Date().addingTimeInterval(seconds)
        while RequestState.live.load(ordering: .relaxed) != 0, Date() < deadline { usleep(10_000) }
        return RequestState.live.load(ordering: .relaxed)
    }

    func testEveryWayARequestEndsReleasesItsState() throws {
        // Handlers of earlier tests that ignore cancellation may still hold theirs for a moment.
        XCTAssertEqual(waitForNoLiveRequests(seconds: 5), 0)
        let entered = DispatchSemaphore(value: 0)
        var router = Router()
        router.add("POST", "/upload") { request in json(["bytes": request.body.count]) }
        router.add("GET", "/slow") { _ in
            entered.signal()
            try? await Task.sleep(for: .milliseconds(200))
            return .text(200, "slow")
        }
        router.add("GET", "/hang") { _ in
            try? await Task.sleep(for: .seconds(30))
            return .text(200, "never")
        }
        let (server, port) = try serve(router) {
            $0.maxBodyBytes = 100
            $0.connectionTimeoutSeconds = 1
        }
        // Answered normally, 404, 405, early 413, chunked 413, encoded NUL.
        XCTAssertEqual(try RawClient.request(port: port, method: "POST", path: "/upload", body: [1, 2]).status, 200)
        XCTAssertEqual(try RawClient.request(port: port, path: "/missing").status, 404)
        XCTAssertEqual(try RawClient.request(port: port, path: "/upload").status, 405)
        XCTAssertEqual(try RawClient.request(port: port, method: "POST", path: "/upload", body: Array(repeating: 0, count: 101)).status, 413)
        let chunked = try RawClient(port: port)
        chunked.send("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n80\r\n\(String(repeating: "c", count: 128))\r\n0\r\n\r\n")
        XCTAssertEqual(try chunked.readResponse().status, 413)
        XCTAssertEqual(try RawClient.request(port: port, path: "/a%00b").status, 400)
        // Client gives up halfway through a body: ended by the connection error.
        let halfBody = try RawClient(port: port)
        halfBody.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nonly-some")
        usleep(50_000)
        halfBody.closeNow()
        // Client hangs up while its handler runs: the answer goes nowhere.
        let impatient = try RawClient(port: port)
        impatient.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(entered.wait(timeout: .now() + 5), .success)
        impatient.closeNow()
        // Client stalls mid-body until the idle timeout.
        let stalled = try RawClient(port: port)
        stalled.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nabc")
        XCTAssertTrue(stalled.waitForClose(seconds: 4))
        // A handler still running at shutdown: answered 503, then released.
        let hanging = try RawClient(port: port)
        hanging.send("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
        let deadline = Date().addingTimeInterval(2)
        while server.inFlightRequests == 0, Date() < deadline { usleep(5_000) }
        blocking { await server.shutdown(gracePeriod: .milliseconds(100)) }
        XCTAssertEqual(try hanging.readResponse().status, 503)
        // Shutdown cancelled the hung handler, so its task let go of the state too.
        XCTAssertEqual(waitForNoLiveRequests(seconds: 3), 0)
    }
}

import Foundation
import HTTPServer
import XCTest
#if canImport(Glibc)
import Glibc
#endif

final class ShutdownSignalsTests: XCTestCase {
    func testFirstSignalCallsTheClosureOnceAndTheProcessSurvives() {
        let calls = Box<Int>(0)
        let called = DispatchSemaphore(value: 0)
        ShutdownSignals.install {
            calls.update { $0 += 1 }
            called.signal()
        }
        kill(getpid(), SIGTERM)
        XCTAssertEqual(called.wait(timeout: .now() + 5), .success)
        kill(getpid(), SIGINT)
        kill(getpid(), SIGTERM)
        XCTAssertEqual(called.wait(timeout: .now() + 0.3), .timedOut)
        XCTAssertEqual(calls.value, 1)
    }
}

import Foundation
import XCTest
@testable import LedgerCore

/// The one clock and the one conversion between milliseconds, seconds, `Date` and `Duration`.
final class LedgerClockTests: XCTestCase {
    func testASettableClockReadsWhatTheTestSetsAndMoves() {
        let settable = SettableClock(1_735_689_600_000)
        let clock = settable.clock
        XCTAssertEqual(clock.now(), 1_735_689_600_000)
        settable.advance(by: .seconds(90))
        XCTAssertEqual(clock.now(), 1_735_689_690_000)
        settable.advance(by: .milliseconds(-1))
        XCTAssertEqual(clock.now(), 1_735_689_689_999)
        settable.set(42)
        XCTAssertEqual(clock.now(), 42)
        XCTAssertEqual(LedgerClock.fixed(7).now(), 7)
    }

    func testTheSystemClockIsTheWallClockInMilliseconds() {
        let before = EpochMillis(Date().timeIntervalSince1970 * 1000) - 1
        let now = LedgerClock.system.now()
        let after = EpochMillis(Date().timeIntervalSince1970 * 1000) + 1
        XCTAssertTrue((before...after).contains(now), "\(before) ≤ \(now) ≤ \(after)")
    }

    func testConversionsRoundTripAndRoundDown() {
        XCTAssertEqual(EpochTime.millis(EpochTime.date(1_735_689_600_123)), 1_735_689_600_123)
        XCTAssertEqual(EpochTime.millis(Date(timeIntervalSince1970: 1.9999)), 1999, "rounded down, never up")
        XCTAssertEqual(EpochTime.millis(Date(timeIntervalSince1970: -0.0005)), -1, "before 1970 rounds down too")
        XCTAssertEqual(EpochTime.millis(seconds: 1_735_689_600), 1_735_689_600_000)
        XCTAssertNil(EpochTime.millis(seconds: .max), "an overflow is refused, not wrapped")
        XCTAssertNil(EpochTime.millis(seconds: .min))
        XCTAssertEqual(EpochTime.millis(.milliseconds(1500)), 1500)
        XCTAssertEqual(EpochTime.millis(.microseconds(2999)), 2, "toward zero")
        XCTAssertEqual(EpochTime.millis(.seconds(-2)), -2000)
        XCTAssertEqual(EpochTime.seconds(.milliseconds(250)), 0.25, accuracy: 1e-12)
        XCTAssertEqual(EpochTime.seconds(.nanoseconds(1)), 1e-9, accuracy: 1e-15)
    }
}

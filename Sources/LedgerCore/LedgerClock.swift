import Foundation
import Synchronization

/// The ledger's one wall clock: "now" in milliseconds since 1970, the unit of Apple's fields and
/// of the API. Injected wherever the time matters (folds evaluated "now", policies, stored
/// decisions), so a test fixes or moves it instead of waiting for it. `system` reads the machine;
/// `fixed` and `SettableClock` are for tests.
public struct LedgerClock: Sendable {
    private let read: @Sendable () -> EpochMillis

    public init(_ read: @escaping @Sendable () -> EpochMillis) { self.read = read }

    /// The current time (ms since 1970).
    public func now() -> EpochMillis { read() }

    /// The machine's clock, rounded down to the millisecond.
    public static let system = LedgerClock { EpochTime.millis(Date()) }

    /// A clock that always reads `millis`.
    public static func fixed(_ millis: EpochMillis) -> LedgerClock { LedgerClock { millis } }
}

/// A clock a test sets and moves by hand; `clock` reads it.
public final class SettableClock: Sendable {
    private let value: Mutex<EpochMillis>

    public init(_ millis: EpochMillis) { value = Mutex(millis) }

    public var clock: LedgerClock { LedgerClock { self.value.withLock { $0 } } }

    public func set(_ millis: EpochMillis) { value.withLock { $0 = millis } }

    public func advance(by duration: Duration) { value.withLock { $0 += EpochTime.millis(duration) } }
}

/// The one conversion between the ledger's millisecond times, `Date`, seconds and `Duration`.
public enum EpochTime {
    /// `date` in milliseconds since 1970, rounded down.
    public static func millis(_ date: Date) -> EpochMillis {
        EpochMillis((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// The `Date` of `millis` since 1970.
    public static func date(_ millis: EpochMillis) -> Date {
        Date(timeIntervalSince1970: Double(millis) / 1000)
    }

    /// Whole seconds since 1970 (WeChat's unit) in milliseconds; nil when it does not fit.
    public static func millis(seconds: Int64) -> EpochMillis? {
        let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        return overflow ? nil : ms
    }

    /// `duration` in whole milliseconds (rounded toward zero).
    public static func millis(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// `duration` in seconds, with its fraction.
    public static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

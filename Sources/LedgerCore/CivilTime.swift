/// A UTC calendar time from epoch milliseconds, without a formatter object (LedgerCore holds
/// only value types, and DateFormatter is slow on Linux). Howard Hinnant's civil_from_days.
public struct CivilTime: Sendable, Equatable {
    public var year: Int64, month: Int64, day: Int64
    public var hour: Int64, minute: Int64, second: Int64, millisecond: Int64

    /// Nil beyond ±300,000 years, where the arithmetic could overflow; no real time is there.
    public init?(epochMillis ms: EpochMillis) {
        guard ms > -9_000_000_000_000_000 && ms < 9_000_000_000_000_000 else { return nil }
        let days = ms >= 0 ? ms / 86_400_000 : (ms - 86_399_999) / 86_400_000
        let msOfDay = ms - days * 86_400_000
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        day = doy - (153 * mp + 2) / 5 + 1
        month = mp < 10 ? mp + 3 : mp - 9
        year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        hour = msOfDay / 3_600_000
        minute = msOfDay / 60_000 % 60
        second = msOfDay / 1000 % 60
        millisecond = msOfDay % 1000
    }

    /// `v` in decimal, left-padded with zeros to `width` digits (negative years keep their sign).
    public static func padded(_ v: Int64, _ width: Int) -> String {
        let s = String(v)
        return s.count >= width || v < 0 ? s : String(repeating: "0", count: width - s.count) + s
    }
}

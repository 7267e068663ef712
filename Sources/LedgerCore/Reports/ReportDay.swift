/// A UTC calendar day as days since 1970-01-01: the unit every report figure is kept by. Reports
/// are per UTC day because the ledger has no time zone of its own (Apple and WeChat sign in UTC
/// milliseconds); a figure "on a day" is the state at the last millisecond of that day.
public struct ReportDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var index: Int64

    public init(index: Int64) { self.index = index }

    public static let millis: EpochMillis = 86_400_000

    /// The day an instant falls on.
    public init(containing t: EpochMillis) {
        index = t >= 0 ? t / Self.millis : (t - (Self.millis - 1)) / Self.millis
    }

    /// Howard Hinnant's days_from_civil; nil for a date that does not exist (2026-02-30).
    public init?(year: Int64, month: Int64, day: Int64) {
        guard (1...12).contains(month), (1...Self.daysIn(year: year, month: month)).contains(day),
              (-100_000...100_000).contains(year) else { return nil }
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = month > 2 ? month - 3 : month + 9
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        index = era * 146_097 + doe - 719_468
    }

    /// `YYYY-MM-DD` only (what the reports' `from` and `to` take); nil for anything else.
    public init?(text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard text.utf8.count == 10, parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
              parts.allSatisfy({ $0.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }),
              let y = Int64(parts[0]), let m = Int64(parts[1]), let d = Int64(parts[2]) else { return nil }
        self.init(year: y, month: m, day: d)
    }

    static func isLeap(_ y: Int64) -> Bool { (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 }

    static func daysIn(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    public var civil: CivilTime { CivilTime(epochMillis: index * Self.millis)! }

    /// The first millisecond of the day.
    public var start: EpochMillis { index * Self.millis }
    /// The last millisecond of the day: where a day's states are read.
    public var lastMillisecond: EpochMillis { start + Self.millis - 1 }

    public func adding(days n: Int64) -> ReportDay { ReportDay(index: index + n) }

    /// The first day of this day's month.
    public var monthStart: ReportDay {
        let c = civil
        return ReportDay(year: c.year, month: c.month, day: 1)!
    }

    /// The first day of the month `n` months after this day's month.
    public func monthStart(adding n: Int64) -> ReportDay {
        let c = civil
        let m0 = c.year * 12 + (c.month - 1) + n
        let y = m0 >= 0 ? m0 / 12 : (m0 - 11) / 12
        return ReportDay(year: y, month: m0 - y * 12 + 1, day: 1)!
    }

    /// The last day of this day's month.
    public var monthEnd: ReportDay { monthStart(adding: 1).adding(days: -1) }

    /// The Monday of this day's ISO week (1970-01-01 was a Thursday).
    public var weekStart: ReportDay {
        let weekday = ((index + 3) % 7 + 7) % 7  // 0 = Monday
        return ReportDay(index: index - weekday)
    }

    /// `YYYY-MM-DD`.
    public var text: String {
        let c = civil
        return "\(CivilTime.padded(c.year, 4))-\(CivilTime.padded(c.month, 2))-\(CivilTime.padded(c.day, 2))"
    }

    /// `YYYY-MM`.
    public var monthText: String { String(text.prefix(7)) }

    public var description: String { text }

    public static func < (a: ReportDay, b: ReportDay) -> Bool { a.index < b.index }
}

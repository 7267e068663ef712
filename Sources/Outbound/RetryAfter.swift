import Foundation

/// `Retry-After` read into an absolute time in milliseconds since the epoch: RFC 9110's
/// delay-seconds (`120`) and HTTP-date (`Fri, 15 Jan 2027 08:00:00 GMT`), and Apple's absolute
/// UNIX time in milliseconds (reference/appstore-server-api.md §4). nil when absent or unreadable.
public enum RetryAfter {
    public static func absoluteMillis(_ value: String?, now: Int64) -> Int64? {
        guard let text = value?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let n = Int64(text), n >= 0 {
            // ≥ 10^12 is a time in ms (after 2001); ≥ 10^9 a time in seconds (a delay of 31 years
            // is no delay anyone means); smaller numbers are RFC delay-seconds.
            if n >= 1_000_000_000_000 { return n }
            if n >= 1_000_000_000 { return n.multipliedReportingOverflow(by: 1000).overflow ? nil : n * 1000 }
            return now + n * 1000
        }
        if let d = Double(text), d.isFinite, d >= 0, d < 1e9 { return now + Int64(d * 1000) }
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return Int64(date.timeIntervalSince1970 * 1000) }
        }
        return nil
    }
}

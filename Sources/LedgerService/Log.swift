import Foundation
import Synchronization

/// Structured JSON log lines on standard error, one object per line. Values are JSON-escaped, so a
/// hostile value cannot forge a line (log injection). Secrets are never passed in: configuration
/// holds them as `Secret`, which prints as `<redacted>`.
public final class Log: Sendable {
    public enum Level: String, Sendable, Comparable {
        case debug, info, warn, error

        private var rank: Int { switch self { case .debug: 0; case .info: 1; case .warn: 2; case .error: 3 } }
        public static func < (a: Level, b: Level) -> Bool { a.rank < b.rank }
    }

    public static let shared = Log()
    private let lock = Mutex(())
    private let minimum: Level
    /// Where lines go instead of standard error (tests read what was logged).
    private let sink: (@Sendable (String) -> Void)?

    public init(minimum: Level = .info, sink: (@Sendable (String) -> Void)? = nil) {
        self.minimum = minimum
        self.sink = sink
    }

    public func log(_ level: Level, _ message: String, _ fields: [String: any Sendable] = [:]) {
        if level < minimum { return }
        var line = "{\"ts\":\"\(Self.timestamp())\",\"level\":\"\(level.rawValue)\",\"msg\":"
        JSONText.appendString(message, to: &line)
        for key in fields.keys.sorted() {
            line += ","
            JSONText.appendString(key, to: &line)
            line += ":"
            switch fields[key]! {
            case let v as Int: line += String(v)
            case let v as Int64: line += String(v)
            case let v as Double: line += v.isFinite ? String(v) : "null"
            case let v as Bool: line += v ? "true" : "false"
            case let v: JSONText.appendString(String(describing: v), to: &line)
            }
        }
        line += "}\n"
        if let sink { return sink(line) }
        lock.withLock { _ in FileHandle.standardError.write(Data(line.utf8)) }
    }

    public func info(_ m: String, _ f: [String: any Sendable] = [:]) { log(.info, m, f) }
    public func warn(_ m: String, _ f: [String: any Sendable] = [:]) { log(.warn, m, f) }
    public func error(_ m: String, _ f: [String: any Sendable] = [:]) { log(.error, m, f) }

    private static func timestamp() -> String {
        var tv = timeval()
        gettimeofday(&tv, nil)
        var t = time_t(tv.tv_sec)
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday,
                      tmv.tm_hour, tmv.tm_min, tmv.tm_sec, Int(tv.tv_usec / 1000))
    }
}

/// JSON string escaping on bytes (fast, and total: every control character is escaped).
public enum JSONText {
    public static func appendString(_ s: String, to out: inout String) {
        out += "\""
        var needsEscape = false
        for b in s.utf8 where b < 0x20 || b == 0x22 || b == 0x5C { needsEscape = true; break }
        if !needsEscape { out += s; out += "\""; return }
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }

    public static func string(_ s: String) -> String {
        var out = ""
        appendString(s, to: &out)
        return out
    }
}

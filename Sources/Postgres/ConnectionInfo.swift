internal import CLibPQ

/// A parsed connection string (keyword/value or `postgresql://` URL, whichever libpq accepts),
/// so callers can change one setting — typically `dbname` or `user` — without string surgery.
public struct ConnectionInfo: Sendable, Equatable, CustomStringConvertible {
    /// Settings in libpq's keyword order; only those that were given.
    public private(set) var settings: [(key: String, value: String)]

    public init(parsing conninfo: String) throws(PostgresError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(conninfo, &errorMessage) else {
            let reason = errorMessage.map { String(cString: $0) } ?? "out of memory"
            if let errorMessage { PQfreemem(errorMessage) }
            // The reason names the bad keyword; the string itself may hold a password.
            throw PostgresError(.invalidArgument, "cannot parse the database connection string: \(reason.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        defer { PQconninfoFree(options) }
        var settings: [(key: String, value: String)] = []
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val {
                settings.append((String(cString: keyword), String(cString: value)))
            }
            option += 1
        }
        self.settings = settings
    }

    public subscript(key: String) -> String? {
        get { settings.first { $0.key == key }?.value }
        set {
            settings.removeAll { $0.key == key }
            if let newValue { settings.append((key, newValue)) }
        }
    }

    /// A copy with `key` set to `value`.
    public func with(_ key: String, _ value: String) -> ConnectionInfo {
        var copy = self
        copy[key] = value
        return copy
    }

    /// The keyword/value string libpq reads back, every value quoted.
    public var conninfo: String {
        settings.map { "\($0.key)=\(Self.quote($0.value))" }.joined(separator: " ")
    }

    /// Without the password, for logs and errors.
    public var description: String {
        settings.filter { $0.key != "password" }.map { "\($0.key)=\(Self.quote($0.value))" }.joined(separator: " ")
    }

    static func quote(_ value: String) -> String {
        var out = "'"
        for character in value {
            if character == "'" || character == "\\" { out.append("\\") }
            out.append(character)
        }
        return out + "'"
    }

    public static func == (lhs: ConnectionInfo, rhs: ConnectionInfo) -> Bool {
        lhs.settings.elementsEqual(rhs.settings) { $0.key == $1.key && $0.value == $1.value }
    }
}

import Foundation

/// `--name value`, `--name=value` and bare `--flag` options after a command, plus positionals.
public struct Arguments: Sendable {
    public var options: [String: String] = [:]
    public var flags: Set<String> = []
    public var positionals: [String] = []

    public enum Failure: Error, CustomStringConvertible {
        case unknownOption(String, command: String)
        case missingValue(String)
        case invalidValue(String, String)
        public var description: String {
            switch self {
            case .unknownOption(let o, let c): return "unknown option \(o) for '\(c)' (see: \(programName) \(c) --help)"
            case .missingValue(let o): return "option \(o) needs a value"
            case .invalidValue(let o, let why): return "option \(o): \(why)"
            }
        }
    }

    /// `valued` are options that take a value; `boolean` are flags.
    public init(_ args: [String], command: String, valued: Set<String>, boolean: Set<String>) throws {
        var i = 0
        while i < args.count {
            let a = args[i]
            if a == "--" { positionals += args[(i + 1)...]; break }
            if a.hasPrefix("--") {
                var name = String(a.dropFirst(2))
                var value: String?
                if let eq = name.firstIndex(of: "=") { value = String(name[name.index(after: eq)...]); name = String(name[..<eq]) }
                if boolean.contains(name) || name == "help" {
                    flags.insert(name)
                } else if valued.contains(name) {
                    if value == nil {
                        i += 1
                        guard i < args.count else { throw Failure.missingValue("--" + name) }
                        value = args[i]
                    }
                    options[name] = value
                } else {
                    throw Failure.unknownOption(a, command: command)
                }
            } else if a == "-h" {
                flags.insert("help")
            } else {
                positionals.append(a)
            }
            i += 1
        }
    }

    public func int(_ name: String, default d: Int) throws -> Int {
        guard let v = options[name] else { return d }
        guard let n = Int(v.replacingOccurrences(of: "_", with: "")), n >= 0 else {
            throw Failure.invalidValue("--" + name, "'\(v)' is not a non-negative integer")
        }
        return n
    }

    public func has(_ flag: String) -> Bool { flags.contains(flag) }
}

/// The executable's name as invoked (`ledger` or `ledger-dev`), for messages that say what to run.
public var programName: String {
    URL(fileURLWithPath: CommandLine.arguments.first ?? "ledger").lastPathComponent
}

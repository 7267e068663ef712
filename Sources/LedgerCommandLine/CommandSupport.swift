import Foundation
import Synchronization

// The command-line plumbing both executables share (`ledger` and `ledger-dev`): option parsing,
// failures with exit codes, progress bars. A target of its own rather than a copy in each, so the
// two binaries parse and report alike; it depends on Foundation only, so it adds nothing to
// `ledger` that the product does not already have.

/// A command that stops with a message for the operator and an exit code.
public struct CommandFailure: Error {
    public var message: String
    public var exitCode: Int32

    public init(message: String, exitCode: Int32 = 1) {
        self.message = message
        self.exitCode = exitCode
    }
}

/// Prints `help` and exits when --help was given.
public func handleHelp(_ args: Arguments, _ help: String) {
    if args.has("help") {
        print(help)
        exit(0)
    }
}

public func parse(_ raw: [String], command: String, valued: Set<String> = [], boolean: Set<String> = [], help: String) throws -> Arguments {
    do {
        let a = try Arguments(raw, command: command, valued: valued, boolean: boolean)
        handleHelp(a, help)
        return a
    } catch let e as Arguments.Failure {
        throw CommandFailure(message: e.description, exitCode: 2)
    }
}

/// A one-line progress bar on a terminal (events/s and ETA); silent when stderr is not a TTY.
public final class ProgressBar: @unchecked Sendable {
    private let total: Int
    private let label: String
    private let start = Date()
    private var last = Date.distantPast
    private let isTTY = isatty(STDERR_FILENO) == 1

    public init(total: Int, label: String) { self.total = max(total, 1); self.label = label }

    public func update(_ done: Int, force: Bool = false) {
        guard isTTY else { return }
        let now = Date()
        guard force || now.timeIntervalSince(last) > 0.1 else { return }
        last = now
        let elapsed = max(now.timeIntervalSince(start), 0.001)
        let rate = Double(done) / elapsed
        let fraction = min(Double(done) / Double(total), 1)
        let width = 30
        let filled = Int(fraction * Double(width))
        let eta = rate > 0 ? Double(total - done) / rate : 0
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let line = String(format: "\r%@ [%@] %3.0f%% %d/%d  %.0f/s  ETA %.0fs ", label, bar, fraction * 100, done, total, rate, max(eta, 0))
        FileHandle.standardError.write(Data(line.utf8))
    }

    public func finish(_ done: Int) {
        update(done, force: true)
        if isTTY { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

/// A progress bar whose total is known only once the rebuild has its snapshot.
public final class LazyProgressBar: Sendable {
    private struct State {
        var bar: ProgressBar?
        var last = 0
    }

    private let label: String
    private let state = Mutex(State())

    public init(label: String) { self.label = label }

    public func update(_ done: Int, _ total: Int) {
        state.withLock { s in
            if s.bar == nil { s.bar = ProgressBar(total: total, label: label) }
            s.last = done
            s.bar?.update(done)
        }
    }

    public func finish() {
        state.withLock { s in s.bar?.finish(s.last) }
    }
}

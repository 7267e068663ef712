import Foundation

/// A command that stops with a message for the operator and an exit code.
struct CommandFailure: Error {
    var message: String
    var exitCode: Int32 = 1
}

/// Prints `help` and exits when --help was given.
func handleHelp(_ args: Arguments, _ help: String) {
    if args.has("help") {
        print(help)
        exit(0)
    }
}

func parse(_ raw: [String], command: String, valued: Set<String> = [], boolean: Set<String> = [], help: String) throws -> Arguments {
    do {
        let a = try Arguments(raw, command: command, valued: valued, boolean: boolean)
        handleHelp(a, help)
        return a
    } catch let e as Arguments.Failure {
        throw CommandFailure(message: e.description, exitCode: 2)
    }
}

/// A one-line progress bar on a terminal (events/s and ETA); silent when stderr is not a TTY.
final class ProgressBar: @unchecked Sendable {
    private let total: Int
    private let label: String
    private let start = Date()
    private var last = Date.distantPast
    private let isTTY = isatty(STDERR_FILENO) == 1

    init(total: Int, label: String) { self.total = max(total, 1); self.label = label }

    func update(_ done: Int, force: Bool = false) {
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

    func finish(_ done: Int) {
        update(done, force: true)
        if isTTY { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

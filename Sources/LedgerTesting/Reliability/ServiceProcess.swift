import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The real `ledger serve` binary as a child process on a loopback port: started, waited for,
/// killed (-9) or stopped (SIGTERM) exactly as an operator or the kernel would. Output goes to a
/// log file whose tail is quoted when something goes wrong.
final class ServiceProcess {
    let binary: String
    let environment: [String: String]
    let target: LoopbackTarget
    let logURL: URL
    /// `serve` by default; `project` runs the catch-up worker, which has no port to probe.
    let arguments: [String]
    private var process: Process?
    private(set) var starts = 0

    init(binary: String, environment: [String: String], target: LoopbackTarget, logURL: URL, arguments: [String] = ["serve"]) {
        self.binary = binary
        self.environment = environment
        self.target = target
        self.logURL = logURL
        self.arguments = arguments
    }

    var servesHTTP: Bool { arguments.first == "serve" }

    var pid: Int32? { process?.processIdentifier }
    var isRunning: Bool { process?.isRunning ?? false }

    /// Starts the service and returns once `/healthz` answers 200 (bounded by `timeout`).
    func start(timeout: Duration = .seconds(30)) throws(ReliabilityError) {
        if !FileManager.default.fileExists(atPath: logURL.path) {
            _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        }
        let log: FileHandle
        do {
            log = try FileHandle(forWritingTo: logURL)
            try log.seekToEnd()
        } catch {
            throw .setup("cannot write the service log \(logURL.path): \(error)")
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = arguments
        p.environment = environment
        p.standardOutput = log
        p.standardError = log
        p.standardInput = FileHandle.nullDevice
        do { try p.run() } catch {
            throw .setup("cannot start \(binary) serve: \(error); build it first (swift build -c release --product ledger)")
        }
        process = p
        starts += 1
        if !servesHTTP {
            // Nothing to probe: alive after a moment is started.
            Thread.sleep(forTimeInterval: 0.5)
            guard p.isRunning else {
                throw .serviceFailed("`ledger \(arguments.joined(separator: " "))` exited with status \(p.terminationStatus) while starting; log tail:\n\(logTail())")
            }
            return
        }
        let deadline = monotonicNanos() + nanos(timeout)
        while monotonicNanos() < deadline {
            if !p.isRunning {
                throw .serviceFailed("`ledger serve` exited with status \(p.terminationStatus) while starting; log tail:\n\(logTail())")
            }
            if healthy() { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        kill(p.processIdentifier, SIGKILL)
        throw .serviceFailed("`ledger serve` did not answer /healthz on \(target) within \(timeout); log tail:\n\(logTail())")
    }

    func healthy() -> Bool {
        guard let c = try? LoopbackConnection(target, timeout: .seconds(1)) else { return false }
        defer { c.close() }
        guard (try? c.send(LoadRequest(path: "/healthz").encoded(authority: target.authority))) != nil,
              let answer = try? c.readResponse() else { return false }
        return answer.status == 200
    }

    /// SIGKILL: no chance to finish anything, exactly like a crash or the OOM killer.
    func kill9() throws(ReliabilityError) {
        guard let p = process, p.isRunning else { throw .serviceFailed("the service was not running when it was to be killed; log tail:\n\(logTail())") }
        kill(p.processIdentifier, SIGKILL)
        _ = try waitForExit(timeout: .seconds(10))
    }

    /// SIGTERM, then waits for the exit; returns the exit status and how long it took.
    func terminate(timeout: Duration) throws(ReliabilityError) -> (status: Int32, seconds: Double) {
        guard let p = process, p.isRunning else { throw .serviceFailed("the service was not running when it was to be stopped; log tail:\n\(logTail())") }
        let started = monotonicNanos()
        kill(p.processIdentifier, SIGTERM)
        let status = try waitForExit(timeout: timeout)
        return (status, Double(monotonicNanos() - started) / 1e9)
    }

    /// Stops whatever is left at the end of a scenario (never leaves a child behind).
    func stopQuietly() {
        guard let p = process, p.isRunning else { return }
        kill(p.processIdentifier, SIGTERM)
        if (try? waitForExit(timeout: .seconds(15))) == nil {
            kill(p.processIdentifier, SIGKILL)
            _ = try? waitForExit(timeout: .seconds(5))
        }
    }

    private func waitForExit(timeout: Duration) throws(ReliabilityError) -> Int32 {
        guard let p = process else { return 0 }
        let deadline = monotonicNanos() + nanos(timeout)
        while p.isRunning {
            if monotonicNanos() >= deadline {
                throw .serviceFailed("`ledger serve` (pid \(p.processIdentifier)) did not exit within \(timeout); log tail:\n\(logTail())")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return p.terminationReason == .uncaughtSignal ? 128 + p.terminationStatus : p.terminationStatus
    }

    func logTail(lines: Int = 20) -> String {
        guard let data = FileManager.default.contents(atPath: logURL.path) else { return "(no log)" }
        return String(decoding: data.suffix(16 << 10), as: UTF8.self).split(separator: "\n").suffix(lines).joined(separator: "\n")
    }

    /// A free port: bind port 0, read what the kernel gave, release it. (The service then binds
    /// it itself; a race with another process is possible but harmless — start() would fail loudly.)
    static func freeLoopbackPort() throws(ReliabilityError) -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw .setup("socket() failed: errno \(errno)") }
        defer { close(fd) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = 0
        a.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &a) { ptr in
            ptr.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard bound else { throw .setup("cannot find a free loopback port: errno \(errno)") }
        return Int(UInt16(bigEndian: a.sin_port))
    }
}

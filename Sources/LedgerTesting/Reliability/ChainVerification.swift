import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `ledger verify` (the product's own command, the auditor's proof) run as a child over a scratch
/// database at the end of a reliability scenario or the scale run: the hash chain over every event
/// and every stored signature must hold after whatever the scenario broke (issue 25 item 6). The
/// binary, not LogVerifier in-process, so the check is exactly what an operator runs.
public enum ChainVerification {
    /// Runs `binary verify` with `environment` (LEDGER_DATABASE_URL and the Apple / WeChat
    /// configuration the service ran with, so every signature is re-verified against the same
    /// roots and keys). Returns (passed, detail): passed only on exit status 0 and the
    /// "intact" line; detail quotes `ledger verify`'s report.
    public static func run(binary: String, environment: [String: String], timeout: Duration = .seconds(120)) -> (passed: Bool, detail: String) {
        let logURL = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-verify-\(UUID().uuidString.prefix(8)).log")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: logURL) }
        guard let log = try? FileHandle(forWritingTo: logURL) else { return (false, "cannot write \(logURL.path)") }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["verify"]
        p.environment = environment
        p.standardOutput = log
        p.standardError = log
        p.standardInput = FileHandle.nullDevice
        do { try p.run() } catch { return (false, "cannot start \(binary) verify: \(error)") }
        let deadline = monotonicNanos() + nanos(timeout)
        while p.isRunning {
            if monotonicNanos() >= deadline {
                kill(p.processIdentifier, SIGKILL)
                p.waitUntilExit()
                return (false, "`ledger verify` did not finish within \(timeout)")
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        try? log.close()
        let output = (FileManager.default.contents(atPath: logURL.path)).map { String(decoding: $0, as: UTF8.self) } ?? ""
        // The progress bar redraws with \r; keep the report's lines.
        let lines = output.split(whereSeparator: { $0 == "\n" || $0 == "\r" }).map(String.init)
            .filter { $0.hasPrefix("checked ") || $0.hasPrefix("intact") || $0.contains("BROKEN") || $0.hasPrefix("  also") || $0.hasPrefix("ledger") }
        let status = p.terminationStatus
        let passed = p.terminationReason == .exit && status == 0 && lines.contains { $0.hasPrefix("intact") }
        return (passed, "exit \(status): " + (lines.isEmpty ? String(output.suffix(400)) : lines.prefix(4).joined(separator: " / ")))
    }
}

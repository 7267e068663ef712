import AppStore
import Foundation

/// Measures `SignedDataVerifier` throughput on a cached chain (the steady state: one P-256 verify
/// per JWS) next to what OpenSSL itself manages for P-256 verifies on this machine, so the
/// overhead of parsing and caching is visible.
public enum VerifierBenchmark {
    public struct Report: Sendable, CustomStringConvertible {
        public var verifications: Int
        public var seconds: Double
        public var verificationsPerSecond: Double { seconds > 0 ? Double(verifications) / seconds : 0 }
        public var chainValidations: Int
        /// `openssl speed -seconds N ecdsap256` verify/s, nil when openssl could not be run.
        public var opensslVerifiesPerSecond: Double?
        public var opensslNote: String
        /// Every run's verifications/s and openssl verify/s (the fields above are the last run's).
        public var verifierRuns: [Double] = []
        public var opensslRuns: [Double] = []

        /// Verifications/s against `openssl speed ecdsap256` verify/s of the same run: the
        /// verifier's one P-256 verify plus JWS parsing and the cached chain check, against the bare
        /// signature check. Nil when openssl did not run.
        public var summary: BenchSummary? {
            guard !opensslRuns.isEmpty else { return nil }
            return BenchSummary(name: "verify", command: "ledger-dev bench verify", unit: "verifications/s",
                                ledgerLabel: "SignedDataVerifier (JWS parse, cached chain, ES256)", ledger: verifierRuns,
                                baselineLabel: "openssl speed ecdsap256 (verify only)", baseline: opensslRuns,
                                details: ["chain validations": Double(chainValidations)])
        }

        public var description: String {
            var s = String(format: "SignedDataVerifier (cached chain): %.0f verifications/s (%d in %.2f s, %d chain validation(s))",
                           verificationsPerSecond, verifications, seconds, chainValidations)
            if let o = opensslVerifiesPerSecond {
                s += String(format: "\nopenssl speed ecdsap256:           %.0f verify/s (ratio %.2f)", o, verificationsPerSecond / o)
            } else {
                s += "\nopenssl speed ecdsap256: unavailable (\(opensslNote))"
            }
            return s
        }
    }

    /// Verifies one transaction JWS repeatedly for `seconds`, then runs `openssl speed`.
    /// `runs` alternating runs of the verifier and of openssl; the report holds every run.
    public static func run(seconds: Double = 3, opensslSeconds: Int = 3, runOpenSSL: Bool = true, runs: Int) throws -> Report {
        var report = try run(seconds: seconds, opensslSeconds: opensslSeconds, runOpenSSL: runOpenSSL)
        var verifier = [report.verificationsPerSecond], openssl = report.opensslVerifiesPerSecond.map { [$0] } ?? []
        for _ in 1..<max(1, runs) {
            report = try run(seconds: seconds, opensslSeconds: opensslSeconds, runOpenSSL: runOpenSSL && !openssl.isEmpty)
            verifier.append(report.verificationsPerSecond)
            if let o = report.opensslVerifiesPerSecond { openssl.append(o) }
        }
        report.verifierRuns = verifier
        report.opensslRuns = openssl.count == verifier.count ? openssl : []
        return report
    }

    public static func run(seconds: Double = 3, opensslSeconds: Int = 3, runOpenSSL: Bool = true) throws -> Report {
        let authority = try AppleTestAuthority.mint()
        let sample = AppleTestAuthority.sample()
        let jws = try authority.sign(sample.transaction)
        let verifier = authority.verifier()
        _ = try verifier.verify(jws, kind: .transaction)  // warm the chain cache
        var count = 0
        let start = Date()
        var elapsed = 0.0
        while elapsed < seconds {
            for _ in 0..<100 { _ = try verifier.verify(jws, kind: .transaction) }
            count += 100
            elapsed = Date().timeIntervalSince(start)
        }
        var report = Report(verifications: count, seconds: elapsed, chainValidations: verifier.chainValidationCount,
                            opensslVerifiesPerSecond: nil, opensslNote: "not run")
        if runOpenSSL {
            (report.opensslVerifiesPerSecond, report.opensslNote) = openSSLSpeed(seconds: opensslSeconds)
        }
        return report
    }

    /// Parses the `256 bits ecdsa (nistp256)` row of `openssl speed`: the last column is verify/s.
    public static func parseOpenSSLSpeed(_ output: String) -> Double? {
        for line in output.split(separator: "\n") where line.contains("nistp256") && line.contains("ecdsa") {
            let cols = line.split(separator: " ", omittingEmptySubsequences: true)
            if let last = cols.last, let v = Double(last) { return v }
        }
        return nil
    }

    static func openSSLSpeed(seconds: Int) -> (Double?, String) {
        // `openssl speed` times itself with SIGALRM. A child inherits its parent's blocked signals
        // and the async runtime's threads block some, so Foundation.Process can start an openssl
        // whose alarm never fires (seen: 10 minutes for "-seconds 3"). Spawn it with an empty
        // signal mask and default handlers instead, and give up after a generous bound.
        guard let text = SpawnedCommand.output(["/usr/bin/env", "openssl", "speed", "-seconds", String(seconds), "ecdsap256"],
                                               timeoutSeconds: seconds * 10 + 30) else {
            return (nil, "openssl speed did not run or did not finish")
        }
        guard let v = parseOpenSSLSpeed(text) else { return (nil, "no nistp256 row in openssl output") }
        return (v, "openssl speed -seconds \(seconds) ecdsap256")
    }
}

/// Runs a command with a clean signal state and captures its standard output.
enum SpawnedCommand {
    static func output(_ argv: [String], timeoutSeconds: Int) -> String? {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return nil }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t(), all = sigset_t()
        sigemptyset(&empty)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cargs.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, &attributes, &cargs, environ)
        close(fds[1])
        guard rc == 0 else { close(fds[0]); return nil }
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(timeoutSeconds), execute: watchdog)
        let data = FileHandle(fileDescriptor: fds[0], closeOnDealloc: true).readDataToEndOfFile()
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        watchdog.cancel()
        return String(decoding: data, as: UTF8.self)
    }
}

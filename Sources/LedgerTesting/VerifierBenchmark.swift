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
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["openssl", "speed", "-seconds", String(seconds), "ecdsap256"]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = Pipe()
        do { try p.run() } catch { return (nil, "could not start openssl: \(error)") }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard let v = parseOpenSSLSpeed(text) else { return (nil, "no nistp256 row in openssl output") }
        return (v, "openssl speed -seconds \(seconds) ecdsap256")
    }
}

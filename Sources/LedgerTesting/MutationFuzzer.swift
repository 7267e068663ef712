import Foundation
import LedgerCore
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The fuzzer draws from LedgerCore's `SplitMix64` (one PRNG for the generators and the fuzzer),
// so a failure is reproduced from the one seed it prints.
extension SplitMix64 {
    /// Uniform in `0..<bound` (bound > 0); the modulo bias is irrelevant for fuzzing.
    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(bound, 1))) }
    /// True one time in `oneIn`.
    public mutating func chance(_ oneIn: Int) -> Bool { below(oneIn) == 0 }
}

/// A deterministic, corpus-based mutation fuzzer for parsers of untrusted bytes.
///
/// Every input is derived from `(corpus, seed, iteration)` alone, with no feedback between
/// iterations, so any failing input is regenerated from the seed and iteration it reports
/// (`MutationFuzzer.input(corpus:seed:iteration:)`), on any machine, without replaying the run.
/// A crash (trap, segfault) prints the seed, iteration and input before the process dies; an input
/// over the time budget is a failure, and one that never returns aborts the process with the same
/// details rather than hanging the test suite.
public enum MutationFuzzer {
    /// One input the body did not survive: it threw, or it exceeded the time budget.
    public struct Failure: Sendable, CustomStringConvertible {
        public let seed: UInt64
        public let iteration: Int
        public let input: [UInt8]
        public let reason: String

        public var description: String {
            "seed=\(hex64(seed)) iteration=\(iteration): \(reason)\n  input (\(input.count) bytes) hex=\(MutationFuzzer.hex(input, limit: 256))\n"
                + "  reproduce: MutationFuzzer.input(corpus: <same corpus>, seed: \(hex64(seed)), iteration: \(iteration))"
        }
    }

    public struct Report: Sendable, CustomStringConvertible {
        public let seed: UInt64
        public let iterations: Int
        public let elapsed: Duration
        public let slowest: Duration
        public let slowestIteration: Int
        /// The first failures (at most `maxFailures`); the run stops once that many are found.
        public let failures: [Failure]

        public var inputsPerSecond: Double {
            let s = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            return s > 0 ? Double(iterations) / s : 0
        }

        public var description: String {
            var s = "seed=\(hex64(seed)) inputs=\(iterations) elapsed=\(MutationFuzzer.nanos(elapsed) / 1_000_000) ms"
                + " rate=\(Int(inputsPerSecond))/s slowest=\(MutationFuzzer.nanos(slowest) / 1_000) µs (iteration \(slowestIteration))"
                + " failures=\(failures.count)"
            for f in failures { s += "\n" + f.description }
            return s
        }
    }

    /// Tokens that break parsers: structure characters, markup declarations and entities (XXE),
    /// escapes, NULs, invalid UTF-8, numbers no machine type holds. Deep nesting is generated.
    public static let dictionary: [[UInt8]] = {
        let text = [
            "{", "}", "[", "]", "\"", "\\", ":", ",", "=", ".", "&", "-", "+", "'", "/", "%", "%00",
            "\\u0000", "\\ud800", "\\udc00\\ud800", "\\\"", "\\\\", "\\x", "true", "false", "null", "NaN", "Infinity",
            "0", "-0", "0x1F", "1e999999", "-1e-999999", "18446744073709551616", "-9223372036854775809",
            "9223372036854775807", "1.7976931348623157e309", "4.9e-325", String(repeating: "9", count: 400),
            "<", ">", "</", "/>", "<xml>", "</xml>", "<a>", "</a>", "<![CDATA[", "]]>", "<!--", "-->", "<?xml version=\"1.0\"?>",
            "<?xml version=\"1.0\" encoding=\"UTF-16\"?>", "<!DOCTYPE", "<!DOCTYPE xml [<!ENTITY e SYSTEM \"file:///etc/passwd\">]>",
            "<!ENTITY x \"y\">", "<!ELEMENT", "<!ATTLIST", "&amp;", "&lt;", "&e;", "&#0;", "&#x0;", "&#x10FFFF;", "&#xD800;",
            "&#99999999999;", "xmlns=\"x\"", "a=\"b\"", "xmlns:xi=\"http://www.w3.org/2001/XInclude\"", "<xi:include href=\"/etc/passwd\"/>",
            "\r\n", "\t", " ", "Encrypt", "MsgType", "Event", "ToUserName", "CreateTime",
        ]
        var tokens = text.map { Array($0.utf8) }
        tokens += [[0x00], [0xFF], [0xFE, 0xFF], [0xEF, 0xBB, 0xBF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
                   [0x80], [0x7F], [0xE2, 0x80, 0xA8]]
        return tokens
    }()

    /// Fuzzes `body` with `iterations` inputs mutated from `corpus`. `body` is the parser under test
    /// plus its outcome check: it throws (any error) to report an outcome the contract forbids.
    /// An input taking longer than `timeBudget` is a failure; one still running after
    /// `hangLimit` (default 10 × `timeBudget`) aborts the process after printing how to reproduce it.
    public static func run(corpus: [[UInt8]], iterations: Int, seed: UInt64, timeBudget: Duration = .seconds(1),
                           hangLimit: Duration? = nil, maxLength: Int = 64 * 1024, extraTokens: [[UInt8]] = [],
                           maxFailures: Int = 10, body: (_ input: [UInt8]) throws -> Void) -> Report {
        precondition(!corpus.isEmpty, "the fuzzer needs at least one seed input")
        let tokens = dictionary + extraTokens
        let budgetNanos = nanos(timeBudget)
        let watch = Watch()
        let hangNanos = nanos(hangLimit ?? timeBudget * 10)
        let watchdog = Thread { [watch] in
            watch.guardAgainstHangs(limitNanos: hangNanos) { iteration in
                let input = MutationFuzzer.input(corpus: corpus, seed: seed, iteration: iteration, maxLength: maxLength,
                                                 tokens: tokens)
                return "MutationFuzzer: input still running after \(hangNanos / 1_000_000) ms (a hang): seed=\(hex64(seed)) iteration=\(iteration)"
                    + " input (\(input.count) bytes) hex=\(hex(input, limit: 256))\n"
            }
        }
        watchdog.start()
        CrashReport.arm(seed: seed)
        defer {
            CrashReport.disarm()
            watch.finished.store(true, ordering: .releasing)
        }

        var failures: [Failure] = []
        var slowest: UInt64 = 0
        var slowestIteration = 0
        let start = DispatchTime.now().uptimeNanoseconds
        var done = 0
        for i in 0..<iterations {
            let input = Self.input(corpus: corpus, seed: seed, iteration: i, maxLength: maxLength, tokens: tokens)
            CrashReport.current(iteration: i, input: input)
            let t0 = DispatchTime.now().uptimeNanoseconds
            watch.iteration.store(i, ordering: .relaxed)
            watch.started.store(t0, ordering: .releasing)
            var thrown: (any Error)?
            do { try body(input) } catch { thrown = error }
            let t1 = DispatchTime.now().uptimeNanoseconds
            watch.started.store(0, ordering: .releasing)
            done = i + 1
            let took = t1 &- t0
            if took > slowest { slowest = took; slowestIteration = i }
            if let thrown {
                failures.append(Failure(seed: seed, iteration: i, input: input, reason: "outcome refused: \(thrown)"))
            } else if took > budgetNanos {
                failures.append(Failure(seed: seed, iteration: i, input: input,
                                        reason: "took \(took / 1_000_000) ms, over the \(budgetNanos / 1_000_000) ms budget per input"))
            }
            if failures.count >= maxFailures { break }
        }
        let elapsed = DispatchTime.now().uptimeNanoseconds - start
        return Report(seed: seed, iterations: done, elapsed: .nanoseconds(Int64(elapsed)), slowest: .nanoseconds(Int64(slowest)),
                      slowestIteration: slowestIteration, failures: failures)
    }

    /// The input of `iteration` in a run with this corpus and seed (same `maxLength` and extra tokens).
    public static func input(corpus: [[UInt8]], seed: UInt64, iteration: Int, maxLength: Int = 64 * 1024,
                             extraTokens: [[UInt8]] = []) -> [UInt8] {
        input(corpus: corpus, seed: seed, iteration: iteration, maxLength: maxLength, tokens: dictionary + extraTokens)
    }

    static func input(corpus: [[UInt8]], seed: UInt64, iteration: Int, maxLength: Int, tokens: [[UInt8]]) -> [UInt8] {
        var rng = SplitMix64(seed: SplitMix64.mix(seed) ^ UInt64(truncatingIfNeeded: iteration))
        var data = corpus[rng.below(corpus.count)]
        // Mostly a few stacked mutations (near-valid inputs get deep into a parser), sometimes many.
        let count = rng.chance(8) ? 1 + rng.below(32) : 1 + rng.below(4)
        for _ in 0..<count {
            mutate(&data, &rng, corpus: corpus, tokens: tokens)
            if data.count > maxLength { data.removeLast(data.count - maxLength) }
        }
        return data
    }

    static func mutate(_ d: inout [UInt8], _ r: inout SplitMix64, corpus: [[UInt8]], tokens: [[UInt8]]) {
        let n = d.count
        func pos(_ extra: Int = 0) -> Int { r.below(n + extra) }
        switch r.below(15) {
        case 0 where n > 0: // bit flip
            let p = pos()
            d[p] ^= UInt8(1 << r.below(8))
        case 1 where n > 0: // byte flip / random byte
            d[pos()] = r.chance(2) ? ~d[pos()] : UInt8(truncatingIfNeeded: r.next())
        case 2 where n > 0: // interesting byte
            let interesting: [UInt8] = [0x00, 0x01, 0x1F, 0x20, 0x7F, 0x80, 0xFF, 0x22, 0x3C, 0x3E, 0x26, 0x5C, 0x7B, 0x7D, 0x5B, 0x5D]
            d[pos()] = interesting[r.below(interesting.count)]
        case 3 where n > 0: // truncation (prefix kept, or head dropped)
            if r.chance(2) { d.removeLast(n - pos()) } else { d.removeFirst(pos()) }
        case 4 where n > 0: // delete a range
            let a = pos(), len = 1 + r.below(min(n - a, 64))
            d.removeSubrange(a..<min(n, a + len))
        case 5: // insert random bytes
            let len = 1 + r.below(16)
            d.insert(contentsOf: (0..<len).map { _ in UInt8(truncatingIfNeeded: r.next()) }, at: pos(1))
        case 6 where n > 0: // duplicate a chunk elsewhere, possibly many times
            let a = pos(), len = 1 + r.below(min(n - a, 256))
            let times = r.chance(4) ? 1 + r.below(64) : 1
            d.insert(contentsOf: repeated(Array(d[a..<(a + len)]), times), at: pos(1))
        case 7: // splice with another corpus entry
            let other = corpus[r.below(corpus.count)]
            let cut = pos(1), from = r.below(other.count + 1)
            d = Array(d[..<cut]) + Array(other[from...])
        case 8, 9: // dictionary token inserted
            d.insert(contentsOf: tokens[r.below(tokens.count)], at: pos(1))
        case 10 where n > 0: // dictionary token overwriting
            let t = tokens[r.below(tokens.count)], p = pos()
            let end = min(n, p + t.count)
            d.replaceSubrange(p..<end, with: t)
        case 11: // deep nesting
            d.insert(contentsOf: nesting(&r), at: pos(1))
        case 12 where n > 0: // rewrite a run of digits (lengths, timestamps) with an extreme number
            let p = pos()
            guard let s = d[p...].firstIndex(where: { $0 >= 0x30 && $0 <= 0x39 }) else { return }
            var e = s
            while e < d.count, d[e] >= 0x30, d[e] <= 0x39 { e += 1 }
            let numbers = ["0", "-1", "4294967296", "9223372036854775808", "1e309", "00000000000000000000001", "-0.0",
                           String(r.next()), String(repeating: "9", count: 1 + r.below(100))]
            d.replaceSubrange(s..<e, with: Array(numbers[r.below(numbers.count)].utf8))
        case 13 where n > 1: // swap two bytes
            d.swapAt(pos(), pos())
        case 14 where n > 0: // replace a byte with an ASCII structure character
            let structural = Array("{}[]<>\"'&;:=/\\!?-".utf8)
            d[pos()] = structural[r.below(structural.count)]
        default: // a case whose input was too short: insert a token instead
            d.insert(contentsOf: tokens[r.below(tokens.count)], at: pos(1))
        }
    }

    static func nesting(_ r: inout SplitMix64) -> [UInt8] {
        // Past any sane limit (the parsers' are tens) without spending the run on building inputs.
        let depth = r.chance(4) ? 100 + r.below(2000) : 2 + r.below(40)
        let open: [UInt8], close: [UInt8]
        switch r.below(4) {
        case 0: (open, close) = (Array("[".utf8), Array("]".utf8))
        case 1: (open, close) = (Array("{\"a\":".utf8), Array("}".utf8))
        case 2: (open, close) = (Array("<a>".utf8), Array("</a>".utf8))
        default: (open, close) = (Array("<x:a xmlns:x=\"u\">".utf8), Array("</x:a>".utf8))
        }
        var out = repeated(open, depth)
        if r.chance(2) { out += repeated(close, depth) }
        return out
    }

    /// `chunk` `times` over. A plain loop: `joined()` is generic and unspecialised in a debug build,
    /// where it cost more than the parsers under test.
    static func repeated(_ chunk: [UInt8], _ times: Int) -> [UInt8] {
        let total = chunk.count * times
        guard total > 0 else { return [] }
        return [UInt8](unsafeUninitializedCapacity: total) { out, count in
            chunk.withUnsafeBufferPointer { c in
                for k in 0..<times { (out.baseAddress! + k * c.count).initialize(from: c.baseAddress!, count: c.count) }
            }
            count = total
        }
    }

    /// Lowercase hex of the first `limit` bytes, with the count of the rest.
    public static func hex(_ bytes: [UInt8], limit: Int) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(min(bytes.count, limit) * 2 + 24)
        for b in bytes.prefix(limit) {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        var s = String(decoding: out, as: UTF8.self)
        if bytes.count > limit { s += "…(+\(bytes.count - limit) bytes)" }
        return s
    }

    /// The seed from `LEDGER_FUZZ_SEED` (decimal or 0x-hex) when set, else `fallback`, so a CI
    /// failure's seed can be replayed locally.
    public static func seed(default fallback: UInt64) -> UInt64 {
        guard let text = ProcessInfo.processInfo.environment["LEDGER_FUZZ_SEED"] else { return fallback }
        if text.lowercased().hasPrefix("0x") { return UInt64(text.dropFirst(2), radix: 16) ?? fallback }
        return UInt64(text) ?? fallback
    }

    static func nanos(_ d: Duration) -> UInt64 {
        let c = d.components
        return UInt64(max(0, c.seconds)) * 1_000_000_000 + UInt64(max(0, c.attoseconds) / 1_000_000_000)
    }
}

func hex64(_ v: UInt64) -> String { "0x" + String(v, radix: 16) }

/// What the watchdog thread needs to see of the running fuzz loop.
private final class Watch: Sendable {
    /// Uptime (ns) at which the current input started; 0 between inputs.
    let started = Atomic<UInt64>(0)
    let iteration = Atomic<Int>(0)
    let finished = Atomic<Bool>(false)

    func guardAgainstHangs(limitNanos: UInt64, describe: (Int) -> String) {
        while !finished.load(ordering: .acquiring) {
            Thread.sleep(forTimeInterval: 0.05)
            let s = started.load(ordering: .acquiring)
            guard s != 0, DispatchTime.now().uptimeNanoseconds &- s > limitNanos else { continue }
            // The fuzz thread is stuck inside the parser and cannot be interrupted: report and stop
            // the process instead of hanging CI until its global timeout.
            FileHandle.standardError.write(Data(describe(iteration.load(ordering: .relaxed)).utf8))
            abort()
        }
    }
}

/// Prints the current seed, iteration and input when the process dies of a signal (a Swift trap
/// is SIGILL or SIGTRAP) during a run, then lets the previous handler (the Swift backtracer, or the
/// default action) run as before. The handler only reads preallocated memory and calls write(2).
private enum CrashReport {
    static let capacity = 512
    nonisolated(unsafe) static var seed: UInt64 = 0
    nonisolated(unsafe) static var iteration: Int = 0
    nonisolated(unsafe) static var length: Int = 0
    nonisolated(unsafe) static let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
    nonisolated(unsafe) static let line = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity * 2 + 256)
    #if canImport(Glibc)
    static let signals: [Int32] = [SIGILL, SIGTRAP, SIGSEGV, SIGBUS, SIGFPE, SIGABRT]
    /// Indexed by signal number; preallocated so the handler never touches a Swift collection.
    nonisolated(unsafe) static let previous = UnsafeMutablePointer<sigaction>.allocate(capacity: 65)
    #endif

    static func arm(seed s: UInt64) {
        seed = s
        #if canImport(Glibc)
        for sig in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_sigaction = crashHandler
            action.sa_flags = SA_SIGINFO | SA_ONSTACK
            sigemptyset(&action.sa_mask)
            sigaction(sig, &action, previous + Int(sig))
        }
        #endif
    }

    static func disarm() {
        #if canImport(Glibc)
        for sig in signals { sigaction(sig, previous + Int(sig), nil) }
        #endif
    }

    static func current(iteration i: Int, input: [UInt8]) {
        iteration = i
        let n = min(input.count, capacity)
        input.withUnsafeBufferPointer { src in
            if n > 0 { buffer.update(from: src.baseAddress!, count: n) }
        }
        length = input.count
    }

    /// Formats without allocating (async-signal context).
    static func writeReport() {
        var i = 0
        func put(_ s: StaticString) {
            s.withUTF8Buffer { for b in $0 { line[i] = b; i += 1 } }
        }
        func putHex(_ b: UInt8) {
            let digits: StaticString = "0123456789abcdef"
            digits.withUTF8Buffer { d in
                line[i] = d[Int(b >> 4)]; line[i + 1] = d[Int(b & 0xF)]
            }
            i += 2
        }
        func putDecimal(_ v: UInt64) {
            var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                         UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            var n = 0, x = v
            withUnsafeMutableBytes(of: &digits) { d in
                repeat { d[n] = UInt8(48 + x % 10); x /= 10; n += 1 } while x > 0
                while n > 0 { n -= 1; line[i] = d[n]; i += 1 }
            }
        }
        put("\nMutationFuzzer: crashed on seed=0x")
        for shift in stride(from: 56, through: 0, by: -8) { putHex(UInt8(truncatingIfNeeded: seed >> UInt64(shift))) }
        put(" iteration=")
        putDecimal(UInt64(iteration))
        put(" length=")
        putDecimal(UInt64(length))
        put(" input hex=")
        for k in 0..<min(length, capacity) { putHex(buffer[k]) }
        if length > capacity { put("...") }
        put("\n")
        _ = write(2, line, i)
    }
}

#if canImport(Glibc)
private func crashHandler(_ sig: Int32, _ info: UnsafeMutablePointer<siginfo_t>?, _ context: UnsafeMutableRawPointer?) {
    CrashReport.writeReport()
    // Hand the signal back: restore the earlier action; a fault re-executes and reaches it, an
    // abort is re-raised.
    sigaction(sig, CrashReport.previous + Int(sig), nil)
    if sig == SIGABRT { raise(sig) }
}
#endif

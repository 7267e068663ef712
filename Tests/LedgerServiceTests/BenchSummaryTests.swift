import Foundation
import LedgerTesting
import XCTest

/// The one report format of `ledger-dev bench`: medians, per-run ratios paired with their
/// same-run baseline, direction of the ratio, the `ratio:` line and bench.json.
final class BenchSummaryTests: XCTestCase {
    func testTheRatioIsTheMedianOfPerRunRatiosInTheRightDirection() {
        // Rates: ledger ÷ baseline per run; the busy second run is compared with its own baseline.
        let rate = BenchSummary(name: "ingest", command: "c", unit: "/s", ledgerLabel: "l", ledger: [100, 50, 120],
                                baselineLabel: "b", baseline: [100, 25, 200], target: ("≥ 1.0", { $0 >= 1.0 }))
        XCTAssertEqual(rate.ratios, [1.0, 2.0, 0.6])
        XCTAssertEqual(rate.ratio, 1.0)
        XCTAssertEqual(rate.ledger.median, 100)
        XCTAssertEqual(rate.baseline.min, 25)
        XCTAssertEqual(rate.baseline.max, 200)
        XCTAssertEqual(rate.targetMet, true)
        // Times where smaller is better: baseline ÷ ledger, so > 1 still means the ledger is faster.
        let time = BenchSummary(name: "t", command: "c", unit: "s", ledgerLabel: "l", ledger: [2, 4],
                                baselineLabel: "b", baseline: [1, 1], higherIsBetter: false)
        XCTAssertEqual(time.ratios, [0.5, 0.25])
        XCTAssertEqual(time.ratio, 0.375)
        XCTAssertNil(time.targetMet)
        // "× the COPY": ledger ÷ baseline even though smaller is better.
        let rebuild = BenchSummary(name: "rebuild", command: "c", unit: "s", ledgerLabel: "l", ledger: [3, 3, 3],
                                   baselineLabel: "b", baseline: [2, 1, 3], higherIsBetter: false,
                                   ratioIsLedgerOverBaseline: true, target: ("≤ 1.5", { $0 <= 1.5 }))
        XCTAssertEqual(rebuild.ratio, 1.5)
        XCTAssertEqual(rebuild.targetMet, true)
        XCTAssertEqual(rebuild.lines.last?.hasPrefix("ratio: 1.50 [rebuild]"), true, "\(rebuild.lines)")
        XCTAssertTrue(rebuild.lines.contains { $0.contains("min 1.00, max 3.00") }, "\(rebuild.lines)")
    }

    func testRecordMergesByNameAndKeepsEveryRun() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("bench.json").path
        let a = BenchSummary(name: "a", command: "ca", unit: "/s", ledgerLabel: "l", ledger: [1, 2, 3], baselineLabel: "b", baseline: [1, 1, 1])
        var b = BenchSummary(name: "b", command: "cb", unit: "/s", ledgerLabel: "l", ledger: [5], baselineLabel: "b", baseline: [10])
        try a.record(to: path)
        try b.record(to: path)
        b.command = "cb2"
        try b.record(to: path)
        let stored = try JSONDecoder().decode([String: BenchSummary].self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        XCTAssertEqual(stored.keys.sorted(), ["a", "b"])
        XCTAssertEqual(stored["a"]?.ledger.runs, [1, 2, 3])
        XCTAssertEqual(stored["b"]?.command, "cb2")
        XCTAssertEqual(stored["b"]?.ratio, 0.5)
        // The file states medians and spreads for readers that are not this code (bench-table.py).
        let raw = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any]
        let fig = (raw?["a"] as? [String: Any])?["ledger"] as? [String: Any]
        XCTAssertEqual(fig?["median"] as? Double, 2)
        XCTAssertEqual(fig?["max"] as? Double, 3)
    }

    /// README's performance figures are those of the committed bench file its table names: the
    /// check passes on README as it is, and fails on a copy with one figure changed.
    func testREADMEsPerformanceTableIsTheCommittedBenchFile() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        func check(_ readme: String) throws -> (status: Int32, output: String) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", "scripts/bench-table.py", "--check", readme]
            process.currentDirectoryURL = root
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try process.run()
            let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, output)
        }
        let asIs = try check("README.md")
        XCTAssertEqual(asIs.status, 0, asIs.output)

        let text = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let table = try XCTUnwrap(text.range(of: "<!-- bench-table:start -->"))
        let figure = try XCTUnwrap(text.range(of: #"\*\*[0-9]+\.[0-9]+\*\*"#, options: .regularExpression, range: table.upperBound..<text.endIndex))
        let tampered = text.replacingCharacters(in: figure, with: "**9.99**")
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("README-\(UUID().uuidString).md")
        try tampered.write(to: copy, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: copy) }
        let changed = try check(copy.path)
        XCTAssertEqual(changed.status, 1, changed.output)
        XCTAssertTrue(changed.output.contains("differs from docs/bench/"), changed.output)
    }
}

import LedgerMetrics
import XCTest

final class MetricsRegistryTests: XCTestCase {
    /// One HELP and one TYPE per family whatever feeds it; label values and HELP text escaped;
    /// families sorted; an unavailable collector says so instead of a number.
    func testRendering() async {
        let m = MetricsRegistry()
        m.describe("ledger_b_total", type: .counter, help: "B things\nwith a newline and a \\ backslash")
        m.increment("ledger_b_total", ["k": "x\"y\\z\nw"])
        m.increment("ledger_b_total", ["k": "plain"], by: 2)
        m.increment("ledger_b_total", ["k": "plain"])
        m.observe("ledger_a_seconds", ["route": "/r"], value: 0.003)
        m.observe("ledger_a_seconds", ["route": "/r"], value: 20)
        m.gauge("ledger_c", help: "C") { [MetricsRegistry.Sample(["x": "1"], 3), MetricsRegistry.Sample(["x": "2"], 0.5)] }
        m.collect("ledger_d", help: "D from the database") { [MetricsRegistry.Sample([:], 42)] }
        m.collect("ledger_e", help: "E unavailable") { nil }
        m.collect("ledger_f_total", type: .counter, help: "F") { [MetricsRegistry.Sample(["s": "primary"], 7)] }
        let text = await m.render()
        let expected = """
        # HELP ledger_a_seconds ledger_a_seconds
        # TYPE ledger_a_seconds histogram
        ledger_a_seconds_bucket{route="/r",le="0.0005"} 0
        """
        XCTAssertTrue(text.hasPrefix(expected), text)
        XCTAssertTrue(text.contains(#"ledger_a_seconds_bucket{route="/r",le="0.005"} 1"#), text)
        XCTAssertTrue(text.contains(#"ledger_a_seconds_bucket{route="/r",le="+Inf"} 2"#), text)
        XCTAssertTrue(text.contains(#"ledger_a_seconds_count{route="/r"} 2"#), text)
        XCTAssertTrue(text.contains("# HELP ledger_b_total B things\\nwith a newline and a \\\\ backslash\n# TYPE ledger_b_total counter\n"), text)
        XCTAssertTrue(text.contains(#"ledger_b_total{k="plain"} 3"#), text)
        XCTAssertTrue(text.contains(#"ledger_b_total{k="x\"y\\z\nw"} 1"#), text)
        XCTAssertTrue(text.contains("# TYPE ledger_c gauge\nledger_c{x=\"1\"} 3\nledger_c{x=\"2\"} 0.5\n"), text)
        XCTAssertTrue(text.contains("# TYPE ledger_d gauge\nledger_d 42\n"), text)
        XCTAssertTrue(text.contains("# ledger_e unavailable"), text)
        XCTAssertFalse(text.contains("# TYPE ledger_e"), text)
        XCTAssertTrue(text.contains("# TYPE ledger_f_total counter\nledger_f_total{s=\"primary\"} 7\n"), text)
        for family in ["ledger_a_seconds", "ledger_b_total", "ledger_c", "ledger_d", "ledger_f_total"] {
            XCTAssertEqual(text.components(separatedBy: "# TYPE \(family) ").count, 2, family)
            XCTAssertEqual(text.components(separatedBy: "# HELP \(family) ").count, 2, family)
        }
        // No line but comments and samples; every sample line is `name[{labels}] value`.
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            XCTAssertEqual(line.split(separator: " ").count >= 2, true, String(line))
        }
        XCTAssertEqual(MetricsRegistry.render(["b": "x\"y\\z\nw", "a": "plain"]), "a=\"plain\",b=\"x\\\"y\\\\z\\nw\"")
        XCTAssertEqual(m.counterValue("ledger_b_total", ["k": "plain"]), 3)
    }
}

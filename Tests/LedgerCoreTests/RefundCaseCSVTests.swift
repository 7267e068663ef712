import XCTest
@testable import LedgerCore

/// The CSV export: RFC 4180, and no cell a spreadsheet would evaluate.
final class RefundCaseCSVTests: XCTestCase {
    /// An independent RFC 4180 reader (quoted fields, doubled quotes, CRLF records).
    func parse(_ text: String) -> [[String]] {
        var rows: [[String]] = [], row: [String] = [], field = [UInt8]()
        var quoted = false, i = 0
        let b = Array(text.utf8)
        while i < b.count {
            let c = b[i]
            if quoted {
                if c == UInt8(ascii: "\"") {
                    if i + 1 < b.count && b[i + 1] == UInt8(ascii: "\"") { field.append(c); i += 1 } else { quoted = false }
                } else { field.append(c) }
            } else if c == UInt8(ascii: "\"") {
                quoted = true
            } else if c == UInt8(ascii: ",") {
                row.append(String(decoding: field, as: UTF8.self)); field = []
            } else if c == 0x0D && i + 1 < b.count && b[i + 1] == 0x0A {
                row.append(String(decoding: field, as: UTF8.self)); field = []
                rows.append(row); row = []
                i += 1
            } else {
                field.append(c)
            }
            i += 1
        }
        XCTAssertTrue(row.isEmpty && field.isEmpty, "the last record must end with CRLF")
        return rows
    }

    func testCellsAreQuotedOnlyWhenNeededAndFormulasAreNeutralised() {
        XCTAssertEqual(RefundCaseCSV.cell("plain"), "plain")
        XCTAssertEqual(RefundCaseCSV.cell(""), "")
        XCTAssertEqual(RefundCaseCSV.cell("a,b"), "\"a,b\"")
        XCTAssertEqual(RefundCaseCSV.cell("say \"hi\""), "\"say \"\"hi\"\"\"")
        XCTAssertEqual(RefundCaseCSV.cell("line1\nline2"), "\"line1\nline2\"")
        XCTAssertEqual(RefundCaseCSV.cell("=HYPERLINK(\"http://evil\")"), "\"'=HYPERLINK(\"\"http://evil\"\")\"")
        XCTAssertEqual(RefundCaseCSV.cell("+1"), "'+1")
        XCTAssertEqual(RefundCaseCSV.cell("-2+3"), "'-2+3")
        XCTAssertEqual(RefundCaseCSV.cell("@SUM(A1)"), "'@SUM(A1)")
        XCTAssertEqual(RefundCaseCSV.cell("\tcmd"), "'\tcmd")
        XCTAssertEqual(RefundCaseCSV.cell("\r=x"), "\"'\r=x\"")
        XCTAssertEqual(RefundCaseCSV.cell("a=b"), "a=b", "only a leading trigger matters")
        XCTAssertEqual(RefundCaseCSV.cell("退款,原因"), "\"退款,原因\"")
    }

    func testRenderedCasesParseBackToTheSameCellsWithHostileText() throws {
        var c = RefundCaseFold.cases(from: WX.facts([WX.event(WX.inquiry(order: "=cmd|' /C calc'!A0", asked: 31,
                                                                         reason: "He said, \"refund\"\r\nnow"), position: 4)]))
        XCTAssertEqual(c.count, 1)
        c.append(contentsOf: RefundCaseFold.cases(from: WX.facts([WX.event(WX.refundNotify(order: "@O7", at: 50, openId: "-oEvil"), position: 9)])))
        let text = RefundCaseCSV.render(c)
        let rows = parse(text)
        XCTAssertEqual(rows.first, RefundCaseCSV.columns)
        XCTAssertEqual(rows.count, 3)
        for row in rows { XCTAssertEqual(row.count, RefundCaseCSV.columns.count) }
        let col = { (name: String) in RefundCaseCSV.columns.firstIndex(of: name)! }
        XCTAssertEqual(rows[1][col("order_id")], "'=cmd|' /C calc'!A0")
        XCTAssertEqual(rows[1][col("case_id")], "wechat:=cmd|' /C calc'!A0")
        XCTAssertEqual(rows[1][col("reason")], "He said, \"refund\"\r\nnow")
        XCTAssertEqual(rows[1][col("decision")], "none")
        XCTAssertEqual(rows[1][col("links")], "4")
        XCTAssertEqual(rows[1][col("opened_at_utc")], UTCTime.iso8601(WX.sec(31) * 1000))
        XCTAssertEqual(rows[2][col("order_id")], "'@O7")
        XCTAssertEqual(rows[2][col("outcome")], "refunded")
        XCTAssertEqual(rows[2][col("refunded_amount_milliunits")], "30000")
        XCTAssertEqual(rows[2][col("open_id")], "'-oEvil", "a customer id from the refund push is neutralised too")
        XCTAssertEqual(rows[2][col("currency")], "CNY")
        for row in rows.dropFirst() {
            for cell in row { XCTAssertFalse(["=", "+", "-", "@"].contains(cell.first.map(String.init) ?? ""), cell) }
        }
        XCTAssertEqual(RefundCaseCSV.render([]), RefundCaseCSV.columns.joined(separator: ",") + "\r\n")
    }

    func testISOTimesAreUTC() {
        XCTAssertEqual(UTCTime.iso8601(0), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(UTCTime.iso8601(1_735_689_600_000), "2025-01-01T00:00:00.000Z")
        XCTAssertEqual(UTCTime.iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z")
        XCTAssertEqual(UTCTime.iso8601(-1), "1969-12-31T23:59:59.999Z")
        XCTAssertEqual(UTCTime.iso8601(Int64.min), String(Int64.min))
        XCTAssertEqual(UTCTime.iso8601(Int64.max), String(Int64.max))
    }
}

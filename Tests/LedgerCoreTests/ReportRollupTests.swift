import LedgerCore
import LedgerTesting
import XCTest

final class ReportRollupTests: XCTestCase {
    // MARK: Days

    func testDaysParseAndStepByCalendar() throws {
        let d = try XCTUnwrap(ReportDay(text: "2024-02-29"))
        XCTAssertEqual(d.text, "2024-02-29")
        XCTAssertEqual(d.monthStart.text, "2024-02-01")
        XCTAssertEqual(d.monthEnd.text, "2024-02-29")
        XCTAssertEqual(d.monthStart(adding: 11).text, "2025-01-01")
        XCTAssertEqual(d.monthStart(adding: -2).text, "2023-12-01")
        XCTAssertEqual(d.weekStart.text, "2024-02-26")  // a Monday
        XCTAssertEqual(ReportDay(containing: d.lastMillisecond), d)
        XCTAssertEqual(ReportDay(containing: -1).text, "1969-12-31")
        for bad in ["2023-02-29", "2026-13-01", "2026-1-01", "20260101", "2026-01-01T00:00", "", "abcd-ef-gh", "2026-00-10"] {
            XCTAssertNil(ReportDay(text: bad), bad)
        }
    }

    // MARK: Recognition

    func testRecognitionSpreadsThePriceOverThePeriodAndSumsToIt() {
        let start: EpochMillis = 1_700_000_000_000 + 13 * 3_600_000
        let end = start + 30 * ReportDay.millis
        let days = RevenueRecognition.schedule(price: 4_990, start: start, end: end)
        XCTAssertEqual(days.count, 31)  // starts mid-day, ends mid-day
        XCTAssertEqual(days.map(\.recognised).reduce(0, +), 4_990)
        XCTAssertEqual(days.last?.deferred, 0)
        XCTAssertEqual(days.first.map { $0.recognised + $0.deferred }, 4_990)
        // Every full day earns price / 30 (± rounding).
        for d in days.dropFirst().dropLast() { XCTAssert((166...167).contains(d.recognised), "\(d)") }
        // A year in milliseconds times a large price would overflow Int64 if multiplied plainly.
        let big = RevenueRecognition.schedule(price: 9_000_000_000_000, start: start, end: start + 365 * ReportDay.millis)
        XCTAssertEqual(big.map(\.recognised).reduce(0, +), 9_000_000_000_000)
    }

    func testAFullRefundTakesBackWhatWasRecognisedOnTheRefundDay() {
        let start: EpochMillis = 1_700_006_400_000  // a midnight
        let end = start + 10 * ReportDay.millis
        let refund = start + 4 * ReportDay.millis + 1
        let days = RevenueRecognition.schedule(price: 1_000, start: start, end: end, refundedAt: refund)
        XCTAssertEqual(days.prefix(4).map(\.recognised), [100, 100, 100, 100])
        XCTAssertEqual(days[4].recognised, -400)  // earlier days are not rewritten
        XCTAssertEqual(days[4].deferred, 0)
        XCTAssertEqual(days.map(\.recognised).reduce(0, +), 0)
        XCTAssert(days.dropFirst(5).allSatisfy { $0.recognised == 0 && $0.deferred == 0 })
    }

    func testAProratedRefundReversesItsProportion() {
        let start: EpochMillis = 1_700_006_400_000
        let end = start + 10 * ReportDay.millis
        let days = RevenueRecognition.schedule(price: 1_000, start: start, end: end,
                                               refundedAt: start + 5 * ReportDay.millis, refundShare: 50_000)
        XCTAssertEqual(days.prefix(5).map(\.recognised), [100, 100, 100, 100, 100])
        XCTAssertEqual(days[5].recognised, 300 - 500)  // 6/10 earned, halved, less the 500 recognised
        XCTAssertEqual(days[5].deferred, 500 - 300)
        XCTAssertEqual(days.map(\.recognised).reduce(0, +), 500)
        XCTAssertEqual(days.last?.deferred, 0)
        XCTAssertEqual(RevenueRecognition.refunded(price: 1_000, share: 50_000), 500)
        XCTAssertEqual(RevenueRecognition.refunded(price: 1_000, share: nil), 1_000)
    }

    func testAnUpgradedPeriodIsEarnedUntilTheUpgradeOnly() {
        let start: EpochMillis = 1_700_006_400_000
        let days = RevenueRecognition.schedule(price: 1_000, start: start, end: start + 10 * ReportDay.millis,
                                               replacedAt: start + 3 * ReportDay.millis)
        XCTAssertEqual(days.map(\.recognised), [100, 100, 100])
        XCTAssertEqual(days.last?.deferred, 0)
    }

    // MARK: Tables

    func testTablesSumFlowsAndReadLevelsOnThePeriodsLastDay() throws {
        var c = SubscriptionContribution()
        let dims = ReportDimensions(environment: "Production", source: .apple, product: "p", currency: "USD")
        let jan1 = try XCTUnwrap(ReportDay(text: "2026-01-01"))
        for i in 0..<40 {
            c.cells[ReportCell(day: jan1.adding(days: Int64(i)), dimensions: dims), default: ReportValues()][.active] = Int64(i)
            c.cells[ReportCell(day: jan1.adding(days: Int64(i)), dimensions: dims), default: ReportValues()][.new] = 1
        }
        var rollup = ReportRollup()
        rollup.add(c)
        let month = rollup.table(ReportQuery(name: .subscriptions, from: jan1, to: jan1.adding(days: 39), interval: .month))
        XCTAssertEqual(month.rows.map(\.period.text), ["2026-01-01", "2026-02-01"])
        XCTAssertEqual(month.rows.map { $0.values[0] }, [30, 39])  // Jan 31st, then the range's last day
        let moves = rollup.table(ReportQuery(name: .movements, from: jan1, to: jan1.adding(days: 39), interval: .month))
        XCTAssertEqual(moves.rows.map { $0.values[0] }, [31, 9])
        let other = rollup.table(ReportQuery(name: .movements, from: jan1, to: jan1, filter: ReportFilter(environment: "Sandbox")))
        XCTAssertEqual(other.rows.map(\.values), [Array(repeating: 0, count: ReportName.movements.metrics.count)])
        XCTAssert(moves.csv.hasPrefix("period,new,renewed,"), moves.csv)
        rollup.subtract(c)
        XCTAssertEqual(rollup, ReportRollup())
    }

    // MARK: The model

    /// Every daily figure of a generated population, from the ledger (decoder → fold → rollup),
    /// equals the same figure computed from the generator's own statements (`ReportModel`).
    func testEveryDailyFigureMatchesTheGeneratorsModel() throws {
        for seed: UInt64 in [0xC4A2_7523, 0x5EED_0023] { try checkAgainstModel(seed: seed) }
    }

    private func checkAgainstModel(seed: UInt64) throws {
        let generator = LifecycleGenerator(customers: 160, days: 400, start: 1_735_689_600_000, seed: seed,
                                           environment: "Production")
        let lifecycles = generator.lifecycles()
        var facts: [Fact] = []
        for (i, n) in lifecycles.flatMap(\.notifications).enumerated() {
            facts += try n.facts(position: Int64(i + 1), recordedAt: n.deliveredAt)
        }
        let ledger = ReportRollup(facts: facts).cells
        let model = ReportModel.cells(of: lifecycles)
        var mismatches: [String] = []
        for cell in Set(ledger.keys).union(model.keys).sorted() {
            let a = ledger[cell] ?? ReportValues(), b = model[cell] ?? ReportValues()
            for m in ReportMetric.allCases where a[m] != b[m] {
                mismatches.append("\(cell.day) \(cell.dimensions.product)/\(cell.dimensions.currency) \(m.rawValue): ledger \(a[m]), model \(b[m])")
            }
        }
        XCTAssert(mismatches.isEmpty, "seed \(seed): \(mismatches.count) mismatches, first: \(mismatches.prefix(60).joined(separator: "\n"))")
        XCTAssertEqual(ledger.values.reduce(0) { $0 + $1[.reversals] }, model.values.reduce(0) { $0 + $1[.reversals] }, "seed \(seed): reversals in total")
        // The population exercises every figure (a model that is never asked proves nothing).
        var totals = ReportValues()
        for v in model.values { totals.add(v) }
        for m in ReportMetric.allCases where m != .noPrice {
            XCTAssertGreaterThan(totals[m], 0, "the generated population never produced \(m.rawValue)")
        }
        // Order-independent: the same facts shuffled give the same rollup.
        var rng = SystemRandomNumberGenerator()
        XCTAssertEqual(ReportRollup(facts: facts.shuffled(using: &rng)).cells, ledger)
    }
}

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

    /// A series' figures against a dictionary of the same adds: in and out of day order, ranges
    /// over figures already there, and sums that come back to zero (no zero figure is kept).
    func testAFiguresSeriesIsTheSumOfItsAddsInAnyOrder() {
        for seed in UInt64(1)...40 {
            var rng = SplitMix64(seed: seed)
            var figures = ReportFigures()
            var model: [Int64: Int64] = [:]
            for _ in 0..<200 {
                let day = Int64(rng.next() % 60), value = Int64(rng.next() % 5) - 2
                if rng.next() % 4 == 0 {
                    let end = day + Int64(rng.next() % 20)
                    figures.add(value, on: day..<end)
                    for d in day..<end { model[d, default: 0] += value }
                } else {
                    figures.add(value, on: day)
                    model[day, default: 0] += value
                }
            }
            model = model.filter { $0.value != 0 }
            XCTAssertEqual(figures.days, model.keys.sorted(), "seed \(seed)")
            XCTAssertEqual(figures.values, model.keys.sorted().map { model[$0]! }, "seed \(seed)")
            for day in Int64(-1)...80 {
                XCTAssertEqual(figures[day], model[day])
                XCTAssertEqual(figures.hasFigure(in: day...(day + 3)), (day...(day + 3)).contains { model[$0] != nil })
            }
        }
    }

    func testTablesSumFlowsAndReadLevelsOnThePeriodsLastDay() throws {
        var c = SubscriptionContribution()
        let dims = ReportDimensions(environment: "Production", source: .apple, product: "p", currency: "USD")
        let jan1 = try XCTUnwrap(ReportDay(text: "2026-01-01"))
        for i in 0..<40 {
            c.add(.active, Int64(i), on: jan1.adding(days: Int64(i)), dims)
            c.add(.new, 1, on: jan1.adding(days: Int64(i)), dims)
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

    /// Every daily figure and cohort of a generated population — Apple lifecycles (some
    /// transactions without a price) and WeChat xpay subscribers — from the ledger (decoder → fold
    /// → rollup) equals the same figure computed from the generators' own statements
    /// (`ReportModel`), and so does the retention report's share of each cohort.
    func testEveryDailyFigureMatchesTheGeneratorsModel() throws {
        for seed: UInt64 in [0xC4A2_7523, 0x5EED_0023] { try checkAgainstModel(seed: seed) }
    }

    private func checkAgainstModel(seed: UInt64) throws {
        var generator = LifecycleGenerator(customers: 160, days: 400, start: 1_735_689_600_000, seed: seed,
                                           environment: "Production")
        generator.noPriceRate = 0.03
        let lifecycles = generator.lifecycles()
        let wechat = WeChatSimulation(subscribers: 60, days: 400, start: 1_735_689_600_000, seed: seed).lifecycles()
        var facts: [Fact] = []
        var position: Int64 = 0
        for n in lifecycles.flatMap(\.notifications) {
            position += 1
            facts += try n.facts(position: position, recordedAt: n.deliveredAt)
        }
        for p in wechat.flatMap(\.pushes).sorted(by: { $0.deliveredAt < $1.deliveredAt }) {
            position += 1
            let event = RecordedEvent(position: position, recordedAt: p.deliveredAt, event: try p.event())
            let derived = FactDecoder.facts(of: event)
            XCTAssertFalse(derived.contains { $0.kind == .unreadable }, "\(p.label): \(derived)")
            facts += derived
        }
        let rollup = ReportRollup(facts: facts)
        let ledger = rollup.cells
        let model = ReportModel.figures(of: lifecycles, wechat: wechat)
        var mismatches: [String] = []
        for cell in Set(ledger.keys).union(model.cells.keys).sorted() {
            let a = ledger[cell] ?? ReportValues(), b = model.cells[cell] ?? ReportValues()
            for m in ReportMetric.allCases where a[m] != b[m] {
                mismatches.append("\(cell.day) \(cell.dimensions.source)/\(cell.dimensions.product)/\(cell.dimensions.currency) \(m.rawValue): ledger \(a[m]), model \(b[m])")
            }
        }
        XCTAssert(mismatches.isEmpty, "seed \(seed): \(mismatches.count) mismatches, first: \(mismatches.prefix(60).joined(separator: "\n"))")
        XCTAssertEqual(ledger.values.reduce(0) { $0 + $1[.reversals] }, model.cells.values.reduce(0) { $0 + $1[.reversals] }, "seed \(seed): reversals in total")
        // Cohorts: membership and retention per month, then the report's shares.
        let cohortMismatches = Set(rollup.cohorts.keys).union(model.cohorts.keys).sorted().filter { rollup.cohorts[$0] != model.cohorts[$0] }
        XCTAssert(cohortMismatches.isEmpty, "seed \(seed): cohorts differ at \(cohortMismatches.prefix(10).map { "\($0.cohort) +\($0.monthsLater) \($0.dimensions.product): ledger \(String(describing: rollup.cohorts[$0])), model \(String(describing: model.cohorts[$0]))" })")
        let to = try XCTUnwrap(ReportDay(text: "2026-02-28"))
        let retention = rollup.table(ReportQuery(name: .retention, from: to.monthStart(adding: -14), to: to))
        let expected = ReportModel.retention(model.cohorts, to: to)
        XCTAssertEqual(retention.cohorts.count, expected.count)
        XCTAssertGreaterThan(retention.cohorts.count, 4)
        for row in retention.cohorts {
            let e = try XCTUnwrap(expected[row.cohort.monthText], row.cohort.monthText)
            XCTAssertEqual(row.members, e.members, row.cohort.monthText)
            XCTAssertEqual(row.shares, e.shares, row.cohort.monthText)
        }
        // The population exercises every figure, from both sources (a model never asked proves nothing).
        var totals = ReportValues(), wechatTotals = ReportValues()
        for (cell, v) in model.cells {
            totals.add(v)
            if cell.dimensions.source == .wechat { wechatTotals.add(v) }
        }
        for m in ReportMetric.allCases {
            XCTAssertGreaterThan(totals[m], 0, "the generated population never produced \(m.rawValue)")
        }
        for m in [ReportMetric.active, .new, .renewed, .reactivated, .churnedVoluntary, .churnedRefund, .refunds, .grossRevenue, .recognisedRevenue, .deferredRevenue] {
            XCTAssertGreaterThan(wechatTotals[m], 0, "the WeChat subscribers never produced \(m.rawValue)")
        }
        // Order-independent: the same facts shuffled give the same rollup.
        var rng = SystemRandomNumberGenerator()
        XCTAssertEqual(ReportRollup(facts: facts.shuffled(using: &rng)).cells, ledger)
    }

    func testASharesTextIsExact() {
        XCTAssertEqual(CohortRow.share(1, of: 3), "0.3333")
        XCTAssertEqual(CohortRow.share(2, of: 3), "0.6667")
        XCTAssertEqual(CohortRow.share(1, of: 8), "0.1250")
        XCTAssertEqual(CohortRow.share(1, of: 20_000), "0.0001", "half up")
        XCTAssertEqual(CohortRow.share(7, of: 7), "1.0000")
        XCTAssertEqual(CohortRow.share(0, of: 7), "0.0000")
        XCTAssertEqual(CohortRow.share(3, of: 0), "")
        XCTAssertEqual(CohortRow.share(Int64.max / 2, of: Int64.max), "0.5000", "no overflow")
    }

    /// Two transactions bought at the same instant are ordered as the fold orders them: by
    /// transactionId as a number ("9" before "10"; as text "10" would come first), so the later one
    /// is the upgrade.
    func testSameInstantTransactionsAreOrderedAsNumbers() throws {
        let t: EpochMillis = 1_767_225_600_000 + 3_600_000
        func tx(_ id: String, _ product: String, price: Int64) -> AppleTransaction {
            var tx = AppleTransaction()
            tx.transactionId = id
            tx.originalTransactionId = "1"
            tx.bundleId = "com.example"
            tx.productId = product
            tx.purchaseDate = AppleTime(t)
            tx.originalPurchaseDate = AppleTime(t)
            tx.expiresDate = AppleTime(t + 30 * ReportDay.millis)
            tx.type = ProductType.autoRenewable
            tx.environment = "Production"
            tx.price = price
            tx.currency = "USD"
            tx.signedDate = AppleTime(t)
            return tx
        }
        var facts: [Fact] = []
        for (position, (type, subtype, transaction)) in [("SUBSCRIBED", "INITIAL_BUY", tx("9", "basic", price: 1_000)),
                                                         ("DID_CHANGE_RENEWAL_PREF", "UPGRADE", tx("10", "premium", price: 2_000))].enumerated() {
            var p = AppleEventPayload()
            p.notificationType = type
            p.subtype = subtype
            p.notificationUUID = "uuid-\(position)"
            p.signedDate = AppleTime(t + Int64(position))
            var data = AppleNotification.NotificationData()
            data.bundleId = "com.example"
            data.environment = "Production"
            data.status = 1
            p.data = data
            p.transactionInfo = transaction
            let json = try JSONEncoder().encode(p)
            facts += FactDecoder.facts(of: RecordedEvent(position: Int64(position + 1), recordedAt: t, event: NewEvent(
                streamId: "1", dedupeKey: "uuid-\(position)", source: .apple, type: "\(type)/\(subtype)", environment: "Production",
                signedAt: t + Int64(position), expiresAt: transaction.expiresDate?.millis, payload: json, raw: json)))
        }
        let rollup = ReportRollup(facts: facts)
        let upgrades = rollup.cells.filter { $0.value[.upgrades] != 0 }.map(\.key.dimensions.product)
        XCTAssertEqual(upgrades, ["premium"], "the upgrade is transaction 10, bought with 9 and ordered after it")
        let active = rollup.cells.filter { $0.key.day == ReportDay(containing: t) && $0.value[.active] != 0 }.map(\.key.dimensions.product)
        XCTAssertEqual(active, ["premium"], "the transaction in effect is 10, as the fold says")
    }
}

import Foundation
import LedgerCore
import LedgerStore
import WeChatPay

/// `ledger-dev bench refunds`: the refund-case list at 100k cases. Seeds N WeChat refund
/// inquiries (every fourth refunded, every tenth refused by its outcome failing) into a scratch
/// database, rebuilds the refund-case projection, then times pages of the list — the first, one
/// deep in the list reached by its cursor, a filtered one — against the same run's baseline: what
/// `GET /v1/refunds` did before the projection (fold every refund fact on each request).
/// Each figure is the median of 3 runs.
public enum RefundListBenchmark {
    public struct Report: Sendable, CustomStringConvertible {
        public var cases: Int
        public var seedSeconds: Double
        public var rebuildSeconds: Double
        public var firstPage: Double
        public var deepPage: Double
        public var deepPageNumber: Int
        public var filteredPage: Double
        public var walkPerPage: Double
        public var baseline: Double
        /// Every run of the first page and of the baseline (the fields above are their medians).
        public var firstPageRuns: [Double] = []
        public var baselineRuns: [Double] = []

        /// The first page from the projection against the same run's fold of every refund fact.
        public var summary: BenchSummary {
            BenchSummary(name: "refunds", command: "ledger-dev bench refunds --cases \(cases)", unit: "s",
                         ledgerLabel: "first page of 100 refund cases (projection, cursor)", ledger: firstPageRuns,
                         baselineLabel: "folding every refund fact per request (the list before the projection)",
                         baseline: baselineRuns, higherIsBetter: false,
                         details: ["deep page ms": deepPage * 1000, "filtered page ms": filteredPage * 1000,
                                   "walk ms per page": walkPerPage * 1000])
        }

        public var description: String {
            [
                "bench refunds: \(cases) refund cases (WeChat inquiries; 1 in 4 refunded, 1 in 10 failed), pages of 100, median of 3 runs",
                String(format: "  seeded in %.1f s; refund_cases projection rebuilt from position 0 in %.2f s", seedSeconds, rebuildSeconds),
                String(format: "  first page:                   %8.2f ms", firstPage * 1000),
                String(format: "  page %d via its cursor:      %8.2f ms", deepPageNumber, deepPage * 1000),
                String(format: "  filtered page (outcome):      %8.2f ms", filteredPage * 1000),
                String(format: "  walking every page (cursor):  %8.2f ms per page", walkPerPage * 1000),
                String(format: "  baseline, same run: fold of every refund fact per request (the list before the projection): %.0f ms", baseline * 1000),
                String(format: "  the deep page is %.2f× the first", deepPage / max(firstPage, 1e-9)),
            ].joined(separator: "\n")
        }
    }

    public static func run(serverConninfo: String, cases: Int, log: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        let database = try TestDatabase.create(serverConninfo: serverConninfo, prefix: "ledger_bench_refunds")
        defer { try? database.drop() }
        // The superuser connection: the baseline's fold of 100k cases outlasts the service role's 5 s statements.
        let store = Store(.init(databaseURL: database.adminConninfo, poolSize: 8, liveProjections: false))
        defer { store.close() }

        log("seeding \(cases) refund cases…")
        let seedStart = ContinuousClock.now
        let batch = 1000
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = 0
            var running = 0
            while next < cases || running > 0 {
                while running < 4 && next < cases {
                    let range = next..<min(next + batch, cases)
                    next = range.upperBound
                    running += 1
                    group.addTask { _ = try await store.events.append(range.flatMap(events)) }
                }
                try await group.next()
                running -= 1
            }
        }
        let seedSeconds = seconds(since: seedStart)
        log("rebuilding the refund_cases projection…")
        let rebuild = try await store.rebuilder().run(projections: [.refundCases])
        guard rebuild.streams == cases else {
            throw BenchmarkError.invalid("the projection holds \(rebuild.streams) cases, expected \(cases)")
        }

        let all = RefundCaseFilter()
        let firstPageRuns = try await times { _ = try await store.refundCases.cases(matching: all, limit: 100) }
        log("walking the list by cursor…")
        var cursor: RefundCaseCursor?
        var pages = 0
        var deepCursor: RefundCaseCursor?
        let deepPageNumber = max(1, cases / 100 * 9 / 10)
        let walkStart = ContinuousClock.now
        repeat {
            let page = try await store.refundCases.cases(matching: all, after: cursor, limit: 100)
            pages += 1
            if pages == deepPageNumber { deepCursor = cursor }
            cursor = page.nextCursor
        } while cursor != nil
        let walkPerPage = seconds(since: walkStart) / Double(pages)
        let deepPage = try await median { _ = try await store.refundCases.cases(matching: all, after: deepCursor, limit: 100) }
        let filteredPage = try await median {
            _ = try await store.refundCases.cases(matching: RefundCaseFilter(outcome: .refundFailed), limit: 100)
        }
        log("baseline: folding every refund fact, 3 times…")
        let baselineRuns = try await times {
            let folded = RefundCaseFold.cases(from: try await store.refunds.allCaseFacts()).filter(all.matches)
            guard folded.count == cases else { throw BenchmarkError.invalid("the baseline folded \(folded.count) cases") }
        }
        return Report(cases: cases, seedSeconds: seedSeconds, rebuildSeconds: rebuild.seconds,
                      firstPage: firstPageRuns.sorted()[1],
                      deepPage: deepPage, deepPageNumber: deepPageNumber + 1, filteredPage: filteredPage, walkPerPage: walkPerPage,
                      baseline: baselineRuns.sorted()[1], firstPageRuns: firstPageRuns, baselineRuns: baselineRuns)
    }

    /// Case `n`: its inquiry, and for some its refund outcome.
    static func events(_ n: Int) -> [NewEvent] {
        let order = "BENCH-\(String(n, radix: 36))"
        let asked = 1_775_300_000 + n
        let inquiry: [String: Any] = [
            "ToUserName": "gh_bench", "FromUserName": "o_official", "CreateTime": asked, "MsgType": "event",
            "Event": XPayEventName.refundInquiry, "refund_time": String(asked), "order_time": "1775226066",
            "channel_bill": "5100\(n)", "bundleid": "com.tencent.xin", "product_id": "vip_monthly", "p_count": "1",
            "refund_request_reason": "UNINTENDED_PURCHASE", "provide_status": "1", "pay_order_id": order,
            "service_type": "unipdt", "consumption_status": "0",
        ]
        var out = [event(inquiry, stream: StreamId.wechatOrder(order).text, key: "refund-inquiry:\(order):\(asked)",
                         type: XPayEventName.refundInquiry)]
        if n % 4 == 0 || n % 10 == 1 {
            let ok = n % 4 == 0
            let refund: [String: Any] = [
                "ToUserName": "gh_bench", "FromUserName": "o_official", "CreateTime": asked + 600, "MsgType": "event",
                "Event": XPayEventName.refundNotify, "OpenId": "o-\(n % 5000)", "WxRefundId": "wxr-\(order)", "MchRefundId": "",
                "WxOrderId": "WX-\(order)", "MchOrderId": order, "RefundFee": 990, "RetCode": ok ? 0 : 268_490_001,
                "RetMsg": ok ? "" : "refund failed", "RefundStartTimestamp": asked + 540, "RefundSuccTimestamp": ok ? asked + 600 : 0,
                "RetryTimes": 0,
            ]
            out.append(event(refund, stream: StreamId.wechatOrder(order).text, key: "refund:wxr-\(order):\(ok ? 0 : 268_490_001)",
                             type: XPayEventName.refundNotify))
        }
        return out
    }

    static func event(_ message: [String: Any], stream: String, key: String, type: String) -> NewEvent {
        let payload = (try? JSONSerialization.data(withJSONObject: message, options: [.sortedKeys])) ?? Data()
        return NewEvent(streamId: stream, dedupeKey: key, source: .wechat, type: type, payload: payload, raw: payload)
    }

    static func median(_ body: () async throws -> Void) async throws -> Double {
        try await times(body).sorted()[1]
    }

    /// Three timed runs of `body`.
    static func times(_ body: () async throws -> Void) async throws -> [Double] {
        var times: [Double] = []
        for _ in 0..<3 {
            let start = ContinuousClock.now
            try await body()
            times.append(seconds(since: start))
        }
        return times
    }

    static func seconds(since start: ContinuousClock.Instant) -> Double {
        let d = start.duration(to: .now).components
        return Double(d.seconds) + Double(d.attoseconds) / 1e18
    }

    public enum BenchmarkError: Error, CustomStringConvertible {
        case invalid(String)
        public var description: String {
            switch self { case .invalid(let m): "bench refunds: \(m)" }
        }
    }
}

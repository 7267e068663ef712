import Crypto
import Foundation
import LedgerCore
import LedgerStore

/// The query of `GET /v1/reports/{name}` (and of the auditor's report pages): which report, the
/// range, the interval, the filters, the position and the format. Every bad parameter is a 400
/// that says what to send instead.
struct ReportRequest: Sendable {
    var name: ReportName
    var from: ReportDay?
    var to: ReportDay?
    var interval: ReportInterval
    var filter: ReportFilter
    var asOfPosition: Int64?
    var format: String

    static let parameters: Set<String> = ["from", "to", "interval", "environment", "source", "product", "currency",
                                          "asOfPosition", "format", "period", "metric"]

    init(name rawName: String, _ raw: [String: String], defaultInterval: ReportInterval = .day) throws {
        func fail(_ e: ReportQueryError) -> ServiceFailure { ServiceFailure.invalidParameter(e.description) }
        guard let name = ReportName(rawValue: rawName) else {
            throw ServiceFailure(.notFound, "unknown_report", ReportQueryError.unknownReport(rawName).description)
        }
        self.name = name
        if let unknown = raw.keys.filter({ !Self.parameters.contains($0) }).sorted().first {
            throw ServiceFailure.invalidParameter(
                "\(unknown) is not a parameter of the reports; use \(Self.parameters.sorted().joined(separator: ", "))")
        }
        func day(_ p: String) throws -> ReportDay? {
            guard let v = raw[p] else { return nil }
            guard let d = ReportDay(text: v) else { throw fail(.invalidDay(parameter: p, value: v)) }
            return d
        }
        from = try day("from")
        to = try day("to")
        if let f = from, let t = to {
            guard f <= t else { throw fail(.reversedRange(from: f.text, to: t.text)) }
            guard t.index - f.index < ReportQueryError.maxDays else { throw fail(.rangeTooLong(days: t.index - f.index + 1)) }
        }
        if let v = raw["interval"] {
            guard let i = ReportInterval(rawValue: v) else { throw fail(.invalidInterval(v)) }
            interval = i
        } else {
            interval = defaultInterval
        }
        var filter = ReportFilter()
        if let v = raw["environment"] {
            guard let e = SubscriptionKey.environment(v), e == v else { throw fail(.invalidEnvironment(v)) }
            filter.environment = e
        }
        if let v = raw["source"] {
            guard let s = ReportSource(rawValue: v) else { throw fail(.invalidSource(v)) }
            filter.source = s
        }
        for (p, v) in [("product", raw["product"]), ("currency", raw["currency"])] {
            guard let v else { continue }
            guard !v.isEmpty, v.utf8.count <= 200, !v.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                throw ServiceFailure.invalidParameter("\(p) must be 1 to 200 printable characters, e.g. \(p == "product" ? "com.example.monthly" : "USD")")
            }
            if p == "product" { filter.product = v } else { filter.currency = v }
        }
        self.filter = filter
        if let p = raw["asOfPosition"] {
            guard let n = Int64(p), n >= 0 else {
                throw ServiceFailure.invalidParameter("asOfPosition must be a log position (an integer ≥ 0), e.g. the position an earlier report names")
            }
            asOfPosition = n
        }
        format = raw["format"] ?? "json"
        guard format == "json" || format == "csv" else { throw ServiceFailure.invalidParameter("format must be json or csv") }
    }

    /// The query against a snapshot: a missing `to` is the day of the latest business time the
    /// facts state (so the default range depends on the position only, never on the clock); a
    /// missing `from` is a year before `to` (12 months for a monthly interval).
    func query(latest: EpochMillis?) -> ReportQuery {
        let to = self.to ?? from.map { max($0, ReportDay(containing: latest ?? $0.start)) } ?? ReportDay(containing: latest ?? 0)
        let from = self.from ?? (interval == .month || name == .retention ? to.monthStart(adding: -11) : to.adding(days: -364))
        return ReportQuery(name: name, from: from, to: max(from, to), interval: interval, filter: filter)
    }
}

/// One report as of one log position, with what reproduces it: the position, the hash chain's
/// value there, the fact schema version and the catalog digest.
struct ReportAnswer: Sendable {
    var reading: ReportReading
    var catalogDigest: String

    var table: ReportTable { reading.table }
    var position: Int64 { reading.position }
    var chainHashHex: String { Hex.encode(reading.chainHash) }

    var headers: [(String, String)] {
        [("Ledger-Position", String(reading.position)), ("Ledger-Chain-Hash", chainHashHex),
         ("Ledger-Fact-Schema-Version", String(reading.factSchemaVersion)), ("Ledger-Catalog-Digest", catalogDigest)]
    }

    /// Nothing here depends on when or how the report was computed (the projection's tables or a
    /// fold at `?asOfPosition=`), so the same position gives the same bytes (canonical JSON: sorted keys).
    var json: JSONValue {
        let q = table.query
        var answer: [String: JSONValue] = [
            "report": .string(q.name.rawValue), "title": .string(q.name.title),
            "position": .integer(reading.position), "chainHash": .string(chainHashHex),
            "factSchemaVersion": .integer(Int64(reading.factSchemaVersion)), "catalogDigest": .string(catalogDigest),
            "from": .string(q.from.text), "to": .string(q.to.text), "interval": .string(q.interval.rawValue),
            "filters": ["environment": .optional(q.filter.environment), "source": .optional(q.filter.source?.rawValue),
                        "product": .optional(q.filter.product), "currency": .optional(q.filter.currency)],
            "metrics": .array(table.metrics.map { .string($0.rawValue) }),
        ]
        if q.name == .retention {
            answer["cohorts"] = .array(table.cohorts.map {
                ["cohort": .string($0.cohort.monthText), "members": .integer($0.members), "retained": .array($0.retained.map(JSONValue.integer)),
                 "retainedShare": .array($0.shares.map(JSONValue.string))]
            })
        } else {
            answer["rows"] = .array(table.rows.map { r in
                var row: [String: JSONValue] = ["period": .string(r.period.text)]
                if let c = r.currency { row["currency"] = .string(c) }
                for (m, v) in zip(table.metrics, r.values) { row[m.rawValue] = .integer(v) }
                return .object(row)
            })
        }
        return .object(answer)
    }

    /// One comment line naming where the figures come from (no comma in it), then `ReportTable.csv`.
    var csv: String {
        let q = table.query
        return "# ledger report \(q.name.rawValue); position=\(reading.position); chain_hash=\(chainHashHex); "
            + "fact_schema_version=\(reading.factSchemaVersion); catalog_digest=\(catalogDigest); "
            + "from=\(q.from.text); to=\(q.to.text); interval=\(q.interval.rawValue)\r\n" + table.csv
    }
}

/// Use case: the business as figures for auditors — daily rollups of the facts, read from the
/// reporting projection or folded at an earlier position, and the subscriptions behind any point.
struct ReportDesk: Sendable {
    let store: Store
    let catalogDigest: String

    func read(_ request: ReportRequest, point: ReportPoint? = nil) async throws -> ReportAnswer {
        do {
            let reading = try await store.reports.read(asOfPosition: request.asOfPosition, point: point) { latest in
                let query = request.query(latest: latest)
                guard query.to.index - query.from.index < ReportQueryError.maxDays else {
                    throw ServiceFailure.invalidParameter(ReportQueryError.rangeTooLong(days: query.to.index - query.from.index + 1).description)
                }
                return query
            }
            return ReportAnswer(reading: reading, catalogDigest: catalogDigest)
        } catch let error as ReportStoreError {
            throw ServiceFailure.invalidParameter(error.description)
        }
    }

    func report(_ request: ReportRequest) async throws -> ReportAnswer { try await read(request) }

    /// The subscriptions behind one point: `period` (the first day of an interval) and `metric`.
    func members(_ request: ReportRequest, period rawPeriod: String?, metric rawMetric: String?) async throws
        -> (ReportAnswer, ReportDay, ReportMetric, [SubscriptionKey]) {
        guard request.name != .retention else {
            throw ServiceFailure.invalidParameter("the retention report has no points to drill into; open a cohort's subscriptions with the movements report (metric=new)")
        }
        guard let rawPeriod, let period = ReportDay(text: rawPeriod) else {
            throw ServiceFailure.invalidParameter(ReportQueryError.invalidDay(parameter: "period", value: rawPeriod ?? "").description)
        }
        guard let rawMetric, let metric = ReportMetric(rawValue: rawMetric), request.name.metrics.contains(metric) else {
            throw ServiceFailure.invalidParameter(ReportQueryError.invalidMetric(rawMetric ?? "").description
                + "; use one of \(request.name.metrics.map(\.rawValue).joined(separator: ", "))")
        }
        let answer = try await read(request, point: ReportPoint(period: period, metric: metric))
        return (answer, period, metric, answer.reading.members ?? [])
    }
}

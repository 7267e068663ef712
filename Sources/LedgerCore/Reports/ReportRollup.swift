/// The daily rollups of every subscription: the sum of their `SubscriptionContribution`s, kept
/// per (UTC day, environment, source, product, currency), and the cohorts. A fold of the facts:
/// the same facts give the same rollup in any order.
public struct ReportRollup: Sendable, Equatable {
    public var cells: [ReportCell: ReportValues] = [:]
    public var cohorts: [CohortKey: CohortCount] = [:]

    public init() {}

    /// The rollup of every subscription of a projection.
    public init(folds: [SubscriptionKey: SubscriptionFold]) {
        for fold in folds.values { add(SubscriptionRollup.contribution(of: fold)) }
    }

    /// The rollup of a set of facts (reports at a log position).
    public init(facts: some Sequence<Fact>) {
        self.init(folds: SubscriptionProjection(facts: facts).subscriptions)
    }

    public mutating func add(_ c: SubscriptionContribution) { add(c, sign: 1) }

    public mutating func subtract(_ c: SubscriptionContribution) { add(c, sign: -1) }

    private mutating func add(_ c: SubscriptionContribution, sign: Int64) {
        for (series, figures) in c.series {
            for (day, value) in figures { add(series.metric, sign &* value, on: ReportDay(index: day), series.dimensions) }
        }
        for (k, v) in c.cohorts { add(k, CohortCount(members: sign &* v.members, retained: sign &* v.retained)) }
    }

    /// Adds one figure; a cell whose figures all become zero is dropped.
    public mutating func add(_ metric: ReportMetric, _ value: Int64, on day: ReportDay, _ dims: ReportDimensions) {
        guard value != 0 else { return }
        let cell = ReportCell(day: day, dimensions: dims)
        var values = cells.removeValue(forKey: cell) ?? ReportValues()
        values[metric] &+= value
        if !values.isZero { cells[cell] = values }
    }

    public mutating func add(_ key: CohortKey, _ v: CohortCount) {
        var count = cohorts[key] ?? CohortCount()
        count.members &+= v.members
        count.retained &+= v.retained
        cohorts[key] = count.members == 0 && count.retained == 0 ? nil : count
    }

    /// The first and last day any figure is kept for (nil when empty).
    public var dayRange: ClosedRange<ReportDay>? {
        guard let lo = cells.keys.min(by: { $0.day < $1.day })?.day, let hi = cells.keys.max(by: { $0.day < $1.day })?.day else { return nil }
        return lo...hi
    }
}

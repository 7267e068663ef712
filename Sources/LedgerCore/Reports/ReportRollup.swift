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

    public mutating func add(_ c: SubscriptionContribution) {
        for (cell, v) in c.cells {
            cells[cell, default: ReportValues()].add(v)
            if cells[cell]!.isZero { cells[cell] = nil }
        }
        for (k, v) in c.cohorts {
            var count = cohorts[k] ?? CohortCount()
            count.members += v.members
            count.retained += v.retained
            cohorts[k] = count.members == 0 && count.retained == 0 ? nil : count
        }
    }

    public mutating func subtract(_ c: SubscriptionContribution) {
        for (cell, v) in c.cells {
            cells[cell, default: ReportValues()].subtract(v)
            if cells[cell]!.isZero { cells[cell] = nil }
        }
        for (k, v) in c.cohorts {
            var count = cohorts[k] ?? CohortCount()
            count.members -= v.members
            count.retained -= v.retained
            cohorts[k] = count.members == 0 && count.retained == 0 ? nil : count
        }
    }

    /// The first and last day any figure is kept for (nil when empty).
    public var dayRange: ClosedRange<ReportDay>? {
        guard let lo = cells.keys.min(by: { $0.day < $1.day })?.day, let hi = cells.keys.max(by: { $0.day < $1.day })?.day else { return nil }
        return lo...hi
    }
}

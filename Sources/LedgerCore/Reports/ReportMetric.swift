/// One figure the reports keep per day (README "Charts and revenue" defines each). Money is in
/// milliunits of the row's currency (Apple's `price` unit; WeChat fen × 10), never converted.
public enum ReportMetric: String, Sendable, Hashable, CaseIterable, Codable {
    /// Paid subscriptions with access at the end of the day (grace included, trials and billing
    /// retry excluded).
    case active
    /// Subscriptions in a free trial at the end of the day.
    case trial
    /// Of `active`: in a billing grace period.
    case grace
    /// In billing retry without access.
    case billingRetry = "billing_retry"
    /// Subscriptions whose first paid day this is.
    case new
    /// Paid periods that continue a paid subscription (not its first, not a return, not an upgrade).
    case renewed
    /// Subscriptions paid-active again after a churn.
    case reactivated
    /// Paid-active the day before, not today (all reasons).
    case churned
    case churnedVoluntary = "churned_voluntary"
    case churnedBilling = "churned_billing"
    case churnedRefund = "churned_refund"
    /// A period replaced at once by a higher tier (Apple marks the replaced one `isUpgraded`).
    case upgrades
    /// A renewal into another product (Apple applies downgrades and crossgrades at renewal).
    case downgrades
    /// Refunds in force, on the day of their revocationDate.
    case refunds
    case refundAmount = "refund_amount"
    /// Refunds reversed (Apple REFUND_REVERSED), on the day the reversal was signed.
    case reversals
    /// What customers paid for periods bought that day (before store commission and tax).
    case grossRevenue = "gross_revenue"
    /// Revenue earned that day: each paid period's price straight-line over its days, less refunds.
    case recognisedRevenue = "recognised_revenue"
    /// Paid and not yet earned at the end of the day (a contract liability).
    case deferredRevenue = "deferred_revenue"
    /// Transactions bought that day that carry no price (counted, never priced by guess).
    case noPrice = "no_price"

    /// A level is a balance at the end of a day (a week's or month's value is its last day's);
    /// every other metric is a flow (summed over the days of the interval).
    public var isLevel: Bool {
        switch self {
        case .active, .trial, .grace, .billingRetry, .deferredRevenue: true
        default: false
        }
    }

    /// An amount of money (per currency); the others are counts.
    public var isMoney: Bool {
        switch self {
        case .refundAmount, .grossRevenue, .recognisedRevenue, .deferredRevenue: true
        default: false
        }
    }

    /// Position in `ReportValues`: the case's place in `allCases` (declaration order). A switch,
    /// not a dictionary: a contribution reads and writes a slot for every day of every metric.
    public var slot: Int {
        switch self {
        case .active: 0
        case .trial: 1
        case .grace: 2
        case .billingRetry: 3
        case .new: 4
        case .renewed: 5
        case .reactivated: 6
        case .churned: 7
        case .churnedVoluntary: 8
        case .churnedBilling: 9
        case .churnedRefund: 10
        case .upgrades: 11
        case .downgrades: 12
        case .refunds: 13
        case .refundAmount: 14
        case .reversals: 15
        case .grossRevenue: 16
        case .recognisedRevenue: 17
        case .deferredRevenue: 18
        case .noPrice: 19
        }
    }
}

/// Where a subscription came from.
public enum ReportSource: String, Sendable, Hashable, CaseIterable, Codable {
    case apple
    case wechat
}

/// The dimensions every daily figure is kept by.
public struct ReportDimensions: Sendable, Hashable, Comparable {
    public var environment: String
    public var source: ReportSource
    public var product: String
    /// ISO 4217 code of the period's price; `ReportDimensions.noPrice` when the transaction has none.
    public var currency: String

    /// The currency of a transaction without a price: counted apart, never guessed.
    public static let noPrice = "none"
    /// The currency of a price whose currency is not an ISO 4217 code (three letters): counted
    /// apart under ISO 4217's "no currency" code rather than under whatever text was sent.
    public static let notACurrency = "XXX"

    /// A report's currency: the code in upper case when it is three ASCII letters, else `notACurrency`.
    public static func currencyCode(_ text: String) -> String {
        let upper = text.uppercased()
        return upper.utf8.count == 3 && upper.utf8.allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }) ? upper : notACurrency
    }

    public init(environment: String, source: ReportSource, product: String, currency: String) {
        self.environment = environment
        self.source = source
        self.product = product
        self.currency = currency
    }

    public static func < (a: ReportDimensions, b: ReportDimensions) -> Bool {
        (a.environment, a.source.rawValue, a.product, a.currency) < (b.environment, b.source.rawValue, b.product, b.currency)
    }
}

/// One value per `ReportMetric`, in `allCases` order.
public struct ReportValues: Sendable, Hashable {
    public var values: [Int64]

    public init() { values = Array(repeating: 0, count: ReportMetric.allCases.count) }

    public subscript(metric: ReportMetric) -> Int64 {
        get { values[metric.slot] }
        set { values[metric.slot] = newValue }
    }

    public var isZero: Bool { values.allSatisfy { $0 == 0 } }

    public mutating func add(_ other: ReportValues) {
        for i in values.indices { values[i] &+= other.values[i] }
    }

    public mutating func subtract(_ other: ReportValues) {
        for i in values.indices { values[i] &-= other.values[i] }
    }
}

/// A day and its dimensions: the key of one daily rollup row.
public struct ReportCell: Sendable, Hashable, Comparable {
    public var day: ReportDay
    public var dimensions: ReportDimensions

    public init(day: ReportDay, dimensions: ReportDimensions) {
        self.day = day
        self.dimensions = dimensions
    }

    public static func < (a: ReportCell, b: ReportCell) -> Bool {
        a.day != b.day ? a.day < b.day : a.dimensions < b.dimensions
    }
}

/// One cohort's membership: subscriptions first paid in `cohort` (a month's first day), and
/// whether each is still paid-active at the end of each later month.
public struct CohortKey: Sendable, Hashable, Comparable {
    public var cohort: ReportDay
    public var dimensions: ReportDimensions
    /// 0: the cohort's own month.
    public var monthsLater: Int

    public init(cohort: ReportDay, dimensions: ReportDimensions, monthsLater: Int) {
        self.cohort = cohort
        self.dimensions = dimensions
        self.monthsLater = monthsLater
    }

    public static func < (a: CohortKey, b: CohortKey) -> Bool {
        (a.cohort, a.monthsLater) != (b.cohort, b.monthsLater) ? (a.cohort.index, a.monthsLater) < (b.cohort.index, b.monthsLater)
            : a.dimensions < b.dimensions
    }
}

import Foundation
import LedgerCore

/// A seeded random source with the few draws the generators need. Every lifecycle gets its own
/// stream (derived from the run's seed and the lifecycle's index), so changing one generator's
/// draws does not reshuffle every other lifecycle.
struct DiffRandom {
    var g: SplitMix64

    init(seed: UInt64, stream: UInt64) {
        g = SplitMix64(seed: SplitMix64.mix(seed ^ SplitMix64.mix(stream &+ 0x5DEE_CE66)))
    }

    mutating func int(_ range: ClosedRange<Int64>) -> Int64 { g.int(in: range) }
    mutating func int(_ range: ClosedRange<Int>) -> Int { Int(g.int(in: Int64(range.lowerBound)...Int64(range.upperBound))) }
    mutating func chance(_ p: Double) -> Bool { g.chance(p) }
    mutating func pick<T>(_ items: [T]) -> T { g.pick(items) }
    mutating func uuid() -> String { g.uuid() }
    mutating func shuffle<T>(_ items: inout [T]) {
        guard items.count > 1 else { return }
        for i in stride(from: items.count - 1, to: 0, by: -1) {
            items.swapAt(i, Int(g.next() % UInt64(i + 1)))
        }
    }
    mutating func digits(_ n: Int) -> String { String((0..<n).map { _ in Character(String(g.next() % 10)) }) }
}

/// One HTTP request that delivers a notification, plus the retry the sender would make of it
/// (Apple re-sends the same bytes; V1 retries differ in `latest_receipt`; WeChat re-pushes with a
/// new nonce, ciphertext and CreateTime).
public struct DiffMessage: Sendable {
    public var label: String
    /// Business time of the message (for business-order delivery and reports).
    public var at: EpochMillis
    public var path: String
    public var body: Data
    public var contentType: String
    public var retryPath: String
    public var retryBody: Data
    /// Which source answers it: `apple_v2`, `apple_v1` or `wechat`.
    public var source: String
    /// WeChat: the order a delivery pays (`deliver`), or that a refund/inquiry names (`names`).
    var delivers: String?
    var names: String?
    /// The retry states something else than the original (a delivery without PaidTime is timed by
    /// the push's CreateTime, new on each re-push), and the ledger keeps the first copy it gets:
    /// the retry is delivered only after the original, as WeChat sends it.
    var retryFollowsOriginal = false
}

/// One generated lifecycle: its script (what happened, for the report), the messages the stores
/// would send, the model that predicts its state, and the instants worth asking about.
public struct DiffLifecycle: Sendable {
    public enum Source: String, Sendable { case appleV2 = "apple-v2", appleV1 = "apple-v1", oneTime = "apple-one-time", wechat }

    public var index: Int
    public var source: Source
    public var environment: String
    public var originalTransactionId: String
    /// Lifecycles that share a delivery unit are delivered by one sender in one sequence (the two
    /// subscriptions of one V1 account; a Sandbox twin of a Production id).
    public var unit: Int
    /// Shapes this lifecycle exercises (refund, reversal, upgrade, early-renewal, ...).
    public var tags: [String]
    public var script: [String]
    public var messages: [DiffMessage]
    /// Past instants to ask `?at=` about (boundaries: exact purchases, revocation dates, ...).
    public var probes: [EpochMillis]
    /// WeChat: refunds/inquiries of an order to deliver before that order's delivery.
    public var refundsFirst: Bool
    /// The customer id to ask the entitlements route with (an appAccountToken possibly in upper
    /// case, as Swift's `uuidString` spells it); nil: the lifecycle names no customer.
    public var queryCustomerId: String?
    let model: DiffModel

    public var label: String { "#\(index) \(source.rawValue) \(environment):\(originalTransactionId) [\(tags.joined(separator: ","))]" }

    public func expected(at t: EpochMillis) -> ExpectedSubscription? { model.expected(at: t) }

    /// The customer the model says the subscription belongs to (normalised).
    public var customerId: String? {
        switch model {
        case .apple(let w): w.customerId
        case .wechat(let w): w.openId
        }
    }

    /// V1 lifecycles: the product the next renewal is for, as the script has it at T (a pending
    /// crossgrade shows here: issue 20). Nil for other sources (not compared).
    public func expectedAutoRenewProductId(at t: EpochMillis) -> String? {
        guard source == .appleV1, case .apple(let w) = model else { return nil }
        return w.renewal(at: t)?.autoRenewProductId
    }

    /// Transactions whose REFUND was never delivered: the ledger must still open their refund case
    /// (`GET /v1/refunds/apple:<transactionId>`), learning the refund from a later snapshot.
    public var lostRefundTransactions: [String] {
        guard case .apple(let w) = model else { return [] }
        return w.transactions.filter { $0.lostRefunds > 0 }.map(\.id)
    }

    public func grants(at t: EpochMillis) -> [ExpectedGrant] {
        model.grants(at: t, environment: environment, originalTransactionId: originalTransactionId)
    }
}

/// A customer in one environment, as the entitlements route is asked about.
public struct DiffCustomer: Sendable, Hashable, Comparable {
    public var customerId: String
    public var environment: String
    /// How the question spells the id (upper-case UUIDs must match lower-case tokens).
    public var queryId: String

    public static func < (a: DiffCustomer, b: DiffCustomer) -> Bool {
        (a.customerId, a.environment) < (b.customerId, b.environment)
    }
}

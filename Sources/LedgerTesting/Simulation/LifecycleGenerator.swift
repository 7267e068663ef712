import Foundation
import LedgerCore

/// A product of the simulated subscription group. Lower `level` is the higher tier, as in
/// App Store Connect: moving to a lower level number is an upgrade (immediate), to a higher one a
/// downgrade, and to the same level with another duration a crossgrade (both at next renewal).
public struct SimulatedProduct: Sendable, Hashable {
    public var productId: String
    public var days: Int
    public var level: Int
    /// Milliunits.
    public var price: Int64

    public init(productId: String, days: Int, level: Int, price: Int64) {
        self.productId = productId
        self.days = days
        self.level = level
        self.price = price
    }

    public static let standardGroup: [SimulatedProduct] = [
        SimulatedProduct(productId: "com.example.monthly", days: 30, level: 2, price: 4_990),
        SimulatedProduct(productId: "com.example.yearly", days: 365, level: 2, price: 49_990),
        SimulatedProduct(productId: "com.example.premium.monthly", days: 30, level: 1, price: 9_990),
        SimulatedProduct(productId: "com.example.premium.yearly", days: 365, level: 1, price: 99_990),
    ]
}

/// One generated App Store Server Notification V2, as values of the AppleModels types, plus
/// when the simulated App Store delivers it (`deliveredAt`; a retried delivery is a second
/// entry with the same notificationUUID and content and a later `deliveredAt`).
public struct SimulatedNotification: Sendable, Equatable {
    public var notificationType: String
    public var subtype: String?
    public var notificationUUID: String
    public var signedDate: EpochMillis
    /// `data.status` as of signedDate.
    public var status: Int
    public var bundleId: String
    public var environment: String
    public var appAccountToken: String
    public var transaction: AppleTransaction
    public var renewal: AppleRenewalInfo
    public var deliveredAt: EpochMillis

    /// The decoded notification as the ledger stores it in `payload`.
    public var payload: AppleEventPayload {
        var p = AppleEventPayload()
        p.notificationType = notificationType
        p.subtype = subtype
        p.notificationUUID = notificationUUID
        p.signedDate = AppleTime(signedDate)
        var data = AppleNotification.NotificationData()
        data.bundleId = bundleId
        data.environment = environment
        data.status = status
        p.data = data
        p.transactionInfo = transaction
        p.renewalInfo = renewal
        return p
    }

    /// The notification itself (nested JWS left out: the simulator signs and fills them in).
    public var notification: AppleNotification {
        var n = AppleNotification()
        n.notificationType = notificationType
        n.subtype = subtype
        n.notificationUUID = notificationUUID
        n.version = "2.0"
        n.signedDate = AppleTime(signedDate)
        var data = AppleNotification.NotificationData()
        data.bundleId = bundleId
        data.environment = environment
        data.status = status
        n.data = data
        return n
    }

    /// The facts the ledger derives from this notification (through `FactDecoder`, the one decoder).
    public func facts(position: Int64, recordedAt: EpochMillis) throws -> [Fact] {
        FactDecoder.facts(of: try recordedEvent(position: position, recordedAt: recordedAt))
    }

    /// The event as the store would hold it (payload JSON; `raw` is the payload too, unsigned).
    public func recordedEvent(position: Int64, recordedAt: EpochMillis) throws -> RecordedEvent {
        let json = try JSONEncoder().encode(payload)
        return RecordedEvent(
            position: position, recordedAt: recordedAt,
            event: NewEvent(
                streamId: transaction.originalTransactionId ?? "", dedupeKey: notificationUUID, source: .apple,
                type: subtype.map { "\(notificationType)/\($0)" } ?? notificationType,
                environment: environment, signedAt: signedDate, expiresAt: transaction.expiresDate?.millis,
                payload: json, raw: json))
    }
}

/// The notifications of one customer's subscription, in delivery order.
public struct SimulatedLifecycle: Sendable, Equatable {
    public var customerIndex: Int
    /// Replays this lifecycle alone: `LifecycleGenerator.lifecycle(customerIndex:seed:…)`.
    public var seed: UInt64
    public var appAccountToken: String
    public var originalTransactionId: String
    public var notifications: [SimulatedNotification]
    /// The time after the last signed event; a useful evaluation point.
    public var end: EpochMillis
}

/// Generates realistic, deterministic subscription lifecycles from a printable seed: trials,
/// renewals, billing failures with grace and recovery or expiry after retry, voluntary churn,
/// resubscribes, refunds of any period and their reversals, upgrades (immediate) and
/// downgrades/crossgrades (at the next renewal), auto-renew toggles, price increases, late
/// and duplicated deliveries. Used by the property tests, `ledger-dev simulate` and `ledger-dev bench`.
public struct LifecycleGenerator: Sendable {
    public var customers: Int
    public var days: Int
    public var start: EpochMillis
    public var seed: UInt64
    public var bundleId: String
    public var environment: String
    public var products: [SimulatedProduct]
    /// Share of notifications delivered a second time (an App Store retry).
    public var duplicateRate: Double
    /// Share of transactions signed without `price` and `currency` (the reports count them as
    /// `no_price`). Zero draws nothing, so a seed's lifecycles are the same as without it.
    public var noPriceRate: Double = 0

    public init(
        customers: Int, days: Int, start: EpochMillis, seed: UInt64, bundleId: String = "com.example.app",
        environment: String = "Sandbox", products: [SimulatedProduct] = SimulatedProduct.standardGroup,
        duplicateRate: Double = 0.05
    ) {
        self.customers = customers
        self.days = days
        self.start = start
        self.seed = seed
        self.bundleId = bundleId
        self.environment = environment
        self.products = products
        self.duplicateRate = duplicateRate
    }

    /// The seed of one customer's lifecycle, independent of how many customers are generated.
    public static func customerSeed(_ seed: UInt64, customerIndex: Int) -> UInt64 {
        SplitMix64.mix(seed ^ SplitMix64.mix(UInt64(truncatingIfNeeded: customerIndex) &+ 0x5EED))
    }

    public func lifecycles() -> [SimulatedLifecycle] {
        (0..<customers).map { lifecycle(customerIndex: $0) }
    }

    /// Every customer's notifications merged in delivery order.
    public func notificationsInDeliveryOrder() -> [SimulatedNotification] {
        lifecycles().flatMap(\.notifications).sorted(by: Self.deliveryOrder)
    }

    public func lifecycle(customerIndex: Int) -> SimulatedLifecycle {
        var run = LifecycleRun(
            generator: self, customerIndex: customerIndex,
            seed: Self.customerSeed(seed, customerIndex: customerIndex))
        run.play()
        return run.result()
    }

    static func deliveryOrder(_ a: SimulatedNotification, _ b: SimulatedNotification) -> Bool {
        (a.deliveredAt, a.signedDate, a.notificationUUID) < (b.deliveredAt, b.signedDate, b.notificationUUID)
    }
}

private let day: EpochMillis = 86_400_000
private let hour: EpochMillis = 3_600_000
private let minute: EpochMillis = 60_000

/// One customer's simulation: the App Store's view of the subscription, advanced event by event.
private struct LifecycleRun {
    let generator: LifecycleGenerator
    let customerIndex: Int
    let seed: UInt64
    var rng: SplitMix64
    let end: EpochMillis
    let token: String
    let originalTransactionId: String
    var out: [SimulatedNotification] = []
    var lastSigned: EpochMillis = .min

    var transactions: [AppleTransaction] = []
    var current = 0
    var renewal = AppleRenewalInfo()
    var status = 1
    /// Whether the current transaction was refunded (and not reversed).
    var currentRevoked = false

    init(generator: LifecycleGenerator, customerIndex: Int, seed: UInt64) {
        self.generator = generator
        self.customerIndex = customerIndex
        self.seed = seed
        self.rng = SplitMix64(seed: seed)
        self.end = generator.start &+ EpochMillis(generator.days) &* day
        self.token = rng.uuid()
        self.originalTransactionId = String(700_000_000_000 &+ Int64(customerIndex) &* 10_000)
    }

    func result() -> SimulatedLifecycle {
        SimulatedLifecycle(
            customerIndex: customerIndex, seed: seed, appAccountToken: token,
            originalTransactionId: originalTransactionId,
            notifications: out.sorted(by: LifecycleGenerator.deliveryOrder),
            end: max(lastSigned, transactions.last?.expiresDate?.millis ?? lastSigned) &+ 1)
    }

    var product: SimulatedProduct {
        let id = transactions[current].productId
        return generator.products.first { $0.productId == id } ?? generator.products[0]
    }

    func product(_ id: String?) -> SimulatedProduct {
        generator.products.first { $0.productId == id } ?? generator.products[0]
    }

    var expires: EpochMillis { transactions[current].expiresDate!.millis }

    // MARK: - The story

    mutating func play() {
        let span = max(1, EpochMillis(generator.days) &* day / 3)
        var t = generator.start &+ rng.int(in: 0...span)
        subscribe(at: t, subtype: "INITIAL_BUY", trial: rng.chance(0.3))
        while true {
            guard let next = playPeriod() else { return }
            t = next
            if t >= end { return }
        }
    }

    /// Plays the rest of the current period and its end. Returns when the next period starts
    /// (already emitted), or nil when the customer is gone for good.
    mutating func playPeriod() -> EpochMillis? {
        let periodStart = transactions[current].purchaseDate!.millis
        var cursor = max(periodStart, lastSigned) &+ minute
        // Mid-period events, in time order, before the renewal window opens.
        let windowEnd = expires &- 13 * hour
        let actions = rng.chance(0.45) ? (rng.chance(0.3) ? 2 : 1) : 0
        for _ in 0..<actions where cursor < windowEnd {
            let at = rng.int(in: cursor...windowEnd)
            cursor = at &+ minute
            switch rng.int(in: 0...99) {
            case 0..<22:
                toggleAutoRenew(at: at)
                // Some switch it back on before the period ends.
                if renewal.autoRenewStatus == 0, rng.chance(0.35), cursor < windowEnd {
                    let back = rng.int(in: cursor...windowEnd)
                    cursor = back &+ minute
                    toggleAutoRenew(at: back)
                }
            case 22..<40 where renewal.priceIncreaseStatus != 0:
                renewal.priceIncreaseStatus = 0
                emit("PRICE_INCREASE", "PENDING", at: at)
                // Most customers consent before the period ends; the rest expire on it.
                if rng.chance(0.7), cursor < windowEnd {
                    let consent = rng.int(in: cursor...windowEnd)
                    cursor = consent &+ minute
                    renewal.priceIncreaseStatus = 1
                    emit("PRICE_INCREASE", "ACCEPTED", at: consent)
                }
            case 40..<65:
                if changePlan(at: at) { return lastSigned }
            case 65..<80:
                if refund(at: at, windowEnd: windowEnd) { return afterRevocation() }
                cursor = max(cursor, lastSigned &+ minute)
            default:
                break
            }
        }
        return endOfPeriod()
    }

    mutating func endOfPeriod() -> EpochMillis? {
        let e = expires
        if e >= end { return nil }
        if renewal.autoRenewStatus == 0 {
            expire(subtype: "VOLUNTARY", intent: 1, at: e &+ rng.int(in: minute...hour))
            return resubscribeLater()
        }
        if renewal.priceIncreaseStatus == 0 {
            renewal.autoRenewStatus = 0
            expire(subtype: "PRICE_INCREASE", intent: 3, at: e &+ rng.int(in: minute...hour))
            return resubscribeLater()
        }
        if rng.chance(0.08) { return billingFailure() }
        if rng.chance(0.01) {
            expire(subtype: "PRODUCT_NOT_FOR_SALE", intent: 4, at: e &+ rng.int(in: minute...hour))
            return resubscribeLater()
        }
        let signed = e &- rng.int(in: 0...(12 * hour))
        renew(purchase: e, expires: e &+ EpochMillis(product(renewal.autoRenewProductId).days) &* day,
              at: signed, subtype: nil)
        return e
    }

    // MARK: - Events

    mutating func subscribe(at t: EpochMillis, subtype: String, trial: Bool) {
        // Most subscribers pick a monthly plan, as in real stores.
        let monthly = generator.products.filter { $0.days <= 31 }
        let p = rng.chance(0.75) && !monthly.isEmpty ? rng.pick(monthly) : rng.pick(generator.products)
        var tx = newTransaction(product: p, purchase: t, expires: t &+ EpochMillis(trial ? 7 : p.days) &* day)
        if trial {
            tx.offerType = 1
            tx.offerDiscountType = "FREE_TRIAL"
            tx.offerPeriod = "P1W"
            tx.price = 0
        }
        tx.transactionReason = "PURCHASE"
        transactions.append(tx)
        current = transactions.count - 1
        currentRevoked = false
        let lapse = renewal.renewalDate.map { t - $0.millis } ?? .max
        renewal = AppleRenewalInfo()
        renewal.originalTransactionId = originalTransactionId
        renewal.productId = p.productId
        renewal.autoRenewProductId = p.productId
        renewal.autoRenewStatus = 1
        renewal.isInBillingRetryPeriod = false
        renewal.environment = generator.environment
        renewal.appAccountToken = token
        renewal.recentSubscriptionStartDate = AppleTime(lapse < 60 * day
            ? (transactions.first?.purchaseDate?.millis ?? t) : t)
        renewal.renewalDate = tx.expiresDate
        status = 1
        emit("SUBSCRIBED", subtype, at: t)
    }

    mutating func renew(purchase: EpochMillis, expires: EpochMillis, at signed: EpochMillis, subtype: String?) {
        let p = product(renewal.autoRenewProductId)
        var tx = newTransaction(product: p, purchase: purchase, expires: expires)
        tx.transactionReason = "RENEWAL"
        if renewal.priceIncreaseStatus == 1 { tx.price = tx.price.map { $0 * 11 / 10 } }
        transactions.append(tx)
        current = transactions.count - 1
        currentRevoked = false
        renewal.productId = p.productId
        renewal.isInBillingRetryPeriod = false
        renewal.gracePeriodExpiresDate = nil
        renewal.expirationIntent = nil
        renewal.priceIncreaseStatus = nil
        renewal.renewalDate = tx.expiresDate
        status = 1
        emit("DID_RENEW", subtype, at: signed)
    }

    mutating func toggleAutoRenew(at t: EpochMillis) {
        if renewal.autoRenewStatus == 1 {
            renewal.autoRenewStatus = 0
            emit("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", at: t)
        } else {
            renewal.autoRenewStatus = 1
            emit("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", at: t)
        }
    }

    /// Returns true when the plan change was an upgrade (a new period started at `t`).
    mutating func changePlan(at t: EpochMillis) -> Bool {
        let now = product
        let pending = product(renewal.autoRenewProductId)
        if pending.productId != now.productId, rng.chance(0.4) {
            // The customer takes back a pending downgrade/crossgrade.
            renewal.autoRenewProductId = now.productId
            emit("DID_CHANGE_RENEWAL_PREF", nil, at: t)
            return false
        }
        let target = rng.pick(generator.products.filter { $0.productId != now.productId })
        if target.level < now.level {
            transactions[current].isUpgraded = true
            let tx = newTransaction(product: target, purchase: t, expires: t &+ EpochMillis(target.days) &* day)
            transactions.append(tx)
            current = transactions.count - 1
            currentRevoked = false
            renewal.productId = target.productId
            renewal.autoRenewProductId = target.productId
            renewal.renewalDate = tx.expiresDate
            status = 1
            emit("DID_CHANGE_RENEWAL_PREF", "UPGRADE", at: t)
            return true
        }
        renewal.autoRenewProductId = target.productId
        emit("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", at: t)
        return false
    }

    /// Refunds the current or an earlier period, sometimes reversing it a few days later.
    /// Returns true when the current period stays revoked.
    mutating func refund(at t: EpochMillis, windowEnd: EpochMillis) -> Bool {
        let index = rng.chance(0.5) ? current : Int(rng.int(in: 0...Int64(transactions.count - 1)))
        let full = rng.chance(0.7)
        transactions[index].revocationDate = AppleTime(t)
        transactions[index].revocationReason = Int(rng.int(in: 0...1))
        transactions[index].revocationType = full ? "REFUND_FULL" : "REFUND_PRORATED"
        transactions[index].revocationPercentage = full ? 100_000 : Int(rng.int(in: 1_000...99_000))
        let isCurrent = index == current
        if isCurrent {
            currentRevoked = true
            renewal.autoRenewStatus = 0
            status = 5
        }
        emit("REFUND", nil, at: t, transactionIndex: index)
        let reversal = t &+ rng.int(in: hour...(3 * day))
        guard rng.chance(0.35), reversal < windowEnd else { return isCurrent }
        transactions[index].revocationDate = nil
        transactions[index].revocationReason = nil
        transactions[index].revocationType = nil
        transactions[index].revocationPercentage = nil
        if isCurrent {
            currentRevoked = false
            status = 1
        }
        emit("REFUND_REVERSED", nil, at: reversal, transactionIndex: index)
        return false
    }

    /// After a refund of the current period the subscription is over; some customers come back.
    mutating func afterRevocation() -> EpochMillis? {
        resubscribeLater(after: max(expires, lastSigned))
    }

    mutating func billingFailure() -> EpochMillis? {
        let e = expires
        let graceDays: EpochMillis? = rng.chance(0.5) ? rng.pick([3, 16]) : nil
        let grace = graceDays.map { e &+ $0 &* day }
        renewal.isInBillingRetryPeriod = true
        renewal.gracePeriodExpiresDate = grace.map(AppleTime.init)
        renewal.expirationIntent = 2
        status = grace == nil ? 3 : 4
        emit("DID_FAIL_TO_RENEW", grace == nil ? nil : "GRACE_PERIOD", at: e &+ rng.int(in: minute...hour))
        let recoverAt: EpochMillis? = rng.chance(0.5) ? e &+ rng.int(in: hour...(40 * day)) : nil
        if let grace, recoverAt.map({ $0 >= grace }) ?? true {
            status = 3
            emit("GRACE_PERIOD_EXPIRED", nil, at: grace &+ rng.int(in: minute...hour))
        }
        if let r = recoverAt, r < end {
            let recovered = max(r, lastSigned &+ minute)
            // Recovered in grace: the renewal dates stand; later: the period restarts at recovery.
            let base = (grace.map { recovered < $0 } ?? false) ? e : recovered
            renew(purchase: recovered, expires: base &+ EpochMillis(product(renewal.autoRenewProductId).days) &* day,
                  at: recovered, subtype: "BILLING_RECOVERY")
            return recovered
        }
        let retryEnd = e &+ 60 * day
        if retryEnd >= end { return nil }
        renewal.isInBillingRetryPeriod = false
        renewal.autoRenewStatus = 0
        expire(subtype: "BILLING_RETRY", intent: 2, at: max(retryEnd, lastSigned &+ minute))
        return resubscribeLater()
    }

    mutating func expire(subtype: String, intent: Int, at t: EpochMillis) {
        renewal.expirationIntent = intent
        renewal.isInBillingRetryPeriod = false
        renewal.gracePeriodExpiresDate = nil
        status = 2
        emit("EXPIRED", subtype, at: t)
    }

    mutating func resubscribeLater(after: EpochMillis? = nil) -> EpochMillis? {
        guard rng.chance(0.6) else { return nil }
        let t = max(after ?? lastSigned, lastSigned) &+ rng.int(in: day...(90 * day))
        if t >= end { return nil }
        subscribe(at: t, subtype: "RESUBSCRIBE", trial: false)
        return t
    }

    // MARK: - Building blocks

    mutating func newTransaction(product p: SimulatedProduct, purchase: EpochMillis, expires: EpochMillis) -> AppleTransaction {
        let k = Int64(transactions.count)
        var tx = AppleTransaction()
        let base = 700_000_000_000 &+ Int64(customerIndex) &* 10_000
        tx.transactionId = String(base &+ k)
        tx.originalTransactionId = originalTransactionId
        tx.webOrderLineItemId = String(base &+ 200_000_000_000 &+ k)
        tx.bundleId = generator.bundleId
        tx.productId = p.productId
        tx.subscriptionGroupIdentifier = "20000001"
        tx.purchaseDate = AppleTime(purchase)
        tx.originalPurchaseDate = transactions.first?.purchaseDate ?? AppleTime(purchase)
        tx.expiresDate = AppleTime(expires)
        tx.quantity = 1
        tx.type = "Auto-Renewable Subscription"
        tx.appAccountToken = token
        tx.inAppOwnershipType = "PURCHASED"
        tx.environment = generator.environment
        tx.storefront = "USA"
        tx.storefrontId = "143441"
        tx.price = p.price
        tx.currency = "USD"
        if generator.noPriceRate > 0, rng.chance(generator.noPriceRate) {
            tx.price = nil
            tx.currency = nil
        }
        return tx
    }

    mutating func emit(_ type: String, _ subtype: String?, at t: EpochMillis, transactionIndex: Int? = nil) {
        let signed = max(t, lastSigned &+ 1_000)
        // The simulated span ends at `end`: nothing after it is observed (signed times only grow,
        // so this truncates the story cleanly).
        guard signed < end else { return }
        lastSigned = signed
        var tx = transactions[transactionIndex ?? current]
        tx.signedDate = AppleTime(signed)
        var info = renewal
        info.signedDate = AppleTime(signed)
        let n = SimulatedNotification(
            notificationType: type, subtype: subtype, notificationUUID: rng.uuid(), signedDate: signed,
            status: status, bundleId: generator.bundleId, environment: generator.environment,
            appAccountToken: token, transaction: tx, renewal: info,
            deliveredAt: signed &+ (rng.chance(0.03) ? rng.int(in: hour...(3 * day)) : rng.int(in: 50...3_000)))
        out.append(n)
        if rng.chance(generator.duplicateRate) {
            var retry = n
            retry.deliveredAt = n.deliveredAt &+ rng.pick([hour, 12 * hour, 24 * hour, 48 * hour])
            out.append(retry)
        }
    }
}

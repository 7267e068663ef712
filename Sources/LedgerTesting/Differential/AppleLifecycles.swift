import AppStore
import Crypto
import Foundation
import LedgerCore

/// A product of the scripted subscription group (lower level = higher tier).
struct DiffProduct: Sendable, Equatable {
    var id: String
    var days: Int64
    var level: Int

    var period: EpochMillis { days * DiffTime.day }

    static let monthly = DiffProduct(id: "com.example.monthly", days: 30, level: 2)
    static let weekly = DiffProduct(id: "com.example.weekly", days: 7, level: 2)
    static let yearly = DiffProduct(id: "com.example.yearly", days: 365, level: 2)
    static let premium = DiffProduct(id: "com.example.premium.monthly", days: 30, level: 1)
    /// A second subscription group (V1 accounts with two subscriptions).
    static let news = DiffProduct(id: "com.example.news.monthly", days: 30, level: 1)
    static let standard: [DiffProduct] = [monthly, weekly, yearly]
    static let all: [DiffProduct] = [monthly, weekly, yearly, premium, news]

    static func named(_ id: String) -> DiffProduct { all.first { $0.id == id } ?? monthly }
}

/// One V2 notification the script sends: when its facts happened (`at`: the transaction snapshot
/// and renewal info are signed then) and when Apple signed the notification (`signed`, ≥ at).
struct AppleNote: Sendable {
    var type: String
    var subtype: String?
    var at: EpochMillis
    var signed: EpochMillis
    var txId: String?
    var withRenewal: Bool
    var uuid: String
    /// REFUND / REVOKE: the transaction snapshot states this revocation (its revocationDate is
    /// where the revocation takes effect); REFUND_REVERSED: the snapshot states none.
    var revocation: AppleWorld.Revocation?
    var reinstated = false
    /// Never delivered (issue 20: a lost REFUND). The world still has it; a later notification's
    /// snapshot of the transaction states the revocation, and that is what the ledger learns from.
    var lost = false

    var name: String { type + (subtype.map { "/" + $0 } ?? "") }
}

/// Scripts one Apple V2 subscription (or one-time purchase) forward in time from its first
/// purchase to the horizon (a little before "now"), choosing at random among what a customer
/// and the App Store do, and records both the world (the model) and the notifications.
struct AppleScript {
    var rng: DiffRandom
    let horizon: EpochMillis
    let otidNumber: UInt64
    var world: AppleWorld
    var notes: [AppleNote] = []
    var script: [String] = []
    var tags: Set<String> = []
    /// Time of the last scripted event: every next one is later.
    var t: EpochMillis = 0
    var truth = AppleWorld.Renewal(autoRenewStatus: 1, autoRenewProductId: DiffProduct.monthly.id)
    var curId = ""
    var seq = 0
    var done = false

    init(rng: DiffRandom, horizon: EpochMillis, otidNumber: UInt64, environment: String, token: String?) {
        self.rng = rng
        self.horizon = horizon
        self.otidNumber = otidNumber
        world = AppleWorld(environment: environment, originalTransactionId: String(otidNumber), token: token)
    }

    static let renewalOptional: Set<String> = [
        "REFUND", "REVOKE", "REFUND_REVERSED", "REFUND_DECLINED", "CONSUMPTION_REQUEST", "RENEWAL_EXTENDED", "GRACE_PERIOD_EXPIRED",
    ]

    // MARK: world edits

    func txIndex(_ id: String) -> Int { world.index(of: id)! }
    var cur: AppleWorld.Tx { world.transactions[txIndex(curId)] }

    mutating func newTx(_ p: DiffProduct, at purchase: EpochMillis, reason: String, kind: AppleWorld.Kind = .autoRenewable,
                        offer: (Int, String)? = nil) -> String {
        seq += 1
        let id = seq == 1 ? world.originalTransactionId : String(otidNumber + UInt64(seq - 1))
        let expiries = kind == .autoRenewable ? [AppleWorld.ExpiryChange(at: .min, expires: purchase + p.period)] : []
        world.transactions.append(AppleWorld.Tx(
            id: id, productId: p.id, kind: kind, purchase: purchase, expiries: expiries,
            offerType: offer?.0, offerId: offer?.1, reason: reason))
        return id
    }

    mutating func setRenewal(at time: EpochMillis, _ change: (inout AppleWorld.Renewal) -> Void) {
        var s = truth
        change(&s)
        guard s != truth || world.renewals.isEmpty else { return }
        truth = s
        world.renewals.append(AppleWorld.RenewalChange(at: time, state: s))
    }

    /// Records a notification about `tx` at `e`; returns the notification's signedDate.
    @discardableResult
    mutating func note(_ type: String, _ subtype: String? = nil, at e: EpochMillis, tx: String?, renewal: Bool = true,
                       signed: EpochMillis? = nil, comment: String = "") -> EpochMillis {
        let ns = signed ?? (rng.chance(0.3) ? e : e + rng.int(1...3_000))
        // Messages that change no renewal state sometimes come without renewal info: the state
        // signed earlier must stay in effect.
        let carries = renewal && (Self.renewalOptional.contains(type) ? rng.chance(0.8) : true)
        notes.append(AppleNote(type: type, subtype: subtype, at: e, signed: ns, txId: tx, withRenewal: carries, uuid: rng.uuid()))
        let name = type + (subtype.map { "/" + $0 } ?? "")
        script.append("\(DiffTime.iso(e)) \(name) tx=\(tx ?? "-")\(ns != e ? " (notification signed \(ns - e) ms later)" : "")\(comment.isEmpty ? "" : " — " + comment)")
        return ns
    }

    // MARK: auto-renewable

    mutating func runSubscription(start: EpochMillis, product: DiffProduct) {
        let offer = rng.chance(0.1)
        curId = newTx(product, at: start, reason: "PURCHASE", offer: offer ? (1, "intro-week") : nil)
        setRenewal(at: start) { $0 = AppleWorld.Renewal(autoRenewStatus: 1, autoRenewProductId: product.id) }
        note(offer ? "OFFER_REDEEMED" : "SUBSCRIBED", "INITIAL_BUY", at: start, tx: curId,
             comment: "\(product.id) until \(DiffTime.iso(start + product.period))")
        if offer { tags.insert("offer") }
        t = start
        var periods = 0
        while !done && periods < 40 {
            periods += 1
            midPeriod()
            if done { break }
            periodEnd()
        }
    }

    mutating func midPeriod() {
        var actions = 0
        while actions < 3 && !done {
            let expires = cur.finalExpires!
            let room = expires - DiffTime.day - t
            guard room > 2 * DiffTime.hour, rng.chance(actions == 0 ? 0.55 : 0.35) else { return }
            let u = t + rng.int(DiffTime.hour...room)
            if u > horizon { done = true; return }
            actions += 1
            let revoked = cur.isRevoked(at: u)
            var choices: [(String, Double)] = [("toggle", 3), ("declined", 1), ("consumption", 0.5), ("extend", 1),
                                                ("offer", 0.7), ("price", 0.5)]
            if !revoked { choices += [("refund", 2.5), ("revoke", 0.6)] }
            if cur.productId == DiffProduct.premium.id && truth.autoRenewProductId == DiffProduct.premium.id && truth.autoRenewStatus == 1 {
                choices.append(("downgrade", 1))
            }
            if DiffProduct.named(cur.productId).level == 2 && !revoked { choices.append(("upgrade", 1.5)) }
            if olderRefundable(at: u) != nil { choices.append(("refund-older", 0.8)) }
            let total = choices.reduce(0) { $0 + $1.1 }
            var draw = Double(rng.int(0...1_000_000)) / 1_000_000 * total
            var action = choices[0].0
            for (name, w) in choices {
                if draw < w { action = name; break }
                draw -= w
            }
            t = u
            perform(action, at: u, periodEnd: expires)
        }
    }

    func olderRefundable(at u: EpochMillis) -> String? {
        world.transactions.last { $0.id != curId && $0.upgradedAt == nil && $0.purchase < cur.purchase && !$0.isRevoked(at: u) }?.id
    }

    mutating func perform(_ action: String, at u: EpochMillis, periodEnd expires: EpochMillis) {
        switch action {
        case "toggle":
            let off = truth.autoRenewStatus == 1
            setRenewal(at: u) { $0.autoRenewStatus = off ? 0 : 1; if !off { $0.expirationIntent = nil } }
            note("DID_CHANGE_RENEWAL_STATUS", off ? "AUTO_RENEW_DISABLED" : "AUTO_RENEW_ENABLED", at: u, tx: curId)
            tags.insert(off ? "auto-renew-off" : "auto-renew-on")
        case "downgrade":
            let target = rng.pick([DiffProduct.monthly, DiffProduct.weekly])
            setRenewal(at: u) { $0.autoRenewProductId = target.id }
            note("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", at: u, tx: curId, comment: "next renewal \(target.id)")
            tags.insert("downgrade")
        case "upgrade":
            world.transactions[txIndex(curId)].upgradedAt = u
            curId = newTx(.premium, at: u, reason: "PURCHASE")
            setRenewal(at: u) { $0.autoRenewStatus = 1; $0.autoRenewProductId = DiffProduct.premium.id; $0.expirationIntent = nil }
            note("DID_CHANGE_RENEWAL_PREF", "UPGRADE", at: u, tx: curId, comment: "premium from now")
            tags.insert("upgrade")
        case "refund", "revoke":
            let type = action == "refund" ? "REFUND" : "REVOKE"
            let purchase = cur.purchase
            let date = rng.chance(0.3) && u - purchase > 2 ? u - rng.int(1...min(2 * DiffTime.hour, u - purchase - 1)) : u
            revoke(curId, type: type, date: date, at: u)
            tags.insert(action == "refund" ? "refund" : "revoke")
            // Issue 20: the REFUND is lost. Apple turns auto-renew off after a refund ("disable may
            // be done by Apple after a refund request", reference/apple.md §2.3); that notification
            // carries the transaction with its revocationDate: the ledger learns the refund from it.
            if type == "REFUND", truth.autoRenewStatus == 1, rng.chance(0.25) {
                let heal = u + rng.int(DiffTime.minute...DiffTime.hour)
                if heal < expires - DiffTime.day, heal <= horizon {
                    notes[notes.count - 1].lost = true
                    world.transactions[txIndex(curId)].lostRefunds += 1
                    setRenewal(at: heal) { $0.autoRenewStatus = 0 }
                    note("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", at: heal, tx: curId,
                         comment: "the REFUND before it was lost; this snapshot states the revocation")
                    tags.insert("lost-refund")
                    t = heal
                    return
                }
            }
            afterRefund(type: type, at: u, periodEnd: expires)
        case "refund-older":
            let id = olderRefundable(at: u)!
            revoke(id, type: "REFUND", date: u, at: u)
            tags.insert("refund-older")
        case "declined":
            let ns = note("REFUND_DECLINED", at: u, tx: curId)
            tags.insert("refund-declined")
            if rng.chance(0.3) {
                note("CONSUMPTION_REQUEST", at: u, tx: curId, signed: ns, comment: "same instant as the REFUND_DECLINED")
                tags.insert("tie:declined=consumption")
            }
        case "consumption":
            note("CONSUMPTION_REQUEST", at: u, tx: curId)
            tags.insert("consumption-request")
        case "extend":
            let days: Int64 = rng.int(1...10)
            world.transactions[txIndex(curId)].expiries.append(AppleWorld.ExpiryChange(at: u, expires: expires + days * DiffTime.day))
            note("RENEWAL_EXTENDED", at: u, tx: curId, comment: "expiry +\(days) days")
            tags.insert("renewal-extended")
        case "offer":
            let n = rng.int(1...9)
            setRenewal(at: u) { $0.offerType = 2; $0.offerId = "promo-\(n)" }
            note("OFFER_REDEEMED", at: u, tx: curId, comment: "promo-\(n) at next renewal")
            tags.insert("offer")
        case "price":
            let accepted = rng.chance(0.5)
            setRenewal(at: u) { $0.priceIncrease = accepted ? 1 : 0 }
            note("PRICE_INCREASE", accepted ? "ACCEPTED" : "PENDING", at: u, tx: curId)
        default:
            break
        }
    }

    /// REFUND or REVOKE of one transaction: the notification states the revocation it signs.
    mutating func revoke(_ id: String, type: String, date: EpochMillis, at e: EpochMillis, renewal: Bool = true) {
        let ns = note(type, at: e, tx: id, renewal: renewal, comment: "revocationDate \(DiffTime.iso(date))")
        let r = AppleWorld.Revocation(signedAt: ns, date: date, type: type)
        notes[notes.count - 1].revocation = r
        world.transactions[txIndex(id)].revocations.append(r)
    }

    mutating func reverse(_ id: String, at e: EpochMillis, signed: EpochMillis? = nil, renewal: Bool = true) {
        let ns = note("REFUND_REVERSED", at: e, tx: id, renewal: renewal, signed: signed)
        notes[notes.count - 1].reinstated = true
        world.transactions[txIndex(id)].reversals.append(ns)
    }

    mutating func afterRefund(type: String, at u: EpochMillis, periodEnd expires: EpochMillis) {
        let refunded = curId
        let last = expires - DiffTime.day
        if rng.chance(0.05) {
            // Reversed at the very instant of the refund: "revoked iff the refund is signed LATER".
            let ns = world.transactions[txIndex(refunded)].revocations.last!.signedAt
            reverse(refunded, at: u, signed: ns)
            tags.insert("tie:refund=reversal")
            return
        }
        if rng.chance(0.25) {
            let u2 = u + rng.int(DiffTime.hour...5 * DiffTime.day)
            guard u2 < last else { return }
            if u2 > horizon { done = true; return }
            t = u2
            reverse(refunded, at: u2)
            tags.insert("reversal")
            if rng.chance(0.3) {
                let u3 = u2 + rng.int(DiffTime.hour...2 * DiffTime.day)
                guard u3 < last else { return }
                if u3 > horizon { done = true; return }
                t = u3
                revoke(refunded, type: type, date: u3, at: u3)
                tags.insert("refund-again")
            }
            return
        }
        if type == "REFUND" && rng.chance(0.4) {
            // Refund, then a new purchase in the same group before the refunded period's expiry.
            let u2 = u + rng.int(DiffTime.hour...10 * DiffTime.day)
            guard u2 < last else { return }
            if u2 > horizon { done = true; return }
            t = u2
            let p = rng.pick(DiffProduct.standard + [DiffProduct.premium])
            let offer = rng.chance(0.2)
            curId = newTx(p, at: u2, reason: "PURCHASE", offer: offer ? (2, "winback") : nil)
            setRenewal(at: u2) { $0 = AppleWorld.Renewal(autoRenewStatus: 1, autoRenewProductId: p.id) }
            note(offer ? "OFFER_REDEEMED" : "SUBSCRIBED", "RESUBSCRIBE", at: u2, tx: curId,
                 comment: "\(p.id) after the refund of \(refunded)")
            tags.insert("refund→resubscribe")
            return
        }
        if truth.autoRenewStatus == 1 && rng.chance(0.4) {
            let u2 = u + rng.int(DiffTime.minute...DiffTime.day)
            guard u2 < last else { return }
            if u2 > horizon { done = true; return }
            t = u2
            setRenewal(at: u2) { $0.autoRenewStatus = 0 }
            note("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", at: u2, tx: curId)
        }
    }

    mutating func periodEnd() {
        let expires = cur.finalExpires!
        if truth.autoRenewStatus == 1 {
            if rng.chance(0.12) { billingFailure(expires) } else { renew(expires) }
        } else {
            let x = expires + rng.int(0...30 * DiffTime.minute)
            if x > horizon { done = true; return }
            setRenewal(at: x) { $0.expirationIntent = 1 }
            note("EXPIRED", "VOLUNTARY", at: x, tx: curId)
            t = x
            tags.insert("expired")
            maybeResubscribe()
        }
    }

    mutating func renew(_ expires: EpochMillis) {
        let early = rng.chance(0.3)
        var signAt = early ? expires - rng.int(DiffTime.hour...20 * DiffTime.hour) : expires + rng.int(0...10 * DiffTime.minute)
        if signAt <= t { signAt = max(expires, t + 1) }
        if signAt > horizon { done = true; return }
        let p = DiffProduct.named(truth.autoRenewProductId)
        let offer = truth.offerType.map { ($0, truth.offerId ?? "promo") }
        curId = newTx(p, at: expires, reason: "RENEWAL", offer: offer)
        setRenewal(at: signAt) { $0.offerType = nil; $0.offerId = nil; $0.priceIncrease = nil }
        note("DID_RENEW", at: signAt, tx: curId,
             comment: "\(p.id) \(DiffTime.iso(expires)) → \(DiffTime.iso(expires + p.period))\(signAt < expires ? ", signed before its period" : "")")
        if signAt < expires { tags.insert(expires > horizon ? "early-renewal-future" : "early-renewal") }
        let previous = world.transactions.count >= 2 ? world.transactions[world.transactions.count - 2].id : nil
        if signAt < expires - 2 * DiffTime.minute, p.level == 2, let previous, rng.chance(0.2) {
            // Upgrade inside the pre-charge window: Apple already charged the renewal (for the
            // period from `expires`); the upgrade bought now supersedes it (issue 20 rule 2).
            let u = signAt + rng.int(DiffTime.minute...(expires - signAt - DiffTime.minute))
            if u > horizon { t = signAt; done = true; return }
            let renewal = curId
            world.transactions[txIndex(previous)].upgradedAt = u
            world.transactions[txIndex(renewal)].supersededByUpgrade = true
            curId = newTx(.premium, at: u, reason: "PURCHASE")
            setRenewal(at: u) { $0.autoRenewStatus = 1; $0.autoRenewProductId = DiffProduct.premium.id; $0.expirationIntent = nil }
            note("DID_CHANGE_RENEWAL_PREF", "UPGRADE", at: u, tx: curId, comment: "premium from now; renewal \(renewal) was charged before")
            tags.insert("pre-charged-renewal→upgrade")
            t = u
            return
        }
        t = max(signAt, expires)
        if t > horizon { done = true }
    }

    mutating func billingFailure(_ expires: EpochMillis) {
        let failAt = expires + rng.int(0...2 * DiffTime.hour)
        if failAt > horizon { done = true; return }
        let grace: EpochMillis? = rng.chance(0.5) ? expires + 16 * DiffTime.day : nil
        setRenewal(at: failAt) { $0.retry = true; $0.graceEnd = grace; $0.expirationIntent = 2 }
        world.billing.append(AppleWorld.Billing(txId: curId, failAt: failAt, graceEnd: grace))
        note("DID_FAIL_TO_RENEW", grace == nil ? nil : "GRACE_PERIOD", at: failAt, tx: curId)
        tags.insert(grace == nil ? "billing-retry" : "grace-period")
        t = failAt
        let recovery: EpochMillis? = rng.chance(0.5) ? failAt + rng.int(DiffTime.hour...50 * DiffTime.day) : nil
        if let g = grace, (recovery ?? .max) > g {
            if g > horizon { done = true; return }
            note("GRACE_PERIOD_EXPIRED", at: g, tx: curId)
            t = g
        }
        if let r = recovery {
            if r > horizon { done = true; return }
            curId = newTx(DiffProduct.named(truth.autoRenewProductId), at: r, reason: "RENEWAL")
            setRenewal(at: r) { $0.retry = false; $0.graceEnd = nil; $0.expirationIntent = nil }
            note("DID_RENEW", "BILLING_RECOVERY", at: r, tx: curId)
            tags.insert("billing-recovery")
            t = r
        } else {
            let x = expires + DiffTime.billingRetryLimit + rng.int(0...3 * DiffTime.hour)
            if x > horizon { done = true; return }
            setRenewal(at: x) { $0.retry = false; $0.graceEnd = nil; $0.autoRenewStatus = 0; $0.expirationIntent = 2 }
            note("EXPIRED", "BILLING_RETRY", at: x, tx: curId)
            t = x
            maybeResubscribe()
        }
    }

    mutating func maybeResubscribe() {
        guard rng.chance(0.4) else { done = true; return }
        let s = t + rng.int(DiffTime.day...40 * DiffTime.day)
        if s > horizon { done = true; return }
        let p = rng.pick(DiffProduct.standard + [DiffProduct.premium])
        let offer = rng.chance(0.25)
        curId = newTx(p, at: s, reason: "PURCHASE", offer: offer ? (2, "winback") : nil)
        setRenewal(at: s) { $0 = AppleWorld.Renewal(autoRenewStatus: 1, autoRenewProductId: p.id) }
        note(offer ? "OFFER_REDEEMED" : "SUBSCRIBED", "RESUBSCRIBE", at: s, tx: curId, comment: p.id)
        tags.insert("resubscribe")
        t = s
    }

    // MARK: one-time purchases

    mutating func runOneTime(at purchase: EpochMillis) {
        let nonConsumable = rng.chance(0.6)
        let product = nonConsumable ? "com.example.lifetime" : "com.example.coins100"
        curId = newTx(DiffProduct(id: product, days: 0, level: 0), at: purchase, reason: "PURCHASE",
                      kind: nonConsumable ? .nonConsumable : .consumable)
        note("ONE_TIME_CHARGE", at: purchase, tx: curId, renewal: false, comment: nonConsumable ? "non-consumable" : "consumable")
        tags.insert(nonConsumable ? "non-consumable" : "consumable")
        t = purchase
        func next() -> EpochMillis? {
            let u = t + rng.int(DiffTime.hour...20 * DiffTime.day)
            return u > horizon ? nil : u
        }
        if !nonConsumable, rng.chance(0.25), let u = next() {
            t = u
            note("CONSUMPTION_REQUEST", at: u, tx: curId, renewal: false)
        }
        if rng.chance(0.1), let u = next() {
            t = u
            note("REFUND_DECLINED", at: u, tx: curId, renewal: false)
            tags.insert("refund-declined")
        }
        if rng.chance(0.35), let u = next() {
            t = u
            revoke(curId, type: "REFUND", date: u, at: u, renewal: false)
            tags.insert("refund")
            if rng.chance(0.3), let u2 = next() {
                t = u2
                reverse(curId, at: u2, renewal: false)
                tags.insert("reversal")
            }
        }
    }

    // MARK: rendering

    /// The JWSTransaction Apple would sign for `tx` at `signed`.
    func snapshot(_ tx: AppleWorld.Tx, signed: EpochMillis, note: AppleNote? = nil) -> AppleTransaction {
        var t = AppleTransaction()
        t.transactionId = tx.id
        t.originalTransactionId = world.originalTransactionId
        t.bundleId = DifferentialRun.bundleId
        t.productId = tx.productId
        t.purchaseDate = AppleTime(tx.purchase)
        t.originalPurchaseDate = AppleTime(world.transactions[0].purchase)
        t.quantity = 1
        switch tx.kind {
        case .autoRenewable:
            t.type = "Auto-Renewable Subscription"
            t.subscriptionGroupIdentifier = tx.productId == DiffProduct.news.id ? "21000002" : "21000001"
            t.webOrderLineItemId = "9" + tx.id.dropFirst()
            t.expiresDate = tx.expires(asOf: signed).map(AppleTime.init)
        case .nonConsumable: t.type = "Non-Consumable"
        case .consumable: t.type = "Consumable"
        }
        t.appAccountToken = world.token
        t.inAppOwnershipType = "PURCHASED"
        t.signedDate = AppleTime(signed)
        let revocation = note?.revocation ?? (note?.reinstated == true ? nil : tx.revocationAsSigned(at: signed))
        if let r = revocation {
            t.revocationDate = AppleTime(r.date)
            t.revocationReason = r.type == "REVOKE" ? 0 : 1
            t.revocationType = r.type == "REVOKE" ? "FAMILY_REVOKE" : "REFUND_FULL"
        }
        if let up = tx.upgradedAt, up <= signed { t.isUpgraded = true }
        t.offerType = tx.offerType
        t.offerIdentifier = tx.offerId
        t.environment = world.environment
        t.storefront = "USA"
        t.storefrontId = "143441"
        t.transactionReason = tx.reason
        t.price = tx.kind == .consumable ? 990 : 4990
        t.currency = "USD"
        return t
    }

    /// The JWSRenewalInfo Apple would sign at `signed` (the renewal state then, taken whole).
    func renewalInfo(signed: EpochMillis) -> AppleRenewalInfo? {
        guard let s = world.renewal(at: signed) else { return nil }
        let current = world.current(at: signed) ?? world.transactions[0]
        var r = AppleRenewalInfo()
        r.originalTransactionId = world.originalTransactionId
        r.productId = current.productId
        r.autoRenewProductId = s.autoRenewProductId
        r.autoRenewStatus = s.autoRenewStatus
        r.expirationIntent = s.expirationIntent
        r.isInBillingRetryPeriod = s.retry
        r.gracePeriodExpiresDate = s.graceEnd.map(AppleTime.init)
        r.priceIncreaseStatus = s.priceIncrease
        r.offerType = s.offerType
        r.offerIdentifier = s.offerId
        r.signedDate = AppleTime(signed)
        r.environment = world.environment
        r.recentSubscriptionStartDate = AppleTime(world.transactions[0].purchase)
        r.renewalDate = current.expires(asOf: signed).map(AppleTime.init)
        r.appAccountToken = world.token
        return r
    }

    static func appleStatus(_ e: ExpectedSubscription?) -> Int {
        switch e?.status {
        case "active"?: 1
        case "billing_retry"?: 3
        case "grace_period"?: 4
        case "revoked"?: 5
        default: 2
        }
    }

    func render(_ n: AppleNote, signer: DiffSigner) throws -> Data {
        var outer = AppleNotification()
        outer.notificationType = n.type
        outer.subtype = n.subtype
        outer.notificationUUID = n.uuid
        outer.version = "2.0"
        outer.signedDate = AppleTime(n.signed)
        var d = AppleNotification.NotificationData()
        d.appAppleId = DifferentialRun.appAppleId
        d.bundleId = DifferentialRun.bundleId
        d.bundleVersion = "1"
        d.environment = world.environment
        d.status = Self.appleStatus(world.expected(at: n.signed))
        if n.type == "CONSUMPTION_REQUEST" { d.consumptionRequestReason = "UNINTENDED_PURCHASE" }
        let tx = n.txId.map { snapshot(world.transactions[txIndex($0)], signed: n.at, note: n) }
        let renewal = n.withRenewal ? renewalInfo(signed: n.at) : nil
        if let tx { d.signedTransactionInfo = try signer.sign(tx) }
        if let renewal { d.signedRenewalInfo = try signer.sign(renewal) }
        outer.data = d
        return Data(#"{"signedPayload":""#.utf8) + Data(try signer.sign(outer).utf8) + Data(#""}"#.utf8)
    }

    /// Instants worth asking `?at=` about: exact boundaries and one millisecond before them.
    func boundaries() -> [EpochMillis] {
        var out: [EpochMillis] = []
        for (i, tx) in world.transactions.enumerated() {
            out.append(i == 0 ? tx.purchase - 1 : tx.purchase)
            for r in tx.revocations { out += [r.date, r.date - 1, r.signedAt] }
            out += tx.reversals
            if let e = tx.finalExpires { out += [e, e - 1] }
        }
        for c in world.renewals.dropFirst() { out += [c.at, c.at - 1] }
        for b in world.billing {
            out.append(b.failAt)
            if let g = b.graceEnd { out += [g, g - 1] }
        }
        return out
    }

    /// Every instant at which the expected state can change (for the guard band around "now").
    func criticalTimes() -> [EpochMillis] {
        var out = boundaries() + notes.map(\.signed)
        for b in world.billing {
            if let tx = world.transactions.first(where: { $0.id == b.txId }), let e = tx.finalExpires {
                out.append(e + DiffTime.billingRetryLimit)
            }
        }
        return out
    }
}

/// Signs JSON models as compact ES256 JWS with the test authority's chain, as
/// `AppleTestAuthority.sign` would, but with the header encoded once and Foundation's (optimised)
/// base64 and JSON encoders: in a debug build the package's own base64 was a fifth of the
/// generator's time.
struct DiffSigner: Sendable {
    let headerSegment: String
    let key: ECPrivateKey

    init(_ authority: AppleTestAuthority) throws {
        let header: [String: Any] = [
            "alg": "ES256",
            "x5c": [authority.leaf, authority.intermediate, authority.root].map { Data($0.der).base64EncodedString() },
        ]
        headerSegment = Self.base64URL(try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys, .withoutEscapingSlashes]))
        key = authority.leafKey
    }

    static func base64URL(_ d: Data) -> String {
        var b = [UInt8](d.base64EncodedData())
        while b.last == UInt8(ascii: "=") { b.removeLast() }
        b.withUnsafeMutableBufferPointer { p in
            for i in p.indices {
                if p[i] == UInt8(ascii: "+") { p[i] = UInt8(ascii: "-") } else if p[i] == UInt8(ascii: "/") { p[i] = UInt8(ascii: "_") }
            }
        }
        return String(decoding: b, as: UTF8.self)
    }

    func sign<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        let input = headerSegment + "." + Self.base64URL(try encoder.encode(value))
        return input + "." + Self.base64URL(Data(try key.signES256(Array(input.utf8))))
    }
}

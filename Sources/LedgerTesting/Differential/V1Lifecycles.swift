import Foundation
import LedgerCore

/// One legacy V1 notification of an account: which of the account's subscriptions it is about and
/// its business time (V1 carries no signing time: issue 9 item 4 makes it the greatest date the
/// body states for that subscription, which the script makes the time of the event itself).
struct V1Note: Sendable {
    var type: String
    var sub: Int
    var at: EpochMillis
    var latestReceipt: String
}

/// Scripts a V1 account: one subscription, or two in different subscription groups (the V1 body
/// then lists both; the notification concerns the subscription of `auto_renew_product_id`).
/// V1 states no billing retry time, so the script uses only what V1 dates: purchases, renewals,
/// auto-renew changes (`auto_renew_status_change_date_ms`), cancellations (refunds) and
/// resubscriptions.
struct V1Script {
    var rng: DiffRandom
    let horizon: EpochMillis
    var worlds: [AppleWorld] = []
    var tags: [Set<String>] = []
    var scripts: [[String]] = []
    var notes: [V1Note] = []
    /// Per subscription: the last auto-renew change (for `auto_renew_status_change_date_ms`).
    var changeDates: [[(at: EpochMillis, value: Int)]] = []

    init(rng: DiffRandom, horizon: EpochMillis) {
        self.rng = rng
        self.horizon = horizon
    }

    mutating func addSubscription(otidNumber: UInt64, environment: String, token: String?, product: DiffProduct, start: EpochMillis) {
        let sub = worlds.count
        worlds.append(AppleWorld(environment: environment, originalTransactionId: String(otidNumber), token: token))
        tags.append(["v1"])
        scripts.append([])
        changeDates.append([])
        var seq = 0
        func newTx(_ w: inout AppleWorld, _ p: DiffProduct, _ purchase: EpochMillis, _ reason: String) -> String {
            seq += 1
            let id = seq == 1 ? w.originalTransactionId : String(otidNumber + UInt64(seq - 1))
            w.transactions.append(AppleWorld.Tx(
                id: id, productId: p.id, kind: .autoRenewable, purchase: purchase,
                expiries: [AppleWorld.ExpiryChange(at: .min, expires: purchase + p.period)], reason: reason))
            return id
        }
        var w = worlds[sub]
        var on = 1
        var t = start
        func setAutoRenew(_ value: Int, at time: EpochMillis, product: String, w: inout AppleWorld, changes: inout [(at: EpochMillis, value: Int)]) {
            w.renewals.append(AppleWorld.RenewalChange(at: time, state: AppleWorld.Renewal(autoRenewStatus: value, autoRenewProductId: product)))
            changes.append((time, value))
        }
        var changes: [(at: EpochMillis, value: Int)] = []
        var lines: [String] = []
        var tagSet: Set<String> = ["v1"]
        var cur = newTx(&w, product, start, "PURCHASE")
        setAutoRenew(1, at: start, product: product.id, w: &w, changes: &changes)
        var mine: [V1Note] = [V1Note(type: "INITIAL_BUY", sub: sub, at: start, latestReceipt: rng.digits(12))]
        lines.append("\(DiffTime.iso(start)) V1 INITIAL_BUY tx=\(cur) \(product.id)")
        var periods = 0
        outer: while periods < 40 {
            periods += 1
            let curTx = w.transactions.last!
            let expires = curTx.finalExpires!
            var actions = 0
            while actions < 2 {
                let room = expires - DiffTime.day - t
                guard room > 2 * DiffTime.hour, rng.chance(0.45) else { break }
                let u = t + rng.int(DiffTime.hour...room)
                if u > horizon { break outer }
                actions += 1
                t = u
                if !w.transactions.last!.isRevoked(at: u) && rng.chance(0.3) {
                    let type = rng.chance(0.5) ? "CANCEL" : "REFUND"
                    let i = w.transactions.count - 1
                    w.transactions[i].revocations.append(AppleWorld.Revocation(signedAt: u, date: u, type: "REFUND"))
                    mine.append(V1Note(type: type, sub: sub, at: u, latestReceipt: rng.digits(12)))
                    lines.append("\(DiffTime.iso(u)) V1 \(type) tx=\(cur) cancellation_date \(DiffTime.iso(u))")
                    tagSet.insert("refund")
                    if rng.chance(0.5) {
                        let s = u + rng.int(DiffTime.hour...5 * DiffTime.day)
                        guard s < expires - DiffTime.day else { continue }
                        if s > horizon { break outer }
                        t = s
                        let p = rng.pick(product == .news ? [DiffProduct.news] : DiffProduct.standard)
                        cur = newTx(&w, p, s, "PURCHASE")
                        if on == 0 { on = 1 }
                        // A resubscription is an auto-renew (re)start: its change date is the purchase.
                        setAutoRenew(1, at: s, product: p.id, w: &w, changes: &changes)
                        mine.append(V1Note(type: "INTERACTIVE_RENEWAL", sub: sub, at: s, latestReceipt: rng.digits(12)))
                        lines.append("\(DiffTime.iso(s)) V1 INTERACTIVE_RENEWAL tx=\(cur) \(p.id) after the refund")
                        tagSet.insert("refund→resubscribe")
                        continue outer
                    }
                } else if on == 1, product != .news, rng.chance(0.25) {
                    // A pending crossgrade (issue 20: V1 DID_CHANGE_RENEWAL_PREF must show): the
                    // next renewal is the other product; the current period stays as bought.
                    let pending = w.renewal(at: u)?.autoRenewProductId ?? w.transactions.last!.productId
                    let target = rng.pick(DiffProduct.standard.filter { $0.id != pending })
                    w.renewals.append(AppleWorld.RenewalChange(at: u, state: AppleWorld.Renewal(autoRenewStatus: on, autoRenewProductId: target.id)))
                    mine.append(V1Note(type: "DID_CHANGE_RENEWAL_PREF", sub: sub, at: u, latestReceipt: rng.digits(12)))
                    lines.append("\(DiffTime.iso(u)) V1 DID_CHANGE_RENEWAL_PREF auto_renew_product_id=\(target.id)")
                    tagSet.insert("v1-pending-downgrade")
                } else {
                    on = 1 - on
                    setAutoRenew(on, at: u, product: w.renewal(at: u)?.autoRenewProductId ?? w.transactions.last!.productId, w: &w, changes: &changes)
                    mine.append(V1Note(type: "DID_CHANGE_RENEWAL_STATUS", sub: sub, at: u, latestReceipt: rng.digits(12)))
                    lines.append("\(DiffTime.iso(u)) V1 DID_CHANGE_RENEWAL_STATUS auto_renew_status=\(on == 1)")
                    tagSet.insert(on == 1 ? "auto-renew-on" : "auto-renew-off")
                }
            }
            if on == 1 {
                // V1's business time of a renewal is its purchase (V1 has no signing time), even
                // when Apple sends it hours early.
                if expires > horizon { break }
                // A pending crossgrade takes effect at the renewal.
                let p = DiffProduct.named(w.renewal(at: expires)?.autoRenewProductId ?? w.transactions.last!.productId)
                if rng.chance(0.2) {
                    // Issue 20: V1 grace. DID_FAIL_TO_RENEW at the period's end; its body states the
                    // retry (and a grace period) but no date of its own (its business time is the
                    // current period's purchase or last auto-renew change).
                    let grace: EpochMillis? = rng.chance(0.6) ? expires + 16 * DiffTime.day : nil
                    w.renewals.append(AppleWorld.RenewalChange(at: expires, state: AppleWorld.Renewal(
                        autoRenewStatus: 1, autoRenewProductId: p.id, retry: true, graceEnd: grace, expirationIntent: 2)))
                    w.billing.append(AppleWorld.Billing(txId: cur, failAt: expires, graceEnd: grace))
                    mine.append(V1Note(type: "DID_FAIL_TO_RENEW", sub: sub, at: expires, latestReceipt: rng.digits(12)))
                    lines.append("\(DiffTime.iso(expires)) V1 DID_FAIL_TO_RENEW tx=\(cur)\(grace.map { " grace until \(DiffTime.iso($0))" } ?? " (no grace)")")
                    tagSet.insert(grace == nil ? "v1-billing-retry" : "v1-grace")
                    t = expires
                    guard rng.chance(0.5) else { break }
                    let r = expires + rng.int(DiffTime.hour...40 * DiffTime.day)
                    if r > horizon { break }
                    cur = newTx(&w, p, r, "RENEWAL")
                    w.renewals.append(AppleWorld.RenewalChange(at: r, state: AppleWorld.Renewal(autoRenewStatus: 1, autoRenewProductId: p.id)))
                    mine.append(V1Note(type: "DID_RECOVER", sub: sub, at: r, latestReceipt: rng.digits(12)))
                    lines.append("\(DiffTime.iso(r)) V1 DID_RECOVER tx=\(cur) until \(DiffTime.iso(r + p.period))")
                    tagSet.insert("v1-billing-recovery")
                    t = r
                    continue
                }
                cur = newTx(&w, p, expires, "RENEWAL")
                mine.append(V1Note(type: "DID_RENEW", sub: sub, at: expires, latestReceipt: rng.digits(12)))
                lines.append("\(DiffTime.iso(expires)) V1 DID_RENEW tx=\(cur) until \(DiffTime.iso(expires + p.period))")
                t = expires
            } else {
                guard rng.chance(0.4) else { break }
                let s = expires + rng.int(DiffTime.day...30 * DiffTime.day)
                if s > horizon { break }
                let p = rng.pick(product == .news ? [DiffProduct.news] : DiffProduct.standard)
                cur = newTx(&w, p, s, "PURCHASE")
                on = 1
                setAutoRenew(1, at: s, product: p.id, w: &w, changes: &changes)
                mine.append(V1Note(type: "INTERACTIVE_RENEWAL", sub: sub, at: s, latestReceipt: rng.digits(12)))
                lines.append("\(DiffTime.iso(s)) V1 INTERACTIVE_RENEWAL tx=\(cur) \(p.id)")
                tagSet.insert("resubscribe")
                t = s
            }
        }
        worlds[sub] = w
        tags[sub] = tagSet
        scripts[sub] = lines
        changeDates[sub] = changes
        notes += mine
    }

    // MARK: rendering

    static func s(_ v: EpochMillis) -> String { String(v) }

    /// The V1 body Apple would post for `note`: every subscription of the account as of the
    /// note's time, the notified one's auto-renew fields at the top level.
    func render(_ note: V1Note, password: String, latestReceipt: String) throws -> Data {
        let w = worlds[note.sub]
        let env = w.environment == SubscriptionKey.production ? "PROD" : "Sandbox"
        var entries: [[String: Any]] = []
        var pending: [[String: Any]] = []
        for world in worlds {
            let known = world.transactions.filter { $0.purchase <= note.at }
            guard !known.isEmpty else { continue }
            for tx in known {
                var e: [String: Any] = [
                    "transaction_id": tx.id, "original_transaction_id": world.originalTransactionId,
                    "web_order_line_item_id": "9" + tx.id.dropFirst(), "product_id": tx.productId,
                    "purchase_date_ms": Self.s(tx.purchase), "original_purchase_date_ms": Self.s(world.transactions[0].purchase),
                    "expires_date_ms": Self.s(tx.finalExpires!), "quantity": "1", "is_trial_period": "false",
                    "is_in_intro_offer_period": "false", "in_app_ownership_type": "PURCHASED",
                    "subscription_group_identifier": tx.productId == DiffProduct.news.id ? "21000002" : "21000001",
                ]
                if let r = tx.revocations.first(where: { $0.date <= note.at }) {
                    e["cancellation_date_ms"] = Self.s(r.date)
                    e["cancellation_reason"] = "1"
                }
                if let token = world.token { e["app_account_token"] = token }
                entries.append(e)
            }
            let state = world.renewal(at: note.at)!
            var entry: [String: Any] = [
                "auto_renew_product_id": state.autoRenewProductId, "auto_renew_status": String(state.autoRenewStatus),
                "original_transaction_id": world.originalTransactionId, "product_id": known.last!.productId,
                "is_in_billing_retry_period": state.retry ? "1" : "0",
            ]
            if let grace = state.graceEnd { entry["grace_period_expires_date_ms"] = Self.s(grace) }
            if let intent = state.expirationIntent { entry["expiration_intent"] = String(intent) }
            pending.append(entry)
        }
        // Apple lists the newest first; nothing may depend on the order.
        entries.sort { ($0["purchase_date_ms"] as! String).count != ($1["purchase_date_ms"] as! String).count
            ? ($0["purchase_date_ms"] as! String).count > ($1["purchase_date_ms"] as! String).count
            : ($0["purchase_date_ms"] as! String) > ($1["purchase_date_ms"] as! String) }
        let state = w.renewal(at: note.at)!
        let changed = changeDates[note.sub].last { $0.at <= note.at }!.at
        let body: [String: Any] = [
            "notification_type": note.type,
            "password": password,
            "environment": env,
            "auto_renew_status": state.autoRenewStatus == 1 ? "true" : "false",
            "auto_renew_status_change_date_ms": Self.s(changed),
            "auto_renew_product_id": state.autoRenewProductId,
            "bid": DifferentialRun.bundleId,
            "bvrs": "1",
            "unified_receipt": [
                "status": 0, "environment": w.environment, "latest_receipt": "MIIT" + latestReceipt,
                "latest_receipt_info": entries, "pending_renewal_info": pending,
            ] as [String: Any],
        ]
        return try JSONSerialization.data(withJSONObject: body, options: [.withoutEscapingSlashes])
    }

    func boundaries(_ sub: Int) -> [EpochMillis] {
        let w = worlds[sub]
        var out: [EpochMillis] = []
        for (i, tx) in w.transactions.enumerated() {
            out.append(i == 0 ? tx.purchase - 1 : tx.purchase)
            for r in tx.revocations { out += [r.date, r.date - 1] }
            if let e = tx.finalExpires { out += [e, e - 1] }
        }
        for b in w.billing {
            if let g = b.graceEnd { out += [g, g - 1] }
            if let e = w.transactions.first(where: { $0.id == b.txId })?.finalExpires {
                out += [e + DiffTime.billingRetryLimit, e + DiffTime.billingRetryLimit - 1]
            }
        }
        for c in w.renewals.dropFirst() { out += [c.at, c.at - 1] }
        return out
    }
}

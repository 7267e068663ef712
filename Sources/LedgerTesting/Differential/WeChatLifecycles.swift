import Crypto
import Foundation
import LedgerCore
import WeChatPay

/// A push message value as WeChat writes it: JSON numbers and strings, or XML text.
indirect enum WxValue: Sendable {
    case s(String)
    case i(Int64)
    case o([(String, WxValue)])

    func json() -> String {
        switch self {
        case .s(let v): return "\"" + Self.escape(v) + "\""
        case .i(let v): return String(v)
        case .o(let members): return "{" + members.map { "\"\(Self.escape($0.0))\":" + $0.1.json() }.joined(separator: ",") + "}"
        }
    }

    func xml(_ name: String) -> String {
        switch self {
        case .s(let v): return "<\(name)><![CDATA[\(v)]]></\(name)>"
        case .i(let v): return "<\(name)>\(v)</\(name)>"
        case .o(let members): return "<\(name)>" + members.map { $0.1.xml($0.0) }.joined() + "</\(name)>"
        }
    }

    static func escape(_ s: String) -> String {
        var out = ""
        for c in s.unicodeScalars {
            switch c {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where c.value < 0x20: out += String(format: "\\u%04x", c.value)
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }
}

/// How a push reaches the ledger: secure mode (AES) with a JSON or an XML envelope, or plaintext XML.
enum WxMode: String, Sendable, CaseIterable {
    case jsonSecure = "json-aes"
    case xmlSecure = "xml-aes"
    case xmlPlain = "xml-plain"
}

/// One scripted WeChat push.
struct WxNote: Sendable {
    enum Kind: Sendable {
        case signing(renewalDate: EpochMillis, product: String)
        case deliver(order: Int)
        case unsigning(renewalDate: EpochMillis, product: String)
        /// `byAlias`: MchOrderId states the delivery's WeChatPayInfo.MchOrderNo rather than its
        /// OutTradeNo (the xpay documents do not say which; the ledger must join either).
        case refund(order: Int, ok: Bool, refundId: String, wxOrderId: String, byAlias: Bool)
        /// `byAlias`: pay_order_id names WeChatPayInfo.TransactionId.
        case inquiry(order: Int, byAlias: Bool)
    }

    var kind: Kind
    /// Business time (ms): SignedTime, PaidTime, UnsignedTime, RefundSuccTimestamp, refund_time.
    var at: EpochMillis
    var mode: WxMode
}

/// Scripts one WeChat xpay Apple subscription: signing, the first delivery (paid around the
/// signing, sometimes at the very same instant), a delivery per renewal, unsigning and re-signing,
/// refund inquiries (one to three askings) and refund outcomes (a failure, then maybe a success)
/// for the current or an earlier order, and sometimes a contract no delivery has paid yet.
struct WeChatScript {
    var rng: DiffRandom
    let horizon: EpochMillis
    var world: WeChatWorld
    var notes: [WxNote] = []
    var script: [String] = []
    var tags: Set<String> = []
    var orderIds: [String] = []
    var mchOrderNos: [String] = []
    var payTransactionIds: [String] = []
    var payInfo: [Bool] = []
    var products: [String] = []
    /// Times of signings that re-enable auto-renew within a period (after its unsigning).
    var resignings = Set<EpochMillis>()
    /// A free-trial signing's time and the product's period (seed 000 §2, §3.3: the first period
    /// costs 0, the renewals the original price): the trial is not the product's period.
    var trial: (signed: EpochMillis, period: EpochMillis)?
    let otid: String

    static let weekly = ("wx_vip_weekly", 7 * DiffTime.day)
    static let monthly = ("wx_vip_monthly", 30 * DiffTime.day)

    init(rng: DiffRandom, horizon: EpochMillis, otid: String, openId: String) {
        self.rng = rng
        self.horizon = horizon
        self.otid = otid
        world = WeChatWorld(originalTransactionId: otid, openId: openId)
    }

    mutating func mode() -> WxMode {
        let d = rng.int(0...3)
        return d < 2 ? .jsonSecure : d == 2 ? .xmlSecure : .xmlPlain
    }

    mutating func push(_ kind: WxNote.Kind, at: EpochMillis, _ line: String) {
        let m = mode()
        notes.append(WxNote(kind: kind, at: at, mode: m))
        script.append("\(DiffTime.iso(at)) \(line) (\(m.rawValue))")
    }

    /// A paid order. Sometimes the push has no WeChatPayInfo (no PaidTime, no MchOrderNo or
    /// TransactionId): the order then starts where the period before it ended (the latest earlier
    /// RenewalDate, or the SignedTime of a signing of its period) — never at a push's CreateTime,
    /// which WeChat's re-push moves.
    mutating func order(product: String, paid: EpochMillis, renewalDate: EpochMillis, mayOmitPayInfo: Bool = true,
                        omitPayInfo: Bool? = nil) -> Int {
        let k = world.orders.count
        let id = "WX\(otid)T\(k + 1)"
        let withPay = !(omitPayInfo ?? (mayOmitPayInfo && rng.chance(0.1)))
        let ends = world.orders.map(\.renewalDate) + world.signings.map(\.renewalDate)
        // Signings that re-enable auto-renew within a period (after an unsigning of it) start nothing.
        let starts = world.signings.filter { s in !resignings.contains(s.at) && s.renewalDate <= renewalDate && s.at < renewalDate }
        let placed = (ends.filter { $0 < renewalDate } + starts.map(\.at)).max()
        // Never earlier than RenewalDate minus the product's longest period (issue 20): the longest
        // period a signing (SignedTime → RenewalDate) or a paid order (PaidTime → RenewalDate) states,
        // plus a day; one product per lifecycle. Binds only after a lapse.
        let stated = world.signings.filter { $0.at != trial?.signed }.map { $0.renewalDate - $0.at }
            + world.orders.indices.filter { payInfo[$0] }.map { world.orders[$0].renewalDate - world.orders[$0].paid }
            + (trial.map { [$0.period] } ?? [])
        let floor = renewalDate - (stated.max().map { $0 + DiffTime.day } ?? 31 * DiffTime.day)
        let start = withPay ? paid : max(placed ?? paid + 1000, floor)
        world.orders.append(WeChatWorld.Order(id: id, productId: product, paid: start, renewalDate: renewalDate))
        orderIds.append(id)
        payInfo.append(withPay)
        mchOrderNos.append("M" + rng.digits(18))
        payTransactionIds.append("4200" + rng.digits(24))
        products.append(product)
        world.contract.append(WeChatWorld.ContractChange(at: start, autoRenew: 1))
        push(.deliver(order: k), at: paid,
             "deliver \(id) \(product) paid → \(DiffTime.iso(renewalDate))\(withPay ? "" : " (no WeChatPayInfo: starts at \(DiffTime.iso(start)), where the period before it ended)")")
        if !withPay { tags.insert("delivery-without-paid-time") }
        return k
    }

    static func seconds(_ t: EpochMillis) -> EpochMillis { t / 1000 * 1000 }

    mutating func run(start: EpochMillis) {
        let (product, period) = rng.chance(0.5) ? Self.weekly : Self.monthly
        let tie = rng.chance(0.15)
        let signed = tie ? Self.seconds(start) : start
        // A share of signings are free trials: 3 days of a weekly product, 7 of a monthly one;
        // nothing is charged (no delivery) until the trial ends.
        let trialDays: EpochMillis? = rng.chance(0.15) ? (period == Self.weekly.1 ? 3 : 7) : nil
        var renewalDate = signed + (trialDays.map { $0 * DiffTime.day } ?? period)
        world.signings.append(WeChatWorld.Signing(at: signed, renewalDate: renewalDate, productId: product))
        world.contract.append(WeChatWorld.ContractChange(at: signed, autoRenew: 1))
        push(.signing(renewalDate: renewalDate, product: product), at: signed,
             "signing \(product) → \(DiffTime.iso(renewalDate))\(trialDays.map { " (free trial of \($0) days)" } ?? "")")
        var t = signed
        var on = true
        if let trialDays {
            trial = (signed, period)
            tags.insert("free-trial")
            script.append("free trial: \(trialDays) days, then \(period / DiffTime.day)-day paid periods")
        } else if rng.chance(0.05) {
            tags.insert("signed-not-delivered")
        } else {
            // PaidTime is whole seconds: the same instant as the signing, or up to 5 s around it.
            let paid = tie ? signed : Self.seconds(signed) + rng.int(0...5) * 1000
            _ = order(product: product, paid: paid, renewalDate: renewalDate, mayOmitPayInfo: !tie)
            if tie { tags.insert("tie:signing=delivery") }
            if paid < signed { tags.insert("paid-before-signing") }
            t = max(t, paid)
        }
        var periods = 0
        outer: while periods < 40 {
            periods += 1
            var actions = 0
            while actions < 2 {
                let room = renewalDate - DiffTime.hour - t
                guard room > 2 * DiffTime.hour, rng.chance(0.5) else { break }
                let u = Self.seconds(t + rng.int(DiffTime.hour...room))
                if u > horizon { break outer }
                actions += 1
                t = u
                let refundable = world.orders.indices.filter { world.orders[$0].refundedAt == nil }
                if !refundable.isEmpty && rng.chance(0.45) {
                    let k = rng.chance(0.7) ? refundable.last! : rng.pick(refundable)
                    refund(k, at: &t, limit: renewalDate - DiffTime.hour)
                    if rng.chance(0.4) && on, t + DiffTime.minute < renewalDate - DiffTime.hour {
                        t += DiffTime.minute
                        on = false
                        unsign(at: t, renewalDate: renewalDate, product: product)
                    }
                } else if on {
                    on = false
                    unsign(at: t, renewalDate: renewalDate, product: product)
                } else {
                    on = true
                    world.signings.append(WeChatWorld.Signing(at: u, renewalDate: renewalDate, productId: product))
                    resignings.insert(u)
                    world.contract.append(WeChatWorld.ContractChange(at: u, autoRenew: 1))
                    push(.signing(renewalDate: renewalDate, product: product), at: u, "signing again (auto-renew on)")
                    tags.insert("re-signed")
                }
            }
            guard on, !tags.contains("signed-not-delivered") else { break }
            if rng.chance(0.1) {
                // Apple charges a renewal up to 24 h before the period ends (issue 20); the user
                // unsigns after that charge, the unsigning still stating the period it ends (seed
                // 000 §4.4: 当前订阅周期的结束时间). By when each happened the unsigning is the later
                // act: auto-renew 0 from it, the early-charged period still runs to its end. Half
                // the early charges carry no WeChatPayInfo (Apple payments): the period is placed
                // at the old end, the charge known only by its push's CreateTime, and the unsigning
                // comes up to 12 h after it.
                let early = Self.seconds(renewalDate - rng.int(2...23) * DiffTime.hour)
                let u = Self.seconds(early + rng.int(1...min(12 * 60, (renewalDate - early) / DiffTime.minute - 1)) * DiffTime.minute)
                if early > t + DiffTime.minute, u < renewalDate, u <= horizon {
                    let withoutPay = rng.chance(0.5)
                    _ = order(product: product, paid: early, renewalDate: renewalDate + period, omitPayInfo: withoutPay)
                    // The charge keeps auto-renew on from when it happened, wherever its period starts.
                    world.contract[world.contract.count - 1].at = early
                    unsign(at: u, renewalDate: renewalDate, product: product)
                    tags.insert(withoutPay ? "early-unsigning-without-paid-time" : "early-unsigning")
                    break outer
                }
            }
            let paid = Self.seconds(renewalDate) + rng.int(0...600) * 1000
            if paid > horizon { break }
            _ = order(product: product, paid: paid, renewalDate: renewalDate + period)
            renewalDate += period
            t = paid
        }
        // A lapse, then a resubscription through the App Store: WeChat pushes the delivery only (§4.2:
        // no signing push after the first signing), often without PaidTime — its period must not
        // start at the old period's end.
        // Not right after an unpaid trial: without the catalog's durationDays a lapse after a trial
        // reads like a first paid period when it is under a month (docs/projections.md).
        if !on, !tags.contains("early-unsigning"), !tags.contains("early-unsigning-without-paid-time"), !tags.contains("signed-not-delivered"),
           trial == nil || !world.orders.isEmpty, rng.chance(0.3) {
            let paid = Self.seconds(renewalDate + rng.int(2...30) * DiffTime.day + rng.int(0...3600) * 1000)
            if paid <= horizon {
                _ = order(product: product, paid: paid, renewalDate: paid + period, omitPayInfo: rng.chance(0.5))
                tags.insert("lapse-without-signing")
            }
        }
        if world.orders.count > 1 { tags.insert("renewed") }
    }

    mutating func unsign(at u: EpochMillis, renewalDate: EpochMillis, product: String) {
        world.contract.append(WeChatWorld.ContractChange(at: u, autoRenew: 0))
        push(.unsigning(renewalDate: renewalDate, product: product), at: u, "unsigning (auto-renew off) until \(DiffTime.iso(renewalDate))")
        tags.insert("unsigned")
    }

    /// Apple asks (through WeChat) one to three times, then WeChat reports the outcome.
    mutating func refund(_ k: Int, at t: inout EpochMillis, limit: EpochMillis) {
        let askings = rng.int(0...3)
        for _ in 0..<askings {
            guard t + DiffTime.minute < limit, t <= horizon else { break }
            let alias = payInfo[k] && rng.chance(0.25)
            push(.inquiry(order: k, byAlias: alias), at: t, "refund inquiry for \(alias ? payTransactionIds[k] + " (its WeChatPayInfo.TransactionId)" : orderIds[k])")
            tags.insert("inquiry")
            t += rng.int(1...30) * DiffTime.minute
        }
        let refundId = "WXR" + rng.digits(16)
        let wxOrderId = "WXO" + rng.digits(16)
        let byAlias = payInfo[k] && rng.chance(0.3)
        let named = byAlias ? "\(mchOrderNos[k]) (MchOrderNo of \(orderIds[k]))" : orderIds[k]
        if byAlias { tags.insert("refund-by-alias") }
        if rng.chance(0.25), t + DiffTime.minute < limit, t <= horizon {
            push(.refund(order: k, ok: false, refundId: refundId, wxOrderId: wxOrderId, byAlias: byAlias), at: t, "refund of \(named) FAILED")
            tags.insert("refund-failed")
            t += rng.int(1...60) * DiffTime.minute
            if rng.chance(0.4) { return }
        }
        guard t < limit, t <= horizon else { return }
        world.orders[k].refundedAt = t
        push(.refund(order: k, ok: true, refundId: refundId, wxOrderId: wxOrderId, byAlias: byAlias), at: t,
             "refund of \(named)\(k == world.orders.count - 1 ? "" : " (an earlier order)") succeeded")
        tags.insert(k == world.orders.count - 1 ? "refund" : "refund-older")
    }

    // MARK: rendering

    func header(_ event: String, create: Int64) -> [(String, WxValue)] {
        [("ToUserName", .s("gh_97417a04a28d")), ("FromUserName", .s("o_wechat_official")),
         ("CreateTime", .i(create)), ("MsgType", .s("event")), ("Event", .s(event))]
    }

    /// The decrypted message of `note`; `retry` re-sends it later (CreateTime moves, the rest does not).
    func message(_ note: WxNote, retry: Bool) -> [(String, WxValue)] {
        let create = note.at / 1000 + (retry ? 7 : 1)
        switch note.kind {
        case .signing(let rd, let product):
            return header(XPayEventName.signingResult, create: create) + [
                ("OpenId", .s(world.openId)), ("Attach", .s("uid=\(otid)")),
                ("AppleSubscriptionInfo", .o([("OriginalTransactionId", .s(otid)), ("ProductId", .s(product)),
                                              ("AutoRenewStatus", .i(1)), ("RenewalDate", .i(rd)), ("SignedTime", .i(note.at))])),
            ]
        case .unsigning(let rd, let product):
            return header(XPayEventName.unsigning, create: create) + [
                ("OpenId", .s(world.openId)), ("Attach", .s("uid=\(otid)")), ("Action", .s("unsubscribe")),
                ("AppleSubscriptionInfo", .o([("OriginalTransactionId", .s(otid)), ("ProductId", .s(product)),
                                              ("AutoRenewStatus", .i(0)), ("RenewalDate", .i(rd)), ("UnsignedTime", .i(note.at))])),
            ]
        case .deliver(let k):
            let o = world.orders[k]
            return header(XPayEventName.goodsDeliver, create: create) + [
                ("OpenId", .s(world.openId)), ("OutTradeNo", .s(o.id)), ("Env", .i(0)),
                ("GoodsInfo", .o([("ProductId", .s(o.productId)), ("Quantity", .i(1)), ("OrigPrice", .i(3000)),
                                  ("ActualPrice", .i(k == 0 ? 990 : 3000)), ("Attach", .s("uid=\(otid)"))])),
            ] + (payInfo[k] ? [("WeChatPayInfo", .o([("MchOrderNo", .s(mchOrderNos[k])), ("TransactionId", .s(payTransactionIds[k])),
                                                    ("PaidTime", .i(o.paid / 1000))]))] : []) + [
                ("AppleSubscriptionInfo", .o([("OriginalTransactionId", .s(otid)), ("AutoRenewStatus", .i(1)),
                                              ("RenewalDate", .i(o.renewalDate))])),
            ]
        case .refund(let k, let ok, let refundId, let wxOrderId, let byAlias):
            return header(XPayEventName.refundNotify, create: create) + [
                ("OpenId", .s(world.openId)), ("WxRefundId", .s(refundId)), ("MchRefundId", .s("MR" + refundId.dropFirst(3))),
                ("WxOrderId", .s(wxOrderId)), ("MchOrderId", .s(byAlias ? mchOrderNos[k] : orderIds[k])), ("RefundFee", .i(k == 0 ? 990 : 3000)),
                ("RetCode", .i(ok ? 0 : 268_490_001)), ("RetMsg", .s(ok ? "" : "refund failed")),
                ("RefundStartTimestamp", .i(note.at / 1000 - 60)), ("RefundSuccTimestamp", .i(ok ? note.at / 1000 : 0)),
                ("RetryTimes", .i(retry ? 1 : 0)),
            ]
        case .inquiry(let k, let byAlias):
            let o = world.orders[k]
            return header(XPayEventName.refundInquiry, create: create) + [
                ("refund_time", .s(String(note.at / 1000))), ("order_time", .s(String(o.paid / 1000))),
                ("channel_bill", .s(payTransactionIds[k])), ("bundleid", .s("com.tencent.xin")),
                ("product_id", .s(o.productId)), ("p_count", .s("1")), ("refund_request_reason", .s("UNINTENDED_PURCHASE")),
                ("provide_status", .s("1")), ("pay_order_id", .s(byAlias ? payTransactionIds[k] : o.id)), ("service_type", .s("unipdt")),
                ("consumption_status", .s("0")),
            ]
        }
    }

    /// (path with query, body, content type) for `note`, as WeChat would push it.
    func render(_ note: WxNote, retry: Bool, crypto: WxCrypto, nonce: String) throws -> (String, Data, String) {
        let members = message(note, retry: retry)
        // Plaintext mode's signature does not cover the body, so the ledger refuses a timestamp
        // outside its replay window: plaintext pushes are signed now, as WeChat signs each send.
        let ts = note.mode == .xmlPlain ? String(Int64(Date().timeIntervalSince1970) + (retry ? 1 : 0))
            : String(note.at / 1000 + (retry ? 9 : 2))
        let signature = PushSignature.compute([WxCrypto.token, ts, nonce])
        switch note.mode {
        case .xmlPlain:
            let xml = "<xml>" + members.map { $0.1.xml($0.0) }.joined() + "</xml>"
            return ("/v1/wechat/notifications?signature=\(signature)&timestamp=\(ts)&nonce=\(nonce)", Data(xml.utf8), "text/xml")
        case .jsonSecure, .xmlSecure:
            let inner = note.mode == .jsonSecure ? WxValue.o(members).json()
                : "<xml>" + members.map { $0.1.xml($0.0) }.joined() + "</xml>"
            let encrypt = try crypto.encrypt(inner, nonce: nonce, timestamp: Int64(ts)!)
            let msgSignature = PushSignature.compute([WxCrypto.token, ts, nonce, encrypt])
            let path = "/v1/wechat/notifications?signature=\(signature)&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(msgSignature)"
            if note.mode == .jsonSecure {
                return (path, Data(WxValue.o([("ToUserName", .s("gh_97417a04a28d")), ("Encrypt", .s(encrypt))]).json().utf8), "application/json")
            }
            return (path, Data("<xml><ToUserName><![CDATA[gh_97417a04a28d]]></ToUserName><Encrypt><![CDATA[\(encrypt)]]></Encrypt></xml>".utf8), "text/xml")
        }
    }

    func label(_ note: WxNote) -> String {
        switch note.kind {
        case .signing: "signing"
        case .unsigning: "unsigning"
        case .deliver(let k): "deliver \(orderIds[k])"
        case .refund(let k, let ok, _, _, let alias): "refund \(ok ? "ok" : "failed") \(orderIds[k])\(alias ? " by MchOrderNo" : "")"
        case .inquiry(let k, let alias): "inquiry \(orderIds[k])\(alias ? " by TransactionId" : "")"
        }
    }

    func boundaries() -> [EpochMillis] {
        var out: [EpochMillis] = []
        if let s = world.signings.first { out += [s.at - 1, s.at] }
        for s in world.signings.dropFirst() { out += [s.at, s.at - 1] }
        for o in world.orders {
            out += [o.paid, o.paid - 1, o.renewalDate, o.renewalDate - 1]
            if let r = o.refundedAt { out += [r, r - 1] }
        }
        for c in world.contract { out.append(c.at) }
        return out
    }

    func criticalTimes() -> [EpochMillis] {
        boundaries() + world.signings.map(\.renewalDate) + notes.map { $0.at + 10_000 }
    }
}

/// WeChat's message-push settings of the differential test and the sender side of its crypto.
struct WxCrypto: Sendable {
    static let appId = "wxba5fad812f8e6fb9"
    static let token = "t0kenForTests"
    static let aesKey = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"

    let sender: PushReceiver

    init() throws {
        sender = PushReceiver(config: try WeChatPushConfig(appId: Self.appId, token: Self.token, aesKey: try EncodingAESKey(Self.aesKey)))
    }

    /// The `Encrypt` value of a secure-mode push carrying `plain`.
    func encrypt(_ plain: String, nonce: String, timestamp: Int64) throws -> String {
        let sealed = try sender.encryptReply(Array(plain.utf8), format: .json, timestamp: timestamp, nonce: nonce)
        guard let o = try JSONSerialization.jsonObject(with: sealed) as? [String: Any], let e = o["Encrypt"] as? String else {
            throw DifferentialError.sender("WeChat's sender side produced no Encrypt member")
        }
        return e
    }
}

import Crypto
import Foundation
import LedgerCore
import WeChatPay

/// A simulated population of WeChat mini-program xpay Apple subscribers, deterministic from a seed:
/// each signs a contract (a weekly or monthly product), is charged at signing and at every
/// RenewalDate (one goods-deliver push per order, with its ActualPrice in fen), and may unsign
/// (auto-renew off: the subscription lapses at the period's end), be refunded an order (a refund
/// notify naming it; the customer then leaves), or sign again a few weeks after a lapse.
///
/// Every push is the decrypted message WeChat would send; `WeChatSimulatedPush.request` seals it
/// in secure (AES) mode for `POST /v1/wechat/notifications` with `WeChatSimulation`'s push
/// settings, and `event()` turns it into the event the ledger stores (through `PushReceiver` and
/// `XPayNotification`, as the service does). `orders` states what happened, for the reports' model
/// (`ReportModel.cells(ofWeChat:)`), never through the ledger's decoder or fold.
public struct WeChatSimulation: Sendable {
    public struct Product: Sendable, Hashable {
        public var productId: String
        public var days: Int
        public var priceFen: Int64
    }

    public static let products = [Product(productId: "wx_vip_monthly", days: 30, priceFen: 3_000),
                                  Product(productId: "wx_vip_weekly", days: 7, priceFen: 990)]

    /// The push settings the simulated WeChat signs and encrypts with (a demo's: never a real app's).
    public static let appId = "wx5eedd3e0c0ffee23"
    public static let token = "ledgerSimulatorToken"
    public static let aesKey = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"
    /// The service's environment line for these settings.
    public static let environment = ["LEDGER_WECHAT_APPID": appId, "LEDGER_WECHAT_TOKEN": token, "LEDGER_WECHAT_AES_KEY": aesKey]

    public var subscribers: Int
    public var days: Int
    public var start: EpochMillis
    public var seed: UInt64
    /// OriginalTransactionIds are `firstOriginalTransactionId + index` (apart from the Apple simulator's).
    public var firstOriginalTransactionId: Int64 = 910_000_000_000

    public init(subscribers: Int, days: Int, start: EpochMillis, seed: UInt64) {
        self.subscribers = subscribers
        self.days = days
        self.start = start
        self.seed = seed
    }

    public var end: EpochMillis { start &+ EpochMillis(days) &* 86_400_000 }

    public func lifecycles() -> [WeChatSimulatedLifecycle] {
        (0..<subscribers).map { lifecycle($0) }
    }

    public func lifecycle(_ index: Int) -> WeChatSimulatedLifecycle {
        var run = WeChatRun(simulation: self, index: index)
        run.play()
        return run.result
    }

    /// Every subscriber's pushes, in the order WeChat delivers them.
    public func pushesInDeliveryOrder() -> [WeChatSimulatedPush] {
        lifecycles().flatMap(\.pushes).sorted { ($0.deliveredAt, $0.at, $0.label) < ($1.deliveredAt, $1.at, $1.label) }
    }
}

/// One paid order of a simulated WeChat subscriber.
public struct WeChatSimulatedOrder: Sendable, Equatable {
    public var orderId: String
    public var productId: String
    /// PaidTime (whole seconds, in ms): the period's start.
    public var paid: EpochMillis
    /// RenewalDate: the period's end.
    public var renewalDate: EpochMillis
    public var priceFen: Int64
    /// When WeChat refunded it in full (RefundSuccTimestamp, whole seconds, in ms).
    public var refundedAt: EpochMillis?
}

public struct WeChatSimulatedLifecycle: Sendable {
    public var originalTransactionId: String
    public var openId: String
    public var orders: [WeChatSimulatedOrder]
    public var pushes: [WeChatSimulatedPush]
    /// Where the simulated span ends: nothing after it is observed.
    public var end: EpochMillis

    /// A paid order, not refunded by `t`, covers `t`.
    public func isEntitled(at t: EpochMillis) -> Bool {
        orders.contains { $0.paid <= t && t < $0.renewalDate && $0.paid < end && ($0.refundedAt.map { $0 > t } ?? true) }
    }
}

/// One push as WeChat sends it: the decrypted message, when it happened and when it is delivered.
public struct WeChatSimulatedPush: Sendable {
    public var label: String
    public var message: JSONValue
    /// Business time (the push's own statement of when).
    public var at: EpochMillis
    public var deliveredAt: EpochMillis
    /// Seeds the nonce and the cipher's random bytes, so a run's bodies are the same each time.
    var salt: UInt64

    var nonce: String { String(salt % 1_000_000_000, radix: 10) }

    /// The HTTP request WeChat makes (secure mode, JSON envelope): path with query, body, content type.
    public func request() throws -> (path: String, body: Data, contentType: String) {
        let receiver = try WeChatSimulatedPush.receiver()
        let ts = at / 1000 + 1
        var random = SplitMix64(seed: salt)
        let bytes = (0..<16).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        let sealed = try receiver.encryptReply(Array(message.canonicalJSON()), format: .json, timestamp: ts, nonce: nonce, random: bytes)
        guard let envelope = try JSONSerialization.jsonObject(with: sealed) as? [String: Any], let encrypt = envelope["Encrypt"] as? String else {
            throw WeChatSimulationError("the sender side produced no Encrypt member")
        }
        let signature = PushSignature.compute([WeChatSimulation.token, String(ts), nonce])
        let msgSignature = PushSignature.compute([WeChatSimulation.token, String(ts), nonce, encrypt])
        let body = JSONValue.object(["ToUserName": .string("gh_5eedd3e0c0ff"), "Encrypt": .string(encrypt)]).canonicalJSON()
        return ("/v1/wechat/notifications?signature=\(signature)&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(msgSignature)",
                body, "application/json")
    }

    /// The event the ledger stores for this push (opened and interpreted as the service does).
    public func event() throws -> NewEvent {
        let (path, body, _) = try request()
        var parameters: [String: String] = [:]
        for pair in path.split(separator: "?", maxSplits: 1).last!.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            parameters[String(kv[0])] = kv.count > 1 ? String(kv[1]) : ""
        }
        let push = try WeChatSimulatedPush.receiver().open(query: PushQuery(parameters), body: body)
        let notification = XPayNotification(push)
        guard notification.isReadable else { throw WeChatSimulationError("the ledger cannot read \(label): \(notification.unreadableReason ?? "")") }
        return notification.event()
    }

    static func receiver() throws -> PushReceiver {
        PushReceiver(config: try WeChatPushConfig(appId: WeChatSimulation.appId, token: WeChatSimulation.token,
                                              aesKey: try EncodingAESKey(WeChatSimulation.aesKey)))
    }
}

public struct WeChatSimulationError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

private let day: EpochMillis = 86_400_000
private let hour: EpochMillis = 3_600_000

/// One subscriber's story.
private struct WeChatRun {
    let simulation: WeChatSimulation
    var rng: SplitMix64
    let otid: String
    let openId: String
    var orders: [WeChatSimulatedOrder] = []
    var pushes: [WeChatSimulatedPush] = []

    init(simulation: WeChatSimulation, index: Int) {
        self.simulation = simulation
        rng = SplitMix64(seed: LifecycleGenerator.customerSeed(simulation.seed ^ 0x0057_4543_4841_5400, customerIndex: index))
        otid = String(simulation.firstOriginalTransactionId &+ Int64(index))
        openId = "oSim" + String(rng.next() % 1_000_000_000_000, radix: 36)
    }

    var result: WeChatSimulatedLifecycle {
        WeChatSimulatedLifecycle(originalTransactionId: otid, openId: openId, orders: orders, pushes: pushes, end: simulation.end)
    }

    static func seconds(_ t: EpochMillis) -> EpochMillis { t / 1000 * 1000 }

    mutating func play() {
        let end = simulation.end
        let span = max(1, EpochMillis(simulation.days) * day / 3)
        var t = Self.seconds(simulation.start &+ rng.int(in: 0...span))
        while t < end {
            guard let lapsed = contract(from: t) else { return }
            // Some come back a few weeks after a lapse: a new contract, the same Apple subscription.
            guard rng.chance(0.4) else { return }
            t = Self.seconds(lapsed &+ rng.int(in: (3 * day)...(45 * day)))
        }
    }

    /// One contract from its signing at `signed` until it lapses (returned) or the span ends (nil).
    mutating func contract(from signed: EpochMillis) -> EpochMillis? {
        let end = simulation.end
        let product = rng.chance(0.7) ? WeChatSimulation.products[0] : WeChatSimulation.products[1]
        let period = EpochMillis(product.days) * day
        var renewal = signed + period
        let first = orders.count
        emit("signing", at: signed, signingMessage(product: product.productId, signed: signed, renewal: renewal))
        // Charged at the signing's instant: no moment of the contract is unpaid.
        order(product: product, paid: signed, renewal: renewal)
        while true {
            let paid = orders[orders.count - 1].paid
            let room = renewal - hour - (paid + hour)
            if room > hour, rng.chance(0.06) {
                // A refund of this order (or, sometimes, the one before it); the customer then leaves.
                let k = orders.count - 2 >= first && rng.chance(0.3) ? orders.count - 2 : orders.count - 1
                let at = Self.seconds(paid + hour + rng.int(in: 0...room))
                guard at < end else { return nil }
                orders[k].refundedAt = at
                emit("refund \(orders[k].orderId)", at: at, refundMessage(orders[k], at: at))
                let off = at + 60_000
                guard off < end else { return nil }
                emit("unsigning", at: off, unsigningMessage(product: product.productId, unsigned: off, renewal: renewal))
                return k == orders.count - 1 ? at : renewal
            }
            if room > hour, rng.chance(0.09) {
                let off = Self.seconds(paid + hour + rng.int(in: 0...room))
                guard off < end else { return nil }
                emit("unsigning", at: off, unsigningMessage(product: product.productId, unsigned: off, renewal: renewal))
                return renewal
            }
            guard renewal < end else { return nil }
            order(product: product, paid: renewal, renewal: renewal + period)
            renewal += period
        }
    }

    mutating func order(product: WeChatSimulation.Product, paid: EpochMillis, renewal: EpochMillis) {
        let o = WeChatSimulatedOrder(orderId: "WXS\(otid)N\(orders.count + 1)", productId: product.productId, paid: paid,
                                     renewalDate: renewal, priceFen: product.priceFen)
        orders.append(o)
        guard paid < simulation.end else { return }
        emit("deliver \(o.orderId)", at: paid, deliverMessage(o))
    }

    mutating func emit(_ label: String, at: EpochMillis, _ message: JSONValue) {
        guard at < simulation.end else { return }
        let delay = rng.chance(0.03) ? rng.int(in: hour...(2 * day)) : rng.int(in: 50...3_000)
        let push = WeChatSimulatedPush(label: "\(otid) \(label)", message: message, at: at, deliveredAt: at + delay, salt: rng.next())
        pushes.append(push)
        if rng.chance(0.04) {
            // WeChat re-pushes when the answer was slow: the same message, a new CreateTime.
            var again = push
            again.deliveredAt += rng.pick([10_000, hour, 6 * hour])
            again.salt = rng.next()
            again.message = header(message.text("Event") ?? "", create: again.deliveredAt / 1000, rest: message)
            pushes.append(again)
        }
    }

    // MARK: messages (WeChat's field names, wechat.md)

    func header(_ event: String, create: Int64, rest: JSONValue? = nil) -> JSONValue {
        var o: [String: JSONValue] = rest?.objectValue ?? [:]
        o["ToUserName"] = .string("gh_5eedd3e0c0ff")
        o["FromUserName"] = .string("o_wechat_official")
        o["CreateTime"] = .integer(create)
        o["MsgType"] = .string("event")
        o["Event"] = .string(event)
        return .object(o)
    }

    func with(_ base: JSONValue, _ members: [String: JSONValue]) -> JSONValue {
        var o = base.objectValue ?? [:]
        for (k, v) in members { o[k] = v }
        return .object(o)
    }

    func signingMessage(product: String, signed: EpochMillis, renewal: EpochMillis) -> JSONValue {
        with(header(XPayEventName.signingResult, create: signed / 1000), [
            "OpenId": .string(openId), "Attach": .string("uid=\(otid)"),
            "AppleSubscriptionInfo": .object(["OriginalTransactionId": .string(otid), "ProductId": .string(product),
                                              "AutoRenewStatus": .integer(1), "RenewalDate": .integer(renewal), "SignedTime": .integer(signed)]),
        ])
    }

    func unsigningMessage(product: String, unsigned: EpochMillis, renewal: EpochMillis) -> JSONValue {
        with(header(XPayEventName.unsigning, create: unsigned / 1000), [
            "OpenId": .string(openId), "Attach": .string("uid=\(otid)"), "Action": .string("unsubscribe"),
            "AppleSubscriptionInfo": .object(["OriginalTransactionId": .string(otid), "ProductId": .string(product),
                                              "AutoRenewStatus": .integer(0), "RenewalDate": .integer(renewal), "UnsignedTime": .integer(unsigned)]),
        ])
    }

    func deliverMessage(_ o: WeChatSimulatedOrder) -> JSONValue {
        with(header(XPayEventName.goodsDeliver, create: o.paid / 1000), [
            "OpenId": .string(openId), "OutTradeNo": .string(o.orderId), "Env": .integer(0),
            "GoodsInfo": .object(["ProductId": .string(o.productId), "Quantity": .integer(1), "OrigPrice": .integer(o.priceFen),
                                  "ActualPrice": .integer(o.priceFen), "Attach": .string("uid=\(otid)")]),
            "WeChatPayInfo": .object(["MchOrderNo": .string("M" + o.orderId), "TransactionId": .string("4200" + o.orderId),
                                      "PaidTime": .integer(o.paid / 1000)]),
            "AppleSubscriptionInfo": .object(["OriginalTransactionId": .string(otid), "AutoRenewStatus": .integer(1),
                                              "RenewalDate": .integer(o.renewalDate)]),
        ])
    }

    func refundMessage(_ o: WeChatSimulatedOrder, at: EpochMillis) -> JSONValue {
        with(header(XPayEventName.refundNotify, create: at / 1000), [
            "OpenId": .string(openId), "WxRefundId": .string("WXR" + o.orderId), "MchRefundId": .string("MR" + o.orderId),
            "WxOrderId": .string("WXO" + o.orderId), "MchOrderId": .string(o.orderId), "RefundFee": .integer(o.priceFen),
            "RetCode": .integer(0), "RetMsg": .string(""), "RefundStartTimestamp": .integer(at / 1000 - 60),
            "RefundSuccTimestamp": .integer(at / 1000), "RetryTimes": .integer(0),
        ])
    }
}

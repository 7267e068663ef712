import Crypto
import Foundation
import LedgerCore

/// Why a differential run could not be generated; each says what to change.
public enum DifferentialError: Error, CustomStringConvertible {
    case guardBand(String)
    case sender(String)

    public var description: String {
        switch self {
        case .guardBand(let what):
            return "\(what) was redrawn 30 times and still scripted a change within the guard band around now; widen the horizon in DifferentialRun or pick another LEDGER_DIFF_SEED"
        case .sender(let why):
            return "the differential test could not build a message: \(why)"
        }
    }
}

/// One request of a delivery plan.
public struct DiffDelivery: Sendable {
    public var lifecycle: Int
    public var message: Int
    /// A sender's retry of a message already in the plan (it may still arrive first).
    public var isRetry: Bool
    public var path: String
    public var body: Data
    public var contentType: String
}

/// The differential test's input: ≥ 1,000 Apple lifecycles (V2 subscriptions, one-time purchases,
/// V1 accounts, Sandbox twins of Production ids) and ≥ 500 WeChat lifecycles generated from one
/// seed around one "now" (`anchor`), with their signed messages and their own models.
///
/// Nothing scripted happens within `guardBand` of the anchor (every lifecycle is redrawn until
/// that holds), so the live answers — evaluated at the service's wall clock while the test runs —
/// and the model's answer at the test's "now" cannot straddle a change.
public struct DifferentialRun: Sendable {
    public static let bundleId = "com.example"
    public static let appAppleId: Int64 = 1234
    public static let sharedSecret = "v1-shared-secret"
    /// The service settings the messages are made for (the harness adds Apple's).
    public static let serviceEnvironment: [String: String] = [
        "LEDGER_WECHAT_APPID": WxCrypto.appId, "LEDGER_WECHAT_TOKEN": WxCrypto.token,
        "LEDGER_WECHAT_AES_KEY": WxCrypto.aesKey, "LEDGER_WECHAT_ALLOW_PLAINTEXT": "true",
        // Plaintext pushes and V1 with Production are refused at start outside a test set-up.
        "LEDGER_DEVELOPMENT": "true", "LEDGER_APPLE_V1_TRUSTED": "true",
        "LEDGER_APPLE_SHARED_SECRET": sharedSecret,
    ]
    /// No scripted change within [anchor − before, anchor + after].
    public static let guardBefore: EpochMillis = 10 * DiffTime.minute
    public static let guardAfter: EpochMillis = 30 * DiffTime.minute

    public let seed: UInt64
    public let anchor: EpochMillis
    public private(set) var lifecycles: [DiffLifecycle] = []
    /// Lifecycles redrawn because something fell in the guard band.
    public private(set) var redrawn = 0

    var horizon: EpochMillis { anchor - Self.guardBefore - 5 * DiffTime.minute }

    public static func generate(seed: UInt64, anchor: EpochMillis, appleCount: Int = 1000, wechatCount: Int = 500,
                                authority: AppleTestAuthority) throws -> DifferentialRun {
        var run = DifferentialRun(seed: seed, anchor: anchor)
        let signer = try DiffSigner(authority)
        let crypto = try WxCrypto()
        var unit = 0
        // Apple customers: a pool of appAccountTokens, so most customers hold 1–3 subscriptions.
        var pool = DiffRandom(seed: seed, stream: 7)
        let tokens = (0..<max(1, appleCount * 55 / 100)).map { _ in pool.uuid() }
        let openIds = (0..<max(1, wechatCount * 70 / 100)).map { _ in "o" + pool.digits(6) + "Wx" + pool.uuid().prefix(12) }

        var apple = 0
        var n: UInt64 = 0
        while apple < appleCount {
            n += 1
            var rng = DiffRandom(seed: seed, stream: 1_000_000 + n)
            let roll = rng.int(0...99)
            if roll < 8 {
                try run.addV1Account(n: n, unit: unit, tokens: tokens)
            } else if roll < 16 {
                try run.addOneTime(n: n, unit: unit, tokens: tokens, signer: signer)
            } else if roll < 22 {
                // The same originalTransactionId in Production and Sandbox: two subscriptions.
                try run.addAppleV2(n: n, unit: unit, environment: SubscriptionKey.production, tokens: tokens,
                                   signer: signer, tag: "sandbox-twin")
                try run.addAppleV2(n: n, unit: unit, environment: SubscriptionKey.sandbox, tokens: tokens,
                                   signer: signer, tag: "sandbox-twin", twinOf: run.lifecycles.count - 1)
            } else {
                let env = roll < 27 ? SubscriptionKey.sandbox : SubscriptionKey.production
                try run.addAppleV2(n: n, unit: unit, environment: env, tokens: tokens, signer: signer)
            }
            unit += 1
            apple = run.lifecycles.count
        }
        var w: UInt64 = 0
        while run.lifecycles.count < apple + wechatCount {
            w += 1
            try run.addWeChat(n: w, unit: unit, openIds: openIds, crypto: crypto)
            unit += 1
        }
        return run
    }

    func inGuardBand(_ times: [EpochMillis]) -> Bool {
        times.contains { $0 >= anchor - Self.guardBefore && $0 <= anchor + Self.guardAfter }
    }

    func pickProbes(_ candidates: [EpochMillis], rng: inout DiffRandom, count: Int = 3) -> [EpochMillis] {
        var c = Array(Set(candidates.filter { $0 > 0 && $0 < anchor - Self.guardBefore })).sorted()
        rng.shuffle(&c)
        return Array(c.prefix(count)).sorted()
    }

    // MARK: Apple V2

    mutating func addAppleV2(n: UInt64, unit: Int, environment: String, tokens: [String],
                             signer: DiffSigner, tag: String? = nil, twinOf: Int? = nil) throws {
        let otid: UInt64 = 100_000_000_000_000 + n * 1000
        for attempt in 0..<30 {
            var r = DiffRandom(seed: seed, stream: 20_000_000 + n * 64 + UInt64(attempt) * 2 + (environment == SubscriptionKey.sandbox ? 1 : 0))
            var token: String? = r.chance(0.85) ? r.pick(tokens) : nil
            if let twin = twinOf, r.chance(0.5) { token = lifecycles[twin].customerId }
            let upper = token != nil && r.chance(0.05)
            if upper { token = token!.uppercased() }
            let product = r.pick([DiffProduct.monthly, DiffProduct.monthly, DiffProduct.weekly, DiffProduct.yearly, DiffProduct.premium])
            let span = min(product.period * r.int(0...5) + r.int(DiffTime.hour...product.period), 420 * DiffTime.day)
            var s = AppleScript(rng: r, horizon: horizon, otidNumber: otid, environment: environment, token: token)
            s.runSubscription(start: horizon - span, product: product)
            if inGuardBand(s.criticalTimes()) { redrawn += 1; continue }
            if upper { s.tags.insert("token-upper-case") }
            if token == nil { s.tags.insert("no-customer") }
            if let tag { s.tags.insert(tag) }
            var messages: [DiffMessage] = []
            // A lost notification (issue 20: a lost REFUND) is in the script and the world, never sent.
            for note in s.notes where !note.lost {
                let body = try s.render(note, signer: signer)
                messages.append(DiffMessage(
                    label: "\(note.name) tx=\(note.txId ?? "-") at \(DiffTime.iso(note.at))", at: note.at,
                    path: "/v1/apple/notifications", body: body, contentType: "application/json",
                    retryPath: "/v1/apple/notifications", retryBody: body, source: "apple_v2"))
            }
            var pr = r
            let probes = pickProbes(s.boundaries(), rng: &pr)
            lifecycles.append(DiffLifecycle(
                index: lifecycles.count, source: .appleV2, environment: environment, originalTransactionId: s.world.originalTransactionId,
                unit: unit, tags: s.tags.sorted(), script: s.script, messages: messages, probes: probes, refundsFirst: false,
                queryCustomerId: s.world.token.map { pr.chance(0.3) ? $0.uppercased() : $0 }, model: .apple(s.world)))
            return
        }
        throw DifferentialError.guardBand("lifecycle \(n)")
    }

    mutating func addOneTime(n: UInt64, unit: Int, tokens: [String], signer: DiffSigner) throws {
        let otid: UInt64 = 400_000_000_000_000 + n * 1000
        for attempt in 0..<30 {
            var r = DiffRandom(seed: seed, stream: 30_000_000 + n * 64 + UInt64(attempt))
            let token: String? = r.chance(0.9) ? r.pick(tokens) : nil
            var s = AppleScript(rng: r, horizon: horizon, otidNumber: otid, environment: SubscriptionKey.production, token: token)
            s.runOneTime(at: horizon - r.int(DiffTime.hour...300 * DiffTime.day))
            if inGuardBand(s.criticalTimes()) { redrawn += 1; continue }
            if token == nil { s.tags.insert("no-customer") }
            let messages = try s.notes.map { note in
                let body = try s.render(note, signer: signer)
                return DiffMessage(label: "\(note.name) tx=\(note.txId ?? "-") at \(DiffTime.iso(note.at))", at: note.at,
                                   path: "/v1/apple/notifications", body: body, contentType: "application/json",
                                   retryPath: "/v1/apple/notifications", retryBody: body, source: "apple_v2")
            }
            var pr = r
            lifecycles.append(DiffLifecycle(
                index: lifecycles.count, source: .oneTime, environment: SubscriptionKey.production,
                originalTransactionId: s.world.originalTransactionId, unit: unit, tags: s.tags.sorted(), script: s.script,
                messages: messages, probes: pickProbes(s.boundaries(), rng: &pr), refundsFirst: false,
                queryCustomerId: s.world.token, model: .apple(s.world)))
            return
        }
        throw DifferentialError.guardBand("one-time purchase \(n)")
    }

    // MARK: Apple V1

    mutating func addV1Account(n: UInt64, unit: Int, tokens: [String]) throws {
        for attempt in 0..<30 {
            var r = DiffRandom(seed: seed, stream: 40_000_000 + n * 64 + UInt64(attempt))
            let env = r.chance(0.15) ? SubscriptionKey.sandbox : SubscriptionKey.production
            let token: String? = r.chance(0.85) ? r.pick(tokens) : nil
            let two = r.chance(0.25)
            var s = V1Script(rng: r, horizon: horizon)
            let p1 = r.pick([DiffProduct.monthly, DiffProduct.weekly, DiffProduct.yearly])
            s.addSubscription(otidNumber: 300_000_000_000_000 + n * 1000, environment: env, token: token, product: p1,
                              start: horizon - min(p1.period * r.int(0...4) + r.int(DiffTime.hour...p1.period), 400 * DiffTime.day))
            if two {
                s.addSubscription(otidNumber: 300_000_000_000_000 + n * 1000 + 500, environment: env, token: token, product: .news,
                                  start: horizon - r.int(DiffTime.hour...120 * DiffTime.day))
            }
            var critical: [EpochMillis] = s.notes.map(\.at)
            for i in s.worlds.indices { critical += s.boundaries(i) }
            if inGuardBand(critical) { redrawn += 1; continue }
            let notes = s.notes.sorted { $0.at < $1.at }
            for (i, w) in s.worlds.enumerated() {
                var messages: [DiffMessage] = []
                for note in notes where note.sub == i {
                    let body = try s.render(note, password: Self.sharedSecret, latestReceipt: note.latestReceipt)
                    let retry = try s.render(note, password: Self.sharedSecret, latestReceipt: note.latestReceipt + "R")
                    messages.append(DiffMessage(
                        label: "V1 \(note.type) at \(DiffTime.iso(note.at))", at: note.at, path: "/v1/apple/notifications/v1",
                        body: body, contentType: "application/json", retryPath: "/v1/apple/notifications/v1", retryBody: retry,
                        source: "apple_v1"))
                }
                var tags = s.tags[i]
                if two { tags.insert("v1-two-groups") }
                if token == nil { tags.insert("no-customer") }
                var pr = r
                lifecycles.append(DiffLifecycle(
                    index: lifecycles.count, source: .appleV1, environment: env, originalTransactionId: w.originalTransactionId,
                    unit: unit, tags: tags.sorted(), script: s.scripts[i], messages: messages,
                    probes: pickProbes(s.boundaries(i), rng: &pr), refundsFirst: false, queryCustomerId: w.token, model: .apple(w)))
            }
            return
        }
        throw DifferentialError.guardBand("V1 account \(n)")
    }

    // MARK: WeChat

    mutating func addWeChat(n: UInt64, unit: Int, openIds: [String], crypto: WxCrypto) throws {
        let otid = String(200_000_000_000_000 + n * 1000)
        for attempt in 0..<30 {
            var r = DiffRandom(seed: seed, stream: 50_000_000 + n * 64 + UInt64(attempt))
            let openId = r.pick(openIds)
            var s = WeChatScript(rng: r, horizon: horizon, otid: otid, openId: openId)
            let period = 30 * DiffTime.day
            s.run(start: horizon - r.int(DiffTime.hour...5 * period))
            if inGuardBand(s.criticalTimes()) { redrawn += 1; continue }
            var nr = r
            var messages: [DiffMessage] = []
            for note in s.notes {
                let (path, body, type) = try s.render(note, retry: false, crypto: crypto, nonce: nr.digits(10))
                let (rpath, rbody, _) = try s.render(note, retry: true, crypto: crypto, nonce: nr.digits(10))
                var m = DiffMessage(label: "\(s.label(note)) at \(DiffTime.iso(note.at)) (\(note.mode.rawValue))", at: note.at,
                                    path: path, body: body, contentType: type, retryPath: rpath, retryBody: rbody, source: "wechat")
                switch note.kind {
                case .deliver(let k):
                    m.delivers = s.orderIds[k]
                    m.retryFollowsOriginal = !s.payInfo[k]
                case .refund(let k, _, _, _, _), .inquiry(let k, _): m.names = s.orderIds[k]
                default: break
                }
                messages.append(m)
            }
            let refundsFirst = messages.contains { $0.names != nil } && nr.chance(0.5)
            var tags = s.tags
            if refundsFirst { tags.insert("refund-before-delivery") }
            lifecycles.append(DiffLifecycle(
                index: lifecycles.count, source: .wechat, environment: SubscriptionKey.production, originalTransactionId: otid,
                unit: unit, tags: tags.sorted(), script: s.script, messages: messages, probes: pickProbes(s.boundaries(), rng: &nr),
                refundsFirst: refundsFirst, queryCustomerId: openId, model: .wechat(s.world)))
            return
        }
        throw DifferentialError.guardBand("WeChat lifecycle \(n)")
    }

    // MARK: delivery

    /// How shuffle `k` orders each delivery unit: 0 = business order, 1 = reverse business order,
    /// anything else = a random permutation (seeded by seed, k and unit). Every plan adds retries
    /// of ~15% of the messages at random later places, and in lifecycles marked `refundsFirst`
    /// puts WeChat refunds and inquiries of an order before that order's delivery.
    ///
    /// `fraction` < 1 delivers only that share of the units (a seeded choice): a second order of
    /// every lifecycle would double the suite's time for little more coverage.
    public func plan(shuffle k: Int, fraction: Double = 1, retryRate: Double = 0.15) -> [[DiffDelivery]] {
        var units: [Int: [(Int, Int)]] = [:]
        for l in lifecycles {
            for m in l.messages.indices { units[l.unit, default: []].append((l.index, m)) }
        }
        var pick = DiffRandom(seed: seed, stream: 80_000_000 + UInt64(k))
        return units.keys.sorted().filter { _ in fraction >= 1 || pick.chance(fraction) }.map { unit in
            var rng = DiffRandom(seed: seed, stream: 90_000_000 + UInt64(k) * 10_000_000 + UInt64(unit))
            var order = units[unit]!.sorted {
                let a = lifecycles[$0.0].messages[$0.1].at, b = lifecycles[$1.0].messages[$1.1].at
                return a != b ? a < b : ($0.0, $0.1) < ($1.0, $1.1)
            }
            switch k {
            case 0: break
            case 1: order.reverse()
            default: rng.shuffle(&order)
            }
            // Refunds/inquiries of an order before its delivery, where the lifecycle asks for it.
            for l in Set(order.map(\.0)) where lifecycles[l].refundsFirst {
                for (m, msg) in lifecycles[l].messages.enumerated() {
                    guard let delivered = msg.delivers else { continue }
                    let naming = order.filter { $0.0 == l && lifecycles[l].messages[$0.1].names == delivered }
                    guard !naming.isEmpty else { continue }
                    order.removeAll { $0.0 == l && lifecycles[l].messages[$0.1].names == delivered }
                    let at = order.firstIndex { $0 == (l, m) }!
                    order.insert(contentsOf: naming, at: at)
                }
            }
            var out: [DiffDelivery] = order.map { (l, m) in
                let msg = lifecycles[l].messages[m]
                return DiffDelivery(lifecycle: l, message: m, isRetry: false, path: msg.path, body: msg.body, contentType: msg.contentType)
            }
            for (l, m) in order where rng.chance(retryRate) {
                let msg = lifecycles[l].messages[m]
                let retry = DiffDelivery(lifecycle: l, message: m, isRetry: true, path: msg.retryPath, body: msg.retryBody,
                                         contentType: msg.contentType)
                // A random permutation may deliver the retry first; business order retries right after.
                let original = out.firstIndex { $0.lifecycle == l && $0.message == m }!
                let position = k == 0 ? original + 1 : msg.retryFollowsOriginal ? rng.int((original + 1)...out.count) : rng.int(0...out.count)
                out.insert(retry, at: min(position, out.count))
            }
            return out
        }
    }

    // MARK: customers

    /// Every customer (in each environment) some lifecycle names.
    public var customers: [DiffCustomer] {
        var seen: [String: DiffCustomer] = [:]
        for l in lifecycles {
            guard let c = l.customerId else { continue }
            let key = l.environment + "|" + c
            if seen[key] == nil { seen[key] = DiffCustomer(customerId: c, environment: l.environment, queryId: l.queryCustomerId ?? c) }
        }
        return seen.values.sorted()
    }

    /// Each customer's lifecycles (by environment and customer id).
    public var lifecyclesByCustomer: [DiffCustomer: [DiffLifecycle]] {
        var byKey: [String: [DiffLifecycle]] = [:]
        for l in lifecycles {
            guard let c = l.customerId else { continue }
            byKey[l.environment + "|" + c, default: []].append(l)
        }
        var out: [DiffCustomer: [DiffLifecycle]] = [:]
        for c in customers { out[c] = byKey[c.environment + "|" + c.customerId] ?? [] }
        return out
    }

    /// What the model expects the entitlements route to answer for `lifecycles` (one customer's).
    public static func grants(of lifecycles: [DiffLifecycle], at t: EpochMillis) -> [ExpectedGrant] {
        lifecycles.flatMap { $0.grants(at: t) }.sorted()
    }

    public var summary: String {
        var bySource: [String: Int] = [:]
        var byTag: [String: Int] = [:]
        for l in lifecycles {
            bySource[l.source.rawValue, default: 0] += 1
            for t in l.tags { byTag[t, default: 0] += 1 }
        }
        let messages = lifecycles.reduce(0) { $0 + $1.messages.count }
        return "\(lifecycles.count) lifecycles (" + bySource.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            + "), \(messages) messages, \(customers.count) customers, \(redrawn) redrawn off the guard band; shapes: "
            + byTag.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }
}

import Crypto
import Foundation
import LedgerCore
import Postgres
import WeChatPay

/// `ledger-dev bench refund-inquiry`: WeChat refund inquiries in secure mode against a spawned
/// `ledger serve`, each for an order whose delivery was stored first, so every inquiry takes the
/// whole path: decrypt, read the decision's inputs in one transaction (order aliases, the
/// subscription's facts, the delivery's raw digest, the customer's refund history), decide, append
/// the asking and its answer in one transaction, encrypt the reply. Besides the client's latency it
/// reports `decidedInMs` — measured by the service from an asking's arrival to its reply being
/// ready, as stored with each answer — and counts fallbacks (answers given because the budget ran
/// out). The baseline is the same service answering the URL check (signature only, no database) on
/// the same connections: the cost of HTTP and the loop. Three runs, each on a fresh service and
/// database; the report shows the median of each figure and every run's.
public enum RefundInquiryBenchmark {
    static let appId = "wxbenchmark000001"
    static let token = "bench-token"
    static let keyText = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"

    /// Percentiles of a list of milliseconds.
    public struct Millis: Sendable, CustomStringConvertible {
        public var p50: Double
        public var p99: Double
        public var max: Double

        init(_ values: [Double]) {
            let s = values.sorted()
            func rank(_ q: Double) -> Double {
                guard !s.isEmpty else { return 0 }
                return s[Swift.min(s.count - 1, Swift.max(0, Int((q * Double(s.count)).rounded(.up)) - 1))]
            }
            p50 = rank(0.5)
            p99 = rank(0.99)
            max = s.last ?? 0
        }

        public var description: String { String(format: "p50 %.1f ms   p99 %.1f ms   max %.1f ms", p50, p99, max) }
    }

    public struct Run: Sendable {
        public var load: LoadReport
        public var baseline: LoadReport
        public var decided: Millis
        public var answers: Int
        public var fallbacks: Int
    }

    public struct Report: Sendable, CustomStringConvertible {
        public var inquiries: Int
        public var connections: Int
        public var runs: [Run]

        static func median(_ v: [Double]) -> Double {
            let s = v.sorted()
            return s.isEmpty ? 0 : s[s.count / 2]
        }

        public var description: String {
            let m = { (f: (Run) -> Double) in Self.median(runs.map(f)) }
            let rate = m { $0.load.requestsPerSecond }, baseRate = m { $0.baseline.requestsPerSecond }
            var lines = [
                "refund-inquiry: \(inquiries) inquiries in secure mode (JSON), \(connections) connections, each decided from ledger facts; median of \(runs.count) runs (each on a fresh service and database)",
                String(format: "  inquiries:    %8.0f req/s   p50 %.2f ms   p99 %.2f ms   max %.2f ms   (client side; WeChat waits 3000 ms)",
                       rate, m { $0.load.latency.p50 }, m { $0.load.latency.p99 }, m { $0.load.latency.max }),
                String(format: "  decidedInMs:  p50 %.1f ms   p99 %.1f ms   max %.1f ms   (in the service: arrival → reply ready, as stored with each answer; budget 2500 ms)",
                       m { $0.decided.p50 }, m { $0.decided.p99 }, m { $0.decided.max }),
                String(format: "  fallbacks:    %.0f of %.0f answers (rule deadline)", m { Double($0.fallbacks) }, m { Double($0.answers) }),
                String(format: "  URL check:    %8.0f req/s   p50 %.2f ms   p99 %.2f ms   (same service and connections, no database)",
                       baseRate, m { $0.baseline.latency.p50 }, m { $0.baseline.latency.p99 }),
            ]
            for (i, r) in runs.enumerated() {
                lines.append(String(format: "  run %d: %.0f req/s, p50 %.2f ms, p99 %.2f ms; decidedInMs %@; URL check %.0f req/s",
                                    i + 1, r.load.requestsPerSecond, r.load.latency.p50, r.load.latency.p99, r.decided.description,
                                    r.baseline.requestsPerSecond))
            }
            return lines.joined(separator: "\n")
        }

        /// Inquiries/s against the URL check of the same run (no target: the inquiry does a
        /// database read and an append the URL check does not; the deadline is the target).
        public var summary: BenchSummary {
            BenchSummary(name: "refund-inquiry", command: "ledger-dev bench refund-inquiry", unit: "req/s",
                         ledgerLabel: "refund inquiries (decrypt, decide from facts, append, encrypt)",
                         ledger: runs.map(\.load.requestsPerSecond),
                         baselineLabel: "URL check on the same service and connections",
                         baseline: runs.map(\.baseline.requestsPerSecond),
                         details: ["p99 ms": Self.median(runs.map(\.load.latency.p99)),
                                   "decidedInMs p99": Self.median(runs.map(\.decided.p99)),
                                   "fallbacks": Self.median(runs.map { Double($0.fallbacks) })])
        }
    }

    public static func run(serverConninfo: String, inquiries: Int, connections: Int, runs: Int = 3,
                           log: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        var results: [Run] = []
        for n in 1...max(1, runs) {
            log("run \(n) of \(runs)")
            results.append(try await once(serverConninfo: serverConninfo, inquiries: inquiries, connections: connections, log: log))
        }
        return Report(inquiries: inquiries, connections: connections, runs: results)
    }

    static func once(serverConninfo: String, inquiries: Int, connections: Int, log: @Sendable (String) -> Void) async throws -> Run {
        let options = try ReliabilityOptions(serverConninfo: serverConninfo)
        let spawned = try SpawnedService(options: options, environment: [
            "LEDGER_WECHAT_APPID": appId, "LEDGER_WECHAT_TOKEN": token, "LEDGER_WECHAT_AES_KEY": keyText,
        ])
        defer { spawned.stop() }
        let target = try LoopbackTarget(url: spawned.baseURL)
        let sender = PushReceiver(config: try WeChatPushConfig(appId: appId, token: token, aesKey: try EncodingAESKey(keyText)))
        let now = Int64(Date().timeIntervalSince1970)
        log("storing \(inquiries) deliveries…")
        let deliveries = try (0..<inquiries).map { try push(sender, delivery(order: "ORDER-\($0)", otid: "30000\($0)", now: now)) }
        let stored = try await LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(inquiries)),
                                             cycling: deliveries).run()
        guard stored.count(200) == inquiries else {
            throw BenchmarkError.invalid("only \(stored.count(200)) of \(inquiries) deliveries were stored: \(stored.sampleBodies.values.first ?? "")")
        }
        log("asking \(inquiries) refund inquiries over \(connections) connections…")
        let asks = try (0..<inquiries).map { try push(sender, inquiry(order: "ORDER-\($0)", now: now)) }
        let load = try await LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(inquiries)),
                                           cycling: asks).run()
        guard load.count(200) == inquiries else {
            throw BenchmarkError.invalid("only \(load.count(200)) of \(inquiries) inquiries were answered 200: \(load.sampleBodies.values.first ?? "")")
        }
        let ts = String(now), nonce = "n0nce"
        let check = LoadRequest(path: "/v1/wechat/notifications?signature=\(sha1([token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)&echostr=42")
        let baseline = try await LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(inquiries)),
                                               cycling: [check]).run()
        // What the service measured, from the answers' facts (the one decoder's reading).
        let db = try spawned.database.connect()
        var decided: [Double] = []
        var fallbacks = 0
        for row in try db.query("SELECT detail FROM facts WHERE kind = 'refund_answer'", name: "answers").rows {
            guard let detail = try row.decode(String?.self, "detail"), let v = try? JSONValue(json: Data(detail.utf8)) else { continue }
            if let ms = v.int64("decidedInMs") { decided.append(Double(ms)) }
            if v.text("rule") == "deadline" { fallbacks += 1 }
        }
        guard decided.count == inquiries else {
            throw BenchmarkError.invalid("\(decided.count) answers recorded decidedInMs for \(inquiries) inquiries")
        }
        return Run(load: load, baseline: baseline, decided: Millis(decided), answers: decided.count, fallbacks: fallbacks)
    }

    static func sha1(_ parts: [String]) -> String {
        Hex.encode(Digest.sha1(Array(parts.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }.joined().utf8)))
    }

    /// A secure-mode push signed now (a stale timestamp is only counted in secure mode, but a
    /// real sender's is fresh).
    static func push(_ sender: PushReceiver, _ message: [String: Any]) throws -> LoadRequest {
        let nonce = String(UInt64.random(in: 1...UInt64.max)), now = Int64(Date().timeIntervalSince1970), ts = String(now)
        let plain = try JSONSerialization.data(withJSONObject: message, options: [.sortedKeys])
        let sealed = try sender.encryptReply(Array(plain), format: .json, timestamp: now, nonce: nonce)
        let encrypt = (try JSONSerialization.jsonObject(with: sealed) as? [String: Any])?["Encrypt"] as? String ?? ""
        let query = "signature=\(sha1([token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(sha1([token, ts, nonce, encrypt]))"
        let body = try JSONSerialization.data(withJSONObject: ["ToUserName": "gh_bench", "Encrypt": encrypt])
        return LoadRequest(method: "POST", path: "/v1/wechat/notifications?" + query,
                           headers: [("Content-Type", "application/json")], body: body)
    }

    /// Paid 20 hours ago (PaidTime), renewing in 10 days.
    static func delivery(order: String, otid: String, now: Int64) -> [String: Any] {
        ["ToUserName": "gh_bench", "FromUserName": "o_official", "CreateTime": now - 72_000, "MsgType": "event",
         "Event": XPayEventName.goodsDeliver, "OpenId": "o-\(order)", "OutTradeNo": order, "Env": 0,
         "GoodsInfo": ["ProductId": "vip_monthly", "Quantity": 1, "OrigPrice": 3000, "ActualPrice": 990, "Attach": "b"],
         "WeChatPayInfo": ["MchOrderNo": "mch-" + order, "TransactionId": "4200-" + order, "PaidTime": now - 72_000],
         "AppleSubscriptionInfo": ["OriginalTransactionId": otid, "AutoRenewStatus": 1, "RenewalDate": (now + 864_000) * 1000]]
    }

    static func inquiry(order: String, now: Int64) -> [String: Any] {
        var o: [String: Any] = ["ToUserName": "gh_bench", "FromUserName": "o_official", "CreateTime": now,
                                "MsgType": "event", "Event": XPayEventName.refundInquiry]
        for (k, v) in [("refund_time", String(now)), ("order_time", String(now - 72_000)), ("channel_bill", "5100\(order.utf8.count)"),
                       ("bundleid", "com.tencent.xin"), ("product_id", "vip_monthly"), ("p_count", "1"),
                       ("refund_request_reason", "UNINTENDED_PURCHASE"), ("provide_status", "1"), ("pay_order_id", order),
                       ("service_type", "unipdt"), ("consumption_status", "0")] { o[k] = v }
        return o
    }
}

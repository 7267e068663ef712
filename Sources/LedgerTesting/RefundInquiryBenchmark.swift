import Crypto
import Foundation
import LedgerCore
import WeChatPay

/// `ledger-dev bench refund-inquiry`: WeChat refund inquiries in secure mode against a spawned
/// `ledger serve`, each for an order whose delivery was stored first, so every inquiry takes the
/// whole path: decrypt, find the delivery, gather the evidence, decide, append inquiry and answer
/// in one transaction, encrypt the reply. The baseline is the same service answering the URL
/// check (signature only, no database) on the same connections: the cost of HTTP and the loop.
public enum RefundInquiryBenchmark {
    static let appId = "wxbenchmark000001"
    static let token = "bench-token"
    static let keyText = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"

    public struct Report: Sendable, CustomStringConvertible {
        public var inquiries: Int
        public var connections: Int
        public var load: LoadReport
        public var baseline: LoadReport

        public var description: String {
            [
                "refund-inquiry: \(inquiries) inquiries in secure mode (JSON), \(connections) connections, each answered from ledger facts",
                String(format: "  inquiries:  %8.0f req/s   p50 %.2f ms   p99 %.2f ms   max %.2f ms   (WeChat's budget: 3000 ms)",
                       load.requestsPerSecond, load.latency.p50, load.latency.p99, load.latency.max),
                String(format: "  URL check:  %8.0f req/s   p50 %.2f ms   p99 %.2f ms   (same service and connections, no database)",
                       baseline.requestsPerSecond, baseline.latency.p50, baseline.latency.p99),
                String(format: "  ratio:      %.2f of the URL-check rate", baseline.requestsPerSecond > 0 ? load.requestsPerSecond / baseline.requestsPerSecond : 0),
            ].joined(separator: "\n")
        }
    }

    public static func run(serverConninfo: String, inquiries: Int, connections: Int,
                           log: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        let options = try ReliabilityOptions(serverConninfo: serverConninfo)
        let spawned = try SpawnedService(options: options, environment: [
            "LEDGER_WECHAT_APPID": appId, "LEDGER_WECHAT_TOKEN": token, "LEDGER_WECHAT_AES_KEY": keyText,
        ])
        defer { spawned.stop() }
        let target = try LoopbackTarget(url: spawned.baseURL)
        let sender = PushReceiver(config: try WeChatPushConfig(appId: appId, token: token, aesKey: try EncodingAESKey(keyText)))
        log("storing \(inquiries) deliveries…")
        let deliveries = try (0..<inquiries).map { try push(sender, delivery(order: "ORDER-\($0)", otid: "30000\($0)")) }
        let stored = try await LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(inquiries)),
                                         cycling: deliveries).run()
        guard stored.count(200) == inquiries else {
            throw BenchmarkError.invalid("only \(stored.count(200)) of \(inquiries) deliveries were stored: \(stored.sampleBodies.values.first ?? "")")
        }
        log("asking \(inquiries) refund inquiries over \(connections) connections…")
        let asks = try (0..<inquiries).map { try push(sender, inquiry(order: "ORDER-\($0)")) }
        let load = try await LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(inquiries)),
                                       cycling: asks).run()
        guard load.count(200) == inquiries else {
            throw BenchmarkError.invalid("only \(load.count(200)) of \(inquiries) inquiries were answered 200: \(load.sampleBodies.values.first ?? "")")
        }
        let ts = "1775226065", nonce = "n0nce"
        let check = LoadRequest(path: "/v1/wechat/notifications?signature=\(sha1([token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)&echostr=42")
        let baseline = try await LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(inquiries)),
                                           cycling: [check]).run()
        return Report(inquiries: inquiries, connections: connections, load: load, baseline: baseline)
    }

    static func sha1(_ parts: [String]) -> String {
        Hex.encode(Digest.sha1(Array(parts.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }.joined().utf8)))
    }

    static func push(_ sender: PushReceiver, _ message: [String: Any]) throws -> LoadRequest {
        let nonce = String(UInt64.random(in: 1...UInt64.max)), ts = "1775226065"
        let plain = try JSONSerialization.data(withJSONObject: message, options: [.sortedKeys])
        let sealed = try sender.encryptReply(Array(plain), format: .json, timestamp: 1775226065, nonce: nonce)
        let encrypt = (try JSONSerialization.jsonObject(with: sealed) as? [String: Any])?["Encrypt"] as? String ?? ""
        let query = "signature=\(sha1([token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(sha1([token, ts, nonce, encrypt]))"
        let body = try JSONSerialization.data(withJSONObject: ["ToUserName": "gh_bench", "Encrypt": encrypt])
        return LoadRequest(method: "POST", path: "/v1/wechat/notifications?" + query,
                           headers: [("Content-Type", "application/json")], body: body)
    }

    static func delivery(order: String, otid: String) -> [String: Any] {
        ["ToUserName": "gh_bench", "FromUserName": "o_official", "CreateTime": 1775226066, "MsgType": "event",
         "Event": XPayEventName.goodsDeliver, "OpenId": "o-\(order)", "OutTradeNo": order, "Env": 0,
         "GoodsInfo": ["ProductId": "vip_monthly", "Quantity": 1, "OrigPrice": 3000, "ActualPrice": 990, "Attach": "b"],
         "AppleSubscriptionInfo": ["OriginalTransactionId": otid, "AutoRenewStatus": 1, "RenewalDate": 1_777_818_065_000]]
    }

    static func inquiry(order: String) -> [String: Any] {
        var o: [String: Any] = ["ToUserName": "gh_bench", "FromUserName": "o_official", "CreateTime": 1775300000,
                                "MsgType": "event", "Event": XPayEventName.refundInquiry]
        for (k, v) in [("refund_time", "1775300000"), ("order_time", "1775226066"), ("channel_bill", "5100\(order.utf8.count)"),
                       ("bundleid", "com.tencent.xin"), ("product_id", "vip_monthly"), ("p_count", "1"),
                       ("refund_request_reason", "UNINTENDED_PURCHASE"), ("provide_status", "1"), ("pay_order_id", order),
                       ("service_type", "unipdt"), ("consumption_status", "0")] { o[k] = v }
        return o
    }
}

import Foundation
import HTTPServer
import LedgerCore
import LedgerStore
import WeChatPay

/// WeChat's routes, one registration per group (`makeRouter`): the push webhook (open: its
/// signature authenticates it), the xpay helpers for app backends, and the order views for auditors.
extension LedgerApp {
    func addWeChatWebhookRoutes(to group: inout RouteGroup) {
        group.add("GET", "/v1/wechat/notifications") { [self] request in
            .text(200, try wechat.verifyURL(query: request.query), contentType: "text/plain; charset=utf-8")
        }
        group.add("POST", "/v1/wechat/notifications") { [self] request in
            let reply = try await wechat.handle(query: request.query, body: request.body, remoteAddress: request.remoteAddress)
            return HTTPResponse(status: 200, headers: [("Content-Type", reply.contentType)], body: reply.body)
        }
    }

    func addWeChatAppRoutes(to group: inout RouteGroup) {
        group.add("GET", "/v1/wechat/contracts") { [self] request in
            guard let openId = request.query["openid"], !openId.isEmpty,
                  let productId = request.query["product_id"], !productId.isEmpty else {
                throw ServiceFailure.invalidParameter("give both openid and product_id, e.g. ?openid=o…&product_id=com.example.monthly")
            }
            return .json(200, try await wechat.contract(openId: openId, productId: productId).responseJSON())
        }
        group.add("POST", "/v1/wechat/sign-params") { [self] request in
            let example = #"{"openid": "o…", "productId": "com.example.monthly", "goodsPrice": 600, "sessionKey": "…"}"#
            let body = try request.jsonObject(example: example)
            guard case .string(let openId)? = body["openid"], case .string(let productId)? = body["productId"],
                  case .integer(let price)? = body["goodsPrice"], case .string(let sessionKey)? = body["sessionKey"],
                  let goodsPrice = Int(exactly: price) else {
                throw ServiceFailure.invalidParameter("openid (string), productId (string), goodsPrice (integer fen) and sessionKey (string) are required")
            }
            var intro: Int?
            if let v = body["activitySellingPrice"] {
                guard case .integer(let n) = v, let fen = Int(exactly: n) else {
                    throw ServiceFailure.invalidParameter("activitySellingPrice must be an integer (fen); 0 means a free trial")
                }
                intro = fen
            }
            var attach = ""
            if let v = body["attach"] {
                guard case .string(let s) = v else { throw ServiceFailure.invalidParameter("attach must be a string") }
                attach = s
            }
            let params = try await wechat.signParams(
                AppleSubscribeSignRequest(openid: openId, productId: productId, goodsPrice: goodsPrice,
                                          activitySellingPrice: intro, attach: attach), sessionKey: sessionKey)
            return .json(200, ["signData": .string(params.signData), "paySig": .string(params.paySig), "signature": .string(params.signature)])
        }
    }

    func addWeChatAuditorRoutes(to group: inout RouteGroup) {
        group.add("GET", "/v1/wechat/orphans") { [self] request in
            var hours = 24
            if let text = request.query["olderThanHours"] {
                guard let n = Int(text), (0...24 * 3660).contains(n) else {
                    throw ServiceFailure.invalidParameter("olderThanHours must be a whole number of hours from 0 to 87840 (default 24)")
                }
                hours = n
            }
            var limit = 100
            if let text = request.query["limit"] {
                guard let n = Int(text), (1...1000).contains(n) else {
                    throw ServiceFailure.invalidParameter("limit must be from 1 to 1000 (default 100)")
                }
                limit = n
            }
            let before = Clock.nowMillis() - EpochMillis(hours) * 3_600_000
            let orphans = try await store.wechat.orphans(recordedBefore: before, limit: limit)
            return .json(200, [
                "olderThanHours": .integer(Int64(hours)),
                "orphans": .array(orphans.map { o in
                    [
                        "stream": .string(o.stream), "orderId": .string(o.orderId), "firstRecordedAt": .integer(o.firstRecordedAt),
                        "lastRecordedAt": .integer(o.lastRecordedAt), "events": .integer(Int64(o.events)),
                        "types": .array(o.types.map(JSONValue.string)), "knownIds": .array(o.knownIds.map(JSONValue.string)),
                        "openIds": .array(o.openIds.map(JSONValue.string)),
                    ]
                }),
                "hint": .string("an orphan names an order no delivery or link ties to a subscription: its refunds and inquiries count for nobody; `ledger reconcile --wechat` asks WeChat (query_order) for the order's ids and links what it can"),
            ])
        }
        group.add("GET", "/v1/wechat/orders/{orderId}") { [self] request in
            let id = request.pathParameters["orderId"] ?? ""
            guard !id.isEmpty, id.utf8.count <= 128 else { throw ServiceFailure.invalidParameter("orderId must be 1 to 128 bytes") }
            let (group, facts, events) = try await store.wechat.order(id)
            guard !facts.isEmpty else {
                throw ServiceFailure.notFound("no WeChat fact names the order \(id) (OutTradeNo, WeChatPayInfo ids, WxOrderId or pay_order_id)")
            }
            let factsAt = Dictionary(grouping: facts, by: \.position)
            return .json(200, [
                "orderId": .string(id),
                "ids": .array(group.ids.map(JSONValue.string)),
                "subscriptions": .array(group.subscriptions.map { ["environment": .string($0.environment), "originalTransactionId": .string($0.originalTransactionId)] }),
                "ordinaryPurchase": .bool(facts.contains { $0.kind == .purchase }),
                "streams": .array(group.orderStreams.map { s in
                    ["stream": .string(s), "linked": .bool(group.linkedStreams.contains(s)), "purchase": .bool(group.purchaseStreams.contains(s))]
                }),
                "events": .array(events.map { Representation.event($0, facts: (factsAt[$0.position] ?? []).sorted { $0.ordinal < $1.ordinal }) }),
            ])
        }
    }
}

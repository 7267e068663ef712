import Foundation
import LedgerCore
import Postgres
import XCTest
@testable import LedgerStore

/// The WeChat contract projection (`WeChatContractsProjection`): kept live in the append
/// transaction, caught up after a gap, rebuilt blue/green while appends continue — and every way
/// it holds what `WeChatContractState.of` folds from every stored fact, read through
/// `WeChatQueries.contract` (also while the projection is behind, when the read folds instead).
final class WeChatContractProjectionTests: XCTestCase {
    static let base: EpochMillis = 1_775_000_000_000
    static let day: EpochMillis = 86_400_000
    static let products = ["vip_monthly", "vip_yearly"]

    static func d(_ days: Double) -> EpochMillis { base + EpochMillis(days * Double(day)) }

    /// One push as `XPayNotification.event()` stores it (the decrypted message as JSON).
    static func push(_ event: String, stream: String, key: String, created: Double, _ fields: [String: JSONValue]) -> NewEvent {
        var o: [String: JSONValue] = ["ToUserName": .string("gh_97417a04a28d"), "FromUserName": .string("o_wechat"),
                                      "CreateTime": .integer(d(created) / 1000), "MsgType": .string("event"), "Event": .string(event)]
        for (k, v) in fields { o[k] = v }
        let data = JSONValue.object(o).canonicalJSON()
        return NewEvent(streamId: stream, dedupeKey: key, source: .wechat, type: event, environment: "Production",
                        signedAt: nil, payload: data, raw: data)
    }

    static func signing(_ otid: String, _ openId: String, _ product: String, at: Double, renewal: Double, auto: Int64 = 1) -> NewEvent {
        push(XPayEventName.signingResult, stream: otid, key: "sign:\(otid):\(at)", created: at, [
            "OpenId": .string(openId),
            "AppleSubscriptionInfo": .object(["OriginalTransactionId": .string(otid), "ProductId": .string(product),
                                              "AutoRenewStatus": .integer(auto), "RenewalDate": .integer(d(renewal)), "SignedTime": .integer(d(at))]),
        ])
    }

    static func deliver(_ otid: String, _ openId: String, _ product: String, order: String, paid: Double, renewal: Double) -> NewEvent {
        push(XPayEventName.goodsDeliver, stream: otid, key: "deliver:\(order)", created: paid, [
            "OpenId": .string(openId), "OutTradeNo": .string(order), "Env": .integer(0),
            "GoodsInfo": .object(["ProductId": .string(product), "Quantity": .integer(1), "OrigPrice": .integer(3000), "ActualPrice": .integer(3000)]),
            "WeChatPayInfo": .object(["MchOrderNo": .string("mch-" + order), "TransactionId": .string("tx-" + order), "PaidTime": .integer(d(paid) / 1000)]),
            "AppleSubscriptionInfo": .object(["OriginalTransactionId": .string(otid), "AutoRenewStatus": .integer(1), "RenewalDate": .integer(d(renewal))]),
        ])
    }

    static func unsigning(_ otid: String, _ openId: String, _ product: String, at: Double, renewal: Double) -> NewEvent {
        push(XPayEventName.unsigning, stream: otid, key: "unsign:\(otid):\(at)", created: at, [
            "OpenId": .string(openId), "Action": .string("unsubscribe"),
            "AppleSubscriptionInfo": .object(["OriginalTransactionId": .string(otid), "ProductId": .string(product),
                                              "AutoRenewStatus": .integer(0), "RenewalDate": .integer(d(renewal)), "UnsignedTime": .integer(d(at))]),
        ])
    }

    static func refund(order: String, openId: String, at: Double) -> NewEvent {
        push(XPayEventName.refundNotify, stream: StreamId.wechatOrder(order).text, key: "refund:\(order)", created: at, [
            "OpenId": .string(openId), "WxRefundId": .string("wxrefund-" + order), "MchRefundId": .string(""),
            "WxOrderId": .string("wx-" + order), "MchOrderId": .string(order), "RefundFee": .integer(3000), "RetCode": .integer(0),
            "RetMsg": .string(""), "RefundStartTimestamp": .integer(d(at - 0.5) / 1000), "RefundSuccTimestamp": .integer(d(at) / 1000),
            "RetryTimes": .integer(0),
        ])
    }

    /// Customers with one or two products, monthly renewals, unsignings, a re-signing on a second
    /// subscription after a lapse, refunds (which name only an order), in a shuffled order.
    static func history(customers: Int, seed: UInt64) -> [NewEvent] {
        var state = seed
        func next(_ n: Int) -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int((state >> 33) % UInt64(n))
        }
        var events: [NewEvent] = []
        for c in 0..<customers {
            let openId = "o\(c)"
            for (p, product) in products.enumerated() where p == 0 || next(3) == 0 {
                var otid = String(3_000_000_000 + c * 10 + p)
                var start = Double(next(20))
                for run in 0..<(next(4) == 0 ? 2 : 1) {
                    if run == 1 { otid += "9"; start += 90 }
                    events.append(signing(otid, openId, product, at: start, renewal: start + 30))
                    let periods = 1 + next(4)
                    for k in 0..<periods {
                        let order = "\(otid)-\(k)"
                        events.append(deliver(otid, openId, product, order: order, paid: start + Double(k) * 30, renewal: start + Double(k + 1) * 30))
                        if next(5) == 0 { events.append(refund(order: order, openId: openId, at: start + Double(k) * 30 + 2)) }
                    }
                    if next(2) == 0 { events.append(unsigning(otid, openId, product, at: start + Double(periods) * 30 - 5, renewal: start + Double(periods) * 30)) }
                }
            }
        }
        for i in stride(from: events.count - 1, to: 0, by: -1) { events.swapAt(i, next(i + 1)) }
        return events
    }

    func testLiveEqualsCatchUpAfterAGapEqualsRebuildEqualsTheFold() async throws {
        let database = try ProjectionScratchDatabase()
        defer { database.drop() }
        let db = database.store(poolSize: 4)
        let pool = db.pool
        defer { pool.close() }
        let projector = Projector(catalog: .productIds)
        let hooks: [any AppendHook] = [LiveProjectionHook(projector: projector), LiveProjectionHook(WeChatContractsProjection(catalogPeriods: projector.catalogPeriods), folder: SharedFold(catalogPeriods: projector.catalogPeriods))]
        let live = EventStore(pool: pool, hooks: hooks)
        let events = Self.history(customers: 30, seed: 7)
        let quarter = events.count / 4
        let queries = WeChatQueries(pool: pool)

        func rows() throws -> [String] {
            try database.adminQuery("SELECT c::text AS row FROM projections.wechat_contracts c ORDER BY 1").rows.map { try $0.decode(String.self, "row") }
                + database.adminQuery("SELECT p::text AS row FROM projections.wechat_contract_parties p ORDER BY 1").rows.map { try $0.decode(String.self, "row") }
        }
        func checkpoint() throws -> Int64 {
            try database.adminQuery("SELECT position FROM projection_checkpoints WHERE projection = 'wechat_contracts'").first!.decode(Int64.self, "position")
        }
        /// Every contract (and one nobody signed) as the projection answers and as the fold of every stored fact says.
        func check(_ label: String, file: StaticString = #filePath, line: UInt = #line) async throws {
            let facts = try await ProjectionFixture.decodedFacts(live)
            for c in 0..<31 {
                for product in Self.products {
                    let expected = WeChatContractState.of(openId: "o\(c)", productId: product, facts: facts)
                    let answered = try await queries.contract(openId: "o\(c)", productId: product)
                    XCTAssertEqual(answered, expected, "\(label): o\(c) \(product)", file: file, line: line)
                }
            }
        }

        // Live: in the append transaction.
        try await ProjectionFixture.append(Array(events[..<quarter]), to: live, chunk: 7)
        let head1 = try await live.headPosition()
        XCTAssertEqual(try checkpoint(), head1)
        XCTAssertGreaterThan(try database.adminQuery("SELECT count(*)::bigint AS n FROM projections.wechat_contracts").first!.decode(Int64.self, "n"), 5)
        try await check("live")
        let states = Set(try database.adminQuery("SELECT authorization_state FROM projections.wechat_contracts").rows.map { try $0.decode(String.self, "authorization_state") })
        XCTAssertEqual(states, ["SIGNED", "TERMINATED"], "the history must hold both")

        // A gap (appends without the hook), then live appends the hook must leave to the catch-up.
        try await ProjectionFixture.append(Array(events[quarter..<(2 * quarter)]), to: EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)]), chunk: 5)
        let behind = try checkpoint()
        try await ProjectionFixture.append(Array(events[(2 * quarter)..<(3 * quarter)]), to: live, chunk: 9)
        XCTAssertEqual(try checkpoint(), behind, "behind: the hook does not skip ahead")
        try await check("behind (the read folds)")
        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 11, projections: [.wechatContracts])
        _ = try await worker.catchUp()
        let head2 = try await live.headPosition()
        XCTAssertEqual(try checkpoint(), head2)
        try await check("caught up")

        // Rebuilt from position 0 while the last quarter is appended between the bulk pass and the swap.
        var rebuilder = db.rebuilder(projector: projector)
        let late = Array(events[(3 * quarter)...])
        rebuilder.beforeSwap = {
            let done = DispatchSemaphore(value: 0)
            Task {
                try? await ProjectionFixture.append(late, to: live, chunk: 4)
                done.signal()
            }
            done.wait()
        }
        try database.adminScript("UPDATE projections.wechat_contracts SET body = '{}', authorization_state = 'bogus'")
        let report = try await rebuilder.run(projections: [.wechatContracts])
        XCTAssertEqual(report.projections, [.wechatContracts])
        XCTAssertLessThan(report.snapshotHead, report.swapHead, "the late quarter was appended between the bulk pass and the swap")
        let head3 = try await live.headPosition()
        XCTAssertEqual(try checkpoint(), head3)
        try await check("rebuilt")

        let resigned = try database.adminQuery(
            "SELECT count(*)::bigint AS n FROM (SELECT 1 FROM projections.wechat_contract_parties GROUP BY open_id, product_id HAVING count(*) > 1) x")
        XCTAssertGreaterThan(try resigned.first!.decode(Int64.self, "n"), 0, "some contract must have two candidate subscriptions")

        // The rebuilt tables equal a catch-up of the whole log from scratch.
        let rebuilt = try rows()
        try database.adminScript("""
            DELETE FROM projections.wechat_contracts; DELETE FROM projections.wechat_contract_parties;
            UPDATE projection_checkpoints SET position = 0 WHERE projection = 'wechat_contracts';
            """)
        _ = try await worker.catchUp()
        XCTAssertEqual(try rows(), rebuilt, "catch-up from 0 == rebuild")
        let leftovers = try database.adminQuery("SELECT count(*)::bigint AS n FROM pg_tables WHERE schemaname = 'projections' AND (tablename LIKE '%\\_next' OR tablename LIKE '%\\_retired')")
        XCTAssertEqual(try leftovers.first?.decode(Int64.self, "n"), 0)
    }
}

import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Postgres
import WeChatPay
import XCTest

/// The refund inquiry's deadline with a deliberately stalled database: an administrator's
/// transaction holds a lock that the decision's read needs (the customer's subscriptions) but the
/// append does not — the configured fallback is stored and answered within WeChat's 3 s; and a lock
/// the append needs too (the facts table) — nothing unstored is sent: 503, and the asking asked
/// again gets the answer that was stored late.
final class WeChatRefundDeadlineTests: XCTestCase {
    let side = WeChatSide()
    static let day: EpochMillis = 86_400_000

    func paidSubscription(_ h: ServiceHarness, otid: String, openId: String, order: String) async throws -> EpochMillis {
        let now = WeChatSide.nowSeconds() * 1000
        try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: "vip_monthly", signed: now - Self.day, renewal: now + 29 * Self.day))
        try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: "vip_monthly", order: order, paid: now - Self.day,
                                                  create: now - Self.day, renewal: now + 29 * Self.day))
        return now
    }

    func testAStalledDecisionReadIsAnsweredWithTheStoredFallbackWithinThreeSeconds() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let now = try await paidSubscription(h, otid: "7700000000000001", openId: "oSlow1", order: "SLOW-1")
            try h.admin.query("BEGIN", name: "BEGIN")
            try h.admin.query("LOCK TABLE projections.customer_subscriptions IN ACCESS EXCLUSIVE MODE", name: "stall the decision's read")
            let asking = WeChatSide.inquiry(order: "SLOW-1", asked: now, orderTime: now - Self.day, product: "vip_monthly")
            let started = ContinuousClock.now
            let answer = try await side.post(h, asking, .jsonSecure)
            let elapsed = ContinuousClock.now - started
            try h.admin.query("ROLLBACK", name: "release")
            XCTAssertEqual(answer.status, 200, answer.text)
            XCTAssertLessThan(elapsed, .seconds(3), "answered within WeChat's 3 s")
            XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(2_400), "the budget was waited for (2.5 s)")
            let reply = try side.reply(answer, .jsonSecure)
            XCTAssertEqual(reply["result_code"], "0", "the configured fallback: allow")
            let evidence = try JSONValue(json: Data((reply["evidence"] ?? "").utf8))
            XCTAssertEqual(evidence.text("rule"), "deadline")
            XCTAssertEqual(evidence["fallback"]?.int64("budget_ms"), 2_500)
            // Stored before it was sent: the answer event, with the time it took and the reply's plaintext.
            let stored = try h.admin.query("SELECT payload, raw FROM events WHERE type = $1", [.text(XPayEventName.refundInquiryAnswer)],
                                           name: "answer").first
            let payload = try JSONValue(json: try XCTUnwrap(stored).decode(Data.self, "payload"))
            XCTAssertEqual(payload.text("rule"), "deadline")
            let decided = try XCTUnwrap(payload.int64("decidedInMs"))
            XCTAssertGreaterThanOrEqual(decided, 2_490)
            XCTAssertLessThan(decided, 2_900)
            XCTAssertEqual(try JSONValue(json: try stored!.decode(Data.self, "raw")).text("evidence"), reply["evidence"])
            let metrics = try await h.metricsText()
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_refund_fallbacks_total", "reason=\"deadline\""), 1, metrics)
            // With the database free again, the same asking re-pushed gets the stored fallback word
            // for word, and a new asking is decided from the facts.
            let again = try await side.push(h, asking, .jsonSecure)
            XCTAssertEqual(again["evidence"], reply["evidence"])
            let later = try await side.push(h, WeChatSide.inquiry(order: "SLOW-1", asked: now + 60_000, orderTime: now - Self.day,
                                                                  product: "vip_monthly"), .jsonSecure)
            XCTAssertEqual(try JSONValue(json: Data((later["evidence"] ?? "").utf8)).text("rule"), "short_use")
        }
    }

    /// A shorter budget and a refusing fallback, configured.
    func testTheBudgetAndTheFallbackAreConfigurable() async throws {
        var env = WeChatSide.environment
        env["LEDGER_WECHAT_REFUND_BUDGET_MS"] = "600"
        env["LEDGER_WECHAT_REFUND_FALLBACK"] = "refuse"
        try await withService(environment: env) { h in
            let now = try await paidSubscription(h, otid: "7700000000000002", openId: "oSlow2", order: "SLOW-2")
            try h.admin.query("BEGIN", name: "BEGIN")
            try h.admin.query("LOCK TABLE projections.customer_subscriptions IN ACCESS EXCLUSIVE MODE", name: "stall")
            let started = ContinuousClock.now
            let answer = try await side.post(h, WeChatSide.inquiry(order: "SLOW-2", asked: now, orderTime: now, product: "vip_monthly"), .xmlPlain)
            let elapsed = ContinuousClock.now - started
            try h.admin.query("ROLLBACK", name: "release")
            XCTAssertEqual(answer.status, 200, answer.text)
            XCTAssertLessThan(elapsed, .milliseconds(1_500))
            let reply = try side.reply(answer, .xmlPlain)
            XCTAssertEqual(reply["result_code"], "1", "refuse, as configured")
            XCTAssertTrue(reply["result_info"]?.contains("600 ms") ?? false, reply["result_info"] ?? "")
        }
        for (name, value) in [("LEDGER_WECHAT_REFUND_BUDGET_MS", "9001"), ("LEDGER_WECHAT_REFUND_FALLBACK", "maybe")] {
            var bad = WeChatSide.environment
            bad[name] = value
            bad["LEDGER_DATABASE_URL"] = "host=/nonexistent dbname=x"
            XCTAssertThrowsError(try LedgerConfiguration.load(environment: bad), name) { error in
                XCTAssertTrue("\(error)".contains(name), "\(error)")
            }
        }
    }

    /// When even the fallback cannot be stored before WeChat stops waiting, nothing is sent: 503,
    /// and WeChat's next asking of the same refund gets the answer stored meanwhile.
    func testWhenEvenTheFallbackCannotBeStoredTheAnswerIs503() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let now = try await paidSubscription(h, otid: "7700000000000003", openId: "oSlow3", order: "SLOW-3")
            let asking = WeChatSide.inquiry(order: "SLOW-3", asked: now, orderTime: now - Self.day, product: "vip_monthly")
            try h.admin.query("BEGIN", name: "BEGIN")
            try h.admin.query("LOCK TABLE public.facts IN ACCESS EXCLUSIVE MODE", name: "stall the read and the append")
            let started = ContinuousClock.now
            let answer = try await side.post(h, asking, .jsonSecure)
            let elapsed = ContinuousClock.now - started
            try h.admin.query("ROLLBACK", name: "release")
            XCTAssertEqual(answer.status, 503, answer.text)
            XCTAssertEqual(answer.errorCode, "refund_answer_not_stored")
            XCTAssertLessThan(elapsed, .milliseconds(3_300))
            XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(2_800), "the answer deadline (2.9 s) was waited for")
            // WeChat asks again: the answer that was stored late (the fallback), word for word.
            var reply: [String: String] = [:]
            for _ in 0..<3 {
                reply = try await side.push(h, asking, .jsonSecure)
                if !reply.isEmpty { break }
            }
            XCTAssertEqual(try JSONValue(json: Data((reply["evidence"] ?? "").utf8)).text("rule"), "deadline")
            let answers = try h.admin.query("SELECT count(*) AS n FROM events WHERE type = $1", [.text(XPayEventName.refundInquiryAnswer)],
                                            name: "answers").first!.decode(Int64.self, "n")
            XCTAssertEqual(answers, 1, "one answer for the asking")
            let metrics = try await h.metricsText()
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_refund_answers_not_stored_total"), 1)
        }
    }
}

import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// Issue 22 item 7c: a plaintext push's nonce is marked in the same transaction as the push it
/// admits. Marked after the commit (fire-and-forget), a mark that failed left a stored push whose
/// nonce another body could claim once the 30 s grace passed.
final class WeChatNonceTests: XCTestCase {
    let side = WeChatSide()

    func delivery(_ order: String, price: Int64 = 3000) -> JSONValue {
        let now = WeChatSide.nowSeconds() * 1000
        return WeChatSide.deliver(otid: "7900000000000001", openId: "oNonce", product: "vip_monthly", order: order, paid: now - 1000,
                                  create: now, renewal: now + 30 * 86_400_000, price: price)
    }

    func nonceRow(_ h: ServiceHarness, _ nonce: String) throws -> Int64? {
        try h.admin.query("SELECT stored_position FROM wechat_push_nonces WHERE nonce = $1", [.text(nonce)], name: "nonce")
            .first?.decode(Int64?.self, "stored_position")
    }

    func testTheNonceAndThePushCommitTogether() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            // Any write of a nonce's mark fails while this trigger is there.
            try h.admin.execute(script: """
                CREATE FUNCTION refuse_nonce_marks() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'nonce marks refused by the test'; END $$;
                CREATE TRIGGER refuse_nonce_marks BEFORE UPDATE ON wechat_push_nonces FOR EACH ROW EXECUTE FUNCTION refuse_nonce_marks();
                """, name: "refuse nonce marks")
            let nonce = "n-" + UUID().uuidString
            let now = WeChatSide.nowSeconds()
            let (path, body) = try side.request(delivery("NONCE-TX-1"), .xmlPlain, nonce: nonce, timestamp: now)
            let refused = try await h.post(path, body)
            XCTAssertGreaterThanOrEqual(refused.status, 500, "no 200 for a push whose nonce could not be marked: \(refused.text)")
            XCTAssertEqual(try h.eventCount(), 0, "the push is not stored without its nonce's mark")

            // WeChat retries; the marks work again: the push and its mark commit together.
            try h.admin.execute(script: "DROP TRIGGER refuse_nonce_marks ON wechat_push_nonces", name: "allow")
            let stored = try await h.post(path, body)
            XCTAssertEqual(stored.status, 200, stored.text)
            let position = try h.admin.query("SELECT max(position) AS p FROM events WHERE stream_id <> ''", name: "last").first?.decode(Int64?.self, "p")
            XCTAssertNotNil(position)
            XCTAssertEqual(try nonceRow(h, nonce), position, "marked with the event's position")

            // Long after the grace a held but unmarked nonce would have had, another body is still refused.
            try h.admin.query("UPDATE wechat_push_nonces SET seen_at = now() - interval '120 seconds' WHERE nonce = $1", [.text(nonce)])
            let (_, forged) = try side.request(delivery("NONCE-TX-1", price: 1), .xmlPlain, nonce: nonce, timestamp: now)
            let replay = try await h.post(path, forged)
            XCTAssertEqual(replay.status, 401, replay.text)
            XCTAssertEqual(replay.errorCode, "nonce_reused")
            XCTAssertEqual(try h.eventCount(), 1)
        }
    }

    /// A re-push under a new nonce is a duplicate of the stored push: its nonce is marked before the 200.
    func testADuplicateUnderANewNonceMarksItBeforeTheAnswer() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let now = WeChatSide.nowSeconds()
            let first = "n-" + UUID().uuidString, second = "n-" + UUID().uuidString
            let (path1, body) = try side.request(delivery("NONCE-DUP-1"), .xmlPlain, nonce: first, timestamp: now)
            let stored = try await h.post(path1, body)
            XCTAssertEqual(stored.status, 200, stored.text)
            let events = try h.eventCount()
            let (path2, _) = try side.request(delivery("NONCE-DUP-1"), .xmlPlain, nonce: second, timestamp: now)
            let again = try await h.post(path2, body)
            XCTAssertEqual(again.status, 200, again.text)
            XCTAssertEqual(try h.eventCount(), events, "a duplicate")
            XCTAssertNotNil(try nonceRow(h, first))
            XCTAssertEqual(try nonceRow(h, second), try nonceRow(h, first), "the duplicate's nonce is marked with the stored push's position")
        }
    }
}

import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import XCTest

/// Issue 22 item 9b: `GET /v1/subscriptions/{id}/events` is paged by cursor (a long history with its
/// raw evidence is never one answer), and the auditor's timeline folds the history once.
final class EventsPagingTests: XCTestCase {
    func testTheEventsAPIIsPagedByCursor() async throws {
        try await withService { h in
            let otid = "8100000000000001"
            let base: EpochMillis = 1_767_225_600_000
            var bodies: Set<String> = []
            for i in 0..<7 {
                var s = AppleTestAuthority.sample(type: i == 0 ? "SUBSCRIBED" : "DID_RENEW", subtype: i == 0 ? "INITIAL_BUY" : nil,
                                                  originalTransactionId: otid, transactionId: String(8_100_000_000_000_100 + i),
                                                  signedDate: base + EpochMillis(i) * 86_400_000 * 30,
                                                  expiresDate: base + EpochMillis(i + 1) * 86_400_000 * 30)
                s.transaction.purchaseDate = AppleTime(base + EpochMillis(i) * 86_400_000 * 30)
                let body = try h.authority.signSample(s)
                bodies.insert(String(decoding: body, as: UTF8.self))
                let a = try await h.post("/v1/apple/notifications", body)
                XCTAssertEqual(a.status, 200, a.text)
            }
            // A Production event of the same id (the stream is shared; Sandbox is asked).
            let prod = try await h.post("/v1/apple/notifications", try h.authority.signSample(
                AppleTestAuthority.sample(environment: "Production", originalTransactionId: otid, transactionId: "8100000000000999")))
            XCTAssertEqual(prod.status, 200, prod.text)

            var seen: [String] = []
            var positions: [Int] = []
            var cursor: String?
            var pages = 0
            repeat {
                let path = "/v1/subscriptions/\(otid)/events?environment=Sandbox&limit=3" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try await h.request("GET", path, token: ServiceHarness.auditorToken)
                XCTAssertEqual(page.status, 200, page.text)
                let events = page.json["events"] as? [[String: Any]] ?? []
                XCTAssertLessThanOrEqual(events.count, 3)
                seen += events.compactMap { $0["raw"] as? String }
                positions += events.compactMap { $0["position"] as? Int }
                XCTAssertTrue(page.json.keys.contains("next"), "next is always present (null on the last page)")
                cursor = page.json["next"] as? String
                pages += 1
            } while cursor != nil && pages < 10
            XCTAssertEqual(Set(seen), bodies, "every Sandbox event exactly once across the pages")
            XCTAssertEqual(seen.count, 7)
            XCTAssertEqual(positions, positions.sorted(), "in position order")
            XCTAssertGreaterThanOrEqual(pages, 3)

            // The default page, and the refusals.
            let all = try await h.request("GET", "/v1/subscriptions/\(otid)/events?environment=Sandbox", token: ServiceHarness.auditorToken)
            XCTAssertEqual((all.json["events"] as? [Any])?.count, 7)
            XCTAssertTrue(all.json["next"] is NSNull, all.text)
            for bad in ["limit=0", "limit=1001", "limit=x", "cursor=-1", "cursor=abc"] {
                let a = try await h.request("GET", "/v1/subscriptions/\(otid)/events?\(bad)", token: ServiceHarness.auditorToken)
                XCTAssertEqual(a.status, 400, "\(bad): \(a.text)")
                XCTAssertEqual(a.errorCode, "invalid_parameter")
            }
            let none = try await h.request("GET", "/v1/subscriptions/8100000000000002/events", token: ServiceHarness.auditorToken)
            XCTAssertEqual(none.status, 404)
        }
    }
}

import AppStore
import Crypto
import Foundation
import LedgerCore
import LedgerStore
@testable import LedgerService
import LedgerTesting
import XCTest

/// Disabling an endpoint gives up its pending events at once — each an `outbox/exhausted` ledger
/// event saying why — instead of leaving them to find out at their next attempt (up to a day
/// away); once enabled again, a replay of the exhausted events requeues them with their ids.
extension WebhookDeliveryTests {
    func testDisablingAnEndpointGivesUpItsPendingEventsAtOnceAndAReplayRequeuesThem() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: { c in
            Self.configure(&c)
            // After a failure an item waits an hour: only disabling can settle it in this test.
            c.webhooks.schedule = RetrySchedule(delays: [3_600_000, 3_600_000], jitter: 0)
        }) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            receiver.behave(.fail(status: 500, retryAfter: nil), until: Date().addingTimeInterval(3600))
            try await post(h, try lifecycle(h.authority))
            func count(_ sql: String) -> Int64 {
                (try? h.admin.query(sql, name: "count").first?.decode(Int64.self, "n")) ?? -1
            }
            let attempted = "SELECT count(*) AS n FROM outbox_items WHERE consumer = 'webhooks' AND attempts > 0"
            try await deliver([h.app], h, timeout: .seconds(15), until: { count(attempted) >= 2 })
            XCTAssertEqual(count(attempted), 2, "each subscription's first event failed once and waits an hour")
            let waiting = try pending(h)
            XCTAssertGreaterThan(waiting, 2)

            let disabled = try await h.request("POST", "/v1/admin/webhooks/endpoints/backend/disable",
                                               body: Data(#"{"reason": "receiver moving"}"#.utf8), token: Self.admin)
            XCTAssertEqual(disabled.status, 200, disabled.text)
            XCTAssertEqual(try pending(h), 0, "given up at once, not at their next attempt an hour away")
            XCTAssertEqual(count("SELECT count(*) AS n FROM outbox_items WHERE consumer = 'webhooks' AND status = 'exhausted'"), waiting)
            let reasons = try h.admin.query("""
                SELECT payload->>'error' AS error FROM events WHERE type = 'outbox/exhausted' ORDER BY position
                """, name: "exhausted events").rows.map { try $0.decode(String.self, "error") }
            XCTAssertEqual(reasons.count, Int(waiting), "one ledger event per event given up")
            XCTAssertTrue(reasons.allSatisfy { $0.contains("endpoint backend was disabled (receiver moving)") }, "\(reasons)")
            // Disabling again finds nothing left to give up.
            let again = try await h.request("POST", "/v1/admin/webhooks/endpoints/backend/disable", token: Self.admin)
            XCTAssertEqual(again.status, 200, again.text)
            XCTAssertEqual(count("SELECT count(*) AS n FROM events WHERE type = 'outbox/exhausted'"), waiting)

            let enabled = try await h.request("POST", "/v1/admin/webhooks/endpoints/backend/enable", token: Self.admin)
            XCTAssertEqual(enabled.status, 200, enabled.text)
            receiver.behave(.accept)
            let replay = try await h.request("POST", "/v1/admin/webhooks/replay", body: Data(#"{"exhausted": true, "endpoint": "backend"}"#.utf8),
                                             token: Self.admin)
            XCTAssertEqual(replay.status, 200, replay.text)
            XCTAssertEqual(replay.json["replayed"] as? Int, Int(waiting))
            try await deliver([h.app], h)
            XCTAssertEqual(try pending(h), 0)
            for otid in [Self.subA, Self.subB] {
                XCTAssertEqual(delivered(receiver, otid).map(\.id), try stored(h, otid).map(\.id), "every event, with its own id, in order")
            }
        }
    }
}

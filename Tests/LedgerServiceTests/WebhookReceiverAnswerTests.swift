import Crypto
import Foundation
import LedgerCore
import LedgerStore
@testable import LedgerService
import LedgerTesting
import XCTest

/// A receiver cannot wedge or stall its deliveries (through HTTP on real PostgreSQL, a loopback
/// receiver). (An extension of `WebhookDeliveryTests`, whose helpers it uses.)
extension WebhookDeliveryTests {
    /// The receiver answers 500 twice with a NUL byte and a terminal escape in its body and asks to
    /// be retried in three years. PostgreSQL refuses NUL in text and jsonb: the attempt used to go
    /// unrecorded and the event was re-sent every lease for ever, holding up the subscription's
    /// later events; and the Retry-After parked it for years. Now each attempt is recorded with the
    /// answer made storable (U+FFFD for each control), the Retry-After is capped by what is left
    /// of the schedule, and the event is delivered on the third attempt.
    func testAReceiverAnsweringNulAndAYearsRetryAfterCannotWedgeItsDeliveries() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            receiver.behave(.fail(status: 500, retryAfter: 99_999_999, body: "no\u{0}pe\u{1B}[2J"), count: 2)
            try await post(h, Array(try lifecycle(h.authority).prefix(1)))
            try await deliver([h.app], h, timeout: .seconds(20))
            XCTAssertEqual(try pending(h), 0, "delivered, not parked or re-sent for ever")
            XCTAssertEqual(receiver.deliveries.filter { $0.status == 500 }.count, 2, "the first event failed twice, then went")
            XCTAssertTrue(receiver.deliveries.filter { $0.status == 204 }.count >= 2, "every event delivered")
            let attempts = try h.admin.query(
                "SELECT excerpt FROM webhooks.attempts WHERE outcome = 'failed' AND status = 500 ORDER BY at", name: "failed attempts").rows
                .map { try $0.decode(String?.self, "excerpt") ?? "" }
            XCTAssertEqual(attempts.count, 2, "every failed attempt recorded")
            XCTAssertTrue(attempts.allSatisfy { $0 == "no\u{FFFD}pe\u{FFFD}[2J" }, "\(attempts)")
            let recorded = try h.admin.query(
                "SELECT count(*) AS n FROM events WHERE type = $1 AND payload::jsonb->>'error' LIKE '%' || chr(65533) || '%'",
                [.text(LedgerEventType.outboxAttemptFailed)], name: "outbox failures").first!.decode(Int64.self, "n")
            XCTAssertEqual(recorded, 2, "the ledger's own record of each failure holds the storable answer")
            try verifyWithReferenceLibrary(receiver, secret: secret)
        }
    }

    /// An endpoint whose secret cannot sign (a damaged row) is never sent an unsigned delivery:
    /// the item gives up at once with how to fix it, and the receiver sees nothing.
    func testADeliveryIsNeverSentUnsigned() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            _ = try h.admin.query("UPDATE webhooks.endpoints SET secret = 'not-a-secret' WHERE name = 'backend' RETURNING 1 AS one",
                                  name: "damage the secret")
            try await post(h, Array(try lifecycle(h.authority).prefix(1)))
            try await deliver([h.app], h, timeout: .seconds(10))
            XCTAssertEqual(try pending(h), 0)
            XCTAssertEqual(receiver.deliveries.count, 0, "nothing sent unsigned")
            let errors = try h.admin.query(
                "SELECT payload::jsonb->>'error' AS e FROM events WHERE type = $1", [.text(LedgerEventType.outboxExhausted)],
                name: "exhausted").rows.map { try $0.decode(String?.self, "e") ?? "" }
            XCTAssertFalse(errors.isEmpty)
            XCTAssertTrue(errors.allSatisfy { $0.contains("no usable signing secret") }, "\(errors)")
        }
    }
}

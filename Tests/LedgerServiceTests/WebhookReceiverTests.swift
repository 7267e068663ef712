import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LedgerTesting
import XCTest

/// The test receiver (`ledger-dev webhook-receiver`) over a real socket: it verifies, refuses a
/// forgery, and fails or stalls as told.
final class WebhookReceiverTests: XCTestCase {
    func post(_ url: String, body: Data, headers: [(String, String)], timeout: TimeInterval = 10) async throws -> Int {
        var r = URLRequest(url: URL(string: url)!)
        r.httpMethod = "POST"
        r.httpBody = body
        r.timeoutInterval = timeout
        for (k, v) in headers { r.setValue(v, forHTTPHeaderField: k) }
        let (_, response) = try await URLSession.shared.data(for: r)
        return (response as! HTTPURLResponse).statusCode
    }

    func testItVerifiesRefusesForgeriesAndFailsAsTold() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        let body = Data(#"{"data":{},"id":"evt_1","timestamp":"2026-01-01T00:00:00.000Z","type":"subscription.started"}"#.utf8)
        let now = Int64(Date().timeIntervalSince1970)
        let signed = StandardWebhooks.headers(id: "evt_1", timestamp: now, body: body, secrets: [secret])

        var status = try await post(receiver.url, body: body, headers: signed)
        XCTAssertEqual(status, 204)
        let forged = StandardWebhooks.headers(id: "evt_1", timestamp: now, body: body, secrets: [WebhookSecret.generate()])
        status = try await post(receiver.url, body: body, headers: forged)
        XCTAssertEqual(status, 401)
        status = try await post(receiver.url, body: body, headers: [])
        XCTAssertEqual(status, 401)

        receiver.behave(.fail(status: 500, retryAfter: 7), count: 2)
        let first = try await post(receiver.url, body: body, headers: signed)
        let second = try await post(receiver.url, body: body, headers: signed)
        let third = try await post(receiver.url, body: body, headers: signed)
        XCTAssertEqual([first, second, third], [500, 500, 204], "fails the next two, then accepts again")

        receiver.behave(.stall(seconds: 2))
        do {
            _ = try await post(receiver.url, body: body, headers: signed, timeout: 0.5)
            XCTFail("a stalled answer should outlast a 0.5 s timeout")
        } catch {}
        receiver.behave(.accept)

        let deliveries = receiver.deliveries
        XCTAssertEqual(deliveries.filter { !$0.verified }.count, 2)
        XCTAssertEqual(deliveries.first?.type, "subscription.started")
        XCTAssertEqual(receiver.uniqueVerifiedIds, ["evt_1"], "a receiver dedupes by webhook-id")
    }
}

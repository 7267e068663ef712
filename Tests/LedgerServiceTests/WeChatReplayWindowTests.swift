import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// The replay window. Plaintext mode's signature covers the token, timestamp and nonce — not the
/// body — so a captured query string would authorise any body: a timestamp outside ±300 s is
/// refused, and a nonce carries one body only, remembered in the database so every instance
/// refuses the replay; the same body again is a duplicate. In secure mode the signature covers the
/// body: a stale timestamp is stored and counted, never refused.
final class WeChatReplayWindowTests: XCTestCase {
    let side = WeChatSide()
    static let day: EpochMillis = 86_400_000

    func delivery(_ order: String, price: Int64 = 3000) -> JSONValue {
        let now = WeChatSide.nowSeconds() * 1000
        return WeChatSide.deliver(otid: "7800000000000001", openId: "oReplay", product: "vip_monthly", order: order, paid: now - 1000,
                                  create: now, renewal: now + 30 * Self.day, price: price)
    }

    func testPlaintextTimestampsOutsideTheWindowAreRefused() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            // Each timestamp is taken from the clock right before its request, and the skews stay
            // 30 s clear of the ±300 s edge: a loaded CI machine once took over a second between a
            // shared `now` and the service's own clock, and a +301 s skew arrived as +300 s.
            for (skew, status) in [(-330, 401), (330, 401), (-3600, 401), (-270, 200), (270, 200)] {
                let before = try h.eventCount()
                let a = try await side.post(h, delivery("TS\(skew + 10_000)"), .xmlPlain, timestamp: WeChatSide.nowSeconds() + Int64(skew))
                XCTAssertEqual(a.status, status, "skew \(skew): \(a.text)")
                if status == 401 {
                    XCTAssertEqual(a.errorCode, "stale_timestamp")
                    XCTAssertTrue(a.text.contains("±300 s"), a.text)
                    XCTAssertEqual(try h.eventCount(), before, "nothing stored")
                }
            }
            // A narrower window, configured.
        }
        var env = WeChatSide.environment
        env["LEDGER_WECHAT_REPLAY_WINDOW_SECONDS"] = "60"
        try await withService(environment: env) { h in
            let a = try await side.post(h, delivery("TS-NARROW"), .xmlPlain, timestamp: WeChatSide.nowSeconds() - 90)
            XCTAssertEqual(a.status, 401, a.text)
        }
    }

    /// A nonce seen with another body is refused by every instance on the same database; the same
    /// body again is a duplicate (200, nothing new).
    func testANonceCarriesOneBodyAcrossTwoInstances() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            // A second service instance on the same database.
            var env = WeChatSide.environment
            env["LEDGER_DATABASE_URL"] = h.database.serviceConninfo
            env["LEDGER_LISTEN"] = "127.0.0.1:0"
            env["LEDGER_TOKENS"] = ServiceHarness.tokens
            let second = try LedgerApp(configuration: try LedgerConfiguration.load(environment: env), log: Log(minimum: .error))
            let server = HTTPServer(configuration: second.httpConfiguration(), router: second.makeRouter())
            try server.start()
            defer { second.shutdown() }
            let secondURL = URL(string: "http://127.0.0.1:\(server.port!)")!
            func postSecond(_ path: String, _ body: Data) async throws -> (Int, String) {
                var r = URLRequest(url: URL(string: path, relativeTo: secondURL)!)
                r.httpMethod = "POST"
                r.httpBody = body
                let (data, response) = try await URLSession.shared.data(for: r)
                return ((response as! HTTPURLResponse).statusCode, String(decoding: data, as: UTF8.self))
            }

            let nonce = "n-" + UUID().uuidString
            let now = WeChatSide.nowSeconds()
            let (path, body) = try side.request(delivery("NONCE-1"), .xmlPlain, nonce: nonce, timestamp: now)
            let first = try await h.post(path, body)
            XCTAssertEqual(first.status, 200, first.text)
            let stored = try h.eventCount()
            // The captured query string with another body, on the other instance: refused.
            let (_, forged) = try side.request(delivery("NONCE-1", price: 1), .xmlPlain, nonce: nonce, timestamp: now)
            let replay = try await postSecond(path, forged)
            XCTAssertEqual(replay.0, 401, replay.1)
            XCTAssertTrue(replay.1.contains("nonce_reused"), replay.1)
            let replayHere = try await h.post(path, forged)
            XCTAssertEqual(replayHere.status, 401)
            XCTAssertEqual(try h.eventCount(), stored, "nothing stored")
            // The same body again (a re-push through either instance): a duplicate.
            let again = try await postSecond(path, body)
            XCTAssertEqual(again.0, 200, again.1)
            XCTAssertEqual(try h.eventCount(), stored)
            XCTAssertEqual(try h.admin.query("SELECT stored_position IS NOT NULL AS stored FROM wechat_push_nonces WHERE nonce = $1",
                                             [.text(nonce)], name: "nonce").first?.decode(Bool.self, "stored"), true)
            await server.shutdown(gracePeriod: .seconds(1))
        }
    }

    /// Secure mode: `msg_signature` covers the body, and storage is idempotent — a push signed
    /// days ago (a late re-push) is stored and only counted.
    func testSecureModeStaleTimestampsAreStoredAndCounted() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let a = try await side.post(h, delivery("STALE-1"), .jsonSecure, timestamp: WeChatSide.nowSeconds() - 10 * 86_400)
            XCTAssertEqual(a.status, 200, a.text)
            XCTAssertEqual(try h.events(stream: "7800000000000001").count, 1)
            // The same nonce with another body is not a replay in secure mode: the signature covers it.
            let metrics = try await h.metricsText()
            XCTAssertEqual(metricValue(metrics, "ledger_wechat_stale_timestamps_total", "mode=\"secure\""), 1, metrics)
        }
    }
}

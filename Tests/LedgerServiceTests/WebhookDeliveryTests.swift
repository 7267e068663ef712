import AppStore
import Crypto
import Foundation
import LedgerCore
import LedgerStore
@testable import LedgerService
import LedgerTesting
import XCTest

/// Outbound webhooks end to end (issue 21): notifications posted through HTTP on a real database,
/// events derived from the committed facts, delivered by the outbox worker through the one
/// outbound client to a loopback `WebhookReceiver`, every delivery verified by the Standard
/// Webhooks reference library (PyPI `standardwebhooks`, unchanged, in the .venv that
/// scripts/webhooks-venv.sh prepares). Time is compressed through the consumer's schedule.
final class WebhookDeliveryTests: XCTestCase {
    let day: Int64 = 86_400_000
    var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
    static let admin = ServiceHarness.adminToken
    static let catalog = #"{"products": {"com.example.monthly": {"entitlements": ["premium"]}}}"#
    static let env = ["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]
    /// Svix's schedule in milliseconds instead of minutes: 50 ms … 3.2 s, about 6.3 s in all.
    static let compressed = RetrySchedule(delays: [50, 100, 200, 400, 800, 1600, 3200], jitter: 0.1)

    static func configure(_ c: inout LedgerConfiguration) {
        c.webhooks.schedule = compressed
        c.webhooks.pollIntervalMillis = 20
    }

    // MARK: the lifecycle

    static let subA = "1000000000005001", subB = "1000000000006001"

    /// Two subscriptions: A starts, renews, turns auto-renew off and lapses (time alone expires
    /// it); B starts and is refunded.
    func lifecycle(_ a: AppleTestAuthority) throws -> [(path: String, body: Data)] {
        let t0 = now - 100 * day, t1 = now - 20 * day
        func message(_ type: String, _ subtype: String?, otid: String, tx: String, signed: Int64, purchase: Int64, expires: Int64,
                     autoRenew: Int, token: String, revoked: Int64? = nil) throws -> (path: String, body: Data) {
            var s = AppleTestAuthority.sample(type: type, subtype: subtype, originalTransactionId: otid, transactionId: tx,
                                              signedDate: signed, expiresDate: expires)
            s.transaction.purchaseDate = AppleTime(purchase)
            s.transaction.originalPurchaseDate = AppleTime(otid == Self.subA ? t0 : t1)
            s.transaction.webOrderLineItemId = "9" + tx
            s.transaction.appAccountToken = token
            if let revoked {
                s.transaction.revocationDate = AppleTime(revoked)
                s.transaction.revocationReason = 0
            }
            s.renewal.autoRenewStatus = autoRenew
            s.renewal.recentSubscriptionStartDate = AppleTime(otid == Self.subA ? t0 : t1)
            s.renewal.renewalDate = AppleTime(expires)
            return ("/v1/apple/notifications", try a.signSample(s))
        }
        let tokA = "aaaaaaaa-0000-4000-8000-00000000d001", tokB = "aaaaaaaa-0000-4000-8000-00000000d002"
        return [
            try message("SUBSCRIBED", "INITIAL_BUY", otid: Self.subA, tx: Self.subA, signed: t0, purchase: t0, expires: t0 + 30 * day,
                        autoRenew: 1, token: tokA),
            try message("DID_RENEW", nil, otid: Self.subA, tx: "1000000000005002", signed: t0 + 30 * day, purchase: t0 + 30 * day,
                        expires: t0 + 60 * day, autoRenew: 1, token: tokA),
            try message("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", otid: Self.subA, tx: "1000000000005002", signed: t0 + 40 * day,
                        purchase: t0 + 30 * day, expires: t0 + 60 * day, autoRenew: 0, token: tokA),
            try message("SUBSCRIBED", "INITIAL_BUY", otid: Self.subB, tx: Self.subB, signed: t1, purchase: t1, expires: t1 + 30 * day,
                        autoRenew: 1, token: tokB),
            try message("REFUND", nil, otid: Self.subB, tx: Self.subB, signed: t1 + 5 * day, purchase: t1, expires: t1 + 30 * day,
                        autoRenew: 1, token: tokB, revoked: t1 + 5 * day),
        ]
    }

    // MARK: helpers

    /// Creates endpoint `name` for `receiver` through the admin route.
    func addEndpoint(_ h: ServiceHarness, _ name: String, _ receiver: WebhookReceiver, secret: WebhookSecret) async throws {
        let body = try JSONSerialization.data(withJSONObject: ["name": name, "url": receiver.url, "secret": secret.text])
        let a = try await h.request("POST", "/v1/admin/webhooks/endpoints", body: body, token: Self.admin)
        XCTAssertEqual(a.status, 201, a.text)
    }

    func post(_ h: ServiceHarness, _ messages: [(path: String, body: Data)]) async throws {
        for m in messages {
            let a = try await h.post(m.path, m.body)
            XCTAssertEqual(a.status, 200, a.text)
        }
    }

    /// Runs the delivery workers of `apps` until no webhook item is pending (or `timeout`).
    func deliver(_ apps: [LedgerApp], _ h: ServiceHarness, timeout: Duration = .seconds(30), until: (() -> Bool)? = nil) async throws {
        let services = apps.map { $0.webhookDeliveryService() }
        let tasks = services.map { s in Task { try await s.run() } }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            if let until { if until() { break } } else if try pending(h) == 0 { break }
        }
        for s in services { await s.shutdown() }
        for t in tasks { _ = try? await t.value }
    }

    func storedCount(_ h: ServiceHarness) throws -> Int {
        Int(try h.admin.query("SELECT count(*) AS n FROM projections.webhook_events", name: "stored").first!.decode(Int64.self, "n"))
    }

    func pending(_ h: ServiceHarness) throws -> Int64 {
        try h.admin.query("SELECT count(*) AS n FROM outbox_items WHERE consumer = 'webhooks' AND status = 'pending'", name: "pending")
            .first!.decode(Int64.self, "n")
    }

    /// The stored events of a subscription, in the order they were derived.
    func stored(_ h: ServiceHarness, _ otid: String) throws -> [(id: String, type: String)] {
        try h.admin.query("SELECT id, type FROM projections.webhook_events WHERE subscription = $1 ORDER BY position, sequence",
                          [.text("Sandbox:" + otid)], name: "stored events").rows.map {
            (try $0.decode(String.self, "id"), try $0.decode(String.self, "type"))
        }
    }

    /// The verified deliveries of a subscription, first arrival of each id, in arrival order.
    func delivered(_ r: WebhookReceiver, _ otid: String) -> [(id: String, type: String)] {
        var seen = Set<String>()
        return r.deliveries.filter { $0.verified && $0.status == 204 }.compactMap { d -> (String, String)? in
            guard let id = d.id, let type = d.type,
                  let object = try? JSONSerialization.jsonObject(with: d.body) as? [String: Any],
                  let data = object["data"] as? [String: Any], data["originalTransactionId"] as? String == otid,
                  seen.insert(id).inserted else { return nil }
            return (id, type)
        }
    }

    /// Every delivery the receiver took, checked by the reference library (Python, unchanged).
    func verifyWithReferenceLibrary(_ r: WebhookReceiver, secret: WebhookSecret, file: StaticString = #filePath, line: UInt = #line) throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let python = root.appendingPathComponent(".venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else {
            return XCTFail("the reference library is missing: run scripts/webhooks-venv.sh (make test does)", file: file, line: line)
        }
        let accepted = r.deliveries.filter { $0.status == 204 }
        XCTAssertFalse(accepted.isEmpty, file: file, line: line)
        for d in accepted {
            let headers = ["webhook-id": d.id ?? "", "webhook-timestamp": d.timestamp ?? "", "webhook-signature": d.signatures ?? ""]
            let p = Process()
            p.executableURL = URL(fileURLWithPath: python)
            p.arguments = [root.appendingPathComponent("scripts/verify-webhook.py").path, secret.text,
                           String(decoding: try JSONSerialization.data(withJSONObject: headers), as: UTF8.self)]
            let input = Pipe(), output = Pipe()
            p.standardInput = input
            p.standardOutput = output
            try p.run()
            input.fileHandleForWriting.write(d.body)
            try input.fileHandleForWriting.close()
            let out = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            XCTAssertEqual(p.terminationStatus, 0, "the reference library refused \(d.id ?? "?"): \(out)", file: file, line: line)
            XCTAssertEqual(out.split(separator: " ").first.map(String.init), d.id, file: file, line: line)
        }
    }

    // MARK: tests

    /// In business order, each message posted twice, the projections' clock set to each message's
    /// time (as it happened): exactly the expected events per subscription, in the order they took
    /// effect, each once, each verified by the reference library.
    func testALifecycleDeliversExactlyTheExpectedEventsInOrder() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        let clock = SettableClock(now)
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: {
            Self.configure(&$0)
            $0.clock = clock.clock
        }) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            let t0 = now - 100 * day
            var expired = AppleTestAuthority.sample(type: "EXPIRED", subtype: "VOLUNTARY", originalTransactionId: Self.subA,
                                                    transactionId: "1000000000005002", signedDate: t0 + 60 * day + 1000,
                                                    expiresDate: t0 + 60 * day)
            expired.transaction.purchaseDate = AppleTime(t0 + 30 * day)
            expired.transaction.originalPurchaseDate = AppleTime(t0)
            expired.transaction.webOrderLineItemId = "91000000000005002"
            expired.transaction.appAccountToken = "aaaaaaaa-0000-4000-8000-00000000d001"
            expired.renewal.autoRenewStatus = 0
            expired.renewal.expirationIntent = 1
            expired.renewal.recentSubscriptionStartDate = AppleTime(t0)
            var messages = try lifecycle(h.authority)
            messages.insert(("/v1/apple/notifications", try h.authority.signSample(expired)), at: 3)
            let times = [t0, t0 + 30 * day, t0 + 40 * day, t0 + 60 * day + 1000, now - 20 * day, now - 15 * day]
            for (m, t) in zip(messages, times) {
                clock.set(t + 1000)
                try await post(h, [m, m])
            }
            try await deliver([h.app], h)
            XCTAssertEqual(try pending(h), 0)
            XCTAssertEqual(delivered(receiver, Self.subA).map(\.type),
                           ["subscription.started", "entitlement.granted", "subscription.renewed", "subscription.auto_renew_changed",
                            "subscription.expired", "entitlement.revoked"])
            XCTAssertEqual(delivered(receiver, Self.subB).map(\.type),
                           ["subscription.started", "entitlement.granted", "subscription.refunded", "entitlement.revoked"])
            for otid in [Self.subA, Self.subB] {
                XCTAssertEqual(delivered(receiver, otid).map(\.id), try stored(h, otid).map(\.id), "delivered in the order derived")
            }
            let expiry = receiver.deliveries.first { $0.type == "subscription.expired" }
            let data = (try? JSONSerialization.jsonObject(with: expiry?.body ?? Data()) as? [String: Any])?["data"] as? [String: Any]
            XCTAssertEqual(data?["reason"] as? String, "unsubscribe")
            XCTAssertEqual(receiver.deliveries.count, 10, "each event sent once")
            try verifyWithReferenceLibrary(receiver, secret: secret)
        }
    }

    /// Shuffled, with duplicates: every event of the final history arrives, each subscription's in
    /// the order the ledger derived them, nothing twice; the same ids as in business order.
    func testShuffledWithDuplicatesDeliversEveryEventInDerivationOrder() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            var messages = try lifecycle(h.authority)
            messages += [messages[1], messages[3]]
            var rng = SeededGenerator(seed: 21)
            messages.shuffle(using: &rng)
            try await post(h, messages)
            try await deliver([h.app], h)
            XCTAssertEqual(try pending(h), 0)
            let derivation = WebhookDerivation(catalog: h.app.catalog, makeId: { StandardWebhooks.messageId(for: $0) })
            for otid in [Self.subA, Self.subB] {
                let key = SubscriptionKey(environment: "Sandbox", originalTransactionId: otid)
                let facts = try await h.app.store.projections.facts(of: [key])
                let history = derivation.events(of: SubscriptionFold(key: key, facts: facts), now: now, position: 0)
                let got = delivered(receiver, otid)
                XCTAssertTrue(Set(history.map(\.id)).isSubset(of: Set(got.map(\.id))), "every event of the final history is delivered")
                XCTAssertEqual(got.map(\.id), try stored(h, otid).map(\.id), "in the order derived")
            }
            XCTAssertEqual(receiver.deliveries.count, Set(receiver.deliveries.compactMap(\.id)).count, "nothing sent twice")
            try verifyWithReferenceLibrary(receiver, secret: secret)
        }
    }

    /// A receiver answering 500 (with and without Retry-After) for a while, then recovering: every
    /// event arrives, none twice after its 2xx, no subscription's events out of order; the failed
    /// attempts are recorded and shown by the admin route.
    func testAFailingReceiverGetsEverythingInOrderOnceItRecovers() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            receiver.behave(.fail(status: 500, retryAfter: nil), until: Date().addingTimeInterval(1.5))
            try await post(h, try lifecycle(h.authority))
            try await deliver([h.app], h)
            XCTAssertEqual(try pending(h), 0)
            XCTAssertEqual(try h.admin.query("SELECT count(*) AS n FROM outbox_items WHERE consumer = 'webhooks' AND status <> 'done'",
                                             name: "undelivered").first!.decode(Int64.self, "n"), 0, "nothing exhausted")
            XCTAssertTrue(receiver.deliveries.contains { $0.status == 500 }, "the receiver failed some")
            for otid in [Self.subA, Self.subB] {
                XCTAssertEqual(delivered(receiver, otid).map(\.id), try stored(h, otid).map(\.id), "no gap, no reordering")
            }
            let accepted = receiver.deliveries.filter { $0.status == 204 }.compactMap(\.id)
            XCTAssertEqual(accepted.count, Set(accepted).count, "an event is not sent again after its 2xx")
            let failed = try h.admin.query("SELECT count(*) AS n FROM webhooks.attempts WHERE outcome = 'failed' AND status = 500",
                                           name: "failed attempts").first!.decode(Int64.self, "n")
            XCTAssertEqual(Int(failed), receiver.deliveries.filter { $0.status == 500 }.count, "every attempt recorded")
            let page = try await h.request("GET", "/v1/admin/webhooks/events?limit=100", token: Self.admin)
            XCTAssertEqual(page.status, 200, page.text)
            let events = try XCTUnwrap(page.json["events"] as? [[String: Any]])
            let n = try storedCount(h)
            XCTAssertGreaterThanOrEqual(n, 10)
            XCTAssertEqual(events.count, n)
            let histories = events.flatMap { ($0["deliveries"] as? [[String: Any]]) ?? [] }
            XCTAssertTrue(histories.allSatisfy { $0["status"] as? String == "delivered" })
            XCTAssertTrue(histories.contains { (($0["history"] as? [[String: Any]]) ?? []).contains { $0["status"] as? Int == 500 } })
            let metrics = try await h.request("GET", "/metrics", token: Self.admin)
            XCTAssertTrue(metrics.text.contains(#"ledger_webhook_deliveries_total{endpoint="backend"} \#(n)"#), metrics.text)
            XCTAssertTrue(metrics.text.contains(#"ledger_webhook_failures_total{endpoint="backend"}"#))
            XCTAssertTrue(metrics.text.contains(#"ledger_webhook_oldest_undelivered_seconds{endpoint="backend"} 0"#))
        }
    }

    /// A rebuild of the webhook projection recomputes the same ids and sends nothing; a replay
    /// re-sends with the original ids and bodies; a test event reaches the endpoint.
    func testARebuildSendsNothingAndAReplayResendsTheOriginalIds() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            try await post(h, try lifecycle(h.authority))
            try await deliver([h.app], h)
            let before = try h.admin.query("SELECT id, position, body FROM projections.webhook_events ORDER BY id", name: "events")
                .rows.map { "\(try $0.decode(String.self, "id")) \(try $0.decode(Int64.self, "position")) \(try $0.decode(String.self, "body"))" }
            let n = try storedCount(h)
            XCTAssertEqual(before.count, n)
            XCTAssertEqual(Set(receiver.deliveries.compactMap(\.id)).count, n)
            let sent = receiver.deliveries.count

            let rebuild = try await h.request("POST", "/v1/admin/rebuild", body: Data(#"{"projection": "webhooks"}"#.utf8), token: Self.admin)
            XCTAssertEqual(rebuild.status, 200, rebuild.text)
            let after = try h.admin.query("SELECT id, position, body FROM projections.webhook_events ORDER BY id", name: "events")
                .rows.map { "\(try $0.decode(String.self, "id")) \(try $0.decode(Int64.self, "position")) \(try $0.decode(String.self, "body"))" }
            XCTAssertEqual(after, before, "the same ids, positions and bodies")
            try await deliver([h.app], h, timeout: .milliseconds(600), until: { false })
            XCTAssertEqual(receiver.deliveries.count, sent, "a rebuild sends nothing")

            let first = try stored(h, Self.subA)[0].id
            let replay = try await h.request("POST", "/v1/admin/webhooks/replay",
                                             body: try JSONSerialization.data(withJSONObject: ["eventIds": [first]]), token: Self.admin)
            XCTAssertEqual(replay.status, 200, replay.text)
            XCTAssertEqual(replay.json["replayed"] as? Int, 1)
            try await deliver([h.app], h)
            XCTAssertEqual(receiver.deliveries.count, sent + 1)
            XCTAssertEqual(receiver.deliveries.last?.id, first, "the original id")
            XCTAssertEqual(receiver.deliveries.last?.body, receiver.deliveries.first { $0.id == first }?.body, "the original body")

            let head = try h.eventCount()
            let all = try await h.request("POST", "/v1/admin/webhooks/replay",
                                          body: try JSONSerialization.data(withJSONObject: ["fromPosition": 1, "toPosition": head]), token: Self.admin)
            XCTAssertEqual(all.status, 200, all.text)
            XCTAssertEqual(all.json["replayed"] as? Int, n)
            try await deliver([h.app], h)
            XCTAssertEqual(Set(receiver.deliveries.suffix(n).compactMap(\.id)), Set(receiver.deliveries.prefix(sent).compactMap(\.id)))

            let test = try await h.request("POST", "/v1/admin/webhooks/test", body: Data(#"{"endpoint": "backend"}"#.utf8), token: Self.admin)
            XCTAssertEqual(test.status, 202, test.text)
            try await deliver([h.app], h)
            XCTAssertEqual(receiver.deliveries.last?.type, "test")
            XCTAssertEqual(receiver.deliveries.last?.id, test.json["id"] as? String)
            try verifyWithReferenceLibrary(receiver, secret: secret)
        }
    }

    /// Bad ranges, unknown or malformed ids, bad JSON: 400 with {"error","message"}; an unknown
    /// endpoint 404.
    func testHostileAdminInputsAreRefused() async throws {
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            let cases: [(String, String, String, Int, String)] = [
                ("POST", "/v1/admin/webhooks/replay", #"{"fromPosition": 9, "toPosition": 2}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"fromPosition": 0, "toPosition": 2}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"fromPosition": 1}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"fromPosition": "1", "toPosition": 2}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"eventIds": ["evt_00000000000000000000000000000000"]}"#, 400, "unknown_event"),
                ("POST", "/v1/admin/webhooks/replay", #"{"eventIds": ["'; DROP TABLE outbox_items; --"]}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"eventIds": []}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"exhausted": false}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"exhausted": true, "fromPosition": 1, "toPosition": 2}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"surprise": 1}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/replay", #"{"fromPosition": 1, "toPosition": 2"#, 400, ""),
                ("POST", "/v1/admin/webhooks/replay", #"[1, 2]"#, 400, ""),
                ("POST", "/v1/admin/webhooks/replay", #"{"exhausted": true, "endpoint": "nope"}"#, 404, "not_found"),
                ("POST", "/v1/admin/webhooks/test", #"{"endpoint": "nope"}"#, 404, "not_found"),
                ("POST", "/v1/admin/webhooks/test", #"{"endpoint": 7}"#, 400, "invalid_parameter"),
                ("POST", "/v1/admin/webhooks/test", #"not json"#, 400, ""),
                ("GET", "/v1/admin/webhooks/events?limit=0", "", 400, "invalid_parameter"),
                ("GET", "/v1/admin/webhooks/events?limit=abc", "", 400, "invalid_parameter"),
                ("GET", "/v1/admin/webhooks/events?cursor=x.y", "", 400, "invalid_parameter"),
                ("GET", "/v1/admin/webhooks/events?fromPosition=5&toPosition=1", "", 400, "invalid_parameter"),
                ("GET", "/v1/admin/webhooks/events?fromPosition=5", "", 400, "invalid_parameter"),
            ]
            for (method, path, body, status, code) in cases {
                let a = try await h.request(method, path, body: body.isEmpty ? nil : Data(body.utf8), token: Self.admin)
                XCTAssertEqual(a.status, status, "\(path) \(body): \(a.text)")
                XCTAssertNotNil(a.json["error"] as? String, "\(path) \(body): \(a.text)")
                XCTAssertNotNil(a.json["message"] as? String, "\(path) \(body): \(a.text)")
                if !code.isEmpty { XCTAssertEqual(a.errorCode, code, "\(path) \(body)") }
            }
            let unauthenticated = try await h.request("POST", "/v1/admin/webhooks/replay", body: Data(#"{"exhausted": true}"#.utf8))
            XCTAssertEqual(unauthenticated.status, 401)
            XCTAssertEqual(try h.admin.query("SELECT count(*) AS n FROM outbox_items", name: "n").first!.decode(Int64.self, "n"), 0)
        }
    }

    /// During a secret rotation each request carries both signatures: a receiver still on the old
    /// secret and one already on the new verify it with the reference library. A receiver's
    /// `Retry-After` postpones the next attempt beyond the (compressed) schedule's 50 ms.
    func testARotationSignsWithBothSecretsAndRetryAfterIsHonoured() async throws {
        let old = WebhookSecret.generate(), new = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [old, new])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", receiver, secret: old)
            let rotated = try await h.request("POST", "/v1/admin/webhooks/endpoints/backend/rotate-secret",
                                              body: try JSONSerialization.data(withJSONObject: ["secret": new.text, "overlapSeconds": 3600]),
                                              token: Self.admin)
            XCTAssertEqual(rotated.status, 200, rotated.text)
            receiver.behave(.fail(status: 503, retryAfter: 1), count: 1)
            try await post(h, Array(try lifecycle(h.authority).prefix(1)))
            try await deliver([h.app], h)
            XCTAssertEqual(try pending(h), 0)
            let all = receiver.deliveries
            XCTAssertEqual(all.first?.status, 503)
            let retry = try XCTUnwrap(all.dropFirst().first { $0.id == all.first?.id })
            XCTAssertGreaterThanOrEqual(retry.receivedAt.timeIntervalSince(all[0].receivedAt), 0.9, "Retry-After: 1 waited for")
            XCTAssertTrue(all.allSatisfy { ($0.signatures ?? "").split(separator: " ").count == 2 }, "both signatures")
            try verifyWithReferenceLibrary(receiver, secret: old)
            try verifyWithReferenceLibrary(receiver, secret: new)
        }
    }

    /// A WeChat subscription, then a refund inquiry the ledger answers: the subscription's events
    /// and `refund_case.decided` (naming the decision) reach the endpoint, verified.
    func testAWeChatRefundInquiryAnswerIsAnnouncedAsRefundCaseDecided() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        let side = WeChatSide()
        try await withService(environment: WeChatSide.environment.merging(Self.env) { $1 }, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            let now = WeChatSide.nowSeconds() * 1000
            try await side.push(h, WeChatSide.signing(otid: "7200000000000001", openId: "oWebhook1", product: "vip_monthly",
                                                      signed: now - day, renewal: now + 29 * day))
            try await side.push(h, WeChatSide.deliver(otid: "7200000000000001", openId: "oWebhook1", product: "vip_monthly", order: "WH-O1",
                                                      paid: now - day, create: now - day, renewal: now + 29 * day))
            try await side.push(h, WeChatSide.inquiry(order: "WH-O1", asked: now, orderTime: now - day, product: "vip_monthly"))
            try await deliver([h.app], h)
            XCTAssertEqual(try pending(h), 0)
            let types = receiver.deliveries.compactMap(\.type)
            XCTAssertTrue(types.contains("subscription.started"), "\(types)")
            let decided = try XCTUnwrap(receiver.deliveries.first { $0.type == "refund_case.decided" }, "\(types)")
            let data = (try JSONSerialization.jsonObject(with: decided.body) as? [String: Any])?["data"] as? [String: Any]
            XCTAssertEqual(data?["source"] as? String, "wechat")
            XCTAssertEqual(data?["case"] as? String, "wechat_refund_inquiry")
            XCTAssertNotNil(data?["decision"] as? String, "\(data ?? [:])")
            try verifyWithReferenceLibrary(receiver, secret: secret)
        }
    }

    /// Two service instances (two LedgerApps with their own delivery workers on one database) send
    /// each event once between them.
    func testTwoInstancesSendEachEventOnce() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: Self.configure) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            let second = try ServiceHarness(environment: Self.env, configJSON: Self.catalog, database: h.database, configure: Self.configure)
            do {
                // Many subscriptions, so both workers have plenty to claim at once.
                var messages: [(path: String, body: Data)] = []
                for i in 0..<20 {
                    var s = AppleTestAuthority.sample(originalTransactionId: String(1_000_000_000_007_000 + i), signedDate: now - day,
                                                      expiresDate: now + 29 * day)
                    s.transaction.appAccountToken = String(format: "aaaaaaaa-0000-4000-8000-%012d", i)
                    messages.append(("/v1/apple/notifications", try h.authority.signSample(s)))
                }
                try await post(h, messages)
                try await deliver([h.app, second.app], h)
                XCTAssertEqual(try pending(h), 0)
                let ids = receiver.deliveries.compactMap(\.id)
                XCTAssertEqual(ids.count, 40, "started + entitlement.granted for each of 20")
                XCTAssertEqual(ids.count, Set(ids).count, "each event sent once")
                let workers = try h.admin.query(
                    "SELECT count(DISTINCT split_part(id, '/', 2)) AS n FROM outbox_items WHERE consumer = 'webhooks' AND status = 'done'",
                    name: "done").first!.decode(Int64.self, "n")
                XCTAssertEqual(workers, 40)
            } catch {
                await second.stop()
                throw error
            }
            await second.stop()
        }
    }

    /// An endpoint that has failed for longer than the configured window (five days; 300 ms here)
    /// is disabled with the reason recorded as a ledger event; its items are given up.
    func testAnEndpointFailingForLongIsDisabledWithAReason() async throws {
        let secret = WebhookSecret.generate()
        let receiver = WebhookReceiver(secrets: [secret])
        try receiver.start()
        defer { Task { await receiver.stop() } }
        try await withService(environment: Self.env, configJSON: Self.catalog, configure: {
            Self.configure(&$0)
            $0.webhooks.disableAfterMillis = 300
        }) { h in
            try await addEndpoint(h, "backend", receiver, secret: secret)
            receiver.behave(.fail(status: 503, retryAfter: nil))
            try await post(h, Array(try lifecycle(h.authority).prefix(1)))
            try await deliver([h.app], h)
            let endpoint = try await h.request("GET", "/v1/admin/webhooks/endpoints/backend", token: Self.admin)
            XCTAssertEqual(endpoint.json["enabled"] as? Bool, false, endpoint.text)
            XCTAssertTrue((endpoint.json["disabledReason"] as? String ?? "").contains("failing since"), endpoint.text)
            XCTAssertTrue(try h.events(stream: "ledger:admin").contains { $0.type == "webhooks/endpoint-disabled" })
            XCTAssertEqual(try pending(h), 0, "a disabled endpoint's items are given up (replay them after enabling it)")
        }
    }
}

/// A deterministic shuffle (SplitMix64).
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

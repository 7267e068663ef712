import Crypto
import Foundation
import LedgerCore

/// `webhooks-kill9`: the real service delivers webhook events to a loopback `WebhookReceiver`
/// (each request stalled a little, so attempts are in flight) and is killed with -9 twice
/// mid-delivery and restarted. Nothing may be lost: every event the ledger derived reaches the
/// receiver, verified; an attempt cut short is sent again with the same `webhook-id` once its
/// lease ran out, which the receiver dedupes (the resends are counted as a note).
extension Scenarios {
    static let webhookSecret = WebhookSecret.generate()

    /// What the scenario's service needs besides the harness's settings.
    static func webhookEnvironment(_ receiver: WebhookReceiver) -> [String: String] {
        ["LEDGER_WEBHOOK_URL": receiver.url, "LEDGER_WEBHOOK_SECRET": webhookSecret.text,
         "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true",
         // A short timeout and lease, so an attempt the kill cut short is retried within seconds.
         "LEDGER_WEBHOOK_TIMEOUT_SECONDS": "2", "LEDGER_WEBHOOK_LEASE_SECONDS": "3"]
    }

    static func webhooksKill9(_ h: Harness, receiver: WebhookReceiver) async throws -> ReliabilityReport {
        var report = ReliabilityReport(scenario: "webhooks-kill9")
        // One subscription per notification: each derives its own events.
        let mint = NotificationMint(authority: h.authority, notificationsPerStream: 1)
        receiver.behave(.stall(seconds: 0.1))
        try h.service.start()
        let db = try h.database.connect()
        func count(_ sql: String) throws -> Int {
            Int(try db.query(sql, name: "webhooks-kill9 count").first?.decode(Int64.self, "n") ?? 0)
        }
        // The configured endpoint is recorded by a start-up job: items are enqueued only for
        // endpoints recorded when an event is derived.
        let ready = ContinuousClock.now + .seconds(15)
        while try count("SELECT count(*) AS n FROM webhooks.endpoints WHERE enabled") == 0 {
            guard ContinuousClock.now < ready else {
                report.check("endpoint recorded at start", false, "no enabled endpoint after 15 s; log:\n\(h.service.logTail())")
                return report
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        let notifications = h.options.quick ? 60 : 300
        for i in 0..<notifications {
            report.sent += 1
            let request = try mint.notification(i).request
            let c = try LoopbackConnection(h.service.target, timeout: .seconds(15))
            try c.send(request.encoded(authority: h.service.target.authority))
            if try c.readResponse().status == 200 { report.acknowledged += 1 }
            c.close()
        }
        let derived = try count("SELECT count(*) AS n FROM projections.webhook_events")
        report.stored = derived
        var kills = 0
        for k in 1...2 {
            let seen = receiver.deliveries.count
            let deadline = ContinuousClock.now + .seconds(20)
            while receiver.deliveries.count < seen + 10, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            try h.service.kill9()
            kills += 1
            h.options.log("webhooks-kill9: kill \(k) with \(receiver.uniqueVerifiedIds.count) of \(derived) events received")
            try await Task.sleep(for: .milliseconds(300))
            try h.service.start()
        }
        let deadline = ContinuousClock.now + .seconds(h.options.quick ? 60 : 180)
        while try count("SELECT count(*) AS n FROM outbox_items WHERE consumer = 'webhooks' AND status = 'pending'") > 0,
              ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        let items = try db.query("SELECT id, status FROM outbox_items WHERE consumer = 'webhooks'", name: "webhooks-kill9 items").rows
            .map { (try $0.decode(String.self, "id"), try $0.decode(String.self, "status")) }
        let expected = Set(items.compactMap { $0.0.split(separator: "/", maxSplits: 1).last.map(String.init) })
        let received = Set(receiver.uniqueVerifiedIds)
        let missing = expected.subtracting(received)
        report.lost = missing.count
        report.check("service killed and restarted", kills == 2, "\(kills) of 2 kill -9 / restart cycles mid-delivery")
        report.check("notifications acknowledged", report.acknowledged == notifications, "\(report.acknowledged) of \(notifications)")
        report.check("one item per derived event", items.count == derived && derived > 0, "\(items.count) items, \(derived) events")
        report.check("every event delivered", missing.isEmpty && items.allSatisfy { $0.1 == "done" },
                     missing.isEmpty ? "\(received.count) distinct ids received, all items done"
                         : "\(missing.count) never received, e.g. \(missing.sorted().prefix(3).joined(separator: ", "))")
        report.check("every request verified", receiver.deliveries.allSatisfy(\.verified),
                     "\(receiver.deliveries.filter { !$0.verified }.count) refused signatures")
        report.notes.append("requests \(receiver.deliveries.count), distinct ids \(received.count): resent after a kill (same webhook-id) \(receiver.deliveries.count - received.count)")
        return report
    }
}

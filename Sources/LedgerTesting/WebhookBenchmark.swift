import Crypto
import Foundation
import LedgerCore

/// `ledger-dev bench webhooks`: signed V2 notifications posted to a spawned `ledger serve` with one
/// webhook endpoint (a loopback `WebhookReceiver` in this process, verifying every request, answering
/// at once); the service derives each notification's events in the append transaction and delivers
/// them through its outbox worker. Measured in the same run: the ingest rate (notifications/s and
/// the events/s they derive), the delivery rate (events received/s from the first post to the last
/// event received) and the lag from the commit of each event's position (`events.recorded_at`) to
/// its first arrival. The ratio is delivery events/s ÷ derived events/s of the ingest: ≥ 1.0 keeps up.
public enum WebhookBenchmark {
    public struct Report: Sendable {
        public var notifications: Int
        public var connections: Int
        public var events: Int
        public var ingestPerSecond: Double
        public var derivedPerSecond: Double
        public var deliveredPerSecond: Double
        public var lag: LatencySummary
        public var requests: Int

        public var text: String {
            [
                String(format: "webhooks: %d notifications over %d connections → %d events, %d requests to the receiver",
                       notifications, connections, events, requests),
                String(format: "  ingest:    %8.0f notifications/s (%.0f events derived/s)", ingestPerSecond, derivedPerSecond),
                String(format: "  delivery:  %8.0f events/s (first post → last event received)", deliveredPerSecond),
                String(format: "  lag commit → delivery: p50 %.0f ms   p99 %.0f ms   max %.0f ms", lag.p50, lag.p99, lag.max),
            ].joined(separator: "\n")
        }
    }

    static let secret = WebhookSecret.generate()

    /// The receiver of a run (call `start()`), verifying with the benchmark's secret.
    public static func receiver() -> WebhookReceiver { WebhookReceiver(secrets: [secret]) }

    /// What the spawned service needs to deliver to `receiver`.
    public static func environment(_ receiver: WebhookReceiver) -> [String: String] {
        ["LEDGER_WEBHOOK_URL": receiver.url, "LEDGER_WEBHOOK_SECRET": secret.text, "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]
    }

    public static func run(baseURL: String, database: TestDatabase, receiver: WebhookReceiver, authority: AppleTestAuthority,
                           notifications: Int, connections: Int, log: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        guard notifications > 0, connections > 0 else { throw BenchmarkError.invalid("notifications and connections must be positive") }
        let db = try database.connect()
        func count(_ sql: String) throws -> Int { Int(try db.query(sql, name: "bench webhooks").first?.decode(Int64.self, "n") ?? 0) }
        let ready = ContinuousClock.now + .seconds(15)
        while try count("SELECT count(*) AS n FROM webhooks.endpoints WHERE enabled") == 0 {
            guard ContinuousClock.now < ready else { throw BenchmarkError.invalid("the service recorded no webhook endpoint within 15 s") }
            try await Task.sleep(for: .milliseconds(50))
        }
        let before = Set(receiver.uniqueVerifiedIds)
        let target = try LoopbackTarget(url: baseURL)
        let mint = NotificationMint(authority: authority, notificationsPerStream: 1)
        log("minting \(notifications) notifications…")
        let requests = try mint.premint(notifications).map(\.request)
        log("posting \(requests.count) over \(connections) connections…")
        let started = Date()
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(requests.count))) { requests[$0] }
        let load = await generator.run()
        try requireAllOK(load, fix: "start the service trusting the benchmark authority's root and accepting com.example/Sandbox")
        log("waiting for every event to be delivered…")
        let deadline = ContinuousClock.now + .seconds(600)
        while try count("SELECT count(*) AS n FROM outbox_items WHERE consumer = 'webhooks' AND status = 'pending'") > 0 {
            guard ContinuousClock.now < deadline else { throw BenchmarkError.invalid("webhook events still pending after 10 minutes") }
            // The receiver times each arrival: polling slower only ends the wait later, and a count
            // every 20 ms took as much of PostgreSQL as the delivery's own claims.
            try await Task.sleep(for: .milliseconds(200))
        }
        let committed = try db.query(
            """
            SELECT w.id, e.recorded_at FROM projections.webhook_events w JOIN events e ON e.position = w.position
            """, name: "bench webhooks commits").rows.map { (try $0.decode(String.self, "id"), try $0.decode(Int64.self, "recorded_at")) }
        var firstArrival: [String: Date] = [:]
        for d in receiver.deliveries where d.verified && d.status == 204 {
            if let id = d.id, !before.contains(id), firstArrival[id] == nil { firstArrival[id] = d.receivedAt }
        }
        let lags = committed.compactMap { id, at in firstArrival[id].map { $0.timeIntervalSince1970 * 1000 - Double(at) } }
        guard lags.count == committed.count, !lags.isEmpty else {
            throw BenchmarkError.invalid("\(committed.count - lags.count) of \(committed.count) events never reached the receiver")
        }
        let last = firstArrival.values.max() ?? started
        let deliverySeconds = max(last.timeIntervalSince(started), 0.001)
        return Report(notifications: notifications, connections: connections, events: committed.count,
                      ingestPerSecond: load.requestsPerSecond, derivedPerSecond: Double(committed.count) / max(load.seconds, 0.001),
                      deliveredPerSecond: Double(committed.count) / deliverySeconds, lag: LatencySummary(microseconds: lags.map { UInt32(clamping: Int64(max($0, 0) * 1000)) }),
                      requests: receiver.deliveries.count)
    }
}

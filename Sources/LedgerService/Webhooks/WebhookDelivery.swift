import Crypto
import Foundation
import LedgerCore
import LedgerMetrics
import LedgerStore
import Outbound

/// Use case: one delivery attempt of a webhook outbox item (`WebhookOutbox`), run by the
/// `OutboxService` of consumer `webhooks` (the outbox claims, leases, orders per endpoint and
/// subscription, schedules retries and records every attempt as an `outbox/*` event; this only
/// sends). A POST of the body as first derived, signed per Standard Webhooks with every secret in
/// force (both during a rotation); a 2xx within the endpoint timeout is delivered, anything else
/// failed (`Retry-After` passed on). Each attempt is also kept in `webhooks.attempts` (time,
/// status, latency, a capped excerpt of the answer). An endpoint with no success for
/// `disableAfterMillis` since its first failure is disabled, with the reason recorded as a ledger
/// event; the items of a disabled or removed endpoint are given up (exhausted: replay them once
/// it is enabled again).
struct WebhookDelivery: Sendable {
    let store: Store
    let endpoints: WebhookEndpoints
    let client: OutboundClient
    let settings: WebhookSettings
    let metrics: MetricsRegistry
    let log: Log
    let clock: @Sendable () -> EpochMillis

    static let deliveries = "ledger_webhook_deliveries_total"
    static let failures = "ledger_webhook_failures_total"
    static let exhausted = "ledger_webhook_exhausted_total"

    init(store: Store, endpoints: WebhookEndpoints, settings: WebhookSettings, metrics: MetricsRegistry, log: Log,
         allowPlainHTTPLoopback: Bool, clock: @escaping @Sendable () -> EpochMillis = { Clock.nowMillis() }) {
        self.store = store
        self.endpoints = endpoints
        self.settings = settings
        self.metrics = metrics
        self.log = log
        self.clock = clock
        // Loopback receivers (tests, the demo) are reached over plain http only when the endpoint
        // URL check allowed them; the client enforces https everywhere else.
        client = OutboundClient(
            target: OutboundTarget(name: "webhooks", baseURL: nil, setting: "webhooks.endpoints[].url",
                                   allowsPlainHTTPLoopback: allowPlainHTTPLoopback,
                                   connectTimeout: .seconds(settings.timeoutSeconds), timeout: .seconds(settings.timeoutSeconds),
                                   maxResponseBytes: 64 << 10),
            metrics: metrics)
    }

    /// The consumer with this instance's schedule (Svix's unless the configuration compresses it).
    var consumer: OutboxConsumer { WebhookOutbox.consumer(schedule: settings.schedule, leaseMillis: EpochMillis(settings.leaseSeconds) * 1000) }

    func describe() {
        metrics.describe(Self.deliveries, type: .counter, help: "Webhook events delivered (2xx within the timeout) by endpoint")
        metrics.describe(Self.failures, type: .counter, help: "Failed webhook delivery attempts by endpoint")
        metrics.describe(Self.exhausted, type: .counter, help: "Webhook events given up after the last attempt (or for a disabled endpoint) by endpoint")
        let store = self.store, clock = self.clock
        metrics.collect([
            (name: "ledger_webhook_queue", type: .gauge, help: "Webhook outbox items per endpoint and status (pending, done, exhausted)"),
            (name: "ledger_webhook_oldest_undelivered_seconds", type: .gauge, help: "Age of the oldest undelivered webhook event per endpoint (0: none)"),
        ]) {
            guard let queues = try? await store.webhookEvents.queues(now: clock()) else { return nil }
            return [
                "ledger_webhook_queue": queues.flatMap { q in
                    [(labels: ["endpoint": q.endpoint, "status": "pending"], value: Double(q.pending)),
                     (labels: ["endpoint": q.endpoint, "status": "done"], value: Double(q.delivered)),
                     (labels: ["endpoint": q.endpoint, "status": "exhausted"], value: Double(q.exhausted))]
                },
                "ledger_webhook_oldest_undelivered_seconds": queues.map {
                    (labels: ["endpoint": $0.endpoint], value: Double($0.oldestUndeliveredMillis) / 1000)
                },
            ]
        }
    }

    func work(_ item: OutboxItem) async -> OutboxAttemptResult {
        guard let (endpointName, eventId) = WebhookOutbox.parse(itemId: item.id), let body = item.payload["body"], body != .null else {
            return .gaveUp(error: "the outbox item \(item.id.prefix(120)) names no endpoint, event and body")
        }
        let endpoint: WebhookEndpointRecord?
        do { endpoint = try await store.webhookEndpoints.endpoint(endpointName) } catch {
            return .failed(error: "reading the endpoint failed: \(error)")
        }
        guard let endpoint, endpoint.enabled else {
            metrics.increment(Self.exhausted, ["endpoint": endpointName])
            return .gaveUp(error: endpoint == nil ? "endpoint \(endpointName) no longer exists"
                           : "endpoint \(endpointName) is disabled (\(endpoint?.disabledReason ?? "no reason")); replay after enabling it")
        }
        let bytes = body.canonicalJSON()
        let now = clock()
        let secrets = endpoint.signingSecrets(now: now)
        guard !secrets.isEmpty else {
            // An unsigned delivery would teach the receiver to accept anything: never sent.
            metrics.increment(Self.exhausted, ["endpoint": endpointName])
            return .gaveUp(error: "endpoint \(endpointName) has no usable signing secret; rotate its secret, then replay")
        }
        let headers = StandardWebhooks.headers(id: eventId, timestamp: now / 1000, body: bytes, secrets: secrets)
            + [("Content-Type", "application/json"), ("User-Agent", "ledger-webhooks/1")]
        let started = ContinuousClock.now
        let attempt = item.attempts + 1
        var status: Int?
        var excerpt: String
        var result: OutboxAttemptResult
        do {
            let response = try await client.send(OutboundRequest(method: "POST", path: endpoint.url, headers: headers, body: bytes))
            status = response.status
            // The receiver's bytes: any of them (a NUL, an escape sequence) may come back.
            excerpt = StorableText.from(response.body.prefix(WebhookEventStore.excerptLimit), limit: WebhookEventStore.excerptLimit)
            if response.isSuccess {
                result = .delivered(answer: ["status": .integer(Int64(response.status)), "excerpt": .string(excerpt)])
            } else {
                result = .failed(error: "HTTP \(response.status): \(excerpt)", retryAfter: response.retryAt)
            }
        } catch {
            excerpt = StorableText.clean(error.message, limit: WebhookEventStore.excerptLimit)
            result = .failed(error: excerpt)
        }
        let elapsed = ContinuousClock.now - started
        let latency = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        let delivered: Bool
        if case .delivered = result { delivered = true } else { delivered = false }
        do {
            try await store.webhookEvents.record(WebhookAttempt(
                endpoint: endpointName, eventId: eventId, generation: item.generation, attempt: attempt, at: now, status: status,
                latencyMillis: latency, delivered: delivered, excerpt: excerpt))
        } catch {
            log.warn("a webhook attempt was not recorded in webhooks.attempts (the outbox event still records it)",
                     ["endpoint": endpointName, "event": eventId, "error": "\(error)"])
        }
        if delivered {
            metrics.increment(Self.deliveries, ["endpoint": endpointName])
        } else {
            metrics.increment(Self.failures, ["endpoint": endpointName])
            if attempt >= consumer.schedule.maxAttempts { metrics.increment(Self.exhausted, ["endpoint": endpointName]) }
            await disableIfFailingForLong(endpointName, now: now)
        }
        return result
    }

    /// Disables `name` when its first failure since its last success is older than
    /// `disableAfterMillis` (Svix: five days).
    func disableIfFailingForLong(_ name: String, now: EpochMillis) async {
        guard let (lastSuccess, firstFailure) = try? await store.webhookEvents.health(endpoint: name), let firstFailure,
              now - firstFailure >= settings.disableAfterMillis else { return }
        // Several attempts may fail at once: the first to get here disables, the others see it done.
        guard let current = try? await store.webhookEndpoints.endpoint(name), current.enabled else { return }
        func iso(_ ms: EpochMillis) -> String { Date(timeIntervalSince1970: Double(ms) / 1000).ISO8601Format() }
        let since = iso(firstFailure)
        let reason = "no successful delivery since \(lastSuccess.map { iso($0) } ?? "it was added"); failing since \(since) "
            + "(more than \(settings.disableAfterMillis / 3_600_000) h)"
        do {
            _ = try await endpoints.setEnabled(name, false, reason: reason, requestedBy: Requester(fields: ["via": "webhook-delivery"]))
            log.warn("webhook endpoint disabled: failing for too long", ["endpoint": name, "since": since])
        } catch {
            log.warn("disabling a failing webhook endpoint failed", ["endpoint": name, "error": "\(error)"])
        }
    }
}

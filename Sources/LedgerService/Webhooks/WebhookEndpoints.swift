import Crypto
import Foundation
import LedgerCore
import LedgerStore

/// What an endpoint change was refused for; the routes render it (WebhookRoutes.swift).
enum WebhookEndpointError: Error, Equatable, CustomStringConvertible {
    case exists(String)
    case unknown(String)
    case invalid(String)
    case unknownEvents([String])

    var description: String {
        switch self {
        case .exists(let n): "an endpoint named \(n) exists; rotate its secret or disable it, or choose another name"
        case .unknown(let n): "no webhook endpoint is named \(n.prefix(64)); GET /v1/admin/webhooks/endpoints lists them"
        case .invalid(let why): why
        case .unknownEvents(let ids):
            "no webhook event has the id(s) \(ids.prefix(5).joined(separator: ", "))\(ids.count > 5 ? " …" : ""); GET /v1/admin/webhooks/events lists them"
        }
    }
}

/// Use case: the webhook endpoints, shared by the admin routes and the start-up sync of the
/// configured ones. Every change is a ledger event (`webhooks/endpoint-*` in `ledger:admin`:
/// who asked, the URL, filters, state and the secret's fingerprint — never a secret) before the
/// endpoints table is set from it.
struct WebhookEndpoints: Sendable {
    let store: Store
    let settings: WebhookSettings
    let log: Log

    static let created = "webhooks/endpoint-created"
    static let configured = "webhooks/endpoint-configured"
    static let disabled = "webhooks/endpoint-disabled"
    static let enabled = "webhooks/endpoint-enabled"
    static let rotated = "webhooks/secret-rotated"

    func list() async throws(StoreError) -> [WebhookEndpointRecord] { try await store.webhookEndpoints.all() }

    func endpoint(_ name: String) async throws -> WebhookEndpointRecord {
        guard let found = try await store.webhookEndpoints.endpoint(name) else { throw WebhookEndpointError.unknown(name) }
        return found
    }

    func create(_ endpoint: WebhookEndpointSettings, requestedBy: Requester) async throws -> WebhookEndpointRecord {
        if try await store.webhookEndpoints.endpoint(endpoint.name) != nil { throw WebhookEndpointError.exists(endpoint.name) }
        let secret = try WebhookSecret(text: endpoint.secret.value)
        var record = WebhookEndpointRecord(
            name: endpoint.name, url: endpoint.url, eventTypes: endpoint.eventTypes.map { $0.map(\.rawValue).sorted() },
            environments: endpoint.environments.map { $0.sorted() }, enabled: endpoint.enabled,
            disabledReason: endpoint.enabled ? nil : "created disabled", origin: "admin", secret: secret.text, previousSecret: nil,
            previousSecretUntil: nil, secretFingerprint: secret.fingerprint, lastPosition: 0, updatedAt: 0)
        try await save(Self.created, &record, requestedBy: requestedBy)
        log.info("webhook endpoint created", ["endpoint": record.name, "secret": record.secretFingerprint])
        return record
    }

    func setEnabled(_ name: String, _ enabled: Bool, reason: String?, requestedBy: Requester) async throws -> WebhookEndpointRecord {
        var record = try await endpoint(name)
        record.enabled = enabled
        record.disabledReason = enabled ? nil : (reason ?? "disabled by an operator")
        try await save(enabled ? Self.enabled : Self.disabled, &record, requestedBy: requestedBy)
        log.info(enabled ? "webhook endpoint enabled" : "webhook endpoint disabled", ["endpoint": name])
        if !enabled { try await giveUpPending(record) }
        return record
    }

    /// A disabled endpoint's pending events are given up at once (each an `outbox/exhausted`
    /// event saying why), not left waiting for their next attempt — up to a day away — to find
    /// out; `POST /v1/admin/webhooks/replay {"exhausted": true, "endpoint": …}` requeues them
    /// once it is enabled again.
    private func giveUpPending(_ record: WebhookEndpointRecord) async throws {
        let ids = try await store.outbox.giveUpPending(
            WebhookOutbox.name, partition: record.name,
            reason: "endpoint \(record.name) was disabled (\(record.disabledReason ?? "no reason")); replay after enabling it",
            now: Clock.nowMillis())
        if !ids.isEmpty { log.info("pending webhook events of a disabled endpoint given up", ["endpoint": record.name, "items": String(ids.count)]) }
    }

    /// Signs with `secret` from now on and, for `overlapSeconds`, with the one before too (both
    /// signatures space-separated), so the receiver can switch without refusing anything.
    func rotate(_ name: String, to secret: WebhookSecret, overlapSeconds: Int64, requestedBy: Requester) async throws -> WebhookEndpointRecord {
        var record = try await endpoint(name)
        guard secret.text != record.secret else { throw WebhookEndpointError.invalid("the new secret is the one in force; generate another (e.g. whsec_$(openssl rand -base64 32))") }
        record.previousSecret = overlapSeconds > 0 ? record.secret : nil
        record.previousSecretUntil = overlapSeconds > 0 ? Clock.nowMillis() + overlapSeconds * 1000 : nil
        record.secret = secret.text
        record.secretFingerprint = secret.fingerprint
        try await save(Self.rotated, &record, requestedBy: requestedBy)
        log.info("webhook secret rotated", ["endpoint": name, "secret": secret.fingerprint])
        return record
    }

    /// At start: each configured endpoint the table does not hold as configured is recorded
    /// (a changed URL, filter, secret, or `enabled: false`); an operator's disable of a configured
    /// endpoint stays in force across restarts.
    @discardableResult
    func syncConfigured(requestedBy: Requester = .configuration) async throws -> [String] {
        var changed: [String] = []
        for endpoint in settings.endpoints {
            let secret = try WebhookSecret(text: endpoint.secret.value)
            let existing = try await store.webhookEndpoints.endpoint(endpoint.name)
            let types = endpoint.eventTypes.map { $0.map(\.rawValue).sorted() }
            let envs = endpoint.environments.map { $0.sorted() }
            var record = existing ?? WebhookEndpointRecord(
                name: endpoint.name, url: endpoint.url, eventTypes: types, environments: envs, enabled: endpoint.enabled,
                disabledReason: nil, origin: "config", secret: secret.text, previousSecret: nil, previousSecretUntil: nil,
                secretFingerprint: secret.fingerprint, lastPosition: 0, updatedAt: 0)
            let enabled = endpoint.enabled ? (existing?.enabled ?? true) : false
            if let existing, existing.origin == "config", existing.url == endpoint.url, existing.eventTypes == types,
               existing.environments == envs, existing.secret == secret.text, existing.enabled == enabled {
                continue
            }
            record.url = endpoint.url
            record.eventTypes = types
            record.environments = envs
            record.origin = "config"
            if record.secret != secret.text {
                record.previousSecret = nil
                record.previousSecretUntil = nil
            }
            record.secret = secret.text
            record.secretFingerprint = secret.fingerprint
            record.enabled = enabled
            record.disabledReason = enabled ? nil : (endpoint.enabled ? record.disabledReason : "enabled: false in the configuration")
            try await save(Self.configured, &record, requestedBy: requestedBy)
            if !enabled { try await giveUpPending(record) }
            changed.append(endpoint.name)
        }
        if !changed.isEmpty { log.info("webhook endpoints recorded from the configuration", ["endpoints": changed.joined(separator: ",")]) }
        return changed
    }

    /// Appends the change, then sets the row from it.
    private func save(_ type: String, _ record: inout WebhookEndpointRecord, requestedBy: Requester) async throws {
        let now = Clock.nowMillis()
        let data = JSONValue.object([
            "endpoint": .string(record.name), "url": .string(record.url),
            "eventTypes": record.eventTypes.map { .array($0.map(JSONValue.string)) } ?? .null,
            "environments": record.environments.map { .array($0.map(JSONValue.string)) } ?? .null,
            "enabled": .bool(record.enabled), "disabledReason": .optional(record.disabledReason), "origin": .string(record.origin),
            "secretFingerprint": .string(record.secretFingerprint),
            "previousSecretFingerprint": .optional(record.previousSecret.flatMap { try? WebhookSecret(text: $0).fingerprint }),
            "previousSecretUntil": .optional(record.previousSecretUntil),
            "requestedBy": requestedBy.json, "requestedAt": .integer(now),
        ]).canonicalJSON()
        let outcome = try await store.events.append(NewEvent(
            streamId: StreamId.ledgerAdmin.text, dedupeKey: DedupeKey.adminAction(at: now), source: .ledger, type: type,
            signedAt: now, payload: data, raw: data))
        record.lastPosition = outcome.position
        record.updatedAt = now
        try await store.webhookEndpoints.apply(record)
    }
}

extension Requester {
    /// The configuration file or environment, applied at start.
    static var configuration: Requester {
        Requester(fields: ["via": "configuration", "host": .string(ProcessInfo.processInfo.hostName)])
    }
}

extension WebhookEndpointRecord {
    /// The admin answer: everything but the secrets (their fingerprints instead).
    var json: JSONValue {
        var rotation: JSONValue = .null
        if let previous = previousSecret, let until = previousSecretUntil, until > Clock.nowMillis() {
            rotation = ["previousSecretFingerprint": .optional(try? WebhookSecret(text: previous).fingerprint), "until": .integer(until)]
        }
        return [
            "name": .string(name), "url": .string(url),
            "eventTypes": eventTypes.map { .array($0.map(JSONValue.string)) } ?? .null,
            "environments": environments.map { .array($0.map(JSONValue.string)) } ?? .null,
            "enabled": .bool(enabled), "disabledReason": .optional(disabledReason), "origin": .string(origin),
            "secretFingerprint": .string(secretFingerprint), "rotation": rotation,
            "position": .integer(lastPosition), "updatedAt": .integer(updatedAt),
        ]
    }

    /// The secrets that sign a request at `now`: the current one, and the previous one while a
    /// rotation's overlap lasts.
    func signingSecrets(now: EpochMillis) -> [WebhookSecret] {
        var out: [WebhookSecret] = []
        if let s = try? WebhookSecret(text: secret) { out.append(s) }
        if let p = previousSecret, let until = previousSecretUntil, now < until, let s = try? WebhookSecret(text: p) { out.append(s) }
        return out
    }
}

/// What an operator asked to re-send (`POST /v1/admin/webhooks/replay`).
enum WebhookReplaySelection: Sendable, Equatable {
    case events([String])
    case positions(ClosedRange<Int64>)
    case exhausted
}

/// Use case: the webhook outbox seen and worked by an operator — replay, inspection and a `test`
/// event. Replays requeue the outbox items themselves (`Outbox.replay`), so the receiver sees the
/// original `webhook-id` and body; every replay is an `outbox/requeued` ledger event naming who asked.
struct WebhookOperations: Sendable {
    let store: Store
    let endpoints: WebhookEndpoints

    /// The item ids requeued (settled ones only: a pending item is queued already).
    func replay(_ selection: WebhookReplaySelection, endpoint: String?, requestedBy: Requester) async throws -> [String] {
        if let endpoint { _ = try await endpoints.endpoint(endpoint) }
        let ids: [String]
        switch selection {
        case .events(let events):
            let known = Set(try await store.webhookEvents.events(ids: events).map(\.id))
            let queued = try await store.webhookEvents.itemIds(events: events, endpoint: endpoint)
            let queuedEvents = Set(queued.compactMap { WebhookOutbox.parse(itemId: $0)?.event })
            let unknown = events.filter { !known.contains($0) && !queuedEvents.contains($0) }
            if !unknown.isEmpty {
                throw WebhookEndpointError.unknownEvents(unknown)
            }
            ids = queued
        case .positions(let range):
            ids = try await store.webhookEvents.itemIds(positions: range, endpoint: endpoint)
        case .exhausted:
            let all = try await store.outbox.items(WebhookOutbox.name, status: .exhausted, limit: 100_000).map(\.id)
            ids = endpoint.map { e in all.filter { WebhookOutbox.parse(itemId: $0)?.endpoint == e } } ?? all
        }
        guard !ids.isEmpty else { return [] }
        return try await store.outbox.replay(WebhookOutbox.name, ids: ids, requestedBy: requestedBy.jsonText, now: Clock.nowMillis())
    }

    /// A `test` event for `endpoint`, delivered like any event (a disabled endpoint's items are
    /// given up, so it reaches only an enabled one).
    func sendTest(to endpoint: String, requestedBy: Requester) async throws -> WebhookEvent {
        let record = try await endpoints.endpoint(endpoint)
        let now = Clock.nowMillis()
        let identity = "test|" + record.name + "|" + UUID().uuidString.lowercased()
        let event = WebhookEvent(
            id: StandardWebhooks.messageId(for: identity), identity: identity, type: .test, source: "ledger",
            environment: SubscriptionKey.production, originalTransactionId: nil, customerId: nil, effectiveAt: now, position: 0,
            details: ["endpoint": .string(record.name), "requestedAt": .integer(now)])
        try await store.outbox.enqueue([WebhookEventStore.draft(event, endpoint: record.name, sequence: 0, now: now)],
                                       consumer: WebhookOutbox.name)
        return event
    }

    /// A page of events (position order) with their deliveries and attempts per endpoint.
    /// `newestFirst` for the auditor's page (`/audit/webhooks`); the cursor has the same form.
    func page(after: (Int64, Int)?, limit: Int, positions: ClosedRange<Int64>?,
              newestFirst: Bool = false) async throws -> (events: [JSONValue], next: String?) {
        let events = try await store.webhookEvents.events(after: after, limit: limit + 1, positions: positions, newestFirst: newestFirst)
        let shown = Array(events.prefix(limit))
        let ids = shown.map(\.id)
        let items = try await store.webhookEvents.items(events: ids)
        let attempts = try await store.webhookEvents.attempts(events: ids)
        let json: [JSONValue] = shown.map { e in
            let deliveries: [JSONValue] = items.filter { WebhookOutbox.parse(itemId: $0.id)?.event == e.id }.map { item in
                let endpoint = WebhookOutbox.parse(itemId: item.id)?.endpoint ?? ""
                return [
                    "endpoint": .string(endpoint), "status": .string(item.status == .done ? "delivered" : item.status.rawValue),
                    "attempts": .integer(Int64(item.attempts)), "generation": .integer(Int64(item.generation)),
                    "nextAttemptAt": item.status == .pending ? .integer(item.nextAttemptAt) : .null, "lastError": .optional(item.lastError),
                    "history": .array(attempts.filter { $0.eventId == e.id && $0.endpoint == endpoint }.map { a in
                        ["generation": .integer(Int64(a.generation)), "attempt": .integer(Int64(a.attempt)), "at": .integer(a.at),
                         "status": a.status.map { .integer(Int64($0)) } ?? .null, "latencyMs": .integer(a.latencyMillis),
                         "outcome": .string(a.delivered ? "delivered" : "failed"), "excerpt": .optional(a.excerpt)]
                    }),
                ]
            }
            return [
                "id": .string(e.id), "type": .string(e.type), "subscription": .optional(e.subscription), "environment": .string(e.environment),
                "customerId": .optional(e.customerId), "effectiveDate": .integer(e.effectiveAt), "position": .integer(e.position),
                "body": (try? JSONDecoder().decode(JSONValue.self, from: Data(e.body.utf8))) ?? .null, "deliveries": .array(deliveries),
            ]
        }
        let next = events.count > limit ? shown.last.map { "\($0.position).\($0.sequence)" } : nil
        return (json, next)
    }
}

extension Requester {
    /// Who asked, as one line of JSON (an outbox requeue stores it as text).
    var jsonText: String { String(decoding: JSONValue.object(fields).canonicalJSON(), as: UTF8.self) }
}

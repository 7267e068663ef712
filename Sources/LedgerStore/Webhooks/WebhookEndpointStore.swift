import Foundation
import LedgerCore
internal import Postgres

/// One row of `webhooks.endpoints` (Migrations/0014): where events go, which ones, and the
/// secrets that sign them. The secrets live only here, never in the log.
public struct WebhookEndpointRecord: Sendable, Equatable {
    public var name: String
    public var url: String
    /// Nil: every type.
    public var eventTypes: [String]?
    /// Nil: Production and Sandbox.
    public var environments: [String]?
    public var enabled: Bool
    public var disabledReason: String?
    /// `config` (the configuration file / environment) or `admin` (`POST /v1/admin/webhooks/endpoints`).
    public var origin: String
    /// `whsec_…`.
    public var secret: String
    public var previousSecret: String?
    public var previousSecretUntil: EpochMillis?
    public var secretFingerprint: String
    /// The ledger event that set the row.
    public var lastPosition: Int64
    public var updatedAt: EpochMillis

    public init(
        name: String, url: String, eventTypes: [String]?, environments: [String]?, enabled: Bool, disabledReason: String?,
        origin: String, secret: String, previousSecret: String?, previousSecretUntil: EpochMillis?, secretFingerprint: String,
        lastPosition: Int64, updatedAt: EpochMillis
    ) {
        self.name = name
        self.url = url
        self.eventTypes = eventTypes
        self.environments = environments
        self.enabled = enabled
        self.disabledReason = disabledReason
        self.origin = origin
        self.secret = secret
        self.previousSecret = previousSecret
        self.previousSecretUntil = previousSecretUntil
        self.secretFingerprint = secretFingerprint
        self.lastPosition = lastPosition
        self.updatedAt = updatedAt
    }
}

/// The SQL of the webhook endpoints (the webhooks slice's own store file).
public struct WebhookEndpointStore: Sendable {
    let pool: ConnectionPool

    init(pool: ConnectionPool) { self.pool = pool }

    static let columns = """
        name, url, array_to_json(event_types)::text AS event_types, array_to_json(environments)::text AS environments, enabled, \
        disabled_reason, origin, secret, previous_secret, previous_secret_until, secret_fingerprint, last_position, updated_at
        """

    public func all() async throws(StoreError) -> [WebhookEndpointRecord] {
        try await rows("SELECT \(Self.columns) FROM webhooks.endpoints ORDER BY name", [])
    }

    public func endpoint(_ name: String) async throws(StoreError) -> WebhookEndpointRecord? {
        try await rows("SELECT \(Self.columns) FROM webhooks.endpoints WHERE name = $1", [.text(name)]).first
    }

    /// Writes the row the event at `record.lastPosition` leaves; a row already set by a later
    /// event is kept (answers false).
    @discardableResult
    public func apply(_ record: WebhookEndpointRecord) async throws(StoreError) -> Bool {
        func list(_ l: [String]?) -> PostgresValue { l.map { .array($0.map { .text($0) }, of: .text) } ?? .null }
        let parameters: [PostgresValue] = [
            .text(record.name), .text(record.url), list(record.eventTypes), list(record.environments), .bool(record.enabled),
            .optional(record.disabledReason), .text(record.origin), .text(record.secret), .optional(record.previousSecret),
            .optional(record.previousSecretUntil), .text(record.secretFingerprint), .int64(record.lastPosition), .int64(record.updatedAt),
        ]
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    """
                    INSERT INTO webhooks.endpoints (name, url, event_types, environments, enabled, disabled_reason, origin, secret,
                                                    previous_secret, previous_secret_until, secret_fingerprint, last_position, updated_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                    ON CONFLICT (name) DO UPDATE SET
                        url = EXCLUDED.url, event_types = EXCLUDED.event_types, environments = EXCLUDED.environments,
                        enabled = EXCLUDED.enabled, disabled_reason = EXCLUDED.disabled_reason, origin = EXCLUDED.origin,
                        secret = EXCLUDED.secret, previous_secret = EXCLUDED.previous_secret,
                        previous_secret_until = EXCLUDED.previous_secret_until, secret_fingerprint = EXCLUDED.secret_fingerprint,
                        last_position = EXCLUDED.last_position, updated_at = EXCLUDED.updated_at
                    WHERE webhooks.endpoints.last_position < EXCLUDED.last_position
                    RETURNING name
                    """, parameters, name: "webhook endpoint apply").rows.count == 1
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// A text[] read as JSON (array_to_json): nil for SQL null.
    static func list(_ text: String?) throws -> [String]? {
        guard let text else { return nil }
        return try JSONDecoder().decode([String].self, from: Data(text.utf8))
    }

    /// Prepared (both texts are fixed): every delivery attempt reads its endpoint.
    private func rows(_ sql: String, _ parameters: [PostgresValue]) async throws(StoreError) -> [WebhookEndpointRecord] {
        do {
            return try await pool.withConnection { connection in
                try connection.queryPrepared(sql, parameters, name: "webhook endpoints").rows.map { row in
                    WebhookEndpointRecord(
                        name: try row.decode(String.self, "name"), url: try row.decode(String.self, "url"),
                        eventTypes: try Self.list(try row.decode(String?.self, "event_types")),
                        environments: try Self.list(try row.decode(String?.self, "environments")),
                        enabled: try row.decode(Bool.self, "enabled"), disabledReason: try row.decode(String?.self, "disabled_reason"),
                        origin: try row.decode(String.self, "origin"), secret: try row.decode(String.self, "secret"),
                        previousSecret: try row.decode(String?.self, "previous_secret"),
                        previousSecretUntil: try row.decode(Int64?.self, "previous_secret_until"),
                        secretFingerprint: try row.decode(String.self, "secret_fingerprint"),
                        lastPosition: try row.decode(Int64.self, "last_position"), updatedAt: try row.decode(Int64.self, "updated_at"))
                }
            }
        } catch {
            throw StoreError(error)
        }
    }
}

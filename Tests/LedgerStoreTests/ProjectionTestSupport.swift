import Foundation
import LedgerCore
import LedgerTesting
import Postgres
import XCTest
@testable import LedgerStore

/// A `TestDatabase` (fresh, migrated) with the projection tests' helpers: `admin` is the
/// superuser, `service` the restricted `ledger_service` role the service runs as.
final class ProjectionScratchDatabase {
    let database: TestDatabase
    var admin: String { database.adminConninfo }
    var service: String { database.serviceConninfo }

    init() throws {
        database = try TestDatabase.create(prefix: "projections_test")
    }

    func drop() {
        try? database.drop()
    }

    /// A store on this database as the service role (the tests' way in).
    func store(poolSize: Int = 4) -> Store {
        database.store(poolSize: poolSize, catalog: ProjectionFixture.catalog, liveProjections: false)
    }

    func connect(as role: TestDatabase.Role = .admin) throws -> Connection { try database.connect(as: role) }

    func adminQuery(_ sql: String, _ parameters: [PostgresValue] = []) throws -> QueryResult {
        try database.query(sql, parameters)
    }

    func adminScript(_ sql: String) throws {
        try database.script(sql)
    }

    /// Every row of every projection table, as text, in a stable order (for equality checks).
    func dumpTables() throws -> [String: [String]] {
        let connection = try database.connect()
        var out: [String: [String]] = [:]
        for table in ["subscriptions", "transactions", "entitlements", "customer_subscriptions"] {
            let result = try connection.query("SELECT t::text AS row FROM projections.\(table) t ORDER BY t::text COLLATE \"C\"")
            out[table] = try result.rows.map { try $0.decode(String.self, "row") }
        }
        return out
    }

    func checkpoints() throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        // Refund cases, WeChat contracts and reports are projections of their own, tested on their
        // own (the Apple status check is kept by the same worker and stays in these expectations).
        for row in try adminQuery("SELECT projection, position FROM projection_checkpoints WHERE projection NOT IN ('refund_cases', 'wechat_contracts', 'reports')").rows {
            out[try row.decode(String.self, "projection")] = try row.decode(Int64.self, "position")
        }
        return out
    }
}

enum ProjectionFixture {
    static let start: EpochMillis = 1_735_689_600_000  // 2025-01-01
    static let day: EpochMillis = 86_400_000
    static let catalog = ProductCatalog(entitlementsByProduct: [
        "com.example.monthly": ["basic"], "com.example.yearly": ["basic"],
        "com.example.premium.monthly": ["basic", "premium"], "com.example.premium.yearly": ["basic", "premium"],
    ])

    /// Generated lifecycles' events in delivery order (duplicates included, as Apple retries).
    static func events(customers: Int, days: Int = 400, seed: UInt64) throws -> [NewEvent] {
        let generator = LifecycleGenerator(customers: customers, days: days, start: start, seed: seed)
        return try generator.notificationsInDeliveryOrder().map { try $0.recordedEvent(position: 0, recordedAt: 0).event }
    }

    /// An Apple event whose payload exercises the extraction: fractional milliseconds, text
    /// needing COPY escapes (tab, newline, backslash) and non-ASCII text.
    static func hostileEvent(stream: String, customer: String) -> NewEvent {
        let quotedCustomer = String(decoding: try! JSONEncoder().encode(customer), as: UTF8.self)
        let quotedStream = String(decoding: try! JSONEncoder().encode(stream), as: UTF8.self)
        let quotedUUID = String(decoding: try! JSONEncoder().encode("hostile-" + stream), as: UTF8.self)
        let payload = """
            {"notificationType":"SUBSCRIBED","subtype":"INITIAL_BUY","notificationUUID":\(quotedUUID),
             "signedDate":1735689600000.6,
             "data":{"bundleId":"com.example.app","environment":"Sandbox","status":1},
             "transactionInfo":{"transactionId":"h\\t1\\\\x","originalTransactionId":\(quotedStream),
               "productId":"com.example.premium.monthly","purchaseDate":1735689600000.4,
               "expiresDate":1893456000000,"signedDate":1735689600000.5,"price":9990,"currency":"EUR",
               "offerIdentifier":"ofr\\nline é✓","appAccountToken":\(quotedCustomer),"environment":"Sandbox",
               "type":"Auto-Renewable Subscription","inAppOwnershipType":"PURCHASED","isUpgraded":false},
             "renewalInfo":{"originalTransactionId":\(quotedStream),"productId":"com.example.premium.monthly",
               "autoRenewProductId":"com.example.premium.monthly","autoRenewStatus":1,
               "signedDate":1735689600000.6,"offerIdentifier":"tab\\there"}}
            """
        return NewEvent(
            streamId: stream, dedupeKey: "hostile-\(stream)", source: .apple, type: "SUBSCRIBED/INITIAL_BUY",
            environment: "Sandbox", signedAt: 1_735_689_600_001, expiresAt: 1_893_456_000_000,
            payload: Data(payload.utf8), raw: Data("raw evidence".utf8))
    }

    /// The pure fold of every stored event, decoded again by `FactDecoder` (what the store's fact
    /// path must agree with; the differential tests hold the independent oracle).
    static func oracle(_ store: EventStore) async throws -> SubscriptionProjection {
        SubscriptionProjection(facts: try await decodedFacts(store))
    }

    static func decodedFacts(_ store: EventStore) async throws -> [Fact] {
        var facts: [Fact] = []
        var after: Int64 = 0
        while true {
            let page = try await store.readAll(after: after, limit: 1000)
            guard let last = page.last else { break }
            facts += page.flatMap(FactDecoder.facts(of:))
            after = last.position
        }
        return facts
    }

    static func key(_ otid: String, _ environment: String = "Production") -> SubscriptionKey {
        SubscriptionKey(environment: environment, originalTransactionId: otid)
    }

    static func append(_ events: [NewEvent], to store: EventStore, chunk: Int = 25) async throws {
        var index = 0
        while index < events.count {
            _ = try await store.append(Array(events[index..<min(index + chunk, events.count)]))
            index += chunk
        }
    }
}

import Crypto
import Foundation
import LedgerMetrics
import LedgerCore
import LedgerStore
import Synchronization

/// The product catalog a service runs with, recorded as a `config/catalog` event (stream
/// `ledger:config`) whenever it differs from the last one recorded, so `?recordedAt=` answers with
/// the catalog of that time and `/readyz` can tell instances running different catalogs apart.
enum CatalogRecord {
    /// Canonical JSON of the catalog: `{"products": {…}}`, or `{"productIdsAsEntitlements": true}`
    /// for the default (each product grants an entitlement named after itself).
    static func canonical(_ catalog: ProductCatalog) -> Data {
        if catalog.grantsProductIds { return Data(#"{"productIdsAsEntitlements":true}"#.utf8) }
        var products: [String: JSONValue] = [:]
        for (id, product) in catalog.products {
            products[id] = .object(["entitlements": .array(Array(Set(product.entitlements)).sorted().map(JSONValue.string))])
        }
        return JSONValue.object(["products": .object(products)]).canonicalJSON()
    }

    /// Hex SHA-256 of the canonical JSON.
    static func digest(_ catalog: ProductCatalog) -> String {
        Hex.encode(Digest.sha256([UInt8](canonical(catalog))))
    }

    /// The event recording `catalog`, after the recorded catalog at `afterPosition` (0: none; see
    /// `DedupeKey.catalog`).
    static func event(_ catalog: ProductCatalog, afterPosition: Int64, instance: String, at: EpochMillis) -> NewEvent {
        let digest = digest(catalog)
        let catalogValue = (try? JSONDecoder().decode(JSONValue.self, from: canonical(catalog))) ?? .null
        let payload = JSONValue.object([
            "digest": .string(digest), "catalog": catalogValue, "instance": .string(instance),
        ]).canonicalJSON()
        return NewEvent(streamId: StreamId.ledgerConfig.text, dedupeKey: DedupeKey.catalog(digest: digest, afterPosition: afterPosition), source: .ledger,
                        type: LedgerEventType.catalog, signedAt: at, payload: payload, raw: payload)
    }

    /// The catalog a `catalog` fact recorded.
    static func catalog(of fact: Fact) -> ProductCatalog? {
        guard let text = fact.details["catalog"]?.text ?? fact.details["catalog"].map({ String(decoding: $0.canonicalJSON(), as: UTF8.self) })
        else { return nil }
        if text.contains("productIdsAsEntitlements") { return .productIds }
        return try? ProductCatalog.decode(json: Data(text.utf8))
    }

    static func digest(of fact: Fact) -> String? { fact.details["digest"]?.text }
}

/// Use case: the catalog this instance runs with — recorded at start when it changed, reported in
/// `/readyz`, and checked against the products customers actually hold (`/metrics`).
final class CatalogKeeper: Sendable {
    let store: Store
    let catalog: ProductCatalog
    let log: Log
    /// Unmapped products already logged (each is logged once per process).
    private let unmappedLogged = Mutex<Set<String>>([])

    init(store: Store, catalog: ProductCatalog, log: Log) {
        self.store = store
        self.catalog = catalog
        self.log = log
    }

    /// Records this instance's catalog as a `config/catalog` event when its digest differs from the
    /// last one recorded (`serve` calls it at start; every instance may, the dedupe key makes two
    /// instances starting together record one transition). Returns whether it recorded one.
    @discardableResult
    func recordIfChanged() async throws -> Bool {
        let recorded = try await store.projections.recordedCatalogs()
        let digest = CatalogRecord.digest(catalog)
        if let last = recorded.last, CatalogRecord.digest(of: last) == digest { return false }
        let event = CatalogRecord.event(catalog, afterPosition: recorded.last?.position ?? 0,
                                        instance: ProcessInfo.processInfo.hostName + ":" + String(getpid()), at: Clock.nowMillis())
        let outcome = try await store.events.append(event)
        if !outcome.duplicate {
            log.info("recorded the product catalog", ["digest": String(digest.prefix(16)), "default": catalog.grantsProductIds])
        }
        return !outcome.duplicate
    }

    /// `/readyz` detail: which catalog this instance runs, and whether it is the last one recorded
    /// (instances started with different catalogs answer entitlements differently).
    func health() async -> JSONValue {
        let digest = CatalogRecord.digest(catalog)
        var out: [String: JSONValue] = ["digest": .string(digest), "products": .integer(Int64(catalog.products.count))]
        if catalog.grantsProductIds {
            out["default"] = true
            out["note"] = "no product catalog is configured: each product grants an entitlement named after its productId"
        }
        if let last = try? await store.projections.recordedCatalogs().last, let recorded = CatalogRecord.digest(of: last) {
            out["lastRecordedDigest"] = .string(recorded)
            if recorded != digest {
                out["mismatch"] = .string("this instance's catalog differs from the last one recorded (position \(last.position)); instances running different catalogs grant different entitlements")
            }
        }
        return .object(out)
    }

    /// Products of entitled subscriptions the configured catalog does not list: counted in
    /// `/metrics` (`ledger_unmapped_products`) and logged once per product.
    func registerUnmappedProductsMetric(_ metrics: MetricsRegistry) {
        guard !catalog.grantsProductIds else { return }
        metrics.collect("ledger_unmapped_products", help: "Products of entitled subscriptions that the product catalog does not list") { [self] in
            guard let products = try? await store.projections.unmappedProducts(now: Clock.nowMillis()) else { return nil }
            let fresh = unmappedLogged.withLock { logged in products.filter { logged.insert($0).inserted } }
            for product in fresh {
                log.warn("an active product is missing from the product catalog; it grants no entitlement", ["productId": product])
            }
            return [(labels: [:], value: Double(products.count))]
        }
    }
}

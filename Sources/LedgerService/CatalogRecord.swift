import Crypto
import Foundation
import LedgerCore
import LedgerStore

/// The product catalog a service runs with, recorded as a `config/catalog` event (stream
/// `ledger:config`) whenever it differs from the last one recorded, so `?recordedAt=` answers with
/// the catalog of that time and `/readyz` can tell instances running different catalogs apart.
enum CatalogRecord {
    /// Canonical JSON of the catalog: `{"products": {…}}`, or `{"productIdsAsEntitlements": true}`
    /// for the default (each product grants an entitlement named after itself).
    static func canonical(_ catalog: ProductCatalog) -> Data {
        if catalog.grantsProductIds { return Data(#"{"productIdsAsEntitlements":true}"#.utf8) }
        var products: [String: PushValue] = [:]
        for (id, product) in catalog.products {
            products[id] = .object(["entitlements": .array(Array(Set(product.entitlements)).sorted().map(PushValue.string))])
        }
        return PushValue.object(["products": .object(products)]).canonicalJSON()
    }

    /// Hex SHA-256 of the canonical JSON.
    static func digest(_ catalog: ProductCatalog) -> String {
        Hex.encode(Digest.sha256([UInt8](canonical(catalog))))
    }

    /// The event recording `catalog`, after the recorded catalog at `afterPosition` (0: none): the
    /// dedupe key names both, so two instances starting together record one transition, and going
    /// back to an earlier catalog is recorded again.
    static func event(_ catalog: ProductCatalog, afterPosition: Int64, instance: String, at: EpochMillis) -> NewEvent {
        let digest = digest(catalog)
        let catalogValue = (try? JSONDecoder().decode(PushValue.self, from: canonical(catalog))) ?? .null
        let payload = PushValue.object([
            "digest": .string(digest), "catalog": catalogValue, "instance": .string(instance),
        ]).canonicalJSON()
        return NewEvent(streamId: StreamNames.ledgerConfig, dedupeKey: "catalog:\(digest):after:\(afterPosition)", source: .ledger,
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

import Foundation

/// Which entitlements each product grants, from the configuration file:
/// `{"products": {"com.example.monthly": {"entitlements": ["premium"]}}}`.
/// Changing it changes no event: the entitlements projection is simply rebuilt (the service
/// records each catalog it starts with as a `config/catalog` event, so `?recordedAt=` answers
/// with the catalog of that time).
///
/// Without a configured catalog (`ProductCatalog.productIds`), every product grants one
/// entitlement named after its productId, so a newcomer sees active subscribers entitled at once.
///
/// `durationDays` (optional) is a product's period. For a WeChat subscription product it bounds
/// where a delivery without PaidTime starts (no earlier than its RenewalDate minus the period;
/// docs/projections.md). For an Apple **non-renewing subscription** it is how long it grants from its purchase:
/// Apple states no expiry for one ("the app is responsible for the duration" of a Non-Renewing
/// Subscription), so without `durationDays` it grants nothing (its status is `purchased`, like a
/// consumable): `{"products": {"com.example.season": {"entitlements": ["premium"], "durationDays": 90}}}`.
public struct ProductCatalog: Sendable, Hashable, Codable {
    public struct Product: Sendable, Hashable, Codable {
        public var entitlements: [String]
        /// Non-renewing subscriptions: days of access from the purchase (nil: none).
        public var durationDays: Int?
        public init(entitlements: [String], durationDays: Int? = nil) {
            self.entitlements = entitlements
            self.durationDays = durationDays
        }
    }

    public var products: [String: Product]
    /// True for the default catalog: each product grants an entitlement named after its productId.
    public var grantsProductIds: Bool

    public init(products: [String: Product]) {
        self.products = products
        self.grantsProductIds = false
    }

    /// The catalog used when none is configured.
    public static let productIds: ProductCatalog = {
        var c = ProductCatalog(products: [:])
        c.grantsProductIds = true
        return c
    }()

    enum CodingKeys: String, CodingKey { case products }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        products = try c.decode([String: Product].self, forKey: .products)
        grantsProductIds = false
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(products, forKey: .products)
    }

    /// Whether the catalog names the product (the default catalog names every product).
    public func lists(_ productId: String) -> Bool { grantsProductIds || products[productId] != nil }

    /// productId → entitlement names.
    public init(entitlementsByProduct: [String: [String]]) {
        self.init(products: entitlementsByProduct.mapValues { Product(entitlements: $0) })
    }

    /// Decodes and checks the catalog; every error says where in the JSON the problem is.
    public static func decode(json: Data) throws(ProductCatalogError) -> ProductCatalog {
        let catalog: ProductCatalog
        do {
            catalog = try JSONDecoder().decode(ProductCatalog.self, from: json)
        } catch {
            throw .malformed(reason: String(describing: error))
        }
        for (productId, product) in catalog.products {
            if productId.isEmpty { throw .emptyProductId }
            for name in product.entitlements where name.trimmingCharacters(in: .whitespaces).isEmpty {
                throw .emptyEntitlement(productId: productId)
            }
            if let days = product.durationDays, !(1...36_500).contains(days) {
                throw .invalidDuration(productId: productId, days: days)
            }
        }
        return catalog
    }

    /// Product → `durationDays` in ms, for every product that states it: a WeChat subscription
    /// product's period (the first basis of where a delivery without PaidTime starts,
    /// `SubscriptionFold.catalogPeriods`). A fold built without it uses the messages' own periods.
    public var periods: [String: EpochMillis] {
        products.compactMapValues { $0.durationDays.map { EpochMillis($0) * 86_400_000 } }
    }

    /// How long a non-renewing purchase of the product grants, in ms (nil: the catalog states none).
    public func nonRenewingDuration(of productId: String) -> EpochMillis? {
        products[productId]?.durationDays.map { EpochMillis($0) * 86_400_000 }
    }

    /// Entitlements of a product, sorted and without repeats; empty for a product not listed
    /// (the default catalog grants `[productId]`).
    public func entitlements(for productId: String) -> [String] {
        if grantsProductIds { return [productId] }
        guard let names = products[productId]?.entitlements else { return [] }
        return Array(Set(names)).sorted()
    }
}

public enum ProductCatalogError: Error, Equatable, CustomStringConvertible {
    case malformed(reason: String)
    case emptyProductId
    case emptyEntitlement(productId: String)
    case invalidDuration(productId: String, days: Int)

    public var description: String {
        switch self {
        case .malformed(let reason):
            return "the product catalog is not of the form {\"products\": {\"<productId>\": {\"entitlements\": [\"<name>\", …]}}}: \(reason)"
        case .emptyProductId:
            return "the product catalog lists a product with an empty id; use the App Store productId as the key"
        case .emptyEntitlement(let productId):
            return "product \(productId) in the product catalog grants an empty entitlement name; remove it or name it"
        case .invalidDuration(let productId, let days):
            return "product \(productId) in the product catalog has durationDays \(days); give the product's period in days (what a non-renewing purchase of it grants; a WeChat subscription product's period), 1 to 36500"
        }
    }
}

/// One entitlement a customer holds through one subscription at the evaluation time.
public struct EntitlementGrant: Sendable, Hashable, Codable {
    public var customerId: String
    /// `Production` or `Sandbox`: the environment of the subscription that grants it.
    public var environment: String
    public var entitlement: String
    public var productId: String
    public var originalTransactionId: String
    /// Until when access lasts if nothing else happens (the grace end during a grace period).
    public var expiresDate: EpochMillis?
    public var status: SubscriptionStatus

    public init(
        customerId: String, environment: String, entitlement: String, productId: String, originalTransactionId: String,
        expiresDate: EpochMillis?, status: SubscriptionStatus
    ) {
        self.customerId = customerId
        self.environment = environment
        self.entitlement = entitlement
        self.productId = productId
        self.originalTransactionId = originalTransactionId
        self.expiresDate = expiresDate
        self.status = status
    }

    /// The grants one subscription state gives: none unless it is entitled (active or in grace;
    /// a non-renewing purchase for the catalog's `durationDays`, `entitlement(of:catalog:)`) and
    /// names a customer; one per entitlement of its current product.
    public static func grants(of state: SubscriptionState, catalog: ProductCatalog) -> [EntitlementGrant] {
        guard let customer = state.customerId, let product = state.productId,
              let (status, until) = entitlement(of: state, catalog: catalog) else { return [] }
        return catalog.entitlements(for: product).map {
            EntitlementGrant(
                customerId: customer, environment: state.environment ?? SubscriptionKey.production,
                entitlement: $0, productId: product,
                originalTransactionId: state.originalTransactionId, expiresDate: until, status: status)
        }
    }

    /// Whether a state (evaluated at its `evaluatedAt`) entitles, with the grant's status and end:
    /// active or in grace until `entitledUntil`; a non-renewing purchase (status `purchased`: Apple
    /// states no expiry) `active` from its purchase for the catalog's `durationDays`, and nothing
    /// without them or once refunded. Every reader of grants goes through this (the fold's, the
    /// table's re-evaluation, webhooks, drift).
    public static func entitlement(of state: SubscriptionState, catalog: ProductCatalog) -> (status: SubscriptionStatus, until: EpochMillis?)? {
        if state.status == .purchased, state.productType == ProductType.nonRenewing {
            guard let product = state.productId, let duration = catalog.nonRenewingDuration(of: product),
                  let start = state.purchaseDate, start <= state.evaluatedAt else { return nil }
            let end = start > EpochMillis.max - duration ? EpochMillis.max : start + duration
            return state.evaluatedAt < end ? (.active, end) : nil
        }
        return state.status.isEntitled ? (state.status, state.entitledUntil) : nil
    }

    /// Deterministic order for lists of grants.
    public static func ordered(_ a: EntitlementGrant, _ b: EntitlementGrant) -> Bool {
        (a.customerId, a.environment, a.entitlement, a.originalTransactionId, a.productId)
            < (b.customerId, b.environment, b.entitlement, b.originalTransactionId, b.productId)
    }
}

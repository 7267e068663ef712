import Foundation

/// One App Store Server API client per (environment, bundle id) the deployment is configured for
/// (issue 20 item 3): Apple's bearer token names one app (`bid`), so an account with several apps
/// needs one client per app, and each environment has its own host.
public struct AppStoreServerAPIClients: Sendable {
    /// environment → bundle id → client.
    private let byEnvironment: [String: [String: AppStoreServerAPIClient]]

    public init(_ clients: [AppStoreServerAPIClient]) {
        var map: [String: [String: AppStoreServerAPIClient]] = [:]
        for c in clients { map[c.environment.rawValue, default: [:]][c.configuration.bundleId] = c }
        byEnvironment = map
    }

    /// One client per environment (each client's own bundle id).
    public init(byEnvironment clients: [String: AppStoreServerAPIClient]) {
        self.init(Array(clients.values))
    }

    public var isEmpty: Bool { byEnvironment.isEmpty }
    public var environments: [String] { byEnvironment.keys.sorted() }
    public var bundleIds: [String] { Array(Set(byEnvironment.values.flatMap(\.keys))).sorted() }

    public func has(environment: String) -> Bool { byEnvironment[environment]?.isEmpty == false }

    /// The clients of an environment, in bundle id order.
    public func clients(environment: String) -> [(bundleId: String, client: AppStoreServerAPIClient)] {
        (byEnvironment[environment] ?? [:]).sorted { $0.key < $1.key }.map { (bundleId: $0.key, client: $0.value) }
    }

    /// The client for an app of an environment; an unknown or missing bundle id gets the first
    /// configured app's (Apple answers 4040010 when it is not that app's transaction).
    public func client(environment: String, bundleId: String?) -> AppStoreServerAPIClient? {
        guard let clients = byEnvironment[environment] else { return nil }
        if let bundleId, let c = clients[bundleId] { return c }
        return clients.min { $0.key < $1.key }?.value
    }
}

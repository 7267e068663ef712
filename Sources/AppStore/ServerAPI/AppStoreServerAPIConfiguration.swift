import Crypto
import Foundation
import Outbound

/// Apple's two App Store environments, spelled as Apple spells them in payloads.
public enum AppStoreEnvironment: String, Sendable, CaseIterable, Codable {
    case production = "Production"
    case sandbox = "Sandbox"

    /// reference/appstore-server-api.md §1 (the `*.itunes.apple.com` hosts still work but are no
    /// longer the recommended ones).
    public var defaultBaseURL: URL {
        switch self {
        case .production: URL(string: "https://api.storekit.apple.com")!
        case .sandbox: URL(string: "https://api.storekit-sandbox.apple.com")!
        }
    }

    /// Accepts `Production`/`Sandbox` in any case, and V1's `PROD`.
    public init?(text: String) {
        switch text.lowercased() {
        case "production", "prod": self = .production
        case "sandbox": self = .sandbox
        default: return nil
        }
    }
}

/// Why the App Store Server API cannot be configured; each says what to set.
public enum AppStoreServerAPIConfigurationError: Error, Equatable, CustomStringConvertible {
    case missing(variable: String, why: String)
    case invalid(variable: String, why: String)
    case unreadableKey(path: String, why: String)

    public var description: String {
        switch self {
        case .missing(let v, let why): "\(v) is not set: \(why)"
        case .invalid(let v, let why): "\(v) is invalid: \(why)"
        case .unreadableKey(let path, let why):
            "the In-App Purchase key at \(path) cannot be used: \(why). Download the .p8 of an In-App Purchase key (App Store Connect → Users and Access → Integrations → In-App Purchase) and point LEDGER_APPLE_API_PRIVATE_KEY at it."
        }
    }
}

/// What the App Store Server API client signs its requests with and where it sends them
/// (reference/appstore-server-api.md §2).
public struct AppStoreServerAPIConfiguration: Sendable {
    /// The issuer id of the App Store Connect team (a UUID), the JWT's `iss`.
    public var issuerId: String
    /// The In-App Purchase key's id, the JWT header's `kid`.
    public var keyId: String
    /// The In-App Purchase key (P-256).
    public var privateKey: ECPrivateKey
    /// The app's bundle id, the JWT's `bid` (Apple refuses tokens without it).
    public var bundleId: String
    /// When set, every request goes here instead of Apple's host of the environment — one URL for
    /// both Production and Sandbox (tests, a forward proxy). Its path, if any, is kept as a prefix.
    public var baseURL: URL?
    /// Lifetime of each token (a fresh token is signed per request). Apple refuses more than one
    /// hour; five minutes is what Apple's own library uses and leaves room for clock skew.
    public var tokenLifetimeSeconds: Int64 = 300
    /// Per HTTP attempt (Apple's libraries use 30 s).
    public var requestTimeoutSeconds: Double = 30
    public var retry = RetryPolicy()
    /// `baseURL` may be plain http to a loopback fake (tests; `LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK`).
    public let allowsPlainHTTPLoopback: Bool

    public init(issuerId: String, keyId: String, privateKey: ECPrivateKey, bundleId: String, baseURL: URL? = nil,
                allowsPlainHTTPLoopback: Bool = false) throws(AppStoreServerAPIConfigurationError) {
        guard !issuerId.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .missing(variable: "LEDGER_APPLE_API_ISSUER_ID", why: "give the issuer id shown above the keys in App Store Connect → Users and Access → Integrations")
        }
        guard !keyId.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .missing(variable: "LEDGER_APPLE_API_KEY_ID", why: "give the id of the In-App Purchase key (e.g. 2X9R4HXF34)")
        }
        guard !bundleId.isEmpty else {
            throw .missing(variable: "LEDGER_APPLE_API_BUNDLE_ID", why: "Apple refuses tokens without the app's bundle id (bid)")
        }
        guard privateKey.curve == .p256 else {
            throw .invalid(variable: "LEDGER_APPLE_API_PRIVATE_KEY", why: "the key is not a P-256 EC key; an In-App Purchase key (.p8) is")
        }
        self.allowsPlainHTTPLoopback = allowsPlainHTTPLoopback
        if let baseURL {
            do { try Self.target(baseURL, allowsPlainHTTPLoopback, timeout: 30).validate() } catch {
                throw .invalid(variable: "LEDGER_APPLE_API_BASE_URL", why: error.message)
            }
        }
        self.issuerId = issuerId
        self.keyId = keyId
        self.privateKey = privateKey
        self.bundleId = bundleId
        self.baseURL = baseURL
    }

    /// Reads the key from a `.p8` file (PKCS#8 PEM, `BEGIN PRIVATE KEY`).
    public static func loadPrivateKey(path: String) throws(AppStoreServerAPIConfigurationError) -> ECPrivateKey {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .unreadableKey(path: path, why: "the file does not exist or this user may not read it")
        }
        let key: ECPrivateKey
        do { key = try ECPrivateKey(pem: [UInt8](data)) } catch {
            throw .unreadableKey(path: path, why: "it is not a PEM private key (\(error))")
        }
        guard key.curve == .p256 else { throw .unreadableKey(path: path, why: "it is not a P-256 EC key") }
        return key
    }

    /// The configuration from `LEDGER_APPLE_API_ISSUER_ID`, `LEDGER_APPLE_API_KEY_ID`,
    /// `LEDGER_APPLE_API_PRIVATE_KEY` (path of the .p8), `LEDGER_APPLE_API_BASE_URL` (optional) and
    /// `LEDGER_APPLE_API_BUNDLE_ID`, else the first of `LEDGER_APPLE_BUNDLE_IDS`. Nil when none of
    /// the three credentials is set (the API is simply not configured); an error when only some are.
    public static func fromEnvironment(_ environment: [String: String]) throws(AppStoreServerAPIConfigurationError) -> AppStoreServerAPIConfiguration? {
        let allowsLoopback = OutboundTarget.allowsPlainHTTPLoopback(environment: environment)
        func value(_ name: String) -> String? {
            guard let v = environment[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !v.isEmpty else { return nil }
            return v
        }
        let names = ["LEDGER_APPLE_API_ISSUER_ID", "LEDGER_APPLE_API_KEY_ID", "LEDGER_APPLE_API_PRIVATE_KEY"]
        let given = names.map(value)
        if given.allSatisfy({ $0 == nil }) { return nil }
        for (name, v) in zip(names, given) where v == nil {
            throw .missing(variable: name, why: "the App Store Server API needs all of \(names.joined(separator: ", ")) (the others are set)")
        }
        let bundleId = value("LEDGER_APPLE_API_BUNDLE_ID")
            ?? value("LEDGER_APPLE_BUNDLE_IDS")?.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.first { !$0.isEmpty }
        guard let bundleId else {
            throw .missing(variable: "LEDGER_APPLE_API_BUNDLE_ID", why: "set it (or LEDGER_APPLE_BUNDLE_IDS) to the app's bundle id")
        }
        var base: URL?
        if let text = value("LEDGER_APPLE_API_BASE_URL") {
            guard let url = URL(string: text) else { throw .invalid(variable: "LEDGER_APPLE_API_BASE_URL", why: "\(text) is not a URL") }
            base = url
        }
        let key = try loadPrivateKey(path: given[2]!)
        return try AppStoreServerAPIConfiguration(issuerId: given[0]!, keyId: given[1]!, privateKey: key, bundleId: bundleId, baseURL: base,
                                                  allowsPlainHTTPLoopback: allowsLoopback)
    }

    /// Where requests for `environment` go.
    public func baseURL(for environment: AppStoreEnvironment) -> URL { baseURL ?? environment.defaultBaseURL }

    /// The outbound target `apple_api` for `environment`.
    public func outboundTarget(for environment: AppStoreEnvironment) -> OutboundTarget {
        Self.target(baseURL(for: environment), allowsPlainHTTPLoopback, timeout: requestTimeoutSeconds)
    }

    static func target(_ base: URL, _ allowsLoopback: Bool, timeout: Double) -> OutboundTarget {
        OutboundTarget(name: "apple_api", baseURL: base, setting: "LEDGER_APPLE_API_BASE_URL", allowsPlainHTTPLoopback: allowsLoopback,
                       timeout: .milliseconds(Int64(max(timeout, 0.001) * 1000)))
    }
}

/// Bounded retries with exponential backoff (full jitter), honouring `Retry-After`.
public struct RetryPolicy: Sendable {
    /// Attempts per request, the first included.
    public var maxAttempts = 5
    public var initialBackoff: Duration = .milliseconds(500)
    public var maxBackoff: Duration = .seconds(30)
    /// A `Retry-After` further away than this is not waited for: the request fails with
    /// `rateLimited(retryAt:)` at once, so a long job can re-queue the work instead of holding a
    /// connection (Apple enforces its limits per hour).
    public var maxRetryAfter: Duration = .seconds(60)
    /// How the client waits; tests record the waits instead of sleeping.
    public var sleep: @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) }
    /// The client's clock (ms since the epoch): each token's `iat`, and what `Retry-After` times
    /// are compared with.
    public var now: @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
    /// A number in 0..<1 for the jitter; tests may fix it.
    public var random: @Sendable () -> Double = { Double.random(in: 0..<1) }

    public init() {}

    /// The wait before attempt `attempt + 1` (attempt counts from 1) when the answer said nothing.
    func backoff(afterAttempt attempt: Int) -> Duration {
        let factor = 1 << min(max(attempt - 1, 0), 20)
        let ceiling = min(initialBackoff * factor, maxBackoff)
        // Full jitter, but never less than a tenth of the step: back-to-back retries help nobody.
        let fraction = max(0.1, min(1, random()))
        return ceiling * fraction
    }
}

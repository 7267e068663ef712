import Crypto
import Foundation
import LedgerCore
import LedgerStore

/// One configured webhook endpoint (file `webhooks.endpoints[]` or the `LEDGER_WEBHOOK_*`
/// variables). The secret never prints itself.
public struct WebhookEndpointSettings: Sendable, Equatable {
    public var name: String
    public var url: String
    /// `whsec_<base64>`, checked on reading.
    public var secret: Secret
    /// Nil: every type.
    public var eventTypes: Set<WebhookEventType>?
    /// Nil: Production and Sandbox.
    public var environments: Set<String>?
    public var enabled: Bool

    public init(name: String, url: String, secret: Secret, eventTypes: Set<WebhookEventType>? = nil,
                environments: Set<String>? = nil, enabled: Bool = true) {
        self.name = name
        self.url = url
        self.secret = secret
        self.eventTypes = eventTypes
        self.environments = environments
        self.enabled = enabled
    }

    /// Names are path segments and metric labels: lowercase letters, digits, `_.-`, up to 63.
    static func validName(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 63 else { return false }
        func ok(_ b: UInt8, first: Bool) -> Bool {
            (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || (!first && (b == 0x5F || b == 0x2E || b == 0x2D))
        }
        return ok(first, first: true) && name.utf8.dropFirst().allSatisfy { ok($0, first: false) }
    }

    /// https, or plain http to a loopback host (a receiver on the same machine: tests, the demo).
    /// The outbound client enforces the same rule when it sends.
    static func checkURL(_ text: String, name: String) throws(ConfigurationError) {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
            throw .invalidValue(name: name, reason: "'\(text.prefix(200))' is not an absolute URL such as https://backend.example.com/hooks/ledger")
        }
        if url.user != nil || url.password != nil {
            throw .invalidValue(name: name, reason: "the URL carries credentials; the receiver authenticates the ledger by the signature, so remove them")
        }
        switch scheme {
        case "https": return
        case "http" where ["127.0.0.1", "::1", "[::1]", "localhost"].contains(host.lowercased()): return
        default:
            throw .invalidValue(name: name, reason: "'\(scheme)' URLs are refused: use https (plain http only to a loopback address)")
        }
    }

    static func secret(_ text: String, name: String) throws(ConfigurationError) -> Secret {
        do { _ = try WebhookSecret(text: text) } catch {
            throw .invalidValue(name: name, reason: "\(error)")
        }
        return Secret(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    static func eventTypes(_ names: [String], name: String) throws(ConfigurationError) -> Set<WebhookEventType> {
        var out = Set<WebhookEventType>()
        for n in names {
            guard let t = WebhookEventType(rawValue: n) else {
                throw .invalidValue(name: name, reason: "'\(n.prefix(80))' is not an event type; use any of \(WebhookEventType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            out.insert(t)
        }
        return out
    }

    static func environments(_ names: [String], name: String) throws(ConfigurationError) -> Set<String> {
        for n in names where n != SubscriptionKey.production && n != SubscriptionKey.sandbox {
            throw .invalidValue(name: name, reason: "'\(n.prefix(80))' is not an environment; use Production and/or Sandbox")
        }
        return Set(names)
    }

    /// Whether this endpoint takes an event of `type` in `environment` (`test` always passes).
    public func accepts(_ type: WebhookEventType, environment: String) -> Bool {
        if type == .test { return true }
        if let eventTypes, !eventTypes.contains(type) { return false }
        if let environments, !environments.contains(environment) { return false }
        return true
    }
}

/// The webhooks part of the configuration.
public struct WebhookSettings: Sendable, Equatable {
    public var endpoints: [WebhookEndpointSettings] = []
    /// A delivery is a success only with a 2xx within this.
    public var timeoutSeconds = 15
    /// When to try again (Svix's: at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h). Tests
    /// compress it; operators have no setting for it (the published schedule is the contract).
    public var schedule: RetrySchedule = WebhookOutbox.schedule
    /// An endpoint whose first failure since its last success is this old is disabled (5 days).
    public var disableAfterMillis: EpochMillis = 5 * 86_400_000
    /// How often an idle delivery worker looks for due items, and how many it sends at once: each
    /// attempt's record is an append, and appends in flight together commit together, so the
    /// slots are many. One endpoint holds at most `perEndpoint` of them: a receiver that hangs
    /// until the timeout never takes the slots of the healthy ones.
    public var pollIntervalMillis: Int64 = 1000
    public var concurrency = 32
    public var perEndpoint = 16
    /// How long a claimed attempt keeps other instances off its event; after a crash the event is
    /// sent again (same `webhook-id`) once this passed. Longer than the timeout by design.
    public var leaseSeconds = 120
    /// How long an expiry at a renewal boundary (auto-renew on) waits for a renewal, grace period
    /// or billing retry that supersedes it before `subscription.expired` is derived
    /// (`WebhookDerivation.expirySettle`; 0 announces every expiry as it happens).
    public var expirySettleMinutes = Int(WebhookDerivation.defaultExpirySettle / 60_000)
    static let expirySettleRange = 0...1440
    /// `expirySettleMinutes` as the store takes it: every store that derives webhook events (the
    /// service, `ledger rebuild`, `ledger project`) must use the same, or a rebuild derives other
    /// events than the live path did.
    public var expirySettleMillis: EpochMillis { EpochMillis(expirySettleMinutes) * 60_000 }

    public init() {}

    /// `"webhooks": {"timeoutSeconds": 15, "endpoints": [{"name", "url", "secret" | "secretFile",
    /// "eventTypes", "environments", "enabled"}]}`.
    mutating func apply(file value: Any, path: String) throws(ConfigurationError) {
        guard let object = value as? [String: Any] else {
            throw .invalidJSON(path: path, reason: #"webhooks must be an object {"timeoutSeconds": 15, "endpoints": [...]}"#)
        }
        if let t = object["timeoutSeconds"] {
            guard let n = t as? Int, (1...60).contains(n) else { throw .invalidJSON(path: path, reason: "webhooks.timeoutSeconds must be an integer from 1 to 60") }
            timeoutSeconds = n
        }
        if let t = object["expirySettleMinutes"] {
            guard let n = t as? Int, Self.expirySettleRange.contains(n) else {
                throw .invalidJSON(path: path, reason: "webhooks.expirySettleMinutes must be an integer from 0 to 1440 (minutes), e.g. 360")
            }
            expirySettleMinutes = n
        }
        guard let list = object["endpoints"] else { return }
        guard let entries = list as? [[String: Any]] else { throw .invalidJSON(path: path, reason: "webhooks.endpoints must be an array of objects") }
        for (i, e) in entries.enumerated() {
            let at = "webhooks.endpoints[\(i)]"
            guard let name = e["name"] as? String, WebhookEndpointSettings.validName(name) else {
                throw .invalidJSON(path: path, reason: "\(at).name must be lowercase letters, digits and _.- (up to 63), e.g. backend")
            }
            guard !endpoints.contains(where: { $0.name == name }) else { throw .invalidJSON(path: path, reason: "\(at).name \(name) is used twice") }
            guard let url = e["url"] as? String else { throw .invalidJSON(path: path, reason: "\(at).url must be a string") }
            try WebhookEndpointSettings.checkURL(url, name: "\(at).url")
            let secretText: String
            switch (e["secret"], e["secretFile"]) {
            case (let s as String, nil): secretText = s
            case (nil, let file as String):
                guard let data = FileManager.default.contents(atPath: file) else {
                    throw .invalidValue(name: "\(at).secretFile", reason: "cannot read \(file); check that the file exists and this user may read it")
                }
                secretText = String(decoding: data, as: UTF8.self)
            default:
                throw .invalidJSON(path: path, reason: "\(at) needs exactly one of secret (whsec_…) or secretFile (a path)")
            }
            var endpoint = WebhookEndpointSettings(name: name, url: url, secret: try WebhookEndpointSettings.secret(secretText, name: "\(at).secret"))
            if let v = e["eventTypes"] {
                guard let a = v as? [String] else { throw .invalidJSON(path: path, reason: "\(at).eventTypes must be an array of strings") }
                endpoint.eventTypes = try WebhookEndpointSettings.eventTypes(a, name: "\(at).eventTypes")
            }
            if let v = e["environments"] {
                guard let a = v as? [String] else { throw .invalidJSON(path: path, reason: "\(at).environments must be an array of strings") }
                endpoint.environments = try WebhookEndpointSettings.environments(a, name: "\(at).environments")
            }
            if let v = e["enabled"] {
                guard let b = v as? Bool else { throw .invalidJSON(path: path, reason: "\(at).enabled must be true or false") }
                endpoint.enabled = b
            }
            endpoints.append(endpoint)
        }
    }

    /// `LEDGER_WEBHOOK_URL` and `LEDGER_WEBHOOK_SECRET` (or `_FILE`) define the endpoint named
    /// `LEDGER_WEBHOOK_NAME` (default `default`), replacing a file endpoint of that name;
    /// `LEDGER_WEBHOOK_EVENT_TYPES`, `LEDGER_WEBHOOK_ENVIRONMENTS` (comma-separated) and
    /// `LEDGER_WEBHOOK_ENABLED` filter it; `LEDGER_WEBHOOK_TIMEOUT_SECONDS` applies to all.
    mutating func apply(environment env: [String: String]) throws(ConfigurationError) {
        func list(_ name: String) -> [String]? {
            env[name].map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
        }
        if let v = env["LEDGER_WEBHOOK_TIMEOUT_SECONDS"] {
            guard let n = Int(v.trimmingCharacters(in: .whitespaces)), (1...60).contains(n) else {
                throw .invalidValue(name: "LEDGER_WEBHOOK_TIMEOUT_SECONDS", reason: "'\(v.prefix(40))' must be seconds from 1 to 60, e.g. 15")
            }
            timeoutSeconds = n
        }
        if let v = env["LEDGER_WEBHOOK_LEASE_SECONDS"] {
            guard let n = Int(v.trimmingCharacters(in: .whitespaces)), (2...3600).contains(n), n > timeoutSeconds else {
                throw .invalidValue(name: "LEDGER_WEBHOOK_LEASE_SECONDS",
                                    reason: "'\(v.prefix(40))' must be seconds from 2 to 3600, more than the delivery timeout (\(timeoutSeconds) s), e.g. 120")
            }
            leaseSeconds = n
        }
        if let v = env["LEDGER_WEBHOOK_EXPIRY_SETTLE_MINUTES"] {
            guard let n = Int(v.trimmingCharacters(in: .whitespaces)), Self.expirySettleRange.contains(n) else {
                throw .invalidValue(name: "LEDGER_WEBHOOK_EXPIRY_SETTLE_MINUTES",
                                    reason: "'\(v.prefix(40))' must be minutes from 0 to 1440 (0 announces every expiry as it happens), e.g. 360")
            }
            expirySettleMinutes = n
        }
        let url = env["LEDGER_WEBHOOK_URL"].flatMap { $0.isEmpty ? nil : $0 }
        let secret = env["LEDGER_WEBHOOK_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
        guard url != nil || secret != nil else { return }
        guard let url, let secret else {
            throw .invalidValue(name: url == nil ? "LEDGER_WEBHOOK_URL" : "LEDGER_WEBHOOK_SECRET",
                                reason: "an endpoint from the environment needs both LEDGER_WEBHOOK_URL and LEDGER_WEBHOOK_SECRET (or LEDGER_WEBHOOK_SECRET_FILE)")
        }
        let name = env["LEDGER_WEBHOOK_NAME"].flatMap { $0.isEmpty ? nil : $0 } ?? "default"
        guard WebhookEndpointSettings.validName(name) else {
            throw .invalidValue(name: "LEDGER_WEBHOOK_NAME", reason: "must be lowercase letters, digits and _.- (up to 63), e.g. backend")
        }
        try WebhookEndpointSettings.checkURL(url, name: "LEDGER_WEBHOOK_URL")
        var endpoint = WebhookEndpointSettings(name: name, url: url, secret: try WebhookEndpointSettings.secret(secret, name: "LEDGER_WEBHOOK_SECRET"))
        if let l = list("LEDGER_WEBHOOK_EVENT_TYPES"), !l.isEmpty {
            endpoint.eventTypes = try WebhookEndpointSettings.eventTypes(l, name: "LEDGER_WEBHOOK_EVENT_TYPES")
        }
        if let l = list("LEDGER_WEBHOOK_ENVIRONMENTS"), !l.isEmpty {
            endpoint.environments = try WebhookEndpointSettings.environments(l, name: "LEDGER_WEBHOOK_ENVIRONMENTS")
        }
        if let v = env["LEDGER_WEBHOOK_ENABLED"] {
            switch v {
            case "true", "1", "": endpoint.enabled = true
            case "false", "0": endpoint.enabled = false
            default: throw .invalidValue(name: "LEDGER_WEBHOOK_ENABLED", reason: "'\(v.prefix(40))' is not a boolean: true or false")
            }
        }
        endpoints.removeAll { $0.name == name }
        endpoints.append(endpoint)
    }
}

/// LedgerService owns the service: configuration, authentication, logging, metrics, and the HTTP
/// routes that turn verified notifications into events and projections into answers.
import Crypto
import Foundation
import Outbound
import LedgerCore

/// A secret value (token, key, shared secret). It never prints itself, so it cannot leak into a
/// log line or an error message by accident.
public struct Secret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    public let value: String
    public init(_ value: String) { self.value = value }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
}

public enum Role: String, Sendable, Codable, CaseIterable, Comparable {
    case app, auditor, admin
    /// Roles are nested: an auditor may do what an app may, an admin what an auditor may.
    private var rank: Int { switch self { case .app: 0; case .auditor: 1; case .admin: 2 } }
    public static func < (a: Role, b: Role) -> Bool { a.rank < b.rank }
}

public enum ConfigurationError: Error, Equatable, CustomStringConvertible {
    case unreadableFile(path: String, reason: String)
    case invalidJSON(path: String, reason: String)
    case invalidValue(name: String, reason: String)

    public var description: String {
        switch self {
        case .unreadableFile(let p, let r): return "cannot read configuration file \(p): \(r)"
        case .invalidJSON(let p, let r): return "configuration file \(p) is not valid: \(r)"
        case .invalidValue(let n, let r): return "\(n): \(r)"
        }
    }
}

/// Everything the service is configured with: one JSON file (`LEDGER_CONFIG`) with environment
/// variables on top (DESIGN.md §Interfaces). The JSON shape is documented in README §Configuration.
public struct LedgerConfiguration: Sendable {
    /// The evaluation time of the projections (a fold's status, which webhook events have taken
    /// effect): the machine's clock; tests set a `SettableClock` to replay a lifecycle as it happened.
    public var clock: LedgerClock = .system
    public struct Apple: Sendable {
        public var rootCertificatePaths: [String] = []
        public var bundleIds: Set<String> = []
        public var appAppleIds: Set<Int64> = []
        public var environments: Set<String> = ["Production"]
        public var sharedSecret: Secret?
        /// LEDGER_APPLE_ALLOW_TEST_ROOTS: lets a Production-accepting service trust a root that is
        /// not Apple's (test set-ups only; logged as a warning at start).
        public var allowTestRoots = false
        /// LEDGER_APPLE_V1_TRUSTED: a shared secret together with Production is refused at start
        /// unless this says whoever holds the secret may set state (Guards/GuardSettings.swift).
        public var v1Trusted = false
    }

    public struct WeChat: Sendable {
        public var appId: String?
        public var token: Secret?
        public var aesKey: Secret?
        /// The EncodingAESKey before the last rotation, still accepted while WeChat switches over.
        public var previousAESKey: Secret?
        public var appKey: Secret?
        /// The xpay offer id that signData names (wx.requestAppleSubscribeSign).
        public var offerId: String?
        /// Plaintext mode authenticates only the query string, not the body: off unless asked for.
        public var allowPlaintext = false
        public var apiBaseURL: String = "https://api.weixin.qq.com"
        /// The refund-inquiry policy, as the WeChatPay module reads it.
        public var refundPolicyJSON: Data?
        public var isConfigured: Bool { appId != nil && token != nil }
        /// The mini program's AppSecret, for `cgi-bin/stable_token` (`ledger reconcile --wechat`).
        public var appSecret: Secret?
        /// Older push keys (`WeChatKeyHistory` file) for re-verifying stored pushes.
        public var keyHistoryFile: String?
        /// Plaintext mode: a push whose `timestamp` is further than this from now is refused (and a
        /// nonce carries one body within it); other modes only count a stale timestamp.
        public var replayWindowSeconds = 300
        /// A refund inquiry is decided within this budget from its arrival; past it the fallback
        /// answer (`refundFallback`, rule `deadline`) is given instead.
        public var refundBudgetMs = 2500
        /// An answer not stored by this time from the asking's arrival is not sent: 503, WeChat asks
        /// again (it waits 3 s).
        public var refundAnswerDeadlineMs = 2900
        /// The fallback verdict: `allow` (recommend the refund: Apple decides, as when nobody
        /// answers) or `refuse`.
        public var refundFallback = "allow"
    }

    public struct HTTP: Sendable {
        public var maxBodyBytes: Int = 1 << 20
        public var connectionLimit: Int = 1024
        /// Connections one client address may hold open. On by default: one client cannot take
        /// every connection. Set 0 behind a trusted load balancer, where every request comes from
        /// the balancer's few addresses (the balancer then enforces per-client limits).
        public var perIPConnectionLimit: Int = 64
        public var connectionTimeoutSeconds: Int = 30
        /// Total time to deliver one request's headers and body (slowloris bound; the idle
        /// timeout above restarts with every byte).
        public var receiveDeadlineSeconds: Int = 30
        public var threadPoolSize: Int = 4
        /// Whole-request deadline for handlers: a handler still running after it is answered 503
        /// `handler_timeout` (Apple and WeChat retry) and cancelled.
        public var requestDeadlineSeconds: Int = 10
        /// Deadline for the admin routes that legitimately run long (rebuild, exports).
        public var adminDeadlineSeconds: Int = 3600
        /// LEDGER_TRUSTED_PROXIES (`http.trustedProxies`): the load balancers and proxies in front
        /// of the service, as networks. A request whose peer is one of them counts as coming from
        /// the right-most address of X-Forwarded-For (else Forwarded) that is not one of them;
        /// from any other peer those headers are ignored. Empty: the peer is the client.
        public var trustedProxies: [IPNetwork] = []
    }

    /// The auditor's pages (`/audit`, Audit/AuditRoutes.swift): how their session cookie is signed
    /// and whether it may travel over plain HTTP.
    public struct Audit: Sendable {
        /// LEDGER_SESSION_KEY (or `_FILE`, or `audit.sessionKey`): the HMAC key that signs session
        /// cookies and CSRF tokens, at least 32 bytes and the same on every instance, so any
        /// instance can check a session. Nil: a random key per process (sessions end at restart
        /// and other instances refuse them; a warning is logged at start).
        public var sessionKey: Secret?
        /// LEDGER_INSECURE_COOKIES=true: cookies without `Secure`, for local plain HTTP only
        /// (`make run`, `make demo`, the browser test).
        public var insecureCookies = false

        static func sessionKey(_ value: String, name: String) throws(ConfigurationError) -> Secret {
            guard value.utf8.count >= 32 else {
                throw .invalidValue(name: name, reason: "must be at least 32 bytes (e.g. `openssl rand -hex 32`); the value given is shorter")
            }
            return Secret(value)
        }
    }

    /// A bearer token, kept only as the SHA-256 of its bytes.
    public struct TokenHash: Sendable, Equatable {
        public var role: Role
        public var sha256: [UInt8]
    }

    /// Default: the embedded cluster of `make run` (scripts/db.sh writes its address to .pg/database.url).
    public var databaseURL: String = {
        let file = FileManager.default.currentDirectoryPath + "/.pg/database.url"
        if let s = try? String(contentsOfFile: file, encoding: .utf8) {
            let t = s.trimmingCharacters(in: .whitespacesAndNewlines)
            if !t.isEmpty { return t }
        }
        return "dbname=ledger user=ledger_service"
    }()
    /// LEDGER_READ_DATABASE_URL: a streaming replica for app and auditor reads (nil: the primary).
    public var readDatabaseURL: String?
    /// LEDGER_READ_REPLICA_MAX_LAG_SECONDS: reads without `?minPosition=` fall back to the primary
    /// when the replica is further behind than this.
    public var replicaMaxLagSeconds: Double = 2
    public var listenHost: String = "127.0.0.1"
    public var listenPort: Int = 8080
    /// LEDGER_ADMIN_LISTEN: a second listener serving only `/metrics` and the detailed `/readyz`
    /// without a token, for a scraper on a private network. Nil: those need the admin token on
    /// the main listener.
    public var adminListen: (host: String, port: Int)?
    public var databasePoolSize: Int = 16
    public var apple = Apple()
    /// The App Store Server API and verifyReceipt (AppleAPIConfiguration.swift).
    public var appleAPI = AppleAPI()
    public var wechat = WeChat()
    /// LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK=true: the outbound base URLs (Apple API,
    /// verifyReceipt, WeChat API) may be plain http to a loopback fake (tests only). Off: https only.
    public var outboundAllowsPlainHTTPLoopback = false
    public var http = HTTP()
    public var audit = Audit()
    /// Outbound webhooks (Webhooks/WebhookConfiguration.swift).
    public var webhooks = WebhookSettings()
    /// Long reads, app tokens' appends, failed authentication (Guards/GuardSettings.swift).
    public var limits = Limits()
    /// LEDGER_DEVELOPMENT=true: a development set-up, where settings refused in production (plaintext
    /// WeChat pushes) are allowed (Guards/GuardSettings.swift).
    public var development = false
    public var tokens: [TokenHash] = []
    /// `{"products": {…}}` as given; the projections read it as a product → entitlement catalog.
    /// Nil when the file has no `products`: every product then grants an entitlement named after
    /// its productId (`ProductCatalog.productIds`).
    public var productsJSON: Data?

    /// The catalog the projections use.
    public func catalog() throws(ProductCatalogError) -> ProductCatalog {
        guard let productsJSON else { return .productIds }
        return try ProductCatalog.decode(json: productsJSON)
    }

    public init() {}

    /// Variables that hold a secret (or a URL that may carry a password). Each may instead be given
    /// as `<NAME>_FILE`: the path of a file holding the value (Docker/Kubernetes secrets), so the
    /// secret is never in the process environment or a compose file.
    public static let secretVariables = [
        "LEDGER_DATABASE_URL", "LEDGER_ADMIN_DATABASE_URL", "LEDGER_READ_DATABASE_URL", "LEDGER_TOKENS",
        "LEDGER_APPLE_SHARED_SECRET", "LEDGER_WECHAT_TOKEN", "LEDGER_WECHAT_AES_KEY", "LEDGER_WECHAT_PREVIOUS_AES_KEY",
        "LEDGER_WECHAT_APP_KEY", "LEDGER_WECHAT_APP_SECRET", "LEDGER_SESSION_KEY",
        "LEDGER_APPLE_API_PRIVATE_KEY", "LEDGER_WEBHOOK_SECRET",
    ]

    /// The environment with every `<NAME>_FILE` of `secretVariables` read into `<NAME>`: the file's
    /// content without its trailing newline. Naming both, or an unreadable file, is an error that
    /// names the variable (never the content).
    public static func resolvingSecretFiles(_ environment: [String: String]) throws(ConfigurationError) -> [String: String] {
        var env = environment
        for name in secretVariables {
            guard let path = environment[name + "_FILE"], !path.isEmpty else { continue }
            if let direct = environment[name], !direct.isEmpty {
                throw .invalidValue(name: name + "_FILE", reason: "\(name) is set too; give the value or the file, not both")
            }
            guard let data = FileManager.default.contents(atPath: path) else {
                throw .invalidValue(name: name + "_FILE", reason: "cannot read \(path); check that the file exists and this user may read it")
            }
            var value = String(decoding: data, as: UTF8.self)
            while let last = value.unicodeScalars.last, last == "\n" || last == "\r" { value.unicodeScalars.removeLast() }
            guard !value.isEmpty else { throw .invalidValue(name: name + "_FILE", reason: "\(path) is empty") }
            env[name] = value
        }
        return env
    }

    /// Reads `LEDGER_CONFIG` (if set) and then the environment overrides (secrets possibly from `_FILE`s).
    public static func load(environment raw: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigurationError) -> LedgerConfiguration {
        let environment = try resolvingSecretFiles(raw)
        var config = LedgerConfiguration()
        if let path = environment["LEDGER_CONFIG"], !path.isEmpty {
            let data: Data
            do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
                throw .unreadableFile(path: path, reason: "\(error.localizedDescription)")
            }
            try config.apply(fileJSON: data, path: path)
        }
        try config.apply(environment: environment)
        return config
    }

    mutating func apply(fileJSON data: Data, path: String) throws(ConfigurationError) {
        let object: [String: Any]
        do {
            guard let o = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                throw ConfigurationError.invalidJSON(path: path, reason: "the top level must be a JSON object")
            }
            object = o
        } catch let e as ConfigurationError { throw e } catch {
            throw .invalidJSON(path: path, reason: "\(error.localizedDescription)")
        }
        func strings(_ v: Any?, _ name: String) throws(ConfigurationError) -> [String]? {
            guard let v else { return nil }
            guard let a = v as? [String] else { throw .invalidJSON(path: path, reason: "\(name) must be an array of strings") }
            return a
        }
        func string(_ v: Any?, _ name: String) throws(ConfigurationError) -> String? {
            guard let v else { return nil }
            guard let s = v as? String else { throw .invalidJSON(path: path, reason: "\(name) must be a string") }
            return s
        }
        if let s = try string(object["databaseURL"], "databaseURL") { databaseURL = s }
        if let s = try string(object["readDatabaseURL"], "readDatabaseURL") { readDatabaseURL = s }
        if let n = object["replicaMaxLagSeconds"] as? Double { replicaMaxLagSeconds = n }
        if let s = try string(object["listen"], "listen") { try setListen(s, name: "listen") }
        if let s = try string(object["adminListen"], "adminListen") { adminListen = try Self.hostPort(s, name: "adminListen") }
        if let apple = object["apple"] as? [String: Any] {
            if let a = try strings(apple["rootCertificates"], "apple.rootCertificates") { self.apple.rootCertificatePaths = a }
            if let a = try strings(apple["bundleIds"], "apple.bundleIds") { self.apple.bundleIds = Set(a) }
            if let a = try strings(apple["environments"], "apple.environments") { self.apple.environments = try Self.environments(a, name: "apple.environments") }
            if let ids = apple["appAppleIds"] {
                guard let nums = ids as? [NSNumber] else { throw .invalidJSON(path: path, reason: "apple.appAppleIds must be an array of integers") }
                self.apple.appAppleIds = Set(nums.map { $0.int64Value })
            }
            if let s = try string(apple["sharedSecret"], "apple.sharedSecret") { self.apple.sharedSecret = Secret(s) }
            if let api = apple["api"] as? [String: Any] { try appleAPI.apply(file: api, path: path) }
        }
        if let w = object["wechat"] as? [String: Any] {
            if let s = try string(w["appId"], "wechat.appId") { wechat.appId = s }
            if let s = try string(w["token"], "wechat.token") { wechat.token = Secret(s) }
            if let s = try string(w["aesKey"], "wechat.aesKey") { wechat.aesKey = Secret(s) }
            if let s = try string(w["previousAESKey"], "wechat.previousAESKey") { wechat.previousAESKey = Secret(s) }
            if let s = try string(w["appKey"], "wechat.appKey") { wechat.appKey = Secret(s) }
            if let s = try string(w["apiBaseURL"], "wechat.apiBaseURL") { wechat.apiBaseURL = s }
            if let s = try string(w["offerId"], "wechat.offerId") { wechat.offerId = s }
            if let b = w["allowPlaintext"] as? Bool { wechat.allowPlaintext = b }
            if let p = w["refundPolicy"] {
                wechat.refundPolicyJSON = try? JSONSerialization.data(withJSONObject: p, options: [.sortedKeys])
            }
            if let s = try string(w["appSecret"], "wechat.appSecret") { wechat.appSecret = Secret(s) }
            if let s = try string(w["keyHistoryFile"], "wechat.keyHistoryFile") { wechat.keyHistoryFile = s }
            if let n = w["replayWindowSeconds"] {
                guard let v = n as? Int else { throw .invalidJSON(path: path, reason: "wechat.replayWindowSeconds must be an integer") }
                wechat.replayWindowSeconds = v
            }
            if let r = w["refundInquiry"] {
                guard let o = r as? [String: Any] else {
                    throw .invalidJSON(path: path, reason: "wechat.refundInquiry must be an object {budgetMs, answerDeadlineMs, fallback}")
                }
                if let v = o["budgetMs"] {
                    guard let n = v as? Int else { throw .invalidJSON(path: path, reason: "wechat.refundInquiry.budgetMs must be an integer") }
                    wechat.refundBudgetMs = n
                }
                if let v = o["answerDeadlineMs"] {
                    guard let n = v as? Int else { throw .invalidJSON(path: path, reason: "wechat.refundInquiry.answerDeadlineMs must be an integer") }
                    wechat.refundAnswerDeadlineMs = n
                }
                if let f = try string(o["fallback"], "wechat.refundInquiry.fallback") { wechat.refundFallback = f }
            }
        }
        if let h = object["http"] as? [String: Any] {
            if let n = h["maxBodyBytes"] as? Int { http.maxBodyBytes = n }
            if let n = h["connectionLimit"] as? Int { http.connectionLimit = n }
            if let n = h["perIPConnectionLimit"] as? Int { http.perIPConnectionLimit = n }
            if let n = h["connectionTimeoutSeconds"] as? Int { http.connectionTimeoutSeconds = n }
            if let n = h["receiveDeadlineSeconds"] as? Int { http.receiveDeadlineSeconds = n }
            if let n = h["threadPoolSize"] as? Int { http.threadPoolSize = n }
            if let n = h["requestDeadlineSeconds"] as? Int { http.requestDeadlineSeconds = n }
            if let n = h["adminDeadlineSeconds"] as? Int { http.adminDeadlineSeconds = n }
            if let list = h["trustedProxies"] {
                guard let texts = list as? [String] else {
                    throw .invalidJSON(path: path, reason: #"http.trustedProxies must be an array of networks, e.g. ["10.0.0.0/8", "fd00::/8"]"#)
                }
                do { http.trustedProxies = try texts.map { t throws(IPNetworkError) in try IPNetwork(t) } } catch {
                    throw .invalidJSON(path: path, reason: "http.trustedProxies: \(error)")
                }
            }
        }
        if let a = object["audit"] as? [String: Any] {
            if let k = try string(a["sessionKey"], "audit.sessionKey") { audit.sessionKey = try Audit.sessionKey(k, name: "audit.sessionKey") }
            if let b = a["insecureCookies"] as? Bool { audit.insecureCookies = b }
        }
        if let w = object["webhooks"] { try webhooks.apply(file: w, path: path) }
        if let l = object["limits"] { try limits.apply(file: l, path: path) }
        if let n = object["databasePoolSize"] as? Int { databasePoolSize = n }
        if let list = object["tokens"] {
            // The file stores hashes, never plain tokens: {"role": "auditor", "sha256": "<hex>"}.
            guard let entries = list as? [[String: Any]] else { throw .invalidJSON(path: path, reason: "tokens must be an array of {role, sha256}") }
            for e in entries {
                guard let r = e["role"] as? String, let role = Role(rawValue: r) else {
                    throw .invalidJSON(path: path, reason: "tokens[].role must be one of app, auditor, admin")
                }
                guard let hex = e["sha256"] as? String, let bytes = Self.hexBytes(hex), bytes.count == 32 else {
                    throw .invalidJSON(path: path, reason: "tokens[].sha256 must be 64 hex digits (the SHA-256 of the token); plain tokens belong in LEDGER_TOKENS")
                }
                tokens.append(TokenHash(role: role, sha256: bytes))
            }
        }
        if let products = object["products"] {
            guard let p = products as? [String: Any] else { throw .invalidJSON(path: path, reason: "products must be an object keyed by productId") }
            productsJSON = try? JSONSerialization.data(withJSONObject: ["products": p], options: [.sortedKeys])
        }
    }

    mutating func apply(environment env: [String: String]) throws(ConfigurationError) {
        func list(_ name: String) -> [String]? {
            guard let v = env[name] else { return nil }
            return v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        if let v = env["LEDGER_DATABASE_URL"], !v.isEmpty { databaseURL = v }
        if let v = env["LEDGER_READ_DATABASE_URL"], !v.isEmpty { readDatabaseURL = v }
        outboundAllowsPlainHTTPLoopback = OutboundTarget.allowsPlainHTTPLoopback(environment: env)
        if let v = env["LEDGER_READ_REPLICA_MAX_LAG_SECONDS"] {
            guard let n = Double(v.trimmingCharacters(in: .whitespaces)), n.isFinite, n >= 0, n <= 86_400 else {
                throw .invalidValue(name: "LEDGER_READ_REPLICA_MAX_LAG_SECONDS", reason: "'\(v)' must be seconds from 0 to 86400, e.g. 2")
            }
            replicaMaxLagSeconds = n
        }
        if let v = env["LEDGER_LISTEN"], !v.isEmpty { try setListen(v, name: "LEDGER_LISTEN") }
        if let v = env["LEDGER_ADMIN_LISTEN"], !v.isEmpty { adminListen = try Self.hostPort(v, name: "LEDGER_ADMIN_LISTEN") }
        if let v = env["LEDGER_PER_IP_CONNECTION_LIMIT"] {
            http.perIPConnectionLimit = try Self.integer(v, name: "LEDGER_PER_IP_CONNECTION_LIMIT", in: 0...1_000_000,
                                                         example: "64, or 0 behind a trusted load balancer")
        }
        if let v = env["LEDGER_REQUEST_DEADLINE_SECONDS"] {
            http.requestDeadlineSeconds = try Self.integer(v, name: "LEDGER_REQUEST_DEADLINE_SECONDS", in: 1...3600, example: "10")
        }
        if let v = env["LEDGER_RECEIVE_DEADLINE_SECONDS"] {
            http.receiveDeadlineSeconds = try Self.integer(v, name: "LEDGER_RECEIVE_DEADLINE_SECONDS", in: 1...3600, example: "30")
        }
        if let v = env["LEDGER_TRUSTED_PROXIES"] {
            do { http.trustedProxies = try IPNetwork.list(v) } catch {
                throw .invalidValue(name: "LEDGER_TRUSTED_PROXIES", reason: "\(error); separate networks with commas")
            }
        }
        if let v = env["LEDGER_ADMIN_DEADLINE_SECONDS"] {
            http.adminDeadlineSeconds = try Self.integer(v, name: "LEDGER_ADMIN_DEADLINE_SECONDS", in: 1...86_400, example: "3600")
        }
        if let v = env["LEDGER_APPLE_ALLOW_TEST_ROOTS"] {
            // It decides whether test roots count for Production: anything but a clear boolean is
            // refused rather than guessed.
            switch v {
            case "true", "1": apple.allowTestRoots = true
            case "", "false", "0": apple.allowTestRoots = false
            default:
                throw .invalidValue(name: "LEDGER_APPLE_ALLOW_TEST_ROOTS",
                                    reason: "'\(v)' is not a boolean: set it to true (test set-ups only) or unset it")
            }
        }
        if let v = env["LEDGER_APPLE_ROOT_CERTS"], !v.isEmpty {
            apple.rootCertificatePaths = v.split(separator: ":").map(String.init).filter { !$0.isEmpty }
        }
        if let v = list("LEDGER_APPLE_BUNDLE_IDS") { apple.bundleIds = Set(v) }
        if let v = list("LEDGER_APPLE_APP_APPLE_IDS") {
            var ids = Set<Int64>()
            for s in v {
                guard let n = Int64(s) else { throw .invalidValue(name: "LEDGER_APPLE_APP_APPLE_IDS", reason: "'\(s)' is not an integer appAppleId") }
                ids.insert(n)
            }
            apple.appAppleIds = ids
        }
        if let v = list("LEDGER_APPLE_ENVIRONMENTS") { apple.environments = try Self.environments(v, name: "LEDGER_APPLE_ENVIRONMENTS") }
        if let v = env["LEDGER_APPLE_SHARED_SECRET"], !v.isEmpty { apple.sharedSecret = Secret(v) }
        try appleAPI.apply(environment: env)
        if let v = env["LEDGER_WECHAT_APPID"], !v.isEmpty { wechat.appId = v }
        if let v = env["LEDGER_WECHAT_TOKEN"], !v.isEmpty { wechat.token = Secret(v) }
        if let v = env["LEDGER_WECHAT_AES_KEY"], !v.isEmpty { wechat.aesKey = Secret(v) }
        if let v = env["LEDGER_WECHAT_PREVIOUS_AES_KEY"], !v.isEmpty { wechat.previousAESKey = Secret(v) }
        if let v = env["LEDGER_WECHAT_APP_KEY"], !v.isEmpty { wechat.appKey = Secret(v) }
        if let v = env["LEDGER_WECHAT_API_BASE_URL"], !v.isEmpty { wechat.apiBaseURL = v }
        if let v = env["LEDGER_WECHAT_OFFER_ID"], !v.isEmpty { wechat.offerId = v }
        if let v = env["LEDGER_WECHAT_ALLOW_PLAINTEXT"] { wechat.allowPlaintext = v == "1" || v == "true" }
        if let v = env["LEDGER_WECHAT_APP_SECRET"], !v.isEmpty { wechat.appSecret = Secret(v) }
        if let v = env["LEDGER_WECHAT_KEY_HISTORY_FILE"], !v.isEmpty { wechat.keyHistoryFile = v }
        if let v = env["LEDGER_WECHAT_REPLAY_WINDOW_SECONDS"] {
            wechat.replayWindowSeconds = try Self.integer(v, name: "LEDGER_WECHAT_REPLAY_WINDOW_SECONDS", in: 30...86_400, example: "300")
        }
        if let v = env["LEDGER_WECHAT_REFUND_BUDGET_MS"] {
            wechat.refundBudgetMs = try Self.integer(v, name: "LEDGER_WECHAT_REFUND_BUDGET_MS", in: 100...9_000, example: "2500")
        }
        if let v = env["LEDGER_WECHAT_REFUND_FALLBACK"], !v.isEmpty { wechat.refundFallback = v }
        try wechat.validate()
        try webhooks.apply(environment: env)
        try applyGuards(environment: env)
        if let v = env["LEDGER_DB_POOL_SIZE"], let n = Int(v), n > 0 { databasePoolSize = n }
        if let v = env["LEDGER_SESSION_KEY"], !v.isEmpty { audit.sessionKey = try Audit.sessionKey(v, name: "LEDGER_SESSION_KEY") }
        if let v = env["LEDGER_INSECURE_COOKIES"] {
            switch v {
            case "true", "1": audit.insecureCookies = true
            case "", "false", "0": audit.insecureCookies = false
            default: throw .invalidValue(name: "LEDGER_INSECURE_COOKIES", reason: "'\(v)' is not a boolean: set it to true (local plain HTTP only) or unset it")
            }
        }
        if let v = env["LEDGER_TOKENS"], !v.isEmpty {
            for pair in v.split(separator: ",") {
                let parts = pair.split(separator: ":", maxSplits: 1).map(String.init)
                guard parts.count == 2, let role = Role(rawValue: parts[0].trimmingCharacters(in: .whitespaces)),
                      !parts[1].isEmpty else {
                    // Never echo the pair: it holds a token.
                    throw .invalidValue(name: "LEDGER_TOKENS", reason: "each entry must be role:token with role app, auditor or admin")
                }
                // A short token can be guessed; the role is named, the value never.
                guard parts[1].utf8.count >= Self.minimumTokenBytes else {
                    throw .invalidValue(name: "LEDGER_TOKENS", reason: "the \(role.rawValue) token is shorter than \(Self.minimumTokenBytes) bytes; "
                        + "use a random one, e.g. `openssl rand -hex 32`")
                }
                tokens.append(TokenHash(role: role, sha256: Digest.sha256(Array(parts[1].utf8))))
            }
        }
    }

    /// Bearer tokens shorter than this are refused at start.
    public static let minimumTokenBytes = 32

    private mutating func setListen(_ s: String, name: String) throws(ConfigurationError) {
        (listenHost, listenPort) = try Self.hostPort(s, name: name)
    }

    private static func hostPort(_ s: String, name: String) throws(ConfigurationError) -> (host: String, port: Int) {
        guard let colon = s.lastIndex(of: ":"), let port = Int(s[s.index(after: colon)...]), (0...65535).contains(port) else {
            throw .invalidValue(name: name, reason: "'\(s)' must be host:port, e.g. 127.0.0.1:8080")
        }
        var host = String(s[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host.isEmpty ? "0.0.0.0" : host, port)
    }

    private static func integer(_ s: String, name: String, in range: ClosedRange<Int>, example: String) throws(ConfigurationError) -> Int {
        guard let n = Int(s.trimmingCharacters(in: .whitespaces)), range.contains(n) else {
            throw .invalidValue(name: name, reason: "'\(s)' must be an integer from \(range.lowerBound) to \(range.upperBound), e.g. \(example)")
        }
        return n
    }

    private static func environments(_ values: [String], name: String) throws(ConfigurationError) -> Set<String> {
        for v in values where v != "Production" && v != "Sandbox" {
            throw .invalidValue(name: name, reason: "'\(v)' is not an Apple environment; use Production and/or Sandbox")
        }
        return Set(values)
    }

    static func hexBytes(_ hex: String) -> [UInt8]? {
        let chars = Array(hex.lowercased().utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        func v(_ c: UInt8) -> UInt8? {
            switch c { case 48...57: c - 48; case 97...102: c - 87; default: nil }
        }
        var i = 0
        while i < chars.count {
            guard let hi = v(chars[i]), let lo = v(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}

extension LedgerConfiguration.WeChat {
    /// The WeChat settings' ranges, checked once the file and the environment are read.
    func validate() throws(ConfigurationError) {
        guard (30...86_400).contains(replayWindowSeconds) else {
            throw .invalidValue(name: "wechat.replayWindowSeconds", reason: "\(replayWindowSeconds) must be from 30 to 86400 (seconds), e.g. 300")
        }
        guard (100...9_000).contains(refundBudgetMs) else {
            throw .invalidValue(name: "LEDGER_WECHAT_REFUND_BUDGET_MS", reason: "\(refundBudgetMs) must be from 100 to 9000 (ms), e.g. 2500; WeChat waits 3 s")
        }
        guard refundAnswerDeadlineMs > refundBudgetMs, refundAnswerDeadlineMs <= 9_500 else {
            throw .invalidValue(name: "wechat.refundInquiry.answerDeadlineMs",
                                reason: "\(refundAnswerDeadlineMs) must be above the budget (\(refundBudgetMs) ms) and at most 9500, e.g. 2900")
        }
        guard refundFallback == "allow" || refundFallback == "refuse" else {
            throw .invalidValue(name: "LEDGER_WECHAT_REFUND_FALLBACK", reason: "'\(refundFallback)' must be allow (recommend the refund) or refuse")
        }
    }
}

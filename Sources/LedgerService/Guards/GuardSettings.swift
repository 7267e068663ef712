import Foundation

extension LedgerConfiguration {
    /// What bounds a client, a token or a flood (issue 22): long reads, app tokens' appends, failed
    /// authentication. File: `{"limits": {…}}` with the names below; environment: the
    /// `LEDGER_*` variable named on each.
    public struct Limits: Sendable, Equatable {
        /// LEDGER_LONG_READS: exports and folds at a position one instance runs at once; more are
        /// answered 429 with Retry-After.
        public var longReads = 4
        /// LEDGER_LONG_READ_TIMEOUT_MINUTES: the statement timeout of a long read.
        public var longReadTimeoutMinutes = 10
        /// LEDGER_APP_APPENDS_PER_MINUTE / LEDGER_APP_APPEND_BURST: appends (ties, unties, consent,
        /// receipts, sign-params) one app token may make, per minute after a burst.
        public var appAppendsPerMinute = 600
        public var appAppendBurst = 60
        /// LEDGER_AUTH_FAILURES_PER_MINUTE / LEDGER_AUTH_FAILURE_BURST: failed authentications (bearer,
        /// the pages' sign-in, the V1 password) one client address may make before its attempts
        /// are answered 429 without being checked.
        public var authFailuresPerMinute = 10
        public var authFailureBurst = 20
        /// LEDGER_TIES_PER_SUBSCRIPTION_PER_DAY: ties and unties one subscription may take in 24
        /// hours, whoever asks; past it 429 with Retry-After. Each is an event of the subscription
        /// every fold of it walks: a loop in one app must not grow one history without bound.
        public var tiesPerSubscriptionPerDay = 100
        /// LEDGER_UNREADABLE_PER_MINUTE: authentic notifications the ledger cannot read that it
        /// keeps as evidence, per source (Apple, WeChat), per minute after a burst of as many; past
        /// it they are answered 503 with Retry-After and the sender retries later.
        public var unreadablePerMinute = 600

        mutating func apply(file value: Any, path: String) throws(ConfigurationError) {
            guard let object = value as? [String: Any] else {
                throw .invalidJSON(path: path, reason: #"limits must be an object, e.g. {"longReads": 4, "appAppendsPerMinute": 600}"#)
            }
            func int(_ key: String, _ range: ClosedRange<Int>, _ target: inout Int) throws(ConfigurationError) {
                guard let v = object[key] else { return }
                guard let n = v as? Int, range.contains(n) else {
                    throw .invalidJSON(path: path, reason: "limits.\(key) must be an integer from \(range.lowerBound) to \(range.upperBound)")
                }
                target = n
            }
            try int("longReads", Self.longReadRange, &longReads)
            try int("longReadTimeoutMinutes", Self.minutesRange, &longReadTimeoutMinutes)
            try int("appAppendsPerMinute", Self.rateRange, &appAppendsPerMinute)
            try int("appAppendBurst", Self.rateRange, &appAppendBurst)
            try int("authFailuresPerMinute", Self.rateRange, &authFailuresPerMinute)
            try int("authFailureBurst", Self.rateRange, &authFailureBurst)
            try int("tiesPerSubscriptionPerDay", Self.rateRange, &tiesPerSubscriptionPerDay)
            try int("unreadablePerMinute", Self.rateRange, &unreadablePerMinute)
        }

        mutating func apply(environment env: [String: String]) throws(ConfigurationError) {
            func int(_ name: String, _ range: ClosedRange<Int>, _ example: String, _ target: inout Int) throws(ConfigurationError) {
                guard let v = env[name] else { return }
                guard let n = Int(v.trimmingCharacters(in: .whitespaces)), range.contains(n) else {
                    throw .invalidValue(name: name, reason: "'\(v.prefix(40))' must be an integer from \(range.lowerBound) to \(range.upperBound), e.g. \(example)")
                }
                target = n
            }
            try int("LEDGER_LONG_READS", Self.longReadRange, "4", &longReads)
            try int("LEDGER_LONG_READ_TIMEOUT_MINUTES", Self.minutesRange, "10", &longReadTimeoutMinutes)
            try int("LEDGER_APP_APPENDS_PER_MINUTE", Self.rateRange, "600", &appAppendsPerMinute)
            try int("LEDGER_APP_APPEND_BURST", Self.rateRange, "60", &appAppendBurst)
            try int("LEDGER_AUTH_FAILURES_PER_MINUTE", Self.rateRange, "10", &authFailuresPerMinute)
            try int("LEDGER_AUTH_FAILURE_BURST", Self.rateRange, "20", &authFailureBurst)
            try int("LEDGER_TIES_PER_SUBSCRIPTION_PER_DAY", Self.rateRange, "100", &tiesPerSubscriptionPerDay)
            try int("LEDGER_UNREADABLE_PER_MINUTE", Self.rateRange, "600", &unreadablePerMinute)
        }

        static let longReadRange = 1...64
        static let minutesRange = 1...1440
        static let rateRange = 1...1_000_000
    }

    /// The settings that are dangerous outside a development set-up or with Production, read from
    /// the environment (`LEDGER_DEVELOPMENT`, `LEDGER_APPLE_V1_TRUSTED`) and checked at start.
    mutating func applyGuards(environment env: [String: String]) throws(ConfigurationError) {
        try limits.apply(environment: env)
        if let v = env["LEDGER_DEVELOPMENT"] { development = try Self.strictBoolean(v, name: "LEDGER_DEVELOPMENT", meaning: "a development set-up only") }
        if let v = env["LEDGER_APPLE_V1_TRUSTED"] {
            apple.v1Trusted = try Self.strictBoolean(v, name: "LEDGER_APPLE_V1_TRUSTED", meaning: "whoever holds the shared secret can set state")
        }
    }

    /// A switch that lowers a defence is either clearly on or off; anything else is refused rather
    /// than guessed.
    static func strictBoolean(_ v: String, name: String, meaning: String) throws(ConfigurationError) -> Bool {
        switch v.trimmingCharacters(in: .whitespaces) {
        case "true", "1": return true
        case "", "false", "0": return false
        default: throw .invalidValue(name: name, reason: "'\(v.prefix(40))' is not a boolean: set it to true (\(meaning)) or unset it")
        }
    }

    /// Why this configuration must not serve, one sentence each (empty: it may). Checked by
    /// `LedgerApp` at start, whatever built the configuration.
    public var startupRefusals: [String] {
        var refusals: [String] = []
        if apple.sharedSecret != nil, apple.environments.contains("Production"), !apple.v1Trusted {
            refusals.append("LEDGER_APPLE_SHARED_SECRET is set while Production is accepted: V1 notifications are not signed by Apple, "
                + "so whoever holds the shared secret (historically shipped inside apps) can set any subscription's state. "
                + "Remove the secret (V2 notifications need none), or accept that risk with LEDGER_APPLE_V1_TRUSTED=true")
        }
        if wechat.allowPlaintext, !development {
            refusals.append("LEDGER_WECHAT_ALLOW_PLAINTEXT=true: plaintext pushes are authenticated by their query string only, not their body, "
                + "so anyone who sees one query string can post any body under it. Use secure mode (LEDGER_WECHAT_AES_KEY); "
                + "plaintext is for a development set-up only (LEDGER_DEVELOPMENT=true)")
        }
        return refusals
    }
}

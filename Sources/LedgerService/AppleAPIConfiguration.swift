import AppStore
import Crypto
import Foundation
import Outbound
import LedgerCore

extension LedgerConfiguration {
    /// The App Store Server API (reconciliation, consumption answers, test notifications) and
    /// verifyReceipt. Environment variables (each also in the configuration file under
    /// `apple.api`):
    ///
    /// | variable | file key | meaning |
    /// |---|---|---|
    /// | `LEDGER_APPLE_API_ISSUER_ID` | `issuerId` | the team's issuer id (App Store Connect → Users and Access → Integrations) |
    /// | `LEDGER_APPLE_API_KEY_ID` | `keyId` | the In-App Purchase key's id |
    /// | `LEDGER_APPLE_API_PRIVATE_KEY` (or `_FILE`) | `privateKeyPath` | path of the .p8 (PEM text is accepted too, e.g. from a `_FILE` secret) |
    /// | `LEDGER_APPLE_API_BASE_URL` | `baseURL` | replaces both api.storekit hosts (tests, proxies) |
    /// | `LEDGER_APPLE_API_BUNDLE_ID` | `bundleId` | the JWT's `bid`: one app, or several comma-separated; default: every one of `LEDGER_APPLE_BUNDLE_IDS` (one client per app and environment) |
    /// | `LEDGER_RECONCILE_EVERY` | `reconcileEvery` | periodic reconciliation (`6h`, `30m`, `1d`); unset: off |
    /// | `LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL` | `verifyReceiptBaseURL` | `<base>/production/verifyReceipt` and `<base>/sandbox/verifyReceipt` instead of Apple's hosts |
    /// | `LEDGER_APPLE_REFUND_PREFERENCE` | `refundPreference` | `RefundPreferencePolicy` (`none`, `DECLINE`, `usage:10:50:DECLINE`, or the object form) |
    /// | `LEDGER_APPLE_SAMPLE_CONTENT` | `sampleContentProvided` | `trial` (default), `true`, `false` |
    public struct AppleAPI: Sendable {
        public var issuerId: String?
        public var keyId: String?
        /// A path to the .p8, or the PEM text itself.
        public var privateKey: Secret?
        public var baseURL: String?
        public var bundleId: String?
        public var reconcileEvery: Duration?
        public var verifyReceiptBaseURL: String?
        public var refundPreference = RefundPreferencePolicy.none
        public var sampleContent = SampleContentRule.freeTrial
        /// How often the consumption sender looks for requests to answer.
        public var consumptionPollSeconds = 5
        /// LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK: the base URLs may be plain http to a loopback fake.
        public var allowsPlainHTTPLoopback = false

        public init() {}

        /// True when any of the three credentials is given (all three are then required).
        public var isConfigured: Bool { issuerId != nil || keyId != nil || privateKey != nil }

        mutating func apply(file api: [String: Any], path: String) throws(ConfigurationError) {
            func string(_ key: String) throws(ConfigurationError) -> String? {
                guard let v = api[key] else { return nil }
                guard let s = v as? String else { throw .invalidJSON(path: path, reason: "apple.api.\(key) must be a string") }
                return s.isEmpty ? nil : s
            }
            if let s = try string("issuerId") { issuerId = s }
            if let s = try string("keyId") { keyId = s }
            if let s = try string("privateKeyPath") { privateKey = Secret(s) }
            if let s = try string("baseURL") { baseURL = s }
            if let s = try string("bundleId") { bundleId = s }
            if let s = try string("verifyReceiptBaseURL") { verifyReceiptBaseURL = s }
            if let s = try string("reconcileEvery") { reconcileEvery = try Self.duration(s, name: "apple.api.reconcileEvery") }
            if let v = api["sampleContentProvided"] {
                let text = (v as? String) ?? ((v as? NSNumber).map { $0.boolValue ? "true" : "false" } ?? "")
                guard let rule = SampleContentRule(text: text) else {
                    throw .invalidJSON(path: path, reason: "apple.api.sampleContentProvided must be \"trial\", true or false")
                }
                sampleContent = rule
            }
            if let v = api["refundPreference"] {
                if let text = v as? String {
                    do { refundPreference = try RefundPreferencePolicy(text: text) } catch {
                        throw .invalidJSON(path: path, reason: "apple.api.refundPreference: \(error)")
                    }
                } else if let object = v as? [String: Any] {
                    do {
                        let data = try JSONSerialization.data(withJSONObject: object)
                        refundPreference = try JSONDecoder().decode(RefundPreferencePolicy.self, from: data)
                        try refundPreference.validate()
                    } catch {
                        throw .invalidJSON(path: path, reason: "apple.api.refundPreference must be {\"undelivered\", \"grantFullBelowPercent\", \"grantProratedBelowPercent\", \"otherwise\"} with DECLINE / GRANT_FULL / GRANT_PRORATED and percentages 0–100: \(error)")
                    }
                } else {
                    throw .invalidJSON(path: path, reason: "apple.api.refundPreference must be a string or an object")
                }
            }
        }

        mutating func apply(environment env: [String: String]) throws(ConfigurationError) {
            func value(_ name: String) -> String? {
                guard let v = env[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !v.isEmpty else { return nil }
                return v
            }
            allowsPlainHTTPLoopback = OutboundTarget.allowsPlainHTTPLoopback(environment: env)
            if let v = value("LEDGER_APPLE_API_ISSUER_ID") { issuerId = v }
            if let v = value("LEDGER_APPLE_API_KEY_ID") { keyId = v }
            if let v = value("LEDGER_APPLE_API_PRIVATE_KEY") { privateKey = Secret(v) }
            if let v = value("LEDGER_APPLE_API_BASE_URL") { baseURL = v }
            if let v = value("LEDGER_APPLE_API_BUNDLE_ID") { bundleId = v }
            if let v = value("LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL") { verifyReceiptBaseURL = v }
            if let v = value("LEDGER_RECONCILE_EVERY") { reconcileEvery = try Self.duration(v, name: "LEDGER_RECONCILE_EVERY") }
            if let v = value("LEDGER_APPLE_REFUND_PREFERENCE") {
                do { refundPreference = try RefundPreferencePolicy(text: v) } catch {
                    throw .invalidValue(name: "LEDGER_APPLE_REFUND_PREFERENCE", reason: "\(error)")
                }
            }
            if let v = value("LEDGER_APPLE_SAMPLE_CONTENT") {
                guard let rule = SampleContentRule(text: v) else {
                    throw .invalidValue(name: "LEDGER_APPLE_SAMPLE_CONTENT", reason: "'\(v)' must be trial, true or false")
                }
                sampleContent = rule
            }
            if let v = value("LEDGER_CONSUMPTION_POLL_SECONDS") {
                guard let n = Int(v), (1...3600).contains(n) else {
                    throw .invalidValue(name: "LEDGER_CONSUMPTION_POLL_SECONDS", reason: "'\(v)' must be a number of seconds from 1 to 3600")
                }
                consumptionPollSeconds = n
            }
        }

        /// `90s`, `30m`, `6h`, `1d` (a bare number is seconds); at least one minute, at most 30 days.
        static func duration(_ text: String, name: String) throws(ConfigurationError) -> Duration {
            let t = text.trimmingCharacters(in: .whitespaces).lowercased()
            let units: [(String, Int64)] = [("ms", 0), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)]
            var seconds: Int64?
            for (suffix, factor) in units where factor > 0 && t.hasSuffix(suffix) {
                if let n = Int64(t.dropLast(suffix.count)) { seconds = n.multipliedReportingOverflow(by: factor).overflow ? nil : n * factor }
                break
            }
            if seconds == nil, let n = Int64(t) { seconds = n }
            guard let seconds, (60...30 * 86_400).contains(seconds) else {
                throw .invalidValue(name: name, reason: "'\(text)' must be a duration from 1m to 30d such as 6h, 30m or 1d")
            }
            return .seconds(seconds)
        }

        /// The client configuration, or nil when no credential is given. `fallbackBundleIds`:
        /// LEDGER_APPLE_BUNDLE_IDS (the first is the default `bid`).
        public func clientConfiguration(fallbackBundleIds: [String]) throws(AppStoreServerAPIConfigurationError) -> AppStoreServerAPIConfiguration? {
            guard isConfigured else { return nil }
            let names = ["LEDGER_APPLE_API_ISSUER_ID", "LEDGER_APPLE_API_KEY_ID", "LEDGER_APPLE_API_PRIVATE_KEY"]
            for (name, v) in zip(names, [issuerId, keyId, privateKey?.value]) where v == nil {
                throw .missing(variable: name, why: "the App Store Server API needs all of \(names.joined(separator: ", ")) (the others are set)")
            }
            guard let bid = bundleId ?? fallbackBundleIds.first else {
                throw .missing(variable: "LEDGER_APPLE_API_BUNDLE_ID", why: "set it (or LEDGER_APPLE_BUNDLE_IDS) to the app's bundle id")
            }
            var base: URL?
            if let baseURL {
                guard let url = URL(string: baseURL) else { throw .invalid(variable: "LEDGER_APPLE_API_BASE_URL", why: "\(baseURL) is not a URL") }
                base = url
            }
            let key = try Self.privateKey(privateKey!.value)
            return try AppStoreServerAPIConfiguration(issuerId: issuerId!, keyId: keyId!, privateKey: key, bundleId: bid, baseURL: base,
                                                      allowsPlainHTTPLoopback: allowsPlainHTTPLoopback)
        }

        /// One client configuration per app (issue 20: one API client per configured bundle id):
        /// the apps of `LEDGER_APPLE_API_BUNDLE_ID` (comma-separated), else every one of
        /// `fallbackBundleIds` (LEDGER_APPLE_BUNDLE_IDS). Empty when no credential is given.
        public func clientConfigurations(fallbackBundleIds: [String]) throws(AppStoreServerAPIConfigurationError) -> [AppStoreServerAPIConfiguration] {
            let named = (bundleId ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            let apps = named.isEmpty ? fallbackBundleIds : named
            var out: [AppStoreServerAPIConfiguration] = []
            for app in apps.isEmpty ? [nil] : apps.map(Optional.some) {
                var one = self
                one.bundleId = app
                guard let c = try one.clientConfiguration(fallbackBundleIds: []) else { return [] }
                out.append(c)
            }
            return out
        }

        /// The .p8 at a path, or PEM text given directly (a `_FILE` secret holds the file itself).
        static func privateKey(_ value: String) throws(AppStoreServerAPIConfigurationError) -> ECPrivateKey {
            guard value.hasPrefix("-----BEGIN") else {
                // Key material pasted without its PEM header must not be echoed back as a "path".
                guard !value.contains("\n"), value.utf8.count <= 1024 else {
                    throw .unreadableKey(path: "(LEDGER_APPLE_API_PRIVATE_KEY text)", why: "it is neither a file path nor a PEM key (-----BEGIN PRIVATE KEY-----)")
                }
                return try AppStoreServerAPIConfiguration.loadPrivateKey(path: value)
            }
            let key: ECPrivateKey
            do { key = try ECPrivateKey(pem: Array(value.utf8)) } catch {
                throw .unreadableKey(path: "(LEDGER_APPLE_API_PRIVATE_KEY text)", why: "it is not a PEM private key (\(error))")
            }
            guard key.curve == .p256 else { throw .unreadableKey(path: "(LEDGER_APPLE_API_PRIVATE_KEY text)", why: "it is not a P-256 EC key") }
            return key
        }

        /// verifyReceipt's endpoints with the shared secret as `password`.
        public func verifyReceiptConfiguration(sharedSecret: Secret?) throws(ConfigurationError) -> VerifyReceiptConfiguration {
            guard let verifyReceiptBaseURL else { return VerifyReceiptConfiguration(sharedSecret: sharedSecret?.value) }
            guard let url = URL(string: verifyReceiptBaseURL), url.scheme != nil, url.host != nil else {
                throw .invalidValue(name: "LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL", reason: "'\(verifyReceiptBaseURL)' must be an absolute https URL")
            }
            let c = VerifyReceiptConfiguration(baseURL: url, sharedSecret: sharedSecret?.value, allowsPlainHTTPLoopback: allowsPlainHTTPLoopback)
            // The body carries the shared secret: https only (plain http only to an allowed loopback fake).
            do { try c.validate() } catch { throw .invalidValue(name: "LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL", reason: error.message) }
            return c
        }
    }
}

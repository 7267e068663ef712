import Foundation

/// Which refund outcome the ledger tells Apple it prefers when it answers a CONSUMPTION_REQUEST
/// (`refundPreference`: advisory only, Apple decides). Configured by the operator
/// (`LEDGER_APPLE_REFUND_PREFERENCE`, configuration `apple.api.refundPreference`); the default
/// states no preference at all.
///
/// The rule, in order:
/// 1. the purchase was not delivered → `undelivered`;
/// 2. the share of the period used is known (subscriptions with an expiry) and below
///    `grantFullBelowPercent` → GRANT_FULL; below `grantProratedBelowPercent` → GRANT_PRORATED;
/// 3. otherwise → `otherwise`.
/// A nil step says nothing and falls through; nil at the end means no preference is sent.
public struct RefundPreferencePolicy: Sendable, Equatable, Codable {
    public enum Preference: String, Sendable, Codable, CaseIterable {
        case decline = "DECLINE"
        case grantFull = "GRANT_FULL"
        case grantProrated = "GRANT_PRORATED"
    }

    public var undelivered: Preference?
    public var grantFullBelowPercent: Int?
    public var grantProratedBelowPercent: Int?
    public var otherwise: Preference?

    public init(undelivered: Preference? = nil, grantFullBelowPercent: Int? = nil, grantProratedBelowPercent: Int? = nil,
                otherwise: Preference? = nil) {
        self.undelivered = undelivered
        self.grantFullBelowPercent = grantFullBelowPercent
        self.grantProratedBelowPercent = grantProratedBelowPercent
        self.otherwise = otherwise
    }

    /// No preference is ever sent (the default).
    public static let none = RefundPreferencePolicy()

    /// The preference and the rule that chose it (`rule` is stored with what was sent).
    public func decide(delivered: Bool, usedMilliunits: Int?) -> (preference: Preference?, rule: String) {
        if !delivered, let undelivered { return (undelivered, "not delivered → \(undelivered.rawValue)") }
        if let used = usedMilliunits {
            let percent = Double(used) / 1000
            if let full = grantFullBelowPercent, used < full * 1000 {
                return (.grantFull, "used \(Self.format(percent))% < \(full)% → GRANT_FULL")
            }
            if let prorated = grantProratedBelowPercent, used < prorated * 1000 {
                return (.grantProrated, "used \(Self.format(percent))% < \(prorated)% → GRANT_PRORATED")
            }
        }
        if let otherwise { return (otherwise, "otherwise → \(otherwise.rawValue)") }
        return (nil, "no preference configured")
    }

    static func format(_ d: Double) -> String { d == d.rounded() ? String(Int(d)) : String(format: "%.1f", d) }

    /// Parses the compact form of `LEDGER_APPLE_REFUND_PREFERENCE`: `none`; one preference for
    /// every request (`DECLINE`, `GRANT_FULL`, `GRANT_PRORATED`); or
    /// `usage:<fullBelow%>:<proratedBelow%>:<otherwise>` (e.g. `usage:10:50:DECLINE`; an empty
    /// field says nothing), where an undelivered purchase always prefers GRANT_FULL.
    public init(text raw: String) throws(RefundPreferencePolicyError) {
        let text = raw.trimmingCharacters(in: .whitespaces)
        if text.isEmpty || text.lowercased() == "none" { self = .none; return }
        if let p = Preference(rawValue: text.uppercased()) {
            self.init(undelivered: p, otherwise: p)
            return
        }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 4, parts[0].lowercased() == "usage" else { throw .unreadable(text) }
        func percent(_ s: String) throws(RefundPreferencePolicyError) -> Int? {
            if s.isEmpty { return nil }
            guard let n = Int(s), (0...100).contains(n) else { throw .unreadable(text) }
            return n
        }
        var otherwise: Preference?
        if !parts[3].isEmpty {
            guard let p = Preference(rawValue: parts[3].uppercased()) else { throw .unreadable(text) }
            otherwise = p
        }
        self.init(undelivered: .grantFull, grantFullBelowPercent: try percent(parts[1]),
                  grantProratedBelowPercent: try percent(parts[2]), otherwise: otherwise)
        try validate()
    }

    /// Percentages in 0…100, the full threshold not above the prorated one.
    public func validate() throws(RefundPreferencePolicyError) {
        for p in [grantFullBelowPercent, grantProratedBelowPercent].compactMap({ $0 }) where !(0...100).contains(p) {
            throw .invalid("percentages are 0 to 100, not \(p)")
        }
        if let f = grantFullBelowPercent, let p = grantProratedBelowPercent, f > p {
            throw .invalid("grantFullBelowPercent (\(f)) must not be above grantProratedBelowPercent (\(p))")
        }
    }
}

public enum RefundPreferencePolicyError: Error, Equatable, CustomStringConvertible {
    case unreadable(String)
    case invalid(String)

    public var description: String {
        switch self {
        case .unreadable(let text):
            return "'\(text.prefix(80))' is not a refund preference policy: use none, DECLINE, GRANT_FULL, GRANT_PRORATED, or usage:<fullBelow%>:<proratedBelow%>:<otherwise> such as usage:10:50:DECLINE"
        case .invalid(let why):
            return "the refund preference policy is not consistent: \(why)"
        }
    }
}

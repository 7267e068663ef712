import Foundation
import LedgerCore

/// The two hottest answers (an app backend asks them on every launch), written straight to bytes.
/// Each is byte for byte `Representation.subscription(s).canonicalJSON()` (and the entitlements
/// document the route builds) — ReadAnswersTests pins that over every shape — without building a
/// dictionary of 22 JSON values and sorting its keys per answer, which was a fifth of the
/// service's own CPU per read. The member order below is the canonical (UTF-8 byte) order.
extension Representation {
    static func subscriptionJSON(_ s: SubscriptionState) -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(768)
        writeSubscription(s, to: &out)
        return Data(out)
    }

    static func writeSubscription(_ s: SubscriptionState, to out: inout [UInt8]) {
        var w = MemberWriter(&out, extras: s.renewalExtraMembers)
        w.string("appAccountToken", s.appAccountToken, &out)
        w.integer("asOf", s.evaluatedAt, &out)
        w.string("autoRenewProductId", s.autoRenewProductId, &out)
        w.integer("autoRenewStatus", s.autoRenewStatus.map(Int64.init), &out)
        w.string("bundleId", s.bundleId, &out)
        w.key("customer", &out)
        if let id = s.customerId {
            var c = MemberWriter(&out)
            c.string("id", id, &out)
            if let other = s.implicitCustomerId {
                c.string("note", "tied explicitly to \(id); the subscription's \(s.appAccountToken != nil ? "appAccountToken" : "openid") names \(other)", &out)
                c.string("overrides", other, &out)
            }
            c.string("source", s.customerSource?.rawValue, &out)
            c.finish(&out)
        } else {
            out.append(contentsOf: "null".utf8)
        }
        w.string("environment", s.environment, &out)
        w.integer("expirationIntent", s.expirationIntent.map(Int64.init), &out)
        w.integer("expiresDate", s.expiresDate, &out)
        w.integer("gracePeriodExpiresDate", s.gracePeriodExpiresDate, &out)
        w.bool("isInBillingRetryPeriod", s.isInBillingRetryPeriod, &out)
        w.string("latestTransactionId", s.latestTransactionId, &out)
        w.string("offerIdentifier", s.offerIdentifier, &out)
        w.integer("offerType", s.offerType.map(Int64.init), &out)
        w.string("originalTransactionId", s.originalTransactionId, &out)
        w.integer("priceIncreaseStatus", s.priceIncreaseStatus.map(Int64.init), &out)
        w.string("productId", s.productId, &out)
        w.string("productType", s.productType, &out)
        w.integer("purchaseDate", s.purchaseDate, &out)
        w.integer("recentSubscriptionStartDate", s.recentSubscriptionStartDate, &out)
        w.integer("renewalDate", s.renewalDate, &out)
        w.integer("revocationDate", s.revocationDate, &out)
        w.string("status", s.status.rawValue, &out)
        w.finish(&out)
    }

    /// `{"asOf","consentRescinded":[…],"customerId","entitlements":[…],"environment"}` as the
    /// entitlements route answers (`consentRescinded`: Apple RESCIND_CONSENT statements in force
    /// for the customer's purchases, `ConsentRescission`; the app decides what they mean).
    static func entitlementsJSON(customerId: String, environment: String, asOf: EpochMillis, grants: [EntitlementGrant],
                                 consentRescinded: [ConsentRescission] = []) -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(128 + grants.count * 200)
        var w = MemberWriter(&out)
        w.integer("asOf", asOf, &out)
        w.key("consentRescinded", &out)
        out.append(contentsOf: JSONValue.array(consentRescinded.map(\.json)).canonicalJSON())
        w.string("customerId", customerId, &out)
        w.key("entitlements", &out)
        out.append(UInt8(ascii: "["))
        for (i, g) in grants.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            var e = MemberWriter(&out)
            e.string("entitlement", g.entitlement, &out)
            e.string("environment", g.environment, &out)
            e.integer("expiresDate", g.expiresDate, &out)
            e.string("originalTransactionId", g.originalTransactionId, &out)
            e.string("productId", g.productId, &out)
            e.string("status", g.status.rawValue, &out)
            e.finish(&out)
        }
        out.append(UInt8(ascii: "]"))
        w.string("environment", environment, &out)
        w.finish(&out)
        return Data(out)
    }
}

/// Writes one JSON object's members, in the order given (the caller's order must be canonical),
/// into the caller's buffer. `extras` (members named by a table, e.g. `AppleFields`) are merged in
/// at their canonical places.
private struct MemberWriter {
    private var first = true
    /// Table-named members not written yet, in canonical (UTF-8 byte) order.
    private var pending: [(name: String, value: JSONValue)]

    init(_ out: inout [UInt8], extras: [(String, JSONValue)] = []) {
        pending = extras.map { (name: $0.0, value: $0.1) }.sorted { Array($0.name.utf8).lexicographicallyPrecedes(Array($1.name.utf8)) }
        out.append(UInt8(ascii: "{"))
    }

    mutating func key(_ name: StaticString, _ out: inout [UInt8]) {
        let bytes = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        while let next = pending.first, Array(next.name.utf8).lexicographicallyPrecedes(bytes) {
            pending.removeFirst()
            member(next.name, next.value, &out)
        }
        separate(&out)
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: bytes)
        out.append(UInt8(ascii: "\""))
        out.append(UInt8(ascii: ":"))
    }

    private mutating func separate(_ out: inout [UInt8]) {
        if !first { out.append(UInt8(ascii: ",")) }
        first = false
    }

    private mutating func member(_ name: String, _ value: JSONValue, _ out: inout [UInt8]) {
        separate(&out)
        JSONValue.writeString(name, to: &out)
        out.append(UInt8(ascii: ":"))
        out.append(contentsOf: value.canonicalJSON())
    }

    mutating func string(_ name: StaticString, _ value: String?, _ out: inout [UInt8]) {
        key(name, &out)
        if let value { JSONValue.writeString(value, to: &out) } else { out.append(contentsOf: "null".utf8) }
    }

    mutating func integer(_ name: StaticString, _ value: Int64?, _ out: inout [UInt8]) {
        key(name, &out)
        if let value { JSONValue.writeInteger(value, to: &out) } else { out.append(contentsOf: "null".utf8) }
    }

    mutating func bool(_ name: StaticString, _ value: Bool, _ out: inout [UInt8]) {
        key(name, &out)
        out.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func finish(_ out: inout [UInt8]) {
        for next in pending { member(next.name, next.value, &out) }
        pending = []
        out.append(UInt8(ascii: "}"))
    }
}

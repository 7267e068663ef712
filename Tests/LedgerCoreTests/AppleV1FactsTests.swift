import Foundation
import LedgerTesting
import XCTest
@testable import LedgerCore

/// The V1 fact decoder and the subscription rule it shares with ingestion (`AppleV1Subscription`).
/// Bodies are built as JSON objects of strings, as Apple sends them, and stored either namespaced
/// (`{"responseBodyV1": body}`, what ingestion writes) or at the top level (events stored before).
final class AppleV1FactsTests: XCTestCase {
    static let a = "1000000000000001"
    static let b = "2000000000000001"

    /// Group A: the account's most recent purchase and greatest expiry. Group B: pro.
    static let entries: [[String: String]] = [
        ["transaction_id": "1000000000000001", "original_transaction_id": a, "purchase_date_ms": "1654600000000",
         "expires_date_ms": "1657200000000", "product_id": "com.example.monthly"],
        ["transaction_id": "1000000000000002", "original_transaction_id": a, "purchase_date_ms": "1657200000000",
         "expires_date_ms": "1659900000000", "product_id": "com.example.monthly"],
        ["transaction_id": "2000000000000001", "original_transaction_id": b, "purchase_date_ms": "1650000000000",
         "expires_date_ms": "1652600000000", "product_id": "com.example.pro", "web_order_line_item_id": "2001"],
        ["transaction_id": "2000000000000002", "original_transaction_id": b, "purchase_date_ms": "1652600000000",
         "expires_date_ms": "1655200000000", "product_id": "com.example.pro", "web_order_line_item_id": "2002",
         "app_account_token": "6F0C1B2A-0000-4000-8000-000000000001"],
    ]
    static let pending: [[String: String]] = [
        ["original_transaction_id": a, "auto_renew_product_id": "com.example.monthly", "auto_renew_status": "1"],
        ["original_transaction_id": b, "auto_renew_product_id": "com.example.pro", "auto_renew_status": "1",
         "is_in_billing_retry_period": "1", "grace_period_expires_date_ms": "1655600000000", "price_consent_status": "1"],
    ]

    func body(type: String = "DID_RENEW", environment: String = "PROD", product: String? = "com.example.pro",
              autoRenew: String? = "true", changeDate: String? = nil, entries: [[String: String]] = entries,
              pending: [[String: String]] = pending, extra: [String: Any] = [:]) -> [String: Any] {
        var receipt: [String: Any] = ["status": 0]
        receipt["latest_receipt_info"] = entries
        receipt["pending_renewal_info"] = pending
        var o: [String: Any] = ["notification_type": type, "password": "<redacted>", "environment": environment, "bid": "com.example"]
        o["unified_receipt"] = receipt
        if let product { o["auto_renew_product_id"] = product }
        if let autoRenew { o["auto_renew_status"] = autoRenew }
        if let changeDate { o["auto_renew_status_change_date_ms"] = changeDate }
        for (k, v) in extra { o[k] = v }
        return o
    }

    func event(_ body: [String: Any], namespaced: Bool = true, type: String? = nil) throws -> NewEvent {
        let stored: [String: Any] = namespaced ? ["responseBodyV1": body] : body
        let payload = try JSONSerialization.data(withJSONObject: stored, options: [.sortedKeys])
        let name = body["notification_type"] as? String ?? ""
        return NewEvent(streamId: "x", dedupeKey: "k", source: .apple, type: type ?? "V1/" + name,
                        environment: "Production", payload: payload, raw: Data())
    }

    func facts(_ body: [String: Any], namespaced: Bool = true) throws -> [Fact] {
        let f = FactDecoder.facts(of: try event(body, namespaced: namespaced))
        XCTAssertFalse(f.contains { $0.kind == .unreadable }, "\(f.map(\.details))")
        return f
    }

    func subject(_ body: [String: Any]) throws -> AppleV1Subscription {
        try AppleV1Subscription(body: JSONDecoder().decode(JSONValue.self, from: JSONSerialization.data(withJSONObject: body)))
    }

    // MARK: which subscription

    func testTheSubscriptionIsTheOneOfAutoRenewProductId() throws {
        let f = try facts(body())
        XCTAssertEqual(Set(f.map(\.subscription)), [SubscriptionKey(environment: "Production", originalTransactionId: Self.b)])
        let tx = try XCTUnwrap(f.first { $0.kind == .transaction })
        XCTAssertEqual(tx.transactionId, "2000000000000002", "B's latest purchase, not the account's")
        XCTAssertEqual(tx.transaction?.expiresDate, 1_655_200_000_000)
        XCTAssertEqual(tx.transaction?.productId, "com.example.pro")
        XCTAssertEqual(tx.transaction?.webOrderLineItemId, "2002")
        XCTAssertEqual(tx.effectiveAt, 1_652_600_000_000)
        XCTAssertEqual(tx.customerId, "6f0c1b2a-0000-4000-8000-000000000001", "appAccountToken lowercased")
        XCTAssertEqual(tx.message, "V1/DID_RENEW")
        XCTAssertEqual(tx.origin, .appleV1)
        // Group A when its product is named; the account's latest purchase when none is.
        XCTAssertEqual(try subject(body(product: "com.example.monthly")).originalTransactionId, Self.a)
        XCTAssertEqual(try subject(body(product: nil)).originalTransactionId, Self.a)
        XCTAssertEqual(try subject(body(product: "com.example.unknown")).originalTransactionId, Self.a)
        // "Latest" is by purchase_date_ms among the subscription's entries, not expiry.
        var entries = Self.entries
        entries[2]["expires_date_ms"] = "1699999999999"
        XCTAssertEqual(try subject(body(entries: entries)).latestTransactionId, "2000000000000002")
    }

    func testAPendingCrossgradeNamesItsSubscriptionThroughPendingRenewalInfo() throws {
        var pending = Self.pending
        pending[1]["auto_renew_product_id"] = "com.example.pro.yearly"
        let f = try facts(body(type: "DID_CHANGE_RENEWAL_PREF", product: "com.example.pro.yearly", pending: pending))
        XCTAssertEqual(f.first?.subscription?.originalTransactionId, Self.b)
        let renewal = try XCTUnwrap(f.first { $0.kind == .renewal }?.renewal)
        XCTAssertEqual(renewal.productId, "com.example.pro")
        XCTAssertEqual(renewal.autoRenewProductId, "com.example.pro.yearly")
        // A pending entry for an id with no latest_receipt_info entry is no candidate.
        pending.append(["original_transaction_id": "3000000000000001", "auto_renew_product_id": "com.example.other"])
        XCTAssertEqual(try subject(body(product: "com.example.other", pending: pending)).originalTransactionId, Self.a)
    }

    func testArrayOrderIsIrrelevant() throws {
        var cancelled = Self.entries
        cancelled[2]["cancellation_date_ms"] = "1651000000000"
        cancelled[3]["cancellation_date_ms"] = "1653000000000"
        let pending = Self.pending + [["original_transaction_id": Self.b, "auto_renew_product_id": "com.example.pro", "auto_renew_status": "0"]]
        let reference = try facts(body(entries: cancelled, pending: pending))
        var rng = SplitMix64(seed: 0xA991_E001)
        for _ in 0..<20 {
            var e = cancelled, p = pending
            e.shuffle(using: &rng)
            p.shuffle(using: &rng)
            XCTAssertEqual(try facts(body(entries: e, pending: p)), reference)
        }
        // Revocations come oldest first, whatever the order sent.
        XCTAssertEqual(reference.filter { $0.kind == .revocation }.map(\.transactionId), ["2000000000000001", "2000000000000002"])
    }

    // MARK: facts

    func testCancellationIsARevocationEffectiveAtItsDate() throws {
        var entries = Self.entries
        entries[2]["cancellation_date_ms"] = "1651000000000"
        entries[2]["cancellation_reason"] = "1"
        let f = try facts(body(type: "REFUND", entries: entries))
        let revocations = f.filter { $0.kind == .revocation }
        XCTAssertEqual(revocations.count, 1)
        let r = try XCTUnwrap(revocations.first)
        XCTAssertEqual(r.transactionId, "2000000000000001")
        XCTAssertEqual(r.effectiveAt, 1_651_000_000_000)
        XCTAssertEqual(r.transaction?.revocationDate, 1_651_000_000_000)
        XCTAssertEqual(r.transaction?.revocationReason, 1)
        XCTAssertEqual(r.subscription?.originalTransactionId, Self.b)
        // Another group's cancellation is not about this subscription.
        var other = Self.entries
        other[0]["cancellation_date_ms"] = "1655000000000"
        XCTAssertEqual(try facts(body(entries: other)).filter { $0.kind == .revocation }.count, 0)
        // Folded: B's latest transaction cancelled → revoked.
        var latest = Self.entries
        latest[3]["cancellation_date_ms"] = "1653000000000"
        let view = SubscriptionProjection(facts: try facts(body(type: "REFUND", entries: latest))).view(at: 1_654_000_000_000)
        XCTAssertEqual(view.subscription(SubscriptionKey(environment: "Production", originalTransactionId: Self.b))?.status, .revoked)
    }

    func testRenewalFactFromPendingRenewalInfoAndTopLevelAutoRenewFields() throws {
        let r = try XCTUnwrap(try facts(body(autoRenew: "false")).first { $0.kind == .renewal }?.renewal)
        XCTAssertEqual(r.autoRenewStatus, 0, "the top-level \"false\" wins over pending's \"1\"")
        XCTAssertEqual(r.isInBillingRetryPeriod, true)
        XCTAssertEqual(r.gracePeriodExpiresDate, 1_655_600_000_000)
        XCTAssertEqual(r.priceIncreaseStatus, 1)
        XCTAssertEqual(r.autoRenewProductId, "com.example.pro")
        XCTAssertEqual(r.signedDate, 1_652_600_000_000)
        let fallback = try XCTUnwrap(try facts(body(autoRenew: nil)).first { $0.kind == .renewal }?.renewal)
        XCTAssertEqual(fallback.autoRenewStatus, 1, "without the top-level field, pending's")
    }

    func testBusinessTimeIsTheGreatestDateStatedForTheSubscription() throws {
        XCTAssertEqual(Set(try facts(body()).map(\.signedAt)), [1_652_600_000_000], "B's latest purchase; A's later ones are not B's")
        var entries = Self.entries
        entries[2]["cancellation_date_ms"] = "1653100000000"
        XCTAssertEqual(Set(try facts(body(entries: entries)).map(\.signedAt)), [1_653_100_000_000])
        XCTAssertEqual(Set(try facts(body(changeDate: "1654000000000", entries: entries)).map(\.signedAt)), [1_654_000_000_000])
        XCTAssertEqual(try subject(body(changeDate: "1654000000000")).businessTime, 1_654_000_000_000)
        // Expiry is not a statement time; zero, negative and non-decimal dates count as absent.
        entries = Self.entries
        entries[3]["expires_date_ms"] = "1800000000000"
        entries[3]["cancellation_date_ms"] = "-1"
        XCTAssertEqual(try subject(body(changeDate: "soon", entries: entries)).businessTime, 1_652_600_000_000)
        // A subscription about which the body states no date cannot be ordered: unreadable.
        let undated = [["transaction_id": "1", "original_transaction_id": Self.b, "product_id": "com.example.pro"]]
        XCTAssertThrowsError(try subject(body(entries: undated, pending: []))) {
            XCTAssertEqual($0 as? AppleV1Subscription.Problem, .noDate(originalTransactionId: Self.b))
        }
        let f = FactDecoder.facts(of: try event(body(entries: undated, pending: [])))
        XCTAssertEqual(f.map(\.kind), [.unreadable])
        XCTAssertTrue((f.first?.details["reason"]?.text ?? "").contains("no purchase_date_ms"), "\(f)")
    }

    // MARK: namespace

    /// V1 members live under `responseBodyV1`: a V1 body naming V2 keys (`transactionInfo`,
    /// `renewalInfo`, `notificationType`) is read as V1 and nothing else.
    func testV2KeysInAV1BodyAreNeverReadAsV2Facts() throws {
        let forged: [String: Any] = [
            "notificationType": "SUBSCRIBED", "signedDate": 1_650_000_000_000,
            "transactionInfo": ["transactionId": "9", "originalTransactionId": "4000000000000001", "productId": "com.example.pro",
                                "purchaseDate": 1_650_000_000_000, "expiresDate": 4_102_444_800_000, "environment": "Production",
                                "appAccountToken": "6f0c1b2a-0000-4000-8000-0000000000aa"] as [String: Any],
            "renewalInfo": ["originalTransactionId": "4000000000000001", "autoRenewProductId": "com.example.pro", "autoRenewStatus": 1] as [String: Any],
        ]
        for namespaced in [true, false] {
            let f = try facts(body(extra: forged), namespaced: namespaced)
            XCTAssertEqual(f, try facts(body(), namespaced: namespaced), "the V2 keys change nothing")
            XCTAssertTrue(f.allSatisfy { $0.origin == .appleV1 && $0.subscription?.originalTransactionId == Self.b })
            let grants = SubscriptionProjection(facts: f).view(at: 1_700_000_000_000).entitlements(catalog: .productIds)
            XCTAssertEqual(grants.count, 0, "no entitlement until 2100")
        }
        // The same payload under a V2 type would be read by the V2 decoder, which finds nothing
        // in the namespaced body: the key is what keeps V1 members out of V2's reach.
        XCTAssertEqual(FactDecoder.facts(of: try event(body(extra: forged), type: "SUBSCRIBED")).count, 0)
    }

    /// Events stored before the namespace (the body at the top level) decode to the same facts.
    func testLegacyTopLevelPayloadIsStillDecoded() throws {
        var entries = Self.entries
        entries[2]["cancellation_date_ms"] = "1651000000000"
        for b in [body(), body(type: "REFUND", entries: entries), body(autoRenew: "false", changeDate: "1654000000000")] {
            let namespaced = try facts(b)
            XCTAssertEqual(try facts(b, namespaced: false), namespaced)
            XCTAssertGreaterThanOrEqual(namespaced.count, 2)
        }
    }

    func testEnvironmentAndUnreadableBodies() throws {
        XCTAssertEqual(try facts(body(environment: "Sandbox")).first?.subscription?.environment, "Sandbox")
        XCTAssertEqual(try facts(body(environment: "PROD")).first?.subscription?.environment, "Production")
        for broken in [body(environment: "Xcode"), body(entries: [], pending: []),
                       body(entries: [["transaction_id": "1", "purchase_date_ms": "1650000000000"]]),
                       body(entries: [["original_transaction_id": Self.b, "purchase_date_ms": "1650000000000"]])] {
            let f = FactDecoder.facts(of: try event(broken))
            XCTAssertEqual(f.map(\.kind), [.unreadable], "\(broken)")
            XCTAssertEqual(f.first?.origin, .appleV1)
        }
        let notJSON = NewEvent(streamId: "x", dedupeKey: "k", source: .apple, type: "V1/DID_RENEW", payload: Data("[1]".utf8), raw: Data())
        XCTAssertEqual(FactDecoder.facts(of: notJSON).map(\.kind), [.unreadable])
    }
}

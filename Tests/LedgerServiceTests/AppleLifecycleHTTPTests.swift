import AppStore
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import XCTest

/// Issue 20's Apple rules as lifecycles through HTTP (a real service on real PostgreSQL, every
/// message signed by the test authority or carrying the V1 shared secret), each delivered in its
/// business order and, on a fresh ledger, in reverse; the expected states are written by hand from
/// Apple's documents (cited per test).
final class AppleLifecycleHTTPTests: XCTestCase {
    let day: Int64 = 86_400_000
    var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// Runs `body` on a fresh service once per order: the messages as given, then reversed.
    func inEveryOrder(_ messages: [(path: String, body: Data)], configJSON: String? = nil,
                      _ check: (ServiceHarness, String) async throws -> Void) async throws {
        for (name, order) in [("business order", messages), ("reversed", Array(messages.reversed()))] {
            try await withService(configJSON: configJSON) { h in
                for m in order {
                    let a = try await h.post(m.path, m.body)
                    XCTAssertEqual(a.status, 200, "\(name): \(a.text)")
                }
                try await check(h, name)
            }
        }
    }

    static func notification(_ type: String, _ subtype: String? = nil, signed: Int64, status: Int? = 1) -> AppleNotification {
        var n = AppleTestAuthority.sample(type: type, subtype: subtype, signedDate: signed).notification
        n.data?.status = status
        return n
    }

    static func transaction(_ id: String, otid: String, product: String, type: String = "Auto-Renewable Subscription",
                            purchase: Int64, expires: Int64?, signed: Int64, token: String, appTransactionId: String? = nil) -> AppleTransaction {
        var t = AppleTestAuthority.sample(originalTransactionId: otid, transactionId: id, signedDate: signed).transaction
        t.productId = product
        t.type = type
        t.purchaseDate = AppleTime(purchase)
        t.originalPurchaseDate = AppleTime(purchase)
        t.expiresDate = expires.map(AppleTime.init)
        t.webOrderLineItemId = expires == nil ? nil : "9" + id
        t.subscriptionGroupIdentifier = expires == nil ? nil : "21000001"
        t.appAccountToken = token
        t.appTransactionId = appTransactionId
        return t
    }

    static func json(_ a: ServiceHarness.Answer) -> [String: Any] { a.json }

    func entitlements(_ h: ServiceHarness, _ customer: String, at: Int64? = nil) async throws -> [String: Any] {
        let a = try await h.request("GET", "/v1/customers/\(customer)/entitlements?environment=Sandbox" + (at.map { "&at=\($0)" } ?? ""),
                                    token: "app-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        return a.json
    }

    func subscription(_ h: ServiceHarness, _ otid: String, at: Int64? = nil) async throws -> [String: Any] {
        let a = try await h.request("GET", "/v1/subscriptions/\(otid)?environment=Sandbox" + (at.map { "&at=\($0)" } ?? ""),
                                    token: "app-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        return a.json
    }

    // MARK: non-renewing subscriptions

    /// Apple: a Non-Renewing Subscription states no expiry ("the app is responsible for the
    /// duration", In-App Purchase → Non-renewing subscriptions;
    /// https://developer.apple.com/documentation/storekit/product/producttype/nonrenewable). The
    /// catalog's `durationDays` grants from the purchase; a product without it grants nothing.
    func testANonRenewingPurchaseGrantsForTheCatalogsDurationOnly() async throws {
        let token = "aaaaaaaa-0000-4000-8000-00000000b001"
        let season = "1000000000003001", pass = "1000000000003002", old = "1000000000003003"
        let bought = now - 10 * day, oldBought = now - 40 * day
        let catalog = #"{"products": {"com.example.season": {"entitlements": ["premium"], "durationDays": 30}, "com.example.pass": {"entitlements": ["extras"]}}}"#
        let a = try AppleTestAuthority.mint()
        func charge(_ otid: String, product: String, at: Int64) throws -> (path: String, body: Data) {
            ("/v1/apple/notifications", try a.signNotification(Self.notification("ONE_TIME_CHARGE", signed: at, status: nil),
                transaction: Self.transaction(otid, otid: otid, product: product, type: "Non-Renewing Subscription",
                                              purchase: at, expires: nil, signed: at, token: token)))
        }
        let messages = [try charge(old, product: "com.example.season", at: oldBought), try charge(season, product: "com.example.season", at: bought),
                        try charge(pass, product: "com.example.pass", at: bought + day)]
        for (name, order) in [("business order", messages), ("reversed", Array(messages.reversed()))] {
            try await withService(authority: a, configJSON: catalog) { h in
                for m in order {
                    let a = try await h.post(m.path, m.body)
                    XCTAssertEqual(a.status, 200, "\(name): \(a.text)")
                }
                let e = try await entitlements(h, token)
                let grants = (e["entitlements"] as? [[String: Any]]) ?? []
                XCTAssertEqual(grants.count, 1, "\(name): only the season bought 10 days ago grants: \(grants)")
                XCTAssertEqual(grants.first?["entitlement"] as? String, "premium")
                XCTAssertEqual(grants.first?["originalTransactionId"] as? String, season)
                XCTAssertEqual((grants.first?["expiresDate"] as? NSNumber)?.int64Value, bought + 30 * day, "purchase + durationDays")
                XCTAssertEqual(grants.first?["status"] as? String, "active")
                // Apple's own view stays a one-time purchase.
                let s = try await subscription(h, season)
                XCTAssertEqual(s["status"] as? String, "purchased")
                XCTAssertEqual(s["productType"] as? String, "Non-Renewing Subscription")
                XCTAssertEqual((s["purchaseDate"] as? NSNumber)?.int64Value, bought)
                // The old season granted while it lasted; time travel says so.
                let then = try await entitlements(h, token, at: oldBought + 5 * day)
                XCTAssertEqual(((then["entitlements"] as? [[String: Any]]) ?? []).compactMap { $0["originalTransactionId"] as? String }, [old])
            }
        }
    }

    // MARK: RESCIND_CONSENT

    /// App Store Server Notifications 2.19: RESCIND_CONSENT carries `appData` with the customer's
    /// signed app transaction (https://developer.apple.com/documentation/appstoreservernotifications/appdata).
    /// The ledger records it and shows it beside the entitlements of every subscription whose
    /// transactions carry that appTransactionId; the grants do not change (the app decides).
    func testRescindConsentIsShownBesideTheEntitlementsWhateverTheOrder() async throws {
        let a = try AppleTestAuthority.mint()
        let token = "aaaaaaaa-0000-4000-8000-00000000c001", other = "aaaaaaaa-0000-4000-8000-00000000c002"
        let appTx = "704289572311136256", otherAppTx = "704289572311136999"
        let t0 = now - 5 * day, rescinded = now - 2 * day
        func buy(_ otid: String, token: String, appTransactionId: String) throws -> (path: String, body: Data) {
            ("/v1/apple/notifications", try a.signNotification(Self.notification("SUBSCRIBED", "INITIAL_BUY", signed: t0),
                transaction: Self.transaction(otid, otid: otid, product: "com.example.monthly", purchase: t0, expires: t0 + 30 * day,
                                              signed: t0, token: token, appTransactionId: appTransactionId)))
        }
        var n = AppleNotification()
        n.notificationType = "RESCIND_CONSENT"
        n.notificationUUID = UUID().uuidString.lowercased()
        n.version = "2.0"
        n.signedDate = AppleTime(rescinded)
        var app = AppleNotification.AppData()
        app.appAppleId = 1234
        app.bundleId = "com.example"
        app.environment = "Sandbox"
        n.appData = app
        var appTransaction = AppleAppTransaction()
        appTransaction.receiptType = "Sandbox"
        appTransaction.appAppleId = 1234
        appTransaction.bundleId = "com.example"
        appTransaction.applicationVersion = "1"
        appTransaction.receiptCreationDate = AppleTime(rescinded)
        appTransaction.originalPurchaseDate = AppleTime(t0 - 100 * day)
        appTransaction.originalApplicationVersion = "1"
        appTransaction.appTransactionId = appTx
        appTransaction.originalPlatform = "iOS"
        appTransaction.signedDate = AppleTime(rescinded)
        let rescind = ("/v1/apple/notifications", try a.signNotification(n, appTransaction: appTransaction))
        let messages = [try buy("1000000000004001", token: token, appTransactionId: appTx),
                        try buy("1000000000004002", token: other, appTransactionId: otherAppTx), rescind]
        for (name, order) in [("business order", messages), ("reversed", Array(messages.reversed()))] {
            try await withService(authority: a) { h in
                for m in order {
                    let a = try await h.post(m.0, m.1)
                    XCTAssertEqual(a.status, 200, "\(name): \(a.text)")
                }
                let e = try await entitlements(h, token)
                let listed = try XCTUnwrap(e["consentRescinded"] as? [[String: Any]], name)
                XCTAssertEqual(listed.count, 1, name)
                XCTAssertEqual(listed.first?["appTransactionId"] as? String, appTx)
                XCTAssertEqual((listed.first?["rescindedAt"] as? NSNumber)?.int64Value, rescinded)
                XCTAssertNotNil(listed.first?["position"] as? NSNumber, "the evidence")
                XCTAssertEqual(((e["entitlements"] as? [[String: Any]]) ?? []).count, 1, "\(name): the grants are unchanged")
                let before = try await entitlements(h, token, at: rescinded - 1)
                XCTAssertEqual((before["consentRescinded"] as? [[String: Any]])?.count, 0, "\(name): not yet rescinded then")
                let otherCustomer = try await entitlements(h, other)
                XCTAssertEqual((otherCustomer["consentRescinded"] as? [[String: Any]])?.count, 0, "\(name): another app transaction")
                // The new fields went through the table to the API: appTransactionId on the timeline's transaction.
                let events = try await h.request("GET", "/v1/subscriptions/1000000000004001/events?environment=Sandbox", token: "auditor-token-for-tests-0123456789abcdef")
                XCTAssertTrue(events.text.contains(#""appTransactionId":"704289572311136256""#), events.text.prefix(600).description)
            }
        }
    }

    // MARK: V1 (App Store Server Notifications V1, responseBodyV1)

    static func v1(_ type: String, entries: [[String: String]], pending: [String: String], autoRenew: Bool = true,
                   changed: Int64? = nil) -> Data {
        var body: [String: Any] = [
            "notification_type": type, "password": "v1-shared-secret", "environment": "Sandbox",
            "auto_renew_product_id": pending["auto_renew_product_id"] ?? "com.example.monthly",
            "auto_renew_status": autoRenew ? "true" : "false", "bid": "com.example", "bvrs": "1",
            "unified_receipt": ["status": 0, "environment": "Sandbox", "latest_receipt": "MIIabc",
                                "latest_receipt_info": entries, "pending_renewal_info": [pending]] as [String: Any],
        ]
        if let changed { body["auto_renew_status_change_date_ms"] = String(changed) }
        return try! JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
    }

    static func entry(_ id: String, otid: String, product: String = "com.example.monthly", purchase: Int64, expires: Int64,
                      token: String, extra: [String: String] = [:]) -> [String: String] {
        ["transaction_id": id, "original_transaction_id": otid, "product_id": product, "purchase_date_ms": String(purchase),
         "expires_date_ms": String(expires), "app_account_token": token, "web_order_line_item_id": "9" + id].merging(extra) { $1 }
    }

    /// V1 DID_FAIL_TO_RENEW (responseBodyV1: "indicates a subscription that failed to renew due to
    /// a billing issue"; pending_renewal_info is_in_billing_retry_period, grace_period_expires_date_ms)
    /// states no date of its own: it must not lose to the purchase whose date it carries. After
    /// the expiry, inside the grace period: grace_period, entitled until the grace end.
    func testV1GraceShowsInEveryOrder() async throws {
        let otid = "1000000000005001", token = "aaaaaaaa-0000-4000-8000-00000000d001"
        let purchase = now - 32 * day, expires = now - 2 * day, grace = expires + 16 * day
        let e = Self.entry(otid, otid: otid, purchase: purchase, expires: expires, token: token)
        let buy = Self.v1("INITIAL_BUY", entries: [e], pending: ["original_transaction_id": otid, "auto_renew_status": "1",
                                                                 "auto_renew_product_id": "com.example.monthly", "is_in_billing_retry_period": "0"])
        let fail = Self.v1("DID_FAIL_TO_RENEW", entries: [e], pending: [
            "original_transaction_id": otid, "auto_renew_status": "1", "auto_renew_product_id": "com.example.monthly",
            "is_in_billing_retry_period": "1", "grace_period_expires_date_ms": String(grace), "expiration_intent": "2"])
        try await inEveryOrder([("/v1/apple/notifications/v1", buy), ("/v1/apple/notifications/v1", fail)]) { h, name in
            let s = try await subscription(h, otid)
            XCTAssertEqual(s["status"] as? String, "grace_period", name)
            XCTAssertEqual(s["isInBillingRetryPeriod"] as? Bool, true, name)
            XCTAssertEqual((s["gracePeriodExpiresDate"] as? NSNumber)?.int64Value, grace, name)
            let granted = try await entitlements(h, token)
            XCTAssertEqual((granted["entitlements"] as? [[String: Any]])?.first?["status"] as? String, "grace_period", name)
            XCTAssertEqual(((granted["entitlements"] as? [[String: Any]])?.first?["expiresDate"] as? NSNumber)?.int64Value, grace, name)
        }
    }

    /// V1 DID_CHANGE_RENEWAL_PREF ("the customer made a change in their subscription plan that
    /// takes effect at the next renewal"): the pending product shows in autoRenewProductId, the
    /// current product stays.
    func testV1PendingDowngradeShowsInEveryOrder() async throws {
        let otid = "1000000000005101", token = "aaaaaaaa-0000-4000-8000-00000000d101"
        let purchase = now - 5 * day, expires = now + 25 * day
        let e = Self.entry(otid, otid: otid, product: "com.example.yearly", purchase: purchase, expires: expires, token: token)
        let buy = Self.v1("INITIAL_BUY", entries: [e], pending: ["original_transaction_id": otid, "auto_renew_status": "1",
                                                                 "auto_renew_product_id": "com.example.yearly"])
        let pref = Self.v1("DID_CHANGE_RENEWAL_PREF", entries: [e], pending: ["original_transaction_id": otid, "auto_renew_status": "1",
                                                                             "auto_renew_product_id": "com.example.monthly"])
        try await inEveryOrder([("/v1/apple/notifications/v1", buy), ("/v1/apple/notifications/v1", pref)]) { h, name in
            let s = try await subscription(h, otid)
            XCTAssertEqual(s["productId"] as? String, "com.example.yearly", name)
            XCTAssertEqual(s["autoRenewProductId"] as? String, "com.example.monthly", "\(name): the pending downgrade shows")
            XCTAssertEqual(s["status"] as? String, "active", name)
        }
    }

    /// V1: an entry's `cancellation_date_ms` is also "the time an auto-renewable subscription plan
    /// was upgraded", with `is_upgraded` true (responseBodyV1 latest_receipt_info): the upgrade, not
    /// a refund — no revocation, no refund case, the upgrade's product in effect.
    func testAV1UpgradedEntrysCancellationIsNoRefund() async throws {
        let otid = "1000000000005201", token = "aaaaaaaa-0000-4000-8000-00000000d201"
        let purchase = now - 10 * day, upgraded = now - 4 * day
        let monthly = Self.entry(otid, otid: otid, purchase: purchase, expires: purchase + 30 * day, token: token,
                                 extra: ["is_upgraded": "true", "cancellation_date_ms": String(upgraded), "cancellation_reason": "0"])
        let premium = Self.entry("1000000000005202", otid: otid, product: "com.example.premium.monthly", purchase: upgraded,
                                 expires: upgraded + 30 * day, token: token)
        let buy = Self.v1("INITIAL_BUY", entries: [Self.entry(otid, otid: otid, purchase: purchase, expires: purchase + 30 * day, token: token)],
                          pending: ["original_transaction_id": otid, "auto_renew_status": "1", "auto_renew_product_id": "com.example.monthly"])
        let upgrade = Self.v1("INTERACTIVE_RENEWAL", entries: [monthly, premium],
                              pending: ["original_transaction_id": otid, "auto_renew_status": "1", "auto_renew_product_id": "com.example.premium.monthly"])
        try await inEveryOrder([("/v1/apple/notifications/v1", buy), ("/v1/apple/notifications/v1", upgrade)]) { h, name in
            let s = try await subscription(h, otid)
            XCTAssertEqual(s["status"] as? String, "active", name)
            XCTAssertEqual(s["productId"] as? String, "com.example.premium.monthly", name)
            XCTAssertTrue(s["revocationDate"] is NSNull, name)
            let refund = try await h.request("GET", "/v1/refunds/apple:\(otid)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(refund.status, 404, "\(name): an upgrade opens no refund case")
        }
    }

    // MARK: numeric ties

    /// Apple's transaction ids are decimal numbers that grow in time but not in width: at one
    /// purchaseDate, "1000000000000000" is newer than "999999999999999" (issue 20). As text it
    /// would sort first; the transaction in effect must be the numerically greater one.
    func testEqualPurchaseTimesAreBrokenByTheTransactionIdAsANumber() async throws {
        let a = try AppleTestAuthority.mint()
        let otid = "999999999999990", token = "aaaaaaaa-0000-4000-8000-00000000e301"
        let t0 = now - 3 * day
        func renew(_ id: String, product: String) throws -> (String, Data) {
            ("/v1/apple/notifications", try a.signNotification(Self.notification("DID_RENEW", signed: t0),
                transaction: Self.transaction(id, otid: otid, product: product, purchase: t0, expires: t0 + 30 * day, signed: t0, token: token)))
        }
        let messages = [try renew("999999999999999", product: "com.example.monthly"), try renew("1000000000000000", product: "com.example.yearly")]
        for (name, order) in [("business order", messages), ("reversed", Array(messages.reversed()))] {
            try await withService(authority: a) { h in
                for m in order {
                    let a = try await h.post(m.0, m.1)
                    XCTAssertEqual(a.status, 200, "\(name): \(a.text)")
                }
                let s = try await subscription(h, otid)
                XCTAssertEqual(s["latestTransactionId"] as? String, "1000000000000000", name)
                XCTAssertEqual(s["productId"] as? String, "com.example.yearly", name)
                let then = try await subscription(h, otid, at: t0 + day)
                XCTAssertEqual(then["latestTransactionId"] as? String, "1000000000000000", "\(name): ?at= folds the same way")
            }
        }
    }
}

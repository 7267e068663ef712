import Foundation
import XCTest
@testable import LedgerCore

/// `AppleAPIFacts` through `FactDecoder`, row by row of `AppleAPIEvents`' table, and the promise
/// that matters for reconciliation: an API answer states the same subscription as the
/// notifications it stands in for (same fold), and heals what the ledger missed.
final class AppleAPIFactsTests: XCTestCase {
    static let day: EpochMillis = 86_400_000
    static let t0: EpochMillis = 1_767_225_600_000
    static func d(_ x: Double) -> EpochMillis { t0 + EpochMillis(x * Double(day)) }
    static let otid = "1000000000000001"
    static let key = SubscriptionKey(environment: "Production", originalTransactionId: otid)
    static let monthly = "com.example.monthly", yearly = "com.example.yearly"

    // MARK: builders (payloads as the AppStore builders store them)

    static func tx(_ id: String, product: String = monthly, purchase: EpochMillis, expires: EpochMillis?, signed: EpochMillis,
                   otid: String = otid, extra: [String: Any] = [:]) -> [String: Any] {
        var t: [String: Any] = [
            "transactionId": id, "originalTransactionId": otid, "productId": product, "bundleId": "com.example",
            "purchaseDate": purchase, "signedDate": signed, "environment": "Production", "type": "Auto-Renewable Subscription",
            "appAccountToken": "5EED0C0D-0000-4A00-8000-00000000ABCD", "price": 9990, "currency": "USD",
        ]
        if let expires { t["expiresDate"] = expires }
        for (k, v) in extra { t[k] = v }
        return t
    }

    static func renewal(auto: Int, product: String = monthly, next: String? = nil, signed: EpochMillis, otid: String = otid,
                        extra: [String: Any] = [:]) -> [String: Any] {
        var r: [String: Any] = [
            "originalTransactionId": otid, "productId": product, "autoRenewProductId": next ?? product, "autoRenewStatus": auto,
            "signedDate": signed, "environment": "Production", "renewalDate": d(30),
        ]
        for (k, v) in extra { r[k] = v }
        return r
    }

    static func json(_ o: Any) -> Data { try! JSONSerialization.data(withJSONObject: o, options: [.sortedKeys]) }

    static func event(type: String, payload: [String: Any], signedAt: EpochMillis? = nil, environment: String? = "Production") -> NewEvent {
        NewEvent(streamId: otid, dedupeKey: "k", source: .apple, type: type, environment: environment, signedAt: signedAt,
                 payload: json(payload), raw: Data())
    }

    /// A statuses event: `items` are (status, transactionInfo?, renewalInfo?).
    static func statusEvent(_ items: [(Int, [String: Any]?, [String: Any]?)], environment: String = "Production") -> NewEvent {
        let last: [[String: Any]] = items.map { status, tx, r in
            var o: [String: Any] = ["status": status, "signedTransactionInfo": NSNull(), "signedRenewalInfo": NSNull()]
            if let id = tx?["originalTransactionId"] ?? r?["originalTransactionId"] { o["originalTransactionId"] = id }
            if let tx { o["transactionInfo"] = tx }
            if let r { o["renewalInfo"] = r }
            return o
        }
        return event(type: AppleAPIEvents.subscriptionStatus, payload: [AppleAPIEvents.statusResponseKey: [
            "environment": environment, "bundleId": "com.example", "appAppleId": 1234,
            "data": [["subscriptionGroupIdentifier": "21000001", "lastTransactions": last]],
        ]])
    }

    static func historyEvent(_ tx: [String: Any]) -> NewEvent {
        event(type: AppleAPIEvents.transaction, payload: [AppleAPIEvents.historyTransactionKey: [
            "environment": "Production", "bundleId": "com.example", "appAppleId": 1234, "transactionInfo": tx,
        ]])
    }

    /// A stored V2 notification payload (what `AppleNotificationIngestor` writes).
    static func notification(_ type: String, subtype: String? = nil, signed: EpochMillis, tx: [String: Any]?, renewal: [String: Any]?) -> NewEvent {
        var p: [String: Any] = [
            "notificationType": type, "notificationUUID": UUID().uuidString, "signedDate": signed,
            "data": ["bundleId": "com.example", "environment": "Production", "appAppleId": 1234],
        ]
        if let subtype { p["subtype"] = subtype }
        if let tx { p["transactionInfo"] = tx }
        if let renewal { p["renewalInfo"] = renewal }
        return NewEvent(streamId: otid, dedupeKey: UUID().uuidString, source: .apple, type: subtype.map { "\(type)/\($0)" } ?? type,
                        environment: "Production", signedAt: signed, payload: json(p), raw: Data())
    }

    func facts(_ events: [NewEvent]) -> [Fact] {
        events.enumerated().flatMap { i, e in
            FactDecoder.facts(of: RecordedEvent(position: Int64(i + 1), recordedAt: Self.t0, event: e))
        }
    }

    func fold(_ events: [NewEvent], key: SubscriptionKey = key) -> SubscriptionFold {
        let all = facts(events)
        XCTAssertFalse(all.contains { $0.kind == .unreadable }, "\(all.filter { $0.kind == .unreadable }.map(\.details))")
        return SubscriptionFold(key: key, facts: all)
    }

    // MARK: Get All Subscription Statuses

    func testAStatusItemGivesItsTransactionAndRenewalEachAtItsOwnSignedDate() throws {
        let e = Self.statusEvent([(1, Self.tx("1002", purchase: Self.d(30), expires: Self.d(60), signed: Self.d(40)),
                                   Self.renewal(auto: 0, next: Self.yearly, signed: Self.d(41)))])
        let f = FactDecoder.facts(of: e)
        XCTAssertEqual(f.map(\.kind), [.transaction, .reversal, .renewal, .appleStatus], "not revoked as of signing: a reversal")
        XCTAssertEqual(f[3].details["status"], .integer(1), "the item's status, Apple's word (fact schema 6)")
        XCTAssertEqual(f[3].details["source"]?.text, "api")
        XCTAssertEqual(f[3].signedAt, Self.d(40), "dated by the transaction Apple signed for the answer")
        XCTAssertEqual(f[1].signedAt, Self.d(40))
        XCTAssertEqual(f[1].transactionId, "1002")
        XCTAssertEqual(Set(f.map(\.origin)), [.appleAPI])
        XCTAssertEqual(Set(f.map(\.message)), [AppleAPIEvents.subscriptionStatus])
        XCTAssertEqual(Set(f.map(\.subscription)), [Self.key])
        XCTAssertEqual(f[0].signedAt, Self.d(40), "the transaction's signedDate (Apple's request time)")
        XCTAssertEqual(f[0].effectiveAt, Self.d(30), "in effect from its purchaseDate")
        XCTAssertEqual(f[0].transactionId, "1002")
        XCTAssertEqual(f[0].transaction?.price, 9990)
        XCTAssertEqual(f[0].customerId, "5eed0c0d-0000-4a00-8000-00000000abcd", "appAccountToken lowercased like V2")
        XCTAssertEqual(f[2].signedAt, Self.d(41), "the renewal info's own signedDate")
        XCTAssertEqual(f[2].effectiveAt, Self.d(41))
        XCTAssertEqual(f[2].renewal?.autoRenewStatus, 0)
        XCTAssertEqual(f[2].renewal?.autoRenewProductId, Self.yearly)
    }

    func testEveryItemOfAnAnswerIsItsOwnSubscriptionAndARevokedTransactionGivesARevocation() throws {
        let other = "2000000000000001"
        let e = Self.statusEvent([
            (1, Self.tx("1002", purchase: Self.d(30), expires: Self.d(60), signed: Self.d(40)), nil),
            (5, Self.tx(other, purchase: Self.d(1), expires: Self.d(31), signed: Self.d(40), otid: other,
                        extra: ["revocationDate": Self.d(10), "revocationReason": 1]),
             Self.renewal(auto: 0, signed: Self.d(40), otid: other)),
        ])
        let f = FactDecoder.facts(of: e)
        XCTAssertEqual(f.map(\.kind), [.transaction, .reversal, .appleStatus, .transaction, .revocation, .renewal, .appleStatus])
        let otherKey = SubscriptionKey(environment: "Production", originalTransactionId: other)
        XCTAssertEqual(f.map(\.subscription), [Self.key, Self.key, Self.key, otherKey, otherKey, otherKey, otherKey])
        XCTAssertEqual(f[6].details["status"], .integer(5))
        let revocation = f[4]
        XCTAssertEqual(revocation.transactionId, other)
        XCTAssertEqual(revocation.signedAt, Self.d(40), "ordered by the transaction's own signedDate")
        XCTAssertEqual(revocation.effectiveAt, Self.d(10), "in effect from its revocationDate")
        XCTAssertEqual(revocation.transaction?.revocationReason, 1)
        let state = try XCTUnwrap(fold([e], key: otherKey).state(at: Self.d(41)))
        XCTAssertEqual(state.status, .revoked)
    }

    func testWithoutNestedSignedDatesTheEventsSignedAtOrdersThemAndWithNeitherTheEventIsUnreadable() {
        var tx = Self.tx("1002", purchase: Self.d(30), expires: Self.d(60), signed: 0)
        tx["signedDate"] = nil
        var e = Self.statusEvent([(1, tx, nil)])
        e.signedAt = Self.d(45)
        XCTAssertEqual(FactDecoder.facts(of: e).map(\.signedAt), [Self.d(45), Self.d(45), Self.d(45)])
        e.signedAt = nil
        let f = FactDecoder.facts(of: e)
        XCTAssertEqual(f.map(\.kind), [.unreadable])
        XCTAssertEqual(f.first?.origin, .appleAPI, "unreadable API answers are counted as API answers")
        XCTAssertTrue(f.first?.details["reason"]?.text?.contains("signedDate") ?? false)
    }

    func testHostileOrBrokenAnswersAreUnreadableNotFolded() {
        let cases: [(String, NewEvent)] = [
            ("no namespace", Self.event(type: AppleAPIEvents.subscriptionStatus, payload: ["data": []])),
            ("a V2 notification filed as an API answer", Self.event(type: AppleAPIEvents.transaction,
                payload: ["notificationType": "DID_RENEW", "transactionInfo": Self.tx("1", purchase: 1, expires: 2, signed: 3)])),
            ("unknown API type", Self.event(type: "API/unknown", payload: [:])),
            ("environment neither", Self.statusEvent([(1, Self.tx("1", purchase: 1, expires: 2, signed: 3, extra: ["environment": "Xcode"]), nil)],
                                                    environment: "Xcode")),
            ("item and transaction disagree", Self.event(type: AppleAPIEvents.subscriptionStatus, payload: [AppleAPIEvents.statusResponseKey: [
                "environment": "Production", "data": [["lastTransactions": [["originalTransactionId": "999",
                    "transactionInfo": Self.tx("1", purchase: 1, expires: 2, signed: 3)]]]]]])),
            ("transaction without id", Self.historyEvent(["originalTransactionId": Self.otid, "signedDate": 3])),
            ("not JSON", NewEvent(streamId: "1", dedupeKey: "k", source: .apple, type: AppleAPIEvents.verifyReceipt, payload: Data("{".utf8), raw: Data())),
        ]
        for (name, e) in cases {
            let f = FactDecoder.facts(of: e)
            XCTAssertEqual(f.map(\.kind), [.unreadable], name)
            XCTAssertEqual(f.first?.origin, .appleAPI, name)
        }
    }

    // MARK: Get Transaction History

    func testAHistoryEntryGivesItsTransactionAndItsRevocation() throws {
        let e = Self.historyEvent(Self.tx("1001", purchase: Self.d(0), expires: Self.d(30), signed: Self.d(50),
                                          extra: ["revocationDate": Self.d(5), "revocationType": "REFUND_PRORATED", "revocationPercentage": 50000]))
        let f = FactDecoder.facts(of: e)
        XCTAssertEqual(f.map(\.kind), [.transaction, .revocation])
        guard f.count == 2 else { return }
        XCTAssertEqual(f.map(\.signedAt), [Self.d(50), Self.d(50)])
        XCTAssertEqual(f.map(\.effectiveAt), [Self.d(0), Self.d(5)])
        XCTAssertEqual(f[1].transaction?.revocationPercentage, 50000)
        XCTAssertEqual(f[0].message, AppleAPIEvents.transaction)
    }

    // MARK: The same subscription through notifications and through the API

    /// Bought day 0, renewed day 30, auto-renew turned off day 40, one period refunded: once as
    /// the notifications Apple sent, once as the API answers a reconciliation would fetch (signed
    /// later, at request time). Both fold to the same subscription.
    func testAnAPIAnswerAndTheEquivalentNotificationsFoldToTheSameState() throws {
        let tx1 = Self.tx("1000000000000001", purchase: Self.d(0), expires: Self.d(30), signed: Self.d(0))
        let tx2 = Self.tx("1000000000000002", purchase: Self.d(30), expires: Self.d(60), signed: Self.d(30))
        let off = Self.renewal(auto: 0, signed: Self.d(40), extra: ["expirationIntent": 1])
        var refunded1 = tx1
        refunded1["revocationDate"] = Self.d(20)
        refunded1["revocationReason"] = 0
        refunded1["signedDate"] = Self.d(20)
        let notifications = [
            Self.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signed: Self.d(0), tx: tx1, renewal: Self.renewal(auto: 1, signed: Self.d(0))),
            Self.notification("REFUND", signed: Self.d(20), tx: refunded1, renewal: nil),
            Self.notification("DID_RENEW", signed: Self.d(30), tx: tx2, renewal: Self.renewal(auto: 1, signed: Self.d(30))),
            Self.notification("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", signed: Self.d(40), tx: tx2, renewal: off),
        ]
        // Apple's answers on day 45: every JWS signed at request time.
        func at45(_ o: [String: Any]) -> [String: Any] { var o = o; o["signedDate"] = Self.d(45); return o }
        let api = [
            Self.historyEvent(at45(refunded1)), Self.historyEvent(at45(tx2)),
            Self.statusEvent([(1, at45(tx2), at45(off))]),
        ]
        let byNotifications = fold(notifications), byAPI = fold(api)
        for day in [45.0, 50, 59, 61, 200] {
            let a = try XCTUnwrap(byNotifications.state(at: Self.d(day))), b = try XCTUnwrap(byAPI.state(at: Self.d(day)))
            XCTAssertEqual(a, b, "day \(day)")
        }
        XCTAssertEqual(byNotifications.state(at: Self.d(50))?.status, .active)
        XCTAssertEqual(byNotifications.state(at: Self.d(50))?.autoRenewStatus, 0)
        XCTAssertEqual(byNotifications.state(at: Self.d(61))?.status, .expired)
        func comparable(_ r: TransactionRecord) -> TransactionRecord {
            var r = r
            r.signedDate = 0
            r.refundSignedDate = nil
            return r
        }
        XCTAssertEqual(byNotifications.transactions.map(comparable), byAPI.transactions.map(comparable),
                       "the same transactions, the first revoked on day 20")
        XCTAssertEqual(byAPI.transaction("1000000000000001")?.revocationDate, Self.d(20))
        // And together: the API restates what the ledger knew; nothing changes.
        let both = fold(notifications + api)
        XCTAssertEqual(both.state(at: Self.d(50)), byNotifications.state(at: Self.d(50)))
    }

    /// A lost upgrade: the ledger heard the monthly purchase only; Apple's statuses answer names the
    /// yearly transaction the customer upgraded to. The answer heals the state, and a later
    /// notification (signed after the answer) still wins over it.
    func testTheStatusAnswerHealsALostUpgrade() throws {
        let monthly = Self.tx("1000000000000001", purchase: Self.d(0), expires: Self.d(30), signed: Self.d(0))
        let heard = [Self.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signed: Self.d(0), tx: monthly,
                                       renewal: Self.renewal(auto: 1, signed: Self.d(0)))]
        XCTAssertEqual(fold(heard).state(at: Self.d(12))?.productId, Self.monthly)
        let yearly = Self.tx("1000000000000009", product: Self.yearly, purchase: Self.d(10), expires: Self.d(375), signed: Self.d(12))
        let answer = Self.statusEvent([(1, yearly, Self.renewal(auto: 1, product: Self.yearly, signed: Self.d(12)))])
        let healed = try XCTUnwrap(fold(heard + [answer]).state(at: Self.d(12)))
        XCTAssertEqual(healed.productId, Self.yearly)
        XCTAssertEqual(healed.expiresDate, Self.d(375))
        XCTAssertEqual(healed.latestTransactionId, "1000000000000009")
        XCTAssertEqual(healed.status, .active)
        // Still active on day 100, where the monthly period alone would have expired.
        XCTAssertEqual(fold(heard + [answer]).state(at: Self.d(100))?.status, .active)
        XCTAssertEqual(fold(heard).state(at: Self.d(100))?.status, .expired)
        // A cancellation notification signed after the answer still wins (ordered by signedDate).
        let cancelled = Self.notification("DID_CHANGE_RENEWAL_STATUS", signed: Self.d(20), tx: yearly,
                                          renewal: Self.renewal(auto: 0, product: Self.yearly, signed: Self.d(20)))
        for order in [heard + [answer, cancelled], [cancelled, answer] + heard] {
            XCTAssertEqual(fold(order).state(at: Self.d(21))?.autoRenewStatus, 0)
        }
    }

    // MARK: verifyReceipt

    static func receipt(entries: [[String: String]], pending: [[String: String]], requested: EpochMillis? = d(50)) -> NewEvent {
        var receipt: [String: Any] = ["bundle_id": "com.example", "receipt_creation_date_ms": String(d(1))]
        if let requested { receipt["request_date_ms"] = String(requested) }
        return event(type: AppleAPIEvents.verifyReceipt, payload: [AppleAPIEvents.verifyReceiptKey: [
            "status": 0, "environment": "Production", "receipt": receipt,
            "latest_receipt_info": entries, "pending_renewal_info": pending,
        ]])
    }

    static let a = "1000000000000001", b = "2000000000000001"

    static func entry(_ id: String, _ otid: String, purchase: Double, expires: Double?, product: String = monthly,
                      extra: [String: String] = [:]) -> [String: String] {
        var e = ["transaction_id": id, "original_transaction_id": otid, "product_id": product,
                 "purchase_date_ms": String(d(purchase)), "app_account_token": "6F0C1B2A-0000-4000-8000-000000000001"]
        if let expires { e["expires_date_ms"] = String(d(expires)) }
        for (k, v) in extra { e[k] = v }
        return e
    }

    func testAReceiptGivesEverySubscriptionsTransactionsRevocationsAndRenewalState() throws {
        let e = Self.receipt(entries: [
            // Newest first, as Apple sends them; array order must not matter.
            Self.entry("1000000000000002", Self.a, purchase: 30, expires: 60),
            Self.entry("1000000000000001", Self.a, purchase: 0, expires: 30, extra: ["cancellation_date_ms": String(Self.d(10)), "cancellation_reason": "1"]),
            Self.entry("2000000000000001", Self.b, purchase: 5, expires: 35, product: "com.example.pro", extra: ["is_upgraded": "true"]),
            Self.entry("3000000000000001", "3000000000000001", purchase: 7, expires: nil, product: "com.example.coins"),
        ], pending: [
            ["original_transaction_id": Self.a, "auto_renew_product_id": Self.yearly, "product_id": Self.monthly, "auto_renew_status": "0",
             "expiration_intent": "1", "is_in_billing_retry_period": "0"],
            ["original_transaction_id": Self.b, "auto_renew_product_id": "com.example.pro", "auto_renew_status": "1"],
        ])
        let f = FactDecoder.facts(of: e)
        XCTAssertFalse(f.contains { $0.kind == .unreadable }, "\(f.map(\.details))")
        let keyA = SubscriptionKey(environment: "Production", originalTransactionId: Self.a)
        let keyB = SubscriptionKey(environment: "Production", originalTransactionId: Self.b)
        XCTAssertEqual(f.map(\.subscription), [keyA, keyA, keyA, keyA, keyB, keyB], "no facts for the entry without expires_date_ms")
        XCTAssertEqual(f.map(\.kind), [.transaction, .revocation, .transaction, .renewal, .transaction, .renewal])
        XCTAssertEqual(f.map(\.transactionId), ["1000000000000001", "1000000000000001", "1000000000000002", nil, "2000000000000001", nil])
        XCTAssertEqual(f[0].signedAt, Self.d(10), "a receipt transaction is dated by its own latest date")
        XCTAssertEqual(f[0].effectiveAt, Self.d(0))
        XCTAssertEqual(f[1].effectiveAt, Self.d(10))
        XCTAssertEqual(f[1].transaction?.revocationReason, 1)
        XCTAssertEqual(f[2].signedAt, Self.d(30))
        XCTAssertEqual(f[3].signedAt, Self.d(50), "its renewal state is dated at Apple's answer (request_date_ms)")
        XCTAssertEqual(f[3].renewal?.autoRenewStatus, 0)
        XCTAssertEqual(f[3].renewal?.autoRenewProductId, Self.yearly)
        XCTAssertEqual(f[3].renewal?.expirationIntent, 1)
        XCTAssertEqual(f[3].renewal?.isInBillingRetryPeriod, false)
        XCTAssertEqual(f[4].transaction?.isUpgraded, true)
        XCTAssertEqual(f[4].customerId, "6f0c1b2a-0000-4000-8000-000000000001")
        XCTAssertEqual(Set(f.map(\.origin)), [.appleAPI])
        let state = try XCTUnwrap(fold([e], key: keyA).state(at: Self.d(50)))
        XCTAssertEqual(state.status, .active)
        XCTAssertEqual(state.latestTransactionId, "1000000000000002")
        XCTAssertEqual(state.autoRenewStatus, 0)
        XCTAssertEqual(fold([e], key: keyA).transaction("1000000000000001")?.revocationDate, Self.d(10))
        // Without a request date the renewal falls back to the subscription's latest date.
        let undated = FactDecoder.facts(of: Self.receipt(entries: [Self.entry("1", Self.a, purchase: 30, expires: 60)],
                                                         pending: [["original_transaction_id": Self.a, "auto_renew_status": "1"]], requested: nil))
        XCTAssertEqual(undated.last?.signedAt, Self.d(30))
    }

    /// A receipt restating a transaction dates it by its own purchase, so it does not replace the
    /// richer V2 snapshot (price, currency, type) signed after the purchase.
    func testAReceiptDoesNotReplaceARicherV2SnapshotOfTheSameTransaction() throws {
        let v2 = Self.notification("SUBSCRIBED", signed: Self.d(0.5), tx: Self.tx(Self.a, purchase: Self.d(0), expires: Self.d(30), signed: Self.d(0.5)), renewal: nil)
        let receipt = Self.receipt(entries: [Self.entry(Self.a, Self.a, purchase: 0, expires: 30)], pending: [])
        for order in [[v2, receipt], [receipt, v2]] {
            let record = try XCTUnwrap(fold(order).transaction(Self.a))
            XCTAssertEqual(record.price, 9990)
            XCTAssertEqual(record.currency, "USD")
        }
    }

    // MARK: dedupe content

    func testDedupeContentIgnoresWhatAppleChangesPerCallAndNothingElse() throws {
        func content(_ e: NewEvent) throws -> Data {
            let tree = try JSONDecoder().decode(JSONValue.self, from: e.payload)
            return try XCTUnwrap(AppleAPIEvents.dedupeContent(type: e.type, payload: tree))
        }
        let tx = Self.tx("1002", purchase: Self.d(30), expires: Self.d(60), signed: Self.d(40))
        let r = Self.renewal(auto: 1, signed: Self.d(40))
        var resignedTx = tx, resignedR = r
        resignedTx["signedDate"] = Self.d(41)
        resignedR["signedDate"] = Self.d(42)
        let base = try content(Self.statusEvent([(1, tx, r)]))
        XCTAssertEqual(try content(Self.statusEvent([(1, resignedTx, resignedR)])), base, "signed again, same content")
        XCTAssertNotEqual(try content(Self.statusEvent([(2, tx, r)])), base, "the status changed")
        XCTAssertNotEqual(try content(Self.statusEvent([(1, tx, Self.renewal(auto: 0, signed: Self.d(40)))])), base, "auto-renew changed")
        var longer = tx
        longer["expiresDate"] = Self.d(61)
        XCTAssertNotEqual(try content(Self.statusEvent([(1, longer, r)])), base)
        XCTAssertEqual(try content(Self.historyEvent(resignedTx)), try content(Self.historyEvent(tx)))
        XCTAssertNotEqual(try content(Self.historyEvent(longer)), try content(Self.historyEvent(tx)))
        // Receipts: request dates and the receipt blob do not count; the entries do.
        let entries = [Self.entry("1", Self.a, purchase: 0, expires: 30)]
        let r1 = Self.receipt(entries: entries, pending: [], requested: Self.d(50))
        var r2 = Self.receipt(entries: entries, pending: [], requested: Self.d(51))
        var tree = try JSONDecoder().decode(JSONValue.self, from: r2.payload).objectValue!
        var body = tree[AppleAPIEvents.verifyReceiptKey]!.objectValue!
        body["latest_receipt"] = .string("MIIT…another blob")
        tree[AppleAPIEvents.verifyReceiptKey] = .object(body)
        r2.payload = JSONValue.object(tree).canonicalJSON()
        XCTAssertEqual(try content(r2), try content(r1))
        XCTAssertNotEqual(try content(Self.receipt(entries: [Self.entry("1", Self.a, purchase: 0, expires: 31)], pending: [])), try content(r1))
        XCTAssertNil(AppleAPIEvents.dedupeContent(type: AppleAPIEvents.transaction, payload: .object([:])))
        XCTAssertNil(AppleAPIEvents.dedupeContent(type: "DID_RENEW", payload: .object([:])))
    }
}

import Foundation
import XCTest
@testable import LedgerCore
import LedgerTesting

/// Fact schema 6 (issue 20 items 1–2, issue 19 item 3), the expected values written by hand from
/// Apple's documents:
/// - App Store Server Notifications, `data.status`: "The status of an auto-renewable subscription
///   as of the signedDate in the responseBodyV2DecodedPayload" (1 active … 5 revoked);
///   https://developer.apple.com/documentation/appstoreservernotifications/status
/// - App Store Server API, `lastTransactionsItem.status`;
///   https://developer.apple.com/documentation/appstoreserverapi/lasttransactionsitem
/// - `appData` / RESCIND_CONSENT (Notifications 2.19) and `summary` / RENEWAL_EXTENSION SUMMARY:
///   https://developer.apple.com/documentation/appstoreservernotifications/appdata,
///   https://developer.apple.com/documentation/appstoreservernotifications/summary
/// - JWSTransactionDecodedPayload `offerDiscountType`, `appTransactionId`; JWSRenewalInfoDecodedPayload
///   `renewalPrice`, `currency`: https://developer.apple.com/documentation/appstoreservernotifications/jwstransactiondecodedpayload,
///   https://developer.apple.com/documentation/appstoreservernotifications/jwsrenewalinfodecodedpayload
final class AppleSchema6Tests: XCTestCase {
    static let key = SubscriptionKey(environment: "Production", originalTransactionId: "1000")
    static let day: EpochMillis = 86_400_000
    static let t0: EpochMillis = 1_767_225_600_000  // 2026-01-01

    static func tx(_ id: String, purchase: EpochMillis, expires: EpochMillis?, signed: EpochMillis, extra: String = "") -> String {
        var s = #""transactionId":"\#(id)","originalTransactionId":"1000","productId":"com.example.monthly","purchaseDate":\#(purchase),"signedDate":\#(signed),"type":"Auto-Renewable Subscription","appAccountToken":"5eed0c0d-0000-4a00-8000-00000000abcd","environment":"Production","bundleId":"com.example""#
        if let expires { s += #","expiresDate":\#(expires)"# }
        return s + extra
    }

    static func renewal(signed: EpochMillis, extra: String = "") -> String {
        #""originalTransactionId":"1000","productId":"com.example.monthly","autoRenewProductId":"com.example.monthly","autoRenewStatus":1,"signedDate":\#(signed),"environment":"Production""# + extra
    }

    static func v2(_ type: String, subtype: String? = nil, signed: EpochMillis, status: Int?, tx: String?, renewal: String?) -> String {
        var data = #""bundleId":"com.example","environment":"Production","appAppleId":1234"#
        if let status { data += #","status":\#(status)"# }
        var parts = [#""notificationType":"\#(type)""#, #""notificationUUID":"u""#, #""signedDate":\#(signed)"#, #""data":{\#(data)}"#]
        if let subtype { parts.append(#""subtype":"\#(subtype)""#) }
        if let tx { parts.append(#""transactionInfo":{\#(tx)}"#) }
        if let renewal { parts.append(#""renewalInfo":{\#(renewal)}"#) }
        return "{" + parts.joined(separator: ",") + "}"
    }

    static func event(_ payload: String, position: Int64, recordedAt: EpochMillis = t0) -> RecordedEvent {
        RecordedEvent(position: position, recordedAt: recordedAt, event: NewEvent(
            streamId: "1000", dedupeKey: "k\(position)", source: .apple, type: "T", environment: "Production",
            payload: Data(payload.utf8), raw: Data()))
    }

    static func facts(_ payloads: [String]) -> [Fact] {
        payloads.enumerated().flatMap { i, p in FactDecoder.facts(of: event(p, position: Int64(i + 1))) }
    }

    // MARK: the field table (issue 19 item 3)

    /// Every core row sets the typed property the folds read; the new fields come through the
    /// table alone, with the names the answers use.
    func testTheFieldTableReadsEveryFieldAndTheNewOnesIntoExtras() throws {
        let tx = Self.tx("1002", purchase: Self.t0, expires: Self.t0 + 30 * Self.day, signed: Self.t0 + 5,
                         extra: #","offerDiscountType":"FREE_TRIAL","appTransactionId":"704289572311136256","price":0,"currency":"USD","offerType":1,"isUpgraded":true,"revocationReason":1,"revocationPercentage":50000,"inAppOwnershipType":"FAMILY_SHARED","webOrderLineItemId":"w1","revocationType":"REFUND_PRORATED","offerIdentifier":"intro""#)
        let renewal = Self.renewal(signed: Self.t0 + 6,
                                   extra: #","renewalPrice":4990,"currency":"EUR","offerDiscountType":"PAY_AS_YOU_GO","appTransactionId":"704289572311136256","gracePeriodExpiresDate":1767225600123.6,"isInBillingRetryPeriod":false,"priceIncreaseStatus":1,"expirationIntent":2"#)
        let facts = FactDecoder.facts(of: Self.event(Self.v2("DID_RENEW", signed: Self.t0 + 7, status: 1, tx: tx, renewal: renewal), position: 3))
        let t = try XCTUnwrap(facts.first { $0.kind == .transaction }?.transaction)
        XCTAssertEqual(t.transactionId, "1002")
        XCTAssertEqual(t.originalTransactionId, "1000")
        XCTAssertEqual(t.webOrderLineItemId, "w1")
        XCTAssertEqual(t.purchaseDate, Self.t0)
        XCTAssertEqual(t.expiresDate, Self.t0 + 30 * Self.day)
        XCTAssertEqual(t.signedDate, Self.t0 + 5)
        XCTAssertEqual(t.price, 0)
        XCTAssertEqual(t.currency, "USD")
        XCTAssertEqual(t.offerType, 1)
        XCTAssertEqual(t.offerIdentifier, "intro")
        XCTAssertTrue(t.isUpgraded)
        XCTAssertEqual(t.revocationReason, 1)
        XCTAssertEqual(t.revocationType, "REFUND_PRORATED")
        XCTAssertEqual(t.revocationPercentage, 50000)
        XCTAssertEqual(t.inAppOwnershipType, "FAMILY_SHARED")
        XCTAssertEqual(t.type, "Auto-Renewable Subscription")
        XCTAssertEqual(t.extra("offerDiscountType"), .text("FREE_TRIAL"))
        XCTAssertEqual(t.extra("appTransactionId"), .text("704289572311136256"))
        let r = try XCTUnwrap(facts.first { $0.kind == .renewal }?.renewal)
        XCTAssertEqual(r.extra("renewalPrice"), .integer(4990), "milliunits, as Apple sends them")
        XCTAssertEqual(r.extra("currency"), .text("EUR"))
        XCTAssertEqual(r.extra("offerDiscountType"), .text("PAY_AS_YOU_GO"))
        XCTAssertEqual(r.extra("appTransactionId"), .text("704289572311136256"))
        XCTAssertEqual(r.gracePeriodExpiresDate, 1_767_225_600_124, "fractional milliseconds round like AppleTime")
        XCTAssertEqual(r.isInBillingRetryPeriod, false)
        XCTAssertEqual(r.priceIncreaseStatus, 1)
        XCTAssertEqual(r.expirationIntent, 2)
        // The answers' names: the renewal's currency is named for what it is beside the transaction's.
        XCTAssertEqual(AppleFields.json(r.extras, of: AppleFields.renewalExtras),
                       ["renewalPrice": .integer(4990), "renewalCurrency": .string("EUR"),
                        "renewalOfferDiscountType": .string("PAY_AS_YOU_GO"), "renewalAppTransactionId": .string("704289572311136256")])
        XCTAssertEqual(AppleFields.json(t.extras, of: AppleFields.transactionExtras),
                       ["offerDiscountType": .string("FREE_TRIAL"), "appTransactionId": .string("704289572311136256")])
        // A value of the wrong type reads as absent (a verified message is never made unreadable by it).
        let odd = Self.tx("1003", purchase: Self.t0, expires: nil, signed: Self.t0, extra: #","offerDiscountType":7,"price":"9.99""#)
        let oddTx = try XCTUnwrap(FactDecoder.facts(of: Self.event(Self.v2("ONE_TIME_CHARGE", signed: Self.t0, status: nil, tx: odd, renewal: nil), position: 4)).first?.transaction)
        XCTAssertNil(oddTx.extra("offerDiscountType"))
        XCTAssertNil(oddTx.price)
        XCTAssertTrue(oddTx.extras.isEmpty)
    }

    /// Every row names a distinct column, core rows have no projection column and their columns are
    /// the fixed ones: what lets a new field be one row.
    func testTheTableIsConsistent() {
        let tx = AppleFields.transaction.map(\.column), r = AppleFields.renewal.map(\.column)
        XCTAssertEqual(Set(tx + r).count, tx.count + r.count, "one column per field")
        XCTAssertTrue(AppleFields.transaction.filter(\.isCore).allSatisfy { $0.projection == nil })
        XCTAssertEqual(AppleFields.transactionExtras.map(\.name), ["offerDiscountType", "appTransactionId"])
        XCTAssertEqual(AppleFields.renewalExtras.map(\.name), ["renewalPrice", "currency", "offerDiscountType", "appTransactionId"])
        XCTAssertEqual(Set(AppleFields.transaction.map(\.apiName)).count, AppleFields.transaction.count)
    }

    /// Decoded once: the decoder reads the tree the verifier parsed, not the payload bytes; a
    /// changed payload drops the tree (it would describe other bytes).
    func testTheParsedTreeIsReadInsteadOfTheBytes() throws {
        let text = Self.v2("SUBSCRIBED", subtype: "INITIAL_BUY", signed: Self.t0, status: 1,
                           tx: Self.tx("1000", purchase: Self.t0, expires: Self.t0 + 30 * Self.day, signed: Self.t0), renewal: nil)
        let tree = try XCTUnwrap(FoundationObject(json: Data(text.utf8)))
        var e = NewEvent(streamId: "1000", dedupeKey: "k", source: .apple, type: "SUBSCRIBED/INITIAL_BUY",
                         payload: Data("not json: the bytes are never parsed again".utf8), raw: Data(), parsed: .foundation(tree))
        XCTAssertEqual(FactDecoder.facts(of: e).map(\.kind), [.transaction, .reversal, .appleStatus])
        e.payload = Data("still not json".utf8)
        XCTAssertNil(e.parsed)
        XCTAssertEqual(FactDecoder.facts(of: e).map(\.kind), [.unreadable])
        // Equal events compare equal whether or not they carry their tree.
        let stored = NewEvent(streamId: "1000", dedupeKey: "k", source: .apple, type: "T", payload: Data(text.utf8), raw: Data())
        var carried = stored
        carried.parsed = .foundation(tree)
        XCTAssertEqual(stored, carried)
        XCTAssertEqual(FactDecoder.facts(of: stored), FactDecoder.facts(of: carried))
    }

    // MARK: Apple's statements

    func testDataStatusIsAFactAtTheNotificationsSignedDate() throws {
        let facts = Self.facts([Self.v2("DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", signed: Self.t0 + 9, status: 4,
                                        tx: Self.tx("1000", purchase: Self.t0, expires: Self.t0 + 5, signed: Self.t0 + 8),
                                        renewal: Self.renewal(signed: Self.t0 + 8))])
        let statement = try XCTUnwrap(facts.first { $0.kind == .appleStatus })
        XCTAssertEqual(statement.details["status"], .integer(4))
        XCTAssertEqual(statement.details["source"]?.text, "notification")
        XCTAssertEqual(statement.signedAt, Self.t0 + 9, "as of the notification's signedDate")
        XCTAssertEqual(statement.subscription, Self.key)
        XCTAssertEqual(statement.transactionId, "1000")
        XCTAssertNil(statement.customerId, "a statement names no customer of its own")
        // Only Apple's five statuses are statements; a notification without one states none.
        XCTAssertFalse(Self.facts([Self.v2("DID_RENEW", signed: Self.t0, status: 0, tx: Self.tx("1", purchase: Self.t0, expires: nil, signed: Self.t0), renewal: nil)])
            .contains { $0.kind == .appleStatus })
        XCTAssertFalse(Self.facts([Self.v2("ONE_TIME_CHARGE", signed: Self.t0, status: nil, tx: Self.tx("1", purchase: Self.t0, expires: nil, signed: Self.t0), renewal: nil)])
            .contains { $0.kind == .appleStatus })
        // The fold never reads a statement.
        let withStatement = SubscriptionFold(key: Self.key, facts: facts)
        let without = SubscriptionFold(key: Self.key, facts: facts.filter { $0.kind != .appleStatus })
        XCTAssertEqual(withStatement.state(at: Self.t0 + 10), without.state(at: Self.t0 + 10))
    }

    func testRescindConsentNamesTheAppTransaction() throws {
        let payload = #"{"notificationType":"RESCIND_CONSENT","notificationUUID":"u","signedDate":\#(Self.t0),"appData":{"appAppleId":1234,"bundleId":"com.example","environment":"Production","signedAppTransactionInfo":null},"appTransactionInfo":{"appTransactionId":"704289572311136256","receiptType":"Production","bundleId":"com.example"}}"#
        let facts = Self.facts([payload])
        XCTAssertEqual(facts.map(\.kind), [.consentRescinded])
        let f = facts[0]
        XCTAssertNil(f.subscription, "about a customer of the app, not one subscription")
        XCTAssertEqual(f.details["appTransactionId"]?.text, "704289572311136256")
        XCTAssertEqual(f.details["environment"]?.text, "Production")
        XCTAssertEqual(f.details["bundleId"]?.text, "com.example")
        XCTAssertEqual(f.signedAt, Self.t0)
    }

    func testARenewalExtensionSummaryIsAStatementOfCounts() throws {
        let payload = #"{"notificationType":"RENEWAL_EXTENSION","subtype":"SUMMARY","notificationUUID":"u","signedDate":\#(Self.t0),"summary":{"requestIdentifier":"mass-1","productId":"com.example.monthly","succeededCount":3,"failedCount":1,"storefrontCountryCodes":["USA","CAN"],"environment":"Production","bundleId":"com.example","appAppleId":1234}}"#
        let f = try XCTUnwrap(Self.facts([payload]).first)
        XCTAssertEqual(f.kind, .extensionSummary)
        XCTAssertNil(f.subscription)
        let d = f.details
        XCTAssertEqual(d["requestIdentifier"]?.text, "mass-1")
        XCTAssertEqual(d["productId"]?.text, "com.example.monthly")
        XCTAssertEqual(d["succeededCount"], .integer(3))
        XCTAssertEqual(d["failedCount"], .integer(1))
        XCTAssertEqual(d["storefrontCountryCodes"], .array([.string("USA"), .string("CAN")]))
    }

    // MARK: the status check (issue 20 item 2)

    /// A REFUND is lost. A later DID_CHANGE_RENEWAL_STATUS states `status` 5 (REVOKED); its
    /// transaction carries revocationDate, so the ledger says revoked too: they agree. Without the
    /// transaction (renewal info only) the ledger still says active: a disagreement, until the
    /// lost REFUND (signed earlier) is backfilled — then the check agrees, while the check as of
    /// the statement's arrival keeps saying it did not.
    func testALostRefundDisagreesUntilBackfilledAndTheArrivalVerdictStays() throws {
        let purchase = Self.t0, expires = Self.t0 + 30 * Self.day
        let buy = Self.v2("SUBSCRIBED", subtype: "INITIAL_BUY", signed: purchase, status: 1,
                          tx: Self.tx("1000", purchase: purchase, expires: expires, signed: purchase), renewal: Self.renewal(signed: purchase))
        let refundAt = purchase + 3 * Self.day
        let refunded = Self.tx("1000", purchase: purchase, expires: expires, signed: refundAt, extra: #","revocationDate":\#(refundAt),"revocationReason":1"#)
        let refund = Self.v2("REFUND", signed: refundAt, status: 5, tx: refunded, renewal: nil)
        let offAt = purchase + 4 * Self.day
        let offWithTx = Self.v2("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", signed: offAt, status: 5,
                                tx: Self.tx("1000", purchase: purchase, expires: expires, signed: offAt, extra: #","revocationDate":\#(refundAt),"revocationReason":1"#),
                                renewal: Self.renewal(signed: offAt))
        let offRenewalOnly = Self.v2("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", signed: offAt, status: 5,
                                     tx: nil, renewal: Self.renewal(signed: offAt))

        // With the snapshot: Apple and the ledger agree, REFUND or no REFUND.
        var checks = AppleStatusCheck.checks(key: Self.key, facts: Self.facts([buy, offWithTx]))
        XCTAssertEqual(checks.map(\.appleStatus), [1, 5])
        XCTAssertEqual(checks.map(\.ledgerStatus), [.active, .revoked])
        XCTAssertTrue(checks.allSatisfy(\.agrees))

        // Renewal info only: the ledger cannot know; Apple's word says it missed something.
        checks = AppleStatusCheck.checks(key: Self.key, facts: Self.facts([buy, offRenewalOnly]))
        XCTAssertEqual(checks.last?.appleStatus, 5)
        XCTAssertEqual(checks.last?.ledgerStatus, .active)
        XCTAssertFalse(checks.last?.agrees ?? true)
        XCTAssertFalse(checks.last?.arrivalAgrees ?? true)
        XCTAssertEqual(checks.last?.customerId, "5eed0c0d-0000-4a00-8000-00000000abcd")
        XCTAssertEqual(checks.last?.json["evidence"]?["position"], .integer(2))

        // The REFUND, signed before the statement, arrives later (backfill): now they agree; on
        // arrival they did not (what the metric counts).
        checks = AppleStatusCheck.checks(key: Self.key, facts: Self.facts([buy, offRenewalOnly, refund]))
        let late = try XCTUnwrap(checks.first { $0.position == 2 })
        XCTAssertEqual(late.ledgerStatus, .revoked)
        XCTAssertTrue(late.agrees)
        XCTAssertEqual(late.arrivalLedgerStatus, .active)
        XCTAssertFalse(late.arrivalAgrees)
        // A fact signed after the statement never changes it: the REFUND's own statement is checked
        // at its own signedDate.
        XCTAssertEqual(checks.first { $0.position == 3 }?.ledgerStatus, .revoked)
        // Order of the facts never matters.
        XCTAssertEqual(AppleStatusCheck.checks(key: Self.key, facts: Self.facts([buy, offRenewalOnly, refund]).reversed()), checks)
    }

    /// DID_FAIL_TO_RENEW/GRACE_PERIOD: Apple says 4 (BILLING_GRACE_PERIOD) at expiry; the fold with
    /// the renewal info's gracePeriodExpiresDate says grace_period (4). EXPIRED/BILLING_RETRY later: 2.
    func testGraceAndExpiryAgreeWithApple() {
        let purchase = Self.t0, expires = Self.t0 + 30 * Self.day, grace = expires + 16 * Self.day
        let buy = Self.v2("SUBSCRIBED", subtype: "INITIAL_BUY", signed: purchase, status: 1,
                          tx: Self.tx("1000", purchase: purchase, expires: expires, signed: purchase), renewal: Self.renewal(signed: purchase))
        let fail = Self.v2("DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", signed: expires + 60_000, status: 4,
                           tx: Self.tx("1000", purchase: purchase, expires: expires, signed: expires + 60_000),
                           renewal: Self.renewal(signed: expires + 60_000, extra: #","isInBillingRetryPeriod":true,"gracePeriodExpiresDate":\#(grace),"expirationIntent":2"#))
        let retryOnly = Self.v2("GRACE_PERIOD_EXPIRED", signed: grace + 60_000, status: 3,
                                tx: Self.tx("1000", purchase: purchase, expires: expires, signed: grace + 60_000),
                                renewal: Self.renewal(signed: grace + 60_000, extra: #","isInBillingRetryPeriod":true,"gracePeriodExpiresDate":\#(grace)"#))
        let checks = AppleStatusCheck.checks(key: Self.key, facts: Self.facts([fail, retryOnly, buy]))
        XCTAssertEqual(checks.map(\.appleStatus), [4, 3, 1])
        XCTAssertEqual(checks.map(\.ledgerStatus), [.gracePeriod, .billingRetry, .active])
        XCTAssertTrue(checks.allSatisfy(\.agrees), checks.map { "\($0.appleStatus) \($0.ledgerStatus?.rawValue ?? "-")" }.joined(separator: ", "))
    }

    // MARK: the extension summary check (issue 20 item 1)

    func testASummaryCountsTheRenewalExtendedNotificationsOfItsProductAndWindow() {
        func extended(_ otid: String, signed: EpochMillis, product: String = "com.example.monthly") -> Fact {
            Fact(subscription: SubscriptionKey(environment: "Production", originalTransactionId: otid), kind: .transaction,
                 origin: .appleV2, message: "RENEWAL_EXTENDED", signedAt: signed, transactionId: otid,
                 transaction: TransactionFact(transactionId: otid, productId: product))
        }
        func summary(_ request: String, signed: EpochMillis, succeeded: Int64, position: Int64) -> Fact {
            Fact(position: position, subscription: nil, kind: .extensionSummary, origin: .appleV2, message: "RENEWAL_EXTENSION/SUMMARY",
                 signedAt: signed, detail: Detail.json(["requestIdentifier": .string(request), "productId": .string("com.example.monthly"),
                                                        "succeededCount": .integer(succeeded), "environment": .string("Production")]))
        }
        let t = Self.t0
        let facts = [extended("1", signed: t - 3 * Self.day), extended("2", signed: t - Self.day), extended("2", signed: t - Self.day + 5),
                     extended("3", signed: t - Self.day, product: "com.example.yearly"), extended("4", signed: t - 20 * Self.day),
                     extended("5", signed: t + Self.day), extended("6", signed: t + 2 * Self.day)]
        let checks = ExtensionSummaryCheck.checks(
            summaries: [summary("b", signed: t + 3 * Self.day, succeeded: 2, position: 9), summary("a", signed: t, succeeded: 3, position: 8)],
            extended: facts)
        XCTAssertEqual(checks.map(\.requestIdentifier), ["a", "b"])
        XCTAssertEqual(checks[0].received, 2, "subscriptions 1 and 2 (2 counted once); not the yearly one, not one older than the window")
        XCTAssertEqual(checks[0].shortfall, 1)
        XCTAssertEqual(checks[1].received, 2, "after the previous summary of the product: 5 and 6")
        XCTAssertEqual(checks[1].windowStart, t)
        XCTAssertEqual(checks[1].shortfall, 0)
    }

    // MARK: non-renewing subscriptions (issue 20 item 1)

    /// Apple: a Non-Renewing Subscription has no expiresDate; "the app is responsible for the
    /// duration". The catalog's durationDays grants from the purchase; without it, nothing.
    func testANonRenewingPurchaseGrantsForTheCatalogsDurationOnly() throws {
        let purchase = Self.t0
        let tx = #""transactionId":"1000","originalTransactionId":"1000","productId":"com.example.season","purchaseDate":\#(purchase),"signedDate":\#(purchase),"type":"Non-Renewing Subscription","appAccountToken":"5eed0c0d-0000-4a00-8000-00000000abcd","environment":"Production""#
        let fold = SubscriptionFold(key: Self.key, facts: Self.facts([Self.v2("ONE_TIME_CHARGE", signed: purchase, status: nil, tx: tx, renewal: nil)]))
        let timed = try ProductCatalog.decode(json: Data(#"{"products":{"com.example.season":{"entitlements":["premium"],"durationDays":90}}}"#.utf8))
        let untimed = try ProductCatalog.decode(json: Data(#"{"products":{"com.example.season":{"entitlements":["premium"]}}}"#.utf8))
        let day10 = try XCTUnwrap(fold.state(at: purchase + 10 * Self.day))
        XCTAssertEqual(day10.status, .purchased, "Apple's view: a one-time purchase")
        XCTAssertEqual(day10.purchaseDate, purchase)
        let grants = EntitlementGrant.grants(of: day10, catalog: timed)
        XCTAssertEqual(grants.map(\.entitlement), ["premium"])
        XCTAssertEqual(grants.first?.status, .active)
        XCTAssertEqual(grants.first?.expiresDate, purchase + 90 * Self.day)
        XCTAssertEqual(EntitlementGrant.grants(of: try XCTUnwrap(fold.state(at: purchase + 90 * Self.day - 1)), catalog: timed).count, 1)
        XCTAssertEqual(EntitlementGrant.grants(of: try XCTUnwrap(fold.state(at: purchase + 90 * Self.day)), catalog: timed), [], "ends at the duration")
        XCTAssertEqual(EntitlementGrant.grants(of: day10, catalog: untimed), [], "no durationDays: no grant")
        XCTAssertEqual(EntitlementGrant.grants(of: day10, catalog: .productIds), [], "the default catalog states no duration")
        XCTAssertThrowsError(try ProductCatalog.decode(json: Data(#"{"products":{"p":{"entitlements":["e"],"durationDays":0}}}"#.utf8))) {
            XCTAssertTrue("\($0)".contains("durationDays 0"))
        }
        // Refunded: nothing, whatever the catalog says.
        let refunded = #","revocationDate":\#(purchase + Self.day),"revocationReason":0"#
        let refundFold = SubscriptionFold(key: Self.key, facts: Self.facts([Self.v2("REFUND", signed: purchase + Self.day, status: nil, tx: tx + refunded, renewal: nil)]))
        XCTAssertEqual(EntitlementGrant.grants(of: try XCTUnwrap(refundFold.state(at: purchase + 2 * Self.day)), catalog: timed), [])
    }
}

/// The simulator plays Apple: every notification states `data.status` as Apple's model of the
/// subscription has it. Folded by the ledger from the facts signed by then, every statement must
/// agree (issue 20 item 2: the cross-check finds rule differences, not noise); the seeded
/// `--disputed-statuses` notifications are the only disagreements.
final class SimulatedAppleStatusTests: XCTestCase {
    func testTheSimulatorsStatusesAgreeWithTheFoldAndOnlyTheDisputedOnesDoNot() throws {
        var options = SimulationOptions(customers: 150, days: 400, start: 1_735_689_600_000)
        options.seed = 11
        options.disputedStatuses = 3
        let lifecycles = try Simulator(options: options).lifecycles()
        var position: Int64 = 0
        var disagreements: [AppleStatusCheck] = []
        var checked = 0
        for life in lifecycles {
            var facts: [Fact] = []
            for n in life.notifications.sorted(by: { $0.deliveredAt < $1.deliveredAt }) {
                position += 1
                facts += try n.facts(position: position, recordedAt: n.deliveredAt)
            }
            let key = SubscriptionKey(environment: "Sandbox", originalTransactionId: life.originalTransactionId)
            let checks = AppleStatusCheck.checks(key: key, facts: facts)
            checked += checks.count
            disagreements += checks.filter { !$0.agrees }
        }
        XCTAssertGreaterThan(checked, 1000)
        XCTAssertEqual(disagreements.count, 3, disagreements.prefix(10).map {
            "\($0.key.originalTransactionId) \($0.message ?? "") at \($0.signedAt): Apple \($0.appleStatus), ledger \($0.ledgerStatus?.rawValue ?? "-")"
        }.joined(separator: "\n"))
        XCTAssertTrue(disagreements.allSatisfy { $0.appleStatus == 5 && $0.ledgerStatus == .active })
    }
}

import Foundation
import LedgerTesting
import XCTest
@testable import LedgerCore

/// Issue 20's Apple rules, each on the facts the decoders emit, with the expected states written
/// from Apple's documentation (cited per test). Whole stories through HTTP in every order are in
/// the documented scenarios (`Documented.all()`: "lost REFUND …", "older snapshot …", "upgrade
/// inside the pre-charge window", "?at= inside an upgraded period").
final class AppleRulesTests: XCTestCase {
    typealias F = FoldFixture

    // MARK: rule 5 — numeric tie-breaks

    /// Apple's transaction ids are decimal numbers; "1000000000000000" is the later id although it
    /// sorts first as text. At one purchase instant the greater number is in effect, in any order.
    func testEqualPurchaseTimesGoToTheGreaterTransactionIdAsANumber() {
        let older = F.tx("999999999999999", from: 10, to: 40), newer = F.tx("1000000000000000", F.premium, from: 10, to: 40)
        for facts in [[older, newer], [newer, older]] {
            XCTAssertEqual(F.state(facts, at: 20)?.latestTransactionId, "1000000000000000")
            XCTAssertEqual(SubscriptionFold(key: F.key, facts: facts).transactions.map(\.transactionId),
                           ["999999999999999", "1000000000000000"], "transactions listed in numeric order at one purchase time")
        }
        XCTAssertTrue(TransactionIdOrder.precedes("999", "1000"))
        XCTAssertTrue(TransactionIdOrder.precedes("0999", "1000"), "leading zeros do not make a number greater")
        XCTAssertFalse(TransactionIdOrder.precedes("1000", "999"))
        XCTAssertFalse(TransactionIdOrder.precedes("7", "7"))
        XCTAssertTrue(TransactionIdOrder.precedes("999", "wx-order"), "digits before text (WeChat order ids)")
        XCTAssertTrue(TransactionIdOrder.precedes("a", "b"))
    }

    // MARK: rule 1 — revocation from every snapshot

    /// A REFUND lost; a later DID_CHANGE_RENEWAL_STATUS carries the transaction with its
    /// revocationDate (appstoreservernotifications/revocationdate). The customer is revoked from
    /// the revocationDate; an older snapshot (signed before the refund, delivered late) states
    /// "not revoked" as of its own signedDate, which does not undo the newer refund.
    func testALostRefundIsReadFromALaterSnapshotAndAnOlderSnapshotCannotUndoIt() {
        let bought = F.tx("1000", F.monthly, from: 0, to: 365, message: "SUBSCRIBED/INITIAL_BUY")
        let olderNotRevoked = Fact(subscription: F.key, kind: .reversal, origin: .appleV2, message: "DID_CHANGE_RENEWAL_STATUS",
                                   signedAt: F.d(10), transactionId: "1000", detail: #"{"basis":"snapshot without revocationDate"}"#)
        let laterRevoked = Fact(subscription: F.key, kind: .revocation, origin: .appleV2, message: "DID_CHANGE_RENEWAL_STATUS",
                                signedAt: F.d(25), effectiveAt: F.d(20), transactionId: "1000",
                                transaction: TransactionFact(transactionId: "1000", revocationDate: F.d(20)),
                                detail: #"{"basis":"snapshot with revocationDate"}"#)
        for facts in [[bought, olderNotRevoked, laterRevoked], [laterRevoked, olderNotRevoked, bought]] {
            XCTAssertEqual(F.state(facts, at: 15)?.status, .active)
            XCTAssertEqual(F.state(facts, at: 22)?.status, .revoked)
            XCTAssertEqual(F.state(facts, at: 30)?.revocationDate, F.d(20))
        }
        // A snapshot without revocationDate signed after the refund is Apple's reversal (the
        // fields are removed when a refund is reversed: forum thread 757986).
        let laterClean = Fact(subscription: F.key, kind: .reversal, origin: .appleV2, message: "DID_RENEW", signedAt: F.d(40),
                              transactionId: "1000", detail: #"{"basis":"snapshot without revocationDate"}"#)
        XCTAssertEqual(F.state([bought, laterRevoked, laterClean], at: 45)?.status, .active)
        XCTAssertEqual(F.state([bought, laterRevoked, laterClean], at: 30)?.status, .revoked, "revoked until the reversal was signed")
    }

    // MARK: rule 2 — upgrades supersede pre-charged renewals

    /// Apple renews up to 24 hours before the period ends (seed 001; "Apple … attempts to renew 24
    /// hours before expiration"), and an upgrade "takes effect immediately" (apple.md §2.3
    /// DID_CHANGE_RENEWAL_PREF/UPGRADE). A renewal of the basic product charged at day 29.5 for the
    /// period 30 → 60 is superseded by the upgrade bought at day 29.75: premium from the upgrade on.
    func testAnUpgradeSupersedesARenewalChargedBeforeIt() {
        let bought = F.tx("1000", F.monthly, from: 0, to: 30, message: "SUBSCRIBED/INITIAL_BUY")
        let preCharged = F.tx("1001", F.monthly, from: 30, to: 60, signed: 29.5)
        let upgrade = F.tx("1002", F.premium, from: 29.75, to: 59.75, message: "DID_CHANGE_RENEWAL_PREF/UPGRADE")
        for facts in [[bought, preCharged, upgrade], [upgrade, preCharged, bought], [preCharged, upgrade, bought]] {
            XCTAssertEqual(F.state(facts, at: 10)?.latestTransactionId, "1000")
            XCTAssertEqual(F.state(facts, at: 29.8)?.productId, F.premium)
            XCTAssertEqual(F.state(facts, at: 35)?.productId, F.premium, "not the basic renewal charged before the upgrade")
            XCTAssertEqual(F.state(facts, at: 35)?.expiresDate, F.d(59.75))
            XCTAssertEqual(F.state(facts, at: 35)?.status, .active)
        }
        // The premium's own renewal (a month later) is not superseded; nor a downgrade taking effect then.
        let premiumRenewal = F.tx("1003", F.premium, from: 59.75, to: 89.75)
        XCTAssertEqual(F.state([bought, preCharged, upgrade, premiumRenewal], at: 70)?.latestTransactionId, "1003")
        let downgradeLater = F.tx("1004", F.monthly, from: 89.75, to: 119.75)
        XCTAssertEqual(F.state([bought, preCharged, upgrade, premiumRenewal, downgradeLater], at: 100)?.latestTransactionId, "1004")
    }

    /// `?at=` inside a period that was later upgraded answers that period (it was in effect then),
    /// not the expired period before it: Apple marks the replaced transaction isUpgraded
    /// ("isUpgraded: a Boolean that indicates whether the user upgraded to another subscription"),
    /// but only from the upgrade's purchase on.
    func testAtInsideAnUpgradedPeriodAnswersThatPeriod() {
        let bought = F.tx("1000", F.monthly, from: 0, to: 30)
        let renewed = F.tx("1001", F.monthly, from: 30, to: 60, upgraded: true)
        let upgrade = F.tx("1002", F.premium, from: 40, to: 70, message: "DID_CHANGE_RENEWAL_PREF/UPGRADE")
        for facts in [[bought, renewed, upgrade], [upgrade, renewed, bought]] {
            XCTAssertEqual(F.state(facts, at: 35)?.latestTransactionId, "1001")
            XCTAssertEqual(F.state(facts, at: 35)?.status, .active)
            XCTAssertEqual(F.state(facts, at: 45)?.latestTransactionId, "1002")
        }
        // The upgrade transaction unknown: the upgraded one is out of effect (as before).
        XCTAssertEqual(F.state([bought, renewed], at: 35)?.latestTransactionId, "1000")
    }

    // MARK: rule 3 — V1

    static func v1Renewal(_ type: String, at: Double, grace: Double? = nil, next: String = FoldFixture.monthly,
                          retry: Bool? = nil) -> Fact {
        Fact(subscription: F.key, kind: .renewal, origin: .appleV1, message: "V1/" + type, signedAt: F.d(at),
             renewal: RenewalFact(productId: F.monthly, autoRenewProductId: next, autoRenewStatus: 1, isInBillingRetryPeriod: retry,
                                  gracePeriodExpiresDate: grace.map(F.d), signedDate: F.d(at)))
    }

    static func v1Tx(_ id: String, from: Double, to: Double, type: String, product: String = FoldFixture.monthly) -> Fact {
        Fact(subscription: F.key, kind: .transaction, origin: .appleV1, message: "V1/" + type, signedAt: F.d(from),
             effectiveAt: F.d(from), transactionId: id,
             transaction: TransactionFact(transactionId: id, productId: product, purchaseDate: F.d(from), expiresDate: F.d(to),
                                          type: ProductType.autoRenewable))
    }

    /// V1 dates a body by its receipt (no signed date): a DID_FAIL_TO_RENEW about the period that
    /// began at day 30 carries day 30, like the DID_RENEW that began it. Apple: DID_FAIL_TO_RENEW
    /// "indicates a subscription that failed to renew due to a billing issue" (V1 notification_type);
    /// with grace_period_expires_date_ms the customer keeps access until then. The renewal-state
    /// message wins the tie: in grace, not expired; a pending downgrade (DID_CHANGE_RENEWAL_PREF)
    /// shows as the next product.
    func testV1RenewalStateMessagesOutrankThePurchaseTheyShareATimeWith() {
        let renew = Self.v1Tx("1001", from: 30, to: 60, type: "DID_RENEW")
        let renewState = Self.v1Renewal("DID_RENEW", at: 30)
        let fail = Self.v1Renewal("DID_FAIL_TO_RENEW", at: 30, grace: 76, retry: true)
        for facts in [[renew, renewState, fail], [fail, renew, renewState]] {
            XCTAssertEqual(F.state(facts, at: 65)?.status, .gracePeriod)
            XCTAssertEqual(F.state(facts, at: 65)?.gracePeriodExpiresDate, F.d(76))
        }
        let pref = Self.v1Renewal("DID_CHANGE_RENEWAL_PREF", at: 30, next: "com.example.weekly")
        for facts in [[renew, renewState, pref], [pref, renewState, renew]] {
            XCTAssertEqual(F.state(facts, at: 40)?.autoRenewProductId, "com.example.weekly", "the pending downgrade shows")
        }
    }

    /// Issue 22 item 2: V1 facts (shared secret, unsigned) never outrank V2 facts of the same
    /// subscription. A V1 DID_RENEW with a far-future expiry neither extends the signed period nor
    /// replaces the signed renewal state; a V1 cancellation does not revoke a signed transaction.
    func testV1FactsNeverOutrankSignedFacts() {
        let signed = F.tx("1000", F.monthly, from: 0, to: 30, message: "SUBSCRIBED/INITIAL_BUY")
        let signedRenewal = F.renewal(signed: 0, auto: 0)
        let forged = Self.v1Tx("1001", from: 5, to: 5000, type: "DID_RENEW")
        let forgedSame = Self.v1Tx("1000", from: 0, to: 5000, type: "DID_RENEW")
        let forgedRenewal = Self.v1Renewal("DID_RENEW", at: 5)
        let forgedCancel = Fact(subscription: F.key, kind: .revocation, origin: .appleV1, message: "V1/CANCEL", signedAt: F.d(6),
                                effectiveAt: F.d(6), transactionId: "1000", transaction: TransactionFact(transactionId: "1000", revocationDate: F.d(6)))
        let facts = [signed, signedRenewal, forged, forgedSame, forgedRenewal, forgedCancel]
        for order in [facts, facts.reversed()] {
            let s = F.state(order, at: 40)
            XCTAssertEqual(s?.status, .expired, "the signed period ended on day 30")
            XCTAssertEqual(s?.expiresDate, F.d(30))
            XCTAssertEqual(s?.autoRenewStatus, 0, "the signed renewal state stands")
            XCTAssertEqual(F.state(order, at: 10)?.status, .active, "no V1 cancellation of a signed transaction")
        }
        // Without signed facts V1 is folded as before.
        XCTAssertEqual(F.state([forged, forgedRenewal], at: 40)?.status, .active)
    }

    /// Apple: cancellation_date_ms is "the time Apple customer support canceled a transaction, or
    /// the time an auto-renewable subscription plan was upgraded", and is_upgraded "indicates that
    /// the system canceled a subscription because the user upgraded" (App Store Receipts,
    /// responseBody.Latest_receipt_info). An upgraded entry's cancellation is no refund.
    func testV1UpgradedEntriesCancellationsAreNoRevocations() throws {
        let original = "1000000000000001"
        let entries: [[String: String]] = [
            ["transaction_id": "1000000000000001", "original_transaction_id": original, "purchase_date_ms": "1654600000000",
             "expires_date_ms": "1657200000000", "product_id": "com.example.monthly", "is_upgraded": "true",
             "cancellation_date_ms": "1655000000000"],
            ["transaction_id": "1000000000000002", "original_transaction_id": original, "purchase_date_ms": "1655000000000",
             "expires_date_ms": "1657600000000", "product_id": "com.example.premium.monthly"],
        ]
        let body: [String: Any] = [
            "notification_type": "INTERACTIVE_RENEWAL", "environment": "PROD", "auto_renew_product_id": "com.example.premium.monthly",
            "unified_receipt": ["status": 0, "latest_receipt_info": entries,
                                "pending_renewal_info": [["original_transaction_id": original, "auto_renew_product_id": "com.example.premium.monthly",
                                                          "auto_renew_status": "1"]]],
        ]
        let payload = try JSONSerialization.data(withJSONObject: ["responseBodyV1": body], options: [.sortedKeys])
        let facts = FactDecoder.facts(of: NewEvent(streamId: original, dedupeKey: "k", source: .apple, type: "V1/INTERACTIVE_RENEWAL",
                                                   environment: "Production", payload: payload, raw: Data()))
        XCTAssertFalse(facts.contains { $0.kind == .revocation }, "\(facts.map(\.kind))")
        XCTAssertFalse(facts.contains { $0.kind == .unreadable })
        // A refunded (not upgraded) entry is still a revocation.
        var refunded = entries
        refunded[0]["is_upgraded"] = nil
        var body2 = body
        body2["unified_receipt"] = ["status": 0, "latest_receipt_info": refunded]
        let payload2 = try JSONSerialization.data(withJSONObject: ["responseBodyV1": body2], options: [.sortedKeys])
        let facts2 = FactDecoder.facts(of: NewEvent(streamId: original, dedupeKey: "k", source: .apple, type: "V1/INTERACTIVE_RENEWAL",
                                                    environment: "Production", payload: payload2, raw: Data()))
        XCTAssertEqual(facts2.filter { $0.kind == .revocation }.map(\.transactionId), ["1000000000000001"])
    }
}

import Foundation
import XCTest
@testable import LedgerCore

/// The pure parts of reconciliation: API snapshots reversing refunds, refund cases with API
/// statements and consumption answers, consent, the consumption information built from facts, the
/// refund preference policy and drift entries.
final class ReconciliationFactsTests: XCTestCase {
    typealias A = AppleAPIFactsTests
    static let day = A.day
    static func d(_ x: Double) -> EpochMillis { A.d(x) }

    func fold(_ events: [NewEvent], key: SubscriptionKey = A.key) -> SubscriptionFold {
        var all: [Fact] = []
        for (i, e) in events.enumerated() {
            all += FactDecoder.facts(of: RecordedEvent(position: Int64(i + 1), recordedAt: e.signedAt ?? 0, event: e))
        }
        return SubscriptionFold(key: key, facts: all)
    }

    func placed(_ events: [NewEvent]) -> [Fact] {
        events.enumerated().flatMap { i, e in FactDecoder.facts(of: RecordedEvent(position: Int64(i + 1), recordedAt: e.signedAt ?? 0, event: e)) }
    }

    // MARK: - A lost REFUND_REVERSED

    func testAStatusSnapshotWithoutRevocationReversesAnEarlierRefundButNotALaterOne() throws {
        let tx = A.tx("1001", purchase: Self.d(0), expires: Self.d(30), signed: Self.d(0))
        let refunded = A.tx("1001", purchase: Self.d(0), expires: Self.d(30), signed: Self.d(5),
                            extra: ["revocationDate": Self.d(5), "revocationReason": 0, "revocationType": "REFUND_FULL"])
        let subscribed = A.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signed: Self.d(0), tx: tx, renewal: A.renewal(auto: 1, signed: Self.d(0)))
        let refund = A.notification("REFUND", signed: Self.d(5), tx: refunded, renewal: nil)
        // Apple's answer on day 8: the transaction as it is then, not revoked (the reversal was lost).
        let answer = A.statusEvent([(1, A.tx("1001", purchase: Self.d(0), expires: Self.d(30), signed: Self.d(8)), nil)])
        var f = fold([subscribed, refund])
        XCTAssertEqual(f.state(at: Self.d(10))?.status, .revoked)
        f = fold([subscribed, refund, answer])
        XCTAssertEqual(f.state(at: Self.d(10))?.status, .active, "healed by Apple's answer")
        XCTAssertEqual(f.state(at: Self.d(6))?.status, .revoked, "before Apple's answer the refund held")
        XCTAssertEqual(f.transaction("1001")?.refundReversedSignedDate, Self.d(8))
        XCTAssertNil(f.transaction("1001")?.revocationDate)
        // Any order: the same answer.
        XCTAssertEqual(fold([answer, refund, subscribed]).state(at: Self.d(10)), f.state(at: Self.d(10)))
        // A refund signed after the answer still wins.
        let refundAgain = A.notification("REFUND", signed: Self.d(9), tx: A.tx("1001", purchase: Self.d(0), expires: Self.d(30), signed: Self.d(9),
                                                                               extra: ["revocationDate": Self.d(9)]), renewal: nil)
        XCTAssertEqual(fold([subscribed, refund, answer, refundAgain]).state(at: Self.d(10))?.status, .revoked)
        // A transaction never revoked reports no reversal, however often Apple states it.
        XCTAssertNil(fold([subscribed, answer]).transaction("1001")?.refundReversedSignedDate)
    }

    // MARK: - Refund cases

    func testRefundCasesTakeAPIRefundsAndReversalsOnlyWhereTheyChangeTheCaseAndShowConsumptionAnswers() throws {
        let id = "1001"
        let tx = A.tx(id, purchase: Self.d(0), expires: Self.d(30), signed: Self.d(0))
        func revoked(_ signed: Double, type: String = "REFUND_FULL") -> [String: Any] {
            A.tx(id, purchase: Self.d(0), expires: Self.d(30), signed: Self.d(signed),
                 extra: ["revocationDate": Self.d(5), "revocationReason": 1, "revocationType": type])
        }
        // A refund only the API stated (its notification was lost), stated twice by two answers.
        let apiRefund1 = A.statusEvent([(5, revoked(6), nil)])
        let apiRefund2 = A.historyEvent(revoked(7))
        var cases = RefundCaseFold.cases(from: placed([apiRefund1, apiRefund2]))
        XCTAssertEqual(cases.count, 1, "an API refund opens a case")
        XCTAssertEqual(cases[0].outcome, .refunded)
        XCTAssertEqual(cases[0].appleNotifications.map(\.notificationType), ["REFUND"], "restated, not repeated")
        XCTAssertEqual(cases[0].appleNotifications.map(\.origin), ["apple.api"])
        // Family Sharing revocations are not refunds.
        XCTAssertEqual(RefundCaseFold.cases(from: placed([A.statusEvent([(5, revoked(6, type: "FAMILY_REVOKE"), nil)])])), [])
        // API snapshots of a transaction never refunded open nothing.
        XCTAssertEqual(RefundCaseFold.cases(from: placed([A.statusEvent([(1, tx, nil)]), A.historyEvent(tx)])), [])

        // Notifications, then the API: REFUND (V2), API snapshot not revoked (reverses), then the
        // same snapshot again (restates: no entry), and the ledger's consumption answer.
        let request = A.notification("CONSUMPTION_REQUEST", signed: Self.d(3), tx: tx, renewal: nil)
        let refund = A.notification("REFUND", signed: Self.d(5), tx: revoked(5), renewal: nil)
        let snapshot = A.statusEvent([(1, A.tx(id, purchase: Self.d(0), expires: Self.d(30), signed: Self.d(8)), nil)])
        let again = A.historyEvent(A.tx(id, purchase: Self.d(0), expires: Self.d(30), signed: Self.d(9)))
        let answerPayload = ConsumptionAnswerRecord.payload(
            key: A.key, transactionId: id, requestPosition: 1, requestSignedAt: Self.d(3), outcome: .notSent, reason: .noConsent,
            message: "no consent", request: nil, answer: nil, basis: nil, attempts: 0).canonicalJSON()
        let answer = NewEvent(streamId: A.otid, dedupeKey: "consumption:1", source: .ledger, type: LedgerEventType.consumptionNotSent,
                              environment: "Production", signedAt: Self.d(3.1), payload: answerPayload, raw: answerPayload)
        let facts = placed([request, answer, refund, snapshot, again])
        cases = RefundCaseFold.cases(from: facts)
        XCTAssertEqual(cases.count, 1)
        let c = cases[0]
        XCTAssertEqual(c.appleNotifications.map(\.notificationType), ["CONSUMPTION_REQUEST", "REFUND", "REFUND_REVERSED"])
        XCTAssertEqual(c.appleNotifications.map(\.origin), ["apple.v2", "apple.v2", "apple.api"])
        XCTAssertEqual(c.outcome, .reversed)
        XCTAssertEqual(c.consumptionAnswers.map(\.outcome), ["not_sent"])
        XCTAssertEqual(c.consumptionAnswers.first?.reason, "no_consent")
        XCTAssertEqual(c.consumptionAnswers.first?.requestPosition, 1)
        XCTAssertTrue(c.links.contains(2), "the answer is part of the evidence trail")
        // Order-independent.
        XCTAssertEqual(RefundCaseFold.cases(from: facts.reversed()), cases)
    }

    // MARK: - Consent

    func testConsentFactsTheLatestRecordedWinsAndCustomerIdsAreNormalised() {
        func consent(_ customer: String, _ yes: Bool, at: EpochMillis, position: Int64) -> Fact {
            let p = ConsentRecord.payload(customerId: customer, consented: yes, requestedBy: .object([:]), requestedAt: at).canonicalJSON()
            let e = NewEvent(streamId: "ledger:consent", dedupeKey: "consent:\(position)", source: .ledger, type: LedgerEventType.consent,
                             signedAt: at, payload: p, raw: p)
            return FactDecoder.facts(of: RecordedEvent(position: position, recordedAt: at, event: e))[0]
        }
        let uuid = "5EED0C0D-0000-4A00-8000-00000000ABCD"
        let yes = consent(uuid, true, at: 100, position: 1)
        XCTAssertEqual(yes.kind, .consent)
        XCTAssertEqual(yes.customerId, uuid.lowercased())
        XCTAssertNil(yes.subscription)
        let no = consent(uuid, false, at: 200, position: 2)
        XCTAssertTrue(ConsentRecord.consented([yes], asOf: 150))
        XCTAssertFalse(ConsentRecord.consented([yes, no], asOf: 250), "withdrawn")
        XCTAssertTrue(ConsentRecord.consented([no, yes], asOf: 150), "as of then")
        XCTAssertFalse(ConsentRecord.consented([], asOf: 250))
        // A consent record without a boolean is unreadable, not a yes.
        let bad = Data(#"{"customerId":"c","consented":"true"}"#.utf8)
        let f = FactDecoder.facts(of: NewEvent(streamId: "ledger:consent", dedupeKey: "x", source: .ledger, type: LedgerEventType.consent,
                                               payload: bad, raw: bad))
        XCTAssertEqual(f.map(\.kind), [.unreadable])
    }

    // MARK: - Consumption information

    func assessment(_ policy: RefundPreferencePolicy = .none, sample: SampleContentRule = .freeTrial,
                    catalog: ProductCatalog = ProductCatalog(entitlementsByProduct: [A.monthly: ["premium"]])) -> ConsumptionAssessment {
        ConsumptionAssessment(catalog: catalog, policy: policy, sampleContent: sample)
    }

    func testConsumptionInformationOfAnAutoRenewableNeverCarriesAPercentageAndFollowsThePolicy() throws {
        let trial = A.tx("1001", purchase: Self.d(0), expires: Self.d(7), signed: Self.d(0), extra: ["offerType": 1, "price": 0])
        let paid = A.tx("1002", purchase: Self.d(7), expires: Self.d(37), signed: Self.d(7))
        let f = fold([A.notification("SUBSCRIBED", signed: Self.d(0), tx: trial, renewal: A.renewal(auto: 1, signed: Self.d(0))),
                      A.notification("DID_RENEW", signed: Self.d(7), tx: paid, renewal: A.renewal(auto: 1, signed: Self.d(7)))])
        let policy = try RefundPreferencePolicy(text: "usage:10:50:DECLINE")
        // Day 10: 3 of 30 days used (10 %): not below 10 → prorated.
        var info = try assessment(policy).information(transactionId: "1002", fold: f, now: Self.d(10))
        XCTAssertTrue(info.customerConsented)
        XCTAssertEqual(info.deliveryStatus, .delivered)
        XCTAssertNil(info.consumptionPercentage, "never for auto-renewables")
        XCTAssertEqual(info.refundPreference, .grantProrated)
        XCTAssertTrue(info.sampleContentProvided, "the subscription began with a free trial")
        XCTAssertEqual(info.basis["usedMilliunits"]?.int64, 10_000)
        XCTAssertEqual(info.requestJSON["consumptionPercentage"], nil)
        // Day 8: 1 of 30 days: below 10 % → GRANT_FULL; day 30: 23 of 30 → DECLINE.
        XCTAssertEqual(try assessment(policy).information(transactionId: "1002", fold: f, now: Self.d(8)).refundPreference, .grantFull)
        XCTAssertEqual(try assessment(policy).information(transactionId: "1002", fold: f, now: Self.d(30)).refundPreference, .decline)
        // Default policy: no preference; a configured sample rule wins.
        info = try assessment(sample: .always(false)).information(transactionId: "1002", fold: f, now: Self.d(10))
        XCTAssertNil(info.refundPreference)
        XCTAssertFalse(info.sampleContentProvided)
        // A product the catalog grants nothing: not delivered, and the policy's undelivered rule.
        info = try assessment(policy, catalog: ProductCatalog(entitlementsByProduct: [:])).information(transactionId: "1002", fold: f, now: Self.d(10))
        XCTAssertEqual(info.deliveryStatus, .undeliveredOther)
        XCTAssertEqual(info.refundPreference, .grantFull)
        XCTAssertNil(info.consumptionPercentage, "auto-renewable: not even 0")
        // An unknown transaction is refused, not guessed.
        XCTAssertThrowsError(try assessment().information(transactionId: "9999", fold: f, now: Self.d(10)))
    }

    func testNonRenewingPurchasesSendTheTimeUsedAndProratedNeedsAShareStrictlyInside() throws {
        var t = A.tx("1001", purchase: Self.d(0), expires: Self.d(100), signed: Self.d(0))
        t["type"] = ProductType.nonRenewing
        let f = fold([A.notification("ONE_TIME_CHARGE", signed: Self.d(0), tx: t, renewal: nil)])
        let policy = RefundPreferencePolicy(undelivered: .grantFull, grantFullBelowPercent: 10, grantProratedBelowPercent: 90, otherwise: .decline)
        let info = try assessment(policy).information(transactionId: "1001", fold: f, now: Self.d(25))
        XCTAssertEqual(info.deliveryStatus, .delivered)
        XCTAssertEqual(info.consumptionPercentage, 25_000, "25 of 100 days")
        XCTAssertEqual(info.refundPreference, .grantProrated)
        // Everything used: GRANT_PRORATED would need a share < 100 %: the policy says decline here.
        XCTAssertEqual(try assessment(policy).information(transactionId: "1001", fold: f, now: Self.d(200)).consumptionPercentage, 100_000)
        // A prorated preference without a usable share is dropped rather than refused by Apple.
        let always = RefundPreferencePolicy(otherwise: .grantProrated)
        var c = A.tx("1003", purchase: Self.d(0), expires: nil, signed: Self.d(0))
        c["type"] = ProductType.consumable
        let coins = fold([A.notification("ONE_TIME_CHARGE", signed: Self.d(0), tx: c, renewal: nil)])
        let consumable = try assessment(always, catalog: .productIds).information(transactionId: "1003", fold: coins, now: Self.d(1))
        XCTAssertNil(consumable.refundPreference)
        XCTAssertNil(consumable.consumptionPercentage, "the ledger cannot know how much of a consumable was used")
        XCTAssertTrue(consumable.basis["refundPreference"]?.text?.contains("dropped") ?? false)
    }

    func testTheRefundPreferencePolicyParsesItsFormsAndRefusesTheRest() throws {
        XCTAssertEqual(try RefundPreferencePolicy(text: "none"), .none)
        XCTAssertEqual(try RefundPreferencePolicy(text: ""), .none)
        XCTAssertEqual(try RefundPreferencePolicy(text: "decline"), RefundPreferencePolicy(undelivered: .decline, otherwise: .decline))
        XCTAssertEqual(try RefundPreferencePolicy(text: "usage:10::GRANT_FULL"),
                       RefundPreferencePolicy(undelivered: .grantFull, grantFullBelowPercent: 10, otherwise: .grantFull))
        for bad in ["usage:50:10:DECLINE", "usage:101:0:DECLINE", "usage:10:50", "usage:x:50:DECLINE", "usage:10:50:MAYBE", "REFUND",
                    "usage:-1:5:DECLINE", String(repeating: "u", count: 10_000)] {
            XCTAssertThrowsError(try RefundPreferencePolicy(text: bad), bad.prefix(40).description) { error in
                XCTAssertTrue("\(error)".contains("usage:") || "\(error)".contains("must not be above"), "\(error)")
                XCTAssertLessThan("\(error)".count, 400, "the message does not echo a huge value")
            }
        }
        XCTAssertEqual(RefundPreferencePolicy.none.decide(delivered: false, usedMilliunits: 0).preference, nil)
    }

    // MARK: - Drift

    func testDriftEntriesNameWhatChangedAndOnlyForSubscriptionsThatChanged() {
        let monthly = A.tx("1001", purchase: Self.d(0), expires: Self.d(30), signed: Self.d(0))
        let before = SubscriptionProjection(facts: placed([A.notification("SUBSCRIBED", signed: Self.d(0), tx: monthly, renewal: A.renewal(auto: 1, signed: Self.d(0)))]))
        let yearly = A.tx("1002", product: A.yearly, purchase: Self.d(5), expires: Self.d(370), signed: Self.d(6))
        let after = SubscriptionProjection(facts: placed([
            A.notification("SUBSCRIBED", signed: Self.d(0), tx: monthly, renewal: A.renewal(auto: 1, signed: Self.d(0))),
            A.statusEvent([(1, yearly, A.renewal(auto: 1, product: A.yearly, signed: Self.d(6)))]),
        ]))
        let catalog = ProductCatalog(entitlementsByProduct: [A.monthly: ["premium"], A.yearly: ["premium", "extras"]])
        let other = SubscriptionKey(environment: "Production", originalTransactionId: "42")
        let entries = DriftEntry.entries(keys: [A.key, A.key, other], before: before.view(at: Self.d(10)), after: after.view(at: Self.d(10)), catalog: catalog)
        XCTAssertEqual(entries.count, 1, "unchanged and unknown subscriptions are not drift")
        XCTAssertEqual(entries[0].changed, ["productId", "expiresDate", "autoRenewProductId", "entitlements"])
        XCTAssertEqual(entries[0].before?.entitlements, ["premium"])
        XCTAssertEqual(entries[0].after?.entitlements, ["extras", "premium"])
        let json = entries[0].json
        XCTAssertEqual(json["after"]?["productId"], .string(A.yearly))
        XCTAssertEqual(json["changed"]?.arrayValue?.count, 4)
        // A subscription the ledger did not know before.
        let fresh = DriftEntry.entries(keys: [A.key], before: SubscriptionProjection().view(at: Self.d(10)), after: after.view(at: Self.d(10)), catalog: catalog)
        XCTAssertNil(fresh.first?.before)
        XCTAssertEqual(fresh.first?.changed, ["subscription"])
    }
}

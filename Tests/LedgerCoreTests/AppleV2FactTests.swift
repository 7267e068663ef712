import Foundation
import XCTest
@testable import LedgerCore

/// `AppleV2Facts` and `LedgerFacts`, row by row of their doc tables, through `FactDecoder` (the one
/// decoder every reader uses): what each stored payload states, with which times, and what an
/// event the ledger cannot interpret becomes.
final class AppleV2FactTests: XCTestCase {
    static let signed: EpochMillis = 1_767_225_600_000

    /// A stored V2 event: `payload` JSON as the ingestor stores it (notification members, nested JWS
    /// replaced by null, decoded `transactionInfo` / `renewalInfo` beside them).
    func event(_ payload: String, type: String = "T", environment: String? = "Production", signedAt: EpochMillis? = nil,
               source: EventSource = .apple, position: Int64 = 7) -> RecordedEvent {
        RecordedEvent(position: position, recordedAt: 1_700_000_000_000, event: NewEvent(
            streamId: "1000", dedupeKey: "k", source: source, type: type, environment: environment, signedAt: signedAt,
            payload: Data(payload.utf8), raw: Data()))
    }

    func v2(_ type: String, subtype: String? = nil, signed: EpochMillis = signed, tx: String? = nil, renewal: String? = nil,
            data: String = #""bundleId":"com.example","environment":"Production","appAppleId":1234,"signedTransactionInfo":null"#) -> String {
        var parts = [#""notificationType":"\#(type)""#, #""notificationUUID":"u-1""#, #""signedDate":\#(signed)"#, #""data":{\#(data)}"#]
        if let subtype { parts.append(#""subtype":"\#(subtype)""#) }
        if let tx { parts.append(#""transactionInfo":{\#(tx)}"#) }
        if let renewal { parts.append(#""renewalInfo":{\#(renewal)}"#) }
        return "{" + parts.joined(separator: ",") + "}"
    }

    static let tx = #""transactionId":"1002","originalTransactionId":"1000","productId":"com.example.monthly","purchaseDate":1767225000000,"expiresDate":1769904000000,"signedDate":1767225500000,"type":"Auto-Renewable Subscription","appAccountToken":"5EED0C0D-0000-4A00-8000-00000000ABCD","environment":"Production""#
    static let renewal = #""originalTransactionId":"1000","productId":"com.example.monthly","autoRenewProductId":"com.example.yearly","autoRenewStatus":1,"signedDate":1767225400000,"environment":"Production""#

    func testTransactionAndRenewalFactsTakeTheirOwnSignedDatesAndTheTransactionItsPurchaseDate() throws {
        let facts = FactDecoder.facts(of: event(v2("DID_RENEW", tx: Self.tx, renewal: Self.renewal), type: "DID_RENEW"))
        XCTAssertEqual(facts.map(\.kind), [.transaction, .reversal, .renewal])
        let t = facts[0], r = facts[2]
        XCTAssertEqual(t.subscription, SubscriptionKey(environment: "Production", originalTransactionId: "1000"))
        XCTAssertEqual(t.signedAt, 1_767_225_500_000, "the transaction's own signedDate")
        XCTAssertEqual(t.effectiveAt, 1_767_225_000_000, "in effect from its purchaseDate")
        XCTAssertEqual(t.transactionId, "1002")
        XCTAssertEqual(t.customerId, "5eed0c0d-0000-4a00-8000-00000000abcd", "appAccountToken lowercased at fact time")
        XCTAssertEqual(t.transaction?.appAccountToken, t.customerId)
        XCTAssertEqual(t.transaction?.bundleId, "com.example", "data.bundleId fills a transaction that states none")
        XCTAssertEqual(t.message, "DID_RENEW")
        XCTAssertEqual(t.position, 7)
        XCTAssertEqual(t.recordedAt, 1_700_000_000_000)
        XCTAssertEqual(r.signedAt, 1_767_225_400_000, "the renewal info's own signedDate")
        XCTAssertEqual(r.effectiveAt, r.signedAt)
        XCTAssertEqual(r.renewal?.autoRenewProductId, "com.example.yearly")
        XCTAssertEqual(r.ordinal, 2)
        // The snapshot states "not revoked as of its signedDate" (one rule with the API answers).
        XCTAssertEqual(facts[1].signedAt, t.signedAt)
        XCTAssertEqual(facts[1].details["basis"]?.text, "snapshot without revocationDate")
    }

    func testWithoutNestedSignedDatesTheNotificationsIsUsed() {
        let tx = #""transactionId":"1","originalTransactionId":"1000","purchaseDate":5"#
        let facts = FactDecoder.facts(of: event(v2("SUBSCRIBED", subtype: "INITIAL_BUY", tx: tx, renewal: #""originalTransactionId":"1000""#)))
        XCTAssertEqual(facts.map(\.signedAt), [Self.signed, Self.signed, Self.signed])
        XCTAssertEqual(facts[0].message, "SUBSCRIBED/INITIAL_BUY")
        XCTAssertEqual(facts[0].effectiveAt, 5)
        // No purchaseDate: in effect when signed.
        let bare = FactDecoder.facts(of: event(v2("SUBSCRIBED", tx: #""transactionId":"1","originalTransactionId":"1000""#)))
        XCTAssertEqual(bare.first?.effectiveAt, Self.signed)
    }

    func testRefundAndRevokeAddARevocationInEffectAtTheRevocationDate() throws {
        let refunded = Self.tx.replacingOccurrences(of: #""type""#, with: #""revocationDate":1767000000000,"revocationReason":1,"type""#)
        for type in ["REFUND", "REVOKE"] {
            let facts = FactDecoder.facts(of: event(v2(type, tx: refunded, renewal: Self.renewal)))
            XCTAssertEqual(facts.map(\.kind), [.transaction, .revocation, .renewal], type)
            let rev = facts[1]
            XCTAssertEqual(rev.signedAt, Self.signed, "\(type): ordered by the notification's signedDate")
            XCTAssertEqual(rev.effectiveAt, 1_767_000_000_000, "\(type): in effect from revocationDate")
            XCTAssertEqual(rev.transactionId, "1002")
            XCTAssertEqual(rev.transaction?.revocationReason, 1)
        }
        // A refund whose transaction states no revocationDate is in effect when signed.
        let facts = FactDecoder.facts(of: event(v2("REFUND", tx: Self.tx)))
        XCTAssertEqual(facts.first { $0.kind == .revocation }?.effectiveAt, Self.signed)
    }

    func testReversalDeclineAndConsumptionRequestAreTheirOwnKinds() {
        let cases: [(String, FactKind)] = [("REFUND_REVERSED", .reversal), ("REFUND_DECLINED", .refundDeclined),
                                           ("CONSUMPTION_REQUEST", .consumptionRequest)]
        for (type, kind) in cases {
            let data = #""bundleId":"com.example","environment":"Production","consumptionRequestReason":"UNINTENDED_PURCHASE""#
            let facts = FactDecoder.facts(of: event(v2(type, tx: Self.tx, data: data)))
            XCTAssertEqual(facts.map(\.kind), type == "REFUND_REVERSED" ? [.transaction, kind] : [.transaction, kind, .reversal], type)
            XCTAssertEqual(facts[1].signedAt, Self.signed, type)
            XCTAssertEqual(facts[1].transactionId, "1002", type)
            XCTAssertEqual(facts[1].details["reason"]?.text, "UNINTENDED_PURCHASE", type)
            XCTAssertFalse(facts.contains { $0.kind == .revocation }, "\(type) revokes nothing")
        }
    }

    /// Rule 1 of issue 20: a transaction carrying `revocationDate` is revoked whatever the
    /// notification type ("revocationDate: the UNIX time … that the App Store refunded the
    /// transaction or revoked it from Family Sharing",
    /// developer.apple.com/documentation/appstoreservernotifications/revocationdate; Apple's
    /// answer in developer forums thread 757986: "look for the revocation fields' presence in the
    /// signed transaction … refunds may be reversed … these fields will be removed").
    func testEverySnapshotStatesItsRevocationWhateverTheNotificationType() throws {
        let refunded = Self.tx.replacingOccurrences(of: #""type""#, with: #""revocationDate":1767000000000,"revocationReason":1,"type""#)
        for type in ["DID_CHANGE_RENEWAL_STATUS", "EXPIRED", "DID_RENEW", "REFUND_DECLINED"] {
            let facts = FactDecoder.facts(of: event(v2(type, tx: refunded, renewal: Self.renewal)))
            let rev = try XCTUnwrap(facts.first { $0.kind == .revocation }, type)
            XCTAssertEqual(rev.effectiveAt, 1_767_000_000_000, type)
            XCTAssertEqual(rev.signedAt, 1_767_225_500_000, "\(type): ordered by the transaction's own signedDate")
            XCTAssertFalse(facts.contains { $0.kind == .reversal }, type)
        }
        // REFUND and REVOKE state no reversal beside their revocation, even without a revocationDate.
        for type in ["REFUND", "REVOKE"] {
            XCTAssertFalse(FactDecoder.facts(of: event(v2(type, tx: Self.tx))).contains { $0.kind == .reversal }, type)
        }
    }

    /// TEST states nothing; a mass extension's SUMMARY and RESCIND_CONSENT are statements about
    /// no one subscription (fact schema 6): a summary without its request id, or a rescission
    /// naming no app transaction, is kept as unreadable evidence.
    func testNotificationsAboutNoSubscriptionGiveNoSubscriptionFacts() {
        XCTAssertEqual(FactDecoder.facts(of: event(#"{"notificationType":"TEST","signedDate":1}"#)), [])
        let summary = FactDecoder.facts(of: event(#"{"notificationType":"RENEWAL_EXTENSION","subtype":"SUMMARY","summary":{"requestIdentifier":"r"},"signedDate":1}"#))
        XCTAssertEqual(summary.map(\.kind), [.extensionSummary])
        XCTAssertEqual(summary.first?.subscription, nil)
        XCTAssertEqual(summary.first?.details["requestIdentifier"]?.text, "r")
        XCTAssertEqual(FactDecoder.facts(of: event(#"{"notificationType":"RENEWAL_EXTENSION","subtype":"SUMMARY","summary":{},"signedDate":1}"#)).map(\.kind),
                       [.unreadable])
        let rescinded = FactDecoder.facts(of: event(#"{"notificationType":"RESCIND_CONSENT","appData":{"bundleId":"b"},"signedDate":1}"#))
        XCTAssertEqual(rescinded.map(\.kind), [.unreadable])
        XCTAssertTrue(rescinded.first?.details["reason"]?.text?.contains("appTransactionId") ?? false)
    }

    func testEnvironmentComesFromTheTransactionThenDataThenTheColumn() {
        let sandboxTx = Self.tx.replacingOccurrences(of: #""environment":"Production""#, with: #""environment":"Sandbox""#)
        XCTAssertEqual(FactDecoder.facts(of: event(v2("SUBSCRIBED", tx: sandboxTx))).first?.subscription?.environment, "Sandbox")
        let noEnvTx = Self.tx.replacingOccurrences(of: #","environment":"Production""#, with: "")
        let sandboxData = #""bundleId":"com.example","environment":"Sandbox""#
        XCTAssertEqual(FactDecoder.facts(of: event(v2("SUBSCRIBED", tx: noEnvTx, data: sandboxData))).first?.subscription?.environment, "Sandbox")
        XCTAssertEqual(FactDecoder.facts(of: event(v2("SUBSCRIBED", tx: noEnvTx, data: #""bundleId":"b""#), environment: "Sandbox"))
            .first?.subscription?.environment, "Sandbox")
        // Neither Production nor Sandbox: unreadable, never filed under an environment it is not.
        let xcode = FactDecoder.facts(of: event(v2("SUBSCRIBED", tx: noEnvTx, data: #""bundleId":"b","environment":"Xcode""#), environment: nil))
        XCTAssertEqual(xcode.map(\.kind), [.unreadable])
        XCTAssertTrue(xcode[0].details["reason"]?.text?.contains("Xcode") ?? false, "\(xcode)")
    }

    func testUndecodableEventsBecomeOneUnreadableFactWithTheReason() {
        let cases: [(String, String)] = [
            ("not json", "payload"),
            ("[1,2]", "payload"),
            // A value of the wrong type reads as absent (field by field): no signedDate anywhere.
            (#"{"signedDate":"yesterday","transactionInfo":{"transactionId":"1","originalTransactionId":"2"}}"#, "signedDate"),
            (#"{"transactionInfo":{"transactionId":"1","originalTransactionId":"2"}}"#, "signedDate"),
            (#"{"signedDate":1,"transactionInfo":{"originalTransactionId":"2"}}"#, "transactionId"),
            (#"{"signedDate":1,"transactionInfo":{"transactionId":"1"}}"#, "originalTransactionId"),
            (#"{"signedDate":1,"renewalInfo":{"autoRenewStatus":1}}"#, "originalTransactionId"),
            (#"{"signedDate":1,"transactionInfo":{"transactionId":1,"originalTransactionId":"2"}}"#, "transactionId"),
        ]
        for (payload, mentions) in cases {
            let facts = FactDecoder.facts(of: event(payload, type: "DID_RENEW"))
            XCTAssertEqual(facts.map(\.kind), [.unreadable], payload)
            XCTAssertEqual(facts.first?.origin, .appleV2)
            XCTAssertEqual(facts.first?.message, "DID_RENEW")
            XCTAssertNil(facts.first?.subscription, "an unreadable fact belongs to no subscription: \(payload)")
            XCTAssertTrue(facts.first?.details["reason"]?.text?.contains(mentions) ?? false, "\(payload): \(facts)")
        }
        // An out-of-range expiry reads as absent; the transaction is still a fact.
        let huge = FactDecoder.facts(of: event(#"{"signedDate":1,"data":{"environment":"Sandbox"},"transactionInfo":{"transactionId":"1","originalTransactionId":"2","expiresDate":1e300}}"#))
        XCTAssertEqual(huge.map(\.kind), [.transaction, .reversal], "\(huge)")
        XCTAssertNil(huge.first?.transaction?.expiresDate)
        // The event's own signed_at stands in for a missing notification signedDate.
        let ok = FactDecoder.facts(of: event(#"{"transactionInfo":{"transactionId":"1","originalTransactionId":"2"}}"#, signedAt: 555))
        XCTAssertEqual(ok.first?.signedAt, 555)
    }

    func testTheSameMessageStoredTwiceGivesFactsOfEqualContent() {
        let a = FactDecoder.facts(of: event(v2("DID_RENEW", tx: Self.tx, renewal: Self.renewal), position: 3))
        let b = FactDecoder.facts(of: event(v2("DID_RENEW", tx: Self.tx, renewal: Self.renewal), position: 9))
        XCTAssertNotEqual(a, b, "placed at different positions")
        XCTAssertEqual(a.map(\.content), b.map(\.content))
        XCTAssertFalse(a[0].contentPrecedes(b[0]) || b[0].contentPrecedes(a[0]), "equal content: neither precedes")
    }

    // MARK: - Ledger facts

    func ledger(_ type: String, _ payload: String, signedAt: EpochMillis? = 42) -> [Fact] {
        FactDecoder.facts(of: event(payload, type: type, environment: nil, signedAt: signedAt, source: .ledger))
    }

    func testCustomerTiesNameTheSubscriptionAndANormalisedCustomer() {
        let tie = ledger(LedgerEventType.customerTied,
                         #"{"customerId":"5EED0C0D-0000-4A00-8000-00000000ABCD","environment":"Sandbox","originalTransactionId":"1000","requestedBy":"app"}"#)
        XCTAssertEqual(tie.map(\.kind), [.customerTie])
        XCTAssertEqual(tie[0].subscription, SubscriptionKey(environment: "Sandbox", originalTransactionId: "1000"))
        XCTAssertEqual(tie[0].customerId, "5eed0c0d-0000-4a00-8000-00000000abcd", "a UUID is lowercased like a token")
        let app = ledger(LedgerEventType.customerTied, #"{"customerId":"User-42","environment":"Production","originalTransactionId":"1000"}"#)
        XCTAssertEqual(app[0].customerId, "User-42", "the app's own ids keep their case")
        let untie = ledger(LedgerEventType.customerUntied, #"{"environment":"Production","originalTransactionId":"1000"}"#)
        XCTAssertEqual(untie.map(\.kind), [.customerTie])
        XCTAssertNil(untie[0].customerId)
        for bad in [#"{"environment":"Production","originalTransactionId":"1000"}"#, #"{"environment":"Xcode","originalTransactionId":"1","customerId":"c"}"#,
                    #"{"customerId":"c","environment":"Production"}"#] {
            XCTAssertEqual(ledger(LedgerEventType.customerTied, bad).map(\.kind), [.unreadable], bad)
        }
    }

    func testCatalogAnswersAndLinksAndTheRestOfTheLedgersEvents() {
        let catalog = ledger(LedgerEventType.catalog, #"{"digest":"abc","catalog":{"products":{}},"instance":"i"}"#)
        XCTAssertEqual(catalog.map(\.kind), [.catalog])
        XCTAssertEqual(catalog[0].details["digest"]?.text, "abc")
        XCTAssertNil(catalog[0].subscription)
        let answer = ledger(XPayEventName.refundInquiryAnswer, #"{"pay_order_id":"O1","decision":"allow","result_code":0}"#)
        XCTAssertEqual(answer.map(\.kind), [.refundAnswer])
        XCTAssertEqual(answer[0].transactionId, "O1")
        XCTAssertEqual(answer[0].details["decision"]?.text, "allow")
        XCTAssertNil(answer[0].details["pay_order_id"], "the order is the fact's transactionId, not repeated in detail")
        let link = ledger(XPayEventName.orderLinked, #"{"order_id":"O1","provisional_stream":"wechat:order:O1","subscription_stream":"2000"}"#)
        XCTAssertEqual(link.map(\.kind), [.orderAlias])
        XCTAssertEqual(link[0].subscription?.originalTransactionId, "2000")
        XCTAssertEqual(link[0].transactionId, "O1")
        XCTAssertEqual(ledger("admin/rebuild", #"{"by":"admin"}"#), [], "administrative records state no facts")
        XCTAssertEqual(ledger(LedgerEventType.catalog, #"{"catalog":{}}"#).map(\.kind), [.unreadable])
        XCTAssertEqual(ledger(XPayEventName.orderLinked, "nope").map(\.kind), [.unreadable])
    }

    // MARK: - Product catalog

    func testCatalogDecodesFromConfigurationJSON() throws {
        let catalog = try ProductCatalog.decode(json: Data("""
            {"products": {"com.example.monthly": {"entitlements": ["premium", "ads_free", "premium"]},
                          "com.example.tips": {"entitlements": []}}, "note": "unknown keys are fine"}
            """.utf8))
        XCTAssertEqual(catalog.entitlements(for: "com.example.monthly"), ["ads_free", "premium"])
        XCTAssertEqual(catalog.entitlements(for: "com.example.tips"), [])
        XCTAssertEqual(catalog.entitlements(for: "com.example.unknown"), [])
        XCTAssertFalse(catalog.lists("com.example.unknown"))
        XCTAssertTrue(catalog.lists("com.example.tips"))
        XCTAssertEqual(ProductCatalog.productIds.entitlements(for: "anything"), ["anything"], "the default catalog")
        XCTAssertTrue(ProductCatalog.productIds.lists("anything"))
    }

    func testBadCatalogsAreRefusedWithAFix() {
        let cases: [(String, (ProductCatalogError) -> Bool)] = [
            (#"{"products": ["com.example.monthly"]}"#, { if case .malformed = $0 { true } else { false } }),
            (#"{"product": {}}"#, { if case .malformed = $0 { true } else { false } }),
            (#"{"products": {"p": {"entitlements": "premium"}}}"#, { if case .malformed = $0 { true } else { false } }),
            (#"{"products": {"p": {"entitlements": [" "]}}}"#, { $0 == .emptyEntitlement(productId: "p") }),
            (#"{"products": {"": {"entitlements": ["x"]}}}"#, { $0 == .emptyProductId }),
        ]
        for (json, expected) in cases {
            XCTAssertThrowsError(try ProductCatalog.decode(json: Data(json.utf8)), json) { error in
                guard let e = error as? ProductCatalogError else { return XCTFail("\(json): \(error)") }
                XCTAssertTrue(expected(e), "\(json): \(e)")
                XCTAssertFalse(e.description.isEmpty)
            }
        }
    }

    func testOriginalTransactionIdsAndCustomerIds() {
        XCTAssertTrue(OriginalTransactionId.isValid("2000001147426510"))
        XCTAssertTrue(OriginalTransactionId.isValid("1"))
        for bad in ["", "ledger:admin", "wechat:order:1", "12a", "１２", String(repeating: "9", count: 21), " 1"] {
            XCTAssertFalse(OriginalTransactionId.isValid(bad), bad)
        }
        XCTAssertNil(CustomerId.normalised(appAccountToken: "  "))
        XCTAssertEqual(CustomerId.normalised(appAccountToken: " ABC "), "abc")
        XCTAssertEqual(CustomerId.normalised("oUser1"), "oUser1")
        XCTAssertEqual(SubscriptionKey(text: "Sandbox:12"), SubscriptionKey(environment: "Sandbox", originalTransactionId: "12"))
        XCTAssertNil(SubscriptionKey(text: "nocolon"))
        XCTAssertNil(SubscriptionKey(text: ":12"))
        XCTAssertEqual(SubscriptionKey.environment("PROD"), "Production")
        XCTAssertNil(SubscriptionKey.environment("Xcode"))
    }
}

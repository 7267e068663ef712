import XCTest
@testable import LedgerCore

/// Facts from stored events (the live path) and the product catalog from configuration JSON.
final class SubscriptionFactTests: XCTestCase {
    func event(_ json: String, source: EventSource = .apple, stream: String = "2000000000001",
               signedAt: EpochMillis? = nil, position: Int64 = 7) -> RecordedEvent {
        RecordedEvent(position: position, recordedAt: 1_700_000_000_000, event: NewEvent(
            streamId: stream, dedupeKey: "k", source: source, type: "T", signedAt: signedAt,
            payload: Data(json.utf8), raw: Data()))
    }

    func testStoredPayloadDecodesToTheSameFactAsTheColumnsPath() throws {
        let generator = LifecycleGenerator(customers: 30, days: 400, start: 1_735_689_600_000, seed: 42)
        var compared = 0
        for life in generator.lifecycles() {
            for (i, n) in life.notifications.enumerated() {
                let stored = try n.recordedEvent(position: Int64(i + 1), recordedAt: n.deliveredAt)
                let decoded = try XCTUnwrap(SubscriptionFact.decode(stored))
                XCTAssertEqual(decoded, n.fact(position: Int64(i + 1), recordedAt: n.deliveredAt))
                compared += 1
            }
        }
        XCTAssertGreaterThan(compared, 100)
    }

    func testFieldsAreReadFromTheDocumentedPlaces() throws {
        let json = """
            {"notificationType":"DID_FAIL_TO_RENEW","subtype":"GRACE_PERIOD","notificationUUID":"u1",
             "signedDate":1700000000123.6,"data":{"bundleId":"com.example.app","environment":"Sandbox","status":4},
             "transactionInfo":{"transactionId":"t9","originalTransactionId":"o1","productId":"p","expiresDate":1700000000000,
               "revocationDate":1699999999999,"revocationReason":1,"revocationType":"REFUND_PRORATED",
               "revocationPercentage":42000,"isUpgraded":true,"price":4990,"currency":"EUR","offerType":1,
               "inAppOwnershipType":"FAMILY_SHARED","futureField":{"x":1}},
             "renewalInfo":{"originalTransactionId":"o1","autoRenewProductId":"q","autoRenewStatus":0,"expirationIntent":2,
               "isInBillingRetryPeriod":true,"gracePeriodExpiresDate":1701000000000,"priceIncreaseStatus":1,
               "recentSubscriptionStartDate":1600000000000,"renewalDate":1700000000000}}
            """
        let f = try XCTUnwrap(SubscriptionFact.decode(event(json)))
        XCTAssertEqual(f.originalTransactionId, "o1")
        XCTAssertEqual(f.signedDate, 1_700_000_000_124, "fractional milliseconds round")
        XCTAssertEqual(f.status, 4)
        XCTAssertEqual(f.position, 7)
        XCTAssertEqual(f.transaction?.revocationType, "REFUND_PRORATED")
        XCTAssertEqual(f.transaction?.revocationPercentage, 42_000)
        XCTAssertEqual(f.transaction?.isUpgraded, true)
        XCTAssertEqual(f.transaction?.inAppOwnershipType, "FAMILY_SHARED")
        XCTAssertEqual(f.renewal?.gracePeriodExpiresDate, 1_701_000_000_000)
        XCTAssertEqual(f.renewal?.expirationIntent, 2)
        XCTAssertEqual(f.renewal?.autoRenewProductId, "q")
    }

    func testEventsAboutNoSubscriptionGiveNoFact() throws {
        XCTAssertNil(try SubscriptionFact.decode(event(#"{"notificationType":"TEST","signedDate":1}"#, stream: "apple:test")))
        XCTAssertNil(try SubscriptionFact.decode(event(
            #"{"notificationType":"RENEWAL_EXTENSION","subtype":"SUMMARY","summary":{"requestIdentifier":"r"}}"#)))
        XCTAssertNil(try SubscriptionFact.decode(event(#"{"anything":1}"#, source: .ledger)))
        // WeChat events are facts now (WeChatFactTests); a payload that is not JSON is refused there.
        // A transaction without an id cannot be merged, and nothing else is there.
        XCTAssertNil(try SubscriptionFact.decode(event(#"{"signedDate":5,"transactionInfo":{"productId":"p"}}"#)))
    }

    func testHostilePayloadsAreRefusedWithThePosition() {
        for bad in ["", "null", "[1,2]", #"{"signedDate":"yesterday"}"#, #"{"transactionInfo":{"expiresDate":1e300}}"#] {
            XCTAssertThrowsError(try SubscriptionFact.decode(event(bad, position: 99)), bad) { error in
                guard case SubscriptionFactError.undecodablePayload(let position, _) = error else {
                    return XCTFail("\(bad): \(error)")
                }
                XCTAssertEqual(position, 99)
                XCTAssertTrue(String(describing: error).contains("position 99"))
            }
        }
    }

    func testMissingSignedDateFallsBackThenFails() throws {
        let noDate = #"{"transactionInfo":{"transactionId":"t","originalTransactionId":"o"}}"#
        XCTAssertEqual(try SubscriptionFact.decode(event(noDate, signedAt: 555))?.signedDate, 555)
        XCTAssertThrowsError(try SubscriptionFact.decode(event(noDate))) { error in
            XCTAssertEqual(error as? SubscriptionFactError, .missingSignedDate(position: 7))
        }
        // No originalTransactionId anywhere: the stream id names the subscription.
        let noOriginal = #"{"signedDate":3,"transactionInfo":{"transactionId":"t"}}"#
        XCTAssertEqual(try SubscriptionFact.decode(event(noOriginal, stream: "s-1"))?.originalTransactionId, "s-1")
        XCTAssertThrowsError(try SubscriptionFact(apple: try JSONDecoder().decode(AppleEventPayload.self, from: Data(noOriginal.utf8)),
                                                  position: 1, recordedAt: 1))
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

    func testEntitlementsGoToTheirCustomerOnly() throws {
        typealias F = Fixture
        var facts = F.renewedTwice()
        // A second subscription of another customer, and one without any customer link.
        func other(_ sub: String, token: String?) -> SubscriptionFact {
            var tx = F.tx("x-\(sub)", F.premium, from: 0, to: 30, signed: 0, token: token)
            tx.originalTransactionId = sub
            return SubscriptionFact(position: 0, recordedAt: F.d(0), originalTransactionId: sub,
                                    notificationType: "SUBSCRIBED", subtype: "INITIAL_BUY", signedDate: F.d(0),
                                    transaction: tx, renewal: F.renewal(F.premium, signed: 0))
        }
        facts.append(other("s2", token: "someone-else"))
        facts.append(other("s3", token: nil))
        let view = SubscriptionProjection(facts: facts).view(at: F.d(10))
        XCTAssertEqual(view.entitlements(catalog: F.catalog, customerId: F.customer).map(\.entitlement), ["basic"])
        XCTAssertEqual(view.entitlements(catalog: F.catalog, customerId: "someone-else").map(\.entitlement), ["basic", "premium"])
        XCTAssertEqual(view.entitlements(catalog: F.catalog).count, 3, "a subscription with no customer grants nothing")
        XCTAssertEqual(view.entitlements(catalog: F.catalog, customerId: "nobody"), [])
        XCTAssertEqual(view.entitlements(catalog: ProductCatalog(products: [:])), [], "unmapped products grant nothing")
        XCTAssertEqual(view.subscriptions.map(\.originalTransactionId), [F.sub, "s2", "s3"])
    }
}

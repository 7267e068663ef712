import Crypto
import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import AppStore

/// What reconciliation stores must stay verifiable offline (`ledger verify-payload` reads the raw
/// of API answers), numbers 0 and 1 are numbers, and the consumption request the ledger builds
/// obeys Apple's rules.
final class APIEvidenceTests: XCTestCase {
    static let otid = "1000000000000001"

    func fakeWithSubscription() throws -> (FakeAppStoreServer, AppStoreServerAPIClient) {
        let (fake, key) = try FakeAppStoreServer.make(authority: Fixtures.authority)
        try fake.start()
        var t = AppleTestAuthority.sample(originalTransactionId: Self.otid).transaction
        t.purchaseDate = AppleTime(1_767_225_600_000)
        t.expiresDate = AppleTime(1_769_904_000_000)
        fake.setSubscription(.init(originalTransactionId: Self.otid, transactions: [t],
                                   renewal: AppleTestAuthority.sample(originalTransactionId: Self.otid).renewal))
        let c = try AppStoreServerAPIConfiguration(issuerId: fake.credentials.issuerId, keyId: fake.credentials.keyId, privateKey: key,
                                                   bundleId: fake.credentials.bundleId, baseURL: fake.baseURL, allowsPlainHTTPLoopback: true)
        return (fake, AppStoreServerAPIClient(configuration: c, environment: .sandbox))
    }

    func testStoredAPIAnswersVerifyOfflineAndATamperedItemIsRefused() async throws {
        let (fake, client) = try fakeWithSubscription()
        defer { Task { await fake.shutdown() } }
        let inspector = PayloadInspector(verifier: Fixtures.authority.verifier())

        // The raw of an API/subscription-status event: Apple's whole statuses answer.
        let statuses = try await client.allSubscriptionStatuses(transactionId: Self.otid)
        let events = try AppleAPIAnswerEvents(verifier: Fixtures.authority.verifier(), acceptance: Fixtures.sandbox)
            .subscriptionStatusEvents(statuses)
        var report = try inspector.inspect(events[0].raw)
        XCTAssertEqual(report.kind, .statusResponse)
        XCTAssertEqual(report.outcomes.map(\.path), ["data[0].lastTransactions[0].signedTransactionInfo", "data[0].lastTransactions[0].signedRenewalInfo"])
        XCTAssertTrue(report.allVerified, report.render())
        XCTAssertTrue(report.render().contains("\"transactionId\" : \"\(Self.otid)\""), report.render())
        // Under a root it does not trust, the same answer does not verify.
        XCTAssertFalse(try PayloadInspector(verifier: Fixtures.stranger.verifier()).inspect(events[0].raw).allVerified)

        // A history page, a notification history page.
        let page = try await client.transactionHistoryPage(transactionId: Self.otid)
        report = try inspector.inspect(page.body)
        XCTAssertEqual(report.kind, .transactionHistory)
        XCTAssertEqual(report.outcomes.count, 1)
        XCTAssertTrue(report.allVerified)
        _ = try fake.notify("DID_RENEW", about: Self.otid, date: 1_767_225_700_000)
        let history = try await client.notificationHistoryPage(NotificationHistoryRequest(startDate: 1_767_225_600_000, endDate: 1_767_325_600_000))
        report = try inspector.inspect(history.body)
        XCTAssertEqual(report.kind, .notificationHistory)
        XCTAssertEqual(report.outcomes.map(\.path), ["notificationHistory[0].signedPayload", "notificationHistory[0].signedPayload.data.signedTransactionInfo",
                                                     "notificationHistory[0].signedPayload.data.signedRenewalInfo"])
        XCTAssertTrue(report.allVerified, report.render())

        // One byte of a signed item changed: that item is REFUSED, the rest still verifies.
        var text = String(decoding: events[0].raw, as: UTF8.self)
        let jws = try XCTUnwrap(((try JSONSerialization.jsonObject(with: events[0].raw) as? [String: Any])?["data"] as? [[String: Any]])?
            .first?["lastTransactions"] as? [[String: Any]])?.first?["signedRenewalInfo"] as? String
        let signature = try XCTUnwrap(jws?.split(separator: ".").last)
        let flipped = String(signature.dropLast()) + (signature.last == "A" ? "B" : "A")
        text = text.replacingOccurrences(of: String(signature), with: flipped)
        report = try inspector.inspect(Data(text.utf8))
        XCTAssertFalse(report.allVerified)
        XCTAssertEqual(report.outcomes.filter(\.verified).count, 1)
        XCTAssertTrue(report.render().contains("signedRenewalInfo: REFUSED"), report.render())

        // A verifyReceipt answer carries no signature: said so, never "verified".
        let receipt = Data(#"{"status":0,"environment":"Sandbox","receipt":{"bundle_id":"com.example"},"latest_receipt":"MIIblob=="}"#.utf8)
        report = try inspector.inspect(receipt)
        XCTAssertEqual(report.kind, .verifyReceipt)
        XCTAssertFalse(report.allVerified)
        XCTAssertTrue(report.render().contains("TLS"), report.render())
        XCTAssertFalse(report.render().contains("MIIblob"), "the receipt blob is left out")
        // A stored payload (decoded, no signatures) is refused with what to give instead.
        assertRefused("malformed", .malformed) { try inspector.inspect(Data(#"{"statusResponse":{"data":[]}}"#.utf8)) }
    }

    /// On Linux every NSNumber holding 0 or 1 also casts to Bool: a JSON 0 or 1 must still be a number.
    func testJSONZeroAndOneAreNumbersAndOnlyTrueAndFalseAreBooleans() throws {
        let o = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(#"{"a":0,"b":1,"c":true,"d":false,"e":2,"f":1.0}"#.utf8)) as? [String: Any])
        XCTAssertEqual(JSONNumbers.int64(o["a"]), 0)
        XCTAssertEqual(JSONNumbers.int64(o["b"]), 1)
        XCTAssertNil(JSONNumbers.int64(o["c"]))
        XCTAssertNil(JSONNumbers.int64(o["d"]))
        XCTAssertEqual(JSONNumbers.millis(o["a"]), 0)
        XCTAssertEqual(JSONNumbers.millis(o["b"]), 1)
        XCTAssertNil(JSONNumbers.millis(o["c"]))
        XCTAssertEqual(JSONNumbers.int64(o["e"]), 2)
        XCTAssertEqual(JSONNumbers.int64(o["f"]), 1)
        // Through the ingestion path: a notification whose data.status is 1 and appAppleId fields are numbers.
        XCTAssertEqual(try Fields.int64(o, "b"), 1)
        XCTAssertThrowsError(try Fields.int64(o, "c"), "a boolean is not an integer")
    }

    func testTheConsumptionRequestTheLedgerBuildsKeepsAppleRules() throws {
        let info = ConsumptionInformation(customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false,
                                          consumptionPercentage: nil, refundPreference: .grantProrated, basis: .null)
        let request = ConsumptionRequest(info)
        XCTAssertEqual(request.deliveryStatus, .delivered)
        XCTAssertEqual(request.refundPreference, .grantProrated)
        XCTAssertNoThrow(try request.validate(productType: "Auto-Renewable Subscription"), "Apple computes it for auto-renewables")
        XCTAssertThrowsError(try request.validate(productType: "Consumable"), "GRANT_PRORATED needs a share for a consumable") { error in
            XCTAssertTrue("\(error)".contains("consumptionPercentage"), "\(error)")
        }
        var withShare = request
        withShare.consumptionPercentage = 40_000
        XCTAssertNoThrow(try withShare.validate(productType: "Consumable"))
        XCTAssertThrowsError(try withShare.validate(productType: "Auto-Renewable Subscription"))
        // The wire form is what the builder documents.
        XCTAssertEqual(info.requestJSON.canonicalJSON(),
                       Data(#"{"customerConsented":true,"deliveryStatus":"DELIVERED","refundPreference":"GRANT_PRORATED","sampleContentProvided":false}"#.utf8))
    }
}

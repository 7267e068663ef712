import Foundation
import LedgerCore
@testable import LedgerService
import XCTest

/// The hand-written answers of the hot reads must be the canonical JSON of the representation,
/// byte for byte, in every shape: nulls, customers tied over a token or an openid, escapes,
/// non-ASCII text, negative and extreme integers.
final class ReadAnswersTests: XCTestCase {
    func testSubscriptionAnswerIsTheCanonicalRepresentationInEveryShape() {
        let texts: [String?] = [nil, "", "plain", "quote \" backslash \\ slash / tab \t nl \n cr \r", "\u{01}\u{1F}\u{7F}", "日本語 €", "com.example.monthly"]
        let numbers: [Int64?] = [nil, 0, -1, 1_735_689_600_000, .max, .min]
        var checked = 0
        for (i, status) in SubscriptionStatus.allCases.enumerated() {
            for (j, text) in texts.enumerated() {
                let number = numbers[(i + j) % numbers.count]
                let small = number.map { Int(truncatingIfNeeded: $0) }
                for customer in 0..<4 {
                    let state = SubscriptionState(
                        originalTransactionId: text ?? "1000000000000001", evaluatedAt: number ?? 42, status: status,
                        bundleId: text, environment: j % 2 == 0 ? "Production" : text, productId: text, productType: text,
                        autoRenewProductId: text, expiresDate: number, gracePeriodExpiresDate: number,
                        isInBillingRetryPeriod: (i + j) % 2 == 0, autoRenewStatus: small, expirationIntent: small,
                        priceIncreaseStatus: small, offerType: small, offerIdentifier: text,
                        appAccountToken: customer == 3 ? nil : text,
                        customerId: customer == 0 ? nil : (text ?? "customer-1"),
                        customerSource: customer == 1 ? nil : (customer == 2 ? .tie : .openId),
                        implicitCustomerId: customer >= 2 ? "other \(j)" : nil,
                        latestTransactionId: text, recentSubscriptionStartDate: number, renewalDate: number, revocationDate: number,
                        purchaseDate: number,
                        // The table-named members (AppleFields) merge in at their canonical places.
                        renewalExtras: customer % 2 == 0 ? AppleExtras()
                            : AppleExtras(values: [number.map(AppleFieldValue.integer), text.map(AppleFieldValue.text),
                                                   text.map(AppleFieldValue.text), text.map(AppleFieldValue.text)]))
                    let expected = Representation.subscription(state).canonicalJSON()
                    let written = Representation.subscriptionJSON(state)
                    XCTAssertEqual(String(decoding: written, as: UTF8.self), String(decoding: expected, as: UTF8.self))
                    checked += 1
                }
            }
        }
        XCTAssertEqual(checked, SubscriptionStatus.allCases.count * texts.count * 4)
    }

    func testEntitlementsAnswerIsTheCanonicalDocument() {
        for count in [0, 1, 3] {
            var grants: [EntitlementGrant] = []
            for i in 0..<count {
                let entitlement: String = i == 1 ? "prémium\\" : "basic"
                let expires: Int64? = i == 2 ? nil : Int64(i) * 1_000 - 1
                let status: SubscriptionStatus = i == 0 ? .active : .gracePeriod
                grants.append(EntitlementGrant(customerId: "c \(i)", environment: "Production", entitlement: entitlement,
                                               productId: "com.example.\(i)", originalTransactionId: "10000000000000\(i)",
                                               expiresDate: expires, status: status))
            }
            let rescinded = (0..<count).map { ConsentRescission(appTransactionId: "70428957231113625\($0)", rescindedAt: Int64($0) - 3, position: 9) }
            let document: JSONValue = ["customerId": .string("c \"x\""), "environment": .string("Sandbox"), "asOf": .integer(-5),
                                       "entitlements": .array(grants.map(Representation.entitlement)),
                                       "consentRescinded": .array(rescinded.map(\.json))]
            let written = Representation.entitlementsJSON(customerId: "c \"x\"", environment: "Sandbox", asOf: -5, grants: grants,
                                                          consentRescinded: rescinded)
            XCTAssertEqual(String(decoding: written, as: UTF8.self), String(decoding: document.canonicalJSON(), as: UTF8.self))
        }
    }

    /// The writer the canonical form relies on: integers as `String(i)`, keys in byte order.
    func testIntegerAndKeyOrderPrimitives() {
        for i: Int64 in [0, 1, -1, 9, 10, -10, 123_456_789, .max, .min, .max - 1, .min + 1] {
            var out: [UInt8] = []
            JSONValue.writeInteger(i, to: &out)
            XCTAssertEqual(String(decoding: out, as: UTF8.self), String(i))
        }
        let keys = ["b", "a", "ab", "", "é", "Z", "aa", "a\u{0}"]
        XCTAssertEqual(keys.sorted(by: JSONValue.utf8Precedes), keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
    }
}

import XCTest
@testable import LedgerCore

final class AppleModelsTests: XCTestCase {
    func testTimesDecodeFromIntegersAndFractionalMilliseconds() throws {
        let json = #"{"expiresDate": 1697679936049.7297, "purchaseDate": 1697679936049, "originalPurchaseDate": -62135769600000, "unknownField": {"x": 1}}"#
        let tx = try JSONDecoder().decode(AppleTransaction.self, from: Data(json.utf8))
        XCTAssertEqual(tx.expiresDate?.millis, 1_697_679_936_050)
        XCTAssertEqual(tx.purchaseDate?.millis, 1_697_679_936_049)
        XCTAssertEqual(tx.originalPurchaseDate?.millis, -62_135_769_600_000)
    }

    func testNonFiniteOrHugeTimesAreRefused() {
        XCTAssertThrowsError(try JSONDecoder().decode(AppleTime.self, from: Data("1e300".utf8)))
    }

    /// One odd value must not make a verified message unreadable: it reads as absent, the rest stays.
    func testAFieldOfTheWrongTypeOrRangeReadsAsAbsent() throws {
        let json = #"{"transactionId": "7", "expiresDate": 1e300, "price": 99990.5, "isUpgraded": "yes", "productId": 42, "purchaseDate": 5}"#
        let tx = try JSONDecoder().decode(AppleTransaction.self, from: Data(json.utf8))
        XCTAssertEqual(tx.transactionId, "7")
        XCTAssertEqual(tx.purchaseDate?.millis, 5)
        XCTAssertNil(tx.expiresDate)
        XCTAssertNil(tx.price)
        XCTAssertNil(tx.isUpgraded)
        XCTAssertNil(tx.productId)
    }
}

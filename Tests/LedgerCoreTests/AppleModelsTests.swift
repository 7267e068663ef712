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
        XCTAssertThrowsError(try JSONDecoder().decode(AppleTransaction.self, from: Data(#"{"expiresDate": 1e300}"#.utf8)))
    }
}

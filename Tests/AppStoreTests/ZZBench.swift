import Foundation
import XCTest
@testable import AppStore

final class ZZBench: XCTestCase {
    func testBench() {
        let raw = (0..<9000).map { UInt8(truncatingIfNeeded: $0 &* 7919) }
        let url = Array(Base64.encodeURL(raw).utf8)
        var t0 = Date()
        for _ in 0..<200 { _ = Base64.decodeURL(url) }
        print("ours per 12KB: \(Date().timeIntervalSince(t0) / 200 * 1e6) µs")
        let std = Data(raw).base64EncodedData()
        t0 = Date()
        for _ in 0..<200 { _ = Data(base64Encoded: std) }
        print("foundation per 12KB: \(Date().timeIntervalSince(t0) / 200 * 1e6) µs")
        t0 = Date()
        for _ in 0..<200 { _ = JSONGuard.scan(url) }
        print("scan per 12KB: \(Date().timeIntervalSince(t0) / 200 * 1e6) µs")
    }
}

import Foundation
import LedgerTesting
import XCTest
@testable import LedgerCore

/// `JSONValue.canonicalJSON()` replaced JSONEncoder as the one JSON writer; stored dedupe keys
/// hash its output, so it must stay byte-identical to what JSONEncoder (sorted keys, slashes
/// unescaped) wrote before.
final class JSONValueTests: XCTestCase {
    func testCanonicalJSONIsByteIdenticalToJSONEncoderOnRandomTrees() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var rng = SplitMix64(seed: 0x15_0A_2026)
        let keys = ["a", "B", "b", "A", "_x", "10", "9", "é", "ü", "Z", "z1", "CreateTime", "createTime", "🙂", "a\u{7f}", "k\"q", "s/l"]
        let strings = ["", "plain", "quote\"back\\slash", "tab\tnl\ncr\rff\u{0C}bs\u{08}", "\u{01}\u{1F}", "é✓🙂", "a/b", "\u{2028}\u{7f}"]
        let doubles: [Double] = [1.5, 0.1, -0.0, 2.0, 1e15, 1e16, 1e300, -1.25e-7, 123456789.125, 9007199254740993.0]
        func tree(_ depth: Int) -> JSONValue {
            let pick = rng.next() % (depth > 3 ? 5 : 7)
            switch pick {
            case 0: return .null
            case 1: return .bool(rng.next() % 2 == 0)
            case 2: return .integer(Int64(bitPattern: rng.next()) >> Int64(rng.next() % 63))
            case 3: return .number(doubles[Int(rng.next() % UInt64(doubles.count))])
            case 4: return .string(strings[Int(rng.next() % UInt64(strings.count))])
            case 5: return .array((0..<Int(rng.next() % 4)).map { _ in tree(depth + 1) })
            default:
                var o: [String: JSONValue] = [:]
                for _ in 0..<Int(rng.next() % 6) { o[keys[Int(rng.next() % UInt64(keys.count))]] = tree(depth + 1) }
                return .object(o)
            }
        }
        for i in 0..<3_000 {
            let value = tree(0)
            let expected = try encoder.encode(value)
            XCTAssertEqual(String(decoding: value.canonicalJSON(), as: UTF8.self), String(decoding: expected, as: UTF8.self), "tree \(i)")
            XCTAssertEqual(try JSONValue(json: value.canonicalJSON()), try JSONValue(json: expected))
        }
    }

    func testLiteralsBuildTrees() {
        let v: JSONValue = ["a": 1, "b": [true, nil, "x"], "c": ["d": .optional(nil as String?)]]
        XCTAssertEqual(String(decoding: v.canonicalJSON(), as: UTF8.self), #"{"a":1,"b":[true,null,"x"],"c":{"d":null}}"#)
    }
}

import XCTest
@testable import Crypto

final class CryptoTests: XCTestCase {
    func testSHA256KnownVector() {
        XCTAssertEqual(Hex.encode(Digest.sha256(Array("abc".utf8))),
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    func testSHA1KnownVector() {
        XCTAssertEqual(Hex.encode(Digest.sha1(Array("abc".utf8))), "a9993e364706816aba3e25717850c26c9cd0d89d")
    }

    // RFC 4231 test case 2.
    func testHMACSHA256RFC4231() {
        XCTAssertEqual(Hex.encode(Digest.hmacSHA256(key: Array("Jefe".utf8), Array("what do ya want for nothing?".utf8))),
                       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    func testAESRoundTripAndRejectsBadLengths() throws {
        let key = [UInt8](repeating: 7, count: 32), iv = Array(key.prefix(16))
        let plain = [UInt8](repeating: 0x41, count: 32)
        let c = try AES256CBC.encrypt(key: key, iv: iv, plaintext: plain)
        XCTAssertNotEqual(c, plain)
        XCTAssertEqual(try AES256CBC.decrypt(key: key, iv: iv, ciphertext: c), plain)
        XCTAssertThrowsError(try AES256CBC.decrypt(key: key, iv: iv, ciphertext: Array(c.prefix(15))))
        XCTAssertThrowsError(try AES256CBC.decrypt(key: Array(key.prefix(16)), iv: iv, ciphertext: c))
    }

    func testConstantTimeEquals() {
        XCTAssertTrue(ConstantTime.equals("secret", "secret"))
        XCTAssertFalse(ConstantTime.equals("secret", "secreT"))
        XCTAssertFalse(ConstantTime.equals("secret", "secret2"))
        XCTAssertTrue(ConstantTime.equals("", ""))
    }
}

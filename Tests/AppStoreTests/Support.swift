import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import AppStore

/// One minted authority per test process: key generation and minting cost milliseconds.
enum Fixtures {
    static let authority: AppleTestAuthority = try! AppleTestAuthority.mint()
    /// A second, self-made PKI with Apple's OIDs that nobody trusts.
    static let stranger: AppleTestAuthority = try! AppleTestAuthority.mint({ var o = AppleTestAuthority.ChainOptions(); o.name = "Stranger"; o.caCurve = .p256; return o }())
    static let sandbox = try! AppleAcceptance(bundleIds: ["com.example"], appAppleIds: [1234], environments: ["Sandbox"])
    static let both = try! AppleAcceptance(bundleIds: ["com.example"], appAppleIds: [1234], environments: ["Sandbox", "Production"])

    static func ingestor(_ acceptance: AppleAcceptance = sandbox, authority: AppleTestAuthority = authority,
                         options: SignedDataVerifierOptions = SignedDataVerifierOptions()) -> AppleNotificationIngestor {
        AppleNotificationIngestor(verifier: authority.verifier(options), acceptance: acceptance)
    }

    static func minted(_ edit: (inout AppleTestAuthority.ChainOptions) -> Void) -> AppleTestAuthority {
        var o = AppleTestAuthority.ChainOptions()
        o.caCurve = .p256
        edit(&o)
        return try! AppleTestAuthority.mint(o)
    }
}

/// Asserts the call is refused with exactly this code and kind (the HTTP status depends on both).
func assertRefused<T>(_ code: String, _ kind: RefusalKind, file: StaticString = #filePath, line: UInt = #line,
                      _ body: () throws -> T) {
    do {
        let v = try body()
        XCTFail("expected refusal \(code), got \(v)", file: file, line: line)
    } catch let error as AppleVerificationError {
        XCTAssertEqual(error.code, code, "\(error)", file: file, line: line)
        XCTAssertEqual(error.kind, kind, "\(error)", file: file, line: line)
        XCTAssertFalse(error.message.isEmpty, file: file, line: line)
    } catch {
        XCTFail("expected AppleVerificationError \(code), got \(error)", file: file, line: line)
    }
}

func vectorText(_ path: String) throws -> String {
    String(decoding: try AppleVectors.read(path), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
}

func jsonObject(_ d: Data) throws -> [String: Any] {
    try XCTUnwrap(try JSONSerialization.jsonObject(with: d) as? [String: Any])
}

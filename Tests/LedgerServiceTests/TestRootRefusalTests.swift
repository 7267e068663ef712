import AppStore
import Crypto
import CryptoTesting
import Foundation
@testable import LedgerService
import LedgerTesting
import XCTest

/// `ledger serve` (LedgerApp construction) refuses a trusted root that is not Apple's while
/// Production is accepted, unless LEDGER_APPLE_ALLOW_TEST_ROOTS=true: a test authority's chain is
/// shaped exactly like Apple's, and only the root tells them apart.
final class TestRootRefusalTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-root-policy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(at: directory)
    }

    /// Resources/AppleRootCA-G3.der, read from disk (not the bytes compiled into AppStore).
    private static let appleRootFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Resources/AppleRootCA-G3.der")

    private func write(_ certificates: [X509Certificate], _ name: String) throws -> String {
        let url = directory.appendingPathComponent(name)
        try Data(certificates.map(\.pem).joined().utf8).write(to: url)
        return url.path
    }

    /// Builds the app as `ledger serve` does: configuration from `environment`, the flag from it too.
    private func makeApp(_ environment: [String: String]) throws -> LedgerApp {
        var env = ["LEDGER_DATABASE_URL": "dbname=unused", "LEDGER_APPLE_BUNDLE_IDS": "com.example", "LEDGER_APPLE_APP_APPLE_IDS": "1234"]
        env.merge(environment) { $1 }
        let app = try LedgerApp(configuration: try LedgerConfiguration.load(environment: env), log: Log(minimum: .error))
        app.shutdown()
        return app
    }

    private func refusal(_ environment: [String: String], file: StaticString = #filePath, line: UInt = #line) -> String? {
        do {
            _ = try makeApp(environment)
            XCTFail("the service started", file: file, line: line)
            return nil
        } catch {
            return "\(error)"
        }
    }

    func testTheBundledRootsFingerprintIsComputedFromResourcesAndMatchesApplesPublishedOne() throws {
        let fromDisk = try X509Certificate(der: Array(Data(contentsOf: Self.appleRootFile)))
        XCTAssertEqual(fromDisk, AppleTrustedRoots.bundledAppleRootCAG3)
        let fingerprint = AppleRootPolicy.fingerprint(fromDisk)
        // apple.md §1.2 publishes it abbreviated as 63:34:3A:BF:…:3E:91:79.
        XCTAssertTrue(fingerprint.hasPrefix("63:34:3A:BF:"), fingerprint)
        XCTAssertTrue(fingerprint.hasSuffix(":3E:91:79"), fingerprint)
        XCTAssertEqual(fingerprint.count, 32 * 3 - 1)
        XCTAssertEqual(AppleRootPolicy.appleRootFingerprints, [Digest.sha256(fromDisk.der)])
    }

    func testProductionWithATestRootIsRefusedNamingTheRootAndTheFix() throws {
        let authority = try AppleTestAuthority.mint()
        let path = try write([authority.root], "test-root.pem")
        for flag in [nil, "", "false", "0"] {
            var env = ["LEDGER_APPLE_ROOT_CERTS": path, "LEDGER_APPLE_ENVIRONMENTS": "Sandbox,Production"]
            env["LEDGER_APPLE_ALLOW_TEST_ROOTS"] = flag
            let message = try XCTUnwrap(refusal(env), "flag \(flag ?? "unset")")
            XCTAssertTrue(message.contains(path), message)
            XCTAssertTrue(message.contains(authority.root.subject), message)
            XCTAssertTrue(message.contains(AppleRootPolicy.fingerprint(authority.root)), message)
            XCTAssertTrue(message.contains(AppleRootPolicy.fingerprint(AppleTrustedRoots.bundledAppleRootCAG3)), message)
            XCTAssertTrue(message.contains("LEDGER_APPLE_ALLOW_TEST_ROOTS=true"), message)
            XCTAssertTrue(message.contains("LEDGER_APPLE_ENVIRONMENTS=Sandbox"), message)
        }
        // Production alone, too.
        XCTAssertNotNil(refusal(["LEDGER_APPLE_ROOT_CERTS": path, "LEDGER_APPLE_ENVIRONMENTS": "Production"]))
    }

    func testTheFlagAllowsATestRootForProduction() throws {
        let path = try write([try AppleTestAuthority.mint().root], "test-root.pem")
        for flag in ["true", "1"] {
            XCTAssertNoThrow(try makeApp(["LEDGER_APPLE_ROOT_CERTS": path, "LEDGER_APPLE_ENVIRONMENTS": "Sandbox,Production",
                                          "LEDGER_APPLE_ALLOW_TEST_ROOTS": flag]))
        }
    }

    func testAFlagThatIsNotABooleanIsRefusedRatherThanGuessed() throws {
        let path = try write([try AppleTestAuthority.mint().root], "test-root.pem")
        for flag in ["yes", "TRUE ", "on", "tru"] {
            let message = try XCTUnwrap(refusal(["LEDGER_APPLE_ROOT_CERTS": path, "LEDGER_APPLE_ENVIRONMENTS": "Sandbox",
                                                 "LEDGER_APPLE_ALLOW_TEST_ROOTS": flag]))
            XCTAssertTrue(message.contains("LEDGER_APPLE_ALLOW_TEST_ROOTS") && message.contains("'\(flag)' is not a boolean"), message)
        }
    }

    func testSandboxOnlyMayTrustATestRootWithoutTheFlag() throws {
        let path = try write([try AppleTestAuthority.mint().root], "test-root.pem")
        XCTAssertNoThrow(try makeApp(["LEDGER_APPLE_ROOT_CERTS": path, "LEDGER_APPLE_ENVIRONMENTS": "Sandbox"]))
    }

    func testApplesRealRootIsAcceptedForProductionAsAFileOrBundled() throws {
        XCTAssertNoThrow(try makeApp(["LEDGER_APPLE_ROOT_CERTS": Self.appleRootFile.path, "LEDGER_APPLE_ENVIRONMENTS": "Production"]))
        let pem = try write([AppleTrustedRoots.bundledAppleRootCAG3], "apple.pem")
        XCTAssertNoThrow(try makeApp(["LEDGER_APPLE_ROOT_CERTS": pem, "LEDGER_APPLE_ENVIRONMENTS": "Sandbox,Production"]))
        XCTAssertNoThrow(try makeApp(["LEDGER_APPLE_ENVIRONMENTS": "Sandbox,Production"]))
    }

    /// One foreign root among Apple's is enough to refuse: the verifier would trust every root given.
    func testATestRootBesideApplesIsRefusedAndTheForeignOneIsNamed() throws {
        let authority = try AppleTestAuthority.mint()
        let both = try write([AppleTrustedRoots.bundledAppleRootCAG3, authority.root], "both.pem")
        let message = try XCTUnwrap(refusal(["LEDGER_APPLE_ROOT_CERTS": both, "LEDGER_APPLE_ENVIRONMENTS": "Production"]))
        XCTAssertTrue(message.contains(authority.root.subject), message)
        let separate = "\(Self.appleRootFile.path):\(try write([authority.root], "test.pem"))"
        let second = try XCTUnwrap(refusal(["LEDGER_APPLE_ROOT_CERTS": separate, "LEDGER_APPLE_ENVIRONMENTS": "Production"]))
        XCTAssertTrue(second.contains(directory.appendingPathComponent("test.pem").path), second)
        XCTAssertFalse(second.contains(Self.appleRootFile.path), "Apple's own file is not the one to remove: \(second)")
    }

    /// A root with Apple's exact name (and Apple-like extensions) but another key is not Apple's.
    func testALookAlikeRootWithApplesNameIsRefused() throws {
        let key = try ECPrivateKey.generate(curve: .p384)
        let apple = AppleTrustedRoots.bundledAppleRootCAG3
        let lookAlike = try X509Certificate.mint(
            CertificateTemplate(role: .root, subject: [("CN", "Apple Root CA - G3"), ("OU", "Apple Certification Authority"),
                                                       ("O", "Apple Inc."), ("C", "US")],
                                serial: 0x2DC5_FC88_D2C5_4B95 & Int.max, notBefore: apple.notBefore, notAfter: apple.notAfter),
            subjectKey: key.publicKey, issuer: nil, issuerKey: key)
        XCTAssertEqual(lookAlike.subject, apple.subject, "the test needs a name-for-name copy")
        let path = try write([lookAlike], "look-alike.pem")
        let message = try XCTUnwrap(refusal(["LEDGER_APPLE_ROOT_CERTS": path, "LEDGER_APPLE_ENVIRONMENTS": "Production"]))
        XCTAssertTrue(message.contains(AppleRootPolicy.fingerprint(lookAlike)), message)
    }

    /// `ledger-dev simulate --mint-root` prints what a service needs: the flag only for Production.
    func testTheSimulatorsServiceEnvironmentStartsAServiceForEitherEnvironment() throws {
        for environment in ["Sandbox", "Production"] {
            var options = SimulationOptions(customers: 1, days: 1, start: 1_767_225_600_000)
            options.environment = environment
            options.seed = 3
            let simulator = try Simulator(options: options)
            let path = directory.appendingPathComponent("sim-\(environment).der").path
            try simulator.writeRoot(to: path)
            var env = Dictionary(uniqueKeysWithValues: simulator.serviceEnvironment(rootPath: path).map { ($0.name, $0.value) })
            XCTAssertEqual(env["LEDGER_APPLE_ALLOW_TEST_ROOTS"], environment == "Production" ? "true" : nil)
            XCTAssertNoThrow(try makeApp(env), environment)
            if environment == "Production" {
                env["LEDGER_APPLE_ALLOW_TEST_ROOTS"] = nil
                XCTAssertNotNil(refusal(env), "without the flag the simulator's Production set-up is refused")
            }
        }
    }
}

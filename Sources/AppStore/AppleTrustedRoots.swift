import Crypto
import Foundation

/// Configuration mistakes found while building the Apple verifier; fix them before serving.
public enum AppleConfigurationError: Error, Equatable, CustomStringConvertible {
    case unreadableRootFile(path: String, reason: String)
    case noCertificateInRootFile(path: String, reason: String)
    case productionWithoutAppAppleId
    case noBundleIds
    case noEnvironments

    public var description: String {
        switch self {
        case .unreadableRootFile(let p, let r):
            return "cannot read trusted root certificate file \(p) (\(r)); fix LEDGER_APPLE_ROOT_CERTS (colon-separated DER or PEM files)"
        case .noCertificateInRootFile(let p, let r):
            return "\(p) holds no DER or PEM certificate (\(r)); fix LEDGER_APPLE_ROOT_CERTS"
        case .productionWithoutAppAppleId:
            return "accepting Production requires the app's appAppleId: set LEDGER_APPLE_APP_APPLE_IDS"
        case .noBundleIds:
            return "no bundle id is accepted: set LEDGER_APPLE_BUNDLE_IDS"
        case .noEnvironments:
            return "no environment is accepted: set LEDGER_APPLE_ENVIRONMENTS (Production, Sandbox)"
        }
    }
}

/// The trust anchors for Apple's signed data: the bundled Apple Root CA - G3 unless the operator
/// names files (LEDGER_APPLE_ROOT_CERTS). `x5c[2]` is never one of them.
public enum AppleTrustedRoots {
    public static var bundledAppleRootCAG3: X509Certificate {
        // The bytes are a compile-time constant verified by a test; failure here is a build defect.
        try! X509Certificate(der: BundledAppleRoot.der)
    }

    /// Loads every certificate from each file (DER, or PEM with one or more certificates).
    public static func load(paths: [String]) throws(AppleConfigurationError) -> [X509Certificate] {
        var out: [X509Certificate] = []
        for path in paths {
            let bytes: [UInt8]
            do { bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path))) } catch {
                throw .unreadableRootFile(path: path, reason: error.localizedDescription)
            }
            do { out += try X509Certificate.parseFile(bytes: bytes) } catch {
                throw .noCertificateInRootFile(path: path, reason: "\(error)")
            }
        }
        return out
    }

    /// `LEDGER_APPLE_ROOT_CERTS` semantics: colon-separated paths; unset or empty → the bundled root.
    public static func fromEnvironmentValue(_ value: String?) throws(AppleConfigurationError) -> [X509Certificate] {
        let paths = (value ?? "").split(separator: ":").map { String($0).trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        if paths.isEmpty { return [bundledAppleRootCAG3] }
        return try load(paths: paths)
    }
}

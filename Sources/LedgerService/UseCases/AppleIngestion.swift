import AppStore
import Crypto
import Foundation
import LedgerCore
import LedgerStore

/// Use case: a notification from Apple, verified and stored. Apple retries anything but a 2xx, so
/// the answer is "stored" only once the event is committed (or was already stored: a retry of an
/// accepted notification); the database being down throws `StoreError.unavailable` (503, Apple
/// retries), and what can never be stored throws an `AppleVerificationError` (4xx).
struct AppleIngestion: Sendable {
    /// Nil when the deployment accepts no Apple notifications; `refusal` says what to configure.
    let ingestor: AppleNotificationIngestor?
    let refusal: String
    let sharedSecret: Secret?
    /// Trusted roots that are not Apple's while Production is accepted, tolerated only because
    /// LEDGER_APPLE_ALLOW_TEST_ROOTS=true (logged at start-up); empty otherwise.
    let allowedTestRoots: [AppleRootPolicy.Root]

    let intake: NotificationIntake

    /// Refuses a Production-accepting configuration whose trusted roots are not Apple's unless
    /// `configuration.allowTestRoots` (see `AppleRootPolicy`).
    init(configuration: LedgerConfiguration.Apple, intake: NotificationIntake) throws(AppleWebhookConfigurationError) {
        self.intake = intake
        let allowTestRoots = configuration.allowTestRoots
        sharedSecret = configuration.sharedSecret
        // Loaded file by file so that a refusal can name the file holding the wrong root.
        var configured: [AppleRootPolicy.Root] = []
        for path in configuration.rootCertificatePaths {
            do {
                configured += try AppleTrustedRoots.load(paths: [path]).map { AppleRootPolicy.Root(path: path, certificate: $0) }
            } catch {
                throw .apple(error)
            }
        }
        allowedTestRoots = try AppleRootPolicy.check(configured, environments: configuration.environments,
                                                     allowTestRoots: allowTestRoots)
        let roots = configured.isEmpty ? [AppleTrustedRoots.bundledAppleRootCAG3] : configured.map(\.certificate)
        do {
            let acceptance = try AppleAcceptance(
                bundleIds: configuration.bundleIds, appAppleIds: configuration.appAppleIds,
                environments: configuration.environments)
            ingestor = AppleNotificationIngestor(verifier: SignedDataVerifier(trustedRoots: roots), acceptance: acceptance)
            refusal = ""
        } catch .noBundleIds {
            // A ledger with no Apple app configured still serves WeChat and queries.
            ingestor = nil
            refusal = AppleConfigurationError.noBundleIds.description
        } catch {
            throw .apple(error)
        }
    }
}

/// Why the Apple webhook cannot be configured as given; `ledger serve` does not start.
enum AppleWebhookConfigurationError: Error, CustomStringConvertible {
    case apple(AppleConfigurationError)
    /// Production is accepted and a trusted root is not Apple's.
    case testRootForProduction(AppleRootPolicy.Root)

    var description: String {
        switch self {
        case .apple(let error): return error.description
        case .testRootForProduction(let root):
            return "refusing to accept Production notifications under a trusted root that is not Apple's: \(root.path) holds "
                + "'\(root.certificate.subject)' (SHA-256 \(AppleRootPolicy.fingerprint(root.certificate))), and whoever holds its "
                + "key could sign Production purchases. Apple's root is Apple Root CA - G3 (SHA-256 "
                + "\(AppleRootPolicy.fingerprint(AppleTrustedRoots.bundledAppleRootCAG3))), bundled and used when no root is "
                + "configured. Fix: remove \(root.path) from LEDGER_APPLE_ROOT_CERTS (apple.rootCertificates), or stop accepting "
                + "Production (LEDGER_APPLE_ENVIRONMENTS=Sandbox); for a test set-up only, set LEDGER_APPLE_ALLOW_TEST_ROOTS=true"
        }
    }
}

/// Production purchases grant real entitlements, so a Production-accepting service trusts only
/// Apple's roots. A test authority (LedgerTesting's, or anyone's minted from a public seed) makes
/// chains shaped exactly like Apple's; the only thing that tells them apart is the root itself.
/// Roots are compared by the SHA-256 of their DER, computed from the bundled Apple Root CA - G3
/// rather than typed in. Sandbox-only deployments may trust any root (test PKIs are their point).
enum AppleRootPolicy {
    struct Root: Sendable {
        /// The configured file the certificate came from.
        var path: String
        var certificate: X509Certificate
    }

    /// Apple's root for signed App Store data; the one Apple documents (apple.md §1.2).
    static let appleRootFingerprints: Set<[UInt8]> = [Digest.sha256(AppleTrustedRoots.bundledAppleRootCAG3.der)]

    /// Throws for the first configured root that is not Apple's when Production is accepted, unless
    /// `allowTestRoots`; returns the roots so tolerated (to be logged), empty when none.
    static func check(_ roots: [Root], environments: Set<String>, allowTestRoots: Bool)
        throws(AppleWebhookConfigurationError) -> [Root] {
        guard environments.contains("Production") else { return [] }
        let foreign = roots.filter { !appleRootFingerprints.contains(Digest.sha256($0.certificate.der)) }
        if let first = foreign.first, !allowTestRoots { throw .testRootForProduction(first) }
        return foreign
    }

    /// `63:34:3A:…` as certificate tools print it.
    static func fingerprint(_ certificate: X509Certificate) -> String {
        Hex.encode(Digest.sha256(certificate.der)).uppercased().chunked(2).joined(separator: ":")
    }
}

private extension String {
    func chunked(_ n: Int) -> [String] {
        var out: [String] = []
        var i = startIndex
        while i < endIndex {
            let j = index(i, offsetBy: n, limitedBy: endIndex) ?? endIndex
            out.append(String(self[i..<j]))
            i = j
        }
        return out
    }
}

/// The two notification formats Apple sends.
enum AppleNotificationVersion: String, Sendable {
    /// App Store Server Notifications V2: a signed JWS payload.
    case v2
    /// Status update notifications V1: JSON with the shared secret.
    case v1

    var source: String { "apple_\(rawValue)" }
}

extension AppleIngestion {
    /// Verifies `body` and stores it; the receipt says whether it was new.
    func ingest(_ version: AppleNotificationVersion, body: Data, remoteAddress: String?) async throws -> NotificationReceipt {
        guard let ingestor else {
            intake.count(source: version.source, outcome: "not_configured")
            throw ServiceFailure(.notConfigured, "apple_not_configured", refusal)
        }
        let received: AppleNotificationIngestor.Intake
        do {
            switch version {
            case .v2: received = try ingestor.intakeV2(body: body)
            case .v1: received = .readable(try ingestor.ingestV1(body: body, sharedSecret: sharedSecret?.value))
            }
        } catch {
            intake.count(source: version.source, outcome: error.code)
            intake.log.warn("apple notification refused", ["version": version.rawValue, "code": error.code, "remote": remoteAddress ?? "-"])
            throw error
        }
        switch received {
        case .readable(let event):
            return NotificationReceipt(try await intake.append([event], source: version.source)[0])
        case .unreadable(let event, let why):
            return NotificationReceipt(try await intake.keepUnreadable(event, source: version.source, code: why.code, reason: why.message))
        }
    }
}

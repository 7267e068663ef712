import AppStore
import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// Apple's webhooks. Apple retries anything but a 2xx, so the answer is 200 only once the event is
/// committed (or was already stored: a retry of an accepted notification), 503 when the database
/// is down (Apple will retry), and 4xx for what can never be stored.
struct AppleWebhook: Sendable {
    /// Nil when the deployment accepts no Apple notifications; `refusal` says what to configure.
    let ingestor: AppleNotificationIngestor?
    let refusal: String
    let sharedSecret: Secret?
    /// Trusted roots that are not Apple's while Production is accepted, tolerated only because
    /// LEDGER_APPLE_ALLOW_TEST_ROOTS=true (logged at start-up); empty otherwise.
    let allowedTestRoots: [AppleRootPolicy.Root]

    /// - Parameter allowTestRoots: LEDGER_APPLE_ALLOW_TEST_ROOTS; see `AppleRootPolicy`.
    init(configuration: LedgerConfiguration.Apple, allowTestRoots: Bool = false) throws(AppleWebhookConfigurationError) {
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

extension LedgerApp {
    func addAppleRoutes(to router: inout Router) {
        router.add("POST", "/v1/apple/notifications") { [self] request in
            await ingestApple(version: "v2", request: request) { (ingestor) throws(AppleVerificationError) -> NewEvent in
                try ingestor.ingestV2(body: request.body)
            }
        }
        router.add("POST", "/v1/apple/notifications/v1") { [self] request in
            await ingestApple(version: "v1", request: request) { [apple] (ingestor) throws(AppleVerificationError) -> NewEvent in
                try ingestor.ingestV1(body: request.body, sharedSecret: apple.sharedSecret?.value)
            }
        }
    }

    private func ingestApple(
        version: String, request: HTTPRequest,
        _ verify: (AppleNotificationIngestor) throws(AppleVerificationError) -> NewEvent
    ) async -> HTTPResponse {
        guard let ingestor = apple.ingestor else {
            countNotification(source: "apple_\(version)", outcome: "not_configured")
            return .error(status: 422, code: "apple_not_configured", message: apple.refusal)
        }
        let event: NewEvent
        do {
            event = try verify(ingestor)
        } catch {
            countNotification(source: "apple_\(version)", outcome: error.code)
            log.warn("apple notification refused", ["version": version, "code": error.code, "remote": request.remoteAddress ?? "-"])
            return .error(status: error.kind.httpStatus, code: error.code, message: error.message)
        }
        return await append(event, source: "apple_\(version)")
    }

    /// Appends one verified event and answers the webhook: 200 only after the commit.
    func append(_ event: NewEvent, source: String) async -> HTTPResponse {
        do {
            let outcome = try await store.append(event)
            countNotification(source: source, outcome: outcome.duplicate ? "duplicate" : "stored")
            return JSONBody.response(200, ["status": outcome.duplicate ? "duplicate" : "stored", "position": outcome.position])
        } catch {
            return storeFailure(error, source: source)
        }
    }

    func storeFailure(_ error: StoreError, source: String) -> HTTPResponse {
        if error.isUnavailable {
            countNotification(source: source, outcome: "database_unavailable")
            log.error("database unavailable; answered 503 so the sender retries", ["source": source, "error": "\(error)"])
            return .error(status: 503, code: "database_unavailable",
                          message: "the ledger's database is unavailable; nothing was stored — retry later")
        }
        countNotification(source: source, outcome: "storage_rejected")
        log.error("the database refused a verified event", ["source": source, "error": "\(error)"])
        return .error(status: 500, code: "storage_rejected",
                      message: "the database refused the event; nothing was stored. This is a ledger defect: report it with the time of the request")
    }

    func countNotification(source: String, outcome: String) {
        metrics.increment("ledger_notifications_total", ["source": source, "outcome": outcome])
    }
}

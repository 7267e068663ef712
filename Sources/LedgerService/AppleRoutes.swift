import AppStore
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

    init(configuration: LedgerConfiguration.Apple) throws(AppleConfigurationError) {
        sharedSecret = configuration.sharedSecret
        let roots = configuration.rootCertificatePaths.isEmpty
            ? [AppleTrustedRoots.bundledAppleRootCAG3]
            : try AppleTrustedRoots.load(paths: configuration.rootCertificatePaths)
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
        }
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

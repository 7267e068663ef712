import AppStore
import LedgerMetrics
import Foundation
import LedgerCore
import LedgerStore

/// The use cases that talk to Apple rather than listen to it, built from one configuration:
/// reconciliation (nil without API credentials), the consumption responder (runs without them
/// too: it then records why nothing was sent), consent, and receipt verification.
public struct AppleAPIUseCases: Sendable {
    public let reconciliation: AppleReconciliation?
    public let consumption: ConsumptionResponder
    let consent: ConsentDesk
    let receipts: ReceiptVerification
    /// The drift reports and runs (`GET /v1/admin/drift`; the auditor pages).
    public let drift: DriftReports
    /// LEDGER_RECONCILE_EVERY.
    let every: Duration?
    let consumptionPoll: Duration
    /// Why reconciliation is unavailable (no credentials), for the command line and the API.
    let notConfigured: String

    init(configuration: LedgerConfiguration, ingestion: AppleIngestion, store: Store, catalog: ProductCatalog,
         metrics: MetricsRegistry, log: Log) throws(LedgerAppError) {
        let api = configuration.appleAPI
        let clientConfigurations: [AppStoreServerAPIConfiguration]
        do {
            clientConfigurations = try api.clientConfigurations(fallbackBundleIds: configuration.apple.bundleIds.sorted())
        } catch {
            throw .configuration("App Store Server API: \(error)")
        }
        // One client per app and environment the deployment accepts (issue 20 item 3).
        var clients: [AppStoreServerAPIClient] = []
        var consumptionClients: [AppStoreServerAPIClient] = []
        for clientConfiguration in clientConfigurations {
            for environment in configuration.apple.environments {
                guard let env = AppStoreEnvironment(text: environment) else { continue }
                clients.append(AppStoreServerAPIClient(configuration: clientConfiguration, environment: env, metrics: metrics))
                // The outbox retries later itself; each pass makes few attempts of its own.
                var quick = clientConfiguration
                quick.retry.maxAttempts = 2
                consumptionClients.append(AppStoreServerAPIClient(configuration: quick, environment: env, metrics: metrics))
            }
        }
        let registry = AppStoreServerAPIClients(clients)
        notConfigured = clientConfigurations.isEmpty
            ? "set LEDGER_APPLE_API_ISSUER_ID, LEDGER_APPLE_API_KEY_ID and LEDGER_APPLE_API_PRIVATE_KEY (the In-App Purchase key, .p8)"
            : ingestion.ingestor == nil ? ingestion.refusal : ""
        if let ingestor = ingestion.ingestor, !registry.isEmpty {
            reconciliation = AppleReconciliation(store: store, ingestor: ingestor, clients: registry, catalog: catalog, metrics: metrics, log: log)
        } else {
            reconciliation = nil
        }
        consumption = ConsumptionResponder(
            store: store, clients: AppStoreServerAPIClients(consumptionClients),
            assessment: ConsumptionAssessment(catalog: catalog, policy: api.refundPreference, sampleContent: api.sampleContent),
            metrics: metrics, log: log)
        consent = ConsentDesk(store: store)
        drift = DriftReports(store: store)
        drift.registerMetrics(metrics)
        var verifyReceipt: VerifyReceiptConfiguration
        do { verifyReceipt = try api.verifyReceiptConfiguration(sharedSecret: configuration.apple.sharedSecret) } catch {
            throw .configuration("\(error)")
        }
        // An app waits for the answer: Apple's retries must fit the request deadline (the app retries).
        verifyReceipt.retry.maxAttempts = 2
        verifyReceipt.retry.maxRetryAfter = .seconds(2)
        verifyReceipt.requestTimeoutSeconds = 4
        verifyReceipt.maxStatusAttempts = 2
        let receiptRefusal = ingestion.ingestor == nil ? ("apple_not_configured", ingestion.refusal)
            : configuration.apple.sharedSecret == nil
            ? ("shared_secret_not_configured", "set LEDGER_APPLE_SHARED_SECRET (App Store Connect → the app → App Information → App-Specific Shared Secret): verifyReceipt needs it for receipts with auto-renewable subscriptions")
            : ("", "")
        receipts = ReceiptVerification(
            client: VerifyReceiptClient(configuration: verifyReceipt, metrics: metrics),
            answers: receiptRefusal.0.isEmpty ? ingestion.ingestor.map { AppleAPIAnswerEvents(verifier: $0.verifier, acceptance: $0.acceptance) } : nil,
            refusal: receiptRefusal, store: store)
        every = api.reconcileEvery
        consumptionPoll = .seconds(api.consumptionPollSeconds)
        if reconciliation == nil, every != nil {
            throw .configuration("LEDGER_RECONCILE_EVERY is set but reconciliation cannot run: \(notConfigured)")
        }
    }

    /// The reconciliation use case, or why there is none.
    func requireReconciliation() throws(ReconciliationError) -> AppleReconciliation {
        guard let reconciliation else { throw .notConfigured(notConfigured) }
        return reconciliation
    }

    /// The long-running parts `ledger serve` adds: the consumption sender always, the periodic
    /// reconciliation when LEDGER_RECONCILE_EVERY is set (or, without it, a part that only stops
    /// the runs started by `POST /v1/admin/reconcile` at shutdown).
    func lifecycleServices(log: Log) -> [any LifecycleService] {
        var services: [any LifecycleService] = [ConsumptionSenderService(responder: consumption, interval: consumptionPoll, log: log)]
        if let reconciliation {
            services.append(ReconciliationService(reconciliation: reconciliation, every: every, log: log))
        }
        return services
    }
}

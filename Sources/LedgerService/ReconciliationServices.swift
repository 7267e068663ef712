import Foundation
import LedgerCore
import Synchronization

/// A loop that runs `tick` every `interval` until shutdown; shutdown cancels the sleep (and the
/// tick in flight, whose work is written to survive that) and waits for the loop to end.
final class PeriodicLoop: Sendable {
    private let task = Mutex<Task<Void, Never>?>(nil)
    private let stopped = Mutex(false)

    /// Runs until `stop()`. `tick` errors are the caller's to log.
    func run(interval: Duration, tick: @escaping @Sendable () async -> Void) async {
        let loop = Task {
            while !Task.isCancelled {
                await tick()
                do { try await Task.sleep(for: interval) } catch { return }
            }
        }
        let alreadyStopped = stopped.withLock { s in
            if s { return true }
            task.withLock { $0 = loop }
            return false
        }
        if alreadyStopped { loop.cancel() }
        await loop.value
    }

    func stop() async {
        let running = stopped.withLock { s -> Task<Void, Never>? in
            s = true
            return task.withLock { $0 }
        }
        running?.cancel()
        await running?.value
    }
}

/// The consumption outbox sender as a service: a pass every `interval` (default 5 s; Apple's
/// window is 12 hours), one sender across instances (`ConsumptionResponder.pass`).
final class ConsumptionSenderService: LifecycleService {
    let name = "consumption-sender"
    let responder: ConsumptionResponder
    let interval: Duration
    let log: Log
    private let loop = PeriodicLoop()

    init(responder: ConsumptionResponder, interval: Duration, log: Log) {
        self.responder = responder
        self.interval = interval
        self.log = log
    }

    func run() async throws {
        await loop.run(interval: interval) { [responder, log] in
            do { try await responder.pass() } catch {
                log.warn("consumption sender pass failed; retrying next pass", ["error": "\(error)"])
            }
        }
    }

    func shutdown() async { await loop.stop() }
}

/// Periodic reconciliation (`LEDGER_RECONCILE_EVERY`) as a service: every minute it asks whether
/// a period has passed since the last periodic run on any instance (under the reconciliation
/// lock, so two instances run once per period). At shutdown it also stops the runs
/// `POST /v1/admin/reconcile` started in the background.
final class ReconciliationService: LifecycleService {
    let name = "reconciliation"
    let reconciliation: AppleReconciliation
    let every: Duration?
    let log: Log
    let check: Duration
    private let loop = PeriodicLoop()

    init(reconciliation: AppleReconciliation, every: Duration?, log: Log, check: Duration = .seconds(60)) {
        self.reconciliation = reconciliation
        self.every = every
        self.log = log
        self.check = min(check, every ?? check)
    }

    func run() async throws {
        guard let every else {
            // Nothing periodic: wait for shutdown only.
            await loop.run(interval: .seconds(86_400)) {}
            return
        }
        await loop.run(interval: check) { [reconciliation, log] in
            do { _ = try await reconciliation.runIfDue(every: every) } catch {
                log.warn("periodic reconciliation failed; it runs again next period", ["error": "\(error)"])
            }
        }
    }

    func shutdown() async {
        await loop.stop()
        await reconciliation.cancelBackgroundRuns()
    }
}

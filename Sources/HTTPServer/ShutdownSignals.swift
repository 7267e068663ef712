import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Turns SIGTERM and SIGINT into one call of a closure, so the service can drain and exit cleanly.
public enum ShutdownSignals {
    /// Dispatch sources stop delivering when released; they live as long as the process.
    private static let sources = Mutex<[any DispatchSourceSignal]>([])

    /// The default disposition would kill the process before the source sees the signal, so both
    /// signals are ignored first. `onSignal` runs once, on a background queue, whichever signal
    /// arrives first; later signals are ignored. Returns once both sources are registered: libdispatch
    /// arms them asynchronously, and a signal arriving before that would be silently dropped.
    public static func install(_ onSignal: @escaping @Sendable () -> Void) {
        let once = OnceFlag()
        let queue = DispatchQueue(label: "ledger.shutdown-signals")
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            // Created inside the lock: dispatch sources are not Sendable, so they never leave it.
            let registered = DispatchSemaphore(value: 0)
            sources.withLock { sources in
                let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
                source.setEventHandler {
                    if once.claim() { onSignal() }
                }
                source.setRegistrationHandler { registered.signal() }
                source.resume()
                sources.append(source)
            }
            _ = registered.wait(timeout: .now() + 2)
        }
    }
}

/// True exactly once.
private final class OnceFlag: Sendable {
    private let used = Atomic<Bool>(false)

    func claim() -> Bool {
        !used.exchange(true, ordering: .acquiringAndReleasing)
    }
}

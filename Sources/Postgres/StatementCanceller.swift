internal import CLibPQ
import Synchronization

/// Stops a connection's work from another thread: the statement running now is cancelled in the
/// server (libpq's `PQcancel`, thread-safe, which asks the server over a short connection of its
/// own), and every later statement on the connection is refused before it is sent — so a cancel
/// that lands between two statements is not lost. One-shot: once cancelled, the connection is for
/// closing only.
///
/// Made by `Connection.makeCanceller()`. The `PGcancel` it holds is independent of the connection,
/// so cancelling after the connection closed is harmless.
public final class StatementCanceller: Sendable {
    private let handle: CancelHandle
    private let cancelled = Atomic<Bool>(false)

    init(_ handle: CancelHandle) { self.handle = handle }

    deinit { PQfreeCancel(handle.raw) }

    /// True once `cancel()` was called.
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Cancels, once. Returns false when the cancel request could not be sent (the server is
    /// unreachable): the statement then ends at its `statement_timeout`, or when the connection
    /// is closed.
    @discardableResult
    public func cancel() -> Bool {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return true }
        var error = [CChar](repeating: 0, count: 256)
        return PQcancel(handle.raw, &error, Int32(error.count)) == 1
    }
}

/// `PGcancel *` is not Sendable; PQcancel is documented safe to call from any thread.
struct CancelHandle: @unchecked Sendable {
    let raw: OpaquePointer
}

extension Connection {
    /// A canceller for this connection's statements (see `StatementCanceller`). Statements run
    /// after it is cancelled throw `PostgresError` of kind `.cancelled` without reaching the server.
    public func makeCanceller() throws(PostgresError) -> StatementCanceller {
        if let canceller { return canceller }
        guard let raw = PQgetCancel(handle) else {
            throw PostgresError(.unavailable, "libpq could not make a cancel request for this connection: \(Connection.errorText(handle))")
        }
        let made = StatementCanceller(CancelHandle(raw: raw))
        canceller = made
        return made
    }

    /// Refuses a statement once the connection's canceller fired.
    func refuseIfCancelled(_ statement: String) throws(PostgresError) {
        if let canceller, canceller.isCancelled {
            throw PostgresError(.cancelled, "the work was cancelled (its caller went away or its deadline passed)", statement: statement)
        }
    }
}

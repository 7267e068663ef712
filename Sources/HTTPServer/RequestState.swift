internal import CMicroHTTPD
import Foundation
import Synchronization

/// One request's progress, owned through libmicrohttpd's `con_cls` (retained in the first access
/// callback, released in the completion callback).
///
/// The plain `var`s are touched only from libmicrohttpd callbacks for this connection, which the
/// daemon never runs concurrently for one connection, so they need no lock; `phase` is shared
/// with the handler's task and with shutdown, hence the Mutex (and @unchecked Sendable).
final class RequestState: @unchecked Sendable {
    enum Phase {
        case receiving
        /// Handler running; the connection is suspended.
        case running
        /// Handler finished; the connection was resumed and the next callback queues this.
        case ready(HTTPResponse)
        /// A response was queued, or the request ended: nobody may resume the connection any more.
        case answered
    }

    let started = ContinuousClock.now
    let method: String
    let path: String
    var label = Router.unmatchedLabel
    var match: RouteMatch?
    var body = Data()
    var overLimit = false
    var discardedBytes = 0
    var status: Int?

    private let connection: ConnectionHandle
    private let phase = Mutex<Phase>(.receiving)
    private let work = Mutex<Task<Void, Never>?>(nil)

    /// Instances alive; tests use it to prove every `con_cls` retain is balanced by a release.
    static let live = Atomic<Int>(0)

    init(connection: OpaquePointer, method: String, path: String) {
        self.connection = ConnectionHandle(raw: connection)
        self.method = method
        self.path = path
        Self.live.add(1, ordering: .relaxed)
    }

    deinit {
        Self.live.subtract(1, ordering: .relaxed)
    }

    var currentPhase: Phase { phase.withLock { $0 } }

    var isAnswered: Bool {
        phase.withLock { if case .answered = $0 { true } else { false } }
    }

    func startRunning() {
        phase.withLock { $0 = .running }
    }

    func markAnswered() {
        phase.withLock { $0 = .answered }
    }

    func runs(_ task: Task<Void, Never>) {
        work.withLock { $0 = task }
    }

    /// Answers `response` in place of the handler and cancels it: its result has nowhere to go.
    func abandon(with response: HTTPResponse) {
        resume(with: response)
        work.withLock { $0?.cancel() }
    }

    /// Hands `response` to the suspended connection, once: whichever of the handler and shutdown
    /// comes first wins. Resuming under the lock means shutdown cannot observe "not running" while
    /// the connection is still suspended (MHD_stop_daemon would abort on it).
    func resume(with response: HTTPResponse) {
        phase.withLock { phase in
            guard case .running = phase else { return }
            phase = .ready(response)
            MHD_resume_connection(connection.raw)
        }
    }
}

/// `struct MHD_Connection *` is not Sendable; MHD_resume_connection is documented thread-safe.
struct ConnectionHandle: @unchecked Sendable {
    let raw: OpaquePointer
}

internal import CMicroHTTPD
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The total bound on receiving one request (headers and body), which libmicrohttpd lacks: its
/// `MHD_OPTION_CONNECTION_TIMEOUT` restarts with every byte, so one byte every 29 s holds a
/// connection forever. The clock runs from a connection's accept, stops when a request is fully
/// received (the handler's own deadline takes over) and restarts when its answer is sent. A
/// connection past the bound has its socket shut down; libmicrohttpd then sees end-of-stream and
/// closes it itself (the descriptor stays libmicrohttpd's: shutdown, never close).
final class ReceiveDeadline: Sendable {
    private struct Entry {
        var fd: Int32
        var since: ContinuousClock.Instant?
    }

    private let limit: Duration
    private let entries = Mutex<[UInt: Entry]>([:])
    private let stopped = Atomic<Bool>(false)

    init(seconds: Int) {
        limit = .seconds(seconds)
    }

    func start() {
        let tick = Double(min(max(limit / 4, .milliseconds(100)), .milliseconds(500)).components.attoseconds) / 1e18
        Thread.detachNewThread { [self] in
            while !stopped.load(ordering: .acquiring) {
                Thread.sleep(forTimeInterval: tick)
                sweep()
            }
        }
    }

    func stop() { stopped.store(true, ordering: .releasing) }

    func opened(_ connection: OpaquePointer) {
        let fd = cmhd_connection_fd(connection)
        guard fd >= 0 else { return }
        entries.withLock { $0[key(connection)] = Entry(fd: fd, since: .now) }
    }

    /// Called from libmicrohttpd's CLOSED notification, which precedes its close of the
    /// descriptor: under the same lock as `sweep`, so a shutdown never reaches a reused number.
    func closed(_ connection: OpaquePointer) {
        _ = entries.withLock { $0.removeValue(forKey: key(connection)) }
    }

    func received(_ connection: OpaquePointer) {
        entries.withLock { $0[key(connection)]?.since = nil }
    }

    func answered(_ connection: OpaquePointer) {
        entries.withLock { $0[key(connection)]?.since = .now }
    }

    private func sweep() {
        let now = ContinuousClock.now
        entries.withLock { entries in
            for (key, entry) in entries {
                guard let since = entry.since, now - since > limit else { continue }
                shutdown(entry.fd, Int32(SHUT_RDWR))
                entries[key]?.since = nil
            }
        }
    }

    private func key(_ connection: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection))) }
}

func mhdConnectionNotified(
    cls: UnsafeMutableRawPointer?,
    connection: OpaquePointer?,
    socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    code: MHD_ConnectionNotificationCode
) {
    guard let cls, let connection else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    guard let watch = core.receiveDeadline else { return }
    if code.rawValue == 0 /* MHD_CONNECTION_NOTIFY_STARTED */ { watch.opened(connection) } else { watch.closed(connection) }
}

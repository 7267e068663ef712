import Foundation
import Synchronization

/// A dedicated connection that LISTENs on channels and hands out NOTIFYs as they arrive (waiting
/// on the socket with poll, no polling queries). If the connection breaks the current wait throws
/// `.connectionLost`; the next wait reconnects and LISTENs again. Notifications sent while it was
/// disconnected are lost, so a consumer should also poll on a timer (see DESIGN, projections).
public final class NotificationListener: Sendable {
    public let channels: [String]
    private let conninfo: String
    private let connection: Mutex<Connection?>

    public init(conninfo: String, channels: [String]) throws(PostgresError) {
        guard !channels.isEmpty else { throw PostgresError(.invalidArgument, "listen to at least one channel") }
        self.conninfo = conninfo
        self.channels = channels
        connection = Mutex(nil)
        _ = try connection.withLock { (slot: inout Connection?) throws(PostgresError) -> Void in
            slot = try Self.open(conninfo: conninfo, channels: channels)
        }
    }

    private static func open(conninfo: String, channels: [String]) throws(PostgresError) -> Connection {
        let connection = try Connection(conninfo: conninfo)
        for channel in channels {
            try connection.query("LISTEN \(try connection.quoteIdentifier(channel))", name: "LISTEN")
        }
        return connection
    }

    /// Blocks up to `timeout` for notifications; returns what arrived (possibly nothing).
    public func wait(timeout: Duration) throws(PostgresError) -> [PostgresNotification] {
        try connection.withLock { (slot: inout Connection?) throws(PostgresError) -> [PostgresNotification] in
            if slot == nil || slot!.isBroken {
                slot = nil
                slot = try Self.open(conninfo: conninfo, channels: channels)
            }
            do throws(PostgresError) {
                return try slot!.waitForNotifications(timeout: timeout)
            } catch {
                slot = nil
                throw error
            }
        }
    }

    /// Notifications as an async sequence, read on a thread of its own. The stream ends with the
    /// error if the connection breaks; start a new one to reconnect.
    public func notifications(checkEvery interval: Duration = .milliseconds(250)) -> AsyncThrowingStream<PostgresNotification, any Error> {
        AsyncThrowingStream { continuation in
            let box = StopFlag()
            continuation.onTermination = { _ in box.stop() }
            let thread = Thread { [self] in
                while !box.isStopped {
                    do {
                        for notification in try self.wait(timeout: interval) { continuation.yield(notification) }
                    } catch {
                        continuation.finish(throwing: error)
                        return
                    }
                }
                continuation.finish()
            }
            thread.name = "postgres.listen"
            thread.start()
        }
    }
}

/// Lets the stream's termination handler stop the reader thread.
private final class StopFlag: Sendable {
    private let stopped = Atomic<Bool>(false)
    func stop() { stopped.store(true, ordering: .relaxed) }
    var isStopped: Bool { stopped.load(ordering: .relaxed) }
}

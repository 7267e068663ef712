import Foundation
import Postgres
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A byte-for-byte proxy in front of the project cluster's unix socket that can be told to stall:
/// it stops moving bytes in both directions while keeping every connection open, exactly like a
/// network path that hangs mid-stream (a dead NAT entry, a frozen load balancer). libpq then
/// waits in a read that never returns; the service must still answer every request within its
/// deadline, and recover on its own when bytes flow again.
///
/// It listens on `<socketDirectory>/.s.PGSQL.<port>`, the path libpq derives from `host=` and
/// `port=`, so the service only needs a different host and port in its connection string.
final class StallingProxy: @unchecked Sendable {
    // Mutable state is behind `state`; the file descriptors are written once in init.
    let socketDirectory: String
    let port: Int
    private let upstreamPath: String
    private let listener: Int32
    private let state = Mutex<(stalled: Bool, closed: Bool, sockets: [Int32], connections: Int)>((false, false, [], 0))

    /// - Parameter upstream: a conninfo naming the cluster's socket directory (`host=`) and `port=`.
    init(upstream conninfo: String) throws {
        let info = try ConnectionInfo(parsing: conninfo)
        guard let host = info["host"], host.hasPrefix("/"), let upstreamPort = info["port"] else {
            throw ReliabilityError.setup("the stalling proxy needs a unix-socket conninfo (host=/dir port=N), got \(info)")
        }
        upstreamPath = "\(host)/.s.PGSQL.\(upstreamPort)"
        socketDirectory = "/tmp/ledger-proxy-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: socketDirectory, withIntermediateDirectories: true)
        port = 6000 + Int.random(in: 0..<1000)
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw ReliabilityError.setup("socket() failed: errno \(errno)") }
        var address = Self.address("\(socketDirectory)/.s.PGSQL.\(port)")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 128) == 0 else {
            Glibc.close(listener)
            throw ReliabilityError.setup("the stalling proxy cannot listen in \(socketDirectory): errno \(errno)")
        }
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// Stops moving bytes (connections stay open; new ones are accepted and stall too).
    func stall() { state.withLock { $0.stalled = true } }
    /// Moves bytes again, including whatever waited in the kernel buffers meanwhile.
    func resume() { state.withLock { $0.stalled = false } }
    var connectionsAccepted: Int { state.withLock { $0.connections } }

    func close() {
        let sockets = state.withLock { s -> [Int32] in
            s.closed = true
            s.stalled = false
            return s.sockets
        }
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
        for fd in sockets {
            shutdown(fd, Int32(SHUT_RDWR))
            Glibc.close(fd)
        }
        try? FileManager.default.removeItem(atPath: socketDirectory)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if state.withLock({ $0.closed }) { return }
                continue
            }
            let server = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.address(upstreamPath)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard connected == 0 else {
                Glibc.close(client)
                Glibc.close(server)
                continue
            }
            state.withLock { s in
                s.sockets += [client, server]
                s.connections += 1
            }
            pump(from: client, to: server)
            pump(from: server, to: client)
        }
    }

    /// Copies bytes one way until either side closes, holding them while stalled.
    private func pump(from source: Int32, to destination: Int32) {
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                waitWhileStalled()
                let n = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                // A stall may begin between the read and the write: the bytes wait mid-stream.
                waitWhileStalled()
                var sent = 0
                while sent < n {
                    let w = buffer.withUnsafeBytes { send(destination, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                    if w <= 0 { break }
                    sent += w
                }
                if sent < n { break }
            }
            shutdown(source, Int32(SHUT_RDWR))
            shutdown(destination, Int32(SHUT_RDWR))
        }
        thread.stackSize = 1 << 18
        thread.start()
    }

    private func waitWhileStalled() {
        while state.withLock({ $0.stalled && !$0.closed }) { Thread.sleep(forTimeInterval: 0.01) }
    }

    private static func address(_ path: String) -> sockaddr_un {
        var a = sockaddr_un()
        a.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &a.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return a
    }
}

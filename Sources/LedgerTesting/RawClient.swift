import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A deliberately dumb blocking HTTP/1.1 client over a POSIX socket, so tests control every byte
/// (malformed requests, half-sent requests, pipelining on one connection, connection limits).
/// Test tooling: it reads only what the ledger's own server writes.
public final class RawClient {
    public struct Response: Sendable {
        public var status: Int
        public var headers: [String: String]  // lower-cased names
        public var body: Data

        public var errorBody: [String: String]? {
            (try? JSONSerialization.jsonObject(with: body)) as? [String: String]
        }
    }

    public enum Failure: Error {
        case connect(Int32)
        case closedBeforeResponse(received: Int)
        case malformedResponse(String)
        case timedOut
    }

    public private(set) var fd: Int32
    private var buffer = [UInt8]()

    public init(port: Int, receiveTimeout: Double = 5) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if result != 0 {
            let code = errno
            close(fd)
            // The object is whole by now, so throwing runs `deinit`: without this it closed the
            // number a second time — by then possibly another thread's socket or a server's
            // epoll descriptor (libmicrohttpd then aborts on "Failed to remove listen FD").
            fd = -1
            throw Failure.connect(code)
        }
        var timeout = timeval(tv_sec: Int(receiveTimeout), tv_usec: Int((receiveTimeout - receiveTimeout.rounded(.down)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Hangs up without reading the answer.
    public func closeNow() {
        close(fd)
        fd = -1
    }

    public func send(_ text: String) { send(Array(text.utf8)) }

    public func send(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return }
            offset += written
        }
    }

    /// Reads one response framed by Content-Length (all libmicrohttpd buffer responses are).
    public func readResponse() throws -> Response {
        try readResponse(expectBody: true)
    }

    /// The answer to HEAD: a head that announces a length with no body following.
    public func readResponseHeadOnly() throws -> Response {
        try readResponse(expectBody: false)
    }

    private func readResponse(expectBody: Bool) throws -> Response {
        let headerEnd = try fill { buffer in
            buffer.indices.dropLast(3).first { i in
                buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10
            }.map { $0 + 4 }
        }
        let head = String(decoding: buffer[..<headerEnd], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n").filter { !$0.isEmpty }
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw Failure.malformedResponse(head) }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { throw Failure.malformedResponse(head) }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let length = expectBody ? Int(headers["content-length"] ?? "0") ?? 0 : 0
        let end = try fill { $0.count >= headerEnd + length ? headerEnd + length : nil }
        let body = Data(buffer[headerEnd..<end])
        buffer.removeFirst(end)
        return Response(status: status, headers: headers, body: body)
    }

    /// True when the server closes the connection (EOF or reset) before `seconds` pass.
    public func waitForClose(seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        var chunk = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { return true }
            if count < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { continue }
                return true
            }
        }
        return false
    }

    private func fill(until complete: ([UInt8]) -> Int?) throws -> Int {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            if let done = complete(buffer) { return done }
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { throw Failure.closedBeforeResponse(received: buffer.count) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { throw Failure.timedOut }
                throw Failure.closedBeforeResponse(received: buffer.count)
            }
            buffer += chunk[..<count]
        }
    }

    /// One request on a fresh connection.
    public static func request(
        port: Int, method: String = "GET", path: String, headers: [String: String] = [:], body: [UInt8] = []
    ) throws -> Response {
        let client = try RawClient(port: port)
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        client.send(Array((head + "\r\n").utf8) + body)
        return try client.readResponse()
    }
}

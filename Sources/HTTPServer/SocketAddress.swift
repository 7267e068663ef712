import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The listening address, parsed from the configuration's host literal.
struct SocketAddress {
    private var storage = sockaddr_storage()
    let isIPv6: Bool

    init(host: String, port: Int) throws(HTTPServerError) {
        let literal = host == "localhost" ? "127.0.0.1" : host
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET, literal, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &storage) { target in
                withUnsafeBytes(of: v4) { target.copyMemory(from: $0) }
            }
            isIPv6 = false
        } else if inet_pton(AF_INET6, literal.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &storage) { target in
                withUnsafeBytes(of: v6) { target.copyMemory(from: $0) }
            }
            isIPv6 = true
        } else {
            throw .invalidHost(host)
        }
    }

    func withSockaddr<Result>(_ body: (UnsafeMutableRawPointer) -> Result) -> Result {
        var copy = storage
        return withUnsafeMutableBytes(of: &copy) { body($0.baseAddress!) }
    }

    /// The IP of a peer as text (no port).
    static func describe(_ address: UnsafePointer<sockaddr>) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            var inet = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            guard inet_ntop(AF_INET, &inet, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        case AF_INET6:
            var inet6 = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
            guard inet_ntop(AF_INET6, &inet6, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        default:
            return nil
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

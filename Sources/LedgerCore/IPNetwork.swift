import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An IPv4 or IPv6 address, read by `inet_pton` — the strict forms only (dotted-quad decimal for
/// IPv4: no `127.1`, octal or hex spellings). An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is
/// the IPv4 address it maps: a dual-stack socket reports IPv4 clients that way, and one client
/// must not count as two.
public struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 (IPv6), network order.
    public let bytes: [UInt8]

    public var isIPv4: Bool { bytes.count == 4 }

    public init?(_ text: String) {
        var literal = Substring(text.trimmingCharacters(in: .whitespaces))
        if literal.hasPrefix("["), literal.hasSuffix("]") { literal = literal.dropFirst().dropLast() }
        guard !literal.isEmpty, literal.utf8.count <= 64, !literal.contains("%") else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, String(literal), &v4) == 1 {
            bytes = withUnsafeBytes(of: v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, String(literal), &v6) == 1 else { return nil }
        let raw = withUnsafeBytes(of: v6) { Array($0) }
        bytes = raw[0..<10].allSatisfy { $0 == 0 } && raw[10] == 0xFF && raw[11] == 0xFF ? Array(raw[12...]) : raw
    }

    public var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        if isIPv4 {
            var a = in_addr()
            withUnsafeMutableBytes(of: &a) { $0.copyBytes(from: bytes) }
            _ = inet_ntop(AF_INET, &a, &buffer, socklen_t(buffer.count))
        } else {
            var a = in6_addr()
            withUnsafeMutableBytes(of: &a) { $0.copyBytes(from: bytes) }
            _ = inet_ntop(AF_INET6, &a, &buffer, socklen_t(buffer.count))
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// What a per-client limit counts by: an IPv4 address, or an IPv6 address's /64 — one
    /// subscriber is usually given a whole /64, so counting single IPv6 addresses would let one
    /// client take 2^64 budgets.
    public var clientKey: String {
        isIPv4 ? description : IPNetwork(self, prefixLength: 64).description
    }
}

/// A network in CIDR notation (`10.0.0.0/8`, `fd00::/8`; a bare address is its own /32 or /128).
public struct IPNetwork: Hashable, Sendable, CustomStringConvertible {
    /// The network address: bits past the prefix are zero.
    public let address: IPAddress
    public let prefixLength: Int

    public init(_ address: IPAddress, prefixLength: Int) {
        let length = max(0, min(prefixLength, address.bytes.count * 8))
        var masked = address.bytes
        for i in masked.indices {
            let keep = max(0, min(8, length - i * 8))
            masked[i] &= keep == 0 ? 0 : UInt8(truncatingIfNeeded: 0xFF << (8 - keep))
        }
        self.address = IPAddress(bytes: masked)
        self.prefixLength = length
    }

    public init(_ text: String) throws(IPNetworkError) {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, let address = IPAddress(String(parts[0])) else { throw IPNetworkError(text) }
        let bits = address.bytes.count * 8
        var length = bits
        if parts.count == 2 {
            guard let n = Int(parts[1]), parts[1].allSatisfy(\.isASCII), (0...bits).contains(n) else { throw IPNetworkError(text) }
            length = n
        }
        self.init(address, prefixLength: length)
    }

    /// Comma-separated networks, as the settings take them; empty text is no network.
    public static func list(_ text: String) throws(IPNetworkError) -> [IPNetwork] {
        var out: [IPNetwork] = []
        for part in text.split(separator: ",") where !part.trimmingCharacters(in: .whitespaces).isEmpty {
            out.append(try IPNetwork(String(part)))
        }
        return out
    }

    public func contains(_ other: IPAddress) -> Bool {
        other.bytes.count == address.bytes.count && IPNetwork(other, prefixLength: prefixLength).address == address
    }

    public var description: String { "\(address)/\(prefixLength)" }
}

extension IPAddress {
    fileprivate init(bytes: [UInt8]) { self.bytes = bytes }
}

/// A network that is not CIDR notation.
public struct IPNetworkError: Error, Sendable, Equatable, CustomStringConvertible {
    public let text: String
    public init(_ text: String) { self.text = String(text.prefix(80)) }
    public var description: String {
        "'\(text)' is not a network: write an IPv4 or IPv6 address with an optional prefix length, e.g. 10.0.0.0/8 or fd00::/8"
    }
}

/// Who a request came from, when it may have passed proxies: the socket's peer, unless the peer
/// is a trusted proxy — then the right-most address of `X-Forwarded-For` (else `Forwarded`'s
/// `for=`) that is not itself a trusted proxy. Everything left of that address was written by
/// the client and is ignored; a request that did not pass a trusted proxy cannot choose its
/// address with these headers.
public enum ClientAddress {
    public static func resolve(peer: String?, forwardedFor: String?, forwarded: String?, trustedProxies: [IPNetwork]) -> String? {
        guard let peer, !trustedProxies.isEmpty, let peerAddress = IPAddress(peer),
              trustedProxies.contains(where: { $0.contains(peerAddress) }) else { return peer }
        let hops: [String]
        if let forwardedFor, !forwardedFor.isEmpty {
            hops = forwardedFor.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        } else if let forwarded, !forwarded.isEmpty {
            hops = forwarded.split(separator: ",").compactMap { element in
                element.split(separator: ";").lazy.map { $0.trimmingCharacters(in: .whitespaces) }
                    .first { $0.lowercased().hasPrefix("for=") }
                    .map { value in
                        var v = Substring(value.dropFirst(4))
                        if v.hasPrefix("\""), v.hasSuffix("\""), v.count >= 2 { v = v.dropFirst().dropLast() }
                        // `[v6]:port` and `v4:port` (RFC 7239 §6) name the address alone here.
                        if v.hasPrefix("["), let close = v.firstIndex(of: "]") { return String(v[v.index(after: v.startIndex)..<close]) }
                        if v.filter({ $0 == ":" }).count == 1, let colon = v.firstIndex(of: ":") { return String(v[..<colon]) }
                        return String(v)
                    }
            }
        } else {
            return peer
        }
        for hop in hops.reversed() {
            guard let address = IPAddress(hop) else { return String(hop.prefix(64)) }
            if !trustedProxies.contains(where: { $0.contains(address) }) { return address.description }
        }
        return hops.first.map { String($0.prefix(64)) } ?? peer
    }
}

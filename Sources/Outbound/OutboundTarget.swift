import Foundation

/// One remote party the ledger calls (`apple_api`, `verify_receipt`, `wechat_api`, `webhooks`):
/// where it is, how long to wait, how much to read, and whether a plain-http loopback fake may
/// stand in for it. Make one per party and hand it to `OutboundClient`.
public struct OutboundTarget: Sendable, CustomStringConvertible {
    /// The metrics label and the name errors use (`[a-z_]+`).
    public let name: String
    /// Requests name paths under it; nil: every request carries an absolute URL (webhooks).
    public let baseURL: URL?
    /// The setting that gives the URL(s), named in errors so the operator knows what to fix.
    public let setting: String
    /// True only for a loopback test fake (`LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK=true`, or a
    /// test setting it): `http://` is then accepted for 127.0.0.0/8, ::1 and localhost, nowhere else.
    public let allowsPlainHTTPLoopback: Bool
    /// How long to wait without any progress (connecting, or between bytes of the answer).
    public var connectTimeout: Duration
    /// The whole exchange, first byte sent to last byte read.
    public var timeout: Duration
    /// An answer longer than this is cut off and refused (`responseTooLarge`), never buffered.
    public var maxResponseBytes: Int

    /// The documented setting that lets plain http reach a loopback fake.
    public static let plainHTTPLoopbackSetting = "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK"

    public init(name: String, baseURL: URL?, setting: String, allowsPlainHTTPLoopback: Bool = false,
                connectTimeout: Duration = .seconds(10), timeout: Duration = .seconds(30), maxResponseBytes: Int = 8 << 20) {
        self.name = name
        self.baseURL = baseURL
        self.setting = setting
        self.allowsPlainHTTPLoopback = allowsPlainHTTPLoopback
        self.connectTimeout = connectTimeout
        self.timeout = timeout
        self.maxResponseBytes = maxResponseBytes
    }

    /// Reads `LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK` (`true`/`1`/`yes`; anything else: false).
    public static func allowsPlainHTTPLoopback(environment: [String: String]) -> Bool {
        guard let v = environment[plainHTTPLoopbackSetting]?.trimmingCharacters(in: .whitespaces).lowercased() else { return false }
        return ["true", "1", "yes"].contains(v)
    }

    /// Refuses a base URL the client would refuse at every request: call at start so a wrong
    /// setting stops the service instead of failing each call later.
    public func validate() throws(OutboundError) {
        if let baseURL { try check(baseURL) }
    }

    /// The rules every URL passes before a byte is sent: absolute http(s) with a host, no
    /// user:password in it, https unless plain http to a loopback fake is explicitly allowed.
    public func check(_ url: URL) throws(OutboundError) {
        guard let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
            throw .invalidURL(target: name, setting: setting, reason: "it is not an absolute http(s) URL with a host")
        }
        guard url.user == nil, url.password == nil else {
            throw .invalidURL(target: name, setting: setting, reason: "it carries a user name or password; credentials never go in a URL")
        }
        switch scheme {
        case "https":
            return
        case "http":
            guard Self.isLoopback(host) else {
                throw .plainHTTPRefused(target: name, setting: setting, origin: Self.origin(url), loopback: false)
            }
            guard allowsPlainHTTPLoopback else {
                throw .plainHTTPRefused(target: name, setting: setting, origin: Self.origin(url), loopback: true)
            }
        default:
            throw .invalidURL(target: name, setting: setting, reason: "the scheme \(scheme) is not https")
        }
    }

    /// 127.0.0.0/8, ::1 and localhost: names and addresses that cannot leave the machine.
    public static func isLoopback(_ host: String) -> Bool {
        var h = host.lowercased()
        if h.hasPrefix("["), h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        if h == "localhost" || h == "localhost." || h == "::1" || h == "0:0:0:0:0:0:0:1" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "127" else { return false }
        return parts.allSatisfy { p in !p.isEmpty && p.count <= 3 && p.allSatisfy(\.isASCII) && UInt8(p) != nil }
    }

    /// `scheme://host[:port]`: what errors may show of a URL (its path and query may carry
    /// tokens: `access_token`, signatures).
    static func origin(_ url: URL) -> String {
        var text = "\(url.scheme?.lowercased() ?? "?")://\(url.host ?? "?")"
        if let port = url.port { text += ":\(port)" }
        return text
    }

    public var description: String {
        "OutboundTarget(\(name), \(baseURL.map(Self.origin) ?? "absolute URLs"), timeout \(timeout))"
    }
}

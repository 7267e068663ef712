import Crypto
import Foundation
import HTTPServer
import LedgerCore

/// A signed-in auditor, as the session cookie states it.
struct AuditSession: Sendable, Equatable {
    /// SHA-256 of the bearer token the auditor signed in with: the session dies with the token
    /// (removed from the configuration → every instance refuses its sessions).
    var tokenHash: [UInt8]
    var role: Role
    /// Epoch seconds.
    var expires: Int64
    /// Random, per session: what the session's CSRF token is bound to.
    var id: String
}

/// Sessions and CSRF tokens for the auditor's pages, with no server-side state, so any instance
/// holding the same key can check them:
///
/// - **Session cookie** `ledger_audit` = `v1.<base64url(JSON)>.<base64url(HMAC-SHA256)>` with the
///   token's SHA-256, its role, an 8 h expiry and a random session id; `HttpOnly`,
///   `SameSite=Strict`, `Path=/audit`, and `Secure` unless LEDGER_INSECURE_COOKIES=true.
/// - **CSRF** (signed double submit): the login form carries HMAC(key, "login:" + nonce) where the
///   nonce is in a second cookie; signed-in forms carry HMAC(key, "session:" + session id). A
///   forger can read neither cookie nor compute the MAC, and SameSite=Strict keeps the cookies off
///   cross-site requests anyway.
///
/// Two keys are derived from the configured one (LEDGER_SESSION_KEY) so a CSRF token can never
/// pass as a session MAC.
struct AuditSessions: Sendable {
    static let cookieName = "ledger_audit"
    static let loginCookieName = "ledger_audit_login"
    static let lifetime: Int64 = 8 * 3600
    static let path = "/audit"

    private let sessionKey: [UInt8]
    private let csrfKey: [UInt8]
    let secureCookies: Bool
    /// True when the key was made up at start (no LEDGER_SESSION_KEY).
    let ephemeralKey: Bool
    let now: @Sendable () -> Int64

    init(configuration: LedgerConfiguration.Audit, now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) {
        let key: [UInt8]
        if let configured = configuration.sessionKey {
            key = Array(configured.value.utf8)
            ephemeralKey = false
        } else {
            key = SecureRandom.bytes(32)
            ephemeralKey = true
        }
        sessionKey = Digest.hmacSHA256(key: key, Array("ledger audit session v1".utf8))
        csrfKey = Digest.hmacSHA256(key: key, Array("ledger audit csrf v1".utf8))
        secureCookies = !configuration.insecureCookies
        self.now = now
    }

    // MARK: session cookie

    func issue(tokenHash: [UInt8], role: Role) -> (AuditSession, cookie: String) {
        let session = AuditSession(tokenHash: tokenHash, role: role, expires: now() + Self.lifetime,
                                   id: Base64URL.encode(SecureRandom.bytes(16)))
        let body = JSONValue.object([
            "th": .string(Hex.encode(tokenHash)), "role": .string(role.rawValue), "exp": .integer(session.expires), "sid": .string(session.id),
        ]).canonicalJSON()
        let payload = Base64URL.encode([UInt8](body))
        let mac = Base64URL.encode(Digest.hmacSHA256(key: sessionKey, Array(("v1." + payload).utf8)))
        return (session, cookie(Self.cookieName, "v1.\(payload).\(mac)", maxAge: Self.lifetime))
    }

    /// The session a request's cookie carries, if its MAC holds and it has not expired. Whether
    /// its token is still configured is the caller's check (`TokenAuthority`).
    func session(from request: HTTPRequest) -> AuditSession? {
        guard let value = Self.cookies(request)[Self.cookieName] else { return nil }
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "v1", let mac = Base64URL.decode(String(parts[2])),
              ConstantTime.equals(mac, Digest.hmacSHA256(key: sessionKey, Array("v1.\(parts[1])".utf8))),
              let body = Base64URL.decode(String(parts[1])),
              let json = try? JSONDecoder().decode(JSONValue.self, from: Data(body)),
              case .string(let th)? = json["th"], let tokenHash = LedgerConfiguration.hexBytes(th), tokenHash.count == 32,
              case .string(let r)? = json["role"], let role = Role(rawValue: r),
              case .integer(let expires)? = json["exp"], case .string(let id)? = json["sid"] else { return nil }
        guard expires > now() else { return nil }
        return AuditSession(tokenHash: tokenHash, role: role, expires: expires, id: id)
    }

    /// A cookie that ends the session.
    var cleared: String { cookie(Self.cookieName, "", maxAge: 0) }

    // MARK: CSRF

    /// For the login form: the nonce cookie and the form's token.
    func loginToken() -> (token: String, cookie: String) {
        let nonce = Base64URL.encode(SecureRandom.bytes(16))
        return (mac("login:" + nonce), cookie(Self.loginCookieName, nonce, maxAge: 3600))
    }

    func loginTokenHolds(_ request: HTTPRequest, form: [String: String]) -> Bool {
        guard let nonce = Self.cookies(request)[Self.loginCookieName], let sent = form["csrf"] else { return false }
        return ConstantTime.equals(sent, mac("login:" + nonce))
    }

    /// For forms of a signed-in page (logout).
    func sessionToken(_ session: AuditSession) -> String { mac("session:" + session.id) }

    func sessionTokenHolds(_ session: AuditSession, form: [String: String]) -> Bool {
        guard let sent = form["csrf"] else { return false }
        return ConstantTime.equals(sent, sessionToken(session))
    }

    private func mac(_ text: String) -> String { Base64URL.encode(Digest.hmacSHA256(key: csrfKey, Array(text.utf8))) }

    // MARK: plumbing

    func cookie(_ name: String, _ value: String, maxAge: Int64) -> String {
        var c = "\(name)=\(value); Path=\(Self.path); Max-Age=\(maxAge); HttpOnly; SameSite=Strict"
        if secureCookies { c += "; Secure" }
        return c
    }

    /// `Cookie:` header pairs (the first of a repeated name wins).
    static func cookies(_ request: HTTPRequest) -> [String: String] {
        var out: [String: String] = [:]
        for header in request.headers.values(for: "cookie") {
            for pair in header.split(separator: ";") {
                let trimmed = pair.trimmingCharacters(in: .whitespaces)
                guard let eq = trimmed.firstIndex(of: "=") else { continue }
                let name = String(trimmed[..<eq])
                if out[name] == nil { out[name] = String(trimmed[trimmed.index(after: eq)...]) }
            }
        }
        return out
    }

    /// A request from another site (a browser says so in `Sec-Fetch-Site`, or an `Origin` that is
    /// not this host): refused for every state-changing form, whatever its token.
    static func isCrossSite(_ request: HTTPRequest) -> Bool {
        if let site = request.headers["sec-fetch-site"], site == "cross-site" || site == "same-site" { return true }
        if let origin = request.headers["origin"], origin != "null", let host = request.headers["host"] {
            let stripped = origin.replacingOccurrences(of: "https://", with: "").replacingOccurrences(of: "http://", with: "")
            return stripped != host
        }
        return false
    }
}

/// `application/x-www-form-urlencoded` bodies (the login and logout forms).
enum FormBody {
    static func parse(_ body: Data) -> [String: String] {
        var out: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0]) else { continue }
            let value = parts.count > 1 ? decode(parts[1]) : ""
            if out[name] == nil, let value { out[name] = value }
        }
        return out
    }

    private static func decode(_ s: Substring) -> String? {
        s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}

/// base64url without padding.
enum Base64URL {
    static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func decode(_ text: String) -> [UInt8]? {
        guard text.utf8.allSatisfy({ $0 == 0x2D || $0 == 0x5F || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) })
        else { return nil }
        var b64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.utf8.count % 4 != 0 { b64 += "=" }
        return Data(base64Encoded: b64).map { [UInt8]($0) }
    }
}

import Crypto
import Foundation

/// Bearer tokens for the query API. Only SHA-256 hashes are held; a presented token is hashed and
/// compared in constant time against every known hash (no early exit), so neither timing nor a
/// memory dump reveals a token.
public struct TokenAuthority: Sendable {
    private let entries: [LedgerConfiguration.TokenHash]
    /// Where failed bearer tokens are counted and slowed (nil: not counted, e.g. the command line).
    var failures: AuthenticationFailures?

    public init(tokens: [LedgerConfiguration.TokenHash]) { self.entries = tokens }

    init(tokens: [LedgerConfiguration.TokenHash], failures: AuthenticationFailures) {
        self.entries = tokens
        self.failures = failures
    }

    public enum Failure: Error, Equatable {
        /// No or malformed Authorization header, or an unknown token → 401.
        case unauthenticated(String)
        /// A valid token whose role may not do this → 403.
        case forbidden(String)
    }

    /// The strongest role a token grants (a token may be listed under several roles).
    public func role(forAuthorizationHeader header: String?) -> Role? {
        guard let header, let token = Self.bearerToken(header) else { return nil }
        return role(forTokenSHA256: Digest.sha256(token))
    }

    /// The token of `Bearer <token>` (scheme case-insensitive, spaces and tabs around the token
    /// trimmed), as bytes; nil when the header is not one. Works on the UTF-8 bytes: lowercasing
    /// and Foundation's trimming cost more than the hash on every app read.
    static func bearerToken(_ header: String) -> [UInt8]? {
        let prefix: [UInt8] = Array("bearer ".utf8)
        var header = header
        return header.withUTF8 { bytes -> [UInt8]? in
            guard bytes.count > prefix.count else { return nil }
            for i in 0..<prefix.count where bytes[i] | (bytes[i] >= 0x41 && bytes[i] <= 0x5A ? 0x20 : 0) != prefix[i] { return nil }
            var start = prefix.count, end = bytes.count
            func isBlank(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 }
            while start < end, isBlank(bytes[start]) { start += 1 }
            while end > start, isBlank(bytes[end - 1]) { end -= 1 }
            return start < end ? Array(bytes[start..<end]) : nil
        }
    }

    /// The strongest role of a token known by its SHA-256 (an auditor's session cookie carries
    /// the hash, never the token), compared like `role(forAuthorizationHeader:)`.
    public func role(forTokenSHA256 digest: [UInt8]) -> Role? {
        var best: Role?
        for e in entries where ConstantTime.equals(e.sha256, digest) {
            if best == nil || best! < e.role { best = e.role }
        }
        return best
    }

    public func authorize(header: String?, needs required: Role) -> Result<Role, Failure> {
        guard header != nil else {
            return .failure(.unauthenticated("send Authorization: Bearer <token>; tokens are configured with LEDGER_TOKENS (role:token)"))
        }
        guard let role = role(forAuthorizationHeader: header) else {
            return .failure(.unauthenticated("the bearer token is not valid; check LEDGER_TOKENS or the tokens in the configuration file"))
        }
        guard role >= required else {
            return .failure(.forbidden("this needs the \(required.rawValue) role; the token has \(role.rawValue)"))
        }
        return .success(role)
    }
}

import HTTPServer

/// Authentication as middleware: a route group states the role it needs once.
extension TokenAuthority {
    /// Passes requests whose bearer token grants `role`; answers 401 (with `WWW-Authenticate`) or
    /// 403 otherwise, before any handler runs. A token that is not valid counts as a failed
    /// authentication of its client; a client that failed too often has its invalid tokens
    /// answered 429 (`AuthenticationFailures`). A valid token always passes: the credential is
    /// checked first.
    func require(_ role: Role) -> Middleware {
        { [self] request, next in
            switch authorize(header: request.headers["authorization"], needs: role) {
            case .success: return await next(request)
            case .failure(.unauthenticated(let message)):
                if request.headers["authorization"] != nil, let refusal = failures?.refuse(.bearer, request) {
                    return .error(refusal)
                }
                return .error(status: 401, code: "unauthenticated", message: message, headers: [("WWW-Authenticate", "Bearer")])
            case .failure(.forbidden(let message)):
                return .error(status: 403, code: "forbidden", message: message)
            }
        }
    }
}

import Crypto
import Foundation
import HTTPServer
import LedgerCore

/// Reading the API's parameters out of a request: each refusal is a `ServiceFailure` that says how
/// to ask instead.
extension HTTPRequest {
    /// `?at=` and `?recordedAt=`: milliseconds since 1970 (see `Moment`).
    func moment() throws -> Moment {
        func millis(_ name: String) throws -> EpochMillis? {
            guard let text = query[name] else { return nil }
            guard let v = Int64(text), v >= 0 else {
                throw ServiceFailure.invalidParameter(
                    "\(name) must be milliseconds since 1970-01-01T00:00:00Z as a non-negative integer, e.g. \(name)=1767225600000")
            }
            return v
        }
        var moment = Moment(at: try millis("at"), recordedAt: try millis("recordedAt"))
        moment.minPosition = try minPosition()
        return moment
    }

    /// `?minPosition=N`: the answer must include the event at position N (the `position` an append
    /// answered), for reading your own write when reads may be served by a replica.
    func minPosition() throws -> Int64? {
        guard let text = query["minPosition"] else { return nil }
        guard let v = Int64(text), v >= 0 else {
            throw ServiceFailure.invalidParameter("minPosition must be a non-negative event position, e.g. the position an append answered")
        }
        return v
    }

    /// `?cursor=` and `?limit=` of the events API: after which position (the `next` of the previous
    /// page; none: from the start) and how many events (default 100, at most 1000).
    func eventsPage() throws -> (after: Int64, limit: Int) {
        var after: Int64 = 0
        if let text = query["cursor"] {
            guard let v = Int64(text), v >= 0 else {
                throw ServiceFailure.invalidParameter("cursor must be the `next` value of the previous page, as given")
            }
            after = v
        }
        var limit = Self.defaultEventsPage
        if let text = query["limit"] {
            guard let v = Int(text), (1...Self.maxEventsPage).contains(v) else {
                throw ServiceFailure.invalidParameter("limit must be 1 to \(Self.maxEventsPage) events per page (default \(Self.defaultEventsPage))")
            }
            limit = v
        }
        return (after, limit)
    }

    static let defaultEventsPage = 100
    static let maxEventsPage = 1000

    /// `?environment=` (Production by default).
    func environment() throws -> String {
        guard let raw = query["environment"] else { return SubscriptionKey.production }
        guard let env = SubscriptionKey.environment(raw), raw != "PROD" else {
            throw ServiceFailure.invalidParameter("environment must be Production or Sandbox (Apple's spelling); it defaults to Production")
        }
        return env
    }

    /// The path's originalTransactionId: Apple's ids are 1–20 decimal digits.
    func originalTransactionId() throws -> String {
        let id = pathParameters["originalTransactionId"] ?? ""
        guard OriginalTransactionId.isValid(id) else {
            throw ServiceFailure.invalidParameter("originalTransactionId must be 1–20 decimal digits, as Apple issues them")
        }
        return id
    }

    /// The subscription the path and `?environment=` name.
    func subscriptionKey() throws -> SubscriptionKey {
        SubscriptionKey(environment: try environment(), originalTransactionId: try originalTransactionId())
    }

    /// The path's customerId, normalised; 1–256 bytes without control characters.
    func customerId() throws -> String {
        let raw = pathParameters["customerId"] ?? ""
        guard !raw.isEmpty, raw.utf8.count <= 256, !raw.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw ServiceFailure.invalidParameter("customerId must be 1–256 bytes without control characters")
        }
        return CustomerId.normalised(raw)
    }

    /// The body as a JSON object; an empty body is `[:]` when `allowEmpty`. Every app and admin
    /// body passes `JSONGuard` first (nesting beyond 32, the NUL escape, trailing commas, huge
    /// numbers, a member name twice → 400 `malformed`), so the decoder never recurses into a
    /// hostile `[[[[…` and what is stored is what every JSON reader reads.
    func jsonObject(allowEmpty: Bool = false, example: String) throws -> [String: JSONValue] {
        if body.isEmpty && allowEmpty { return [:] }
        let finding = JSONGuard.scan(body)
        if let refusal = JSONGuard.refusal(finding, what: "the body") {
            throw ServiceFailure.malformed("\(refusal); send a JSON object like \(example)")
        }
        guard let value = try? JSONValue(json: body), let object = value.objectValue else {
            throw ServiceFailure.malformed("the body must be a JSON object like \(example)")
        }
        guard case .ok(let members) = finding, JSONGuard.memberCount(value) == members else {
            throw ServiceFailure.malformed("\(JSONGuard.duplicateMemberRefusal(what: "the body")); send a JSON object like \(example)")
        }
        return object
    }
}

extension TokenAuthority {
    /// Who sent `request`: its role and token fingerprint (never the token), and its address.
    func requester(of request: HTTPRequest) -> Requester {
        let header = request.headers["authorization"] ?? ""
        let token = header.count > 7 ? String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces) : ""
        return Requester(role: role(forAuthorizationHeader: header)?.rawValue ?? "unknown",
                         tokenFingerprint: String(Hex.encode(Digest.sha256(Array(token.utf8))).prefix(12)),
                         remoteAddress: request.remoteAddress)
    }
}

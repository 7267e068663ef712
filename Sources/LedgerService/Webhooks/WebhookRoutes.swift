import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// The admin routes of outbound webhooks; registered with one line in `makeRouter`.
extension LedgerApp {
    func addWebhookAdminRoutes(to group: inout RouteGroup) {
        group.add("GET", "/v1/admin/webhooks/endpoints") { [self] _ in
            .json(200, ["endpoints": .array(try await webhookEndpoints.list().map(\.json))])
        }
        group.add("GET", "/v1/admin/webhooks/endpoints/{name}") { [self] request in
            .json(200, try await webhookEndpoints.endpoint(request.pathParameters["name"] ?? "").json)
        }
        group.add("POST", "/v1/admin/webhooks/endpoints") { [self] request in
            let example = #"{"name": "backend", "url": "https://backend.example.com/hooks/ledger", "secret": "whsec_…", "eventTypes": ["subscription.renewed"], "environments": ["Production"], "enabled": true}"#
            let body = try request.jsonObject(example: example)
            let endpoint = try Self.endpointSettings(body, example: example)
            let record = try await webhookEndpoints.create(endpoint, requestedBy: tokens.requester(of: request))
            return .json(201, record.json, headers: [("Location", "/v1/admin/webhooks/endpoints/\(record.name)")])
        }
        for (verb, enabled) in [("disable", false), ("enable", true)] {
            group.add("POST", "/v1/admin/webhooks/endpoints/{name}/\(verb)") { [self] request in
                let body = try request.jsonObject(allowEmpty: true, example: #"{"reason": "receiver moved"}"#)
                var reason: String?
                if let r = body["reason"] {
                    guard case .string(let s) = r, s.utf8.count <= 500 else {
                        throw ServiceFailure.invalidParameter("reason must be a string of at most 500 bytes")
                    }
                    reason = s
                }
                let record = try await webhookEndpoints.setEnabled(request.pathParameters["name"] ?? "", enabled, reason: reason,
                                                                   requestedBy: tokens.requester(of: request))
                return .json(200, record.json)
            }
        }
        group.add("POST", "/v1/admin/webhooks/endpoints/{name}/rotate-secret") { [self] request in
            let example = #"{"secret": "whsec_…(the new secret)", "overlapSeconds": 86400}"#
            let body = try request.jsonObject(example: example)
            guard case .string(let text)? = body["secret"] else {
                throw ServiceFailure.invalidParameter("secret must be the new whsec_<base64> secret, e.g. \(example)")
            }
            let secret: WebhookSecret
            do { secret = try WebhookSecret(text: text) } catch { throw ServiceFailure.invalidParameter("secret: \(error)") }
            var overlap: Int64 = 86_400
            if let v = body["overlapSeconds"] {
                guard case .integer(let n) = v, (0...2_592_000).contains(n) else {
                    throw ServiceFailure.invalidParameter("overlapSeconds must be an integer from 0 to 2592000 (30 days): how long the old secret also signs")
                }
                overlap = n
            }
            let record = try await webhookEndpoints.rotate(request.pathParameters["name"] ?? "", to: secret, overlapSeconds: overlap,
                                                           requestedBy: tokens.requester(of: request))
            return .json(200, record.json)
        }
    }

    /// Replay, inspection and the `test` event (WebhookOperations).
    func addWebhookOperationRoutes(to group: inout RouteGroup) {
        let operations = WebhookOperations(store: store, endpoints: webhookEndpoints)
        group.add("POST", "/v1/admin/webhooks/replay") { [self] request in
            let example = #"{"eventIds": ["evt_…"]} or {"fromPosition": 1, "toPosition": 500} or {"exhausted": true}, optionally with "endpoint": "backend""#
            let body = try request.jsonObject(example: example)
            let (selection, endpoint) = try Self.replaySelection(body, example: example)
            let ids = try await operations.replay(selection, endpoint: endpoint, requestedBy: tokens.requester(of: request))
            return .json(200, ["replayed": .integer(Int64(ids.count)), "items": .array(ids.map(JSONValue.string))])
        }
        group.add("GET", "/v1/admin/webhooks/events") { request in
            var limit = 50
            if let l = request.query["limit"] {
                guard let n = Int(l), (1...500).contains(n) else { throw ServiceFailure.invalidParameter("limit must be an integer from 1 to 500") }
                limit = n
            }
            let after = try Self.webhookCursor(request.query["cursor"])
            let range = try Self.positionRange(from: request.query["fromPosition"], to: request.query["toPosition"], optional: true)
            let (events, next) = try await operations.page(after: after, limit: limit, positions: range)
            return .json(200, ["events": .array(events), "next": .optional(next)])
        }
        group.add("POST", "/v1/admin/webhooks/test") { [self] request in
            let example = #"{"endpoint": "backend"}"#
            let body = try request.jsonObject(example: example)
            guard case .string(let name)? = body["endpoint"], body.count == 1 else {
                throw ServiceFailure.invalidParameter("the body is exactly {\"endpoint\": \"<name>\"}, e.g. \(example)")
            }
            let event = try await operations.sendTest(to: name, requestedBy: tokens.requester(of: request))
            return .json(202, ["id": .string(event.id), "endpoint": .string(name), "type": .string(event.type.rawValue)])
        }
    }

    /// The events' cursor (`<position>.<sequence>`, the `next` of an earlier page), shared by the
    /// admin route and the auditor's page.
    static func webhookCursor(_ text: String?) throws -> (Int64, Int)? {
        guard let c = text else { return nil }
        let parts = c.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let p = Int64(parts[0]), let s = Int(parts[1]), p >= 0, s >= 0 else {
            throw ServiceFailure.invalidParameter("cursor must be the `next` of an earlier page (<position>.<sequence>)")
        }
        return (p, s)
    }

    /// `fromPosition`/`toPosition` (both or, when `optional`, neither): 1 ≤ from ≤ to.
    static func positionRange(from: String?, to: String?, optional: Bool) throws -> ClosedRange<Int64>? {
        if from == nil && to == nil && optional { return nil }
        guard let f = from.flatMap({ Int64($0) }), let t = to.flatMap({ Int64($0) }) else {
            throw ServiceFailure.invalidParameter("fromPosition and toPosition must both be integer ledger positions")
        }
        guard f >= 1, f <= t else {
            throw ServiceFailure.invalidParameter("the position range \(f)…\(t) is empty or starts before 1: fromPosition ≥ 1 and fromPosition ≤ toPosition")
        }
        return f...t
    }

    static func replaySelection(_ body: [String: JSONValue], example: String) throws -> (WebhookReplaySelection, String?) {
        let known: Set<String> = ["eventIds", "fromPosition", "toPosition", "exhausted", "endpoint"]
        if let extra = body.keys.sorted().first(where: { !known.contains($0) }) {
            throw ServiceFailure.invalidParameter("unknown field \(extra.prefix(64)); a replay names \(example)")
        }
        var endpoint: String?
        if let e = body["endpoint"] {
            guard case .string(let s) = e, WebhookEndpointSettings.validName(s) else {
                throw ServiceFailure.invalidParameter("endpoint must be an endpoint name (lowercase letters, digits and _.-)")
            }
            endpoint = s
        }
        var selections: [WebhookReplaySelection] = []
        if let v = body["eventIds"] {
            guard case .array(let a) = v, !a.isEmpty, a.count <= 1000 else {
                throw ServiceFailure.invalidParameter("eventIds must be an array of 1 to 1000 event ids")
            }
            let ids: [String] = try a.map { item in
                guard case .string(let s) = item, s.utf8.count == 36, s.hasPrefix("evt_"),
                      s.utf8.dropFirst(4).allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else {
                    throw ServiceFailure.invalidParameter("eventIds holds something that is not an event id (evt_ and 32 hex digits)")
                }
                return s
            }
            selections.append(.events(ids))
        }
        if body["fromPosition"] != nil || body["toPosition"] != nil {
            func text(_ name: String) throws -> String? {
                guard let v = body[name] else { return nil }
                guard case .integer(let n) = v else { throw ServiceFailure.invalidParameter("\(name) must be an integer ledger position") }
                return String(n)
            }
            selections.append(.positions(try positionRange(from: try text("fromPosition"), to: try text("toPosition"), optional: false)!))
        }
        if let v = body["exhausted"] {
            guard v == .bool(true) else { throw ServiceFailure.invalidParameter("exhausted must be true (every exhausted event) or absent") }
            selections.append(.exhausted)
        }
        guard selections.count == 1 else {
            throw ServiceFailure.invalidParameter("name exactly one of eventIds, a position range or exhausted: \(example)")
        }
        return (selections[0], endpoint)
    }

    /// An endpoint from a request body, every field checked like the configuration file's.
    static func endpointSettings(_ body: [String: JSONValue], example: String) throws -> WebhookEndpointSettings {
        func string(_ name: String) throws -> String {
            guard case .string(let s)? = body[name], !s.isEmpty else { throw ServiceFailure.invalidParameter("\(name) must be a non-empty string, e.g. \(example)") }
            return s
        }
        func strings(_ name: String) throws -> [String]? {
            guard let v = body[name], v != .null else { return nil }
            guard case .array(let a) = v else { throw ServiceFailure.invalidParameter("\(name) must be an array of strings") }
            return try a.map { item in
                guard case .string(let s) = item else { throw ServiceFailure.invalidParameter("\(name) must be an array of strings") }
                return s
            }
        }
        let known: Set<String> = ["name", "url", "secret", "eventTypes", "environments", "enabled"]
        if let extra = body.keys.sorted().first(where: { !known.contains($0) }) {
            throw ServiceFailure.invalidParameter("unknown field \(extra.prefix(64)); an endpoint has \(known.sorted().joined(separator: ", "))")
        }
        let name = try string("name")
        guard WebhookEndpointSettings.validName(name) else {
            throw ServiceFailure.invalidParameter("name must be lowercase letters, digits and _.- (up to 63), e.g. backend")
        }
        do {
            let url = try string("url")
            try WebhookEndpointSettings.checkURL(url, name: "url")
            var endpoint = WebhookEndpointSettings(name: name, url: url, secret: try WebhookEndpointSettings.secret(try string("secret"), name: "secret"))
            if let t = try strings("eventTypes") { endpoint.eventTypes = try WebhookEndpointSettings.eventTypes(t, name: "eventTypes") }
            if let e = try strings("environments") { endpoint.environments = try WebhookEndpointSettings.environments(e, name: "environments") }
            if let v = body["enabled"] {
                guard case .bool(let b) = v else { throw ServiceFailure.invalidParameter("enabled must be true or false") }
                endpoint.enabled = b
            }
            return endpoint
        } catch let e as ConfigurationError {
            throw ServiceFailure.invalidParameter("\(e)")
        }
    }
}

extension WebhookEndpointError: HTTPRenderableError {
    var httpStatus: Int {
        switch self {
        case .exists: 409
        case .unknown: 404
        case .invalid, .unknownEvents: 400
        }
    }
    var httpCode: String {
        switch self {
        case .exists: "endpoint_exists"
        case .unknown: "not_found"
        case .invalid: "invalid_parameter"
        case .unknownEvents: "unknown_event"
        }
    }
    var httpMessage: String { description }
    var httpHeaders: [(String, String)] { [] }
}

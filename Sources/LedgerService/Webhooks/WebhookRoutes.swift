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
        case .invalid: 400
        }
    }
    var httpCode: String {
        switch self {
        case .exists: "endpoint_exists"
        case .unknown: "not_found"
        case .invalid: "invalid_parameter"
        }
    }
    var httpMessage: String { description }
    var httpHeaders: [(String, String)] { [] }
}

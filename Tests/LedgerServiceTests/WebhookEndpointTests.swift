import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import XCTest

/// Webhook endpoints through HTTP on a real database: configured ones recorded at start, admin
/// routes that create, disable, enable and rotate, each a ledger event; secrets never answered,
/// logged into events or accepted malformed.
final class WebhookEndpointTests: XCTestCase {
    static func json(_ object: [String: Any]) -> Data { try! JSONSerialization.data(withJSONObject: object) }

    func testAConfiguredEndpointIsRecordedOnceWithoutItsSecret() async throws {
        let secret = WebhookSecret.generate()
        let env = ["LEDGER_WEBHOOK_URL": "http://127.0.0.1:9/hooks", "LEDGER_WEBHOOK_SECRET": secret.text,
                   "LEDGER_WEBHOOK_EVENT_TYPES": "subscription.renewed,entitlement.revoked", "LEDGER_WEBHOOK_ENVIRONMENTS": "Production"]
        try await withService(environment: env) { h in
            let firstSync = try await h.app.webhookEndpoints.syncConfigured()
            XCTAssertEqual(firstSync, ["default"])
            let secondSync = try await h.app.webhookEndpoints.syncConfigured()
            XCTAssertEqual(secondSync, [], "an unchanged configuration records nothing")
            let list = try await h.request("GET", "/v1/admin/webhooks/endpoints", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(list.status, 200)
            let endpoints = try XCTUnwrap(list.json["endpoints"] as? [[String: Any]])
            XCTAssertEqual(endpoints.count, 1)
            XCTAssertEqual(endpoints[0]["name"] as? String, "default")
            XCTAssertEqual(endpoints[0]["origin"] as? String, "config")
            XCTAssertEqual(endpoints[0]["eventTypes"] as? [String], ["entitlement.revoked", "subscription.renewed"])
            XCTAssertEqual(endpoints[0]["environments"] as? [String], ["Production"])
            XCTAssertEqual(endpoints[0]["secretFingerprint"] as? String, secret.fingerprint)
            XCTAssertFalse(list.text.contains(secret.text) || list.text.contains("whsec_"), "the secret is never answered")
            let recorded = try h.events(stream: "ledger:admin").filter { $0.type.hasPrefix("webhooks/") }
            XCTAssertEqual(recorded.map(\.type), ["webhooks/endpoint-configured"])
            let raw = String(decoding: recorded[0].raw, as: UTF8.self)
            XCTAssertTrue(raw.contains(secret.fingerprint))
            XCTAssertFalse(raw.contains(Data(secret.key).base64EncodedString()), "the log never holds a secret")
        }
    }

    func testAdminsCreateDisableEnableAndRotate() async throws {
        try await withService { h in
            let first = WebhookSecret.generate(), second = WebhookSecret.generate()
            let create = try await h.request("POST", "/v1/admin/webhooks/endpoints", body: Self.json([
                "name": "backend", "url": "https://backend.example.com/hooks", "secret": first.text, "eventTypes": ["subscription.started"],
            ]), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(create.status, 201, create.text)
            XCTAssertEqual(create.headers["location"], "/v1/admin/webhooks/endpoints/backend")
            XCTAssertEqual(create.json["enabled"] as? Bool, true)
            XCTAssertFalse(create.text.contains("whsec_"))

            let again = try await h.request("POST", "/v1/admin/webhooks/endpoints", body: Self.json([
                "name": "backend", "url": "https://other.example.com/", "secret": second.text,
            ]), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(again.status, 409)
            XCTAssertEqual(again.errorCode, "endpoint_exists")

            let disabled = try await h.request("POST", "/v1/admin/webhooks/endpoints/backend/disable",
                                               body: Self.json(["reason": "receiver moving"]), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(disabled.status, 200, disabled.text)
            XCTAssertEqual(disabled.json["enabled"] as? Bool, false)
            XCTAssertEqual(disabled.json["disabledReason"] as? String, "receiver moving")
            let enabled = try await h.request("POST", "/v1/admin/webhooks/endpoints/backend/enable", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(enabled.status, 200, enabled.text)
            XCTAssertEqual(enabled.json["enabled"] as? Bool, true)
            XCTAssertTrue(enabled.json["disabledReason"] is NSNull)

            let rotated = try await h.request("POST", "/v1/admin/webhooks/endpoints/backend/rotate-secret",
                                              body: Self.json(["secret": second.text, "overlapSeconds": 3600]), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(rotated.status, 200, rotated.text)
            XCTAssertEqual(rotated.json["secretFingerprint"] as? String, second.fingerprint)
            let rotation = try XCTUnwrap(rotated.json["rotation"] as? [String: Any])
            XCTAssertEqual(rotation["previousSecretFingerprint"] as? String, first.fingerprint)
            // During the overlap both secrets sign, the new one first.
            let record = try await h.app.webhookEndpoints.endpoint("backend")
            XCTAssertEqual(record.signingSecrets(now: Clock.nowMillis()), [second, first])
            XCTAssertEqual(record.signingSecrets(now: record.previousSecretUntil! + 1), [second])
            let same = try await h.request("POST", "/v1/admin/webhooks/endpoints/backend/rotate-secret",
                                           body: Self.json(["secret": second.text]), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(same.status, 400)

            let types = try h.events(stream: "ledger:admin").map(\.type).filter { $0.hasPrefix("webhooks/") }
            XCTAssertEqual(types, ["webhooks/endpoint-created", "webhooks/endpoint-disabled", "webhooks/endpoint-enabled", "webhooks/secret-rotated"])
            for e in try h.events(stream: "ledger:admin") {
                let raw = String(decoding: e.raw, as: UTF8.self)
                XCTAssertFalse(raw.contains("whsec_"), "no secret in \(e.type)")
            }
            let one = try await h.request("GET", "/v1/admin/webhooks/endpoints/backend", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(one.status, 200)
            let unknown = try await h.request("GET", "/v1/admin/webhooks/endpoints/nobody", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(unknown.status, 404)
            let unknownDisable = try await h.request("POST", "/v1/admin/webhooks/endpoints/nobody/disable", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(unknownDisable.status, 404)
        }
    }

    func testHostileEndpointRequestsAreRefusedWithAReason() async throws {
        try await withService { h in
            let good = WebhookSecret.generate().text
            let cases: [([String: Any], String)] = [
                (["name": "a", "url": "http://backend.example.com/", "secret": good], "https"),
                (["name": "a", "url": "https://user:pw@backend.example.com/", "secret": good], "credentials"),
                (["name": "a", "url": "not a url", "secret": good], "absolute URL"),
                (["name": "a", "url": "https://b.example.com/", "secret": "s3cret"], "whsec_"),
                (["name": "a", "url": "https://b.example.com/", "secret": "whsec_" + Data(repeating: 7, count: 8).base64EncodedString()], "24–64 bytes"),
                (["name": "a", "url": "https://b.example.com/", "secret": good, "eventTypes": ["subscription.exploded"]], "not an event type"),
                (["name": "a", "url": "https://b.example.com/", "secret": good, "environments": ["Staging"]], "Production"),
                (["name": "Bad Name", "url": "https://b.example.com/", "secret": good], "lowercase"),
                (["name": "a", "url": "https://b.example.com/", "secret": good, "extra": 1], "unknown field"),
                (["name": "a", "url": "https://b.example.com/", "secret": good, "enabled": "yes"], "true or false"),
                (["url": "https://b.example.com/", "secret": good], "name"),
            ]
            for (body, hint) in cases {
                let answer = try await h.request("POST", "/v1/admin/webhooks/endpoints", body: Self.json(body), token: "admin-token-for-tests-0123456789abcdef")
                XCTAssertEqual(answer.status, 400, "\(body)")
                XCTAssertNotNil(answer.errorCode)
                XCTAssertTrue((answer.json["message"] as? String ?? "").contains(hint), "\(answer.text) should mention \(hint)")
                XCTAssertFalse(answer.text.contains(good), "a refusal never echoes a secret")
            }
            let notJSON = try await h.request("POST", "/v1/admin/webhooks/endpoints", body: Data("{".utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(notJSON.status, 400)
            let anonymous = try await h.request("GET", "/v1/admin/webhooks/endpoints")
            XCTAssertEqual(anonymous.status, 401)
            let auditor = try await h.request("GET", "/v1/admin/webhooks/endpoints", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(auditor.status, 403)
            let app = try await h.request("POST", "/v1/admin/webhooks/endpoints", body: Self.json(cases[0].0), token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(app.status, 403)
            XCTAssertEqual(try h.events(stream: "ledger:admin").filter { $0.type.hasPrefix("webhooks/") }.count, 0, "nothing refused is recorded")
        }
    }

    func testTheConfigurationRefusesIncompleteOrUnsafeEndpoints() throws {
        let secret = WebhookSecret.generate().text
        let bad: [([String: String], String)] = [
            (["LEDGER_WEBHOOK_URL": "https://b.example.com/"], "LEDGER_WEBHOOK_SECRET"),
            (["LEDGER_WEBHOOK_SECRET": secret], "LEDGER_WEBHOOK_URL"),
            (["LEDGER_WEBHOOK_URL": "http://b.example.com/", "LEDGER_WEBHOOK_SECRET": secret], "https"),
            (["LEDGER_WEBHOOK_URL": "https://b.example.com/", "LEDGER_WEBHOOK_SECRET": "plain"], "whsec_"),
            (["LEDGER_WEBHOOK_URL": "https://b.example.com/", "LEDGER_WEBHOOK_SECRET": secret, "LEDGER_WEBHOOK_EVENT_TYPES": "renewal"], "event type"),
            (["LEDGER_WEBHOOK_URL": "https://b.example.com/", "LEDGER_WEBHOOK_SECRET": secret, "LEDGER_WEBHOOK_ENABLED": "maybe"], "boolean"),
            (["LEDGER_WEBHOOK_TIMEOUT_SECONDS": "600"], "1 to 60"),
            (["LEDGER_WEBHOOK_EXPIRY_SETTLE_MINUTES": "-5"], "LEDGER_WEBHOOK_EXPIRY_SETTLE_MINUTES"),
            (["LEDGER_WEBHOOK_EXPIRY_SETTLE_MINUTES": "1441"], "0 to 1440"),
            (["LEDGER_WEBHOOK_EXPIRY_SETTLE_MINUTES": "6h"], "0 to 1440"),
        ]
        for (env, hint) in bad {
            XCTAssertThrowsError(try LedgerConfiguration.load(environment: env)) { error in
                XCTAssertTrue("\(error)".contains(hint), "\(error) should mention \(hint)")
                XCTAssertFalse("\(error)".contains(secret), "an error never shows the secret")
            }
        }
        // The file form, with a secret file, and the environment replacing an endpoint of its name.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wh-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let secretFile = dir.appendingPathComponent("secret")
        try Data((secret + "\n").utf8).write(to: secretFile)
        let config = dir.appendingPathComponent("config.json")
        try WebhookEndpointTests.json(["webhooks": ["timeoutSeconds": 10, "endpoints": [
            ["name": "backend", "url": "https://backend.example.com/h", "secretFile": secretFile.path, "environments": ["Sandbox"]],
            ["name": "default", "url": "https://old.example.com/h", "secret": secret, "enabled": false],
        ]]]).write(to: config)
        let other = WebhookSecret.generate().text
        let loaded = try LedgerConfiguration.load(environment: [
            "LEDGER_CONFIG": config.path, "LEDGER_WEBHOOK_URL": "https://new.example.com/h", "LEDGER_WEBHOOK_SECRET": other,
        ])
        XCTAssertEqual(loaded.webhooks.timeoutSeconds, 10)
        XCTAssertEqual(loaded.webhooks.expirySettleMinutes, 360, "six hours unless set")
        XCTAssertEqual(try LedgerConfiguration.load(environment: ["LEDGER_WEBHOOK_EXPIRY_SETTLE_MINUTES": "0"]).webhooks.expirySettleMinutes, 0)
        XCTAssertEqual(loaded.webhooks.endpoints.map(\.name), ["backend", "default"])
        XCTAssertEqual(loaded.webhooks.endpoints[0].secret.value, secret, "the secret file's value, without its newline")
        XCTAssertEqual(loaded.webhooks.endpoints[0].environments, ["Sandbox"])
        XCTAssertEqual(loaded.webhooks.endpoints[1].url, "https://new.example.com/h")
        XCTAssertTrue(loaded.webhooks.endpoints[1].enabled)
        XCTAssertTrue(loaded.webhooks.endpoints[0].accepts(.subscriptionRenewed, environment: "Sandbox"))
        XCTAssertFalse(loaded.webhooks.endpoints[0].accepts(.subscriptionRenewed, environment: "Production"))
        XCTAssertTrue(loaded.webhooks.endpoints[0].accepts(.test, environment: "Production"), "a test event always goes")
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_CONFIG": { () -> String in
            let f = dir.appendingPathComponent("both.json")
            try? WebhookEndpointTests.json(["webhooks": ["endpoints": [["name": "x", "url": "https://x.example.com/", "secret": secret, "secretFile": secretFile.path]]]]).write(to: f)
            return f.path
        }()])) { XCTAssertTrue("\($0)".contains("exactly one of secret")) }
    }
}

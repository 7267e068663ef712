import XCTest
import LedgerMetrics
import Crypto
@testable import LedgerService

final class ConfigurationTests: XCTestCase {
    func testEnvironmentOverridesAndTokenHashing() throws {
        let c = try LedgerConfiguration.load(environment: [
            "LEDGER_LISTEN": "0.0.0.0:9090",
            "LEDGER_APPLE_BUNDLE_IDS": "com.a, com.b",
            "LEDGER_APPLE_APP_APPLE_IDS": "1234,5678",
            "LEDGER_APPLE_ENVIRONMENTS": "Sandbox,Production",
            "LEDGER_APPLE_SHARED_SECRET": "s3cret",
            "LEDGER_TOKENS": "app:tok-app-0123456789abcdef0123456789,auditor:tok-aud-0123456789abcdef0123456789",
        ])
        XCTAssertEqual(c.listenHost, "0.0.0.0")
        XCTAssertEqual(c.listenPort, 9090)
        XCTAssertEqual(c.apple.bundleIds, ["com.a", "com.b"])
        XCTAssertEqual(c.apple.appAppleIds, [1234, 5678])
        XCTAssertEqual(c.apple.environments, ["Sandbox", "Production"])
        XCTAssertEqual("\(String(describing: c.apple.sharedSecret))", "Optional(<redacted>)")
        XCTAssertEqual(c.tokens.count, 2)
        XCTAssertEqual(c.tokens[0].sha256, Digest.sha256(Array("tok-app-0123456789abcdef0123456789".utf8)))
    }

    func testBadValuesAreRefusedWithoutEchoingSecrets() {
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_LISTEN": "nonsense"]))
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_APPLE_ENVIRONMENTS": "Xcode"]))
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_APPLE_APP_APPLE_IDS": "12a"]))
        do {
            _ = try LedgerConfiguration.load(environment: ["LEDGER_TOKENS": "root:supersecret"])
            XCTFail("an unknown role must be refused")
        } catch {
            XCTAssertFalse("\(error)".contains("supersecret"), "the error must not echo the token")
        }
    }

    /// Every secret variable may come from a file (`<NAME>_FILE`), never both, never echoed.
    func testSecretsMayComeFromFiles() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func file(_ name: String, _ content: String) throws -> String {
            let url = dir.appendingPathComponent(name)
            try Data(content.utf8).write(to: url)
            return url.path
        }
        let c = try LedgerConfiguration.load(environment: [
            "LEDGER_TOKENS_FILE": try file("tokens", "admin:from-a-file-0123456789abcdef0123456789\n"),
            "LEDGER_APPLE_SHARED_SECRET_FILE": try file("secret", "v1-secret\r\n"),
            "LEDGER_DATABASE_URL_FILE": try file("db", "host=/tmp dbname=ledger user=ledger_service password=pw"),
        ])
        XCTAssertEqual(c.tokens.first?.sha256, Digest.sha256(Array("from-a-file-0123456789abcdef0123456789".utf8)), "the trailing newline is not part of the token")
        XCTAssertEqual(c.apple.sharedSecret?.value, "v1-secret")
        XCTAssertEqual(c.databaseURL, "host=/tmp dbname=ledger user=ledger_service password=pw")
        for name in LedgerConfiguration.secretVariables {
            XCTAssertThrowsError(try LedgerConfiguration.load(environment: [name: "x", name + "_FILE": try file("both", "y")])) { error in
                XCTAssertTrue("\(error)".contains(name + "_FILE"), "\(error)")
            }
        }
        do {
            _ = try LedgerConfiguration.load(environment: ["LEDGER_WECHAT_APP_KEY_FILE": dir.appendingPathComponent("missing").path])
            XCTFail("an unreadable secret file must be refused")
        } catch {
            XCTAssertTrue("\(error)".contains("LEDGER_WECHAT_APP_KEY_FILE"), "\(error)")
        }
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_TOKENS_FILE": try file("empty", "\n")]))
    }

    func testConfigFileTokensMustBeHashes() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("c.json")
        try Data(#"{"tokens":[{"role":"admin","sha256":"plain-token"}]}"#.utf8).write(to: file)
        XCTAssertThrowsError(try LedgerConfiguration.load(environment: ["LEDGER_CONFIG": file.path]))
        let hash = Hex.encode(Digest.sha256(Array("adm".utf8)))
        try Data(#"{"tokens":[{"role":"admin","sha256":"\#(hash)"}],"products":{"p1":{"entitlements":["premium"]}}}"#.utf8).write(to: file)
        let c = try LedgerConfiguration.load(environment: ["LEDGER_CONFIG": file.path])
        XCTAssertEqual(TokenAuthority(tokens: c.tokens).role(forAuthorizationHeader: "Bearer adm"), .admin)
        XCTAssertTrue(String(decoding: c.productsJSON ?? Data(), as: UTF8.self).contains("premium"))
    }
}

final class AuthTests: XCTestCase {
    let authority = TokenAuthority(tokens: [
        .init(role: .app, sha256: Digest.sha256(Array("a-token".utf8))),
        .init(role: .auditor, sha256: Digest.sha256(Array("b-token".utf8))),
    ])

    func testRolesAndFailures() {
        XCTAssertEqual(try authority.authorize(header: "Bearer a-token", needs: .app).get(), .app)
        XCTAssertEqual(try authority.authorize(header: "bearer b-token", needs: .app).get(), .auditor)
        guard case .failure(.forbidden) = authority.authorize(header: "Bearer a-token", needs: .auditor) else { return XCTFail() }
        guard case .failure(.unauthenticated) = authority.authorize(header: nil, needs: .app) else { return XCTFail() }
        guard case .failure(.unauthenticated) = authority.authorize(header: "Bearer nope", needs: .app) else { return XCTFail() }
        guard case .failure(.unauthenticated) = authority.authorize(header: "Basic a-token", needs: .app) else { return XCTFail() }
        guard case .failure(.unauthenticated) = authority.authorize(header: "Bearer ", needs: .app) else { return XCTFail() }
    }
}

final class LogAndMetricsTests: XCTestCase {
    func testJSONEscapingDefeatsLogInjection() throws {
        let s = JSONText.string("evil\n{\"level\":\"error\"}\u{0}")
        XCTAssertFalse(s.contains("\n"))
        let back = try JSONSerialization.jsonObject(with: Data("[\(s)]".utf8)) as? [String]
        XCTAssertEqual(back?.first, "evil\n{\"level\":\"error\"}\u{0}")
    }

    func testPrometheusRendering() async {
        let m = MetricsRegistry()
        m.describe("ledger_http_requests_total", type: .counter, help: "HTTP requests by route and status")
        m.increment("ledger_http_requests_total", ["route": "/healthz", "status": "200"])
        m.increment("ledger_http_requests_total", ["route": "/healthz", "status": "200"])
        m.observe("ledger_http_request_seconds", ["route": "/healthz"], value: 0.003)
        m.gauge("ledger_pool_in_use", help: "connections in use") { [(labels: [:], value: 3)] }
        let text = await m.render()
        XCTAssertTrue(text.contains("ledger_http_requests_total{route=\"/healthz\",status=\"200\"} 2\n"), text)
        XCTAssertTrue(text.contains("ledger_http_request_seconds_bucket{route=\"/healthz\",le=\"0.0025\"} 0\n"), text)
        XCTAssertTrue(text.contains("ledger_http_request_seconds_bucket{route=\"/healthz\",le=\"0.005\"} 1\n"), text)
        XCTAssertTrue(text.contains("ledger_http_request_seconds_count{route=\"/healthz\"} 1\n"), text)
        XCTAssertTrue(text.contains("ledger_pool_in_use 3\n"), text)
        XCTAssertEqual(MetricsRegistry.render(["b": "x\"y\\z\nw", "a": "plain"]), "a=\"plain\",b=\"x\\\"y\\\\z\\nw\"")
    }
}

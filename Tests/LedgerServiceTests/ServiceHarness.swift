import AppStore
import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Postgres
import XCTest

/// A real service for a test: a fresh migrated database, the app connected as the restricted
/// role, served on an ephemeral loopback port, and a superuser connection to look behind it.
final class ServiceHarness: @unchecked Sendable {
    let database: TestDatabase
    let app: LedgerApp
    let server: HTTPServer
    let admin: Connection
    let authority: AppleTestAuthority
    let baseURL: URL
    private let rootFile: URL
    /// False for a second instance on another harness's database (that one drops it).
    private let ownsDatabase: Bool

    /// Tokens of at least 32 bytes: shorter ones are refused at start.
    static let appToken = "app-token-for-tests-0123456789abcdef"
    static let auditorToken = "auditor-token-for-tests-0123456789abcdef"
    static let adminToken = "admin-token-for-tests-0123456789abcdef"
    static let tokens = "app:\(appToken),auditor:\(auditorToken),admin:\(adminToken)"

    /// - Parameter replica: serve app and auditor reads from the streaming replica
    ///   (LEDGER_READ_DATABASE_URL; `make test` starts it).
    init(authority: AppleTestAuthority? = nil, extraRoots: [X509Certificate] = [], environment extra: [String: String] = [:],
         configJSON: String? = nil, replica: Bool = false, log: Log? = nil, database existing: TestDatabase? = nil,
         configure: (inout LedgerConfiguration) -> Void = { _ in }) throws {
        database = try existing ?? TestDatabase.create()
        ownsDatabase = existing == nil
        let authority = try authority ?? AppleTestAuthority.mint()
        self.authority = authority
        rootFile = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-root-\(UUID().uuidString).pem")
        // One PEM file may hold several roots: the harness's own plus any a test adds.
        try Data(([authority.root] + extraRoots).map { $0.pem }.joined().utf8).write(to: rootFile)
        var env: [String: String] = [
            "LEDGER_DATABASE_URL": database.serviceConninfo,
            "LEDGER_LISTEN": "127.0.0.1:0",
            "LEDGER_APPLE_ROOT_CERTS": rootFile.path,
            "LEDGER_APPLE_BUNDLE_IDS": "com.example",
            "LEDGER_APPLE_APP_APPLE_IDS": "1234",
            "LEDGER_APPLE_ENVIRONMENTS": "Sandbox,Production",
            // Production under the test authority's root: refused unless a test set-up says so.
            "LEDGER_APPLE_ALLOW_TEST_ROOTS": "true",
            "LEDGER_APPLE_SHARED_SECRET": "v1-shared-secret",
            // V1 with Production is refused at start unless the secret is trusted to set state.
            "LEDGER_APPLE_V1_TRUSTED": "true",
            "LEDGER_TOKENS": Self.tokens,
        ]
        if let configJSON {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-config-\(UUID().uuidString).json")
            try Data(configJSON.utf8).write(to: file)
            env["LEDGER_CONFIG"] = file.path
        }
        if replica {
            guard let url = database.replicaConninfo() else {
                try? database.drop()
                throw XCTSkip("no read replica: LEDGER_TEST_REPLICA_URL is unset (make test starts one with scripts/db.sh replica-start)")
            }
            guard database.waitForReplica() else {
                try? database.drop()
                throw TestDatabaseError.missingEnvironment("a streaming replica that replays (the test database did not reach LEDGER_TEST_REPLICA_URL within 15 s; scripts/db.sh replica-start re-clones a broken one)")
            }
            env["LEDGER_READ_DATABASE_URL"] = url
        }
        env.merge(extra) { $1 }
        var configuration = try LedgerConfiguration.load(environment: env)
        configure(&configuration)
        do {
            app = try LedgerApp(configuration: configuration, log: log ?? Log(minimum: .error))
        } catch {
            try? database.drop()
            throw error
        }
        server = HTTPServer(configuration: app.httpConfiguration(), router: app.makeRouter())
        server.observer = { [app] in app.observe($0) }
        try server.start()
        baseURL = URL(string: "http://127.0.0.1:\(server.port!)")!
        admin = try database.connect()
    }

    func stop() async {
        await server.shutdown(gracePeriod: .seconds(2))
        app.shutdown()
        try? FileManager.default.removeItem(at: rootFile)
        if ownsDatabase { try? database.drop() }
    }

    struct Answer {
        var status: Int
        var body: Data
        var headers: [String: String]
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
        var text: String { String(decoding: body, as: UTF8.self) }
        var errorCode: String? { json["error"] as? String }
    }

    func request(_ method: String, _ path: String, body: Data? = nil, token: String? = nil,
                 headers: [String: String] = [:]) async throws -> Answer {
        var r = URLRequest(url: URL(string: path, relativeTo: baseURL)!)
        r.httpMethod = method
        r.httpBody = body
        r.timeoutInterval = 30
        if let token { r.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if body != nil { r.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        for (k, v) in headers { r.setValue(v, forHTTPHeaderField: k) }
        let (data, response) = try await URLSession.shared.data(for: r)
        let http = response as! HTTPURLResponse
        var h: [String: String] = [:]
        for (k, v) in http.allHeaderFields { h["\(k)".lowercased()] = "\(v)" }
        return Answer(status: http.statusCode, body: data, headers: h)
    }

    func post(_ path: String, _ body: Data) async throws -> Answer {
        try await request("POST", path, body: body)
    }

    func eventCount() throws -> Int64 {
        try admin.query("SELECT count(*) AS n FROM events", name: "count events").first!.decode(Int64.self, "n")
    }

    func events(stream: String) throws -> [(type: String, dedupeKey: String, raw: Data)] {
        try admin.query("SELECT type, dedupe_key, raw FROM events WHERE stream_id = $1 ORDER BY position",
                        [.text(stream)], name: "stream events").rows.map {
            (try $0.decode(String.self, "type"), try $0.decode(String.self, "dedupe_key"), try $0.decode(Data.self, "raw"))
        }
    }
}

/// Runs `body` with a harness and always stops it.
func withService(
    authority: AppleTestAuthority? = nil, extraRoots: [X509Certificate] = [], environment: [String: String] = [:],
    configJSON: String? = nil, replica: Bool = false, log: Log? = nil, configure: (inout LedgerConfiguration) -> Void = { _ in },
    _ body: (ServiceHarness) async throws -> Void
) async throws {
    let h = try ServiceHarness(authority: authority, extraRoots: extraRoots, environment: environment, configJSON: configJSON,
                               replica: replica, log: log, configure: configure)
    do { try await body(h) } catch { await h.stop(); throw error }
    await h.stop()
}

import AppStore
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import XCTest

/// `ledger reconcile` as an operator runs it (the built binary, as a child process), and the
/// configuration of the App Store Server API.
final class ReconcileCommandTests: XCTestCase {
    typealias F = ReconciliationFixtures

    static var binary: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/ledger")
    }

    struct Outcome {
        var status: Int32
        var out: String
        var err: String
    }

    func ledger(_ arguments: [String], environment: [String: String] = [:]) throws -> Outcome {
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build the product first (swift build)")
        let p = Process()
        p.executableURL = Self.binary
        p.arguments = arguments
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LEDGER_") || $0.key == "LEDGER_MIGRATIONS_DIR" }
        env.merge(environment) { $1 }
        p.environment = env
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile(), e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Outcome(status: p.terminationStatus, out: String(decoding: o, as: UTF8.self), err: String(decoding: e, as: UTF8.self))
    }

    func testTheCommandReconcilesDryRunsAndChecksTheWebhookEndToEnd() async throws {
        try await withReconciliation { h, fake in
            let rootFile = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-root-\(UUID().uuidString).pem")
            try Data(h.authority.root.pem.utf8).write(to: rootFile)
            defer { try? FileManager.default.removeItem(at: rootFile) }
            var env: [String: String] = [
                "LEDGER_DATABASE_URL": h.database.serviceConninfo, "LEDGER_APPLE_ROOT_CERTS": rootFile.path,
                "LEDGER_APPLE_BUNDLE_IDS": "com.example", "LEDGER_APPLE_APP_APPLE_IDS": "1234",
                "LEDGER_APPLE_ENVIRONMENTS": "Sandbox,Production", "LEDGER_APPLE_ALLOW_TEST_ROOTS": "true",
                "LEDGER_APPLE_API_ISSUER_ID": fake.credentials.issuerId, "LEDGER_APPLE_API_KEY_ID": fake.credentials.keyId,
                "LEDGER_APPLE_API_BASE_URL": fake.baseURL.absoluteString, "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true",
            ]
            // The key through a Docker-style secret file holding the .p8 itself.
            env["LEDGER_APPLE_API_PRIVATE_KEY_FILE"] = try XCTUnwrap(h.app.configuration.appleAPI.privateKey?.value)
            // Inside the 30 days of Sandbox history Apple keeps (20-day periods).
            let t0 = F.now - 25 * F.day
            let otid = "1000000000001901", token = "aaaaaaaa-0000-4000-8000-000000001901"
            fake.setSubscription(F.renewedMonthly(otid: otid, token: token, t0: t0, period: 20 * F.day))
            try await F.deliver(h, try fake.notify("SUBSCRIBED", about: otid, date: t0, transactionId: otid))
            _ = try fake.notify("DID_RENEW", about: otid, date: t0 + 20 * F.day, failed: true)
            let since = String(t0 - F.day)

            var r = try ledger(["reconcile", "--since", since, "--environment", "Sandbox", "--dry-run"], environment: env)
            XCTAssertEqual(r.status, 0, r.err)
            XCTAssertTrue(r.out.contains("dry run: nothing stored"), r.out)
            XCTAssertTrue(r.out.contains("1 backfilled"), r.out)
            XCTAssertTrue(r.out.contains("\(otid): expired"), r.out)
            XCTAssertEqual(try F.events(h, type: "DID_RENEW").count, 0, "the dry run stored nothing")

            r = try ledger(["reconcile", "--since", since, "--environment", "Sandbox"], environment: env)
            XCTAssertEqual(r.status, 0, r.err)
            XCTAssertTrue(r.out.contains("drift: 1 subscription changed"), r.out)
            XCTAssertTrue(r.out.contains("→ active com.example.monthly"), r.out)
            XCTAssertEqual(try F.events(h, type: "DID_RENEW").count, 1)
            let stored = try h.eventCount()
            r = try ledger(["reconcile", "--since", since, "--environment", "Sandbox"], environment: env)
            XCTAssertEqual(r.status, 0, r.err)
            XCTAssertTrue(r.out.contains("0 backfilled, 2 already stored"), r.out)
            XCTAssertEqual(try h.eventCount(), stored, "a second run stores nothing")

            // --test-notification: Apple posts TEST to the service's webhook; the command waits for it.
            fake.webhookURL = h.baseURL.appendingPathComponent("v1/apple/notifications")
            r = try ledger(["reconcile", "--test-notification", "--environment", "Sandbox", "--timeout", "20"], environment: env)
            XCTAssertEqual(r.status, 0, r.err)
            XCTAssertTrue(r.out.contains("arrived through the webhook"), r.out)
            XCTAssertEqual(try h.events(stream: StreamId.appleTest.text).count, 1)

            // Refusals with what to do.
            r = try ledger(["reconcile", "--environment", "Sandbox"], environment: env)
            XCTAssertEqual(r.status, 2)
            XCTAssertTrue(r.err.contains("--since"), r.err)
            r = try ledger(["reconcile", "--since", "yesterday"], environment: env)
            XCTAssertEqual(r.status, 2)
            r = try ledger(["reconcile", "--since", since, "--environment", "PROD"], environment: env)
            XCTAssertEqual(r.status, 2)
            // --wechat is WeChat's reconciliation, which takes no Apple window.
            r = try ledger(["reconcile", "--since", since, "--wechat"], environment: env)
            XCTAssertEqual(r.status, 2)
            XCTAssertTrue(r.err.contains("--since"), r.err)
            var unconfigured = env
            unconfigured["LEDGER_APPLE_API_ISSUER_ID"] = nil
            r = try ledger(["reconcile", "--since", since], environment: unconfigured)
            XCTAssertEqual(r.status, 2)
            XCTAssertTrue(r.err.contains("LEDGER_APPLE_API_ISSUER_ID"), r.err)
            XCTAssertFalse(r.err.contains("BEGIN PRIVATE KEY"), "the key is never echoed")
        }
    }

    func testTheHelpNamesEveryOption() throws {
        let r = try ledger(["reconcile", "--help"])
        XCTAssertEqual(r.status, 0)
        for option in ["--since", "--until", "--environment", "--dry-run", "--all", "--test-notification"] {
            XCTAssertTrue(r.out.contains(option), option)
        }
        XCTAssertTrue(try ledger(["--help"]).out.contains("reconcile"))
    }

    // MARK: - Configuration

    func configuration(_ env: [String: String]) throws -> LedgerConfiguration {
        try LedgerConfiguration.load(environment: ["LEDGER_DATABASE_URL": "dbname=unused", "LEDGER_APPLE_BUNDLE_IDS": "com.example",
                                                   "LEDGER_APPLE_ENVIRONMENTS": "Sandbox"].merging(env) { $1 })
    }

    func testTheAPIConfigurationSaysWhatIsMissingAndNeverEchoesTheKey() throws {
        let authority = try AppleTestAuthority.mint()
        let api = try AppleAPIFixture(authority: authority)
        defer { Task { await api.stop() } }
        let pem = try String(contentsOf: api.keyFile, encoding: .utf8)
        // All three, the bundle id from LEDGER_APPLE_BUNDLE_IDS; the key as a path or as PEM text.
        for key in [api.keyFile.path, pem] {
            var env = api.environment
            env["LEDGER_APPLE_API_PRIVATE_KEY"] = key
            let c = try configuration(env)
            let client = try XCTUnwrap(try c.appleAPI.clientConfiguration(fallbackBundleIds: ["com.example"]))
            XCTAssertEqual(client.bundleId, "com.example")
            XCTAssertEqual(client.keyId, api.fake.credentials.keyId)
            XCTAssertEqual("\(c.appleAPI.privateKey!)", "<redacted>")
        }
        // None: not configured (reconciliation off, consumption answered "no credentials").
        XCTAssertNil(try configuration([:]).appleAPI.clientConfiguration(fallbackBundleIds: ["com.example"]))
        // Some: refused naming the missing one.
        var partial = api.environment
        partial["LEDGER_APPLE_API_KEY_ID"] = nil
        XCTAssertThrowsError(try configuration(partial).appleAPI.clientConfiguration(fallbackBundleIds: ["com.example"])) {
            XCTAssertTrue("\($0)".contains("LEDGER_APPLE_API_KEY_ID"), "\($0)")
        }
        XCTAssertThrowsError(try LedgerApp(configuration: try configuration(partial), log: Log(minimum: .error))) {
            XCTAssertTrue("\($0)".contains("LEDGER_APPLE_API_KEY_ID"), "\($0)")
        }
        // A key that is not a key: what to download, and never its content.
        var wrong = api.environment
        wrong["LEDGER_APPLE_API_PRIVATE_KEY"] = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----"
        XCTAssertThrowsError(try configuration(wrong).appleAPI.clientConfiguration(fallbackBundleIds: ["com.example"])) {
            XCTAssertFalse("\($0)".contains("bm90IGEga2V5"), "\($0)")
        }
        wrong["LEDGER_APPLE_API_PRIVATE_KEY"] = "TUlHSEFnRUFNQk1HQnlxR1NNNDlBZ0VHQ0NxR1NNNDlBd0VIQkcwd2F3SUJBUVFn\nc2VjcmV0"
        XCTAssertThrowsError(try configuration(wrong).appleAPI.clientConfiguration(fallbackBundleIds: ["com.example"])) {
            XCTAssertFalse("\($0)".contains("c2VjcmV0"), "key material without its header is not echoed as a path: \($0)")
        }
        wrong["LEDGER_APPLE_API_PRIVATE_KEY"] = "/nonexistent/key.p8"
        XCTAssertThrowsError(try configuration(wrong).appleAPI.clientConfiguration(fallbackBundleIds: ["com.example"])) {
            XCTAssertTrue("\($0)".contains("In-App Purchase"), "\($0)")
        }
        // The periodic runner and the policies.
        XCTAssertEqual(try configuration(["LEDGER_RECONCILE_EVERY": "6h"]).appleAPI.reconcileEvery, .seconds(21_600))
        XCTAssertEqual(try configuration(["LEDGER_RECONCILE_EVERY": "30m"]).appleAPI.reconcileEvery, .seconds(1800))
        XCTAssertEqual(try configuration(["LEDGER_RECONCILE_EVERY": "1d"]).appleAPI.reconcileEvery, .seconds(86_400))
        for bad in ["10s", "0", "-1h", "6 hours", "31d", "h"] {
            XCTAssertThrowsError(try configuration(["LEDGER_RECONCILE_EVERY": bad]), bad) {
                XCTAssertTrue("\($0)".contains("LEDGER_RECONCILE_EVERY"), "\($0)")
            }
        }
        XCTAssertThrowsError(try LedgerApp(configuration: try configuration(["LEDGER_RECONCILE_EVERY": "6h"]), log: Log(minimum: .error))) {
            XCTAssertTrue("\($0)".contains("LEDGER_APPLE_API_ISSUER_ID"), "periodic reconciliation without credentials: \($0)")
        }
        XCTAssertEqual(try configuration(["LEDGER_APPLE_REFUND_PREFERENCE": "usage:5:40:DECLINE"]).appleAPI.refundPreference,
                       RefundPreferencePolicy(undelivered: .grantFull, grantFullBelowPercent: 5, grantProratedBelowPercent: 40, otherwise: .decline))
        XCTAssertThrowsError(try configuration(["LEDGER_APPLE_REFUND_PREFERENCE": "generous"])) {
            XCTAssertTrue("\($0)".contains("LEDGER_APPLE_REFUND_PREFERENCE"), "\($0)")
        }
        XCTAssertThrowsError(try configuration(["LEDGER_APPLE_SAMPLE_CONTENT": "maybe"]))
        XCTAssertThrowsError(try configuration(["LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL": "ftp://x"]).appleAPI.verifyReceiptConfiguration(sharedSecret: nil))
        // The body carries the shared secret: plain http is refused, to loopback too unless the setting allows it.
        for url in ["http://receipts.example", "http://127.0.0.1:9"] {
            XCTAssertThrowsError(try configuration(["LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL": url]).appleAPI.verifyReceiptConfiguration(sharedSecret: nil)) {
                XCTAssertTrue("\($0)".contains("LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL"), "\($0)")
            }
        }
        XCTAssertNoThrow(try configuration(["LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL": "http://127.0.0.1:9",
                                            "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]).appleAPI.verifyReceiptConfiguration(sharedSecret: nil))
        XCTAssertThrowsError(try configuration(["LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL": "http://receipts.example",
                                                "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]).appleAPI.verifyReceiptConfiguration(sharedSecret: nil),
                             "the setting opens loopback only")
        // The file form.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-config-\(UUID().uuidString).json")
        try Data(#"{"apple": {"api": {"reconcileEvery": "2h", "refundPreference": {"undelivered": "GRANT_FULL", "otherwise": "DECLINE"}, "sampleContentProvided": false}}}"#.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let fromFile = try configuration(["LEDGER_CONFIG": file.path])
        XCTAssertEqual(fromFile.appleAPI.reconcileEvery, .seconds(7200))
        XCTAssertEqual(fromFile.appleAPI.refundPreference, RefundPreferencePolicy(undelivered: .grantFull, otherwise: .decline))
        XCTAssertEqual(fromFile.appleAPI.sampleContent, .always(false))
        try Data(#"{"apple": {"api": {"refundPreference": {"grantFullBelowPercent": 300}}}}"#.utf8).write(to: file)
        XCTAssertThrowsError(try configuration(["LEDGER_CONFIG": file.path]))
    }
}

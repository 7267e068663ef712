import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// `ledger reconcile --wechat` against a local fake of WeChat's server API (`FakeWeChatAPI`):
/// WeChat's contract answers heal what pushes the ledger never got — a missed unsigning (contract
/// state, auto-renew, entitlements after the period), a missed renewal charge (entitlements) — and
/// override only push facts older than the asking; `query_order` ties an orphan refund naming only
/// WeChat's order id to its subscription.
final class WeChatReconcileTests: XCTestCase {
    let side = WeChatSide()
    static let day: EpochMillis = 86_400_000
    let product = "vip_monthly"

    func withFakeAndService(_ body: (FakeWeChatAPI, ServiceHarness) async throws -> Void) async throws {
        let fake = FakeWeChatAPI()
        try fake.start()
        var env = WeChatSide.environment
        env["LEDGER_WECHAT_APP_SECRET"] = fake.appSecret
        env["LEDGER_WECHAT_API_BASE_URL"] = fake.baseURL.absoluteString
        env["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK"] = "true"
        do {
            try await withService(environment: env) { h in try await body(fake, h) }
        } catch {
            await fake.shutdown()
            throw error
        }
        await fake.shutdown()
    }

    func reconcile(_ h: ServiceHarness, dryRun: Bool = false) async throws -> WeChatReconcile.Summary {
        try await WeChatReconcile.run(configuration: h.app.configuration, dryRun: dryRun, orphanAge: .zero, log: Log(minimum: .error))
    }

    func contract(_ h: ServiceHarness, _ openId: String) async throws -> [String: Any] {
        let a = try await h.request("GET", "/v1/wechat/contracts?openid=\(openId)&product_id=\(product)", token: "app-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        return a.json
    }

    func testAMissedUnsigningIsHealedInTheContractStateAndTheEntitlements() async throws {
        try await withFakeAndService { fake, h in
            let otid = "7900000000000001", openId = "oMissed1"
            let now = WeChatSide.nowSeconds() * 1000
            let start = now - 10 * Self.day, end = now + 20 * Self.day
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: start, renewal: end))
            let delivery = WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "MISS-1", paid: start, create: start, renewal: end)
            try await side.push(h, delivery)
            // The user unsigned; the push never reached the ledger. WeChat knows.
            fake.setContract(openId: openId, productId: product, SubscribeContract(
                authorizationState: .terminated,
                appleSubscriptionInfo: .init(originalTransactionId: otid, autoRenewStatus: 0, recentSubscriptionStartDate: start, renewalDate: end)))
            let awaited1 = try await contract(h, openId)
            XCTAssertEqual(awaited1["authorization_state"] as? String, "SIGNED")
            let renewingBefore = try await h.state(otid)
            XCTAssertEqual(renewingBefore?["autoRenewStatus"] as? Int, 1)

            let dry = try await reconcile(h, dryRun: true)
            XCTAssertEqual(dry.asked, 1)
            XCTAssertEqual(dry.differences.count, 1, dry.description)
            XCTAssertEqual(dry.recorded, 0)
            let awaited2 = try await contract(h, openId)
            XCTAssertEqual(awaited2["authorization_state"] as? String, "SIGNED", "a dry run records nothing")

            let run = try await reconcile(h)
            XCTAssertEqual(run.recorded, 1, run.description)
            XCTAssertEqual(fake.seen.filter { $0.path == "/cgi-bin/stable_token" }.count, 2, "one token per run, reused")
            XCTAssertTrue(fake.seen.allSatisfy { $0.refusal == nil }, "\(fake.seen.compactMap(\.refusal))")
            // Healed: the contract, the subscription's auto-renew (live, time travel, rebuild) ...
            let awaited3 = try await contract(h, openId)
            XCTAssertEqual(awaited3["authorization_state"] as? String, "TERMINATED")
            for phase in ["live", "rebuilt"] {
                if phase == "rebuilt" { try await h.rebuild() }
                let live = try await h.state(otid)
                XCTAssertEqual(live?["autoRenewStatus"] as? Int, 0, phase)
                XCTAssertEqual(live?["status"] as? String, "active", "\(phase): paid until the period's end")
                let atNow = try await h.state(otid, at: Clock.nowMillis())
                XCTAssertEqual(atNow?["autoRenewStatus"] as? Int, 0, phase)
                // ... and the entitlements: held to the end of the paid period, none after it.
                let entitledNow = try await h.entitlements(openId)
                XCTAssertEqual(entitledNow, [product], phase)
                let entitledAfter = try await h.entitlements(openId, at: end + 1)
                XCTAssertEqual(entitledAfter, [], phase)
            }
            // What the ledger knew before asking is unchanged (bitemporal): auto-renew was on.
            let before = try await h.state(otid, at: start + Self.day)
            XCTAssertEqual(before?["autoRenewStatus"] as? Int, 1, "the answer overrides only statements older than the asking")
            // A re-push of the old delivery is older than the answer: still terminated.
            try await side.push(h, delivery, .xmlSecure)
            let awaited4 = try await contract(h, openId)
            XCTAssertEqual(awaited4["authorization_state"] as? String, "TERMINATED")
            // A newer push wins over the answer: the user signs again after the period.
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: end + Self.day, renewal: end + 31 * Self.day))
            let awaited5 = try await contract(h, openId)
            XCTAssertEqual(awaited5["authorization_state"] as? String, "SIGNED")
            // Agreeing now (WeChat says so too): nothing more recorded.
            fake.setContract(openId: openId, productId: product, SubscribeContract(
                authorizationState: .signed,
                appleSubscriptionInfo: .init(originalTransactionId: otid, autoRenewStatus: 1, recentSubscriptionStartDate: start, renewalDate: end + 31 * Self.day)))
            let again = try await reconcile(h)
            XCTAssertEqual(again.agreed, 1, again.description)
            XCTAssertEqual(again.recorded, 0)
            // The answer is evidence in the subscription's timeline, with WeChat's exact bytes.
            let timeline = try await h.request("GET", "/v1/subscriptions/\(otid)/events", token: "auditor-token-for-tests-0123456789abcdef")
            let answers = (timeline.json["events"] as? [[String: Any]] ?? []).filter { $0["type"] as? String == XPayEventName.contractQueryAnswer }
            XCTAssertEqual(answers.count, 1)
            XCTAssertTrue((answers.first?["raw"] as? String ?? "").contains("TERMINATED"))
        }
    }

    func testAMissedRenewalIsHealedInTheEntitlements() async throws {
        try await withFakeAndService { fake, h in
            let otid = "7900000000000002", openId = "oMissed2"
            let now = WeChatSide.nowSeconds() * 1000
            let start = now - 40 * Self.day, r1 = now - 10 * Self.day, r2 = now + 20 * Self.day
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: start, renewal: r1))
            try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "MISS-2", paid: start, create: start, renewal: r1))
            let awaited6 = try await h.state(otid)
            XCTAssertEqual(awaited6?["status"] as? String, "expired")
            let awaited7 = try await h.entitlements(openId)
            XCTAssertEqual(awaited7, [])
            fake.setContract(openId: openId, productId: product, SubscribeContract(
                authorizationState: .signed,
                appleSubscriptionInfo: .init(originalTransactionId: otid, autoRenewStatus: 1, recentSubscriptionStartDate: start, renewalDate: r2)))
            let run = try await reconcile(h)
            XCTAssertEqual(run.recorded, 1, run.description)
            for phase in ["live", "rebuilt"] {
                if phase == "rebuilt" { try await h.rebuild() }
                let state = try await h.state(otid)
                XCTAssertEqual(state?["status"] as? String, "active", phase)
                XCTAssertEqual((state?["expiresDate"] as? NSNumber)?.int64Value, r2, phase)
                let awaited8 = try await h.entitlements(openId)
                XCTAssertEqual(awaited8, [product], phase)
                // Time travel: the missed period began where the last one the ledger knew ended.
                let awaited9 = try await h.state(otid, at: r1 + Self.day)
                XCTAssertEqual(awaited9?["status"] as? String, "active", phase)
                let awaited10 = try await h.state(otid, at: r1 - Self.day)
                XCTAssertEqual(awaited10?["latestTransactionId"] as? String, "MISS-2", phase)
            }
        }
    }

    func testAnOrphanRefundNamingOnlyWeChatsOrderIdIsLinkedThroughQueryOrder() async throws {
        try await withFakeAndService { fake, h in
            let otid = "7900000000000003", openId = "oOrphan3"
            let now = WeChatSide.nowSeconds() * 1000
            let start = now - 10 * Self.day, end = now + 20 * Self.day
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: start, renewal: end))
            try await side.push(h, WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "OUT-3", paid: start, create: start, renewal: end))
            // The refund names only WeChat's own order id, which no push tied to OUT-3.
            let refundAt = now - Self.day
            try await side.push(h, WeChatSide.refund(openId: openId, mchOrderId: "", wxOrderId: "WXO-3", at: refundAt, refundId: "RO-3"))
            let awaited11 = try await h.state(otid)
            XCTAssertEqual(awaited11?["status"] as? String, "active", "the refund counts for nobody yet")
            let orphansBefore = try await h.app.store.wechat.orphans(recordedBefore: Clock.nowMillis() + 1, limit: 10)
            XCTAssertEqual(orphansBefore.map(\.stream), [StreamId.wechatOrder("WXO-3").text])
            fake.setContract(openId: openId, productId: product, SubscribeContract(
                authorizationState: .signed,
                appleSubscriptionInfo: .init(originalTransactionId: otid, autoRenewStatus: 1, recentSubscriptionStartDate: start, renewalDate: end)))
            fake.setOrder(openId: openId, XPayOrder(orderId: "OUT-3", wxOrderId: "WXO-3", status: 8, orderType: 8))

            let dry = try await reconcile(h, dryRun: true)
            XCTAssertEqual(dry.orphansAsked, 1)
            XCTAssertEqual(dry.aliasesRecorded, 0)
            let run = try await reconcile(h)
            XCTAssertEqual(run.aliasesRecorded, 1, run.description)
            XCTAssertEqual(run.linked, 1, run.description)
            XCTAssertEqual(try h.links(of: StreamId.wechatOrder("WXO-3").text), 1)
            let orphansAfter = try await h.app.store.wechat.orphans(recordedBefore: Clock.nowMillis() + 1, limit: 10)
            XCTAssertEqual(orphansAfter.map(\.stream), [])
            for phase in ["live", "rebuilt"] {
                if phase == "rebuilt" { try await h.rebuild() }
                let awaited12 = try await h.state(otid)
                XCTAssertEqual(awaited12?["status"] as? String, "revoked", phase)
                let awaited13 = try await h.state(otid, at: refundAt - 1)
                XCTAssertEqual(awaited13?["status"] as? String, "active", phase)
                let awaited14 = try await h.entitlements(openId)
                XCTAssertEqual(awaited14, [], phase)
            }
        }
    }

    func testReconcileSaysWhatIsMissingAndStopsOnAWrongSecret() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            do {
                _ = try await reconcile(h)
                XCTFail("ran without an AppSecret")
            } catch {
                XCTAssertTrue("\(error)".contains("LEDGER_WECHAT_APP_SECRET"), "\(error)")
            }
        }
        let fake = FakeWeChatAPI(appSecret: "the-real-secret")
        try fake.start()
        var env = WeChatSide.environment
        env["LEDGER_WECHAT_APP_SECRET"] = "a-wrong-secret"
        env["LEDGER_WECHAT_API_BASE_URL"] = fake.baseURL.absoluteString
        env["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK"] = "true"
        try await withService(environment: env) { h in
            try await side.push(h, WeChatSide.signing(otid: "7900000000000004", openId: "oSecret", product: product,
                                                      signed: Clock.nowMillis() - Self.day, renewal: Clock.nowMillis() + Self.day))
            do {
                _ = try await reconcile(h)
                XCTFail("a wrong AppSecret went unnoticed")
            } catch {
                XCTAssertTrue("\(error)".contains("LEDGER_WECHAT_APP_SECRET"), "\(error)")
                XCTAssertFalse("\(error)".contains("a-wrong-secret"), "the secret is never echoed")
            }
        }
        await fake.shutdown()
    }

    /// The product's own command, as an operator runs it, against the fake.
    func testTheLedgerCommandReconciles() async throws {
        let binary = try XCTUnwrap(LedgerBinary.path, "the ledger executable is built beside the tests")
        try await withFakeAndService { fake, h in
            let otid = "7900000000000005", openId = "oCli5"
            let now = WeChatSide.nowSeconds() * 1000
            try await side.push(h, WeChatSide.signing(otid: otid, openId: openId, product: product, signed: now - Self.day, renewal: now + Self.day))
            fake.setContract(openId: openId, productId: product, SubscribeContract(
                authorizationState: .terminated,
                appleSubscriptionInfo: .init(originalTransactionId: otid, autoRenewStatus: 0, recentSubscriptionStartDate: nil, renewalDate: now + Self.day)))
            var env = WeChatSide.environment
            env["LEDGER_DATABASE_URL"] = h.database.serviceConninfo
            env["LEDGER_WECHAT_APP_SECRET"] = fake.appSecret
            env["LEDGER_WECHAT_API_BASE_URL"] = fake.baseURL.absoluteString
            env["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK"] = "true"
        env["LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK"] = "true"
            let dry = try LedgerBinary.run(binary, ["reconcile", "--wechat", "--dry-run"], environment: env)
            XCTAssertEqual(dry.status, 0, dry.output)
            XCTAssertTrue(dry.output.contains("1 differ"), dry.output)
            XCTAssertTrue(dry.output.contains("dry run"), dry.output)
            let awaited15 = try await contract(h, openId)
            XCTAssertEqual(awaited15["authorization_state"] as? String, "SIGNED")
            let real = try LedgerBinary.run(binary, ["reconcile", "--wechat"], environment: env)
            XCTAssertEqual(real.status, 0, real.output)
            XCTAssertTrue(real.output.contains("recorded 1 contract answer"), real.output)
            let awaited16 = try await contract(h, openId)
            XCTAssertEqual(awaited16["authorization_state"] as? String, "TERMINATED")
            let apple = try LedgerBinary.run(binary, ["reconcile"], environment: env)
            // Without --wechat it is Apple's reconciliation, which needs the App Store Server API.
            XCTAssertNotEqual(apple.status, 0)
            XCTAssertTrue(apple.output.contains("App Store Server API is not configured"), apple.output)
        }
    }
}

/// The `ledger` executable built beside the test bundle.
enum LedgerBinary {
    static var path: String? {
        var candidates: [URL] = []
        if let first = CommandLine.arguments.first {
            var dir = URL(fileURLWithPath: first).deletingLastPathComponent()
            if dir.path.hasSuffix(".xctest") || dir.path.contains(".xctest/") {
                while dir.path.contains(".xctest") { dir.deleteLastPathComponent() }
            }
            candidates.append(dir.appendingPathComponent("ledger"))
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(root.appendingPathComponent(".build/debug/ledger"))
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) }?.path
    }

    static func run(_ binary: String, _ arguments: [String], environment: [String: String], input: Data? = nil) throws -> (status: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = arguments
        p.environment = environment.merging(["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"]) { a, _ in a }
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        let inPipe = Pipe()
        p.standardInput = input == nil ? FileHandle.nullDevice : inPipe
        try p.run()
        if let input {
            inPipe.fileHandleForWriting.write(input)
            try inPipe.fileHandleForWriting.close()
        }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

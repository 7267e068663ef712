import Foundation
import LedgerCore
import LedgerTesting
import XCTest

/// The differential test (issue 9 item 2): generated Apple and WeChat lifecycles are delivered
/// through the real service (HTTP, signatures verified, stored, projected by the live hook) in
/// several orders with retries; then, for every subscription and customer, the live tables, a
/// fresh rebuild and the `?at=now` fold of the stored facts must all equal what the generator's
/// own model of each lifecycle expects (and `?at=` of past boundaries must too). The model is
/// written from the lifecycle's script, not from the ledger's fold.
///
/// Environment: `LEDGER_DIFF_SEED` reruns one seed; `LEDGER_DIFF_APPLE` / `LEDGER_DIFF_WECHAT`
/// change the counts (default 1000 / 500); `LEDGER_DIFF_SHUFFLES` picks the delivery orders
/// (default `2,1`: a random permutation of every lifecycle's messages, then the reverse business
/// order of `LEDGER_DIFF_LATER_FRACTION` (default 0.5) of them, each into a fresh service and
/// database, both with retries).
final class DifferentialTests: XCTestCase {
    static let defaultSeed: UInt64 = 20_260_409

    struct Settings {
        var seed: UInt64
        var apple: Int
        var wechat: Int
        var shuffles: [Int]
        var workers: Int
        var laterFraction: Double

        static func fromEnvironment() -> Settings {
            let env = ProcessInfo.processInfo.environment
            func int(_ name: String, _ fallback: Int) -> Int { env[name].flatMap { Int($0) } ?? fallback }
            let seed = env["LEDGER_DIFF_SEED"].flatMap { UInt64($0) } ?? DifferentialTests.defaultSeed
            let shuffles = env["LEDGER_DIFF_SHUFFLES"].map { $0.split(separator: ",").compactMap { Int($0) } } ?? [2, 1]
            return Settings(seed: seed, apple: int("LEDGER_DIFF_APPLE", 1000), wechat: int("LEDGER_DIFF_WECHAT", 500),
                            shuffles: shuffles, workers: int("LEDGER_DIFF_WORKERS", 12),
                            laterFraction: env["LEDGER_DIFF_LATER_FRACTION"].flatMap { Double($0) } ?? 0.5)
        }
    }

    /// One disagreement: which lifecycle or customer, which question, expected and actual.
    struct Finding: Sendable {
        var shuffle: Int
        var lifecycle: Int?
        var customer: String?
        var question: String
        var expected: String
        var actual: String
    }

    func testLiveRebuildTimeTravelAndTheModelAgree() async throws {
        let settings = Settings.fromEnvironment()
        print("differential: seed \(settings.seed) — rerun this exact run with LEDGER_DIFF_SEED=\(settings.seed)")
        let started = Date()
        let authority = try AppleTestAuthority.mint()
        let anchor = EpochMillis(Date().timeIntervalSince1970) * 1000
        let run = try DifferentialRun.generate(seed: settings.seed, anchor: anchor, appleCount: settings.apple,
                                               wechatCount: settings.wechat, authority: authority)
        print("differential: generated and signed in \(Self.seconds(since: started)): \(run.summary)")
        XCTAssertGreaterThanOrEqual(run.lifecycles.filter { $0.source != .wechat }.count, settings.apple)
        XCTAssertGreaterThanOrEqual(run.lifecycles.filter { $0.source == .wechat }.count, settings.wechat)

        var findings: [Finding] = []
        var orders: [Int: [[DiffDelivery]]] = [:]
        for (i, shuffle) in settings.shuffles.enumerated() {
            let plan = run.plan(shuffle: shuffle, fraction: i == 0 ? 1 : settings.laterFraction)
            orders[shuffle] = plan
            try await withService(authority: authority, environment: DifferentialRun.serviceEnvironment) { h in
                findings += try await self.check(run: run, plan: plan, shuffle: shuffle, harness: h, workers: settings.workers)
            }
        }
        print("differential: done in \(Self.seconds(since: started))")
        guard !findings.isEmpty else { return }
        let report = Self.report(findings, run: run, orders: orders)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-differential-\(settings.seed).txt")
        try? Data(report.utf8).write(to: file)
        print(report.count > 60_000 ? String(report.prefix(60_000)) + "\n… (full report in \(file.path))" : report)
        let lifecycles = Set(findings.compactMap(\.lifecycle)).count
        XCTFail("\(findings.count) disagreements in \(lifecycles) lifecycles and \(Set(findings.compactMap(\.customer)).count) customers "
                + "(seed \(settings.seed); rerun with LEDGER_DIFF_SEED=\(settings.seed); report in \(file.path)). First: "
                + Self.describe(findings[0], run: run))
    }

    // MARK: one delivery order

    func check(run: DifferentialRun, plan: [[DiffDelivery]], shuffle: Int, harness h: ServiceHarness, workers: Int) async throws -> [Finding] {
        let client = try DiffLoopbackClient(port: h.baseURL.port!)
        var findings: [Finding] = []
        var t0 = Date()

        // 1. Deliver: each unit in its planned order on one connection, units concurrently.
        let replies = await client.run(plan.map { unit in
            unit.map { DiffRequest(method: "POST", path: $0.path, body: $0.body, contentType: $0.contentType) }
        }, workers: workers)
        var stored: [String: Int] = [:]
        for (unit, answers) in zip(plan, replies) {
            for (d, a) in zip(unit, answers) {
                let msg = run.lifecycles[d.lifecycle].messages[d.message]
                if a.status != 200 {
                    findings.append(Finding(shuffle: shuffle, lifecycle: d.lifecycle, customer: nil,
                                            question: "POST \(msg.label)\(d.isRetry ? " (retry)" : "")", expected: "200",
                                            actual: "\(a.status) \(a.text.prefix(300))"))
                }
                if msg.source != "wechat" && Self.json(a.body)?["status"] as? String == "stored" {
                    stored["\(d.lifecycle)/\(d.message)", default: 0] += 1
                }
            }
        }
        let included = Set(plan.flatMap { $0.map(\.lifecycle) })
        for l in run.lifecycles where l.source != .wechat && included.contains(l.index) {
            for (m, msg) in l.messages.enumerated() where stored["\(l.index)/\(m)"] != 1 {
                findings.append(Finding(shuffle: shuffle, lifecycle: l.index, customer: nil, question: "POST \(msg.label)",
                                        expected: "answered \"stored\" exactly once (a distinct notification)",
                                        actual: "stored \(stored["\(l.index)/\(m)"] ?? 0) times (the ledger took it for a duplicate of another)"))
            }
        }
        let deliveries = plan.reduce(0) { $0 + $1.count }
        print("differential[\(shuffle)]: \(deliveries) deliveries (\(plan.reduce(0) { $0 + $1.filter(\.isRetry).count }) retries) in \(Self.seconds(since: t0))")

        // 2. Ask: live tables, ?at=now and ?at= each probe, for every subscription; entitlements for every customer.
        t0 = Date()
        let now = EpochMillis(Date().timeIntervalSince1970 * 1000)
        XCTAssertLessThan(now, run.anchor + DifferentialRun.guardAfter, "the run outlived the guard band around its anchor")
        // Only what this plan delivered is asked about (a later order delivers a share of the units).
        let lifecycles = run.lifecycles.filter { included.contains($0.index) }
        let owned = run.lifecyclesByCustomer.mapValues { $0.filter { included.contains($0.index) } }.filter { !$0.value.isEmpty }
        let customers = run.customers.filter { owned[$0] != nil }
        func subscription(_ l: DiffLifecycle, at: EpochMillis?) -> DiffRequest {
            DiffRequest(method: "GET", path: "/v1/subscriptions/\(l.originalTransactionId)?environment=\(l.environment)" + (at.map { "&at=\($0)" } ?? ""),
                        token: "app-token-for-tests-0123456789abcdef")
        }
        func entitlements(_ c: DiffCustomer, at: EpochMillis?) -> DiffRequest {
            DiffRequest(method: "GET", path: "/v1/customers/\(c.queryId)/entitlements?environment=\(c.environment)" + (at.map { "&at=\($0)" } ?? ""),
                        token: "app-token-for-tests-0123456789abcdef")
        }
        func customerProbe(_ c: DiffCustomer) -> EpochMillis? { owned[c]?.first?.probes.first }
        var asked = await client.run(
            lifecycles.map { l in [subscription(l, at: nil), subscription(l, at: now)] + l.probes.map { subscription(l, at: $0) } }
                + customers.map { c in [entitlements(c, at: nil), entitlements(c, at: now)] + (customerProbe(c).map { [entitlements(c, at: $0)] } ?? []) },
            workers: workers)
        let live = Array(asked.prefix(lifecycles.count))
        let liveGrants = Array(asked.dropFirst(lifecycles.count))
        print("differential[\(shuffle)]: \(asked.reduce(0) { $0 + $1.count }) questions in \(Self.seconds(since: t0))")

        // 2b. A lost REFUND still opens its refund case (issue 20): the later snapshot states it.
        // (Not of Sandbox twins: the generator gives a twin the same transaction ids as its
        // Production lifecycle, and a refund case is keyed by transactionId, unique at Apple.)
        let lost = lifecycles.filter { !$0.tags.contains("sandbox-twin") }.flatMap { l in l.lostRefundTransactions.map { (l.index, $0) } }
        let cases = await client.run(lost.map { [DiffRequest(method: "GET", path: "/v1/refunds/apple:\($0.1)", token: "auditor-token-for-tests-0123456789abcdef")] },
                                     workers: workers)
        for ((l, tx), answer) in zip(lost, cases) {
            let outcome = answer[0].status == 200 ? Self.json(answer[0].body)?["outcome"] as? String : nil
            if outcome != "refunded" && outcome != "declined" {
                findings.append(Finding(shuffle: shuffle, lifecycle: l, customer: nil, question: "refund case apple:\(tx) (its REFUND was lost)",
                                        expected: "200, outcome refunded (or declined by a later REFUND_DECLINED)",
                                        actual: "HTTP \(answer[0].status) \(answer[0].text.prefix(200))"))
            }
        }
        if !lost.isEmpty { print("differential[\(shuffle)]: \(lost.count) refund cases of lost REFUNDs checked") }

        // 3. Rebuild every projection from the log, then ask the live tables again.
        t0 = Date()
        let rebuild = await client.run([[DiffRequest(method: "POST", path: "/v1/admin/rebuild", body: Data("{}".utf8),
                                                     contentType: "application/json", token: "admin-token-for-tests-0123456789abcdef")]], workers: 1)[0][0]
        XCTAssertEqual(rebuild.status, 200, "rebuild: \(rebuild.text)")
        asked = await client.run(lifecycles.map { [subscription($0, at: nil)] } + customers.map { [entitlements($0, at: nil)] },
                                 workers: workers)
        let rebuilt = asked.prefix(lifecycles.count).map { $0[0] }
        let rebuiltGrants = asked.dropFirst(lifecycles.count).map { $0[0] }
        print("differential[\(shuffle)]: rebuilt and asked again in \(Self.seconds(since: t0))")

        // 3b. Apple's word (issue 20 item 2): every notification states data.status as the script's
        // world has it at its signedDate; the ledger's fold of the facts signed by then must agree.
        _ = try await h.app.store.worker.catchUp()
        let drift = await client.run([[DiffRequest(method: "GET", path: "/v1/admin/drift", token: "auditor-token-for-tests-0123456789abcdef")]], workers: 1)[0][0]
        let apple = Self.json(drift.body)?["apple"] as? [String: Any]
        for d in (apple?["disagreements"] as? [[String: Any]]) ?? [] {
            let otid = d["originalTransactionId"] as? String, env = d["environment"] as? String
            let l = lifecycles.first { $0.originalTransactionId == otid && $0.environment == env }
            findings.append(Finding(shuffle: shuffle, lifecycle: l?.index, customer: l == nil ? "\(env ?? "?")/\(otid ?? "?")" : nil,
                                    question: "Apple status of \(d["message"] as? String ?? "?") at \(Self.int64(d["signedDate"]) ?? 0)",
                                    expected: "the ledger agrees with Apple's \(d["appleStatusName"] as? String ?? "?")",
                                    actual: "the ledger says \(d["ledgerStatus"] as? String ?? "nothing")"))
        }
        print("differential[\(shuffle)]: \((apple?["checked"] as? NSNumber)?.intValue ?? 0) Apple status statements checked")

        // 4. Compare with the model.
        for (i, l) in lifecycles.enumerated() {
            let expectedNow = l.expected(at: now)
            let answers = live[i]
            var questions: [(String, EpochMillis, DiffAnswer)] = [("live", now, answers[0]), ("at=now", now, answers[1]),
                                                                  ("rebuilt", now, rebuilt[i])]
            for (p, a) in zip(l.probes, answers.dropFirst(2)) { questions.append(("at=\(p) (\(Self.iso(p)))", p, a)) }
            for (question, at, answer) in questions {
                let expected = at == now ? expectedNow : l.expected(at: at)
                let actual = Self.subscription(answer)
                if actual.state != expected || actual.error != nil {
                    findings.append(Finding(shuffle: shuffle, lifecycle: l.index, customer: nil, question: question,
                                            expected: expected?.description ?? "404 (no such subscription then)",
                                            actual: actual.error ?? actual.state?.description ?? "404"))
                }
            }
            // V1 pending crossgrades show (issue 20): the next renewal's product, now.
            if let pending = l.expectedAutoRenewProductId(at: now), answers[0].status == 200,
               let stated = Self.json(answers[0].body)?["autoRenewProductId"] as? String, stated != pending {
                findings.append(Finding(shuffle: shuffle, lifecycle: l.index, customer: nil, question: "live autoRenewProductId",
                                        expected: pending, actual: stated))
            }
        }
        for (i, c) in customers.enumerated() {
            let mine = owned[c] ?? []
            let expectedNow = DifferentialRun.grants(of: mine, at: now)
            var questions: [(String, EpochMillis, DiffAnswer)] = [("live", now, liveGrants[i][0]), ("at=now", now, liveGrants[i][1]),
                                                                  ("rebuilt", now, rebuiltGrants[i])]
            if let p = customerProbe(c), liveGrants[i].count > 2 { questions.append(("at=\(p) (\(Self.iso(p)))", p, liveGrants[i][2])) }
            for (question, at, answer) in questions {
                let expected = at == now ? expectedNow : DifferentialRun.grants(of: mine, at: at)
                let actual = Self.grants(answer)
                if actual.grants != expected || actual.error != nil {
                    findings.append(Finding(shuffle: shuffle, lifecycle: nil, customer: "\(c.environment)/\(c.queryId)",
                                            question: "entitlements \(question)",
                                            expected: expected.isEmpty ? "none" : expected.map(\.description).joined(separator: "; "),
                                            actual: actual.error ?? (actual.grants.isEmpty ? "none" : actual.grants.map(\.description).joined(separator: "; "))))
                }
            }
        }
        print("differential[\(shuffle)]: \(lifecycles.count) subscriptions, \(customers.count) customers compared; \(findings.count) disagreements")
        return findings
    }

    // MARK: answers

    static func json(_ data: Data) -> [String: Any]? { (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] }

    static func int64(_ v: Any?) -> EpochMillis? { (v as? NSNumber)?.int64Value }

    // The readings are LedgerTesting's (DiffAnswers.swift), shared with `ledger-dev soak`.
    static func subscription(_ a: DiffAnswer) -> (state: ExpectedSubscription?, error: String?) { a.subscription }

    static func grants(_ a: DiffAnswer) -> (grants: [ExpectedGrant], error: String?) { a.grants }

    // MARK: report

    static func iso(_ t: EpochMillis) -> String { DiffTime.iso(t) }

    static func seconds(since d: Date) -> String { String(format: "%.1f s", Date().timeIntervalSince(d)) }

    static func describe(_ f: Finding, run: DifferentialRun) -> String {
        let who = f.lifecycle.map { run.lifecycles[$0].label } ?? "customer \(f.customer ?? "?")"
        return "[order \(f.shuffle)] \(who) — \(f.question): expected \(f.expected); got \(f.actual)"
    }

    /// Every disagreement grouped by lifecycle, with the lifecycle's script and the order its
    /// messages were delivered in; then which shapes the failing lifecycles share.
    static func report(_ findings: [Finding], run: DifferentialRun, orders: [Int: [[DiffDelivery]]]) -> String {
        var out = "DIFFERENTIAL TEST: \(findings.count) disagreements (seed \(run.seed), anchor \(run.anchor) = \(iso(run.anchor)))\n"
        let byLifecycle = Dictionary(grouping: findings.filter { $0.lifecycle != nil }, by: { $0.lifecycle! })
        var tagFailures: [String: Int] = [:]
        for l in byLifecycle.keys { for t in run.lifecycles[l].tags { tagFailures[t, default: 0] += 1 } }
        var tagTotals: [String: Int] = [:]
        for l in run.lifecycles { for t in l.tags { tagTotals[t, default: 0] += 1 } }
        out += "failing lifecycles by shape: " + tagFailures.sorted { $0.value > $1.value }
            .map { "\($0.key) \($0.value)/\(tagTotals[$0.key] ?? 0)" }.joined(separator: ", ") + "\n"
        var bySource: [String: Int] = [:]
        for l in byLifecycle.keys { bySource[run.lifecycles[l].source.rawValue, default: 0] += 1 }
        out += "failing lifecycles by source: \(bySource.sorted { $0.key < $1.key })\n\n"
        for l in byLifecycle.keys.sorted() {
            let life = run.lifecycles[l]
            out += "=== \(life.label)\n  script:\n" + life.script.map { "    " + $0 }.joined(separator: "\n") + "\n"
            for (shuffle, fs) in Dictionary(grouping: byLifecycle[l]!, by: \.shuffle).sorted(by: { $0.key < $1.key }) {
                let unit = orders[shuffle]?.first { $0.contains { $0.lifecycle == l } } ?? []
                out += "  delivered in order \(shuffle): " + unit.filter { $0.lifecycle == l }
                    .map { "\($0.message)\($0.isRetry ? "r" : "")" }.joined(separator: " ") + "  (message numbers in script order of messages; r = retry)\n"
                for f in fs {
                    out += "  [\(f.question)]\n    expected \(f.expected)\n    actual   \(f.actual)\n"
                }
            }
            out += "  messages:\n" + life.messages.enumerated().map { "    \($0.offset): \($0.element.label)" }.joined(separator: "\n") + "\n\n"
        }
        for f in findings where f.lifecycle == nil {
            out += "=== customer \(f.customer ?? "?") [order \(f.shuffle)] \(f.question)\n    expected \(f.expected)\n    actual   \(f.actual)\n"
        }
        return out
    }
}

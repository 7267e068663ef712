import Foundation
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import Postgres
import XCTest

/// The reliability suite's and the scale run's end check "projections equal a fresh rebuild"
/// (ProjectionConsistency, issue 25 item 6) must be able to fail, and fail for the right reasons:
/// - a live projection whose checkpoint is behind the head is a finding, not something healed by a
///   catch-up pass run before the comparison (the old check ran one first);
/// - every table of schema `projections` is compared, not only subscription states and
///   transactions: a row missing from any of them is named;
/// - the trailing projections (reports, Apple status checks), which no test service's worker keeps,
///   are brought to the head and then compared — their lag is not a false finding.
final class ProjectionConsistencyTests: XCTestCase {
    func fill(_ h: ServiceHarness) async throws {
        let day: EpochMillis = 86_400_000
        let start: EpochMillis = 1_767_225_600_000
        for n in 0..<2 {
            let otid = "730000000000000\(n)"
            var steps: [(String, String?, EpochMillis)] = [("SUBSCRIBED", "INITIAL_BUY", start), ("DID_RENEW", nil, start + 30 * day)]
            if n == 1 { steps.append(("REFUND", nil, start + 35 * day)) }
            for (type, subtype, signed) in steps {
                var sample = AppleTestAuthority.sample(type: type, subtype: subtype, environment: "Production", originalTransactionId: otid,
                                                       transactionId: "\(otid)\(signed / day)", signedDate: signed, expiresDate: signed + 30 * day)
                if type == "REFUND" {
                    sample.transaction.revocationDate = AppleTime(signed)
                    sample.transaction.revocationReason = 0
                }
                sample.notification.data?.signedTransactionInfo = try h.authority.sign(sample.transaction)
                sample.notification.data?.signedRenewalInfo = try h.authority.sign(sample.renewal)
                let a = try await h.post("/v1/apple/notifications", try AppleTestAuthority.body(signedPayload: h.authority.sign(sample.notification)))
                XCTAssertEqual(a.status, 200, a.text)
            }
        }
        let side = WeChatSide()
        let signed = start + 2 * day
        try await side.push(h, WeChatSide.signing(otid: "7400000000000001", openId: "oCons", product: "vip_monthly", signed: signed, renewal: signed + 30 * day))
        try await side.push(h, WeChatSide.deliver(otid: "7400000000000001", openId: "oCons", product: "vip_monthly", order: "CONS-1",
                                                  paid: signed + 1000, create: signed + 1000, renewal: signed + 30 * day))
    }

    func count(_ h: ServiceHarness, _ table: String) throws -> Int64 {
        try h.admin.query("SELECT count(*) AS n FROM projections.\(table)", name: "rows").first!.decode(Int64.self, "n")
    }

    func testFindsWhatACatchUpWouldHealAndAMissingRowInAnyTable() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            try await fill(h)
            let conninfo = h.database.adminConninfo
            // Untouched: equal, although the trailing projections start behind the head (no worker).
            let trailingBehind = try h.admin.query("SELECT count(*) AS n FROM projection_checkpoints WHERE projection IN ('reports', 'apple_status') AND position < (SELECT position FROM event_head)", name: "trailing").first!.decode(Int64.self, "n")
            XCTAssertGreaterThan(trailingBehind, 0, "the set-up should leave a trailing projection behind")
            let clean = try await ProjectionConsistency.compareWithRebuild(conninfo: conninfo, trailingWait: .zero)
            XCTAssertNil(clean)
            XCTAssertGreaterThan(try count(h, "report_daily"), 0, "the trailing reports were brought to the head and compared")

            // A live checkpoint behind the head: a catch-up pass would refold and hide it.
            try h.admin.query("UPDATE projection_checkpoints SET position = position - 1 WHERE projection = 'entitlements'", name: "lag")
            let lag = try await ProjectionConsistency.compareWithRebuild(conninfo: conninfo, trailingWait: .zero)
            XCTAssertTrue(lag?.contains("live projection entitlements at") ?? false, lag ?? "nil: a lagging live checkpoint went unnoticed")

            // A row missing from each of the tables the old check never read (one per kind of
            // projection, the trailing ones included): each is named.
            let tables = ["refund_cases", "wechat_contracts", "customer_subscriptions", "report_daily", "apple_status_checks"]
            for table in tables {
                XCTAssertGreaterThan(try count(h, table), 0, "\(table) holds nothing to lose")
                try h.admin.query("DELETE FROM projections.\(table) WHERE ctid = (SELECT min(ctid) FROM projections.\(table))", name: "lose a row")
            }
            let finding = try await ProjectionConsistency.compareWithRebuild(conninfo: conninfo, trailingWait: .zero)
            for table in tables {
                XCTAssertTrue(finding?.contains("projections.\(table):") ?? false, "\(table): \(finding ?? "nil: a missing row went unnoticed")")
            }
            // The rebuild inside the check restored them: clean again.
            let again = try await ProjectionConsistency.compareWithRebuild(conninfo: conninfo, trailingWait: .zero)
            XCTAssertNil(again)
        }
    }

    /// Found by `ledger-dev soak --subscribers 50 --kills 0 --database-faults 0 --workers 1`: the
    /// live refund-case projection indexed each WeChat case under every order id a batch reached,
    /// so a customer's two orders refolded together tied each case to the other's ids, and a later
    /// refold of the other order deleted the case for good — live != rebuild. The same generated
    /// lifecycles, delivered in the same order, must now leave every table equal to a rebuild.
    func testGeneratedWeChatOrdersLeaveRefundCasesEqualToARebuild() async throws {
        let authority = try AppleTestAuthority.mint()
        let anchor = EpochMillis(Date().timeIntervalSince1970) * 1000
        let run = try DifferentialRun.generate(seed: 20_261_202, anchor: anchor, appleCount: 40, wechatCount: 10, authority: authority)
        try await withService(authority: authority, environment: DifferentialRun.serviceEnvironment) { h in
            let client = try DiffLoopbackClient(port: h.baseURL.port!)
            let plan = run.plan(shuffle: 2)
            let answers = await client.run(plan.map { unit in
                unit.map { DiffRequest(method: "POST", path: $0.path, body: $0.body, contentType: $0.contentType) }
            }, workers: 1)
            XCTAssertEqual(answers.flatMap { $0 }.filter { $0.status != 200 }.map { "\($0.status) \($0.text.prefix(120))" }, [])
            XCTAssertGreaterThan(try count(h, "refund_cases"), 0)
            let difference = try await ProjectionConsistency.compareWithRebuild(conninfo: h.database.adminConninfo, trailingWait: .zero)
            XCTAssertNil(difference)
        }
    }
}

import AppStore
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import XCTest

/// The refund-case projection follows what reconciliation learns from Apple's API: a refund whose
/// notification was lost (the API states the revocation) opens a case, a lost reversal joins the
/// refunded transaction's case, and an API answer restating "not revoked" for a transaction without
/// a case opens nothing — live, through the worker, in a rebuild and in an export at an earlier
/// position, always equal to the fold of every fact.
extension ReconciliationTests {
    func testTheRefundCaseProjectionFollowsRefundsAndReversalsStatedByTheAPI() async throws {
        try await withReconciliation { h, fake in
            let t0 = F.now - 10 * day
            // A: refunded (notification stored), the reversal lost. B: refunded, the notification lost.
            // C: never refunded (its status answer restates "not revoked").
            let a = "1000000000000901", b = "1000000000000902", c = "1000000000000903"
            for otid in [a, b, c] {
                fake.setSubscription(FakeAppStoreServer.Subscription(
                    originalTransactionId: otid,
                    transactions: [F.transaction(otid, otid: otid, purchase: t0, expires: t0 + 30 * day, token: "aaaaaaaa-0000-4000-8000-\(otid.suffix(12))")],
                    renewal: F.renewal(otid: otid, renews: t0 + 30 * day)))
                try await F.deliver(h, try fake.notify("SUBSCRIBED", subtype: "INITIAL_BUY", about: otid, date: t0))
            }
            var subA = FakeAppStoreServer.Subscription(
                originalTransactionId: a, transactions: [F.transaction(a, otid: a, purchase: t0, expires: t0 + 30 * day, revoked: t0 + 2 * day)],
                renewal: F.renewal(otid: a, renews: t0 + 30 * day))
            subA.status = 5
            fake.setSubscription(subA)
            try await F.deliver(h, try fake.notify("REFUND", about: a, date: t0 + 2 * day))
            subA.transactions[0] = F.transaction(a, otid: a, purchase: t0, expires: t0 + 30 * day)
            subA.status = 1
            fake.setSubscription(subA)
            _ = try fake.notify("REFUND_REVERSED", about: a, date: t0 + 3 * day, failed: true)
            var subB = FakeAppStoreServer.Subscription(
                originalTransactionId: b, transactions: [F.transaction(b, otid: b, purchase: t0, expires: t0 + 30 * day, revoked: t0 + 2 * day)],
                renewal: F.renewal(otid: b, renews: t0 + 30 * day))
            subB.status = 5
            fake.setSubscription(subB)
            _ = try fake.notify("REFUND", about: b, date: t0 + 2 * day, failed: true)

            let before = try await listedCases(h)
            XCTAssertEqual(before.map(\.id), ["apple:\(a)"], "only A's refund reached the ledger")
            let position = try h.eventCount()

            _ = try await reconciliation(h).run(ReconcileRequest(since: t0 + 4 * day, environments: ["Sandbox"], all: true))
            let after = try await listedCases(h)
            XCTAssertEqual(after.map(\.id).sorted(), ["apple:\(a)", "apple:\(b)"], "B opened by the API's revocation; C has no case")
            XCTAssertEqual(after.first { $0.id == "apple:\(a)" }?.outcome, "reversed", "A's lost reversal joined its case")
            XCTAssertEqual(after.first { $0.id == "apple:\(b)" }?.outcome, "refunded")
            let fold = RefundCaseFold.cases(from: try await h.app.store.refunds.allCaseFacts())
                .sorted { RefundCaseQueriesOrder.precedes($0, $1) }.map { String(decoding: (try! Representation.encoded($0)).canonicalJSON(), as: UTF8.self) }
            let live = try await listedRaw(h)
            XCTAssertEqual(live, fold, "the live projection is the fold of every fact")

            // The export as it was before the run: A refunded, no B.
            let old = try await h.request("GET", "/v1/refunds?asOfPosition=\(position)", token: "auditor-token-for-tests-0123456789abcdef")
            let oldCases = (old.json["cases"] as? [[String: Any]]) ?? []
            XCTAssertEqual(oldCases.map { $0["caseId"] as? String }, ["apple:\(a)"])
            XCTAssertEqual(oldCases.first?["outcome"] as? String, "refunded")

            // Through the worker from scratch, and a rebuild: the same cases.
            _ = try h.admin.query("DELETE FROM projections.refund_cases", name: "wreck")
            _ = try h.admin.query("UPDATE projection_checkpoints SET position = 0 WHERE projection = 'refund_cases'", name: "rewind")
            _ = try await h.app.store.worker.catchUp()
            let caughtUp = try await listedRaw(h)
            XCTAssertEqual(caughtUp, fold)
            let rebuild = try await h.request("POST", "/v1/admin/rebuild", body: Data(#"{"projection":"refund_cases"}"#.utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(rebuild.status, 200, rebuild.text)
            let rebuilt = try await listedRaw(h)
            XCTAssertEqual(rebuilt, fold)
        }
    }

    func listedCases(_ h: ServiceHarness) async throws -> [(id: String, outcome: String?)] {
        let list = try await h.request("GET", "/v1/refunds?source=apple", token: "auditor-token-for-tests-0123456789abcdef")
        XCTAssertEqual(list.status, 200, list.text)
        return ((list.json["cases"] as? [[String: Any]]) ?? []).map { ($0["caseId"] as? String ?? "", $0["outcome"] as? String) }
    }

    func listedRaw(_ h: ServiceHarness) async throws -> [String] {
        let a = try await h.request("GET", "/v1/refunds", token: "auditor-token-for-tests-0123456789abcdef")
        guard case .array(let cases)? = try JSONValue(json: a.body)["cases"] else { XCTFail(a.text); return [] }
        return cases.map { String(decoding: $0.canonicalJSON(), as: UTF8.self) }
    }
}

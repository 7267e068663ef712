import Foundation
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import XCTest

/// Refund cases as a projection: the list equals the fold of the facts, pages tile it with a
/// cursor, an export names its position and `?asOfPosition=` reproduces it byte for byte after
/// more appends, and the projection survives a wreck through the worker and a rebuild.
final class RefundExportTests: XCTestCase {
    let wx = WeChatTestSender()
    static let hostileOrder = "<img src=x onerror=alert(1)>&\"'"

    func apple(_ h: ServiceHarness, type: String, tx: String, otid: String, at: EpochMillis, refunded: Bool = false) async throws {
        var s = AppleTestAuthority.sample(type: type, subtype: nil, originalTransactionId: otid, transactionId: tx, signedDate: at)
        if type == "CONSUMPTION_REQUEST" { s.notification.data?.consumptionRequestReason = "UNINTENDED_PURCHASE" }
        if refunded {
            s.transaction.revocationDate = AppleTime(at - 1000)
            s.transaction.revocationReason = 0
        }
        let a = try await h.post("/v1/apple/notifications", try h.authority.signSample(s))
        XCTAssertEqual(a.status, 200, a.text)
    }

    func populate(_ h: ServiceHarness) async throws {
        try await wx.push(h, [
            wx.deliver(order: "ORDER-1", otid: "2000001147426510"),
            wx.inquiry(order: "ORDER-1"),
            wx.refundNotify(order: "ORDER-1", wxOrder: "WX-1", at: 1775400000),
            wx.refundNotify(order: "ORDER-UNASKED", wxOrder: "WX-U", at: 1775400100),
            wx.inquiry(order: "ORDER-LATE", refundTime: "1775300500"),
            wx.deliver(order: "ORDER-LATE", otid: "2000001147426511", openId: "oUser2"),
            wx.inquiry(order: Self.hostileOrder, refundTime: "1775300600", reason: "\"><script>alert(1)</script>"),
        ])
        try await apple(h, type: "CONSUMPTION_REQUEST", tx: "7200000000000001", otid: "7200000000000001", at: 1_767_225_600_000)
        try await apple(h, type: "REFUND", tx: "7200000000000001", otid: "7200000000000001", at: 1_767_225_700_000, refunded: true)
    }

    /// The cases as `RefundCaseFold` gives them from every fact (the on-request fold of before).
    func folded(_ h: ServiceHarness) async throws -> [String] {
        RefundCaseFold.cases(from: try await h.app.store.refunds.allCaseFacts())
            .sorted { RefundCaseQueriesOrder.precedes($0, $1) }
            .map { String(decoding: (try! Representation.encoded($0)).canonicalJSON(), as: UTF8.self) }
    }

    func listed(_ h: ServiceHarness, _ query: String = "") async throws -> [String] {
        let a = try await h.request("GET", "/v1/refunds" + query, token: "auditor-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        let value = try JSONValue(json: a.body)
        guard case .array(let cases)? = value["cases"] else { XCTFail("no cases: \(a.text)"); return [] }
        return cases.map { String(decoding: $0.canonicalJSON(), as: UTF8.self) }
    }

    func testTheProjectionEqualsTheFoldAndExportsReproduceAtTheirPosition() async throws {
        try await withService(environment: WeChatTestSender.environment) { h in
            try await populate(h)
            let fold = try await folded(h)
            XCTAssertEqual(fold.count, 5, "ORDER-1, the unasked refund, ORDER-LATE, the hostile order, one Apple transaction")
            let list = try await listed(h)
            XCTAssertEqual(list, fold, "the projection holds exactly the fold of the facts")

            // Exports state where they were taken.
            let csv1 = try await h.request("GET", "/v1/refunds?format=csv", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(csv1.status, 200, csv1.text)
            let position = try XCTUnwrap(csv1.headers["ledger-position"].flatMap { Int64($0) })
            XCTAssertEqual(position, try h.eventCount())
            let head = try await h.app.store.chain.head()
            XCTAssertEqual(csv1.headers["ledger-chain-hash"], head.hex)
            XCTAssertEqual(csv1.headers["ledger-fact-schema-version"], String(FactDecoder.schemaVersion))
            XCTAssertEqual(csv1.headers["ledger-catalog-digest"], CatalogRecord.digest(h.app.catalog))
            XCTAssertTrue(csv1.text.hasPrefix("# ledger refund export; position=\(position); chain_hash=\(head.hex); fact_schema_version=\(FactDecoder.schemaVersion); catalog_digest="), csv1.text)
            let json1 = try await h.request("GET", "/v1/refunds", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual((json1.json["export"] as? [String: Any])?["position"] as? Int64, position)

            // More happens: a second asking, a refund that fails, another Apple refund.
            try await wx.push(h, [wx.inquiry(order: "ORDER-1", refundTime: "1775300100"),
                                  wx.refundNotify(order: "ORDER-LATE", wxOrder: "WX-L", at: 1775400200, ok: false, openId: "oUser2")])
            try await apple(h, type: "REFUND", tx: "7200000000000002", otid: "7200000000000002", at: 1_767_225_800_000, refunded: true)
            let now = try await h.request("GET", "/v1/refunds?format=csv", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertNotEqual(now.body, csv1.body)
            let (afterList, afterFold) = (try await listed(h), try await folded(h))
            XCTAssertEqual(afterList, afterFold, "the live hook kept the projection equal to the fold")

            // The old export, byte for byte, from the facts up to its position.
            let csv2 = try await h.request("GET", "/v1/refunds?format=csv&asOfPosition=\(position)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(csv2.status, 200, csv2.text)
            XCTAssertEqual(csv2.body, csv1.body, "CSV at asOfPosition=\(position)")
            XCTAssertEqual(csv2.headers["ledger-chain-hash"], csv1.headers["ledger-chain-hash"])
            let json2 = try await h.request("GET", "/v1/refunds?asOfPosition=\(position)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(json2.body, json1.body, "JSON at asOfPosition=\(position)")
            let filtered1 = try await h.request("GET", "/v1/refunds?format=csv&source=wechat&asOfPosition=\(position)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(filtered1.text.components(separatedBy: "\r\n").filter { $0.hasPrefix("wechat:") || $0.hasPrefix("\"wechat:") }.count, 4)

            // Pages tile the list, now and at the old position.
            for suffix in ["", "&asOfPosition=\(position)"] {
                let whole = try await listed(h, "?x=1" + suffix)
                var paged: [String] = []
                var cursor: String?
                repeat {
                    let a = try await h.request("GET", "/v1/refunds?limit=2" + suffix + (cursor.map { "&cursor=\($0)" } ?? ""), token: "auditor-token-for-tests-0123456789abcdef")
                    XCTAssertEqual(a.status, 200, a.text)
                    let value = try JSONValue(json: a.body)
                    guard case .array(let cases)? = value["cases"] else { return XCTFail(a.text) }
                    XCTAssertLessThanOrEqual(cases.count, 2)
                    paged += cases.map { String(decoding: $0.canonicalJSON(), as: UTF8.self) }
                    cursor = a.json["nextCursor"] as? String
                } while cursor != nil && paged.count < 50
                XCTAssertEqual(paged, whole, "pages\(suffix)")
            }

            // Refusals say what to do.
            for bad in ["cursor=garbage!&limit=2", "cursor=\(RefundCaseCursor(openedAt: 1, caseId: "x").text)", "limit=0", "limit=1001",
                        "asOfPosition=-1", "asOfPosition=99999999", "asOfPosition=abc", "format=xml"] {
                let a = try await h.request("GET", "/v1/refunds?" + bad, token: "auditor-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 400, "\(bad): \(a.text)")
                XCTAssertEqual(a.errorCode, "invalid_parameter", bad)
            }
        }
    }

    func testTheProjectionRecoversThroughTheWorkerAndARebuild() async throws {
        try await withService(environment: WeChatTestSender.environment) { h in
            try await populate(h)
            let expected = try await listed(h)
            // Wrecked and rewound: the catch-up worker folds it again from its checkpoint.
            _ = try h.admin.query("DELETE FROM projections.refund_cases", name: "wreck")
            _ = try h.admin.query("DELETE FROM projections.refund_case_orders", name: "wreck")
            _ = try h.admin.query("UPDATE projection_checkpoints SET position = 0 WHERE projection = 'refund_cases'", name: "rewind")
            let emptied = try await listed(h)
            XCTAssertEqual(emptied, [])
            let passes = try await h.app.store.worker.catchUp()
            XCTAssertTrue(passes.contains { $0.projection == .refundCases }, "\(passes)")
            let relisted = try await listed(h)
            XCTAssertEqual(relisted, expected)
            // Wrecked again: a rebuild of only this projection restores it and sets its checkpoint.
            _ = try h.admin.query("UPDATE projections.refund_cases SET outcome = 'bogus', body = '{}'", name: "wreck")
            let rebuild = try await h.request("POST", "/v1/admin/rebuild", body: Data(#"{"projection":"refund_cases"}"#.utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(rebuild.status, 200, rebuild.text)
            XCTAssertEqual(rebuild.json["projections"] as? [String], ["refund_cases"])
            let rebuilt = try await listed(h)
            XCTAssertEqual(rebuilt, expected)
            let status = try await h.app.store.projectionStatuses().first { $0.name == "refund_cases" }
            XCTAssertEqual(status?.position, try h.eventCount() - 0, "the rebuild's own admin event is folded too")
            XCTAssertEqual(status?.lag, 0)
            // A rebuild of everything includes it.
            let all = try await h.request("POST", "/v1/admin/rebuild", body: Data("{}".utf8), token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(all.status, 200, all.text)
            XCTAssertEqual(all.json["projections"] as? [String],
                           ["apple_status", "entitlements", "refund_cases", "reports", "subscriptions", "transactions", "webhooks", "wechat_contracts"])
            let rebuiltAll = try await listed(h)
            XCTAssertEqual(rebuiltAll, expected)
        }
    }
}

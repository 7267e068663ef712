import AppStore
import Foundation
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerStore
import LedgerTesting
import Postgres
import XCTest

/// CONSUMPTION_REQUEST answered from ledger facts through the durable outbox, consent, and legacy
/// receipts — through HTTP, the fake App Store Server API and verifyReceipt on loopback.
final class ConsumptionAndReceiptTests: XCTestCase {
    typealias F = ReconciliationFixtures
    let day = ReconciliationFixtures.day

    /// A monthly subscription of `token` in its second period, delivered to the webhook, and a
    /// CONSUMPTION_REQUEST about its current transaction delivered too. Returns that transaction's id.
    @discardableResult
    func subscriptionWithConsumptionRequest(_ h: ServiceHarness, _ fake: FakeAppStoreServer, otid: String, token: String?) async throws -> String {
        let t0 = F.now - 40 * day
        var sub = F.renewedMonthly(otid: otid, token: token ?? "", t0: t0)
        if token == nil { for i in sub.transactions.indices { sub.transactions[i].appAccountToken = nil } }
        fake.setSubscription(sub)
        try await F.deliver(h, try fake.notify("SUBSCRIBED", about: otid, date: t0, transactionId: otid))
        try await F.deliver(h, try fake.notify("DID_RENEW", about: otid, date: t0 + 30 * day))
        let renewal = F.next(otid, 1)
        try await F.deliver(h, try fake.notify("CONSUMPTION_REQUEST", about: otid, date: F.now - 60_000, transactionId: renewal,
                                               consumptionRequestReason: "UNINTENDED_PURCHASE"))
        return renewal
    }

    func consent(_ h: ServiceHarness, _ customer: String, _ yes: Bool) async throws {
        let a = try await h.request("POST", "/v1/customers/\(customer)/consent", body: Data(#"{"consented": \#(yes)}"#.utf8), token: "app-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        XCTAssertEqual(a.json["consented"] as? Bool, yes)
    }

    func answers(_ h: ServiceHarness) throws -> [(type: String, payload: [String: Any])] {
        try h.admin.query("SELECT type, payload::text AS p FROM events WHERE type LIKE 'consumption/%' ORDER BY position", name: "answers")
            .rows.map { (try $0.decode(String.self, "type"),
                         (try JSONSerialization.jsonObject(with: Data(try $0.decode(String.self, "p").utf8)) as? [String: Any]) ?? [:]) }
    }

    // MARK: - Sent

    func testWithConsentTheConsumptionInformationBuiltFromFactsIsSentOnceAndJoinsTheRefundCase() async throws {
        try await withReconciliation(environment: ["LEDGER_APPLE_REFUND_PREFERENCE": "usage:10:50:DECLINE"]) { h, fake in
            let token = "aaaaaaaa-0000-4000-8000-000000000901"
            try await consent(h, token.uppercased(), true)   // the app's UUID spelling; Apple's is lowercase
            let tx = try await subscriptionWithConsumptionRequest(h, fake, otid: "1000000000000901", token: token)
            // In the outbox from the transaction that stored the notification, before any pass.
            let queued = try await h.app.store.reconciliation.consumptionOutbox()
            XCTAssertEqual(queued.map(\.status), ["pending"])
            XCTAssertEqual(queued.first?.transactionId, tx)
            let pass = try await h.app.appleAPI.consumption.pass()
            XCTAssertEqual(pass.answered, 1)
            let sent = try XCTUnwrap(fake.consumptionRequests.first)
            XCTAssertEqual(fake.consumptionRequests.count, 1)
            XCTAssertEqual(sent.transactionId, tx)
            let body = try XCTUnwrap(try JSONSerialization.jsonObject(with: sent.body) as? [String: Any])
            XCTAssertEqual(body["customerConsented"] as? Bool, true)
            XCTAssertEqual(body["deliveryStatus"] as? String, "DELIVERED", "the product grants premium and it was entitled")
            XCTAssertNil(body["consumptionPercentage"], "never for an auto-renewable subscription")
            XCTAssertEqual(body["sampleContentProvided"] as? Bool, false, "no free trial")
            // 10 of 30 days used: between 10% and 50% → GRANT_PRORATED (configured policy).
            XCTAssertEqual(body["refundPreference"] as? String, "GRANT_PRORATED")
            XCTAssertEqual(fake.refusals, [])

            let recorded = try answers(h)
            XCTAssertEqual(recorded.map(\.type), [LedgerEventType.consumptionSent])
            let payload = try XCTUnwrap(recorded.first?.payload)
            XCTAssertEqual((payload["answer"] as? [String: Any])?["httpStatus"] as? Int, 202)
            XCTAssertEqual((payload["request"] as? [String: Any])?["deliveryStatus"] as? String, "DELIVERED")
            let basis = try XCTUnwrap(payload["basis"] as? [String: Any])
            XCTAssertEqual(basis["entitlements"] as? [String], ["premium"])
            XCTAssertTrue((basis["refundPreference"] as? String ?? "").contains("GRANT_PRORATED"), "\(basis)")

            // A second pass (or another instance) sends nothing more.
            let again = try await h.app.appleAPI.consumption.pass()
            XCTAssertEqual(again, ConsumptionResponder.PassResult())
            XCTAssertEqual(fake.consumptionRequests.count, 1)

            // The auditor's refund case holds the request and the ledger's answer.
            let c = try await h.request("GET", "/v1/refunds/apple:\(tx)", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(c.status, 200, c.text)
            XCTAssertEqual(c.json["reason"] as? String, "UNINTENDED_PURCHASE")
            let entry = try XCTUnwrap((c.json["consumptionAnswers"] as? [[String: Any]])?.first)
            XCTAssertEqual(entry["outcome"] as? String, "sent")
            XCTAssertTrue((entry["request"] as? String ?? "").contains("\"refundPreference\":\"GRANT_PRORATED\""), "\(entry)")
            XCTAssertTrue((entry["answer"] as? String ?? "").contains("202"))
            let list = try await h.request("GET", "/v1/refunds?source=apple", token: "auditor-token-for-tests-0123456789abcdef")
            let cases = try XCTUnwrap(list.json["cases"] as? [[String: Any]])
            XCTAssertEqual(cases.count, 1)
            XCTAssertEqual((cases.first?["consumptionAnswers"] as? [Any])?.count, 1)
            let events = (c.json["events"] as? [[String: Any]] ?? []).compactMap { $0["type"] as? String }
            XCTAssertEqual(events, ["CONSUMPTION_REQUEST", LedgerEventType.consumptionSent], "the evidence trail has both")
        }
    }

    // MARK: - Not sent, and why

    func testWithoutConsentOrCustomerNothingIsSentAndTheReasonIsRecorded() async throws {
        try await withReconciliation { h, fake in
            let token = "aaaaaaaa-0000-4000-8000-000000001001"
            try await subscriptionWithConsumptionRequest(h, fake, otid: "1000000000001001", token: token)
            // Consent given, then withdrawn: the latest is in force.
            try await consent(h, token, true)
            try await consent(h, token, false)
            try await subscriptionWithConsumptionRequest(h, fake, otid: "1000000000001101", token: nil)
            let pass = try await h.app.appleAPI.consumption.pass()
            XCTAssertEqual(pass.answered, 2)
            XCTAssertEqual(fake.consumptionRequests.count, 0, "nothing reached Apple")
            let recorded = try answers(h)
            XCTAssertEqual(recorded.map(\.type), [LedgerEventType.consumptionNotSent, LedgerEventType.consumptionNotSent])
            XCTAssertEqual(Set(recorded.compactMap { $0.payload["reason"] as? String }), ["no_consent", "no_customer"])
            XCTAssertTrue(recorded.allSatisfy { $0.payload["request"] == nil }, "nothing was built to send")
            let withdrawn = try XCTUnwrap(recorded.first { $0.payload["reason"] as? String == "no_consent" })
            XCTAssertTrue((withdrawn.payload["message"] as? String ?? "").contains("withdrew"))
            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
            XCTAssertTrue(metrics.contains(#"ledger_consumption_answers_total{outcome="not_sent",reason="no_consent"} 1"#), metrics)
            XCTAssertTrue(metrics.contains(#"ledger_outbox_items{consumer="apple.consumption",status="done"} 2"#), metrics)
            XCTAssertTrue(metrics.contains(#"ledger_outbox_items{consumer="apple.consumption",status="pending"} 0"#), metrics)
        }
    }

    /// Issue 20 rule 6: Apple refuses consumption information for a family member's transaction
    /// (FamilyTransactionNotSupportedError, App Store Server API "Error codes"; inAppOwnershipType
    /// FAMILY_SHARED: "the transaction belongs to a family member who benefits from the service").
    /// Nothing is sent (no 12 hours of retries); the answer records why.
    func testAFamilySharedTransactionGetsNoConsumptionAnswerAndTheReasonIsRecorded() async throws {
        try await withReconciliation { h, fake in
            let token = "aaaaaaaa-0000-4000-8000-000000001051"
            let otid = "1000000000001051"
            try await consent(h, token, true)
            let t0 = F.now - 40 * day
            var sub = F.renewedMonthly(otid: otid, token: token, t0: t0)
            for i in sub.transactions.indices { sub.transactions[i].inAppOwnershipType = "FAMILY_SHARED" }
            fake.setSubscription(sub)
            try await F.deliver(h, try fake.notify("SUBSCRIBED", about: otid, date: t0, transactionId: otid))
            try await F.deliver(h, try fake.notify("DID_RENEW", about: otid, date: t0 + 30 * day))
            try await F.deliver(h, try fake.notify("CONSUMPTION_REQUEST", about: otid, date: F.now - 60_000, transactionId: F.next(otid, 1),
                                                   consumptionRequestReason: "UNINTENDED_PURCHASE"))
            let pass = try await h.app.appleAPI.consumption.pass()
            XCTAssertEqual(pass.answered, 1)
            XCTAssertEqual(fake.consumptionRequests.count, 0, "nothing reached Apple")
            let recorded = try answers(h)
            XCTAssertEqual(recorded.map(\.type), [LedgerEventType.consumptionNotSent])
            XCTAssertEqual(recorded.first?.payload["reason"] as? String, "family_shared")
            XCTAssertTrue((recorded.first?.payload["message"] as? String ?? "").contains("FAMILY_SHARED"))
            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
            XCTAssertTrue(metrics.contains(#"ledger_consumption_answers_total{outcome="not_sent",reason="family_shared"} 1"#), metrics)
        }
    }

    func testWithoutAPICredentialsTheRequestIsAnsweredWithWhyNothingWasSent() async throws {
        let authority = try AppleTestAuthority.mint()
        let api = try AppleAPIFixture(authority: authority)
        try await withService(authority: authority) { h in
            let token = "aaaaaaaa-0000-4000-8000-000000001201"
            try await consent(h, token, true)
            try await subscriptionWithConsumptionRequest(h, api.fake, otid: "1000000000001201", token: token)
            XCTAssertNil(h.app.appleAPI.reconciliation)
            let pass = try await h.app.appleAPI.consumption.pass()
            XCTAssertEqual(pass.answered, 1)
            let recorded = try answers(h)
            XCTAssertEqual(recorded.first?.payload["reason"] as? String, "no_credentials")
            XCTAssertTrue((recorded.first?.payload["message"] as? String ?? "").contains("LEDGER_APPLE_API_KEY_ID"))
            XCTAssertEqual(api.fake.consumptionRequests.count, 0)
        }
        await api.stop()
    }

    func testAppleRefusingTheInformationIsRecordedAndTemporaryFailuresAreRetriedUntilTheWindowCloses() async throws {
        try await withReconciliation { h, fake in
            let token = "aaaaaaaa-0000-4000-8000-000000001301"
            try await consent(h, token, true)
            try await subscriptionWithConsumptionRequest(h, fake, otid: "1000000000001301", token: token)
            // A 503 twice (the client's own attempts): retried later, not answered yet.
            fake.enqueueFailure(FakeAppStoreServer.Failure(status: 503, errorCode: 5_000_001), endpoint: .consumption, times: 2)
            var pass = try await h.app.appleAPI.consumption.pass()
            XCTAssertEqual(pass.retrying, 1)
            XCTAssertEqual(try answers(h).count, 0)
            let outbox = try await h.app.store.reconciliation.consumptionOutbox()
            let row = try XCTUnwrap(outbox.first)
            XCTAssertEqual(row.status, "pending")
            XCTAssertEqual(row.attempts, 1)
            XCTAssertGreaterThan(row.nextAttemptAt, F.now, "backoff: not due at once")
            XCTAssertTrue(row.lastError?.contains("5000001") ?? false, "\(row)")
            // Due again: Apple refuses (a final 400): refused, with Apple's answer on record.
            _ = try h.admin.query("UPDATE outbox_items SET next_attempt_at = 0 WHERE consumer = 'apple.consumption'", name: "due now")
            fake.enqueueFailure(FakeAppStoreServer.Failure(status: 400, errorCode: 4_000_036), endpoint: .consumption)
            pass = try await h.app.appleAPI.consumption.pass()
            XCTAssertEqual(pass.answered, 1)
            let refused = try XCTUnwrap(try answers(h).first)
            XCTAssertEqual(refused.type, LedgerEventType.consumptionRefused)
            XCTAssertEqual((refused.payload["answer"] as? [String: Any])?["errorCode"] as? Int, 4_000_036)
            XCTAssertEqual(refused.payload["attempts"] as? Int, 2)
            // A request whose window closed while it waited: not sent, window_expired.
            try await subscriptionWithConsumptionRequest(h, fake, otid: "1000000000001401", token: token)
            _ = try await h.app.store.reconciliation.enqueueConsumptionRequests(signedSince: 0, now: F.now)
            _ = try h.admin.query("UPDATE outbox_items SET payload = jsonb_set(payload, '{deadline}', '1'), next_attempt_at = 0 WHERE consumer = 'apple.consumption' AND status = 'pending'", name: "expire")
            _ = try await h.app.appleAPI.consumption.pass()
            XCTAssertEqual(try answers(h).last?.payload["reason"] as? String, "window_expired")
            XCTAssertEqual(fake.consumptionRequests.count, 0)
        }
    }

    // MARK: - The outbox survives a restart

    /// Instance A stores two consumption requests: one it never got to (stopped before its sender
    /// ran), one whose attempt failed. A stops; B starts on the same database and answers both,
    /// each sent exactly once.
    func testThePendingRequestsSurviveARestartAndAreSentOnce() async throws {
        let authority = try AppleTestAuthority.mint()
        let api = try AppleAPIFixture(authority: authority)
        let fake = api.fake
        let database = try TestDatabase.create()
        let rootFile = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-root-\(UUID().uuidString).pem")
        try Data(authority.root.pem.utf8).write(to: rootFile)
        let t0 = F.now - 40 * day
        let token = "aaaaaaaa-0000-4000-8000-000000001501"
        for otid in ["1000000000001501", "1000000000001601"] {
            fake.setSubscription(F.renewedMonthly(otid: otid, token: token, t0: t0))
        }

        let a = try ServiceInstance(database: database, rootFile: rootFile, environment: api.environment)
        var (status, _) = try await a.post("/v1/customers/\(token)/consent", Data(#"{"consented": true}"#.utf8))
        XCTAssertEqual(status, 200)
        for otid in ["1000000000001501", "1000000000001601"] {
            for body in [try fake.notify("SUBSCRIBED", about: otid, date: t0, transactionId: otid), try fake.notify("DID_RENEW", about: otid, date: t0 + 30 * day)] {
                (status, _) = try await a.post("/v1/apple/notifications", body)
                XCTAssertEqual(status, 200)
            }
        }
        (status, _) = try await a.post("/v1/apple/notifications", try fake.notify(
            "CONSUMPTION_REQUEST", about: "1000000000001501", date: F.now - 60_000, consumptionRequestReason: "OTHER"))
        XCTAssertEqual(status, 200)
        // A's sender tries the first request; Apple fails twice (a 5xx): it stays pending.
        fake.enqueueFailure(FakeAppStoreServer.Failure(status: 500, errorCode: 5_000_000), endpoint: .consumption, times: 2)
        let first = try await a.app.appleAPI.consumption.pass()
        XCTAssertEqual(first.retrying, 1)
        // The second request arrives; A stops before its sender runs again.
        (status, _) = try await a.post("/v1/apple/notifications", try fake.notify(
            "CONSUMPTION_REQUEST", about: "1000000000001601", date: F.now - 30_000, consumptionRequestReason: "OTHER"))
        XCTAssertEqual(status, 200)
        await a.stop()
        XCTAssertEqual(fake.consumptionRequests.count, 0)

        let admin = try database.connect()
        _ = try admin.query("UPDATE outbox_items SET next_attempt_at = 0 WHERE consumer = 'apple.consumption'", name: "backoff over")
        let b = try ServiceInstance(database: database, rootFile: rootFile, environment: api.environment)
        // B's sender service runs as `ledger serve` runs it, until both are answered.
        let service = ConsumptionSenderService(responder: b.app.appleAPI.consumption, interval: .milliseconds(50), log: Log(minimum: .error))
        let running = Task { try await service.run() }
        for _ in 0..<100 where fake.consumptionRequests.count < 2 { try await Task.sleep(for: .milliseconds(50)) }
        try await Task.sleep(for: .milliseconds(300))   // more passes: still once each
        await service.shutdown()
        _ = try await running.value
        XCTAssertEqual(fake.consumptionRequests.map(\.transactionId).sorted(), ["1000000000001502", "1000000000001602"], "each sent exactly once")
        let sent = try admin.query("SELECT stream_id FROM events WHERE type = $1 ORDER BY stream_id", [.text(LedgerEventType.consumptionSent)],
                                   name: "sent").rows.map { try $0.decode(String.self, "stream_id") }
        XCTAssertEqual(sent, ["1000000000001501", "1000000000001601"])
        XCTAssertEqual(try admin.query("SELECT count(*) AS n FROM outbox_items WHERE consumer = 'apple.consumption' AND status = 'pending'", name: "pending")
            .first!.decode(Int64.self, "n"), 0)
        await b.stop()
        await api.stop()
        try? FileManager.default.removeItem(at: rootFile)
        try database.drop()
    }

    // MARK: - Consent route

    func testConsentIsRecordedAsAnEventAndHostileBodiesAreRefused() async throws {
        try await withService { h in
            let awaited1 = try await h.request("POST", "/v1/customers/c-1/consent", body: Data(#"{"consented": true}"#.utf8)).status
            XCTAssertEqual(awaited1, 401)
            for bad in [#"{"consented": "yes"}"#, #"{"consented": 1}"#, #"{}"#, #"[true]"#, "not json", ""] {
                let a = try await h.request("POST", "/v1/customers/c-1/consent", body: Data(bad.utf8), token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(a.status, 400, "\(bad): \(a.text)")
                XCTAssertNotNil(a.errorCode)
            }
            let long = String(repeating: "x", count: 300)
            let awaited2 = try await h.request("POST", "/v1/customers/\(long)/consent", body: Data(#"{"consented": true}"#.utf8), token: "app-token-for-tests-0123456789abcdef").status
            XCTAssertEqual(awaited2, 400)
            let a = try await h.request("POST", "/v1/customers/c-1/consent", body: Data(#"{"consented": true}"#.utf8), token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(a.status, 200, a.text)
            let events = try h.events(stream: StreamId.ledgerConsent.text)
            XCTAssertEqual(events.map(\.type), [LedgerEventType.consent])
            let payload = try XCTUnwrap(try JSONSerialization.jsonObject(with: events[0].raw) as? [String: Any])
            XCTAssertEqual((payload["requestedBy"] as? [String: Any])?["role"] as? String, "app")
            XCTAssertFalse(String(decoding: events[0].raw, as: UTF8.self).contains("app-token-for-tests-0123456789abcdef"), "never the token")
            let consented = try await h.app.appleAPI.consent.consented(customerId: "c-1")
            XCTAssertTrue(consented)
            let stranger = try await h.app.appleAPI.consent.consented(customerId: "C-1")
            XCTAssertFalse(stranger, "non-UUID customer ids are case-sensitive")
        }
    }

    // MARK: - Legacy receipts

    static let receiptSandbox = Data("receipt-sandbox".utf8).base64EncodedString()

    static func receiptAnswer(otid: String, expires: Int64, autoRenew: String = "1") -> JSONValue {
        let json: [String: Any] = [
            "receipt": ["bundle_id": "com.example", "app_item_id": 0],
            "latest_receipt": "MIIblob==",
            "latest_receipt_info": [
                ["transaction_id": otid, "original_transaction_id": otid, "product_id": "com.example.monthly",
                 "purchase_date_ms": String(expires - 30 * 86_400_000), "expires_date_ms": String(expires)],
            ],
            "pending_renewal_info": [["original_transaction_id": otid, "auto_renew_product_id": "com.example.monthly",
                                      "auto_renew_status": autoRenew]],
        ]
        return try! JSONDecoder().decode(JSONValue.self, from: JSONSerialization.data(withJSONObject: json))
    }

    func testALegacyReceiptIsVerifiedStoredOnceProjectedAndAppleStatusesBecomeClearErrors() async throws {
        let receipts = FakeVerifyReceipt(sharedSecret: "v1-shared-secret")
        try receipts.start()
        let otid = "1000000000001701"
        let expires = F.now + 10 * day
        receipts.register(receiptData: Self.receiptSandbox, .init(environment: .sandbox, answer: Self.receiptAnswer(otid: otid, expires: expires)))
        try await withService(environment: ["LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL": receipts.baseURL.absoluteString, "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]) { h in
            func post(_ body: String, token: String? = "app-token-for-tests-0123456789abcdef") async throws -> ServiceHarness.Answer {
                try await h.request("POST", "/v1/apple/receipts", body: Data(body.utf8), token: token)
            }
            let awaited3 = try await post(#"{"receipt": "\#(Self.receiptSandbox)"}"#, token: nil).status
            XCTAssertEqual(awaited3, 401)
            let a = try await post(#"{"receipt": "\#(Self.receiptSandbox)"}"#)
            XCTAssertEqual(a.status, 200, a.text)
            XCTAssertEqual(a.json["status"] as? String, "stored")
            XCTAssertEqual(a.json["environment"] as? String, "Sandbox", "21007 from Production, then Sandbox")
            XCTAssertEqual(receipts.requests.map(\.environment), [.production, .sandbox])
            XCTAssertEqual(receipts.requests.first?.password, "v1-shared-secret")
            let state = try XCTUnwrap(a.json["subscription"] as? [String: Any])
            XCTAssertEqual(state["status"] as? String, "active", "latest_receipt_info projected like V1")
            XCTAssertEqual((state["expiresDate"] as? NSNumber)?.int64Value, expires)
            XCTAssertEqual(state["autoRenewStatus"] as? Int, 1, "pending_renewal_info projected")
            // Apple stamps a new request date; the same answer is not stored again.
            let again = try await post(#"{"receipt": "\#(Self.receiptSandbox)"}"#)
            XCTAssertEqual(again.json["status"] as? String, "duplicate")
            XCTAssertEqual(try h.events(stream: otid).map(\.type), [AppleAPIEvents.verifyReceipt])
            XCTAssertFalse(String(decoding: try h.events(stream: otid)[0].raw, as: UTF8.self).contains("v1-shared-secret"))

            // Apple's statuses as clear errors.
            let cases: [(Int, Bool?, Int, String)] = [
                (21003, nil, 422, "receipt_not_authentic"), (21004, nil, 502, "shared_secret_mismatch"),
                (21006, nil, 422, "receipt_expired"), (21010, nil, 422, "account_not_found"),
                (21199, false, 502, "apple_internal_error"), (21000, nil, 502, "receipt_request_refused"),
            ]
            for (status, retryable, http, code) in cases {
                receipts.enqueueStatus(status, isRetryable: retryable)
                let e = try await post(#"{"receipt": "\#(Self.receiptSandbox)"}"#)
                XCTAssertEqual(e.status, http, "\(status): \(e.text)")
                XCTAssertEqual(e.errorCode, code, "\(status)")
                XCTAssertTrue(e.text.contains(String(status)), "\(status): the message names Apple's status")
                XCTAssertFalse(e.text.contains("v1-shared-secret"))
            }
            receipts.enqueueStatus(21005, times: 2)   // the service asks Apple twice per request (its deadline)
            let unavailable = try await post(#"{"receipt": "\#(Self.receiptSandbox)"}"#)
            XCTAssertEqual(unavailable.status, 503, unavailable.text)
            XCTAssertEqual(unavailable.headers["retry-after"], "30")
            // 21002 for data that is no receipt (after Apple's temporary-21002 retries).
            let malformed = try await post(#"{"receipt": "\#(Data("no receipt".utf8).base64EncodedString())"}"#)
            XCTAssertEqual(malformed.status, 400, malformed.text)
            XCTAssertEqual(malformed.errorCode, "receipt_malformed")
            for bad in [#"{"receipt": "%%% not base64"}"#, #"{"receipt": 12}"#, #"{"receipt": ""}"#, #"{}"#, "[]"] {
                let e = try await post(bad)
                XCTAssertEqual(e.status, 400, "\(bad): \(e.text)")
            }
            XCTAssertEqual(try h.events(stream: otid).count, 1, "no refusal stored anything")
        }
        await receipts.shutdown()
    }

    func testWithoutTheSharedSecretReceiptsAreRefusedBeforeAskingApple() async throws {
        let receipts = FakeVerifyReceipt(sharedSecret: nil)
        try receipts.start()
        try await withService(environment: ["LEDGER_APPLE_SHARED_SECRET": "", "LEDGER_APPLE_VERIFY_RECEIPT_BASE_URL": receipts.baseURL.absoluteString, "LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK": "true"]) { h in
            let a = try await h.request("POST", "/v1/apple/receipts", body: Data(#"{"receipt": "\#(Self.receiptSandbox)"}"#.utf8), token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(a.status, 422, a.text)
            XCTAssertEqual(a.errorCode, "shared_secret_not_configured")
            XCTAssertTrue(a.text.contains("LEDGER_APPLE_SHARED_SECRET"))
            XCTAssertEqual(receipts.requests.count, 0, "Apple was not asked")
        }
        await receipts.shutdown()
    }
}

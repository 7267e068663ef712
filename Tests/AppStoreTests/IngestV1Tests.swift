import Crypto
import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import AppStore

/// V1 (`responseBodyV1`) ingestion: which subscription a body is about, its stream, dedupe key,
/// business time and namespaced payload, and that the fact decoder reads the same subscription.
final class IngestV1Tests: XCTestCase {
    let secret = "0123456789abcdef0123456789abcdef"
    let prod = try! AppleAcceptance(bundleIds: ["com.example"], appAppleIds: [1234], environments: ["Production"])
    var ingestor: AppleNotificationIngestor { Fixtures.ingestor(prod) }

    // An account with two subscription groups. Group A (monthly) is the most recent activity on
    // the account and has the greatest expiry; group B (pro) is what the notifications are about.
    static let groupA = "1000000000000001"
    static let groupB = "2000000000000001"
    static let aEntries: [[String: String]] = [
        ["transaction_id": "1000000000000001", "original_transaction_id": groupA, "web_order_line_item_id": "1001",
         "purchase_date_ms": "1654600000000", "expires_date_ms": "1657200000000", "product_id": "com.example.monthly"],
        ["transaction_id": "1000000000000002", "original_transaction_id": groupA, "web_order_line_item_id": "1002",
         "purchase_date_ms": "1657200000000", "expires_date_ms": "1659900000000", "product_id": "com.example.monthly"],
    ]
    static let bEntries: [[String: String]] = [
        ["transaction_id": "2000000000000001", "original_transaction_id": groupB, "web_order_line_item_id": "2001",
         "purchase_date_ms": "1650000000000", "expires_date_ms": "1652600000000", "product_id": "com.example.pro"],
        ["transaction_id": "2000000000000002", "original_transaction_id": groupB, "web_order_line_item_id": "2002",
         "purchase_date_ms": "1652600000000", "expires_date_ms": "1655200000000", "product_id": "com.example.pro"],
    ]
    static let pending: [[String: String]] = [
        ["auto_renew_status": "1", "original_transaction_id": groupA, "auto_renew_product_id": "com.example.monthly", "is_in_billing_retry_period": "0"],
        ["auto_renew_status": "1", "original_transaction_id": groupB, "auto_renew_product_id": "com.example.pro", "is_in_billing_retry_period": "0"],
    ]

    /// A V1 body as Apple sends it (every value a string), with the members in a fixed order so
    /// the raw redaction can be compared byte for byte.
    func body(password: String? = "(secret)", type: String = "DID_RENEW", environment: String = "PROD", bid: String = "com.example",
              product: String? = "com.example.pro", autoRenew: String = "true", changeDate: String? = nil,
              entries: [[String: String]] = IngestV1Tests.aEntries + IngestV1Tests.bEntries,
              pending: [[String: String]] = IngestV1Tests.pending, latestReceipt: String = "MIIabc", extra: String = "") -> Data {
        func object(_ o: [String: String]) -> String {
            "{" + o.keys.sorted().map { "\"\($0)\":\"\(o[$0]!)\"" }.joined(separator: ",") + "}"
        }
        let pw = password.map { "\"password\":\"\($0 == "(secret)" ? secret : $0)\"," } ?? ""
        let productMember = product.map { "\"auto_renew_product_id\":\"\($0)\"," } ?? ""
        let change = changeDate.map { ",\"auto_renew_status_change_date_ms\":\"\($0)\"" } ?? ""
        return Data("""
        {"notification_type":"\(type)",\(pw)"environment":"\(environment)",\(productMember)
        "unified_receipt":{"status":0,"environment":"Production","latest_receipt":"\(latestReceipt)",
         "latest_receipt_info":[\(entries.map(object).joined(separator: ","))],
         "pending_renewal_info":[\(pending.map(object).joined(separator: ","))]},
        "bvrs":"1","bid":"\(bid)","auto_renew_status":"\(autoRenew)"\(change)\(extra)}
        """.utf8)
    }

    func ingest(_ b: Data, file: StaticString = #filePath, line: UInt = #line) throws -> NewEvent {
        let event = try ingestor.ingestV1(body: b, sharedSecret: secret)
        assertFactsAgree(event, file: file, line: line)
        return event
    }

    /// Ingestion and the fact decoder name the same subscription and business time.
    func assertFactsAgree(_ event: NewEvent, file: StaticString = #filePath, line: UInt = #line) {
        let facts = FactDecoder.facts(of: event)
        XCTAssertFalse(facts.isEmpty, file: file, line: line)
        XCTAssertFalse(facts.contains { $0.kind == .unreadable }, "\(facts)", file: file, line: line)
        for f in facts {
            XCTAssertEqual(f.subscription?.originalTransactionId, event.streamId, file: file, line: line)
            XCTAssertEqual(f.subscription?.environment, event.environment, file: file, line: line)
            XCTAssertEqual(f.signedAt, event.signedAt, file: file, line: line)
            XCTAssertEqual(f.origin, .appleV1, file: file, line: line)
        }
    }

    // MARK: which subscription

    func testTheNotificationIsAboutTheSubscriptionOfAutoRenewProductId() throws {
        let b = body()
        let e = try ingest(b)
        XCTAssertEqual(e.streamId, Self.groupB, "group A has the latest purchase and expiry, but the notification names pro")
        XCTAssertEqual(e.type, "V1/DID_RENEW")
        XCTAssertEqual(e.environment, "Production")
        XCTAssertEqual(e.signedAt, 1_652_600_000_000, "B's latest purchase; A's later dates are not about B")
        XCTAssertEqual(e.expiresAt, 1_655_200_000_000, "B's latest entry, not the account's greatest expiry")
        XCTAssertTrue(e.dedupeKey.hasPrefix("v1:"))
        XCTAssertEqual(e.dedupeKey.count, 3 + 64)
        let tx = try XCTUnwrap(FactDecoder.facts(of: e).first { $0.kind == .transaction })
        XCTAssertEqual(tx.transactionId, "2000000000000002")
        XCTAssertEqual(tx.transaction?.productId, "com.example.pro")

        // About group A when A's product is named.
        let a = try ingest(body(product: "com.example.monthly"))
        XCTAssertEqual(a.streamId, Self.groupA)
        XCTAssertEqual(a.signedAt, 1_657_200_000_000)
        // No auto_renew_product_id: the account's latest purchase.
        XCTAssertEqual(try ingest(body(product: nil)).streamId, Self.groupA)
        // A product no entry and no pending entry names: also the latest purchase.
        XCTAssertEqual(try ingest(body(product: "com.example.unknown")).streamId, Self.groupA)
    }

    func testAPendingCrossgradeFindsItsSubscriptionThroughPendingRenewalInfo() throws {
        // B will renew into pro.yearly, which nobody has bought yet.
        var pending = Self.pending
        pending[1]["auto_renew_product_id"] = "com.example.pro.yearly"
        let e = try ingest(body(type: "DID_CHANGE_RENEWAL_PREF", product: "com.example.pro.yearly", pending: pending))
        XCTAssertEqual(e.streamId, Self.groupB)
        let renewal = try XCTUnwrap(FactDecoder.facts(of: e).first { $0.kind == .renewal }?.renewal)
        XCTAssertEqual(renewal.autoRenewProductId, "com.example.pro.yearly")
        XCTAssertEqual(renewal.productId, "com.example.pro")
        // The pending entry that states the crossgrade is asked before entries of the product
        // (here an implausible old pro.yearly entry under A must not take it).
        var entries = Self.aEntries + Self.bEntries
        entries.append(["transaction_id": "1000000000000000", "original_transaction_id": Self.groupA,
                        "purchase_date_ms": "1600000000000", "expires_date_ms": "1600100000000", "product_id": "com.example.pro.yearly"])
        XCTAssertEqual(try ingest(body(product: "com.example.pro.yearly", entries: entries, pending: pending)).streamId, Self.groupB)
    }

    func testArrayOrderNeverMatters() throws {
        let entries = Self.aEntries + Self.bEntries
        let reference = try ingest(body(entries: entries, pending: Self.pending))
        let referenceFacts = FactDecoder.facts(of: reference)
        var rng = SplitMix64(seed: 0x5EED_0001)
        for _ in 0..<12 {
            let e = try ingest(body(entries: shuffled(entries, &rng), pending: shuffled(Self.pending, &rng)))
            XCTAssertEqual(e.streamId, reference.streamId)
            XCTAssertEqual(e.dedupeKey, reference.dedupeKey)
            XCTAssertEqual(e.signedAt, reference.signedAt)
            XCTAssertEqual(e.expiresAt, reference.expiresAt)
            XCTAssertEqual(FactDecoder.facts(of: e), referenceFacts)
        }
        // Two entries alike in purchase date and transaction id: content decides, not position.
        var twin = Self.bEntries[1]
        twin["expires_date_ms"] = "1655300000000"
        let x = try ingest(body(entries: Self.bEntries + [twin]))
        let y = try ingest(body(entries: [twin] + Self.bEntries))
        XCTAssertEqual(x.expiresAt, y.expiresAt)
        XCTAssertEqual(x.dedupeKey, y.dedupeKey)
    }

    func shuffled<T>(_ a: [T], _ rng: inout SplitMix64) -> [T] {
        var a = a
        for i in stride(from: a.count - 1, to: 0, by: -1) {
            a.swapAt(i, Int(rng.next() % UInt64(i + 1)))
        }
        return a
    }

    // MARK: business time

    func testBusinessTimeIsTheGreatestDateStatedForThatSubscription() throws {
        // A cancellation after the latest purchase.
        var b = Self.bEntries
        b[0]["cancellation_date_ms"] = "1653000000000"
        XCTAssertEqual(try ingest(body(type: "CANCEL", entries: Self.aEntries + b)).signedAt, 1_653_000_000_000)
        // An auto-renew change later still.
        XCTAssertEqual(try ingest(body(type: "DID_CHANGE_RENEWAL_STATUS", autoRenew: "false", changeDate: "1654000000000",
                                       entries: Self.aEntries + b)).signedAt, 1_654_000_000_000)
        // Expiry is not a statement time, and group A's later purchase is about another subscription.
        XCTAssertEqual(try ingest(body()).signedAt, 1_652_600_000_000)
        // No date at all for the subscription: refused, nothing to order it by.
        let undated = [["transaction_id": "3", "original_transaction_id": "3000000000000001", "product_id": "com.example.pro"]]
        assertRefused("missing_field", .malformed) { try ingestor.ingestV1(body: body(entries: undated, pending: []), sharedSecret: secret) }
    }

    // MARK: dedupe key

    func testDedupeKeySeparatesGroupsAndRenewalsButNotRetries() throws {
        let first = try ingest(body())
        // A retry differs in latest_receipt and request timestamps only.
        let retry = try ingest(body(latestReceipt: "MIIxyz", extra: ",\"request_date_ms\":\"1\""))
        XCTAssertEqual(first.dedupeKey, retry.dedupeKey, "retries differing only in latest_receipt are one notification")
        // The next renewal of B, on the same account: a new notification (it used to collide
        // when the key hashed group A's entry).
        let renewed = Self.bEntries + [["transaction_id": "2000000000000003", "original_transaction_id": Self.groupB,
                                        "web_order_line_item_id": "2003", "purchase_date_ms": "1655200000000",
                                        "expires_date_ms": "1657800000000", "product_id": "com.example.pro"]]
        let second = try ingest(body(entries: Self.aEntries + renewed))
        XCTAssertEqual(second.streamId, Self.groupB)
        XCTAssertNotEqual(first.dedupeKey, second.dedupeKey)
        // The same receipt, a notification about group A: another key.
        XCTAssertNotEqual(first.dedupeKey, try ingest(body(product: "com.example.monthly")).dedupeKey)
        // Each stated change is a different notification.
        let toggled = try ingest(body(type: "DID_CHANGE_RENEWAL_STATUS", autoRenew: "false", changeDate: "1653000000000"))
        XCTAssertNotEqual(first.dedupeKey, toggled.dedupeKey)
        let toggledLater = try ingest(body(type: "DID_CHANGE_RENEWAL_STATUS", autoRenew: "false", changeDate: "1653500000000"))
        XCTAssertNotEqual(toggled.dedupeKey, toggledLater.dedupeKey)
        XCTAssertNotEqual(first.dedupeKey, try ingest(body(autoRenew: "false")).dedupeKey)
        XCTAssertNotEqual(first.dedupeKey, try ingest(body(type: "INTERACTIVE_RENEWAL")).dedupeKey)
        // Two refunds of older transactions while the latest stays: each cancellation counts.
        var one = Self.bEntries + renewed.suffix(1)
        one[0]["cancellation_date_ms"] = "1653000000000"
        var two = one
        two[1]["cancellation_date_ms"] = "1656000000000"
        let refundOne = try ingest(body(type: "REFUND", entries: one))
        let refundTwo = try ingest(body(type: "REFUND", entries: two))
        XCTAssertNotEqual(refundOne.dedupeKey, refundTwo.dedupeKey)
        // The environment and the app are part of the key.
        let sandbox = Fixtures.ingestor(Fixtures.both)
        XCTAssertNotEqual(try sandbox.ingestV1(body: body(environment: "Sandbox"), sharedSecret: secret).dedupeKey,
                          try sandbox.ingestV1(body: body(environment: "PROD"), sharedSecret: secret).dedupeKey)
    }

    /// The bytes hashed are exactly the ones the doc comment of `ingestV1` lists.
    func testDedupeKeyHashesTheDocumentedBytes() throws {
        var b = Self.bEntries
        b[0]["cancellation_date_ms"] = "1653000000000"
        let e = try ingest(body(type: "CANCEL", changeDate: "1654000000000", entries: Self.aEntries + b))
        let lines: [(String, String)] = [
            ("environment", "Production"), ("bid", "com.example"), ("notification_type", "CANCEL"),
            ("original_transaction_id", Self.groupB),
            ("transaction_id", "2000000000000002"), ("web_order_line_item_id", "2002"), ("purchase_date_ms", "1652600000000"),
            ("expires_date_ms", "1655200000000"), ("cancellation_date_ms", ""),
            ("cancelled.transaction_id", "2000000000000001"), ("cancelled.cancellation_date_ms", "1653000000000"),
            ("auto_renew_status", "true"), ("auto_renew_status_change_date_ms", "1654000000000"),
            ("auto_renew_product_id", "com.example.pro"),
            ("pending.auto_renew_product_id", "com.example.pro"), ("pending.auto_renew_status", "1"),
            ("pending.is_in_billing_retry_period", "0"), ("pending.grace_period_expires_date_ms", ""),
            ("pending.expiration_intent", ""), ("pending.price_consent_status", ""),
        ]
        let material = lines.map { "\($0.0)=\($0.1.utf8.count):\($0.1)\n" }.joined()
        XCTAssertEqual(e.dedupeKey, "v1:" + Hex.encode(Digest.sha256(Array(material.utf8))))
    }

    // MARK: namespace and redaction

    func testPayloadIsNamespacedAndTheSecretIsRedacted() throws {
        let b = body()
        let e = try ingest(b)
        let p = try jsonObject(e.payload)
        XCTAssertEqual(Array(p.keys), ["responseBodyV1"], "V1 members live under their own key only")
        let v1 = try XCTUnwrap(p["responseBodyV1"] as? [String: Any])
        XCTAssertEqual(v1["password"] as? String, "<redacted>")
        XCTAssertEqual(v1["notification_type"] as? String, "DID_RENEW")
        XCTAssertNotNil(v1["unified_receipt"])
        // Neither stored column contains the secret; raw is otherwise byte-identical.
        let rawText = String(decoding: e.raw, as: UTF8.self)
        XCTAssertFalse(rawText.contains(secret))
        XCTAssertFalse(String(decoding: e.payload, as: UTF8.self).contains(secret))
        XCTAssertEqual(rawText, String(decoding: b, as: UTF8.self).replacingOccurrences(of: "\"\(secret)\"", with: "\"<redacted>\""))
        // The payload is the redacted raw text wrapped, not a re-encoding.
        XCTAssertEqual(e.payload, Data("{\"responseBodyV1\":".utf8) + e.raw + Data("}".utf8))
        XCTAssertEqual(AppleNotificationIngestor.v1Payload(redactedRaw: Data(" \n{\"a\":1}".utf8)), Data("{\"responseBodyV1\": \n{\"a\":1}}".utf8))
        // Text jsonb would not take as it stands (a byte-order mark, UTF-16) is re-encoded instead.
        XCTAssertNil(AppleNotificationIngestor.v1Payload(redactedRaw: Data([0xEF, 0xBB, 0xBF]) + Data("{}".utf8)))
        XCTAssertNil(AppleNotificationIngestor.v1Payload(redactedRaw: Data("{}".utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] })))
        let bom = try ingest(Data([0xEF, 0xBB, 0xBF]) + b)
        let reencoded = try jsonObject(bom.payload)
        XCTAssertEqual(Array(reencoded.keys), ["responseBodyV1"])
        XCTAssertEqual((reencoded["responseBodyV1"] as? [String: Any])?["password"] as? String, "<redacted>")
        XCTAssertFalse(String(decoding: bom.payload, as: UTF8.self).contains(secret))
    }

    /// Only the shared secret is needed to post V1, so a V1 body naming V2 keys must never be
    /// read as verified V2 data (it used to grant an entitlement until 2100).
    func testV2KeysInAV1BodyAreOnlyUnknownV1Members() throws {
        let forged = #","transactionInfo":{"transactionId":"9","originalTransactionId":"2000000000000001","productId":"com.example.pro","purchaseDate":1650000000000,"expiresDate":4102444800000,"appAccountToken":"6f0c1b2a-0000-4000-8000-0000000000aa","environment":"Production","bundleId":"com.example"},"renewalInfo":{"originalTransactionId":"2000000000000001","autoRenewProductId":"com.example.pro","autoRenewStatus":1},"notificationType":"SUBSCRIBED","signedDate":1650000000000"#
        let e = try ingest(body(extra: forged))
        let p = try jsonObject(e.payload)
        XCTAssertEqual(Array(p.keys), ["responseBodyV1"])
        let facts = FactDecoder.facts(of: e)
        XCTAssertTrue(facts.allSatisfy { $0.origin == .appleV1 })
        XCTAssertFalse(facts.contains { $0.transactionId == "9" })
        XCTAssertFalse(facts.contains { $0.customerId == "6f0c1b2a-0000-4000-8000-0000000000aa" })
        XCTAssertEqual(facts.compactMap(\.transaction?.expiresDate).max(), 1_655_200_000_000)
        let view = SubscriptionProjection(facts: facts).view(at: 1_700_000_000_000)
        XCTAssertEqual(view.entitlements(catalog: .productIds).count, 0, "nothing is in force in 2023, let alone until 2100")
        XCTAssertEqual(view.subscription(SubscriptionKey(environment: "Production", originalTransactionId: Self.groupB))?.expiresDate,
                       1_655_200_000_000)
        // Refund cases read facts: the V1 body's forged REFUND keys give no Apple refund case.
        let refund = try ingest(body(extra: forged.replacingOccurrences(of: "SUBSCRIBED", with: "REFUND")))
        let refundFacts = FactDecoder.facts(of: RecordedEvent(position: 1, recordedAt: 1, event: refund))
        XCTAssertEqual(RefundCaseFold.cases(from: refundFacts).count, 0)
    }

    // MARK: originalTransactionId

    func testOriginalTransactionIdMustBeOneToTwentyDigits() throws {
        for bad in ["ledger:admin", "wechat:order:42", "apple:test", "12a", "1.5", " 1", "-1", "+1", "٣٤", "123456789012345678901"] {
            let entries = [["transaction_id": "1", "original_transaction_id": bad, "purchase_date_ms": "1650000000000",
                            "expires_date_ms": "1652600000000", "product_id": "com.example.pro"]] + Self.aEntries
            assertRefused("invalid_original_transaction_id", .malformed) {
                try ingestor.ingestV1(body: body(entries: entries, pending: []), sharedSecret: secret)
            }
        }
        do {
            let entries = [["transaction_id": "1", "original_transaction_id": "ledger:admin", "purchase_date_ms": "1650000000000",
                            "product_id": "com.example.pro"]]
            _ = try ingestor.ingestV1(body: body(entries: entries, pending: []), sharedSecret: secret)
            XCTFail("accepted")
        } catch {
            XCTAssertTrue(error.message.contains("original_transaction_id"), "the refusal names the field: \(error.message)")
        }
        for good in ["1", "12345678901234567890"] {
            let entries = [["transaction_id": "1", "original_transaction_id": good, "purchase_date_ms": "1650000000000", "product_id": "com.example.pro"]]
            XCTAssertEqual(try ingest(body(entries: entries, pending: [])).streamId, good)
        }
    }

    // MARK: refusals

    func testSecretUnsetIsRefused() {
        assertRefused("shared_secret_not_configured", .notAccepted) { try ingestor.ingestV1(body: body(), sharedSecret: nil) }
        assertRefused("shared_secret_not_configured", .notAccepted) { try ingestor.ingestV1(body: body(password: ""), sharedSecret: "") }
    }

    func testWrongOrMissingPassword() {
        assertRefused("bad_shared_secret", .unauthenticated) { try ingestor.ingestV1(body: body(password: secret + "x"), sharedSecret: secret) }
        assertRefused("bad_shared_secret", .unauthenticated) { try ingestor.ingestV1(body: body(password: String(secret.dropLast())), sharedSecret: secret) }
        assertRefused("bad_shared_secret", .unauthenticated) { try ingestor.ingestV1(body: body(password: nil), sharedSecret: secret) }
        assertRefused("bad_shared_secret", .unauthenticated) { try ingestor.ingestV1(body: body(password: ""), sharedSecret: secret) }
        // The refusal never echoes the secret.
        do { _ = try ingestor.ingestV1(body: body(password: "guess"), sharedSecret: secret) } catch {
            XCTAssertFalse(error.description.contains(secret))
            XCTAssertFalse(error.description.contains("guess"))
        }
    }

    func testWrongBundleAndEnvironment() {
        assertRefused("app_mismatch", .notAccepted) { try ingestor.ingestV1(body: body(bid: "com.other"), sharedSecret: secret) }
        assertRefused("environment_mismatch", .notAccepted) { try ingestor.ingestV1(body: body(environment: "Sandbox"), sharedSecret: secret) }
        assertRefused("environment_mismatch", .notAccepted) { try ingestor.ingestV1(body: body(environment: "Xcode"), sharedSecret: secret) }
        let sandbox = Fixtures.ingestor(Fixtures.sandbox)
        XCTAssertEqual(try sandbox.ingestV1(body: body(environment: "Sandbox"), sharedSecret: secret).environment, "Sandbox")
        assertRefused("environment_mismatch", .notAccepted) { try sandbox.ingestV1(body: body(), sharedSecret: secret) }
    }

    func testMalformedV1Bodies() {
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: Data("password=x".utf8), sharedSecret: secret) }
        let deep = Data(("{\"password\":\"\(secret)\",\"x\":" + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}").utf8)
        assertRefused("json_too_deep", .malformed) { try ingestor.ingestV1(body: deep, sharedSecret: secret) }
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: body(autoRenew: "1"), sharedSecret: secret) }
        var b = Self.bEntries
        for bad in ["soon", "+1652600000000", "-5", "1e12", "9224318016000000", "99999999999999999999"] {
            b[1]["expires_date_ms"] = bad
            assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: body(entries: b), sharedSecret: secret) }
        }
        // Apple sends strings; a number would be read one way here and another by the decoder.
        let numeric = String(decoding: body(), as: UTF8.self).replacingOccurrences(of: #""product_id":"com.example.pro""#, with: #""product_id":7"#)
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: Data(numeric.utf8), sharedSecret: secret) }
        // Values that become projection keys are bounded (a 4 kB transaction_id stopped every
        // projection update after it).
        for field in ["transaction_id", "product_id", "app_account_token"] {
            var long = Self.bEntries
            long[1][field] = String(repeating: "7", count: 513)
            assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: body(entries: Self.aEntries + long), sharedSecret: secret) }
        }
        let pendingNotArray = String(decoding: body(), as: UTF8.self).replacingOccurrences(of: #""pending_renewal_info":["#, with: #""pending_renewal_info":{"a":["#)
            .replacingOccurrences(of: "}]},", with: "}]}},")
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: Data(pendingNotArray.utf8), sharedSecret: secret) }
        let noReceipt = Data("{\"password\":\"\(secret)\",\"notification_type\":\"CANCEL\",\"environment\":\"PROD\",\"bid\":\"com.example\"}".utf8)
        assertRefused("missing_field", .malformed) { try ingestor.ingestV1(body: noReceipt, sharedSecret: secret) }
        assertRefused("missing_field", .malformed) { try ingestor.ingestV1(body: body(entries: [], pending: []), sharedSecret: secret) }
        // The subscription's latest entry has no transaction_id.
        let untransacted = [["original_transaction_id": "3000000000000001", "purchase_date_ms": "1650000000000", "product_id": "com.example.pro"]]
        assertRefused("missing_field", .malformed) { try ingestor.ingestV1(body: body(entries: untransacted, pending: []), sharedSecret: secret) }
        // More entries than an event's facts can be numbered by (Apple sends at most 100).
        let many = (0..<1_001).map { i in
            ["transaction_id": "\(i)", "original_transaction_id": Self.groupB, "purchase_date_ms": "\(1_650_000_000_000 + i)",
             "cancellation_date_ms": "1660000000000", "product_id": "com.example.pro"]
        }
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: body(entries: many, pending: []), sharedSecret: secret) }
        XCTAssertNoThrow(try ingest(body(entries: Array(many.prefix(1_000)), pending: [])))
    }

    func testRedactionHandlesEscapedKeysAndDuplicates() {
        let tricky = Data("{\"pass\\u0077ord\" : \"\(secret)\", \"a\":{\"password\":\"inner\"}, \"password\":\"\(secret)\"}".utf8)
        let out = String(decoding: V1Redaction.redact(body: tricky, secret: secret), as: UTF8.self)
        XCTAssertFalse(out.contains(secret))
        XCTAssertTrue(out.contains("\"inner\""), "only top-level members are the shared secret")
        // A secret echoed elsewhere (escaped) forces the re-encoded fallback rather than leaking.
        let echoed = Data("{\"password\":\"\(secret)\",\"note\":\"\(secret)\"}".utf8)
        XCTAssertFalse(String(decoding: V1Redaction.redact(body: echoed, secret: secret), as: UTF8.self).contains(secret))
    }
}

import Crypto
import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import AppStore

/// Hostile V2 bodies: each must be refused with a precise code and the kind that picks the HTTP status.
final class HostileV2Tests: XCTestCase {
    let auth = Fixtures.authority
    let ingestor = Fixtures.ingestor()
    let sample = AppleTestAuthority.sample()

    private func body(_ edit: (inout AppleTestAuthority.NotificationOptions) -> Void) throws -> Data {
        var o = AppleTestAuthority.NotificationOptions()
        edit(&o)
        return try auth.signSample(sample, options: o)
    }

    private func refuse(_ code: String, _ kind: RefusalKind, _ body: Data, file: StaticString = #filePath, line: UInt = #line) {
        assertRefused(code, kind, file: file, line: line) { try ingestor.ingestV2(body: body) }
    }

    /// Replaces segment `index` of the outer JWS with `text`.
    private func withSegment(_ index: Int, _ text: String) throws -> Data {
        let good = try jsonObject(auth.signSample(sample))["signedPayload"] as! String
        var parts = good.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        parts[index] = text
        return try AppleTestAuthority.body(signedPayload: parts.joined(separator: "."))
    }

    func testBaselineIsAccepted() throws {
        XCTAssertNoThrow(try ingestor.ingestV2(body: auth.signSample(sample)))
    }

    // MARK: algorithm

    func testAlgNone() throws { refuse("unsupported_algorithm", .unauthenticated, try body { $0.outer.alg = "none" }) }
    func testHS256WithPublicKeyAsSecret() throws { refuse("unsupported_algorithm", .unauthenticated, try body { $0.outer.alg = "HS256" }) }
    func testRS256Label() throws { refuse("unsupported_algorithm", .unauthenticated, try body { $0.outer.alg = "RS256" }) }
    func testLowercaseES256() throws { refuse("unsupported_algorithm", .unauthenticated, try body { $0.outer.alg = "es256" }) }
    func testNestedAlgNone() throws { refuse("unsupported_algorithm", .unauthenticated, try body { $0.transaction.alg = "none" }) }
    func testCritHeader() throws { refuse("malformed", .malformed, try body { $0.outer.extraHeader = ["crit": "b64"] }) }

    // MARK: chain

    func testX5CLengthTwo() throws { refuse("invalid_chain_length", .unauthenticated, try body { $0.outer.x5c = .leafAndIntermediate }) }
    func testX5CLengthFour() throws { refuse("invalid_chain_length", .unauthenticated, try body { $0.outer.x5c = .withExtra(auth.root) }) }
    func testX5CAbsent() throws { refuse("missing_field", .malformed, try body { $0.outer.x5c = .absent }) }
    func testX5CNotBase64() throws {
        let (h, _) = try SignedDataVerifier.decodeUnverified(jsonObject(auth.signSample(sample))["signedPayload"] as! String)
        var x5c = h["x5c"] as! [String]
        x5c[0] = "!!" + x5c[0]
        let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "x5c": x5c])
        refuse("invalid_certificate", .unauthenticated, try withSegment(0, Base64.encodeURL([UInt8](header))))
    }

    func testSelfMadeRootSentInX5C() throws {
        refuse("untrusted_chain", .unauthenticated, try body { $0.outer.authority = Fixtures.stranger })
    }

    func testForeignLeafWithTrustedRootInThirdSlot() throws {
        // x5c[2] is never trusted: naming the real root there does not anchor a stranger's chain.
        let s = Fixtures.stranger
        refuse("untrusted_chain", .unauthenticated, try body {
            $0.outer.x5c = .custom([s.leaf, s.intermediate, auth.root])
            $0.outer.signingKey = s.leafKey
        })
    }

    func testRootInIntermediateSlot() throws {
        // The trusted root is not an intermediate with Apple's marker.
        refuse("missing_apple_oid", .unauthenticated, try body { $0.outer.x5c = .custom([auth.leaf, auth.root, auth.root]) })
    }

    func testWrongOIDOnLeaf() throws {
        let a = Fixtures.minted { $0.leafOID = "1.2.840.113635.100.6.11.2" }
        let ing = AppleNotificationIngestor(verifier: SignedDataVerifier(trustedRoots: [a.root]), acceptance: Fixtures.sandbox)
        assertRefused("missing_apple_oid", .unauthenticated) { try ing.ingestV2(body: a.signSample(sample)) }
    }

    func testWrongOIDOnIntermediate() throws {
        let a = Fixtures.minted { $0.intermediateOID = "1.2.840.113635.100.6.2.2" }
        let ing = AppleNotificationIngestor(verifier: SignedDataVerifier(trustedRoots: [a.root]), acceptance: Fixtures.sandbox)
        assertRefused("missing_apple_oid", .unauthenticated) { try ing.ingestV2(body: a.signSample(sample)) }
    }

    func testLeafWithoutAnyMarker() throws {
        let a = Fixtures.minted { $0.leafOID = nil }
        let ing = AppleNotificationIngestor(verifier: SignedDataVerifier(trustedRoots: [a.root]), acceptance: Fixtures.sandbox)
        assertRefused("missing_apple_oid", .unauthenticated) { try ing.ingestV2(body: a.signSample(sample)) }
    }

    func testLibraryInvalidOIDCertificates() throws {
        let lib = try AppleTestAuthority.libraryTestChain()
        let dir = try AppleVectors.directory().appendingPathComponent("library-test-chain")
        func pem(_ n: String) throws -> X509Certificate { try X509Certificate.parsePEM([UInt8](Data(contentsOf: dir.appendingPathComponent(n))))[0] }
        let ing = AppleNotificationIngestor(verifier: lib.verifier(), acceptance: Fixtures.sandbox)
        var o = AppleTestAuthority.NotificationOptions()
        o.outer.x5c = .custom([try pem("testInvalidOIDLeaf.pem"), lib.intermediate, lib.root])
        let badLeaf = try lib.signSample(sample, options: o)
        assertRefused("missing_apple_oid", .unauthenticated) { try ing.ingestV2(body: badLeaf) }
        o.outer.x5c = .custom([try pem("testInvalidIntermediateLeaf.pem"), try pem("testInvalidOIDIntermediate.pem"), lib.root])
        let badIntermediate = try lib.signSample(sample, options: o)
        assertRefused("missing_apple_oid", .unauthenticated) { try ing.ingestV2(body: badIntermediate) }
    }

    func testLeafExpiredAtSignedDate() throws {
        let a = Fixtures.minted { $0.leafValidity = 1_577_836_800...1_609_459_200 }  // 2020 only; sample is signed 2026
        let ing = AppleNotificationIngestor(verifier: SignedDataVerifier(trustedRoots: [a.root]), acceptance: Fixtures.sandbox)
        assertRefused("certificate_not_valid_at_signing_time", .unauthenticated) { try ing.ingestV2(body: a.signSample(sample)) }
    }

    func testLeafNotYetValidAtSignedDate() throws {
        let a = Fixtures.minted { $0.leafValidity = 1_900_000_000...2_000_000_000 }
        let ing = AppleNotificationIngestor(verifier: SignedDataVerifier(trustedRoots: [a.root]), acceptance: Fixtures.sandbox)
        assertRefused("certificate_not_valid_at_signing_time", .unauthenticated) { try ing.ingestV2(body: a.signSample(sample)) }
    }

    // MARK: signature

    func testOuterSignedByAnotherKey() throws {
        refuse("bad_signature", .unauthenticated, try body { $0.outer.signingKey = Fixtures.stranger.leafKey })
    }

    func testCorruptedSignature() throws { refuse("bad_signature", .unauthenticated, try body { $0.outer.corruptSignature = true }) }

    func testPayloadSwappedAfterSigning() throws {
        var other = sample.notification
        other.notificationType = "REFUND"
        let otherPayload = Base64.encodeURL([UInt8](try JSONEncoder().encode(other)))
        refuse("bad_signature", .unauthenticated, try withSegment(1, otherPayload))
    }

    func testNestedTransactionSignedByAnotherKey() throws {
        refuse("bad_signature", .unauthenticated, try body { $0.transaction.signingKey = Fixtures.stranger.leafKey })
    }

    func testNestedRenewalFromUntrustedAuthority() throws {
        refuse("untrusted_chain", .unauthenticated, try body { $0.renewal.authority = Fixtures.stranger })
    }

    func testNestedRenewalTamperedSignature() throws {
        refuse("bad_signature", .unauthenticated, try body { $0.renewal.corruptSignature = true })
    }

    // MARK: nested agreement

    func testNestedBundleIdDisagrees() throws {
        var s = sample
        s.transaction.bundleId = "com.other"
        assertRefused("nested_mismatch", .notAccepted) { try ingestor.ingestV2(body: auth.signSample(s)) }
    }

    func testNestedTransactionEnvironmentDisagrees() throws {
        var s = sample
        s.transaction.environment = "Production"
        assertRefused("nested_mismatch", .notAccepted) { try ingestor.ingestV2(body: auth.signSample(s)) }
    }

    func testNestedRenewalEnvironmentDisagrees() throws {
        var s = sample
        s.renewal.environment = "Production"
        assertRefused("nested_mismatch", .notAccepted) { try ingestor.ingestV2(body: auth.signSample(s)) }
    }

    func testRenewalOriginalTransactionIdDisagrees() throws {
        var s = sample
        s.renewal.originalTransactionId = "999"
        assertRefused("nested_mismatch", .notAccepted) { try ingestor.ingestV2(body: auth.signSample(s)) }
    }

    func testNestedAppTransactionBundleDisagrees() throws {
        var n = AppleNotification()
        n.notificationType = "RESCIND_CONSENT"
        n.notificationUUID = "u-1"
        n.signedDate = AppleTime(1_767_225_600_000)
        var d = AppleNotification.AppData()
        d.bundleId = "com.example"
        d.environment = "Sandbox"
        d.appAppleId = 1234
        n.appData = d
        var at = AppleAppTransaction()
        at.bundleId = "com.elsewhere"
        at.receiptType = "Sandbox"
        assertRefused("nested_mismatch", .notAccepted) { try ingestor.ingestV2(body: auth.signNotification(n, appTransaction: at)) }
    }

    // MARK: nested types

    /// Asserts a refusal with `wrong_nested_type` (400) whose message names the slot.
    private func refuseSlot(_ slot: String, _ body: Data, file: StaticString = #filePath, line: UInt = #line) {
        assertRefused("wrong_nested_type", .malformed, file: file, line: line) { try ingestor.ingestV2(body: body) }
        do { _ = try ingestor.ingestV2(body: body) } catch {
            XCTAssertTrue(error.message.contains(slot), "the refusal names \(slot): \(error.message)", file: file, line: line)
        }
    }

    func testRenewalInfoInTheTransactionSlotAndTransactionInTheRenewalSlot() throws {
        // Both are genuine Apple-signed values of one subscription, each in the other's slot.
        var n = sample.notification
        n.data?.signedTransactionInfo = try auth.sign(sample.renewal)
        n.data?.signedRenewalInfo = try auth.sign(sample.transaction)
        refuseSlot("data.signedTransactionInfo", try auth.signNotification(n))
        // Each swap alone.
        var onlyRenewal = sample.notification
        onlyRenewal.data?.signedTransactionInfo = try auth.sign(sample.renewal)
        refuseSlot("data.signedTransactionInfo", try auth.signNotification(onlyRenewal))
        var onlyTransaction = sample.notification
        onlyTransaction.data?.signedRenewalInfo = try auth.sign(sample.transaction)
        refuseSlot("data.signedRenewalInfo", try auth.signNotification(onlyTransaction))
        // A transaction as the app transaction of RESCIND_CONSENT.
        var rescind = AppleNotification()
        rescind.notificationType = "RESCIND_CONSENT"
        rescind.notificationUUID = "u-swap"
        rescind.signedDate = AppleTime(1_767_225_600_000)
        var d = AppleNotification.AppData()
        d.bundleId = "com.example"
        d.environment = "Sandbox"
        d.appAppleId = 1234
        d.signedAppTransactionInfo = try auth.sign(sample.transaction)
        rescind.appData = d
        refuseSlot("appData.signedAppTransactionInfo", try auth.signNotification(rescind))
    }

    func testATransactionMustCarryWhatMakesItATransaction() throws {
        for field in ["transactionId", "originalTransactionId", "productId", "purchaseDate", "bundleId", "environment"] {
            refuseSlot("data.signedTransactionInfo", try auth.signNotification(
                sample.notification, transaction: sample.transaction, renewal: sample.renewal, editTransaction: { $0[field] = nil }))
            refuseSlot("data.signedTransactionInfo", try auth.signNotification(
                sample.notification, transaction: sample.transaction, renewal: sample.renewal, editTransaction: { $0[field] = NSNull() }))
        }
        for (field, value) in [("transactionId", 42 as Any), ("transactionId", ""), ("productId", ["x"]), ("purchaseDate", "2026-01-01"),
                               ("purchaseDate", true), ("purchaseDate", 9.3e18)] {
            refuseSlot("data.signedTransactionInfo", try auth.signNotification(
                sample.notification, transaction: sample.transaction, editTransaction: { $0[field] = value }))
        }
    }

    func testARenewalInfoMustCarryWhatMakesItARenewalInfo() throws {
        for field in ["originalTransactionId", "autoRenewProductId", "environment"] {
            refuseSlot("data.signedRenewalInfo", try auth.signNotification(
                sample.notification, renewal: sample.renewal, editRenewal: { $0[field] = nil }))
        }
        refuseSlot("data.signedRenewalInfo", try auth.signNotification(
            sample.notification, renewal: sample.renewal, editRenewal: { $0["transactionId"] = "1000000000000009" }))
        // A null transactionId is no transactionId.
        XCTAssertNoThrow(try ingestor.ingestV2(body: auth.signNotification(
            sample.notification, renewal: sample.renewal, editRenewal: { $0["transactionId"] = NSNull() })))
    }

    func testAnAppTransactionMustCarryBundleIdAndReceiptType() throws {
        func rescind(_ edit: (inout AppleAppTransaction) -> Void) throws -> Data {
            var n = AppleNotification()
            n.notificationType = "RESCIND_CONSENT"
            n.notificationUUID = "u-app"
            n.signedDate = AppleTime(1_767_225_600_000)
            var d = AppleNotification.AppData()
            d.bundleId = "com.example"
            d.environment = "Sandbox"
            d.appAppleId = 1234
            n.appData = d
            var at = AppleAppTransaction()
            at.bundleId = "com.example"
            at.receiptType = "Sandbox"
            at.receiptCreationDate = AppleTime(1_767_225_600_000)
            edit(&at)
            return try auth.signNotification(n, appTransaction: at)
        }
        XCTAssertNoThrow(try ingestor.ingestV2(body: rescind { _ in }))
        refuseSlot("appData.signedAppTransactionInfo", try rescind { $0.bundleId = nil })
        refuseSlot("appData.signedAppTransactionInfo", try rescind { $0.receiptType = nil })
    }

    func testOriginalTransactionIdMustBeDigitsInEverySlot() throws {
        for bad in ["ledger:admin", "wechat:order:1", "apple:test", "1 ", "x1", "123456789012345678901", "١"] {
            for (slot, body) in [
                ("data.signedTransactionInfo.originalTransactionId", try auth.signNotification(
                    sample.notification, transaction: sample.transaction, editTransaction: { $0["originalTransactionId"] = bad })),
                ("data.signedRenewalInfo.originalTransactionId", try auth.signNotification(
                    sample.notification, renewal: sample.renewal, editRenewal: { $0["originalTransactionId"] = bad })),
            ] {
                assertRefused("invalid_original_transaction_id", .malformed) { try ingestor.ingestV2(body: body) }
                do { _ = try ingestor.ingestV2(body: body) } catch { XCTAssertTrue(error.message.contains(slot), error.message) }
            }
        }
        let twenty = AppleTestAuthority.sample(originalTransactionId: "12345678901234567890")
        XCTAssertEqual(try ingestor.ingestV2(body: auth.signSample(twenty)).streamId, "12345678901234567890")
    }

    /// Values that become keys of the projection tables are bounded: a longer one would be stored
    /// and then stop every projection update on PostgreSQL's btree entry limit.
    func testProjectionKeysAreBounded() throws {
        let long = String(repeating: "x", count: Identifier.keyBytes + 1), fits = String(repeating: "x", count: Identifier.keyBytes)
        for field in ["transactionId", "productId", "appAccountToken"] {
            assertRefused("malformed", .malformed) {
                try ingestor.ingestV2(body: auth.signNotification(sample.notification, transaction: sample.transaction,
                                                                  editTransaction: { $0[field] = long }))
            }
            XCTAssertNoThrow(try ingestor.ingestV2(body: auth.signNotification(sample.notification, transaction: sample.transaction,
                                                                               editTransaction: { $0[field] = fits })))
        }
        assertRefused("malformed", .malformed) {
            try ingestor.ingestV2(body: auth.signNotification(sample.notification, renewal: sample.renewal, editRenewal: { $0["autoRenewProductId"] = long }))
        }
    }

    /// What must never be refused: a consistent, verified message the ledger does not fully
    /// understand. It is stored, and its facts say what the ledger could read.
    func testUnknownTypesAndFieldsAreAccepted() throws {
        var s = AppleTestAuthority.sample(type: "SOMETHING_APPLE_ADDS_IN_2027", subtype: "ALSO_NEW")
        s.transaction.type = "Some New Product Type"
        let body = try auth.signNotification(
            s.notification, transaction: s.transaction, renewal: s.renewal,
            editTransaction: { $0["newTransactionField"] = ["nested": [1, 2]]; $0["transactionReason"] = "GIFT" },
            editRenewal: { $0["newRenewalField"] = "x"; $0["eligibleWinBackOfferIds"] = [] },
            editOuter: { o in
                o["version"] = "3.0"
                o["newOuterField"] = true
                var d = o["data"] as! [String: Any]
                d["newDataField"] = 7
                d["status"] = 9
                o["data"] = d
            })
        let event = try ingestor.ingestV2(body: body)
        XCTAssertEqual(event.type, "SOMETHING_APPLE_ADDS_IN_2027/ALSO_NEW")
        XCTAssertEqual(event.streamId, "1000000000000001")
        let p = try jsonObject(event.payload)
        XCTAssertNotNil((p["transactionInfo"] as? [String: Any])?["newTransactionField"], "unknown members are kept")
        let facts = FactDecoder.facts(of: event)
        // Fact schema 5: every transaction snapshot also states its revocation or, as here, a reversal.
        XCTAssertEqual(Set(facts.map(\.kind)), [.transaction, .renewal, .reversal], "\(facts)")
        // An unknown notification without nested data is accepted too.
        var bare = AppleTestAuthority.sample(type: "PRICE_CHANGE", subtype: nil).notification
        bare.data?.status = nil
        XCTAssertNoThrow(try ingestor.ingestV2(body: auth.signNotification(bare)))
    }

    // MARK: malformed

    func testTruncatedJWS() throws {
        let good = try jsonObject(auth.signSample(sample))["signedPayload"] as! String
        let cut = String(good[..<good.lastIndex(of: ".")!])
        refuse("malformed", .malformed, try AppleTestAuthority.body(signedPayload: cut))
        refuse("malformed", .malformed, try AppleTestAuthority.body(signedPayload: String(good.prefix(good.count / 2))))
        refuse("malformed", .malformed, try AppleTestAuthority.body(signedPayload: good + ".extra"))
    }

    func testNonBase64URLSegments() throws {
        let good = try jsonObject(auth.signSample(sample))["signedPayload"] as! String
        let parts = good.split(separator: ".").map(String.init)
        refuse("malformed", .malformed, try withSegment(1, parts[1].replacingOccurrences(of: "e", with: "+")))
        refuse("malformed", .malformed, try withSegment(1, parts[1] + "="))
        refuse("malformed", .malformed, try withSegment(2, parts[2] + " "))
        refuse("malformed", .malformed, try withSegment(0, parts[0] + "A"))  // length ≡ 1 mod 4
        refuse("malformed", .malformed, try withSegment(2, String(parts[2].dropLast(4))))  // 61 bytes
    }

    func testPayloadNotJSON() throws {
        let jws = try auth.sign(payload: Data("not json at all".utf8))
        refuse("malformed", .malformed, try AppleTestAuthority.body(signedPayload: jws))
        let array = try auth.sign(payload: Data("[1,2,3]".utf8))
        refuse("malformed", .malformed, try AppleTestAuthority.body(signedPayload: array))
    }

    func testTenThousandDeepBodyIsRefusedCheaply() throws {
        let deep = Data(("{\"signedPayload\":" + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}").utf8)
        // Refused by the byte-level depth check, before any recursive JSON parser sees it.
        refuse("json_too_deep", .malformed, deep)
        let unbalanced = Data(String(repeating: "{\"a\":", count: 10_000).utf8)
        refuse("json_too_deep", .malformed, unbalanced)
    }

    func testTenThousandDeepSignedPayload() throws {
        let jws = try auth.sign(payload: Data((String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)).utf8))
        refuse("json_too_deep", .malformed, try AppleTestAuthority.body(signedPayload: jws))
    }

    func testBodyNotJSONOrWrongShape() throws {
        refuse("malformed", .malformed, Data("signedPayload=abc".utf8))
        refuse("malformed", .malformed, Data())
        refuse("missing_field", .malformed, Data("{\"signedPayload\": 42}".utf8))
        refuse("missing_field", .malformed, Data("{\"payload\": \"a.b.c\"}".utf8))
    }

    func testTwoSectionsOrNone() throws {
        var n = sample.notification
        var s = AppleNotification.NotificationSummary()
        s.bundleId = "com.example"
        n.summary = s
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: auth.signNotification(n)) }
        n.summary = nil
        n.data = nil
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: auth.signNotification(n)) }
    }

    func testMissingNotificationUUIDAndWrongTypes() throws {
        var n = sample.notification
        n.notificationUUID = nil
        assertRefused("missing_field", .malformed) { try ingestor.ingestV2(body: auth.signNotification(n)) }
        assertRefused("malformed", .malformed) {
            try ingestor.ingestV2(body: auth.signNotification(sample.notification, editOuter: { o in
                var d = o["data"] as! [String: Any]
                d["appAppleId"] = "1234"
                o["data"] = d
            }))
        }
        assertRefused("malformed", .malformed) {
            try ingestor.ingestV2(body: auth.signNotification(sample.notification, editOuter: { $0["signedDate"] = "yesterday" }))
        }
    }

    // MARK: acceptance

    func testWrongBundleId() throws {
        let s = AppleTestAuthority.sample(bundleId: "com.somebody.else")
        assertRefused("app_mismatch", .notAccepted) { try ingestor.ingestV2(body: auth.signSample(s)) }
    }

    func testWrongAppAppleIdInProduction() throws {
        let s = AppleTestAuthority.sample(appAppleId: 9999, environment: "Production")
        let ing = Fixtures.ingestor(Fixtures.both)
        assertRefused("app_mismatch", .notAccepted) { try ing.ingestV2(body: auth.signSample(s)) }
        // In Sandbox the appAppleId is not checked (Apple's rule).
        XCTAssertNoThrow(try ing.ingestV2(body: auth.signSample(AppleTestAuthority.sample(appAppleId: 9999))))
    }

    func testProductionWithoutAppAppleId() throws {
        var s = AppleTestAuthority.sample(environment: "Production")
        s.notification.data?.appAppleId = nil
        let ing = Fixtures.ingestor(Fixtures.both)
        assertRefused("app_mismatch", .notAccepted) { try ing.ingestV2(body: auth.signSample(s)) }
    }

    func testWrongEnvironment() throws {
        let s = AppleTestAuthority.sample(environment: "Production")
        assertRefused("environment_mismatch", .notAccepted) { try ingestor.ingestV2(body: auth.signSample(s)) }
        let x = AppleTestAuthority.sample(environment: "Xcode")
        assertRefused("environment_mismatch", .notAccepted) { try ingestor.ingestV2(body: auth.signSample(x)) }
    }

    func testAcceptanceConfigurationRules() {
        XCTAssertThrowsError(try AppleAcceptance(bundleIds: ["a"], appAppleIds: [], environments: ["Production"])) {
            XCTAssertEqual($0 as? AppleConfigurationError, .productionWithoutAppAppleId)
        }
        XCTAssertThrowsError(try AppleAcceptance(bundleIds: [], appAppleIds: [1], environments: ["Sandbox"]))
        XCTAssertThrowsError(try AppleAcceptance(bundleIds: ["a"], appAppleIds: [1], environments: []))
        XCTAssertNoThrow(try AppleAcceptance(bundleIds: ["a"], appAppleIds: [], environments: ["Sandbox"]))
    }

    func testErrorKindsMapToStatusCodes() {
        XCTAssertEqual(AppleVerificationError.malformed("x").kind.httpStatus, 400)
        XCTAssertEqual(AppleVerificationError.badSignature.kind.httpStatus, 401)
        XCTAssertEqual(AppleVerificationError.appMismatch("x").kind.httpStatus, 422)
    }
}

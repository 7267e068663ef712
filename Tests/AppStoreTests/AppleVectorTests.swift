import Crypto
import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import AppStore

/// Every file of shared/apple-vectors with the outcome its README states.
final class AppleVectorTests: XCTestCase {
    private func libraryIngestor() throws -> AppleNotificationIngestor {
        let auth = try AppleTestAuthority.libraryTestChain()
        return AppleNotificationIngestor(verifier: auth.verifier(), acceptance: Fixtures.sandbox)
    }

    func testLibraryTestNotificationIsValidTEST() throws {
        let body = try AppleTestAuthority.body(signedPayload: vectorText("library-mock-signed/testNotification"))
        let event = try libraryIngestor().ingestV2(body: body)
        XCTAssertEqual(event.type, "TEST")
        XCTAssertEqual(event.streamId, StreamId.appleTest.text)
        XCTAssertEqual(event.dedupeKey.prefix(8), "9ad56bd2")
        XCTAssertEqual(event.environment, "Sandbox")
        XCTAssertEqual(event.signedAt, 1_681_314_324_000)
        XCTAssertEqual(event.raw, body)
    }

    func testLibraryTransactionAndRenewalInfoVerify() throws {
        let verifier = try AppleTestAuthority.libraryTestChain().verifier()
        let tx = try verifier.verify(vectorText("library-mock-signed/transactionInfo"), kind: .transaction)
        XCTAssertEqual(tx.payloadObject()["bundleId"] as? String, "com.example")
        XCTAssertEqual(tx.validationTime, 1_672_956_154_000)
        let ri = try verifier.verify(vectorText("library-mock-signed/renewalInfo"), kind: .renewalInfo)
        XCTAssertEqual(ri.payloadObject()["environment"] as? String, "Sandbox")
        // Without the profile tolerance the strict verifier refuses Apple's test PKI.
        let strict = SignedDataVerifier(trustedRoots: [try AppleTestAuthority.libraryTestChain().root])
        assertRefused("untrusted_chain", .unauthenticated) { try strict.verify(try! vectorText("library-mock-signed/renewalInfo"), kind: .renewalInfo) }
    }

    func testLibraryWrongBundleIdIsAppMismatch() throws {
        let body = try AppleTestAuthority.body(signedPayload: vectorText("library-mock-signed/wrongBundleId"))
        let ingestor = try libraryIngestor()
        assertRefused("app_mismatch", .notAccepted) { try ingestor.ingestV2(body: body) }
    }

    func testLibraryMissingX5CIsRefused() throws {
        let body = try AppleTestAuthority.body(signedPayload: vectorText("library-mock-signed/missingX5CHeaderClaim"))
        let ingestor = try libraryIngestor()
        assertRefused("missing_field", .malformed) { try ingestor.ingestV2(body: body) }
    }

    func testLegacyReceiptIsNotAJWS() throws {
        let verifier = try AppleTestAuthority.libraryTestChain().verifier()
        let legacy = try vectorText("library-mock-signed/legacyTransaction")
        assertRefused("malformed", .malformed) { try verifier.verify(legacy, kind: .transaction) }
    }

    func testXcodeSignedDataIsRefusedButDecodesFractionalMillis() throws {
        let verifier = SignedDataVerifier(trustedRoots: [AppleTrustedRoots.bundledAppleRootCAG3])
        for (name, kind) in [("xcode-signed-transaction", SignedDataKind.transaction), ("xcode-signed-renewal-info", .renewalInfo),
                             ("xcode-signed-app-transaction", .appTransaction)] {
            let jws = try vectorText("xcode/\(name)")
            assertRefused("invalid_chain_length", .unauthenticated) { try verifier.verify(jws, kind: kind) }
            let (header, _) = try SignedDataVerifier.decodeUnverified(jws)
            XCTAssertEqual(header["kid"] as? String, "Apple_Xcode_Key")
        }
        let txPayload = try JSONSerialization.data(withJSONObject: SignedDataVerifier.decodeUnverified(vectorText("xcode/xcode-signed-transaction")).payload)
        let tx = try JSONDecoder().decode(AppleTransaction.self, from: txPayload)
        XCTAssertEqual(tx.environment, "Xcode")
        let raw = try JSONSerialization.jsonObject(with: Data(Base64.decodeURL(Array(vectorText("xcode/xcode-signed-transaction").split(separator: ".")[1].utf8))!)) as! [String: Any]
        let purchase = (raw["purchaseDate"] as! NSNumber).doubleValue
        XCTAssertNotEqual(purchase, purchase.rounded(), "the vector should carry fractional milliseconds")
        XCTAssertEqual(tx.purchaseDate?.millis, Int64(purchase.rounded()))
        let app = try JSONDecoder().decode(AppleAppTransaction.self, from: JSONSerialization.data(
            withJSONObject: SignedDataVerifier.decodeUnverified(vectorText("xcode/xcode-signed-app-transaction")).payload))
        XCTAssertEqual(app.receiptType, "Xcode")
        XCTAssertEqual(app.originalPurchaseDate?.millis, -62_135_769_600_000)
        let ri = try JSONDecoder().decode(AppleRenewalInfo.self, from: JSONSerialization.data(
            withJSONObject: SignedDataVerifier.decodeUnverified(vectorText("xcode/xcode-signed-renewal-info")).payload))
        XCTAssertEqual(ri.environment, "Xcode")
        XCTAssertNotNil(ri.signedDate)
    }

    func testRealAppleSignedTransactionVerifiesAtSignedDateOnly() throws {
        let jws = try vectorText("real-apple-signed/sandboxTransactionConsumable.jws")
        let verifier = SignedDataVerifier(trustedRoots: try AppleTrustedRoots.fromEnvironmentValue(nil))
        let v = try verifier.verify(jws, kind: .transaction)
        XCTAssertEqual(v.validationTime, 1_739_161_772_561)
        XCTAssertEqual(v.payloadObject()["bundleId"] as? String, "com.goodheartapp")
        XCTAssertEqual(v.payloadObject()["transactionId"] as? String, "2000000847061981")
        XCTAssertTrue(v.leafSubject.contains("Prod ECC Mac App Store and iTunes Store Receipt Signing"))

        var forced = SignedDataVerifierOptions()
        forced.validationTimeOverride = 1_795_910_400_000  // 2026-11-29T00:00:00Z: the leaf ended 2025-10-11
        let atToday = SignedDataVerifier(trustedRoots: [AppleTrustedRoots.bundledAppleRootCAG3], options: forced)
        assertRefused("certificate_not_valid_at_signing_time", .unauthenticated) { try atToday.verify(jws, kind: .transaction) }

        // Against the library test root the real chain is untrusted.
        let wrongRoot = try AppleTestAuthority.libraryTestChain().verifier()
        assertRefused("untrusted_chain", .unauthenticated) { try wrongRoot.verify(jws, kind: .transaction) }
    }

    func testApplePKIFilesAndBundledRoot() throws {
        let root = try AppleVectors.read("apple-pki/AppleRootCA-G3.der")
        XCTAssertEqual([UInt8](root), BundledAppleRoot.der)
        XCTAssertEqual(Hex.encode(Digest.sha256(BundledAppleRoot.der)), BundledAppleRoot.sha256Hex)
        XCTAssertEqual(BundledAppleRoot.sha256Hex, "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179")
        // The copy in Resources/ is the same file.
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        XCTAssertEqual(FileManager.default.contents(atPath: repo.appendingPathComponent("Resources/AppleRootCA-G3.der").path), root)
        let wwdr = try X509Certificate(der: [UInt8](AppleVectors.read("apple-pki/AppleWWDRCA-G6.der")))
        XCTAssertTrue(wwdr.hasExtension(oid: AppleOID.wwdrIntermediate))
        XCTAssertEqual(Hex.encode(Digest.sha256(wwdr.der)), "bdd4ed6e74691f0c2bfd01be0296197af1379e0418e2d300efa9c3bef642ca30")
        let leaf = try X509Certificate(der: [UInt8](AppleVectors.read("apple-pki/AppleReceiptSigning-leaf-2025-2027.der")))
        XCTAssertTrue(leaf.hasExtension(oid: AppleOID.receiptSigningLeaf))
        XCTAssertEqual(Hex.encode(Digest.sha256(leaf.der)), "4c381556c16121e605d1fc2eef6d0de4e072ed65964fe72f575f19711e84c417")
    }

    func testRootLoaderReadsDERAndPEMFilesAndReportsBadPaths() throws {
        let dir = try AppleVectors.directory()
        let roots = try AppleTrustedRoots.fromEnvironmentValue(
            "\(dir.path)/library-test-chain/testCA.der:\(dir.path)/library-test-chain/testCA.pem: :\(dir.path)/apple-pki/AppleRootCA-G3.der")
        XCTAssertEqual(roots.count, 3)
        XCTAssertEqual(roots[0], roots[1])
        XCTAssertEqual(try AppleTrustedRoots.fromEnvironmentValue("").map(\.der), [BundledAppleRoot.der])
        XCTAssertThrowsError(try AppleTrustedRoots.load(paths: ["/nonexistent/root.der"])) {
            guard case AppleConfigurationError.unreadableRootFile = $0 else { return XCTFail("\($0)") }
        }
        XCTAssertThrowsError(try AppleTrustedRoots.load(paths: ["\(dir.path)/README.md"])) {
            guard case AppleConfigurationError.noCertificateInRootFile = $0 else { return XCTFail("\($0)") }
        }
    }

    /// library-payload-json: every notification variant decodes, and, signed by the test authority,
    /// lands in the stream StreamId documents.
    func testLibraryPayloadJSONVariants() throws {
        func load(_ name: String) throws -> [String: Any] {
            try jsonObject(AppleVectors.read("library-payload-json/\(name).json"))
        }
        func decode<T: Decodable>(_ t: T.Type, _ name: String) throws -> T {
            try JSONDecoder().decode(T.self, from: AppleVectors.read("library-payload-json/\(name).json"))
        }
        let n = try decode(AppleNotification.self, "signedNotification")
        XCTAssertEqual(n.data?.appAppleId, 41234)
        XCTAssertEqual(n.data?.status, 1)
        let s = try decode(AppleNotification.self, "signedSummaryNotification")
        XCTAssertEqual(s.summary?.storefrontCountryCodes, ["CAN", "USA", "MEX"])
        XCTAssertEqual(s.summary?.failedCount, 2)
        let e = try decode(AppleNotification.self, "signedExternalPurchaseTokenNotification")
        XCTAssertEqual(e.externalPurchaseToken?.tokenCreationDate?.millis, 1_698_148_950_000)
        let r = try decode(AppleNotification.self, "signedRescindConsentNotification")
        XCTAssertEqual(r.appData?.signedAppTransactionInfo, "signed_app_transaction_info_value")
        XCTAssertEqual(try decode(AppleNotification.self, "signedConsumptionRequestNotification").data?.consumptionRequestReason, "UNINTENDED_PURCHASE")
        XCTAssertEqual(try decode(AppleNotification.AppData.self, "appData").appAppleId, 987_654_321)
        let t = try decode(AppleTransaction.self, "signedTransaction")
        XCTAssertEqual(t.billingPlanType, "MONTHLY")
        XCTAssertEqual(t.price, 10990)
        let rev = try decode(AppleTransaction.self, "signedTransactionWithRevocation")
        XCTAssertEqual(rev.revocationType, "REFUND_PRORATED")
        XCTAssertEqual(rev.revocationPercentage, 50000)
        let ri = try decode(AppleRenewalInfo.self, "signedRenewalInfo")
        XCTAssertEqual(ri.eligibleWinBackOfferIds, ["eligible1", "eligible2"])
        XCTAssertEqual(ri.renewalBillingPlanType, "MONTHLY")
        // API responses and errors are JSON objects; error bodies carry Apple's codes.
        for (name, code) in [("apiException", 5_000_000), ("apiTooManyRequestsException", 4_290_000), ("transactionIdNotFoundError", 4_040_010)] {
            XCTAssertEqual(try load(name)["errorCode"] as? Int, code)
        }
        for name in ["getAllSubscriptionStatusesResponse", "transactionHistoryResponse", "getNotificationHistoryResponse",
                     "getRefundHistoryResponse", "transactionInfoResponse"] {
            XCTAssertFalse(try load(name).isEmpty, name)
        }

        // Sign each notification variant (LocalTesting → Sandbox, placeholders → real nested JWS).
        let auth = Fixtures.authority
        let ingestor = Fixtures.ingestor(Fixtures.sandbox)
        func body(_ name: String, nested: (inout [String: Any]) throws -> Void = { _ in }) throws -> Data {
            var obj = try load(name)
            for section in ["data", "summary", "appData"] {
                guard var sec = obj[section] as? [String: Any] else { continue }
                sec["environment"] = "Sandbox"
                sec["appAppleId"] = 1234
                obj[section] = sec
            }
            try nested(&obj)
            let payload = try JSONSerialization.data(withJSONObject: obj)
            return try AppleTestAuthority.body(signedPayload: auth.sign(payload: payload))
        }
        func ingest(_ name: String, nested: (inout [String: Any]) throws -> Void = { _ in }) throws -> NewEvent {
            try ingestor.ingestV2(body: body(name, nested: nested))
        }
        let sample = AppleTestAuthority.sample(originalTransactionId: "12345")
        let sub = try ingest("signedNotification") { obj in
            var d = obj["data"] as! [String: Any]
            d["signedTransactionInfo"] = try auth.sign(sample.transaction)
            d["signedRenewalInfo"] = try auth.sign(sample.renewal)
            obj["data"] = d
        }
        XCTAssertEqual(sub.streamId, "12345")
        XCTAssertEqual(sub.type, "SUBSCRIBED/INITIAL_BUY")
        XCTAssertEqual(try ingest("signedSummaryNotification").streamId, StreamId.appleSummary(requestIdentifier: "efb27071-45a4-4aca-9854-2a1e9146f265").text)
        let sandboxToken = try ingest("signedExternalPurchaseTokenSandboxNotification")
        XCTAssertEqual(sandboxToken.streamId, StreamId.appleExternalPurchase(id: "SANDBOX_b2158121-7af9-49d4-9561-1f588205523e").text)
        XCTAssertEqual(sandboxToken.environment, "Sandbox")
        // The non-SANDBOX token is inferred Production, which this acceptance does not take.
        let productionToken = try body("signedExternalPurchaseTokenNotification")
        assertRefused("environment_mismatch", .notAccepted) { try ingestor.ingestV2(body: productionToken) }
        var app = AppleAppTransaction()
        app.bundleId = "com.example"
        app.receiptType = "Sandbox"
        app.appAppleId = 1234
        app.receiptCreationDate = AppleTime(1_767_225_600_000)
        let rescind = try ingest("signedRescindConsentNotification") { obj in
            var d = obj["appData"] as! [String: Any]
            d["signedAppTransactionInfo"] = try auth.sign(app)
            obj["appData"] = d
        }
        XCTAssertEqual(rescind.streamId, StreamId.appleApp(bundleId: "com.example").text)
        XCTAssertEqual(rescind.type, "RESCIND_CONSENT")
        let stored = try jsonObject(rescind.payload)
        XCTAssertEqual((stored["appTransactionInfo"] as? [String: Any])?["receiptType"] as? String, "Sandbox")
    }
}

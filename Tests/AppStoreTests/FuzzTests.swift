import Crypto
import Foundation
import LedgerCore
import LedgerTesting
import LedgerStore
import Postgres
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import XCTest
@testable import AppStore

/// Seeded mutation fuzzing of every AppStore parser that reads untrusted bytes: base64 / base64url,
/// compact JWS segments, the JWS header (re-signed), `ingestV2` on whole bodies, the notification,
/// transaction and renewal payloads (mutated, then RE-SIGNED with the test authority so decoding,
/// nested JWS and the acceptance policy are reached rather than only the signature check), and
/// `ingestV1` bodies.
///
/// The contract under test: every input ends as a `NewEvent` or a typed `AppleVerificationError`
/// of a request status (400/401/422, never a crash, a hang or a server fault), and an accepted event
/// is storable exactly as it is — its raw evidence is the posted bytes, its payload is JSON that
/// PostgreSQL's jsonb accepts, its text columns hold no NUL, its times fit `timestamptz`. That last
/// promise is checked locally for every accepted input and by the real PostgreSQL for a sample.
///
/// Signing: Apple's published library test chain (fixed keys, so the stored signed seeds verify on
/// any machine) with the verifier's chain cache; the JWS header is encoded once and every mutated
/// payload costs one ES256 signature (OpenSSL, fast even in a debug build).
///
/// Each run prints its seed and rate; `LEDGER_FUZZ_SEED=0x… swift test --filter AppStoreTests.FuzzTests/<test>`
/// replays it, `LEDGER_FUZZ_ITERATIONS` changes the count (default 100,000 per parser).
final class FuzzTests: XCTestCase {
    static let iterations = Int(ProcessInfo.processInfo.environment["LEDGER_FUZZ_ITERATIONS"] ?? "") ?? 100_000
    static let secret = "5e3f9c2a7b1d4e6f8a0b2c4d6e8f0a1b"

    // MARK: base64

    /// Oracle: Foundation's codec (compiled optimised, independent of ours). Ours accepts exactly the
    /// canonical spellings: what it decodes re-encodes to the same text, and every canonical text decodes.
    func testBase64Decoding() throws {
        let tally = AppleTally()
        lastTally = tally
        var seeds = try FuzzKit.signedCorpus().flatMap { $0.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).map(Array.init) }
        seeds += FuzzKit.pki.certificateTexts.map { Array($0.utf8) }
        seeds += ["", "QQ", "QUI", "QUJD", "QQ==", "QUI=", "-_-_", "+/+/", "AA", "AB", "AAB", "AAE="].map { Array($0.utf8) }
        try fuzz("base64", corpus: seeds, seed: 0xA55E_0001) { input in
            let text = String(decoding: input, as: UTF8.self)
            let std = Data(base64Encoded: text)
            let canonicalStd = std.map { $0.base64EncodedString() == text && text.utf8.elementsEqual(input) } ?? false
            if let ours = Base64.decodeStandard(input) {
                guard canonicalStd, let std, ours.elementsEqual(std) else {
                    throw FuzzViolation("decodeStandard accepted a non-canonical spelling")
                }
                tally.count("standard")
            } else if canonicalStd {
                throw FuzzViolation("decodeStandard refused canonical base64")
            }
            let asStd = FuzzKit.standardFromURL(input)
            let url = asStd.flatMap { Data(base64Encoded: Data($0)) }
            let canonicalURL = url.map { FuzzKit.base64URL([UInt8]($0)) == input } ?? false
            if let ours = Base64.decodeURL(input) {
                guard canonicalURL, let url, ours.elementsEqual(url) else {
                    throw FuzzViolation("decodeURL accepted a non-canonical spelling")
                }
                tally.count("url")
            } else if canonicalURL {
                throw FuzzViolation("decodeURL refused canonical base64url")
            } else {
                tally.count("refused")
            }
        }
        XCTAssertGreaterThan(tally["url"], Self.iterations / 20, "\(tally)")
        XCTAssertGreaterThan(tally["standard"], Self.iterations / 100, "\(tally)")
        XCTAssertGreaterThan(tally["refused"], Self.iterations / 20, "\(tally)")
    }

    // MARK: compact JWS

    /// Whole compact JWS texts (stored seeds signed by the test chain, and Apple's library vectors),
    /// mutated anywhere: segment splitting, base64url, header and payload JSON, x5c certificate
    /// parsing and chain building, signature length and value. Unsigned mutation can only be refused,
    /// so the strict oracle is: whatever verifies is byte-identical to a seed (one accepted spelling).
    func testCompactJWSParsing() throws {
        let seeds = try FuzzKit.signedCorpus(kind: "jws")
        let known = Set(seeds)
        let verifier = FuzzKit.pki.verifier()
        let kinds: [SignedDataKind] = [.transaction, .notification, .renewalInfo, .appTransaction]
        let tally = AppleTally()
        lastTally = tally
        try fuzz("compact JWS", corpus: seeds, seed: 0xA55E_0002) { input in
            do {
                let verified = try verifier.verify(bytes: input, kind: kinds[input.count % 4])
                guard known.contains(input) else { throw FuzzViolation("a mutated JWS verified") }
                try FuzzKit.checkStorable(json: verified.payloadJSON)
                tally.count("verified")
            } catch let error as AppleVerificationError {
                try tally.refused(error)
            }
        }
        for code in ["verified", "malformed", "bad_signature", "invalid_certificate", "invalid_chain_length", "missing_field"] {
            assertReached(tally, code)
        }
    }

    /// The JWS header JSON is mutated and the result RE-SIGNED with the leaf key, so the header
    /// checks (alg, crit, x5c shape, certificate decoding, OIDs, chain) all run on signed input.
    /// Oracle: a header that verifies names ES256, no crit, and the real leaf and intermediate.
    func testJWSHeaderResigned() throws {
        let pki = FuzzKit.pki
        let seeds = try FuzzKit.corpus("header").map { FuzzKit.expand($0, pki.headerPlaceholders) }
        let payload = FuzzKit.base64URL(try FuzzKit.corpus("transaction")[0])
        let verifier = pki.verifier()
        let tally = AppleTally()
        lastTally = tally
        try fuzz("JWS header (re-signed)", corpus: seeds, seed: 0xA55E_0003) { input in
            let expanded = FuzzKit.expand(input, pki.headerPlaceholders)
            var jws = FuzzKit.base64URL(expanded)
            jws.append(UInt8(ascii: "."))
            jws += payload
            // A header that is not a JSON object is refused before the signature is looked at.
            let signature = FuzzKit.isJSONObject(expanded) ? try pki.leafKey.signES256(jws) : FuzzPKI.unsigned
            tally.count(signature == FuzzPKI.unsigned ? "(not signed)" : "(signed)")
            jws.append(UInt8(ascii: "."))
            jws += FuzzKit.base64URL(signature)
            do {
                _ = try verifier.verify(bytes: jws, kind: .transaction)
                let header = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(expanded)) as? [String: Any])
                guard header["alg"] as? String == "ES256", header["crit"] == nil,
                      let x5c = header["x5c"] as? [String], x5c.count == 3,
                      x5c[0] == pki.certificateTexts[0], x5c[1] == pki.certificateTexts[1] else {
                    throw FuzzViolation("a header verified without ES256 and the real leaf and intermediate")
                }
                tally.count("verified")
            } catch let error as AppleVerificationError {
                try tally.refused(error)
            }
        }
        for code in ["verified", "malformed", "unsupported_algorithm", "invalid_certificate", "invalid_chain_length", "missing_field"] {
            assertReached(tally, code)
        }
    }

    // MARK: ingestV2

    /// Whole posted bodies (stored, signed) mutated anywhere: envelope JSON, the JWS, nested JWS.
    /// Oracle: an accepted body carries one of the seeds' signed payloads, and raw is the input.
    func testIngestV2Bodies() async throws {
        let seeds = try FuzzKit.signedCorpus(kind: "v2")
        let signed = Set(try seeds.map { try XCTUnwrap(try JSONSerialization.jsonObject(with: Data($0)) as? [String: Any])["signedPayload"] as? String })
        let ingestor = FuzzKit.ingestor()
        let tally = AppleTally()
        lastTally = tally
        try fuzz("ingestV2 body", corpus: seeds, seed: 0xA55E_0004) { input in
            try tally.ingest(input) {
                let event = try ingestor.ingestV2(body: Data(input))
                let body = try JSONSerialization.jsonObject(with: Data(input)) as? [String: Any]
                guard let payload = body?["signedPayload"] as? String, signed.contains(payload) else {
                    throw FuzzViolation("a body was accepted whose signedPayload is not one Apple (the test chain) signed")
                }
                return event
            }
        }
        for code in ["accepted", "malformed", "bad_signature", "missing_field", "json_too_deep"] {
            assertReached(tally, code)
        }
        try await tally.storeSample()
    }

    /// The notification payload JSON is mutated, its `@TX@`-style placeholders are replaced by
    /// nested JWS signed once, and the result is signed as the outer JWS: every input reaches JSON
    /// decoding, section and identity checks, nested verification and agreement, and acceptance.
    func testNotificationPayloadsResigned() async throws {
        let pki = FuzzKit.pki
        let nested = try FuzzKit.nestedPlaceholders()
        let raw = try FuzzKit.corpus("notification")
        let seeds = raw + raw.map { FuzzKit.expand($0, nested) }
        let ingestor = FuzzKit.ingestor()
        let tally = AppleTally()
        lastTally = tally
        try fuzz("notification payload (re-signed)", corpus: seeds, seed: 0xA55E_0005) { input in
            let (jws, signed) = try pki.jws(payload: FuzzKit.expand(input, nested))
            tally.count(signed ? "(signed)" : "(not signed)")
            let body = FuzzPKI.body(jws: jws)
            try tally.ingest(body) { try ingestor.ingestV2(body: Data(body)) }
        }
        XCTAssertGreaterThan(tally["accepted"], Self.iterations / 50, "mutations should leave many notifications acceptable: \(tally)")
        for code in ["malformed", "missing_field", "nested_mismatch", "app_mismatch", "environment_mismatch", "bad_signature",
                     "certificate_not_valid_at_signing_time", "json_too_deep"] {
            assertReached(tally, code)
        }
        try await tally.storeSample()
    }

    /// Transaction and renewal info payloads, mutated and signed as the nested
    /// `signedTransactionInfo` / `signedRenewalInfo` of a signed notification (a renewal seed is
    /// recognised by its `autoRenew…` members, so the routing is a function of the input): decoding,
    /// the validation time, the slot's type, bundle / environment / originalTransactionId agreement,
    /// the stream id and `expiresAt` all come from the mutated, authentic-looking nested value.
    /// Oracle, besides storability: an accepted payload is its slot's type, checked here
    /// independently of the ingestor (`checkSlotType`), and the stream is its originalTransactionId.
    func testNestedPayloadsResigned() async throws {
        let pki = FuzzKit.pki
        func template(_ name: String, _ slot: String) throws -> ([UInt8], [UInt8]) {
            let text = try FuzzKit.file(name)
            let at = try XCTUnwrap(FuzzKit.find(Array(slot.utf8), in: text))
            return (Array(text[..<at]), Array(text[(at + slot.utf8.count)...]))
        }
        let transaction = try template("notification/did-renew-sandbox.json", "@TX@")
        let renewal = try template("notification/renewal-only.json", "@RI@")
        let marker = Array("\"autoRenew".utf8)
        let ingestor = FuzzKit.ingestor()
        let tally = AppleTally()
        lastTally = tally
        let seeds = try FuzzKit.corpus("transaction") + FuzzKit.corpus("renewal")
        try fuzz("transaction / renewal payload (re-signed)", corpus: seeds, seed: 0xA55E_0006) { input in
            let isRenewal = FuzzKit.find(marker, in: input) != nil
            let (inner, signed) = try pki.jws(payload: input)
            guard signed else {
                // Not a JSON object: the nested verification refuses it before any signature math,
                // so it is verified directly rather than wrapped in a signed notification (which
                // would cost two ES256 operations to reach the same refusal).
                tally.count("(not signed)")
                do {
                    _ = try ingestor.verifier.verify(bytes: inner, kind: isRenewal ? .renewalInfo : .transaction)
                    throw FuzzViolation("a nested value that is not a JSON object verified")
                } catch let error as AppleVerificationError {
                    try tally.refused(error)
                }
                return
            }
            tally.count("(signed)")
            let (prefix, suffix) = isRenewal ? renewal : transaction
            let (outer, _) = try pki.jws(payload: prefix + inner + suffix)
            let body = FuzzPKI.body(jws: outer)
            try tally.ingest(body) {
                let event = try ingestor.ingestV2(body: Data(body))
                try FuzzKit.checkSlotType(input, isRenewal: isRenewal, streamId: event.streamId)
                return event
            }
        }
        XCTAssertGreaterThan(tally["accepted"], Self.iterations / 50, "\(tally)")
        for code in ["malformed", "nested_mismatch", "certificate_not_valid_at_signing_time", "json_too_deep",
                     "wrong_nested_type", "invalid_original_transaction_id"] {
            assertReached(tally, code)
        }
        try await tally.storeSample()
    }

    // MARK: ingestV1

    /// Unsigned V1 bodies carrying the shared secret. Oracle, besides storability: neither stored
    /// column contains the secret, raw is the input with only the password value replaced, the
    /// payload is the body alone under `responseBodyV1`, and the fact decoder reads the event as
    /// ingestion filed it (same subscription, business time, no unreadable fact).
    func testIngestV1Bodies() async throws {
        let secret = Array(Self.secret.utf8)
        let seeds = try FuzzKit.corpus("v1").map { FuzzKit.expand($0, [(Array("@SECRET@".utf8), secret)]) }
        let ingestor = FuzzKit.ingestor()
        let quoted = [UInt8(ascii: "\"")] + secret + [UInt8(ascii: "\"")]
        let redacted = Array("\"<redacted>\"".utf8)
        let tally = AppleTally()
        lastTally = tally
        try fuzz("ingestV1 body", corpus: seeds, seed: 0xA55E_0008) { input in
            try tally.ingest(input, rawIsInput: false) {
                let event = try ingestor.ingestV1(body: Data(input), sharedSecret: Self.secret)
                let raw = [UInt8](event.raw)
                let columns = [event.streamId, event.dedupeKey, event.type, event.environment ?? ""].map { Array($0.utf8) }
                for stored in [raw, [UInt8](event.payload)] + columns where FuzzKit.find(secret, in: stored) != nil {
                    throw FuzzViolation("the shared secret was stored")
                }
                // With the secret spelled once (the password member), raw is byte-for-byte the input
                // with that value replaced; otherwise the redactor re-encodes, which is allowed.
                if let first = FuzzKit.find(quoted, in: input), FuzzKit.find(secret, in: Array(input[(first + 2)...])) == nil {
                    let expected = Array(input[..<first]) + redacted + Array(input[(first + quoted.count)...])
                    guard raw == expected else { throw FuzzViolation("raw differs from the input beyond the redacted password") }
                }
                try FuzzKit.checkV1Facts(event)
                return event
            }
        }
        XCTAssertGreaterThan(tally["accepted"], Self.iterations / 20, "\(tally)")
        for code in ["malformed", "missing_field", "bad_shared_secret", "app_mismatch", "environment_mismatch", "json_too_deep",
                     "invalid_original_transaction_id"] {
            assertReached(tally, code)
        }
        try await tally.storeSample()
    }

    // MARK: harness

    override func tearDown() {
        if let tally = lastTally { print("outcomes: \(tally)") }
        lastTally = nil
        super.tearDown()
    }

    private var lastTally: AppleTally?

    /// Coverage of the refusal paths is asserted only for runs long enough to reach them all
    /// (the default 100,000); short local runs (`LEDGER_FUZZ_ITERATIONS`) check the contract only.
    func assertReached(_ tally: AppleTally, _ code: String, file: StaticString = #filePath, line: UInt = #line) {
        guard Self.iterations >= 50_000 else { return }
        XCTAssertGreaterThan(tally[code], 0, "'\(code)' never reached: \(tally)", file: file, line: line)
    }

    func fuzz(_ name: String, corpus: [[UInt8]], seed fallback: UInt64, body: ([UInt8]) throws -> Void) throws {
        let seed = MutationFuzzer.seed(default: fallback)
        let report = MutationFuzzer.run(corpus: corpus, iterations: Self.iterations, seed: seed, timeBudget: .seconds(2),
                                        extraTokens: FuzzKit.tokens, body: body)
        print("fuzz \(name): \(report)")
        XCTAssertTrue(report.failures.isEmpty, "\(name): \(report)")
        XCTAssertEqual(report.iterations, Self.iterations)
    }
}

struct FuzzViolation: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Counts outcomes by error code ("accepted" for an event), checks each against the contract, and
/// keeps a sample of accepted events for the PostgreSQL check.
final class AppleTally: CustomStringConvertible {
    private var counts: [String: Int] = [:]
    private var sample: [NewEvent] = []
    private var sampled: Set<Data> = []
    static let sampleLimit = 4_000

    subscript(code: String) -> Int { counts[code, default: 0] }
    func count(_ code: String) { counts[code, default: 0] += 1 }
    var description: String { counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") }

    func refused(_ error: AppleVerificationError) throws {
        guard [400, 401, 422].contains(error.kind.httpStatus) else {
            throw FuzzViolation("refused as \(error.kind.httpStatus): \(error)")
        }
        if FuzzKit.find(Array(FuzzTests.secret.utf8), in: Array(error.description.utf8)) != nil {
            throw FuzzViolation("an error message reveals the shared secret: \(error.code)")
        }
        count(error.code)
    }

    /// `ingest` answers an event or throws AppleVerificationError; anything else is a violation.
    func ingest(_ input: [UInt8], rawIsInput: Bool = true, _ ingest: () throws -> NewEvent) throws {
        let event: NewEvent
        do {
            event = try ingest()
        } catch let error as AppleVerificationError {
            return try refused(error)
        }
        if rawIsInput, event.raw != Data(input) { throw FuzzViolation("raw is not the posted body") }
        try FuzzKit.checkStorable(event)
        count("accepted")
        // Accepted but not understood (stored, and said so by an unreadable fact): allowed for a
        // verified message, counted so a run shows how often the decoder gives up.
        if FactDecoder.facts(of: event).contains(where: { $0.kind == .unreadable }) { count("(accepted, unreadable facts)") }
        if sample.count < Self.sampleLimit, sampled.insert(event.payload).inserted { sample.append(event) }
    }

    /// Appends the sampled accepted events through the real `EventStore` into a migrated database
    /// of the project-local PostgreSQL (as the `ledger_service` role), then reads each new one back:
    /// raw must come back byte-for-byte and the jsonb payload as the same JSON value.
    func storeSample() async throws {
        guard !sample.isEmpty else { return }
        let database = try TestDatabase.create()
        let ledger = Store(.init(databaseURL: database.serviceConninfo, poolSize: 2, liveProjections: false))
        defer {
            ledger.close()
            try? database.drop()
        }
        let store = ledger.events
        var stored: [(Int64, NewEvent)] = []
        // Each sampled event gets its own dedupe key (its index, then the key cut to fit), so every one is
        // inserted and read back rather than answered as a duplicate of an earlier mutation.
        let sample = self.sample.enumerated().map { i, event in
            var unique = event
            unique.dedupeKey = "\(i):" + String(decoding: Array(event.dedupeKey.utf8.prefix(1000)), as: UTF8.self)
            return unique
        }
        var start = 0
        while start < sample.count {
            let chunk = Array(sample[start..<min(sample.count, start + 100)])
            start += chunk.count
            do {
                for (outcome, event) in zip(try await store.append(chunk), chunk) where !outcome.duplicate {
                    stored.append((outcome.position, event))
                }
            } catch {
                // All-or-nothing: find the event the store refused.
                for event in chunk {
                    do { _ = try await store.append(event) } catch {
                        XCTFail("the store refused an accepted event (\(error)): \(event.type) \(event.streamId.debugDescription) "
                                + "payload \(String(decoding: event.payload.prefix(300), as: UTF8.self))")
                        return
                    }
                }
                throw error
            }
        }
        let back = try await store.readAll(after: 0, limit: sample.count + 1)
        let byPosition = Dictionary(back.map { ($0.position, $0.event) }, uniquingKeysWith: { a, _ in a })
        for (position, event) in stored {
            guard let read = byPosition[position] else { XCTFail("event at \(position) was not read back"); continue }
            XCTAssertEqual(read.raw, event.raw, "raw changed in storage")
            XCTAssertEqual(read.streamId, event.streamId)
            XCTAssertEqual(read.dedupeKey, event.dedupeKey)
            XCTAssertEqual(read.expiresAt, event.expiresAt)
            let a = try JSONSerialization.jsonObject(with: read.payload) as? NSDictionary
            let b = try JSONSerialization.jsonObject(with: event.payload) as? NSDictionary
            XCTAssertEqual(a, b, "payload changed in storage")
        }
        XCTAssertEqual(stored.count, sample.count, "every sampled event is new")
        print("EventStore stored and read back \(stored.count) accepted events")
    }
}

/// The test PKI, corpus access and the cheap encoders the harness needs per input.
enum FuzzKit {
    static let pki: FuzzPKI = try! FuzzPKI(authority: AppleTestAuthority.libraryTestChain())

    static func ingestor() -> AppleNotificationIngestor {
        let acceptance = try! AppleAcceptance(bundleIds: ["com.example"], appAppleIds: [1234], environments: ["Sandbox", "Production"])
        return AppleNotificationIngestor(verifier: pki.verifier(), acceptance: acceptance)
    }

    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/corpus/apple")

    static func file(_ relative: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: directory.appendingPathComponent(relative)))
    }

    static func corpus(_ sub: String) throws -> [[UInt8]] {
        let dir = directory.appendingPathComponent(sub)
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { !$0.hasPrefix(".") }.sorted()
        XCTAssertFalse(names.isEmpty, "no seeds in \(dir.path)")
        return try names.map { [UInt8](try Data(contentsOf: dir.appendingPathComponent($0))) }
    }

    /// Seeds signed by the library test chain, stored so that they are the same on every run:
    /// `jws/` compact JWS, `v2/` posted bodies.
    static func signedCorpus(kind: String = "jws") throws -> [[UInt8]] {
        try corpus("signed/" + kind).map { trimmed($0) }
    }

    static func trimmed(_ b: [UInt8]) -> [UInt8] {
        var b = b
        while let last = b.last, last == 0x0A || last == 0x0D || last == 0x20 { b.removeLast() }
        return b
    }

    /// The nested JWS the notification seeds name by placeholder, signed once per process.
    static func nestedPlaceholders() throws -> [([UInt8], [UInt8])] {
        try nestedCache.withLock { cache in
            if let cache { return cache }
            let made: [([UInt8], [UInt8])] = [
                (Array("@TXP@".utf8), try pki.jws(payload: file("transaction/production.json")).jws),
                (Array("@TX@".utf8), try pki.jws(payload: file("transaction/subscription.json")).jws),
                (Array("@RI@".utf8), try pki.jws(payload: file("renewal/auto-renew.json")).jws),
                (Array("@AT@".utf8), try pki.jws(payload: file("app-transaction/sandbox.json")).jws),
            ]
            cache = made
            return made
        }
    }

    private static let nestedCache = Mutex<[([UInt8], [UInt8])]?>(nil)

    static let tokens: [[UInt8]] = [
        "@TX@", "@RI@", "@AT@", "@TXP@", "\"Sandbox\"", "\"Production\"", "\"Xcode\"", "\"LocalTesting\"", "\"com.example\"",
        "\"com.other\"", "1234", "\"data\":{}", "\"summary\":", "\"appData\":", "\"externalPurchaseToken\":", "null",
        "\"signedDate\":", "\"expiresDate\":", "\"receiptCreationDate\":", "\"originalTransactionId\":", "\"notificationUUID\":",
        "\"notificationType\":", "\"subtype\":", "\"environment\":", "\"bundleId\":", "\"appAppleId\":", "\"alg\":\"none\"",
        "\"alg\":\"HS256\"", "\"crit\":[\"b64\"]", "\"x5c\":[]", "@LEAF@", "@INT@", "@ROOT@", "\"password\":", "\"bid\":",
        "\"latest_receipt_info\":[]", "\"expires_date_ms\":\"", "\"PROD\"", "1767225600000", "1e3", "-1767225600000",
        "9223372036854775807", "\\u0000", "\\u0061", ".", "..", "=",
        "\"transactionId\":", "\"productId\":", "\"purchaseDate\":", "\"autoRenewProductId\":", "\"ledger:admin\"",
        "\"auto_renew_product_id\":", "\"original_transaction_id\":\"", "\"transaction_id\":", "\"purchase_date_ms\":\"",
        "\"cancellation_date_ms\":\"", "\"pending_renewal_info\":[]", "\"com.example.pro\"",
    ].map { Array($0.utf8) }

    // MARK: the contract for an accepted event

    /// An accepted nested payload is its slot's type (reference/apple.md §2.5, §2.6), read here
    /// with Foundation alone: a transaction has transactionId, originalTransactionId (1–20 ASCII
    /// digits), productId, a numeric purchaseDate, bundleId and environment; a renewal info has
    /// originalTransactionId, autoRenewProductId and environment and no transactionId. The event
    /// is filed under that originalTransactionId.
    static func checkSlotType(_ payload: [UInt8], isRenewal: Bool, streamId: String) throws {
        guard let o = (try? JSONSerialization.jsonObject(with: Data(payload))) as? [String: Any] else {
            throw FuzzViolation("an accepted nested payload is not a JSON object")
        }
        func text(_ k: String) -> String? { (o[k] as? String).flatMap { $0.isEmpty ? nil : $0 } }
        let required = isRenewal ? ["originalTransactionId", "autoRenewProductId", "environment"]
            : ["transactionId", "originalTransactionId", "productId", "bundleId", "environment"]
        for k in required where text(k) == nil { throw FuzzViolation("accepted a \(isRenewal ? "renewal" : "transaction") without \(k)") }
        // A JSON boolean, not `is Bool`: on Linux a JSON 0 or 1 casts to Bool too (JSONNumbers.isBoolean).
        if !isRenewal, !(o["purchaseDate"] is NSNumber) || (o["purchaseDate"] as? NSNumber).map(JSONNumbers.isBoolean) == true {
            throw FuzzViolation("accepted a transaction without a numeric purchaseDate")
        }
        if isRenewal, let t = o["transactionId"], !(t is NSNull) { throw FuzzViolation("accepted a renewal info with a transactionId") }
        let otid = text("originalTransactionId") ?? ""
        guard (1...20).contains(otid.utf8.count), otid.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw FuzzViolation("accepted originalTransactionId \(otid.debugDescription)")
        }
        guard streamId == otid else { throw FuzzViolation("filed under \(streamId.debugDescription), not its originalTransactionId") }
    }

    /// A V1 event is stored as `{"responseBodyV1": …}` only, and the fact decoder reads it as
    /// ingestion filed it: every fact about the event's subscription (environment and stream),
    /// signed at the event's business time, none unreadable.
    static func checkV1Facts(_ event: NewEvent) throws {
        guard let o = (try? JSONSerialization.jsonObject(with: event.payload)) as? [String: Any], o.count == 1,
              o["responseBodyV1"] is [String: Any] else {
            throw FuzzViolation("a V1 payload is not {\"responseBodyV1\": {…}}")
        }
        guard (1...20).contains(event.streamId.utf8.count), event.streamId.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw FuzzViolation("a V1 event was filed under \(event.streamId.debugDescription)")
        }
        let facts = FactDecoder.facts(of: event)
        guard facts.contains(where: { $0.kind == .transaction }) else { throw FuzzViolation("a V1 event gave no transaction fact: \(facts)") }
        for f in facts {
            guard f.kind != .unreadable, f.origin == .appleV1,
                  f.subscription == SubscriptionKey(environment: event.environment ?? "", originalTransactionId: event.streamId),
                  f.signedAt == event.signedAt else {
                throw FuzzViolation("the decoder reads a V1 event differently from ingestion: \(f) vs stream \(event.streamId) at \(event.signedAt ?? 0)")
            }
        }
    }

    /// PostgreSQL's `timestamptz` spans 4713 BC … 294276 AD.
    static let timestampRange: ClosedRange<Int64> = -210_866_803_200_000...9_224_318_015_999_999

    static func checkStorable(_ event: NewEvent) throws {
        for (name, text) in [("streamId", event.streamId), ("dedupeKey", event.dedupeKey), ("type", event.type),
                             ("environment", event.environment ?? "")] {
            if text.utf8.contains(0) { throw FuzzViolation("\(name) contains NUL, which a text column cannot store") }
            if name != "environment", text.isEmpty { throw FuzzViolation("\(name) is empty") }
        }
        for (name, text) in [("streamId", event.streamId), ("dedupeKey", event.dedupeKey)] where text.utf8.count > 1024 {
            throw FuzzViolation("\(name) is \(text.utf8.count) bytes; its column holds at most 1024")
        }
        for (name, t) in [("signedAt", event.signedAt), ("expiresAt", event.expiresAt)] {
            if let t, !timestampRange.contains(t) { throw FuzzViolation("\(name) \(t) ms is outside timestamptz") }
        }
        try checkStorable(json: [UInt8](event.payload))
    }

    /// jsonb refuses `\u0000` (and text NUL); the payload must also be one JSON object.
    static func checkStorable(json: [UInt8]) throws {
        if find(Array("\\u0000".utf8), in: json) != nil {
            // An escaped backslash followed by "u0000" is text, not an escape: look closer.
            var i = 0, inString = false
            while i < json.count {
                let c = json[i]
                if inString {
                    if c == 0x5C {
                        if i + 5 < json.count, json[i + 1] == 0x75, json[i + 2...i + 5].elementsEqual("0000".utf8) {
                            throw FuzzViolation("payload contains the escape \\u0000, which jsonb refuses")
                        }
                        i += 2
                        continue
                    }
                    if c == 0x22 { inString = false }
                } else if c == 0x22 {
                    inString = true
                }
                i += 1
            }
        }
        if ByteScan.contains(0, in: json) { throw FuzzViolation("payload contains a NUL byte") }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any] else {
            throw FuzzViolation("payload is not a JSON object")
        }
        // One value per member name: Foundation keeps one of two equal names, jsonb the last.
        guard case .ok(let members) = JSONGuard.scan(json, limit: .max), members == JSONGuard.memberCount(object) else {
            throw FuzzViolation("payload repeats a member name (or nests beyond any limit)")
        }
    }

    // MARK: bytes

    static func isJSONObject(_ bytes: [UInt8]) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) is [String: Any]
    }

    /// Replaces every placeholder occurrence (placeholders start with `@`).
    static func expand(_ input: [UInt8], _ table: [([UInt8], [UInt8])]) -> [UInt8] {
        guard var at = find([UInt8(ascii: "@")], in: input) else { return input }
        var out: [UInt8] = []
        out.reserveCapacity(input.count)
        var i = 0
        while true {
            out += input[i..<at]
            if let (name, value) = table.first(where: { find($0.0, in: input, from: at) == at }) {
                out += value
                i = at + name.count
            } else {
                out.append(UInt8(ascii: "@"))
                i = at + 1
            }
            guard let next = find([UInt8(ascii: "@")], in: input, from: i) else { break }
            at = next
        }
        out += input[i...]
        return out
    }

    /// memchr + memcmp: the generic searches are instantiated unoptimised in a debug build and would
    /// dominate the harness.
    static func find(_ needle: [UInt8], in hay: [UInt8], from: Int = 0) -> Int? {
        guard !needle.isEmpty, from <= hay.count else { return nil }
        return hay.withUnsafeBufferPointer { h -> Int? in
            needle.withUnsafeBufferPointer { n -> Int? in
                guard let base = h.baseAddress, let first = n.first else { return nil }
                var q = base + from
                let last = base + h.count - n.count  // the last possible start
                while q <= last, let hit = memchr(q, Int32(first), last - q + 1) {
                    let r = UnsafePointer(hit.assumingMemoryBound(to: UInt8.self))
                    if memcmp(r, n.baseAddress!, n.count) == 0 { return base.distance(to: r) }
                    q = r + 1
                }
                return nil
            }
        }
    }

    /// base64url without padding through Foundation's optimised encoder: the harness encodes every
    /// mutated payload, and a per-byte Swift loop in a debug build would cost more than the parser.
    static func base64URL(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](Data(bytes).base64EncodedData())
        while out.last == UInt8(ascii: "=") { out.removeLast() }
        out.withUnsafeMutableBufferPointer { b in
            guard let p = b.baseAddress else { return }
            var q = p, end = p + b.count
            // Only the few '+' and '/' are touched, found by memchr.
            for (from, to) in [(UInt8(ascii: "+"), UInt8(ascii: "-")), (UInt8(ascii: "/"), UInt8(ascii: "_"))] {
                q = p
                end = p + b.count
                while q < end, let hit = memchr(q, Int32(from), end - q) {
                    let r = hit.assumingMemoryBound(to: UInt8.self)
                    r.pointee = to
                    q = r + 1
                }
            }
        }
        return out
    }

    /// The standard-alphabet, padded spelling of a base64url text, or nil if it holds characters of
    /// the standard alphabet or padding (which base64url does not use).
    static func standardFromURL(_ input: [UInt8]) -> [UInt8]? {
        var out = input
        var ok = true
        out.withUnsafeMutableBufferPointer { b in
            for i in b.indices {
                switch b[i] {
                case UInt8(ascii: "-"): b[i] = UInt8(ascii: "+")
                case UInt8(ascii: "_"): b[i] = UInt8(ascii: "/")
                case UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="): ok = false
                default: break
                }
            }
        }
        guard ok else { return nil }
        while out.count % 4 != 0 { out.append(UInt8(ascii: "=")) }
        return out
    }
}

/// Signs like Apple with one fixed chain, cheaply: the header is encoded once.
struct FuzzPKI: Sendable {
    let authority: AppleTestAuthority
    let header: [UInt8]
    /// x5c entries: leaf, intermediate, root.
    let certificateTexts: [String]
    var leafKey: ECPrivateKey { authority.leafKey }

    init(authority: AppleTestAuthority) throws {
        self.authority = authority
        certificateTexts = [authority.leaf, authority.intermediate, authority.root].map { Base64.encodeStandard($0.der) }
        let json = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "x5c": certificateTexts], options: [.sortedKeys])
        header = FuzzKit.base64URL([UInt8](json))
    }

    func verifier() -> SignedDataVerifier { authority.verifier() }

    var headerPlaceholders: [([UInt8], [UInt8])] {
        zip(["@LEAF@", "@INT@", "@ROOT@"], certificateTexts).map { (Array($0.utf8), Array($1.utf8)) }
    }

    /// 64 zero bytes in place of a signature.
    static let unsigned = [UInt8](repeating: 0, count: 64)

    /// A compact JWS of `payload`. Signed (one ES256 operation) only when the payload is a JSON
    /// object: anything else is refused by the verifier's JSON step before it looks at the
    /// signature, so a real signature would cost time without reaching any other code.
    func jws(payload: [UInt8]) throws -> (jws: [UInt8], signed: Bool) {
        var out = header
        out.append(UInt8(ascii: "."))
        out += FuzzKit.base64URL(payload)
        let signed = FuzzKit.isJSONObject(payload)
        let signature = signed ? try leafKey.signES256(out) : Self.unsigned
        out.append(UInt8(ascii: "."))
        out += FuzzKit.base64URL(signature)
        return (out, signed)
    }

    /// `{"signedPayload":"<jws>"}` (base64url needs no JSON escaping).
    static func body(jws: [UInt8]) -> [UInt8] {
        Array("{\"signedPayload\":\"".utf8) + jws + Array("\"}".utf8)
    }
}


/// What the fuzzer found, pinned as plain regression tests (each names the run that found it).
final class AppleFuzzFindingTests: XCTestCase {
    let pki = FuzzKit.pki
    let ingestor = FuzzKit.ingestor()
    let sample = AppleTestAuthority.sample()

    func v2(_ payload: String) throws -> Data { Data(FuzzPKI.body(jws: try pki.jws(payload: Array(payload.utf8)).jws)) }

    func notification(uuid: String = "u-1", type: String = "TEST", extra: String = "") -> String {
        #"{"notificationType":"\#(type)","notificationUUID":"\#(uuid)","signedDate":1767225600000,"data":{"bundleId":"com.example","appAppleId":1234,"environment":"Sandbox"\#(extra)}}"#
    }

    /// Foundation decodes `\u0000` to a NUL character; PostgreSQL's text columns and jsonb refuse it,
    /// so the append failed after acceptance (seed 0xa55e0005: a NUL in notificationUUID, the
    /// dedupe key; seed 0xa55e0008: in a V1 payload).
    func testNULEscapeIsRefusedInEveryJSONDocument() throws {
        XCTAssertNoThrow(try ingestor.ingestV2(body: v2(notification())))
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: v2(notification(uuid: #"u\u0000"#))) }
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: v2(notification(extra: #","note":"\u0000""#))) }
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: v2(notification(extra: #","\u0000":1"#))) }
        let body = try v2(notification())
        let withNUL = Data(#"{"x":"\u0000","#.utf8) + body.dropFirst()
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: withNUL) }
        // An escaped backslash followed by "u0000" is text, not a NUL: accepted and stored as such.
        let event = try ingestor.ingestV2(body: v2(notification(uuid: #"u\\u0000"#)))
        XCTAssertEqual(event.dedupeKey, #"u\u0000"#)
        let v1 = Data(#"{"password":"\#(FuzzTests.secret)","notification_type":"CANCEL\u0000","environment":"Sandbox","bid":"com.example"}"#.utf8)
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: v1, sharedSecret: FuzzTests.secret) }
        XCTAssertEqual(JSONGuard.scan(Array(#"{"a":"\\\u0000"}"#.utf8)), .nulEscape, "an odd run of backslashes ends in an escape")
        XCTAssertEqual(JSONGuard.scan(Array(#"{"a":"\\\\u0000"}"#.utf8)), .ok(members: 1))
    }

    /// Foundation keeps one of two equal member names, PostgreSQL's jsonb the last: the stored raw
    /// evidence would read differently from what the ledger acted on.
    func testRepeatedMemberNamesAreRefused() throws {
        assertRefused("malformed", .malformed) {
            try ingestor.ingestV2(body: v2(notification(extra: #","bundleId":"com.evil""#)))
        }
        let body = try v2(notification())
        let twice = Data(#"{"signedPayload":"x","#.utf8) + body.dropFirst()
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: twice) }
        let v1 = Data(#"{"password":"\#(FuzzTests.secret)","bid":"com.example","bid":"com.example","notification_type":"CANCEL","environment":"Sandbox"}"#.utf8)
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: v1, sharedSecret: FuzzTests.secret) }
        // The same name in different objects, and colons inside strings, are fine.
        XCTAssertEqual(JSONGuard.scan(Array(#"{"a":{"a":"x:y"},"b":[{"a":1},{"a":2}]}"#.utf8)), .ok(members: 5))
        XCTAssertNoThrow(try JSONGuard.object(Array(#"{"a":{"a":"x:y"},"b":[{"a":1},{"a":2}]}"#.utf8), what: "t"))
        XCTAssertThrowsError(try JSONGuard.object(Array(#"{"a":[{"k":1,"k":1}]}"#.utf8), what: "t"))
        XCTAssertThrowsError(try JSONGuard.object(Array(#"{"a":1,"\u0061":2}"#.utf8), what: "t"))
    }

    /// PostgreSQL's timestamptz ends in 294276 AD; a later time made the append fail after
    /// acceptance (seed 0xa55e0008: V1 expires_date_ms 1654682094294967296).
    func testTimesPostgreSQLCannotStoreAreRefusedOrLeftOut() throws {
        let v1 = { (expires: String) in
            Data(#"{"password":"\#(FuzzTests.secret)","notification_type":"CANCEL","environment":"Sandbox","bid":"com.example","unified_receipt":{"latest_receipt_info":[{"original_transaction_id":"1","transaction_id":"1","purchase_date_ms":"1","expires_date_ms":"\#(expires)"}]}}"#.utf8)
        }
        XCTAssertEqual(try ingestor.ingestV1(body: v1("9224318015999999"), sharedSecret: FuzzTests.secret).expiresAt, 9_224_318_015_999_999)
        for bad in ["9224318016000000", "1654682094294967296", "-210866803200001"] {
            assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: v1(bad), sharedSecret: FuzzTests.secret) }
        }
        // V2: a signed expiresDate no timestamptz holds is left out of expiresAt (like one of the
        // wrong type); the payload keeps Apple's value. A signedDate like it is refused.
        var tx = #"{"transactionId":"1","originalTransactionId":"1","productId":"p","purchaseDate":1767225599000,"bundleId":"com.example","environment":"Sandbox","signedDate":1767225600000,"expiresDate":9224318016000000}"#
        var body = try v2(notification(type: "DID_RENEW", extra: #","signedTransactionInfo":"\#(String(decoding: pki.jws(payload: Array(tx.utf8)).jws, as: UTF8.self))""#))
        let event = try ingestor.ingestV2(body: body)
        XCTAssertNil(event.expiresAt)
        XCTAssertEqual(event.streamId, "1")
        tx = tx.replacingOccurrences(of: "9224318016000000", with: "9224318015999999")
        body = try v2(notification(type: "DID_RENEW", extra: #","signedTransactionInfo":"\#(String(decoding: pki.jws(payload: Array(tx.utf8)).jws, as: UTF8.self))""#))
        XCTAssertEqual(try ingestor.ingestV2(body: body).expiresAt, 9_224_318_015_999_999)
        assertRefused("malformed", .malformed) {
            try ingestor.ingestV2(body: v2(notification().replacingOccurrences(of: "1767225600000", with: "9224318016000000")))
        }
    }

    /// The header cache added for speed keeps only headers that passed every check, is keyed by
    /// the exact header text, is bounded, and never stands in for the signature or the chain.
    func testHeaderCacheHoldsOnlyCheckedHeadersAndNeverSkipsTheSignature() throws {
        let verifier = pki.verifier()
        let good = try pki.jws(payload: Array(notification().utf8)).jws
        let parts = good.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).map(Array.init)
        for alg in ["none", "HS256"] {
            let header = FuzzKit.base64URL(Array(#"{"alg":"\#(alg)","x5c":["\#(pki.certificateTexts[0])","\#(pki.certificateTexts[1])","\#(pki.certificateTexts[2])"]}"#.utf8))
            let forged = header + [UInt8(ascii: ".")] + parts[1] + [UInt8(ascii: ".")] + parts[2]
            for _ in 0..<2 {
                assertRefused("unsupported_algorithm", .unauthenticated) { try verifier.verify(bytes: forged, kind: .notification) }
            }
        }
        XCTAssertNoThrow(try verifier.verify(bytes: good, kind: .notification))
        XCTAssertNoThrow(try verifier.verify(bytes: good, kind: .notification))
        let flipped = FuzzKit.base64URL(Base64.decodeURL(parts[2])!.enumerated().map { $0.offset == 5 ? $0.element ^ 1 : $0.element })
        assertRefused("bad_signature", .unauthenticated) {
            try verifier.verify(bytes: parts[0] + [0x2E] + parts[1] + [0x2E] + flipped, kind: .notification)
        }
        let otherPayload = FuzzKit.base64URL(Array(notification(uuid: "u-2").utf8))
        assertRefused("bad_signature", .unauthenticated) {
            try verifier.verify(bytes: parts[0] + [0x2E] + otherPayload + [0x2E] + parts[2], kind: .notification)
        }
        // A signedDate outside the chain's validity is still refused with a cached header and chain.
        let late = try pki.jws(payload: Array(notification().replacingOccurrences(of: "1767225600000", with: "2524608000000").utf8)).jws
        assertRefused("certificate_not_valid_at_signing_time", .unauthenticated) { try verifier.verify(bytes: late, kind: .notification) }
        // Bounded: many distinct valid headers (extra members) keep at most `headerCapacity`.
        for i in 0..<(ChainCache.headerCapacity + 5) {
            let header = FuzzKit.base64URL(Array(#"{"alg":"ES256","kid":"\#(i)","x5c":["\#(pki.certificateTexts[0])","\#(pki.certificateTexts[1])","\#(pki.certificateTexts[2])"]}"#.utf8))
            var jws = header + [0x2E] + parts[1]
            let sig = try pki.leafKey.signES256(jws)
            jws += [0x2E] + FuzzKit.base64URL(sig)
            XCTAssertNoThrow(try verifier.verify(bytes: jws, kind: .notification))
        }
        XCTAssertEqual(verifier.cachedHeaderCount, ChainCache.headerCapacity)
    }

    /// Seen in the fuzz profile (slowest inputs: signedDate mutated outside the cached window): a
    /// chain-cache miss ran a full X.509 path validation before the signature was checked, so anyone
    /// could replay a genuine Apple JWS with an altered date and make each request cost a path
    /// validation instead of one P-256 verify. The signature now comes first.
    func testAlteredGenuineJWSIsRefusedWithoutAPathValidation() throws {
        let verifier = pki.verifier()
        let good = try pki.jws(payload: Array(notification().utf8)).jws
        XCTAssertNoThrow(try verifier.verify(bytes: good, kind: .notification))
        XCTAssertEqual(verifier.chainValidationCount, 1)
        let parts = good.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).map(Array.init)
        for date in ["2524608000000", "1000000000000", "-1"] {  // 2050, 2001, 1969: outside the chain
            let moved = FuzzKit.base64URL(Array(notification().replacingOccurrences(of: "1767225600000", with: date).utf8))
            for _ in 0..<3 {
                assertRefused("bad_signature", .unauthenticated) {
                    try verifier.verify(bytes: parts[0] + [0x2E] + moved + [0x2E] + parts[2], kind: .notification)
                }
            }
        }
        XCTAssertEqual(verifier.chainValidationCount, 1, "data the leaf did not sign must not reach path validation")
        // Signed by the leaf with a date outside the chain: validated, and refused precisely.
        let late = try pki.jws(payload: Array(notification().replacingOccurrences(of: "1767225600000", with: "2524608000000").utf8)).jws
        assertRefused("certificate_not_valid_at_signing_time", .unauthenticated) { try verifier.verify(bytes: late, kind: .notification) }
        XCTAssertEqual(verifier.chainValidationCount, 2)
    }

    /// Only the top-level password was redacted: a second copy of the secret (seed 0xa55e0008,
    /// iteration 25281: a nested "password" member spliced in by the mutator) reached the payload,
    /// and the raw evidence fell back to a stub. Such bodies are now refused, however the copy is spelled.
    func testV1SecretOutsideThePasswordMemberIsRefused() throws {
        let secret = FuzzTests.secret
        func body(_ extra: String) -> Data {
            Data(#"{"password":"\#(secret)","notification_type":"CANCEL","environment":"Sandbox","bid":"com.example","unified_receipt":{"latest_receipt_info":[{"original_transaction_id":"1","transaction_id":"1","purchase_date_ms":"1","expires_date_ms":"2"\#(extra)}]}}"#.utf8)
        }
        let clean = try ingestor.ingestV1(body: body(""), sharedSecret: secret)
        XCTAssertEqual(String(decoding: clean.raw, as: UTF8.self), String(decoding: body(""), as: UTF8.self).replacingOccurrences(of: secret, with: "<redacted>"))
        let escaped = secret.unicodeScalars.map { String(format: "\\u%04x", $0.value) }.joined()
        for extra in [#","password":"\#(secret)""#, #","note":"x\#(secret)y""#, #","\#(secret)":1"#, #","e":"\#(escaped)""#] {
            assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: body(extra), sharedSecret: secret) }
            do { _ = try ingestor.ingestV1(body: body(extra), sharedSecret: secret) } catch {
                XCTAssertFalse(error.description.contains(secret), "the refusal must not echo the secret")
            }
        }
        // Without the right password the body is refused as unauthenticated first: no oracle on content.
        assertRefused("bad_shared_secret", .unauthenticated) {
            try ingestor.ingestV1(body: body(#","note":"\#(secret)""#), sharedSecret: secret + "0")
        }
    }

    /// The events table holds stream ids and dedupe keys of at most 1024 bytes; a longer signed
    /// originalTransactionId (seed 0xa55e0006) or requestIdentifier (seed 0xa55e0005) was accepted
    /// and then refused by the database's check constraint. originalTransactionIds are now held
    /// to Apple's form (1–20 digits) wherever they arrive, which is far inside the column.
    func testIdentifiersLongerThanTheirColumnAreRefused() throws {
        let long = String(repeating: "7", count: 1025), fits = String(repeating: "7", count: 20)
        func withTransaction(_ otid: String) throws -> Data {
            let tx = #"{"transactionId":"1","originalTransactionId":"\#(otid)","productId":"p","purchaseDate":1767225599000,"bundleId":"com.example","environment":"Sandbox","signedDate":1767225600000}"#
            return try v2(notification(type: "DID_RENEW", extra: #","signedTransactionInfo":"\#(String(decoding: pki.jws(payload: Array(tx.utf8)).jws, as: UTF8.self))""#))
        }
        XCTAssertEqual(try ingestor.ingestV2(body: withTransaction(fits)).streamId, fits)
        for otid in [fits + "7", long] {
            assertRefused("invalid_original_transaction_id", .malformed) { try ingestor.ingestV2(body: withTransaction(otid)) }
        }
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: v2(notification(uuid: long))) }
        let summary = #"{"notificationType":"RENEWAL_EXTENSION","subtype":"SUMMARY","notificationUUID":"s","signedDate":1767225600000,"summary":{"bundleId":"com.example","environment":"Sandbox","requestIdentifier":"\#(long)"}}"#
        assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: v2(summary)) }
        let v1 = Data(#"{"password":"\#(FuzzTests.secret)","notification_type":"CANCEL","environment":"Sandbox","bid":"com.example","unified_receipt":{"latest_receipt_info":[{"original_transaction_id":"\#(long)","transaction_id":"1","purchase_date_ms":"1"}]}}"#.utf8)
        // (Refused by the bound on every V1 string the ledger reads, before the id's form is checked.)
        assertRefused("malformed", .malformed) { try ingestor.ingestV1(body: v1, sharedSecret: FuzzTests.secret) }
    }

    /// The payload is spliced from the signed JSON texts instead of re-encoded (JSONSerialization
    /// cost ~1.7 ms per notification, measured in the fuzz profile): it must read as exactly the
    /// merged object, and fall back to re-encoding when a splice would repeat a member.
    func testSplicedPayloadIsTheMergedObject() throws {
        let sample = AppleTestAuthority.sample(originalTransactionId: "99")
        let app = String(decoding: try pki.jws(payload: FuzzKit.file("app-transaction/sandbox.json")).jws, as: UTF8.self)
        let appData = #"{"notificationType":"RESCIND_CONSENT","notificationUUID":"a","signedDate":1767225600000,"appData":{"bundleId":"com.example","appAppleId":1234,"environment":"Sandbox","signedAppTransactionInfo":"\#(app)"}}"#
        let signedSample = try XCTUnwrap(try JSONSerialization.jsonObject(with: pki.authority.signSample(sample)) as? [String: Any])["signedPayload"] as? String
        for signed in [try XCTUnwrap(signedSample), String(decoding: try pki.jws(payload: Array(appData.utf8)).jws, as: UTF8.self)] {
            let decoded = try ingestor.decodeV2(signedPayload: signed)
            let spliced = try XCTUnwrap(try JSONSerialization.jsonObject(with: decoded.payloadJSON()) as? NSDictionary)
            XCTAssertEqual(spliced, decoded.mergedPayload as NSDictionary)
            XCTAssertTrue(spliced["transactionInfo"] != nil || spliced["appTransactionInfo"] != nil)
        }
        XCTAssertEqual(AppleNotificationIngestor.DecodedV2.splice(Array("{ }\n".utf8), [("a", Array("[1]".utf8))]), Data(#"{ "a":[1]}"#.utf8))
        XCTAssertEqual(AppleNotificationIngestor.DecodedV2.splice(Array(#"{"x":1}"#.utf8), [("a", Array("{}".utf8)), ("b", nil)]), Data(#"{"x":1,"a":{}}"#.utf8))
        XCTAssertNil(AppleNotificationIngestor.DecodedV2.splice(Array("{\u{0}\"x\":1}".utf8), []))
        // An outer member named like a decoded one: re-encoded, one member, the decoded value.
        let tx = try pki.jws(payload: Array(#"{"transactionId":"6","originalTransactionId":"5","productId":"p","purchaseDate":1767225599000,"bundleId":"com.example","environment":"Sandbox","signedDate":1767225600000}"#.utf8)).jws
        let event = try ingestor.ingestV2(body: v2(notification(type: "DID_RENEW", extra: #","signedTransactionInfo":"\#(String(decoding: tx, as: UTF8.self))""#)
            .replacingOccurrences(of: #""signedDate""#, with: #""transactionInfo":"forged","signedDate""#)))
        let payload = try XCTUnwrap(try JSONSerialization.jsonObject(with: event.payload) as? [String: Any])
        XCTAssertEqual((payload["transactionInfo"] as? [String: Any])?["originalTransactionId"] as? String, "5")
        XCTAssertEqual(JSONGuard.scan([UInt8](event.payload)), .ok(members: JSONGuard.memberCount(payload)))
    }

    /// Foundation's JSON reader takes a comma before `}` (seed 0xa55e0005, iteration 59858: a
    /// mutation dropped the last member) and numbers PostgreSQL's numeric cannot hold (seed
    /// 0xa55e0006: `1e999999`); once the payload was stored as signed, jsonb refused both.
    func testTrailingCommasAndHugeNumbersAreRefused() throws {
        for (extra, finding) in [(#","a":[1,]"#, JSONGuard.Finding.trailingComma), (#","a":{"b":1,}"#, .trailingComma),
                                 (#","a":1e1001"#, .hugeNumber), (#","a":-2E-99999"#, .hugeNumber),
                                 (#","a":1\#(String(repeating: "0", count: 1001))"#, .hugeNumber)] {
            let text = notification(extra: extra)
            XCTAssertEqual(JSONGuard.scan(Array(text.utf8)), finding, extra)
            assertRefused("malformed", .malformed) { try ingestor.ingestV2(body: v2(text)) }
        }
        for fine in [#","a":[1, 2 ,3 ]"#, #","a":1e300"#, #","a":-0.5e-1000"#, #","a":"1,}""#, #","a":[]"#, #","a":{}"#] {
            XCTAssertNoThrow(try ingestor.ingestV2(body: v2(notification(extra: fine))), fine)
        }
    }

    /// The bulk base64 decoding moved to Foundation (a debug-build per-character loop dominated
    /// verification); the strictness rules stay ours and are pinned here beyond testBase64URLIsStrict.
    func testBase64StrictnessAfterTheFoundationDecoder() {
        for bad in ["QQ=", "Q=Q", "QUJD=", "QU JD", "QUJ\u{0}", "QUJD\r\n", "QU\tJD", "QUI\u{7F}", "-_8=", "QUJ+", "QUJ/"] {
            XCTAssertNil(Base64.decodeURL(Array(bad.utf8)), bad.debugDescription)
        }
        for bad in ["QQ", "QQ=", "QQ=A", "=QQ=", "Q===", "====", "QQ==QQ==", "-_8=", "QU JD", " QUJD", "QUJD ", "QUI\u{0}", "QR=="] {
            XCTAssertNil(Base64.decodeStandard(Array(bad.utf8)), bad.debugDescription)
        }
        XCTAssertEqual(Base64.decodeStandard(Array("".utf8)), [])
        XCTAssertEqual(Base64.decodeStandard(Array("QQ==".utf8)), [0x41])
        XCTAssertEqual(Base64.decodeStandard(Array("QUI=".utf8)), [0x41, 0x42])
        XCTAssertEqual(Base64.decodeURL(Array("_-_-".utf8)), [0xFF, 0xEF, 0xFE])
        XCTAssertNil(Base64.decodeURL(Array("QUJ".utf8)), "unused bits of the last character must be zero")
    }
}

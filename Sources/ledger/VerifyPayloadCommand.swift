import AppStore
import Crypto
import Foundation
import LedgerCommandLine
import LedgerCore
import LedgerService
import WeChatPay

/// `ledger verify-payload`: an auditor's tool for raw evidence, offline (no service, no database).
enum VerifyPayloadCommand {
    static let help = """
    usage: ledger verify-payload [--root PATH]... [--test-pki] [--wechat-key-history FILE] FILE|-

    Verifies stored or captured Apple evidence offline and prints it decoded: a compact JWS, a whole
    App Store Server Notifications V2 body ({"signedPayload": …}), a V1 body, or an App Store
    Server API answer the ledger stored (the raw of API/subscription-status: a Get All Subscription
    Statuses answer; API/transaction: a JWS; also Get Transaction History and Get Notification
    History pages; API/verify-receipt: a verifyReceipt answer, which Apple does not sign). Every
    JWS (the notification and its nested signedTransactionInfo / signedRenewalInfo /
    signedAppTransactionInfo, every signed item of an answer) is checked at its own signedDate
    against the trusted roots, so years-old evidence still verifies; no app or environment policy
    is applied. The raw column of an event is such an input.

      FILE         the input; - reads standard input
      --root PATH  trusted root certificate(s), DER or PEM; repeatable or colon-separated.
                   Default: LEDGER_APPLE_ROOT_CERTS, else the bundled Apple Root CA - G3.
      --test-pki   tolerate the X.509 profile gaps of Apple's published test PKI (missing key
                   identifiers, non-critical CA constraints), e.g. with --root testCA.der for the
                   app-store-server-library mock data. Never needed for Apple's real chain.

    Prints the outcome per JWS, then the decoded JSON (nested JWS decoded in place as
    transactionInfo / renewalInfo / appTransactionInfo). Exit status: 0 when every JWS verified,
    1 when any did not (or the input is a V1 body or a verifyReceipt answer, which carry no
    signature), 2 on bad usage.

    WeChat: the raw column of a WeChat event ({"v", "format", "query", "body"}), one stored event
    ({"source": "wechat", "raw": …}) or a timeline (GET /v1/subscriptions/{id}/events, GET
    /v1/wechat/orders/{id}: {"events": […]}) is re-verified against the key history — the current
    and previous keys of the configuration (LEDGER_WECHAT_APPID, LEDGER_WECHAT_TOKEN,
    LEDGER_WECHAT_AES_KEY, LEDGER_WECHAT_PREVIOUS_AES_KEY) and older ones from the key-history
    file (--wechat-key-history, else LEDGER_WECHAT_KEY_HISTORY_FILE):
      {"keys": [{"appId": "wx…", "token": "…", "aesKey": "<43 characters>", "label": "until 2026-03-01"}]}
    Each push prints which key (by fingerprint) verified its signature and decrypted it, and
    whether that is the key the ledger recorded at ingestion. A plaintext-mode push can only be
    shown as an unsigned body: its signature covers the token, timestamp and nonce, not the body.
    Exit status: 0 when every push verified, 1 when any did not or was plaintext.
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "verify-payload", valued: ["root", "wechat-key-history"], boolean: ["test-pki"], help: help)
        guard args.positionals.count == 1, let source = args.positionals.first else {
            throw CommandFailure(message: "give exactly one FILE (or - for standard input); see ledger verify-payload --help", exitCode: 2)
        }
        let input = try read(source)
        let wechatRaws = WeChatEvidenceInput.raws(in: input)
        if !wechatRaws.isEmpty {
            try verifyWeChat(wechatRaws, historyFile: args.options["wechat-key-history"])
            return
        }
        let roots = try trustedRoots(rawArguments: raw)
        let report: InspectionReport
        do {
            var options = SignedDataVerifierOptions()
            options.tolerateTestPKIProfileGaps = args.has("test-pki")
            report = try PayloadInspector(verifier: SignedDataVerifier(trustedRoots: roots, options: options)).inspect(input)
        } catch {
            throw CommandFailure(message: "\(error.code): \(error.message)")
        }
        print(report.render())
        if !report.allVerified {
            let refused = report.outcomes.filter { !$0.verified }.count
            let why = report.outcomes.isEmpty ? "nothing was verified (V1 bodies and verifyReceipt answers carry no signature)"
                : "\(refused) of \(report.outcomes.count) JWS did not verify"
            FileHandle.standardError.write(Data("ledger verify-payload: \(why)\n".utf8))
            exit(1)
        }
    }

    /// `--root` may repeat; `Arguments` keeps only the last value of an option, so the raw
    /// arguments are read again for every occurrence.
    static func trustedRoots(rawArguments raw: [String]) throws -> [X509Certificate] {
        var paths: [String] = []
        var i = 0
        while i < raw.count {
            let a = raw[i]
            if a == "--" { break }
            if a == "--root", i + 1 < raw.count {
                paths.append(raw[i + 1])
                i += 1
            } else if a.hasPrefix("--root=") {
                paths.append(String(a.dropFirst("--root=".count)))
            }
            i += 1
        }
        let split = paths.flatMap { $0.split(separator: ":").map(String.init) }.filter { !$0.isEmpty }
        do {
            if !split.isEmpty { return try AppleTrustedRoots.load(paths: split) }
            return try AppleTrustedRoots.fromEnvironmentValue(ProcessInfo.processInfo.environment["LEDGER_APPLE_ROOT_CERTS"])
        } catch {
            throw CommandFailure(message: "\(error)", exitCode: 2)
        }
    }

    static func read(_ source: String) throws -> Data {
        if source == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        guard let data = FileManager.default.contents(atPath: source) else {
            throw CommandFailure(message: "cannot read \(source): no such readable file", exitCode: 2)
        }
        return data
    }
}

// MARK: WeChat

extension VerifyPayloadCommand {
    /// Re-verifies stored WeChat pushes against the key history (`WeChatPushEvidence.verify`).
    static func verifyWeChat(_ raws: [(label: String, raw: Data)], historyFile: String?) throws {
        let configuration = try loadConfiguration()
        let history: WeChatKeyHistory
        do { history = try configuration.wechat.keyHistory(file: historyFile) } catch {
            throw CommandFailure(message: "\(error)", exitCode: 2)
        }
        guard !history.keys.isEmpty else {
            throw CommandFailure(message: "no WeChat keys: set LEDGER_WECHAT_APPID and LEDGER_WECHAT_TOKEN (and LEDGER_WECHAT_AES_KEY), or give --wechat-key-history FILE", exitCode: 2)
        }
        print("key history: " + history.keys.map(\.description).joined(separator: "; "))
        var failed = 0, unsigned = 0
        for (label, raw) in raws {
            let result = WeChatPushEvidence.verify(raw: raw, keys: history)
            var line = "\(label): \(result.outcome.rawValue)"
            if let mode = result.mode { line += " (\(mode.rawValue) mode, \(result.format?.rawValue ?? "?"))" }
            print(line)
            print("  " + result.note)
            if result.outcome != .failed {
                let recorded = [result.recordedTokenFingerprint.map { "token \($0)" }, result.recordedAESKeyFingerprint.map { "EncodingAESKey \($0)" }]
                    .compactMap { $0 }.joined(separator: ", ")
                if !recorded.isEmpty {
                    print("  recorded at ingestion: \(recorded) — \(result.matchesRecording ? "the same key" : "A DIFFERENT KEY than the one that opened it now")")
                }
                if let message = result.message {
                    print("  message\(result.outcome == .unsignedBody ? " (unsigned body, NOT authenticated)" : ""): " + String(decoding: message, as: UTF8.self))
                }
            }
            switch result.outcome {
            case .verified: break
            case .unsignedBody: unsigned += 1
            case .failed: failed += 1
            }
        }
        if failed + unsigned > 0 {
            FileHandle.standardError.write(Data("ledger verify-payload: \(failed) of \(raws.count) WeChat pushes did not verify, \(unsigned) are plaintext (unsigned bodies)\n".utf8))
            exit(1)
        }
    }
}

/// Where WeChat pushes are in an input: a raw column, an event, or a list of events.
enum WeChatEvidenceInput {
    static func raws(in input: Data) -> [(label: String, raw: Data)] {
        guard let value = try? JSONValue(json: input) else { return [] }
        if isRaw(value) { return [("push", input)] }
        var events: [JSONValue] = []
        if case .array(let a) = value { events = a }
        else if case .array(let a)? = value["events"] { events = a }
        else if value.objectValue != nil { events = [value] }
        return events.compactMap { e in
            guard e.text("source") == "wechat", let raw = e.text("raw"), e.text("rawEncoding") != "base64",
                  let parsed = try? JSONValue(json: Data(raw.utf8)), isRaw(parsed) else { return nil }
            let label = e["position"].flatMap { $0.int64 }.map { "event \($0)" } ?? "event"
            return (label + (e.text("type").map { " (\($0))" } ?? ""), Data(raw.utf8))
        }
    }

    static func isRaw(_ v: JSONValue) -> Bool {
        v.text("format") != nil && v["query"]?.objectValue != nil && (v["body"] != nil || v["body_base64"] != nil)
    }
}

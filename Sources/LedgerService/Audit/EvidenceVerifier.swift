import AppStore
import Crypto
import Foundation
import LedgerCore
import LedgerStore
import WeChatPay

/// What re-verifying one stored event's raw evidence found.
public enum EvidenceCheck: Sendable, Equatable {
    /// Every signature in it verified now (Apple: each JWS at its own signedDate against the
    /// configured roots; WeChat: msg_signature and decryption with a key of the key history).
    case verified(detail: String)
    /// Nothing in it is signed (V1 notifications and verifyReceipt answers, authenticated only by
    /// the shared secret or TLS at the time; the ledger's own events; plaintext-mode WeChat pushes,
    /// whose signature does not cover the body).
    case unsigned(reason: String)
    /// It holds a signature and that signature does not verify now.
    case refused(reason: String)

    public var isRefused: Bool { if case .refused = self { true } else { false } }

    public var summary: String {
        switch self {
        case .verified(let d): "verified: \(d)"
        case .unsigned(let r): "unsigned: \(r)"
        case .refused(let r): "REFUSED: \(r)"
        }
    }
}

/// Why the keys to re-verify stored evidence could not be loaded.
public enum EvidenceKeysError: Error, Equatable, CustomStringConvertible {
    case appleRoots(String)
    case wechatKeys(String)

    public var description: String {
        switch self {
        case .appleRoots(let why): "cannot load the trusted Apple roots (LEDGER_APPLE_ROOT_CERTS): \(why)"
        case .wechatKeys(let why): "cannot load the WeChat push keys: \(why)"
        }
    }
}

extension LedgerConfiguration.WeChat {
    /// Every push key stored pushes may have been sealed with: the configured token with its
    /// current and previous EncodingAESKey, then the key-history file (`file`, else
    /// LEDGER_WECHAT_KEY_HISTORY_FILE). The one place `ledger verify`, `ledger verify-payload` and
    /// the auditor's pages get the history from.
    public func keyHistory(file: String? = nil) throws(EvidenceKeysError) -> WeChatKeyHistory {
        let key: EncodingAESKey?, previous: EncodingAESKey?
        do {
            key = try aesKey.map { s throws(WeChatPushError) in try EncodingAESKey(s.value) }
            previous = try previousAESKey.map { s throws(WeChatPushError) in try EncodingAESKey(s.value) }
        } catch {
            throw .wechatKeys("LEDGER_WECHAT_AES_KEY / LEDGER_WECHAT_PREVIOUS_AES_KEY: \(error.message)")
        }
        do {
            return try WeChatKeyHistory(appId: appId, token: token?.value, aesKey: key, previousAESKey: previous,
                                        file: (file ?? keyHistoryFile).map { URL(fileURLWithPath: $0) })
        } catch {
            throw .wechatKeys(error.description)
        }
    }
}

/// Re-verifies the raw evidence of stored events — what `ledger verify` and the timeline show.
public struct EvidenceVerifier: Sendable {
    let apple: PayloadInspector
    let wechat: WeChatKeyHistory

    public init(apple verifier: SignedDataVerifier, wechat: WeChatKeyHistory) {
        self.apple = PayloadInspector(verifier: verifier)
        self.wechat = wechat
    }

    /// With the configured Apple roots (or the bundled Apple Root CA - G3) and the WeChat key
    /// history (`wechatKeyHistoryFile` overrides LEDGER_WECHAT_KEY_HISTORY_FILE).
    public init(configuration: LedgerConfiguration, wechatKeyHistoryFile: String? = nil) throws(EvidenceKeysError) {
        let roots: [X509Certificate]
        do {
            roots = configuration.apple.rootCertificatePaths.isEmpty
                ? [AppleTrustedRoots.bundledAppleRootCAG3]
                : try AppleTrustedRoots.load(paths: configuration.apple.rootCertificatePaths)
        } catch {
            throw .appleRoots("\(error)")
        }
        self.init(apple: SignedDataVerifier(trustedRoots: roots), wechat: try configuration.wechat.keyHistory(file: wechatKeyHistoryFile))
    }

    public func check(_ event: RecordedEvent) -> EvidenceCheck {
        switch event.event.source {
        case .ledger:
            return .unsigned(reason: "the ledger's own record (covered by the hash chain only)")
        case .wechat:
            return checkWeChat(event.event.raw)
        case .apple:
            return checkApple(event.event.raw)
        }
    }

    /// A stored push against the key history (`WeChatPushEvidence`, as `ledger verify-payload`):
    /// verified when a key of the history opens it; a plaintext-mode push is unsigned (its
    /// signature covers the token, timestamp and nonce, never the body); refused otherwise.
    func checkWeChat(_ raw: Data) -> EvidenceCheck {
        let result = WeChatPushEvidence.verify(raw: raw, keys: wechat)
        switch result.outcome {
        case .verified:
            let recorded = result.matchesRecording ? "" : "; NOT the key the ledger recorded when it arrived (token \(result.recordedTokenFingerprint ?? "-"), EncodingAESKey \(result.recordedAESKeyFingerprint ?? "-"))"
            return .verified(detail: "WeChat \(result.mode?.rawValue ?? "") push: \(result.note)\(recorded)")
        case .unsignedBody:
            return .unsigned(reason: "WeChat \(result.note)")
        case .failed:
            return .refused(reason: "WeChat push: \(result.note)")
        }
    }

    /// A V2 body or a compact JWS through `PayloadInspector` (every JWS at its own signedDate);
    /// any other JSON (App Store Server API answers) has each `signed…` JWS in it verified.
    func checkApple(_ raw: Data) -> EvidenceCheck {
        let bytes = [UInt8](raw)
        let first = bytes.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
        if first != UInt8(ascii: "{") || (try? JSONDecoder().decode(JSONValue.self, from: raw))?["signedPayload"] != nil {
            do {
                let report = try apple.inspect(raw)
                if let bad = report.outcomes.first(where: { !$0.verified }), let error = bad.error {
                    return .refused(reason: "Apple \(bad.path): \(error.code) — \(error.message)")
                }
                if report.outcomes.isEmpty { return .unsigned(reason: "Apple V1 notification (authenticated by the shared secret when it arrived)") }
                return .verified(detail: "\(report.outcomes.count) Apple JWS, each at its signedDate")
            } catch {
                return .refused(reason: "Apple evidence cannot be read: \(error.code) — \(error.message)")
            }
        }
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: raw) else {
            return .refused(reason: "Apple evidence is not JSON")
        }
        var signed: [(String, String)] = []
        Self.collectSigned(value, path: "", into: &signed)
        if signed.isEmpty {
            return .unsigned(reason: "Apple answer without a JWS (V1 notification or verifyReceipt answer)")
        }
        for (path, jws) in signed {
            let kind: SignedDataKind = path.hasSuffix("signedRenewalInfo") ? .renewalInfo
                : path.hasSuffix("signedAppTransactionInfo") ? .appTransaction : .transaction
            do { _ = try apple.verifier.verify(jws, kind: kind) } catch {
                return .refused(reason: "Apple \(path): \(error.code) — \(error.message)")
            }
        }
        return .verified(detail: "\(signed.count) Apple JWS in an App Store Server API answer, each at its signedDate")
    }

    /// Every string under a key starting with `signed` (or in an array under one).
    static func collectSigned(_ value: JSONValue, path: String, into out: inout [(String, String)]) {
        switch value {
        case .object(let o):
            for (k, v) in o.sorted(by: { $0.key < $1.key }) {
                let p = path.isEmpty ? k : path + "." + k
                if k.hasPrefix("signed") {
                    if case .string(let s) = v { out.append((p, s)); continue }
                    if case .array(let items) = v {
                        for (i, item) in items.enumerated() { if case .string(let s) = item { out.append(("\(p)[\(i)]", s)) } }
                        continue
                    }
                }
                collectSigned(v, path: p, into: &out)
            }
        case .array(let items):
            for (i, item) in items.enumerated() { collectSigned(item, path: "\(path)[\(i)]", into: &out) }
        default:
            break
        }
    }
}

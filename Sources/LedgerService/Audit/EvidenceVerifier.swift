import AppStore
import Foundation
import LedgerCore
import LedgerStore
import WeChatPay

/// What re-verifying one stored event's raw evidence found.
public enum EvidenceCheck: Sendable, Equatable {
    /// Every signature in it verified now (Apple: each JWS at its own signedDate against the
    /// configured roots; WeChat: the push signature and decryption with the configured keys).
    case verified(detail: String)
    /// Nothing in it is signed (V1 notifications and verifyReceipt answers, authenticated only by
    /// the shared secret or TLS at the time; the ledger's own events).
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

/// Re-verifies a stored WeChat push. **The key-history seam:** today this is the keys in the
/// current configuration (token, current and previous EncodingAESKey, through WeChatPay's
/// `PushReceiver`); a key history (every token/key with the time it was in force) plugs in by
/// conforming another type and handing it to `EvidenceVerifier(wechat:)`.
public protocol WeChatPushReverifying: Sendable {
    func reverify(raw: Data, recordedAt: EpochMillis) -> EvidenceCheck
}

/// The configured WeChat keys, through `PushReceiver.open` (signature, msg_signature, decryption
/// and appid check — exactly what the push passed when it arrived).
public struct ConfiguredWeChatKeys: WeChatPushReverifying {
    let receiver: PushReceiver?

    public init(_ configuration: LedgerConfiguration.WeChat) {
        guard let appId = configuration.appId, let token = configuration.token else { receiver = nil; return }
        let key = configuration.aesKey.flatMap { try? EncodingAESKey($0.value) }
        let previous = configuration.previousAESKey.flatMap { try? EncodingAESKey($0.value) }
        // Plaintext pushes were accepted only when allowed; their query signature is what remains to check.
        receiver = try? PushReceiver(config: WeChatPushConfig(appId: appId, token: token.value, aesKey: key, previousAESKey: previous,
                                                              allowPlaintext: true, maxBodyBytes: 16 << 20))
    }

    public func reverify(raw: Data, recordedAt: EpochMillis) -> EvidenceCheck {
        guard let receiver else {
            return .refused(reason: "WeChat is not configured (LEDGER_WECHAT_APPID, LEDGER_WECHAT_TOKEN): a stored push cannot be re-verified")
        }
        guard let stored = try? JSONDecoder().decode(JSONValue.self, from: raw), case .object(let query)? = stored["query"],
              let body = RawPush.body(of: raw) else {
            return .refused(reason: "raw is not a stored push ({\"v\":1,\"query\":…,\"body\":…}); it cannot be re-verified")
        }
        var parameters: [String: String] = [:]
        for (k, v) in query { if case .string(let s) = v { parameters[k] = s } }
        do {
            let push = try receiver.open(query: PushQuery(parameters), body: Data(body))
            return .verified(detail: "WeChat \(push.mode.rawValue) push, signature\(push.mode == .plaintext ? "" : " and decryption") checked with the configured \(push.usedPreviousKey ? "previous" : "current") key")
        } catch {
            return .refused(reason: "WeChat push: \(error.code) — \(error.message) (with the token and EncodingAESKeys configured now; a rotated token needs the key history)")
        }
    }
}

/// Re-verifies the raw evidence of stored events — what `ledger verify` and the timeline show.
public struct EvidenceVerifier: Sendable {
    let apple: PayloadInspector
    let wechat: any WeChatPushReverifying

    public init(apple verifier: SignedDataVerifier, wechat: any WeChatPushReverifying) {
        self.apple = PayloadInspector(verifier: verifier)
        self.wechat = wechat
    }

    /// With the configured Apple roots (or the bundled Apple Root CA - G3) and WeChat keys.
    public init(configuration: LedgerConfiguration) throws {
        let roots = configuration.apple.rootCertificatePaths.isEmpty
            ? [AppleTrustedRoots.bundledAppleRootCAG3]
            : try AppleTrustedRoots.load(paths: configuration.apple.rootCertificatePaths)
        self.init(apple: SignedDataVerifier(trustedRoots: roots), wechat: ConfiguredWeChatKeys(configuration.wechat))
    }

    public func check(_ event: RecordedEvent) -> EvidenceCheck {
        switch event.event.source {
        case .ledger:
            return .unsigned(reason: "the ledger's own record (covered by the hash chain only)")
        case .wechat:
            return wechat.reverify(raw: event.event.raw, recordedAt: event.recordedAt)
        case .apple:
            return checkApple(event.event.raw)
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

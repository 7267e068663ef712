import Crypto
import Foundation
import LedgerCore

/// One set of 消息推送 credentials the mini program used at some time.
public struct WeChatPushKeys: Sendable, CustomStringConvertible {
    public var appId: String
    public var token: String
    public var aesKey: EncodingAESKey?
    /// Where the keys came from or when they were in use ("current", "previous", a note from the file).
    public var label: String

    public init(appId: String, token: String, aesKey: EncodingAESKey?, label: String) {
        self.appId = appId
        self.token = token
        self.aesKey = aesKey
        self.label = label
    }

    public var tokenFingerprint: String { WeChatKeyFingerprint.token(token) }
    public var aesKeyFingerprint: String? { aesKey.map(WeChatKeyFingerprint.aesKey) }

    public var description: String {
        "\(label): appId \(appId), token \(tokenFingerprint)\(aesKeyFingerprint.map { ", EncodingAESKey \($0)" } ?? "")"
    }
}

public enum WeChatKeyHistoryError: Error, Equatable, CustomStringConvertible {
    case unreadable(path: String, reason: String)
    case invalid(path: String, reason: String)

    public var description: String {
        switch self {
        case .unreadable(let p, let r): return "cannot read the WeChat key history \(p): \(r)"
        case .invalid(let p, let r): return "the WeChat key history \(p) is not valid: \(r); expected {\"keys\": [{\"appId\": \"wx…\", \"token\": \"…\", \"aesKey\": \"<43 characters>\", \"label\": \"…\"}]}"
        }
    }
}

/// Every push key the ledger may have to re-verify stored pushes with: the current and previous
/// keys from the configuration, then older ones from a key-history file (`LEDGER_WECHAT_KEY_HISTORY_FILE`):
///
///     {"keys": [{"appId": "wx…", "token": "…", "aesKey": "<43 characters>", "label": "until 2026-03-01"}]}
///
/// `aesKey` may be omitted for a plaintext-only period; `label` is free text. The file holds secrets:
/// keep it where the operator keeps the current keys. Events name keys by `WeChatKeyFingerprint`,
/// never by value, so an auditor can tell which entry opened which push.
public struct WeChatKeyHistory: Sendable {
    public var keys: [WeChatPushKeys]

    public init(keys: [WeChatPushKeys]) { self.keys = keys }

    /// The configuration's keys (current, then the previous EncodingAESKey with the same token),
    /// then the file's.
    public init(appId: String?, token: String?, aesKey: EncodingAESKey?, previousAESKey: EncodingAESKey?,
                file: URL? = nil) throws(WeChatKeyHistoryError) {
        var keys: [WeChatPushKeys] = []
        if let appId, let token {
            keys.append(WeChatPushKeys(appId: appId, token: token, aesKey: aesKey, label: "current"))
            if let previousAESKey { keys.append(WeChatPushKeys(appId: appId, token: token, aesKey: previousAESKey, label: "previous")) }
        }
        if let file { keys += try Self.load(file) }
        self.keys = keys
    }

    public static func load(_ file: URL) throws(WeChatKeyHistoryError) -> [WeChatPushKeys] {
        let data: Data
        do { data = try Data(contentsOf: file) } catch {
            throw .unreadable(path: file.path, reason: "check that the file exists and this user may read it")
        }
        guard let v = try? JSONValue(json: data), case .array(let entries)? = v["keys"] else {
            throw .invalid(path: file.path, reason: "the top level must be an object with a keys array")
        }
        var out: [WeChatPushKeys] = []
        for (i, entry) in entries.enumerated() {
            guard let appId = entry.text("appId"), !appId.isEmpty, let token = entry.text("token"), !token.isEmpty else {
                throw .invalid(path: file.path, reason: "keys[\(i)] needs appId and token")
            }
            var key: EncodingAESKey?
            if let text = entry.text("aesKey") {
                do { key = try EncodingAESKey(text) } catch {
                    throw .invalid(path: file.path, reason: "keys[\(i)].aesKey: \(error.message)")
                }
            }
            out.append(WeChatPushKeys(appId: appId, token: token, aesKey: key, label: entry.text("label") ?? "history[\(i)]"))
        }
        return out
    }
}

/// Offline re-verification of a stored WeChat push (an event's `raw`, see `RawPush`) against the key
/// history: signature, decryption and the appid inside the ciphertext. Used by `ledger
/// verify-payload` and by anything that audits stored pushes (`WeChatPushEvidence.verify(raw:keys:)`).
///
/// Every token of the history is tried for the signature and every (appId, EncodingAESKey) for the
/// ciphertext, so a token and a key rotated at different times still match. Plaintext-mode pushes
/// can only be shown as unsigned bodies: their signature covers the token, timestamp and nonce,
/// never the body.
public enum WeChatPushEvidence {
    public struct Verification: Sendable {
        public enum Outcome: String, Sendable {
            /// Signature and ciphertext verified: the message is what WeChat sent.
            case verified
            /// Plaintext mode: the query's signature verified, but it does not cover the body.
            case unsignedBody = "unsigned_body"
            /// No key of the history opens it (or the stored evidence is not a WeChat push).
            case failed
        }

        public var outcome: Outcome
        public var mode: PushMode?
        public var format: PushFormat?
        /// The history entry whose token verified the signature, and its fingerprint.
        public var tokenLabel: String?
        public var tokenFingerprint: String?
        /// The history entry whose EncodingAESKey decrypted the message, and its fingerprint.
        public var aesKeyLabel: String?
        public var aesKeyFingerprint: String?
        public var appId: String?
        /// What the event recorded at ingestion (`raw.opened_with`, version 2), to compare.
        public var recordedTokenFingerprint: String?
        public var recordedAESKeyFingerprint: String?
        /// The decrypted message (secure, compatible) or the body as received (plaintext).
        public var message: Data?
        /// Why it failed, or what to know about the outcome.
        public var note: String

        /// True when the key the ledger recorded at ingestion is the one that opened it again.
        public var matchesRecording: Bool {
            (recordedTokenFingerprint == nil || recordedTokenFingerprint == tokenFingerprint)
                && (recordedAESKeyFingerprint == nil || recordedAESKeyFingerprint == aesKeyFingerprint)
        }
    }

    /// Re-verifies the `raw` column of a WeChat event.
    public static func verify(raw: Data, keys: WeChatKeyHistory) -> Verification {
        guard let v = try? JSONValue(json: raw), let query = v["query"]?.objectValue, let formatText = v.text("format"),
              let format = PushFormat(rawValue: formatText), let body = RawPush.body(of: raw) else {
            return Verification(outcome: .failed, note: "not a stored WeChat push (expected the raw column: {\"v\", \"format\", \"query\", \"body\"})")
        }
        var parameters: [String: String] = [:]
        for (k, value) in query { if let text = value.text { parameters[k] = text } }
        var result = verify(query: PushQuery(parameters), body: Data(body), keys: keys)
        result.format = format
        result.recordedTokenFingerprint = v["opened_with"]?.text("token")
        result.recordedAESKeyFingerprint = v["opened_with"]?.text("aes_key")
        return result
    }

    /// Re-verifies a push given its query parameters and exact body.
    public static func verify(query: PushQuery, body: Data, keys: WeChatKeyHistory) -> Verification {
        guard !keys.keys.isEmpty else {
            return Verification(outcome: .failed, note: "no WeChat keys: configure LEDGER_WECHAT_APPID and LEDGER_WECHAT_TOKEN, or give a key history file")
        }
        var tokens: [(String, String)] = []
        for k in keys.keys where !tokens.contains(where: { $0.1 == k.token }) { tokens.append((k.label, k.token)) }
        var ciphers: [(label: String, appId: String, key: EncodingAESKey?)] = []
        for k in keys.keys where !ciphers.contains(where: { $0.appId == k.appId && $0.key == k.aesKey }) {
            ciphers.append((k.label, k.appId, k.aesKey))
        }
        var lastError: WeChatPushError?
        for (tokenLabel, token) in tokens {
            for cipher in ciphers {
                let config: WeChatPushConfig
                do {
                    config = try WeChatPushConfig(appId: cipher.appId, token: token, aesKey: cipher.key, allowPlaintext: true,
                                                  maxBodyBytes: 16 << 20, maxDepth: 32)
                } catch { lastError = error; continue }
                do {
                    let push = try PushReceiver(config: config).open(query: query, body: body)
                    if push.mode == .plaintext {
                        return Verification(
                            outcome: .unsignedBody, mode: .plaintext, format: push.format, tokenLabel: tokenLabel,
                            tokenFingerprint: WeChatKeyFingerprint.token(token), appId: nil, message: body,
                            note: "plaintext mode: the signature (token \(WeChatKeyFingerprint.token(token)), \(tokenLabel)) covers only the token, timestamp and nonce — the body is shown as received and is NOT authenticated")
                    }
                    return Verification(
                        outcome: .verified, mode: push.mode, format: push.format, tokenLabel: tokenLabel,
                        tokenFingerprint: WeChatKeyFingerprint.token(token), aesKeyLabel: cipher.label,
                        aesKeyFingerprint: push.aesKeyFingerprint, appId: cipher.appId,
                        message: push.payload.isEmpty ? nil : Data(push.payload),
                        note: "msg_signature verified with token \(WeChatKeyFingerprint.token(token)) (\(tokenLabel)); decrypted with EncodingAESKey \(push.aesKeyFingerprint ?? "?") (\(cipher.label)); appid \(cipher.appId) inside the ciphertext")
                } catch {
                    lastError = error
                    // A mismatch means "another key"; anything else will not change with the key.
                    switch error {
                    case .badSignature, .badMsgSignature, .badPadding, .badMessageLength, .appIdMismatch, .encryptedPushWithoutKey:
                        continue
                    default:
                        return Verification(outcome: .failed, note: "\(error.code): \(error.message)")
                    }
                }
            }
        }
        return Verification(outcome: .failed,
                            note: "no key of the history opens it (last: \(lastError.map { "\($0.code): \($0.message)" } ?? "none")); add the keys of its time to the key history file")
    }
}

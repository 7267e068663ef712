import Crypto
import Foundation
import LedgerCore

/// The 消息推送 settings of one mini program.
public struct WeChatPushConfig: Sendable {
    /// Checked against the appid inside every ciphertext and appended to every encrypted reply.
    /// For a third-party platform this is the platform (component) appid.
    public var appId: String
    public var token: String
    /// Required for compatible and secure mode.
    public var aesKey: EncodingAESKey?
    /// The key before the last rotation: tried when the current one fails (WeChat's FAQ rule).
    public var previousAESKey: EncodingAESKey?
    /// Plaintext mode authenticates only the query, not the body: refused unless enabled here.
    public var allowPlaintext: Bool
    /// Checked on the raw body before any parsing.
    public var maxBodyBytes: Int
    public var maxDepth: Int

    public init(appId: String, token: String, aesKey: EncodingAESKey? = nil, previousAESKey: EncodingAESKey? = nil,
                allowPlaintext: Bool = false, maxBodyBytes: Int = 256 * 1024, maxDepth: Int = 16) throws(WeChatPushError) {
        guard !appId.isEmpty, appId.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw .invalidConfiguration("appId must be the mini program's AppID (printable ASCII, e.g. wx…)")
        }
        guard !token.isEmpty else { throw .invalidConfiguration("token must be the 消息推送 Token (non-empty)") }
        guard maxBodyBytes > 0, maxDepth > 1 else { throw .invalidConfiguration("maxBodyBytes must be > 0 and maxDepth > 1") }
        self.appId = appId
        self.token = token
        self.aesKey = aesKey
        self.previousAESKey = previousAESKey
        self.allowPlaintext = allowPlaintext
        self.maxBodyBytes = maxBodyBytes
        self.maxDepth = maxDepth
    }
}

// The token is a secret: keep it out of logs even when the config is printed whole.
extension WeChatPushConfig: CustomStringConvertible {
    public var description: String {
        "WeChatPushConfig(appId: \(appId), token: redacted, aesKey: \(aesKey == nil ? "none" : "redacted"), previousAESKey: \(previousAESKey == nil ? "none" : "redacted"), allowPlaintext: \(allowPlaintext))"
    }
}

/// The query parameters WeChat sends with a push (decoded values).
public struct PushQuery: Sendable, Equatable {
    public var signature: String?
    public var timestamp: String?
    public var nonce: String?
    public var echostr: String?
    public var encryptType: String?
    public var msgSignature: String?
    public var openid: String?

    public init(signature: String? = nil, timestamp: String? = nil, nonce: String? = nil, echostr: String? = nil,
                encryptType: String? = nil, msgSignature: String? = nil, openid: String? = nil) {
        self.signature = signature
        self.timestamp = timestamp
        self.nonce = nonce
        self.echostr = echostr
        self.encryptType = encryptType
        self.msgSignature = msgSignature
        self.openid = openid
    }

    /// From the decoded query parameters of the request.
    public init(_ parameters: [String: String]) {
        self.init(signature: parameters["signature"], timestamp: parameters["timestamp"], nonce: parameters["nonce"],
                  echostr: parameters["echostr"], encryptType: parameters["encrypt_type"],
                  msgSignature: parameters["msg_signature"], openid: parameters["openid"])
    }

    /// The parameters that re-verify the message later (echostr is only for GET).
    var stored: [String: JSONValue] {
        var o: [String: JSONValue] = [:]
        for (k, v) in [("signature", signature), ("timestamp", timestamp), ("nonce", nonce), ("encrypt_type", encryptType),
                       ("msg_signature", msgSignature), ("openid", openid)] {
            if let v { o[k] = .string(v) }
        }
        return o
    }
}

/// 明文 / 兼容 / 安全模式, as this push arrived.
public enum PushMode: String, Sendable, Equatable {
    case plaintext
    case compatible
    case secure
}

/// A push that passed every check: authentic, decrypted and parsed.
public struct ReceivedPush: Sendable, Equatable {
    public var format: PushFormat
    public var mode: PushMode
    /// The decrypted (or plaintext) message.
    public var message: JSONValue
    /// The message as stored in the event's `payload`: the decrypted JSON bytes as received, or the
    /// XML converted to a JSON object (every XML value is a string).
    public var payload: Data
    /// The evidence stored in the event's `raw` (see `RawPush`).
    public var raw: Data
    /// The request nonce, echoed in an encrypted reply.
    public var nonce: String
    /// The request's `timestamp` (Unix seconds, as signed).
    public var timestamp: Int64
    /// Which key decrypted it; the reply is encrypted with the same one. nil in plaintext mode.
    let key: EncodingAESKey?

    public var event: String? { message.text("Event") }
    public var msgType: String? { message.text("MsgType") }
    /// True when `previousAESKey` decrypted the message: the sender has not switched yet.
    public let usedPreviousKey: Bool
    /// Fingerprints of the token that verified the signature and of the EncodingAESKey that
    /// decrypted the message (nil in plaintext mode), as recorded in `raw`.
    public let tokenFingerprint: String
    public let aesKeyFingerprint: String?
}

/// Short, non-reversible names of WeChat push keys: the first 16 hex digits of a domain-separated
/// SHA-256. Events and `ledger:config` records name keys by these, never by the keys themselves.
public enum WeChatKeyFingerprint {
    public static func token(_ token: String) -> String {
        String(Hex.encode(Digest.sha256(Array("wechat-push-token\u{0}".utf8) + Array(token.utf8))).prefix(16))
    }

    public static func aesKey(_ key: EncodingAESKey) -> String {
        String(Hex.encode(Digest.sha256(Array("wechat-encoding-aes-key\u{0}".utf8) + key.key)).prefix(16))
    }

    /// Any other secret (the xpay AppKey, the AppSecret), domain-separated by its name.
    public static func secret(_ value: String, name: String) -> String {
        String(Hex.encode(Digest.sha256(Array("wechat-\(name)\u{0}".utf8) + Array(value.utf8))).prefix(16))
    }
}

/// The ±window in which a push's `timestamp` is fresh. In plaintext mode the signature covers only
/// the token, timestamp and nonce — not the body — so a captured query string would authorise any
/// body: a stale timestamp is refused there, and a nonce may be used with one body only. In
/// compatible and secure mode `msg_signature` covers the ciphertext, so a stale timestamp is only
/// counted (an authentic re-push is never refused).
public struct ReplayWindow: Sendable, Equatable {
    public var seconds: Int64

    public init(seconds: Int64 = 300) { self.seconds = seconds }

    /// How far outside the window `timestamp` is (positive: too old, negative: too far ahead), or
    /// nil when fresh.
    public func skew(of timestamp: Int64, now: Int64) -> Int64? {
        let (age, overflow) = now.subtractingReportingOverflow(timestamp)
        if overflow { return timestamp > now ? -.max : .max }
        return abs(age) <= seconds ? nil : age
    }
}

/// The `raw` column of a WeChat event: exactly what arrived, so an auditor holding the token and
/// EncodingAESKey can re-verify the signature and decrypt again.
///
///     {"v":1,"format":"json"|"xml","query":{"signature":…,"timestamp":…,"nonce":…,
///      "encrypt_type":…,"msg_signature":…,"openid":…},"body":"<exact body>"}
///
/// `body` is the body as a JSON string when it is valid UTF-8 (decoding the string gives back the
/// same bytes), otherwise `body_base64` holds it in base64. Only query parameters that were sent
/// appear; keys are sorted.
///
/// Version 2 adds `opened_with`: `{"token": <fingerprint>, "aes_key": <fingerprint>}`, the
/// `WeChatKeyFingerprint`s of the token that verified it and the EncodingAESKey that decrypted it
/// (absent in plaintext mode), so an auditor knows which key of the history to re-verify with.
public enum RawPush {
    public static func encode(query: PushQuery, body: [UInt8], format: PushFormat, tokenFingerprint: String? = nil,
                              aesKeyFingerprint: String? = nil) -> Data {
        var o: [String: JSONValue] = ["v": .integer(tokenFingerprint == nil ? 1 : 2), "format": .string(format.rawValue),
                                      "query": .object(query.stored)]
        if let tokenFingerprint {
            var opened: [String: JSONValue] = ["token": .string(tokenFingerprint)]
            if let aesKeyFingerprint { opened["aes_key"] = .string(aesKeyFingerprint) }
            o["opened_with"] = .object(opened)
        }
        if let s = String(validating: body, as: UTF8.self) {
            o["body"] = .string(s)
        } else {
            o["body_base64"] = .string(Data(body).base64EncodedString())
        }
        return JSONValue.object(o).canonicalJSON()
    }

    /// The exact body bytes back from a stored `raw`.
    public static func body(of raw: Data) -> [UInt8]? { WeChatRawPush(raw: raw)?.body }
}

/// Verifies, decrypts and parses pushes, and writes replies.
public struct PushReceiver: Sendable {
    public let config: WeChatPushConfig

    public init(config: WeChatPushConfig) { self.config = config }

    /// GET URL check: answers `echostr` (unencrypted in the mini-program flow) when `signature`
    /// matches SHA-1 of the sorted token, timestamp and nonce.
    public func verifyURL(_ query: PushQuery) throws(WeChatPushError) -> String {
        let (ts, nonce) = try timestampAndNonce(query)
        guard let signature = query.signature else { throw .missingParameter("signature") }
        guard let echostr = query.echostr else { throw .missingParameter("echostr") }
        guard echostr.utf8.count <= 512, echostr.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw .invalidParameter(name: "echostr", reason: "must be at most 512 printable ASCII characters")
        }
        guard PushSignature.matches(signature, [config.token, ts, nonce]) else { throw .badSignature }
        return echostr
    }

    /// An encrypted push whose `msg_signature` holds — the sender knows the token — but which the
    /// ledger cannot open: no key it holds decrypts it (a rotated EncodingAESKey), or the decrypted
    /// message is not one StrictXML or JSONGuard reads.
    public struct UnreadablePush: Sendable {
        /// Why, as the refusal it would have been.
        public let reason: WeChatPushError
        /// The evidence (`RawPush`, with the token's fingerprint, and the key's when one decrypted it).
        public let raw: Data
        /// `sha256:` of what identifies the message across re-pushes: the decrypted bytes when a
        /// key opened it, else the `Encrypt` text.
        public let dedupeKey: String
        public let format: PushFormat
        /// A key decrypted it, and the message inside could not be parsed.
        public let decrypted: Bool
    }

    /// What `openKeepingUnreadable` found.
    public enum Opening: Sendable {
        case opened(ReceivedPush)
        case unreadable(UnreadablePush)
    }

    /// `open`, except that an authentic encrypted push that cannot be decrypted or parsed comes
    /// back as `.unreadable` instead of a refusal: WeChat gives up after its retries, so the ledger
    /// keeps it as evidence (a later key history may open it). Plaintext mode is not covered: its
    /// signature does not cover the body, so an unreadable body there proves nothing.
    public func openKeepingUnreadable(query: PushQuery, body: Data) throws(WeChatPushError) -> Opening {
        try open(query: query, body: body, keepingUnreadable: true)
    }

    /// POST: checks size and the signature before anything is parsed — `signature` over the query
    /// in plaintext mode; in the other modes `msg_signature` over `Encrypt`, which is taken from the
    /// envelope by `StrictXML` (XML) or `JSONGuard` and the JSON reader (JSON), never by an XML
    /// parser — then decrypts with the current or previous key, checks the appid, and parses the
    /// message in its format.
    public func open(query: PushQuery, body: Data) throws(WeChatPushError) -> ReceivedPush {
        switch try open(query: query, body: body, keepingUnreadable: false) {
        case .opened(let push): return push
        case .unreadable(let kept): throw kept.reason
        }
    }

    private func open(query: PushQuery, body: Data, keepingUnreadable: Bool) throws(WeChatPushError) -> Opening {
        guard body.count <= config.maxBodyBytes else { throw .bodyTooLarge(limit: config.maxBodyBytes, actual: body.count) }
        let bytes = [UInt8](body)
        let (ts, nonce) = try timestampAndNonce(query)
        let format = try PushFormat.detect(bytes)
        let tokenFingerprint = WeChatKeyFingerprint.token(config.token)
        // The evidence is encoded only for a push that passed every check: unauthenticated junk
        // should cost as little as possible.
        func raw(_ key: EncodingAESKey?) -> Data {
            RawPush.encode(query: query, body: bytes, format: format, tokenFingerprint: tokenFingerprint,
                           aesKeyFingerprint: key.map(WeChatKeyFingerprint.aesKey))
        }
        let seconds = Int64(ts) ?? 0

        let encryptedByQuery = query.encryptType?.lowercased() == "aes"
        if let t = query.encryptType, !encryptedByQuery, t.lowercased() != "raw" {
            throw .invalidParameter(name: "encrypt_type", reason: "must be 'aes' or 'raw', got a different value")
        }
        guard encryptedByQuery else {
            guard let signature = query.signature else { throw .missingParameter("signature") }
            guard PushSignature.matches(signature, [config.token, ts, nonce]) else { throw .badSignature }
            guard config.allowPlaintext else { throw .plaintextRefused }
            let message = try PushCodec.parse(bytes, format: format, maxDepth: config.maxDepth)
            let payload = try payloadJSON(original: bytes, message: message, format: format)
            return .opened(ReceivedPush(format: format, mode: .plaintext, message: message, payload: payload, raw: raw(nil),
                                        nonce: nonce, timestamp: seconds, key: nil, usedPreviousKey: false,
                                        tokenFingerprint: tokenFingerprint, aesKeyFingerprint: nil))
        }

        let (encryptText, members) = try envelope(bytes, format: format)
        guard let encrypt = encryptText, !encrypt.isEmpty else { throw .missingEncrypt }
        guard let msgSignature = query.msgSignature else { throw .missingParameter("msg_signature") }
        guard PushSignature.matches(msgSignature, [config.token, ts, nonce, encrypt]) else { throw .badMsgSignature }
        // From here on the push is authentic: the signature covers the ciphertext.
        func unreadable(_ why: WeChatPushError, identifiedBy bytes: [UInt8], openedWith key: EncodingAESKey? = nil) throws(WeChatPushError) -> Opening {
            guard keepingUnreadable else { throw why }
            return .unreadable(UnreadablePush(reason: why, raw: raw(key), dedupeKey: "sha256:" + Hex.encode(Digest.sha256(bytes)),
                                              format: format, decrypted: key != nil))
        }
        guard let current = config.aesKey else { return try unreadable(.encryptedPushWithoutKey, identifiedBy: Array(encrypt.utf8)) }

        var inner: [UInt8]
        var key = current
        var usedPrevious = false
        do {
            inner = try MessageCipher.decrypt(encrypt, appId: config.appId, key: current)
        } catch {
            // Base64 and length errors do not depend on the key: report them as they are.
            guard let previous = config.previousAESKey, [.badPadding, .badMessageLength, .appIdMismatch].contains(error),
                  let retried = try? MessageCipher.decrypt(encrypt, appId: config.appId, key: previous) else {
                return try unreadable(error, identifiedBy: Array(encrypt.utf8))
            }
            inner = retried
            key = previous
            usedPrevious = true
        }
        let innerFormat = (try? PushFormat.detect(inner)) ?? format
        let message: JSONValue, payload: Data
        do {
            message = try PushCodec.parse(inner, format: innerFormat, maxDepth: config.maxDepth)
            payload = try payloadJSON(original: inner, message: message, format: innerFormat)
        } catch {
            return try unreadable(error, identifiedBy: inner, openedWith: key)
        }
        let others = members.filter { $0 != "Encrypt" && $0 != "ToUserName" }
        return .opened(ReceivedPush(format: format, mode: others.isEmpty ? .secure : .compatible, message: message,
                                    payload: payload, raw: raw(key), nonce: nonce, timestamp: seconds, key: key,
                                    usedPreviousKey: usedPrevious, tokenFingerprint: tokenFingerprint,
                                    aesKeyFingerprint: WeChatKeyFingerprint.aesKey(key)))
    }

    /// `Encrypt` and the member names of an encrypted push's envelope, read without an XML parser.
    private func envelope(_ bytes: [UInt8], format: PushFormat) throws(WeChatPushError) -> (encrypt: String?, members: [String]) {
        switch format {
        case .json:
            let object = try PushCodec.parseJSON(bytes, maxDepth: config.maxDepth)
            guard case .string(let encrypt)? = object["Encrypt"] else { return (nil, object.objectValue.map { Array($0.keys) } ?? []) }
            return (encrypt, object.objectValue.map { Array($0.keys) } ?? [])
        case .xml:
            let scanned = try StrictXML.scan(bytes, maxDepth: config.maxDepth)
            return (scanned.text("Encrypt"), scanned.children.map(\.name))
        }
    }

    private func timestampAndNonce(_ query: PushQuery) throws(WeChatPushError) -> (String, String) {
        guard let ts = query.timestamp else { throw .missingParameter("timestamp") }
        guard let nonce = query.nonce else { throw .missingParameter("nonce") }
        guard ts.utf8.count <= 20, !ts.isEmpty, ts.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            throw .invalidParameter(name: "timestamp", reason: "must be decimal Unix seconds")
        }
        guard nonce.utf8.count <= 128, !nonce.isEmpty else {
            throw .invalidParameter(name: "nonce", reason: "must be 1 to 128 characters")
        }
        return (ts, nonce)
    }

    /// JSON messages are stored byte for byte; XML messages as the equivalent JSON object.
    private func payloadJSON(original: [UInt8], message: JSONValue, format: PushFormat) throws(WeChatPushError) -> Data {
        format == .json ? Data(original) : message.canonicalJSON()
    }

    // MARK: replies

    /// The body to answer a push with, in the push's format. In compatible and secure mode every
    /// reply except an empty one is encrypted (the protocol's rule for "other reply content"),
    /// with the key that decrypted the push, a fresh random prefix, the current (or given)
    /// timestamp, and `MsgSignature` over them. The nonce defaults to the request's, as the
    /// official push document and its reply vector do; pass `nonce:` to send another one.
    public func reply(_ reply: PushReply, to push: ReceivedPush, timestamp: Int64? = nil, nonce: String? = nil,
                      random: [UInt8]? = nil) throws(WeChatPushError) -> Data {
        try self.reply(plaintext: reply.encoded(format: push.format), to: push, timestamp: timestamp, nonce: nonce, random: random)
    }

    /// The body for an already encoded plaintext reply (e.g. a stored answer), encrypted as `reply` does.
    public func reply(plaintext plain: [UInt8], to push: ReceivedPush, timestamp: Int64? = nil, nonce: String? = nil,
                      random: [UInt8]? = nil) throws(WeChatPushError) -> Data {
        guard let key = push.key, !plain.isEmpty else { return Data(plain) }
        return try encryptReply(plain, format: push.format, key: key, timestamp: timestamp ?? Int64(Date().timeIntervalSince1970),
                                nonce: nonce ?? push.nonce, random: random)
    }

    /// Encrypts an already encoded reply (exposed for the official vectors, whose messages are
    /// not xpay replies).
    public func encryptReply(_ plain: [UInt8], format: PushFormat, key: EncodingAESKey? = nil, timestamp: Int64,
                             nonce: String, random: [UInt8]? = nil) throws(WeChatPushError) -> Data {
        guard let key = key ?? config.aesKey else { throw .encryptedPushWithoutKey }
        let encrypt = try MessageCipher.encrypt(plain, appId: config.appId, key: key, random: random ?? SecureRandom.bytes(16))
        let ts = String(timestamp)
        let signature = PushSignature.compute([config.token, ts, nonce, encrypt])
        let fields: [(String, PushCodec.Field)] = [
            ("Encrypt", .string(encrypt)), ("MsgSignature", .string(signature)),
            ("TimeStamp", .int(timestamp)), ("Nonce", .string(nonce)),
        ]
        return Data(PushCodec.write(fields, format: format))
    }

    /// Decrypts an encrypted reply (ours or the vectors'), checking its MsgSignature.
    public func openReply(_ body: Data, format: PushFormat) throws(WeChatPushError) -> [UInt8] {
        let bytes = [UInt8](body)
        func field(_ name: String) throws(WeChatPushError) -> String? {
            switch format {
            case .xml: return try StrictXML.scan(bytes, maxDepth: config.maxDepth).text(name)
            case .json: return try PushCodec.parseJSON(bytes, maxDepth: config.maxDepth).text(name)
            }
        }
        guard let encrypt = try field("Encrypt") else { throw .missingEncrypt }
        guard let sig = try field("MsgSignature"), let ts = try field("TimeStamp"), let nonce = try field("Nonce") else {
            throw .missingParameter("MsgSignature/TimeStamp/Nonce")
        }
        guard PushSignature.matches(sig, [config.token, ts, nonce, encrypt]) else { throw .badMsgSignature }
        guard let key = config.aesKey else { throw .encryptedPushWithoutKey }
        do {
            return try MessageCipher.decrypt(encrypt, appId: config.appId, key: key)
        } catch {
            guard let previous = config.previousAESKey else { throw error }
            return try MessageCipher.decrypt(encrypt, appId: config.appId, key: previous)
        }
    }

}

/// What to answer a push with.
public enum PushReply: Sendable, Equatable {
    /// `ErrCode` 0 / `ErrMsg` "success": the push is durably stored.
    case success
    /// `ErrCode` ≠ 0: WeChat will push again.
    case failure(code: Int64, message: String)
    /// The answer to `xpay_subscribe_ios_refund_query_notify`.
    case refundAnswer(RefundDecision)
    /// An empty body (accepted by WeChat as success, never encrypted).
    case empty

    func encoded(format: PushFormat) -> [UInt8] {
        switch self {
        case .empty: return []
        case .success: return PushCodec.write([("ErrCode", .int(0)), ("ErrMsg", .string("success"))], format: format)
        case .failure(let code, let message):
            return PushCodec.write([("ErrCode", .int(code)), ("ErrMsg", .string(message))], format: format)
        case .refundAnswer(let d):
            return PushCodec.write([("result_code", .int(Int64(d.resultCode))), ("result_info", .string(d.resultInfo)),
                                    ("evidence", .string(d.evidence))], format: format)
        }
    }

    /// The plaintext reply, as recorded in the answer event's `raw`.
    public func plaintext(format: PushFormat) -> Data { Data(encoded(format: format)) }
}

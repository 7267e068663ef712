/// WeChatPay owns everything WeChat-specific between the HTTP route and the event log: the message
/// push transport (URL check, signatures, secure-mode AES, JSON and XML codecs, replies), the xpay
/// Apple-subscription events turned into `NewEvent`s, refund-inquiry answers, the parameters for
/// `wx.requestAppleSubscribeSign`, and the `query_subscribe_contract` server API client.
/// It is pure and synchronous except for `WeChatServerAPI`; the service does the storage and routing.
import Foundation

/// Why a push was refused. `kind` maps to the HTTP status; `message` says how to fix the cause and
/// never contains the token, the AES key or a decrypted body.
public enum WeChatPushError: Error, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// 400: the request is not a well-formed push.
        case malformed
        /// 401: a signature, the AES envelope or the trailing appid does not match our credentials.
        case unauthenticated
        /// 413: the body exceeds the configured limit (checked before any parsing).
        case tooLarge
        /// 422: well-formed and authentic, but not acceptable (e.g. plaintext mode refused).
        case notAccepted
        /// 500: the server's own WeChat settings are wrong.
        case configuration

        public var httpStatus: Int {
            switch self {
            case .malformed: return 400
            case .unauthenticated: return 401
            case .tooLarge: return 413
            case .notAccepted: return 422
            case .configuration: return 500
            }
        }
    }

    case invalidConfiguration(String)
    case missingParameter(String)
    case invalidParameter(name: String, reason: String)
    case bodyTooLarge(limit: Int, actual: Int)
    case badSignature
    case badMsgSignature
    case missingEncrypt
    case encryptedPushWithoutKey
    case plaintextRefused
    case invalidBase64
    case invalidCiphertextLength(Int)
    case badPadding
    case badMessageLength
    case appIdMismatch
    case unknownBodyFormat
    case forbiddenXMLDeclaration(String)
    case invalidXML(String)
    case invalidJSON(String)
    case nestingTooDeep(limit: Int)
    case notAnObject
    case missingField(event: String, field: String)
    case invalidField(event: String, field: String, reason: String)
    /// Plaintext mode: the signed `timestamp` is outside the replay window (`skew` s from now).
    case staleTimestamp(skew: Int64, window: Int64)
    /// Plaintext mode: the nonce was already used, within the replay window, with another body.
    case nonceReused

    public var kind: Kind {
        switch self {
        case .invalidConfiguration: return .configuration
        case .bodyTooLarge: return .tooLarge
        case .badSignature, .badMsgSignature, .appIdMismatch, .badPadding, .badMessageLength, .staleTimestamp, .nonceReused:
            return .unauthenticated
        case .plaintextRefused, .encryptedPushWithoutKey: return .notAccepted
        default: return .malformed
        }
    }

    /// Stable machine-readable code for the `{"error": code}` body.
    public var code: String {
        switch self {
        case .invalidConfiguration: return "wechat_configuration"
        case .missingParameter: return "missing_parameter"
        case .invalidParameter: return "invalid_parameter"
        case .bodyTooLarge: return "body_too_large"
        case .badSignature: return "bad_signature"
        case .badMsgSignature: return "bad_msg_signature"
        case .missingEncrypt: return "missing_encrypt"
        case .encryptedPushWithoutKey: return "encrypted_push_without_key"
        case .plaintextRefused: return "plaintext_refused"
        case .invalidBase64: return "invalid_base64"
        case .invalidCiphertextLength: return "invalid_ciphertext_length"
        case .badPadding: return "bad_padding"
        case .badMessageLength: return "bad_message_length"
        case .appIdMismatch: return "appid_mismatch"
        case .unknownBodyFormat: return "unknown_body_format"
        case .forbiddenXMLDeclaration: return "xml_declaration_forbidden"
        case .invalidXML: return "invalid_xml"
        case .invalidJSON: return "invalid_json"
        case .nestingTooDeep: return "nesting_too_deep"
        case .notAnObject: return "not_an_object"
        case .missingField: return "missing_field"
        case .invalidField: return "invalid_field"
        case .staleTimestamp: return "stale_timestamp"
        case .nonceReused: return "nonce_reused"
        }
    }

    public var message: String {
        switch self {
        case .invalidConfiguration(let why):
            return "WeChat push settings are invalid: \(why)"
        case .missingParameter(let name):
            return "query parameter '\(name)' is required; WeChat sends signature, timestamp and nonce (and msg_signature in secure mode)"
        case .invalidParameter(let name, let reason):
            return "query parameter '\(name)' is invalid: \(reason)"
        case .bodyTooLarge(let limit, let actual):
            return "body of \(actual) bytes exceeds the \(limit)-byte limit for WeChat pushes"
        case .badSignature:
            return "signature does not match SHA-1 of the sorted token, timestamp and nonce; check LEDGER_WECHAT_TOKEN against the mini-program's 消息推送 Token"
        case .badMsgSignature:
            return "msg_signature does not match SHA-1 of the sorted token, timestamp, nonce and Encrypt; check LEDGER_WECHAT_TOKEN against the mini-program's 消息推送 Token"
        case .missingEncrypt:
            return "encrypt_type=aes but the body has no Encrypt member"
        case .encryptedPushWithoutKey:
            return "the push is encrypted but no EncodingAESKey is configured; set LEDGER_WECHAT_AES_KEY"
        case .plaintextRefused:
            return "plaintext-mode pushes are refused (their signature does not cover the body); switch 消息加解密方式 to 安全模式 or enable plaintext explicitly for development"
        case .invalidBase64:
            return "Encrypt is not valid base64 (truncated or altered in transit)"
        case .invalidCiphertextLength(let n):
            return "Encrypt decodes to \(n) bytes; WeChat ciphertext is a non-empty multiple of 32 bytes"
        case .badPadding:
            return "decrypted message has invalid PKCS#7 padding (block size 32); the EncodingAESKey is probably wrong, set LEDGER_WECHAT_AES_KEY (and the previous key during a rotation)"
        case .badMessageLength:
            return "decrypted message length field is out of bounds; the EncodingAESKey is probably wrong"
        case .appIdMismatch:
            return "the appid inside the ciphertext is not ours; check LEDGER_WECHAT_APPID (for a third-party platform, the platform appid)"
        case .unknownBodyFormat:
            return "body is neither JSON nor XML; WeChat pushes one or the other depending on 数据格式"
        case .forbiddenXMLDeclaration(let what):
            return "XML with \(what) is refused (no declarations, DTDs, entities, comments or processing instructions are accepted, to prevent XXE)"
        case .invalidXML(let why):
            return "XML body is not well-formed: \(why)"
        case .invalidJSON(let why):
            return "JSON body is not valid: \(why)"
        case .nestingTooDeep(let limit):
            return "message nests deeper than \(limit) levels"
        case .notAnObject:
            return "message must be a JSON object or an <xml> element with child elements"
        case .missingField(let event, let field):
            return "\(event) push lacks \(field), which the ledger needs to store it"
        case .invalidField(let event, let field, let reason):
            return "\(event) push has an invalid \(field): \(reason)"
        case .staleTimestamp(let skew, let window):
            return "plaintext push refused: its timestamp is \(skew == .max || skew == -.max ? "out of range" : "\(abs(skew)) s \(skew > 0 ? "old" : "ahead")"), outside the ±\(window) s replay window (the plaintext signature does not cover the body, so only fresh query strings are accepted); check the server clock, or switch 消息加解密方式 to 安全模式"
        case .nonceReused:
            return "plaintext push refused: this nonce was already used with a different body within the replay window (a replayed query string); WeChat sends a new nonce with every push"
        }
    }

    public var description: String { "\(code): \(message)" }
}

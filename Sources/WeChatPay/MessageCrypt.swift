import Crypto
import Foundation

/// The 43-character EncodingAESKey of the 消息推送 settings, decoded to its 32-byte AES key.
public struct EncodingAESKey: Sendable, Equatable {
    let key: [UInt8]

    public init(_ encoded: String) throws(WeChatPushError) {
        let bytes = Array(encoded.utf8)
        guard bytes.count == 43 else {
            throw .invalidConfiguration("EncodingAESKey must be exactly 43 characters, got \(bytes.count)")
        }
        guard bytes.allSatisfy(Base64.isAlphabet), let data = Data(base64Encoded: encoded + "="), data.count == 32 else {
            throw .invalidConfiguration("EncodingAESKey must be 43 characters of the base64 alphabet (A-Z a-z 0-9 + /)")
        }
        key = Array(data)
    }

    /// CBC uses the first half of the key as IV: the protocol fixes it, so it carries no secrecy.
    var iv: [UInt8] { Array(key[0..<16]) }
}

// Keys are secrets: never print them.
extension EncodingAESKey: CustomStringConvertible {
    public var description: String { "EncodingAESKey(redacted)" }
}

enum Base64 {
    static func isAlphabet(_ b: UInt8) -> Bool {
        (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || (b >= 48 && b <= 57) || b == 43 || b == 47
    }
}

/// WXBizMsgCrypt: `random(16) | msg_len(4, big-endian) | msg | appid`, PKCS#7-padded to 32 bytes,
/// AES-256-CBC with IV = key[0..<16], base64.
enum MessageCipher {
    static let blockSize = 32

    static func encrypt(_ message: [UInt8], appId: String, key: EncodingAESKey,
                        random: [UInt8] = SecureRandom.bytes(16)) throws(WeChatPushError) -> String {
        precondition(random.count == 16, "the random prefix is 16 bytes")
        var full = random
        full.reserveCapacity(message.count + 64)
        let n = UInt32(message.count)
        full += [UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]
        full += message
        full += Array(appId.utf8)
        let pad = blockSize - full.count % blockSize
        full += [UInt8](repeating: UInt8(pad), count: pad)
        do {
            let cipher = try AES256CBC.encrypt(key: key.key, iv: key.iv, plaintext: full)
            return Data(cipher).base64EncodedString()
        } catch {
            throw .invalidConfiguration("AES encryption failed: \(error)")
        }
    }

    /// Returns the inner message bytes; checks padding, the length field and the trailing appid.
    static func decrypt(_ encrypt: String, appId: String, key: EncodingAESKey) throws(WeChatPushError) -> [UInt8] {
        guard let data = Data(base64Encoded: encrypt) else { throw .invalidBase64 }
        let cipher = [UInt8](data)
        guard !cipher.isEmpty, cipher.count % blockSize == 0 else { throw .invalidCiphertextLength(cipher.count) }
        let full: [UInt8]
        do {
            full = try AES256CBC.decrypt(key: key.key, iv: key.iv, ciphertext: cipher)
        } catch {
            throw .invalidCiphertextLength(cipher.count)
        }
        let pad = Int(full[full.count - 1])
        guard pad >= 1, pad <= blockSize, pad <= full.count else { throw .badPadding }
        var padOK: UInt8 = 0
        for b in full[(full.count - pad)...] { padOK |= b ^ UInt8(pad) }
        guard padOK == 0 else { throw .badPadding }
        let body = full[..<(full.count - pad)]
        guard body.count >= 20 else { throw .badMessageLength }
        let start = body.startIndex
        let n = Int(body[start + 16]) << 24 | Int(body[start + 17]) << 16 | Int(body[start + 18]) << 8 | Int(body[start + 19])
        guard n <= body.count - 20 else { throw .badMessageLength }
        let msgEnd = start + 20 + n
        let trailingId = Array(body[msgEnd...])
        guard ConstantTime.equals(trailingId, Array(appId.utf8)) else { throw .appIdMismatch }
        return Array(body[(start + 20)..<msgEnd])
    }
}

/// SHA-1 signatures of the push protocol: the lowercase hex digest of the byte-wise sorted parts
/// joined without a separator.
public enum PushSignature {
    public static func compute(_ parts: [String]) -> String {
        let sorted = parts.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
        // Whole-array appends, not `joined()`: its per-byte generic iteration made signing a
        // 1 KB Encrypt cost ~0.3 ms in a debug build, the slowest step of opening a push.
        var joined: [UInt8] = []
        joined.reserveCapacity(sorted.reduce(0) { $0 + $1.count })
        for part in sorted { joined.append(contentsOf: part) }
        return Hex.encode(Digest.sha1(joined))
    }

    static func matches(_ expected: String, _ parts: [String]) -> Bool {
        // Hex from WeChat is lowercase; accept uppercase too rather than fail on a proxy's rewrite.
        ConstantTime.equals(compute(parts), expected.lowercased())
    }
}

import Crypto
import Foundation

/// xpay signatures. `pay_sig` = hex(HMAC-SHA256(AppKey, uri + "&" + body)); the user-state
/// `signature` = hex(HMAC-SHA256(session_key as its UTF-8 string, body)). The body must be the
/// exact bytes sent, so callers serialize once and sign and send that.
public enum XPaySignature {
    public static func paySig(appKey: String, uri: String, body: [UInt8]) -> String {
        Hex.encode(Digest.hmacSHA256(key: Array(appKey.utf8), Array(uri.utf8) + [UInt8(ascii: "&")] + body))
    }

    public static func userSignature(sessionKey: String, body: [UInt8]) -> String {
        Hex.encode(Digest.hmacSHA256(key: Array(sessionKey.utf8), body))
    }
}

public enum SignParamsError: Error, Equatable, CustomStringConvertible {
    case invalid(field: String, reason: String)

    public var code: String { "invalid_sign_params" }
    public var message: String {
        switch self {
        case .invalid(let f, let r): return "\(f) \(r)"
        }
    }
    public var description: String { message }
}

/// What the app asks to sign for `wx.requestAppleSubscribeSign`. `openid` is not part of
/// signData: it selects the user's session key, which keys `signature`.
public struct AppleSubscribeSignRequest: Sendable, Equatable, Codable {
    public var openid: String
    public var productId: String
    /// Fen, > 0.
    public var goodsPrice: Int
    /// Absent = original price; > 0 = introductory price for the first period; 0 = free trial.
    public var activitySellingPrice: Int?
    /// Passed back in the signing and deliver pushes; ≤ 200 characters, no special characters.
    public var attach: String

    public init(openid: String, productId: String, goodsPrice: Int, activitySellingPrice: Int? = nil, attach: String) {
        self.openid = openid
        self.productId = productId
        self.goodsPrice = goodsPrice
        self.activitySellingPrice = activitySellingPrice
        self.attach = attach
    }
}

/// The three values the mini program passes to `wx.requestAppleSubscribeSign`.
public struct AppleSubscribeSignParams: Sendable, Equatable, Codable {
    /// Already a JSON string, passed as is (not re-stringified) by the mini program.
    public var signData: String
    public var paySig: String
    public var signature: String
}

/// Builds signed `wx.requestAppleSubscribeSign` parameters.
///
/// signData is written by hand, in the member order of the official examples (offerId, productId,
/// goodsPrice, activitySellingPrice, attach), after validating every value to a character set that
/// needs no JSON escaping; so the string equals what `JSON.stringify` gives for the same object.
public struct AppleSubscribeSigner: Sendable {
    public let offerId: String
    let appKey: String
    /// The `uri` of pay_sig. For client APIs WeChat uses the API name (`requestVirtualPayment`);
    /// the Apple subscription document does not spell it out, hence configurable.
    public let uri: String

    public init(offerId: String, appKey: String, uri: String = "requestAppleSubscribeSign") throws(SignParamsError) {
        guard !offerId.isEmpty, offerId.utf8.count <= 32, offerId.utf8.allSatisfy(Self.isIdByte) else {
            throw .invalid(field: "offerId", reason: "must be the xpay offer id (1-32 characters of A-Z a-z 0-9 _ - .)")
        }
        guard !appKey.isEmpty else { throw .invalid(field: "appKey", reason: "must be set (LEDGER_WECHAT_APP_KEY)") }
        self.offerId = offerId
        self.appKey = appKey
        self.uri = uri
    }

    public func sign(_ r: AppleSubscribeSignRequest, sessionKey: String) throws(SignParamsError) -> AppleSubscribeSignParams {
        guard !r.openid.isEmpty, r.openid.utf8.count <= 128 else {
            throw .invalid(field: "openid", reason: "must be 1-128 characters")
        }
        guard !r.productId.isEmpty, r.productId.utf8.count <= 64, r.productId.utf8.allSatisfy(Self.isIdByte) else {
            throw .invalid(field: "productId", reason: "must be 1-64 characters of A-Z a-z 0-9 _ - .")
        }
        guard r.goodsPrice > 0, r.goodsPrice <= 100_000_000 else {
            throw .invalid(field: "goodsPrice", reason: "must be a price in fen between 1 and 100000000")
        }
        if let a = r.activitySellingPrice, a < 0 || a >= r.goodsPrice {
            throw .invalid(field: "activitySellingPrice",
                           reason: "must be absent (original price), 0 (free trial) or between 1 and goodsPrice - 1 (introductory price)")
        }
        // Required (seed 000 §3.2: attach 必填): the signing and deliver pushes pass it back, and an
        // empty one gives the app nothing to tie them to.
        guard !r.attach.isEmpty else {
            throw .invalid(field: "attach", reason: "is required (1-200 characters, passed back in the signing and deliver pushes), e.g. uid=12345")
        }
        guard r.attach.count <= 200 else { throw .invalid(field: "attach", reason: "must be at most 200 characters") }
        guard r.attach.utf8.allSatisfy(Self.isAttachByte) else {
            throw .invalid(field: "attach", reason: "may contain only A-Z a-z 0-9 and _ - . = & : , ; | @ / + * ! ~ (no quotes, backslashes, spaces or control characters)")
        }
        guard !sessionKey.isEmpty else { throw .invalid(field: "sessionKey", reason: "is required for the user-state signature") }
        var s = "{\"offerId\":\"\(offerId)\",\"productId\":\"\(r.productId)\",\"goodsPrice\":\(r.goodsPrice)"
        if let a = r.activitySellingPrice { s += ",\"activitySellingPrice\":\(a)" }
        s += ",\"attach\":\"\(r.attach)\"}"
        let body = Array(s.utf8)
        return AppleSubscribeSignParams(signData: s, paySig: XPaySignature.paySig(appKey: appKey, uri: uri, body: body),
                                        signature: XPaySignature.userSignature(sessionKey: sessionKey, body: body))
    }

    static func isIdByte(_ b: UInt8) -> Bool {
        Base64.isAlphabet(b) && b != UInt8(ascii: "+") && b != UInt8(ascii: "/")
            || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: ".")
    }

    static func isAttachByte(_ b: UInt8) -> Bool {
        isIdByte(b) || Array("=&:,;|@/+*!~".utf8).contains(b)
    }
}

extension AppleSubscribeSigner: CustomStringConvertible {
    public var description: String { "AppleSubscribeSigner(offerId: \(offerId), appKey: redacted, uri: \(uri))" }
}

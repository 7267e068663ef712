import Foundation

/// Markup that is safe to send. The only way to make one is a string literal written in this
/// code, where every interpolated `String` is escaped (`& < > " '` and the backtick), numbers are
/// written as digits, and only another `HTML` (already safe) is inserted as is. So a value from the
/// log — an order id, a reason, a raw body — can never become markup, an attribute or a script.
///
/// Rules the pages follow on top: attribute values are always double-quoted in the literal; links
/// are `AuditURL`s (a fixed path with percent-encoded segments, so no `javascript:`); no inline
/// script or style exists at all (the Content-Security-Policy forbids them).
struct HTML: Sendable, Equatable, ExpressibleByStringInterpolation, CustomStringConvertible {
    private(set) var rendered: String

    init(stringLiteral value: String) { rendered = value }
    init(stringInterpolation: Interpolation) { rendered = stringInterpolation.out }
    private init(rendered: String) { self.rendered = rendered }

    var description: String { rendered }

    static let empty = HTML(rendered: "")

    /// Escapes text for an element's content or a double-quoted attribute value.
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            case "`": out += "&#96;"
            case "\u{0}": out += "\u{FFFD}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    static func + (a: HTML, b: HTML) -> HTML { HTML(rendered: a.rendered + b.rendered) }

    /// Joins fragments (each already safe).
    static func join(_ parts: [HTML], separator: HTML = .empty) -> HTML {
        HTML(rendered: parts.map(\.rendered).joined(separator: separator.rendered))
    }

    struct Interpolation: StringInterpolationProtocol {
        var out = ""

        init(literalCapacity: Int, interpolationCount: Int) { out.reserveCapacity(literalCapacity + interpolationCount * 16) }

        mutating func appendLiteral(_ literal: String) { out += literal }
        mutating func appendInterpolation(_ text: String) { out += HTML.escape(text) }
        mutating func appendInterpolation(_ text: Substring) { out += HTML.escape(String(text)) }
        /// Absent values render as an em dash, so an empty cell still says "nothing".
        mutating func appendInterpolation(_ text: String?, absent: String = "—") { out += HTML.escape(text ?? absent) }
        mutating func appendInterpolation(_ html: HTML) { out += html.rendered }
        mutating func appendInterpolation(_ parts: [HTML]) { for p in parts { out += p.rendered } }
        mutating func appendInterpolation(_ number: Int64) { out += String(number) }
        mutating func appendInterpolation(_ number: Int) { out += String(number) }
        mutating func appendInterpolation(_ url: AuditURL) { out += HTML.escape(url.text) }
    }
}

/// A link inside the auditor's pages: always a path under `/audit` this code chose, with each
/// variable segment and query value percent-encoded.
struct AuditURL: Sendable, Equatable {
    let text: String

    /// `/audit/<segments…>?<query>`; segments and values are encoded, empty values left out.
    init(_ segments: String..., query: [(String, String?)] = []) {
        var path = "/audit"
        for s in segments { path += "/" + Self.encode(s) }
        let pairs = query.compactMap { k, v in v.flatMap { $0.isEmpty ? nil : Self.encode(k) + "=" + Self.encode($0) } }
        text = pairs.isEmpty ? path : path + "?" + pairs.joined(separator: "&")
    }

    /// RFC 3986 unreserved characters stay; every other byte is %XX.
    static func encode(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            switch byte {
            case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F, 0x7E: out.unicodeScalars.append(Unicode.Scalar(byte))
            default: out += String(format: "%%%02X", byte)
            }
        }
        return out
    }
}

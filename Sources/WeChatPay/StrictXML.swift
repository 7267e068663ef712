import Foundation

/// A strict byte scanner for the XML WeChat sends: elements without attributes, text, and CDATA
/// sections, under one `<xml>` root — nothing else. It runs before any XML parser:
/// - on the envelope of an encrypted push, to find `Encrypt` without parsing, so `msg_signature`
///   is verified before a parser ever sees bytes an unauthenticated sender chose;
/// - on every XML message before `XMLParser` reads it.
///
/// Markup that could declare or expand anything is refused outright wherever it appears outside
/// a CDATA section the scanner itself opened and closed (a "verified" one): `<!` that does not
/// open `<![CDATA[` (DOCTYPE, ENTITY, comments) and every `<?` (processing instructions and the
/// XML declaration; WeChat sends neither). A skip-list pre-check is not enough: a processing
/// instruction can contain `<![CDATA[`, so a scanner that skips "CDATA" there misses the DOCTYPE
/// that follows the instruction's `?>` — the parser sees it, the check did not.
enum StrictXML {
    /// The root's children: each one's name and, for an element holding only text and CDATA, its
    /// text (CDATA contents as they are, text bytes undecoded); nil for an element with children.
    struct Scanned {
        var children: [(name: String, text: String?)] = []

        /// The text of the first root child named `name` that holds text; nil when empty (as
        /// `JSONValue.text` reads an empty string).
        func text(_ name: String) -> String? {
            guard let t = children.first(where: { $0.name == name && $0.text != nil })?.text, !t.isEmpty else { return nil }
            return t
        }
    }

    private static let cdataOpen = Array("<![CDATA[".utf8)
    private static let cdataClose = Array("]]>".utf8)

    static func scan(_ b: [UInt8], maxDepth: Int) throws(WeChatPushError) -> Scanned {
        guard String(validating: b, as: UTF8.self) != nil else { throw .invalidXML("body is not valid UTF-8") }
        var i = 0
        let n = b.count
        if n >= 3, b[0] == 0xEF, b[1] == 0xBB, b[2] == 0xBF { i = 3 }
        var stack: [(name: String, text: [UInt8], hasChildren: Bool)] = []
        var scanned = Scanned()
        var rootSeen = false
        var rootClosed = false

        while i < n {
            let c = b[i]
            guard c == 0x3C else { // not '<': text
                if stack.isEmpty {
                    guard isBlank(c) else { throw .invalidXML(rootClosed ? "text after the root element" : "text before the root element") }
                } else {
                    stack[stack.count - 1].text.append(c)
                }
                i += 1
                continue
            }
            guard i + 1 < n else { throw .invalidXML("the body ends inside a tag") }
            switch b[i + 1] {
            case 0x21: // '<!'
                guard !stack.isEmpty, hasPrefix(b, at: i, cdataOpen) else { throw .forbiddenXMLDeclaration(declarationName(b, at: i)) }
                let start = i + cdataOpen.count
                guard let end = find(b, cdataClose, from: start) else { throw .invalidXML("unterminated CDATA section") }
                stack[stack.count - 1].text += b[start..<end]
                i = end + cdataClose.count
            case 0x3F: // '<?'
                throw .forbiddenXMLDeclaration(declarationName(b, at: i))
            case 0x2F: // '</'
                var j = i + 2
                let name = try elementName(b, &j)
                while j < n, isBlank(b[j]) { j += 1 }
                guard j < n, b[j] == 0x3E else { throw .invalidXML("malformed end tag </\(name)") }
                guard let open = stack.popLast(), open.name == name else { throw .invalidXML("end tag </\(name)> does not close the open element") }
                if stack.isEmpty {
                    rootClosed = true
                } else {
                    stack[stack.count - 1].hasChildren = true
                    if stack.count == 1 {
                        scanned.children.append((name, open.hasChildren ? nil : String(decoding: open.text, as: UTF8.self)))
                    }
                }
                i = j + 1
            default:
                guard !rootClosed else { throw .invalidXML("more than one root element") }
                var j = i + 1
                let name = try elementName(b, &j)
                while j < n, isBlank(b[j]) { j += 1 }
                var selfClosing = false
                if j < n, b[j] == 0x2F { selfClosing = true; j += 1 }
                guard j < n, b[j] == 0x3E else { throw .invalidXML("element <\(name)> has attributes or a malformed tag; WeChat's XML has neither") }
                if stack.isEmpty {
                    guard name == "xml" else { throw .invalidXML("root element must be <xml>") }
                    rootSeen = true
                }
                if selfClosing {
                    if stack.isEmpty {
                        rootClosed = true
                    } else {
                        stack[stack.count - 1].hasChildren = true
                        if stack.count == 1 { scanned.children.append((name, "")) }
                    }
                } else {
                    guard stack.count < maxDepth else { throw .nestingTooDeep(limit: maxDepth) }
                    stack.append((name, [], false))
                }
                i = j + 1
            }
        }
        guard rootSeen else { throw .invalidXML("no root element") }
        guard stack.isEmpty, rootClosed else { throw .invalidXML("element <\(stack.last?.name ?? "xml")> is not closed") }
        return scanned
    }

    private static func isBlank(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D }

    /// A name of ASCII letters, digits, `_`, `-`, `.` and `:`, starting with a letter or `_`.
    private static func elementName(_ b: [UInt8], _ j: inout Int) throws(WeChatPushError) -> String {
        let start = j
        while j < b.count, j - start < 128 {
            let c = b[j]
            let letter = (c | 0x20) >= 0x61 && (c | 0x20) <= 0x7A
            let ok = letter || c == 0x5F || (j > start && ((c >= 0x30 && c <= 0x39) || c == 0x2D || c == 0x2E || c == 0x3A))
            guard ok else { break }
            j += 1
        }
        guard j > start else { throw .invalidXML("a tag without an element name") }
        return String(decoding: b[start..<j], as: UTF8.self)
    }

    /// `<!DOCTYPE`, `<!ENTITY`, `<!--`, `<?xml`, `<?x`… for the refusal.
    private static func declarationName(_ b: [UInt8], at i: Int) -> String {
        if hasPrefix(b, at: i, Array("<!--".utf8)) { return "<!--" }
        var j = i + 2
        while j < b.count, j < i + 12, (b[j] | 0x20) >= 0x61, (b[j] | 0x20) <= 0x7A { j += 1 }
        let word = String(decoding: b[(i + 2)..<j], as: UTF8.self)
        if b[i + 1] == 0x3F { return "<?" + word }
        return word.isEmpty ? "a markup declaration" : "<!" + word.uppercased()
    }

    private static func hasPrefix(_ b: [UInt8], at i: Int, _ p: [UInt8]) -> Bool {
        guard i + p.count <= b.count else { return false }
        for k in 0..<p.count where b[i + k] != p[k] { return false }
        return true
    }

    private static func find(_ b: [UInt8], _ p: [UInt8], from: Int) -> Int? {
        var i = from
        while i + p.count <= b.count {
            if b[i] == p[0], hasPrefix(b, at: i, p) { return i }
            i += 1
        }
        return nil
    }
}

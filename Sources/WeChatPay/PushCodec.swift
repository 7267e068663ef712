import Foundation
import LedgerCore
#if canImport(FoundationXML)
import FoundationXML
#endif

/// The 数据格式 of the push: it applies to the envelope, the decrypted message and the reply.
public enum PushFormat: String, Sendable, Equatable {
    case json
    case xml

    /// From the first non-blank byte: `{` JSON, `<` XML.
    static func detect(_ body: [UInt8]) throws(WeChatPushError) -> PushFormat {
        for b in body {
            switch b {
            case 0x20, 0x09, 0x0A, 0x0D: continue
            case UInt8(ascii: "{"): return .json
            case UInt8(ascii: "<"): return .xml
            // A UTF-8 byte order mark precedes some XML writers' output.
            case 0xEF: return .xml
            default: throw .unknownBodyFormat
            }
        }
        throw .unknownBodyFormat
    }
}

/// Parses and writes push messages in either format, with bounded nesting. The size bound is the
/// caller's (checked on the HTTP body before any of this runs).
enum PushCodec {
    static func parse(_ bytes: [UInt8], format: PushFormat, maxDepth: Int) throws(WeChatPushError) -> JSONValue {
        switch format {
        case .json: return try parseJSON(bytes, maxDepth: maxDepth)
        case .xml: return try parseXML(bytes, maxDepth: maxDepth)
        }
    }

    // MARK: JSON

    static func parseJSON(_ bytes: [UInt8], maxDepth: Int) throws(WeChatPushError) -> JSONValue {
        let members = try checkJSONDepth(bytes, maxDepth: maxDepth)
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw .invalidJSON("not a JSON document")
        }
        guard case .object = value else { throw .notAnObject }
        // JSONDecoder keeps the first of two equal member names, PostgreSQL's jsonb the last: the
        // stored payload would say something else than what the ledger acted on (found by the fuzzer).
        // Every member has one `:` outside strings, so fewer decoded members means a duplicate.
        guard memberCount(value) == members else { throw .invalidJSON("an object has the same member name twice") }
        return value
    }

    static func memberCount(_ v: JSONValue) -> Int {
        switch v {
        case .object(let o): return o.values.reduce(o.count) { $0 + memberCount($1) }
        case .array(let a): return a.reduce(0) { $0 + memberCount($1) }
        default: return 0
        }
    }

    /// Counts bracket depth outside strings, so a hostile `[[[[…` is refused before the decoder
    /// recurses into it; and refuses the escape `\u0000`, which JSONDecoder accepts but PostgreSQL's
    /// jsonb cannot store (the payload column would refuse the append).
    /// Numeric byte values and a raw buffer: this runs over every byte of every JSON push, and in a
    /// debug build `UInt8(ascii:)` per byte made it the slowest step of parsing.
    /// Returns the number of `:` outside strings (the object members of a valid document).
    @discardableResult
    static func checkJSONDepth(_ bytes: [UInt8], maxDepth: Int) throws(WeChatPushError) -> Int {
        let quote: UInt8 = 0x22, backslash: UInt8 = 0x5C, u: UInt8 = 0x75, zero: UInt8 = 0x30
        var members = 0
        let result: WeChatPushError? = bytes.withUnsafeBufferPointer { b -> WeChatPushError? in
            var depth = 0
            var inString = false
            var i = 0
            let n = b.count
            while i < n {
                let c = b[i]
                i += 1
                if inString {
                    if c == backslash, i < n {
                        if b[i] == u, i + 4 < n, b[i + 1] == zero, b[i + 2] == zero, b[i + 3] == zero, b[i + 4] == zero {
                            return .invalidJSON("the escape \\u0000 (NUL) cannot be stored")
                        }
                        i += 1
                    } else if c == quote {
                        inString = false
                    }
                    continue
                }
                switch c {
                case quote: inString = true
                case 0x7B, 0x5B: // { [
                    depth += 1
                    if depth > maxDepth { return .nestingTooDeep(limit: maxDepth) }
                case 0x7D, 0x5D: depth -= 1 // } ]
                case 0x3A: members += 1 // :
                default: break
                }
            }
            return nil
        }
        if let result { throw result }
        return members
    }

    // MARK: XML

    /// Refuses any markup declaration (`<!DOCTYPE`, `<!ENTITY`, `<!ELEMENT`, …) on the raw bytes,
    /// skipping CDATA sections and comments so that data which merely mentions them is accepted.
    static func preflightXML(_ b: [UInt8]) throws(WeChatPushError) {
        let cdata = Array("<![CDATA[".utf8), cdataEnd = Array("]]>".utf8)
        let comment = Array("<!--".utf8), commentEnd = Array("-->".utf8)
        var i = 0
        let n = b.count
        while i < n {
            guard b[i] == UInt8(ascii: "<"), i + 1 < n, b[i + 1] == UInt8(ascii: "!") else { i += 1; continue }
            if hasPrefix(b, at: i, cdata) {
                guard let end = find(b, cdataEnd, from: i + cdata.count) else { throw .invalidXML("unterminated CDATA section") }
                i = end + cdataEnd.count
            } else if hasPrefix(b, at: i, comment) {
                guard let end = find(b, commentEnd, from: i + comment.count) else { throw .invalidXML("unterminated comment") }
                i = end + commentEnd.count
            } else {
                var j = i + 2
                while j < n, j < i + 12, (b[j] | 0x20) >= UInt8(ascii: "a"), (b[j] | 0x20) <= UInt8(ascii: "z") { j += 1 }
                let word = String(decoding: b[(i + 2)..<j], as: UTF8.self).uppercased()
                throw .forbiddenXMLDeclaration(word.isEmpty ? "a markup declaration" : "<!\(word)")
            }
        }
    }

    private static func hasPrefix(_ b: [UInt8], at i: Int, _ p: [UInt8]) -> Bool {
        guard i + p.count <= b.count else { return false }
        for k in 0..<p.count where b[i + k] != p[k] { return false }
        return true
    }

    private static func find(_ b: [UInt8], _ p: [UInt8], from: Int) -> Int? {
        guard p.count <= b.count else { return nil }
        var i = from
        while i + p.count <= b.count {
            if b[i] == p[0], hasPrefix(b, at: i, p) { return i }
            i += 1
        }
        return nil
    }

    static func parseXML(_ bytes: [UInt8], maxDepth: Int) throws(WeChatPushError) -> JSONValue {
        // FoundationXML (swift-corelibs) traps on an element name that is not UTF-8 (found by the
        // fuzzer: `<E\xdaFmpty/>` kills the process). WeChat sends UTF-8 only: refuse anything else here.
        guard String(validating: bytes, as: UTF8.self) != nil else { throw .invalidXML("body is not valid UTF-8") }
        try preflightXML(bytes)
        let parser = XMLParser(data: Data(bytes))
        parser.shouldResolveExternalEntities = false
        parser.shouldProcessNamespaces = false
        parser.shouldReportNamespacePrefixes = false
        let builder = XMLTreeBuilder(maxDepth: maxDepth)
        parser.delegate = builder
        let ok = parser.parse()
        if let failure = builder.failure { throw failure }
        guard ok, let root = builder.root else {
            throw .invalidXML(parser.parserError.map { "parser error \(($0 as NSError).code)" } ?? "no root element")
        }
        guard builder.rootName == "xml" else { throw .invalidXML("root element must be <xml>") }
        guard case .object = root else { throw .notAnObject }
        return root
    }

    /// A leaf element's text, or an object built from child elements. Repeated siblings become an
    /// array; attributes are ignored (WeChat uses none).
    final class XMLTreeBuilder: NSObject, XMLParserDelegate {
        private struct Frame {
            var name: String
            var text = ""
            var children: [(String, JSONValue)] = []
        }
        private var stack: [Frame] = []
        private let maxDepth: Int
        var root: JSONValue?
        var rootName: String?
        var failure: WeChatPushError?

        init(maxDepth: Int) { self.maxDepth = maxDepth }

        private func fail(_ parser: XMLParser, _ error: WeChatPushError) {
            if failure == nil { failure = error }
            parser.abortParsing()
        }

        func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                    qualifiedName qName: String?, attributes attributeDict: [String: String] = [:]) {
            guard failure == nil else { return }
            if stack.isEmpty && root != nil { return fail(parser, .invalidXML("more than one root element")) }
            if stack.count >= maxDepth { return fail(parser, .nestingTooDeep(limit: maxDepth)) }
            stack.append(Frame(name: elementName))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard failure == nil, !stack.isEmpty else { return }
            stack[stack.count - 1].text += string
        }

        func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
            guard failure == nil, !stack.isEmpty else { return }
            guard let s = String(data: CDATABlock, encoding: .utf8) else { return fail(parser, .invalidXML("CDATA is not UTF-8")) }
            stack[stack.count - 1].text += s
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?) {
            guard failure == nil, let frame = stack.popLast() else { return }
            let value: JSONValue
            if frame.children.isEmpty {
                value = .string(frame.text)
            } else {
                guard frame.text.allSatisfy(\.isWhitespace) else {
                    return fail(parser, .invalidXML("element <\(frame.name)> mixes text and child elements"))
                }
                var object: [String: JSONValue] = [:]
                for (name, child) in frame.children {
                    switch object[name] {
                    case nil: object[name] = child
                    case .array(var items)?:
                        items.append(child)
                        object[name] = .array(items)
                    case let first?: object[name] = .array([first, child])
                    }
                }
                value = .object(object)
            }
            if stack.isEmpty {
                root = value
                rootName = frame.name
            } else {
                stack[stack.count - 1].children.append((frame.name, value))
            }
        }

        func parser(_ parser: XMLParser, foundProcessingInstructionWithTarget target: String, data: String?) {}

        func parser(_ parser: XMLParser, foundInternalEntityDeclarationWithName name: String, value: String?) {
            fail(parser, .forbiddenXMLDeclaration("<!ENTITY"))
        }

        func parser(_ parser: XMLParser, foundExternalEntityDeclarationWithName name: String, publicID: String?, systemID: String?) {
            fail(parser, .forbiddenXMLDeclaration("<!ENTITY"))
        }
    }

    // MARK: writing replies

    /// A reply member: WeChat's replies hold only integers and strings.
    enum Field {
        case int(Int64)
        case string(String)
    }

    static func write(_ fields: [(String, Field)], format: PushFormat) -> [UInt8] {
        switch format {
        case .json:
            var o: [String: JSONValue] = [:]
            for (k, v) in fields {
                switch v {
                case .int(let i): o[k] = .integer(i)
                case .string(let s): o[k] = .string(s)
                }
            }
            return Array(JSONValue.object(o).canonicalJSON())
        case .xml:
            var out = Array("<xml>".utf8)
            for (k, v) in fields {
                out += Array("<\(k)>".utf8)
                switch v {
                case .int(let i): out += Array(String(i).utf8)
                case .string(let s): out += cdata(s)
                }
                out += Array("</\(k)>".utf8)
            }
            out += Array("</xml>".utf8)
            return out
        }
    }

    /// `]]>` cannot appear inside CDATA: split it across two sections.
    static func cdata(_ s: String) -> [UInt8] {
        var out = Array("<![CDATA[".utf8)
        let bytes = Array(s.utf8)
        var i = 0
        while i < bytes.count {
            if i + 2 < bytes.count, bytes[i] == 0x5D, bytes[i + 1] == 0x5D, bytes[i + 2] == 0x3E {
                out += Array("]]]]><![CDATA[>".utf8)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        out += Array("]]>".utf8)
        return out
    }
}

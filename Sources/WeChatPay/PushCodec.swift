import Foundation
import LedgerCore
import Synchronization
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

    /// JSON through `JSONGuard` (LedgerCore), the rules of every JSON input: nesting, the NUL
    /// escape, trailing commas and huge numbers (the payload is stored byte for byte as jsonb, which
    /// refuses the last three: an authentic push would end in a 500 that WeChat retries forever)
    /// and repeated member names.
    static func parseJSON(_ bytes: [UInt8], maxDepth: Int) throws(WeChatPushError) -> JSONValue {
        let members: Int
        switch JSONGuard.scan(bytes, limit: maxDepth) {
        case .tooDeep: throw .nestingTooDeep(limit: maxDepth)
        case .ok(let m): members = m
        case let finding: throw .invalidJSON(JSONGuard.refusal(finding, what: "the message", limit: maxDepth) ?? "not a JSON document")
        }
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw .invalidJSON("not a JSON document")
        }
        guard case .object = value else { throw .notAnObject }
        // JSONDecoder keeps the first of two equal member names, PostgreSQL's jsonb the last: the
        // stored payload would say something else than what the ledger acted on (found by the fuzzer).
        guard JSONGuard.memberCount(value) == members else { throw .invalidJSON("an object has the same member name twice") }
        return value
    }

    // MARK: XML

    /// Times FoundationXML's parser was run (tests: no unauthenticated bytes reach it).
    static let xmlParserRuns = Atomic<Int>(0)

    /// An XML message: `StrictXML` first (no declaration, entity, comment or processing
    /// instruction reaches the parser), then FoundationXML builds the tree.
    static func parseXML(_ bytes: [UInt8], maxDepth: Int) throws(WeChatPushError) -> JSONValue {
        // FoundationXML (swift-corelibs) traps on an element name that is not UTF-8 (found by the
        // fuzzer: `<E\xdaFmpty/>` kills the process): the scan refuses anything but UTF-8.
        _ = try StrictXML.scan(bytes, maxDepth: maxDepth)
        let parser = XMLParser(data: Data(bytes))
        parser.shouldResolveExternalEntities = false
        parser.shouldProcessNamespaces = false
        parser.shouldReportNamespacePrefixes = false
        let builder = XMLTreeBuilder(maxDepth: maxDepth)
        parser.delegate = builder
        xmlParserRuns.add(1, ordering: .relaxed)
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

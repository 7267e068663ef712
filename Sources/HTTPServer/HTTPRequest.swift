import Foundation

/// Request header fields in arrival order; names compare without regard to case (RFC 9110 §5.1).
public struct HTTPHeaders: Sendable, Sequence {
    public private(set) var fields: [(name: String, value: String)]

    public init(_ fields: [(name: String, value: String)] = []) {
        self.fields = fields
    }

    /// The first value of `name`, or nil when the field is absent.
    public subscript(name: String) -> String? {
        fields.first { asciiCaseInsensitiveEqual($0.name, name) }?.value
    }

    /// Every value of a repeated field, in arrival order.
    public func values(for name: String) -> [String] {
        fields.filter { asciiCaseInsensitiveEqual($0.name, name) }.map(\.value)
    }

    public mutating func append(name: String, value: String) {
        fields.append((name, value))
    }

    public var count: Int { fields.count }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }
}

/// One HTTP request as the application sees it: already fully received, within the body limit.
public struct HTTPRequest: Sendable {
    public var method: String
    /// Percent-decoded path without the query string (decoded by libmicrohttpd).
    public var path: String
    /// Percent-decoded query arguments; when a name repeats, the first value wins.
    public var query: [String: String]
    public var headers: HTTPHeaders
    public var body: Data
    /// The peer's IP address (no port), when the socket reports one.
    public var remoteAddress: String?
    /// Values of the `{name}` segments of the route that matched, filled in by the `Router`.
    public var pathParameters: [String: String]

    public init(
        method: String,
        path: String,
        query: [String: String] = [:],
        headers: HTTPHeaders = HTTPHeaders(),
        body: Data = Data(),
        remoteAddress: String? = nil,
        pathParameters: [String: String] = [:]
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
        self.pathParameters = pathParameters
    }
}

/// Field names are ASCII tokens: compare their bytes folding A–Z, without allocating lower-cased copies.
func asciiCaseInsensitiveEqual(_ left: String, _ right: String) -> Bool {
    var left = left
    var right = right
    return left.withUTF8 { l in
        right.withUTF8 { r in
            guard l.count == r.count else { return false }
            for i in 0..<l.count where l[i] != r[i] {
                let a = l[i] | 0x20, b = r[i] | 0x20
                guard a == b, a >= 0x61, a <= 0x7A else { return false }
            }
            return true
        }
    }
}

import Foundation

/// What a handler answers. `Content-Length` and `Connection` are the server's business and are
/// ignored if a handler sets them.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: Data

    public init(status: Int, headers: [(String, String)] = [], body: Data = Data()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of header `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        headers.first { asciiCaseInsensitiveEqual($0.0, name) }?.1
    }

    public static func json(_ status: Int, _ body: Data, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: body)
    }

    /// Encodes `value`; a value that cannot be encoded is a server bug, answered as a 500 error body
    /// rather than a half-written document.
    public static func json<Value: Encodable>(
        _ status: Int, _ value: Value, headers: [(String, String)] = [], encoder: JSONEncoder = JSONEncoder()
    ) -> HTTPResponse {
        do {
            return json(status, try encoder.encode(value), headers: headers)
        } catch {
            return .error(
                status: 500, code: "encoding_failed",
                message: "The server could not encode its answer as JSON (\(type(of: value))); report this as a bug."
            )
        }
    }

    /// The one error shape of the API: `{"error": code, "message": text}`.
    public static func error(status: Int, code: String, message: String, headers: [(String, String)] = []) -> HTTPResponse {
        let body = (try? errorEncoder.encode(ErrorBody(error: code, message: message))) ?? Data()
        return json(status, body, headers: headers)
    }

    public static func text(
        _ status: Int, _ text: String, contentType: String = "text/plain; charset=utf-8", headers: [(String, String)] = []
    ) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", contentType)] + headers, body: Data(text.utf8))
    }
}

/// The JSON error document every failing answer carries.
public struct ErrorBody: Codable, Sendable, Equatable {
    public var error: String
    public var message: String

    public init(error: String, message: String) {
        self.error = error
        self.message = message
    }
}

private let errorEncoder: JSONEncoder = {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return encoder
}()

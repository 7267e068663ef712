import Foundation
import HTTPServer
import XCTest

final class RouterTests: XCTestCase {
    private func router() -> Router {
        var router = Router()
        let answer: (String) -> HTTPHandler = { tag in { _ in .text(200, tag) } }
        router.add("POST", "/v1/apple/notifications", answer("v2"))
        router.add("POST", "/v1/apple/notifications/v1", answer("v1"))
        router.add("GET", "/v1/things/{id}", answer("thing"))
        router.add("GET", "/v1/things/special", answer("special"))
        router.add("head", "/v1/things/{id}", answer("head"))
        router.add("GET", "/v1/{a}/x/{b}", answer("ab"))
        return router
    }

    private func tag(_ method: String, _ path: String) async -> String {
        let response = await router().respond(to: HTTPRequest(method: method, path: path))
        return response.status == 200 ? String(decoding: response.body, as: UTF8.self) : "\(response.status)"
    }

    func testLiteralSegmentsBeatParametersWhateverTheOrder() async {
        let special = await tag("GET", "/v1/things/special")
        XCTAssertEqual(special, "special")
        let other = await tag("GET", "/v1/things/other")
        XCTAssertEqual(other, "thing")
        let v1 = await tag("POST", "/v1/apple/notifications/v1")
        XCTAssertEqual(v1, "v1")
        let v2 = await tag("POST", "/v1/apple/notifications")
        XCTAssertEqual(v2, "v2")
    }

    func testExplicitHeadRouteWinsOverGetFallback() async {
        let head = await tag("HEAD", "/v1/things/9")
        XCTAssertEqual(head, "head")
        let fallback = await tag("HEAD", "/v1/things/special")
        XCTAssertEqual(fallback, "special")
    }

    func testParametersAreBoundAndEmptySegmentsNeverMatch() {
        guard case let .matched(route, parameters) = router().match(method: "GET", path: "/v1/p/x/q") else {
            return XCTFail("expected a match")
        }
        XCTAssertEqual(route.pattern, "/v1/{a}/x/{b}")
        XCTAssertEqual(parameters, ["a": "p", "b": "q"])
        for path in ["/v1/things/", "/v1//x/q", "/v1/things", "", "/", "v1/things/1", "/v1/things/1/"] {
            if case .matched = router().match(method: "GET", path: path) { XCTFail("\(path) must not match") }
        }
    }

    func testMethodNotAllowedListsMethodsOfThatPathOnly() {
        guard case let .methodNotAllowed(allowed) = router().match(method: "PUT", path: "/v1/things/3") else {
            return XCTFail("expected 405")
        }
        XCTAssertEqual(allowed, ["GET", "HEAD"])
        guard case let .methodNotAllowed(postOnly) = router().match(method: "GET", path: "/v1/apple/notifications") else {
            return XCTFail("expected 405")
        }
        XCTAssertEqual(postOnly, ["POST"])
        guard case .notFound = router().match(method: "GET", path: "/v2/none") else { return XCTFail("expected 404") }
    }

    func testTableListsEveryRouteForTheOpenAPICrossCheck() {
        let table = router().table.map { "\($0.method) \($0.pattern)" }
        XCTAssertEqual(table.count, 6)
        XCTAssertTrue(table.contains("HEAD /v1/things/{id}"))
        XCTAssertTrue(table.contains("POST /v1/apple/notifications/v1"))
    }

    func testErrorResponseShape() throws {
        let response = HTTPResponse.error(status: 422, code: "unknown_app", message: "Add the bundle id \"a/b\" to LEDGER_APPLE_BUNDLE_IDS.")
        XCTAssertEqual(response.status, 422)
        XCTAssertEqual(response.header("content-type"), "application/json")
        let body = try JSONDecoder().decode(ErrorBody.self, from: response.body)
        XCTAssertEqual(body, ErrorBody(error: "unknown_app", message: "Add the bundle id \"a/b\" to LEDGER_APPLE_BUNDLE_IDS."))
    }

    func testHeadersLookUpWithoutCase() {
        var headers = HTTPHeaders()
        headers.append(name: "X-Apple-Thing", value: "1")
        headers.append(name: "x-apple-thing", value: "2")
        XCTAssertEqual(headers["X-APPLE-THING"], "1")
        XCTAssertEqual(headers.values(for: "x-Apple-thing"), ["1", "2"])
        XCTAssertNil(headers["missing"])
        // Folding is ASCII letters only: "[" (0x5B) and "{" (0x7B) differ by the same bit as "A"/"a".
        headers.append(name: "X-[", value: "bracket")
        XCTAssertNil(headers["x-{"])
        XCTAssertEqual(headers["X-["], "bracket")
        XCTAssertNil(headers["X-Apple-Thin"])
    }
}

/// Route groups: middleware stated once, applied outermost first, able to answer instead of the
/// handler; thrown errors render as the API's error shape.
final class RouteGroupTests: XCTestCase {
    struct Teapot: HTTPRenderableError {
        var httpStatus: Int { 418 }
        var httpCode: String { "teapot" }
        var httpMessage: String { "short and stout" }
        var httpHeaders: [(String, String)] { [("Retry-After", "7")] }
    }

    func testMiddlewareWrapsEveryRouteOfItsGroupOnly() async throws {
        let log = Log()
        let tagging: (String) -> Middleware = { tag in
            { request, next in
                log.append("\(tag)>")
                var response = await next(request)
                response.headers.append(("X-Layer", tag))
                return response
            }
        }
        let gate: Middleware = { request, next in
            request.headers["authorization"] == "yes" ? await next(request) : .error(status: 401, code: "no", message: "no")
        }
        var router = Router()
        router.group(tagging("outer"), tagging("inner"), gate, deadline: .seconds(3)) { group in
            group.add("GET", "/guarded") { _ in .text(200, "in") }
            group.add("GET", "/teapot") { _ in throw Teapot() }
            group.add("GET", "/oops", deadline: .seconds(1)) { _ in throw CocoaError(.fileNoSuchFile) }
        }
        router.add("GET", "/open") { _ in .text(200, "open") }

        var request = HTTPRequest(method: "GET", path: "/guarded")
        let refused = await router.respond(to: request)
        XCTAssertEqual(refused.status, 401)
        XCTAssertEqual(log.all, ["outer>", "inner>"], "outermost first; the gate answered before the handler")
        XCTAssertEqual(refused.headers.filter { $0.0 == "X-Layer" }.map(\.1), ["inner", "outer"])
        request = HTTPRequest(method: "GET", path: "/guarded", headers: HTTPHeaders([("Authorization", "yes")]))
        let allowed = await router.respond(to: request)
        XCTAssertEqual(String(decoding: allowed.body, as: UTF8.self), "in")

        request = HTTPRequest(method: "GET", path: "/teapot", headers: HTTPHeaders([("Authorization", "yes")]))
        let teapot = await router.respond(to: request)
        XCTAssertEqual(teapot.status, 418)
        XCTAssertEqual(teapot.header("Retry-After"), "7")
        XCTAssertEqual(try JSONDecoder().decode(ErrorBody.self, from: teapot.body), ErrorBody(error: "teapot", message: "short and stout"))

        request = HTTPRequest(method: "GET", path: "/oops", headers: HTTPHeaders([("Authorization", "yes")]))
        let oops = await router.respond(to: request)
        XCTAssertEqual(oops.status, 500)
        let body = try JSONDecoder().decode(ErrorBody.self, from: oops.body)
        XCTAssertEqual(body.error, "internal")
        XCTAssertFalse(body.message.contains("NSCocoa"), "internals are not echoed: \(body.message)")

        let open = await router.respond(to: HTTPRequest(method: "GET", path: "/open"))
        XCTAssertEqual(open.status, 200)
        XCTAssertNil(open.header("X-Layer"), "middleware belongs to its group only")

        let deadlines = Dictionary(uniqueKeysWithValues: router.routes.map { ($0.pattern, $0.deadline) })
        XCTAssertEqual(deadlines["/guarded"], .seconds(3))
        XCTAssertEqual(deadlines["/oops"], .seconds(1))
        XCTAssertEqual(deadlines["/open"], .some(nil))
    }

    final class Log: @unchecked Sendable {
        private let lock = NSLock()
        private var entries: [String] = []
        func append(_ s: String) { lock.lock(); entries.append(s); lock.unlock() }
        var all: [String] { lock.lock(); defer { lock.unlock() }; return entries }
    }
}

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

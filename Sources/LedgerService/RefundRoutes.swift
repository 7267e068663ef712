import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// Refund cases for auditors, from both sources, folded from the stored events on request (the
/// events are the evidence; a case lists the positions of every one of them).
extension LedgerApp {
    func addRefundRoutes(to router: inout Router) {
        router.add("GET", "/v1/refunds") { [self] request in
            await authorized(request, .auditor) { await refunds(request) }
        }
        router.add("GET", "/v1/refunds/{caseId}") { [self] request in
            await authorized(request, .auditor) { await refundCase(request) }
        }
    }

    /// Every refund case: the refund events, then every event of their streams (deliveries give
    /// amounts and customers, link events tie provisional orders to subscriptions).
    func allRefundCases() async throws(StoreError) -> (cases: [RefundCase], events: [Int64: RecordedEvent]) {
        let refundEvents = try await store.events(
            types: [XPayEventName.refundInquiry, XPayEventName.refundNotify, XPayEventName.refundInquiryAnswer,
                    XPayEventName.orderLinked, "REFUND", "REFUND_DECLINED", "REFUND_REVERSED"],
            typePrefixes: ["CONSUMPTION_REQUEST"])
        var streams = Set(refundEvents.map(\.event.streamId))
        for e in refundEvents where e.event.type == XPayEventName.orderLinked {
            if let o = try? JSONSerialization.jsonObject(with: e.event.payload) as? [String: Any],
               let p = o["provisional_stream"] as? String { streams.insert(p) }
        }
        let events = try await store.read(streams: streams.sorted())
        return (RefundCaseFold.cases(from: events), Dictionary(events.map { ($0.position, $0) }, uniquingKeysWith: { a, _ in a }))
    }

    func refunds(_ request: HTTPRequest) async -> HTTPResponse {
        let filter: RefundCaseFilter
        var query = request.query
        if let to = query.removeValue(forKey: "to") { query["until"] = to }
        do { filter = try RefundCaseFilter(query: query) } catch {
            return .error(status: 400, code: "invalid_parameter", message: error.description)
        }
        let format = request.query["format"] ?? "json"
        guard format == "json" || format == "csv" else {
            return .error(status: 400, code: "invalid_parameter", message: "format must be json or csv")
        }
        do {
            let cases = try await allRefundCases().cases.filter(filter.matches)
            if format == "csv" {
                return HTTPResponse(status: 200, headers: [("Content-Type", "text/csv; charset=utf-8"),
                                                           ("Content-Disposition", "attachment; filename=\"refunds.csv\"")],
                                    body: Data(RefundCaseCSV.render(cases).utf8))
            }
            return .json(200, try Self.casesJSON(cases))
        } catch let error as StoreError {
            return storeFailure(error, source: "query")
        } catch {
            return .error(status: 500, code: "internal", message: "\(error)")
        }
    }

    func refundCase(_ request: HTTPRequest) async -> HTTPResponse {
        let id = request.pathParameters["caseId"] ?? ""
        do {
            let all = try await allRefundCases()
            guard let found = all.cases.first(where: { $0.caseId == id }) else {
                return .error(status: 404, code: "not_found", message: "no refund case \(id); list them with GET /v1/refunds")
            }
            var object = try JSONSerialization.jsonObject(with: JSONEncoder.sorted.encode(found)) as? [String: Any] ?? [:]
            object["events"] = found.links.compactMap { all.events[$0] }.map { Representation.event($0) }
            return JSONBody.response(200, object)
        } catch let error as StoreError {
            return storeFailure(error, source: "query")
        } catch {
            return .error(status: 500, code: "internal", message: "\(error)")
        }
    }

    static func casesJSON(_ cases: [RefundCase]) throws -> Data {
        struct Body: Encodable { var cases: [RefundCase] }
        return try JSONEncoder.sorted.encode(Body(cases: cases))
    }
}

extension JSONEncoder {
    static var sorted: JSONEncoder {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }
}

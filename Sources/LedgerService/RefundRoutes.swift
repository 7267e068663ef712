import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// Refund cases for auditors, from both sources, folded on request from the facts (`RefundCaseFold`
/// over `RefundFactQueries`: the same facts every other reader folds). The events are the
/// evidence: a case lists the positions of every one of them, and the single-case view shows each
/// event's stored bytes with the facts the case took from it.
extension LedgerApp {
    func addRefundRoutes(to router: inout Router) {
        router.add("GET", "/v1/refunds") { [self] request in
            await authorized(request, .auditor) { await refunds(request) }
        }
        router.add("GET", "/v1/refunds/{caseId}") { [self] request in
            await authorized(request, .auditor) { await refundCase(request) }
        }
    }

    var refundFacts: RefundFactQueries { RefundFactQueries(pool: queries.pool) }

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
        let cases: [RefundCase]
        do {
            cases = RefundCaseFold.cases(from: try await refundFacts.allCaseFacts()).filter(filter.matches)
        } catch {
            return projectionFailure(error)
        }
        if format == "csv" {
            return HTTPResponse(status: 200, headers: [("Content-Type", "text/csv; charset=utf-8"),
                                                       ("Content-Disposition", "attachment; filename=\"refunds.csv\"")],
                                body: Data(RefundCaseCSV.render(cases).utf8))
        }
        do {
            return .json(200, try Self.casesJSON(cases))
        } catch {
            return .error(status: 500, code: "internal", message: "\(error)")
        }
    }

    func refundCase(_ request: HTTPRequest) async -> HTTPResponse {
        let id = request.pathParameters["caseId"] ?? ""
        let facts: [Fact]
        do { facts = try await refundFacts.caseFacts(caseId: id) } catch { return projectionFailure(error) }
        guard let found = RefundCaseFold.cases(from: facts).first(where: { $0.caseId == id }) else {
            return .error(status: 404, code: "not_found", message: "no refund case \(id); list them with GET /v1/refunds")
        }
        do {
            // The evidence trail: each event of the case as stored, with the facts read from it.
            let events = try await store.events(positions: found.links)
            let factsAt = Dictionary(grouping: facts, by: \.position)
            var object = try JSONSerialization.jsonObject(with: JSONEncoder.sorted.encode(found)) as? [String: Any] ?? [:]
            object["events"] = events.map { e in
                Representation.event(e, facts: (factsAt[e.position] ?? []).sorted { $0.ordinal < $1.ordinal })
            }
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

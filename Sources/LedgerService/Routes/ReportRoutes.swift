import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

/// `GET /v1/reports/{name}` (auditor): a report's figures per period, JSON or CSV, at the latest
/// position or `asOfPosition`; `GET /v1/reports/{name}/subscriptions` lists the subscriptions behind
/// one point of it.
extension LedgerApp {
    func addReportRoutes(to group: inout RouteGroup) {
        // A report folds every fact on its first read at a position: the long deadline.
        let deadline = Duration.seconds(configuration.http.adminDeadlineSeconds)
        group.add("GET", "/v1/reports/{name}", deadline: deadline) { [self] request in
            let query = try ReportRequest(name: request.pathParameters["name"] ?? "", request.query)
            let answer = try await reports.report(query)
            if query.format == "csv" {
                let file = "\(answer.table.query.name.rawValue)-at-\(answer.position).csv"
                return HTTPResponse(status: 200, headers: [("Content-Type", "text/csv; charset=utf-8"),
                                                           ("Content-Disposition", "attachment; filename=\"\(file)\"")] + answer.headers,
                                    body: Data(answer.csv.utf8))
            }
            return .json(200, answer.json.canonicalJSON(), headers: answer.headers)
        }
        group.add("GET", "/v1/reports/{name}/subscriptions", deadline: deadline) { [self] request in
            let query = try ReportRequest(name: request.pathParameters["name"] ?? "", request.query)
            let (answer, period, metric, keys) = try await reports.members(query, period: request.query["period"],
                                                                           metric: request.query["metric"])
            let body: JSONValue = [
                "report": .string(query.name.rawValue), "position": .integer(answer.position),
                "chainHash": .string(answer.chainHashHex), "period": .string(period.text), "metric": .string(metric.rawValue),
                "interval": .string(answer.table.query.interval.rawValue),
                "subscriptions": .array(keys.map { ["environment": .string($0.environment), "originalTransactionId": .string($0.originalTransactionId)] }),
            ]
            return .json(200, body.canonicalJSON(), headers: answer.headers)
        }
    }
}

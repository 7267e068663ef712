import Crypto
import Foundation
import HTTPServer
import LedgerCore
import LedgerStore

extension LedgerApp {
    /// `POST /v1/admin/rebuild {"projection"?: name, "dryRun"?: bool}`: rebuilds while ingestion
    /// continues (or, dry, reports who would gain and lose which entitlement). The request itself
    /// is recorded as a `source = ledger` event naming who asked (role and token fingerprint,
    /// never the token), before the work starts, so an aborted rebuild is on record too.
    func adminRebuild(_ request: HTTPRequest) async -> HTTPResponse {
        var projection: String?
        var dryRun = false
        if !request.body.isEmpty {
            guard let body = try? JSONSerialization.jsonObject(with: request.body) as? [String: Any] else {
                return .error(status: 400, code: "malformed", message: "the body must be a JSON object like {\"projection\": \"subscriptions\", \"dryRun\": true}")
            }
            if let p = body["projection"] {
                guard let s = p as? String else { return .error(status: 400, code: "invalid_parameter", message: "projection must be a string") }
                projection = s
            }
            if let d = body["dryRun"] {
                guard let b = d as? Bool else { return .error(status: 400, code: "invalid_parameter", message: "dryRun must be true or false") }
                dryRun = b
            }
        }
        var selected = Set(ProjectionName.allCases)
        if let projection {
            do { selected = [try ProjectionName.parse(projection)] } catch {
                return .error(status: 400, code: "unknown_projection", message: "\(error)")
            }
        }
        let who = requesterFingerprint(request)
        do {
            _ = try await AdminAudit.record(
                action: dryRun ? "rebuild_dry_run" : "rebuild", projections: selected.map(\.rawValue).sorted(),
                requestedBy: who, in: store)
        } catch {
            return storeFailure(error, source: "admin")
        }
        log.info("admin rebuild requested", ["dryRun": dryRun, "requestedBy": who["fingerprint"] as? String ?? "-"])
        let rebuilder = Rebuilder(conninfo: configuration.databaseURL, projector: projector)
        do {
            let report = dryRun ? try await rebuilder.dryRun() : try await rebuilder.run(projections: selected)
            return JSONBody.response(200, Self.reportJSON(report))
        } catch {
            if case .rebuildInProgress = error {
                return .error(status: 409, code: "rebuild_in_progress", message: "\(error)")
            }
            return projectionFailure(error)
        }
    }

    static func reportJSON(_ report: RebuildReport) -> [String: Any] {
        func change(_ c: EntitlementChange) -> [String: Any] {
            ["customerId": c.customerId, "entitlement": c.entitlement, "productId": c.productId,
             "originalTransactionId": c.originalTransactionId]
        }
        var out: [String: Any] = [
            "status": report.dryRun ? "dry_run" : "rebuilt",
            "projections": report.projections.map(\.rawValue),
            "events": report.events, "streams": report.streams,
            "seconds": report.seconds, "eventsPerSecond": report.eventsPerSecond,
        ]
        if report.dryRun {
            out["changes"] = ["gains": report.gains.map(change), "losses": report.losses.map(change)]
        }
        return out
    }

    /// Who asked: the role and the first 12 hex digits of the token's SHA-256 — enough to tell
    /// operators apart in the audit trail, useless to an attacker.
    func requesterFingerprint(_ request: HTTPRequest) -> [String: Any] {
        let header = request.headers["authorization"] ?? ""
        let token = header.count > 7 ? String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces) : ""
        return [
            "role": tokens.role(forAuthorizationHeader: header)?.rawValue ?? "unknown",
            "fingerprint": String(Hex.encode(Digest.sha256(Array(token.utf8))).prefix(12)),
            "remoteAddress": request.remoteAddress ?? NSNull(),
        ]
    }
}

/// Admin actions are events too (`source = ledger`, stream `ledger:admin`), recorded before the
/// work starts so an interrupted action is on record: what, which projections, who asked.
public enum AdminAudit {
    @discardableResult
    public static func record(action: String, projections: [String], requestedBy: [String: Any],
                              in store: EventStore) async throws(StoreError) -> AppendOutcome {
        let requestedAt = EpochMillis((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let body: [String: Any] = ["action": action, "projections": projections, "requestedBy": requestedBy, "requestedAt": requestedAt]
        let data = JSONBody.data(body)
        return try await store.append(NewEvent(
            streamId: StreamNames.ledgerAdmin, dedupeKey: "admin:\(requestedAt):\(UUID().uuidString.lowercased())",
            source: .ledger, type: "admin/" + action.replacingOccurrences(of: "_", with: "-"), signedAt: requestedAt,
            payload: data, raw: data))
    }

    /// Who runs a CLI action: the operating-system user and host.
    public static var commandLineRequester: [String: Any] {
        ["via": "cli", "user": ProcessInfo.processInfo.environment["USER"] ?? NSUserName(),
         "host": ProcessInfo.processInfo.hostName, "pid": Int(getpid())]
    }
}

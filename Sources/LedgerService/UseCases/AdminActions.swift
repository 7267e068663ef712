import Foundation
import LedgerCore
import LedgerStore

/// What an operator asked a rebuild to do.
public struct RebuildRequest: Sendable, Equatable {
    public var projections: Set<ProjectionName>
    /// Change nothing: fold everything under the current catalog and report who would gain and
    /// lose which entitlement.
    public var dryRun: Bool

    public init(projections: Set<ProjectionName> = Set(ProjectionName.allCases), dryRun: Bool = false) {
        self.projections = projections
        self.dryRun = dryRun
    }
}

/// Use case: the operators' actions, shared by `POST /v1/admin/…` and the command line. Each is
/// recorded as a `source = ledger` event naming who asked (role and token fingerprint, never the
/// token; or the OS user for the CLI) before the work starts, so an interrupted action is on record.
public struct AdminActions: Sendable {
    let store: Store
    let log: Log

    public init(store: Store, log: Log = .shared) {
        self.store = store
        self.log = log
    }

    /// Rebuilds while ingestion continues (or, dry, reports the entitlement changes).
    public func rebuild(_ request: RebuildRequest, progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in })
        async throws -> RebuildReport {
        try await rebuild(request, requestedBy: .commandLine, progress: progress)
    }

    func rebuild(_ request: RebuildRequest, requestedBy: Requester,
                 progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> RebuildReport {
        try await record(action: request.dryRun ? "rebuild_dry_run" : "rebuild",
                         projections: request.projections.map(\.rawValue).sorted(), requestedBy: requestedBy)
        log.info("admin rebuild requested", ["dryRun": request.dryRun, "requestedBy": requestedBy.fingerprint])
        let rebuilder = store.rebuilder()
        return request.dryRun
            ? try await rebuilder.dryRun(progress: progress)
            : try await rebuilder.run(projections: request.projections, progress: progress)
    }

    /// The action's record in stream `ledger:admin`.
    @discardableResult
    func record(action: String, projections: [String], requestedBy: Requester) async throws(StoreError) -> AppendOutcome {
        let requestedAt = Clock.nowMillis()
        let data = JSONValue.object([
            "action": .string(action), "projections": .array(projections.map(JSONValue.string)),
            "requestedBy": requestedBy.json, "requestedAt": .integer(requestedAt),
        ]).canonicalJSON()
        return try await store.events.append(NewEvent(
            streamId: StreamId.ledgerAdmin.text, dedupeKey: DedupeKey.adminAction(at: requestedAt),
            source: .ledger, type: "admin/" + action.replacingOccurrences(of: "_", with: "-"), signedAt: requestedAt,
            payload: data, raw: data))
    }
}

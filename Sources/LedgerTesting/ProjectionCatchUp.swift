import Foundation
import Postgres

/// Waiting for the service's projections to reach the head of the log, read from the database
/// itself (the checkpoints the projections engine keeps), so a benchmark measures only its own
/// work and an audit reads finished projections.
public enum ProjectionCatchUp {
    /// How many projections are behind the head now.
    public static func behind(_ admin: Connection) throws -> Int64 {
        try admin.query(
            "SELECT count(*) AS n FROM projection_checkpoints, event_head WHERE projection_checkpoints.status <> 'retired' AND projection_checkpoints.position < event_head.position",
            name: "projections behind the head").first!.decode(Int64.self, "n")
    }

    /// Waits until every projection checkpoint has reached the head; how long that took, or nil
    /// when one is still behind at `timeout`.
    public static func wait(_ admin: Connection, timeout: Duration) async throws -> Duration? {
        let started = ContinuousClock.now
        while ContinuousClock.now - started < timeout {
            if try behind(admin) == 0 { return ContinuousClock.now - started }
            try await Task.sleep(for: .milliseconds(100))
        }
        return nil
    }
}

import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import Postgres
import XCTest

/// App and auditor reads served by a streaming replica (`scripts/db.sh replica-start`, which
/// `make test` runs): read-your-write through `?minPosition=`, the lag bound, and a replica that is
/// paused or down never changing an answer — only where it comes from.
final class ReadReplicaTests: XCTestCase {
    private func post(_ h: ServiceHarness, otid: String) async throws -> Int64 {
        let body = try h.authority.signSample(AppleTestAuthority.sample(originalTransactionId: otid))
        let answer = try await h.post("/v1/apple/notifications", body)
        XCTAssertEqual(answer.status, 200, answer.text)
        return try XCTUnwrap(answer.json["position"] as? Int64 ?? (answer.json["position"] as? Int).map(Int64.init))
    }

    private func reads(_ h: ServiceHarness) async throws -> [String: Int] {
        let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
        var out: [String: Int] = [:]
        for source in ["primary", "replica"] {
            let prefix = "ledger_reads_total{source=\"\(source)\"} "
            out[source] = metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) } ?? -1
        }
        return out
    }

    private func waitUntilReplayed(_ h: ServiceHarness, _ position: Int64) async throws {
        let replica = try XCTUnwrap(try h.database.connectReplica())
        for _ in 0..<100 {
            let head = try replica.query("SELECT position FROM event_head").first!.decode(Int64.self, "position")
            if head >= position { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTFail("the replica never replayed position \(position)")
    }

    func testEveryReadSeesItsOwnWriteAndTheReplicaServesCaughtUpReads() async throws {
        try await withService(replica: true) { h in
            var written: [(otid: String, position: Int64)] = []
            for i in 0..<20 {
                let otid = "80000000000000\(String(format: "%02d", i))"
                written.append((otid, try await post(h, otid: otid)))
            }
            // Read-your-write: straight after each append, from whichever side has the position.
            for w in written {
                let answer = try await h.request("GET", "/v1/subscriptions/\(w.otid)?environment=Sandbox&minPosition=\(w.position)", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(answer.status, 200, "\(w.otid): \(answer.text)")
                XCTAssertEqual(answer.json["originalTransactionId"] as? String, w.otid)
            }
            let first = try await reads(h)
            XCTAssertEqual(first["primary"]! + first["replica"]!, 20, "\(first)")
            // Once the replica has everything, reads without a position go to it.
            try await waitUntilReplayed(h, written.last!.position)
            try await Task.sleep(for: .milliseconds(300))  // past the status cache
            for w in written {
                let answer = try await h.request("GET", "/v1/subscriptions/\(w.otid)?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(answer.status, 200, answer.text)
                let events = try await h.request("GET", "/v1/subscriptions/\(w.otid)/events?environment=Sandbox", token: "auditor-token-for-tests-0123456789abcdef")
                XCTAssertEqual((events.json["events"] as? [Any])?.count, 1, events.text)
            }
            let second = try await reads(h)
            XCTAssertEqual(second["replica"]! - first["replica"]!, 40, "caught-up reads are the replica's: \(first) → \(second)")
            print("read replica: \(first["replica"]!) of 20 read-your-write reads and \(second["replica"]! - first["replica"]!) of 40 later reads answered by the replica")
            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
            for name in ["ledger_replica_up 1", "ledger_replica_lag_bytes ", "ledger_replica_lag_seconds ", "ledger_replica_lag_events 0"] {
                XCTAssertTrue(metrics.contains(name), name)
            }
            let ready = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual((ready.json["replica"] as? [String: Any])?["status"] as? String, "ok", ready.text)
        }
    }

    /// Replay paused: a read that must see a new write goes to the primary (and finds it); a read
    /// without a position goes there too once the replica is past the lag bound; resumed, the
    /// replica answers again.
    func testAPausedReplicaNeverAnswersStale() async throws {
        try await withService(environment: ["LEDGER_READ_REPLICA_MAX_LAG_SECONDS": "0.5"], replica: true) { h in
            let before = try await post(h, otid: "8100000000000001")
            try await waitUntilReplayed(h, before)
            let replica = try XCTUnwrap(try h.database.connectReplica())
            try replica.query("SELECT pg_wal_replay_pause()")
            do {
                let position = try await post(h, otid: "8100000000000002")
                let start = try await reads(h)
                let fresh = try await h.request("GET", "/v1/subscriptions/8100000000000002?environment=Sandbox&minPosition=\(position)", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(fresh.status, 200, "the primary answers what the paused replica lacks: \(fresh.text)")
                try await Task.sleep(for: .seconds(1.2))
                let unpinned = try await h.request("GET", "/v1/subscriptions/8100000000000002?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(unpinned.status, 200, "beyond the lag bound the primary answers: \(unpinned.text)")
                let during = try await reads(h)
                XCTAssertEqual(during["replica"], start["replica"], "the paused replica answered nothing: \(start) → \(during)")
                XCTAssertEqual(during["primary"]! - start["primary"]!, 2)
                let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
                XCTAssertTrue(metrics.contains("ledger_replica_lag_events 1"), metrics)
            } catch {
                _ = try? replica.query("SELECT pg_wal_replay_resume()")
                throw error
            }
            try replica.query("SELECT pg_wal_replay_resume()")
            let last = try await post(h, otid: "8100000000000003")
            try await waitUntilReplayed(h, last)
            try await Task.sleep(for: .milliseconds(300))
            let start = try await reads(h)
            let again = try await h.request("GET", "/v1/subscriptions/8100000000000003?environment=Sandbox&minPosition=\(last)", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(again.status, 200, again.text)
            let end = try await reads(h)
            XCTAssertEqual(end["replica"]! - start["replica"]!, 1, "resumed, the replica answers again")
        }
    }

    func testAReplicaThatIsDownSendsEveryReadToThePrimary() async throws {
        try await withService(environment: ["LEDGER_READ_DATABASE_URL": "host=/nonexistent-replica port=1 dbname=x connect_timeout=1"]) { h in
            _ = try await post(h, otid: "8200000000000001")
            let answer = try await h.request("GET", "/v1/subscriptions/8200000000000001?environment=Sandbox", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(answer.status, 200, answer.text)
            let ready = try await h.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
            XCTAssertEqual(ready.status, 200, "a replica down does not make the service unready: \(ready.text)")
            let replica = ready.json["replica"] as? [String: Any]
            XCTAssertEqual(replica?["status"] as? String, "unavailable", ready.text)
            XCTAssertTrue((replica?["reason"] as? String ?? "").contains("primary"), ready.text)
            let metrics = try await h.request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
            XCTAssertTrue(metrics.contains("ledger_replica_up 0"), metrics)
        }
    }

    /// Pointing LEDGER_READ_DATABASE_URL at the primary itself is refused as a replica (it is not
    /// in recovery): reads stay correct, and the reason is shown.
    func testAPrimaryGivenAsTheReplicaIsNotUsedAsOne() async throws {
        try await withService { h in
            try await withService(environment: ["LEDGER_READ_DATABASE_URL": h.database.serviceConninfo]) { g in
                let ready = try await g.request("GET", "/readyz", token: "admin-token-for-tests-0123456789abcdef")
                XCTAssertTrue(((ready.json["replica"] as? [String: Any])?["reason"] as? String ?? "").contains("not a standby"), ready.text)
            }
        }
    }

    func testMinPositionIsValidated() async throws {
        try await withService { h in
            for bad in ["-1", "x", "9223372036854775808"] {
                let answer = try await h.request("GET", "/v1/subscriptions/1?minPosition=\(bad)", token: "app-token-for-tests-0123456789abcdef")
                XCTAssertEqual(answer.status, 400, answer.text)
                XCTAssertEqual(answer.errorCode, "invalid_parameter")
            }
        }
    }
}

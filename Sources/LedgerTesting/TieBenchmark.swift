import Foundation
import LedgerCore

/// `ledger-dev bench ties`: what a loop of ties and unties on one subscription costs the
/// notifications that follow it. One subscription is bought and renewed `renewals` times (signed V2
/// notifications over one keep-alive connection, each a new transaction bought just before it is
/// posted, as Apple sends them); then `pairs` tie/untie pairs on it through the app API; then
/// `renewals` more. The figure is the p99 latency of the renewals after the loop against the p99
/// of those before it: every fold, webhook walk and tie check of the subscription now sees
/// 2 × `pairs` more events, and none of them should cost it.
public enum TieBenchmark {
    public struct Result: Sendable {
        public var before: LatencySummary
        public var after: LatencySummary
        public var ties: LatencySummary
        public var tiesPerSecond: Double
        public var pairs: Int
        public var ratio: Double { before.p99 > 0 ? after.p99 / before.p99 : 0 }

        public var text: String {
            String(format: "renewals before the loop p50 %.1f ms p99 %.1f ms; %d tie/untie pairs at %.0f/s (p99 %.1f ms); renewals after p50 %.1f ms p99 %.1f ms; after ÷ before p99 %.2f",
                   before.p50, before.p99, pairs, tiesPerSecond, ties.p99, after.p50, after.p99, ratio)
        }
    }

    public static func run(baseURL: String, authority: AppleTestAuthority, appToken: String, pairs: Int, renewals: Int,
                           bundleId: String = "com.example", environment: String = "Sandbox",
                           log: @Sendable (String) -> Void = { _ in }) async throws -> Result {
        guard pairs > 0, renewals > 1 else { throw BenchmarkError.invalid("pairs must be positive and renewals at least 2") }
        let target = try LoopbackTarget(url: baseURL)
        let otid = String(7_100_000_000_000_000 + UInt64.random(in: 0..<1_000_000_000))
        let fix = "start the service trusting the benchmark authority's root and accepting \(bundleId)/\(environment), with LEDGER_TOKENS app:<token> and the tie and append limits raised"

        /// Renewals `range`, bought 1 ms apart ending now: each is in effect when it is posted.
        func renewalRequests(_ range: Range<Int>) throws -> [LoadRequest] {
            let start = EpochMillis(Date().timeIntervalSince1970 * 1000) - EpochMillis(range.count)
            return try range.enumerated().map { i, n in
                let signed = start + EpochMillis(i)
                let s = AppleTestAuthority.sample(
                    type: n == 0 ? "SUBSCRIBED" : "DID_RENEW", subtype: n == 0 ? "INITIAL_BUY" : nil,
                    bundleId: bundleId, environment: environment, originalTransactionId: otid,
                    transactionId: n == 0 ? otid : otid + String(format: "%05d", n),
                    signedDate: signed, expiresDate: signed + 30 * 86_400_000)
                // Bought when signed: each renewal begins after everything before it, as a real
                // one a month later does (the sample backdates the purchase by a second).
                var bought = s
                bought.transaction.purchaseDate = AppleTime(signed)
                return LoadRequest(method: "POST", path: "/v1/apple/notifications", headers: [("Content-Type", "application/json")],
                                   body: try authority.signSample(bought))
            }
        }
        func post(_ requests: [LoadRequest]) async throws -> LoadReport {
            let generator = try LoadGenerator(target: target, options: LoadOptions(connections: 1, limit: .count(requests.count))) { requests[$0] }
            let report = await generator.run()
            try requireAllOK(report, fix: fix)
            return report
        }

        log("bench ties: \(renewals) renewals of subscription \(otid)…")
        let before = try await post(try renewalRequests(0..<renewals + 1)).latency
        log("  \(pairs) tie/untie pairs…")
        let auth = [("Authorization", "Bearer " + appToken), ("Content-Type", "application/json")]
        let tieBody = Data(#"{"originalTransactionId": "\#(otid)", "environment": "\#(environment)"}"#.utf8)
        let loop = (0..<(2 * pairs)).map { i -> LoadRequest in
            let customer = "bench-tie-" + String(i / 2 % 2)
            return i % 2 == 0
                ? LoadRequest(method: "POST", path: "/v1/customers/\(customer)/subscriptions", headers: auth, body: tieBody)
                : LoadRequest(method: "DELETE", path: "/v1/customers/\(customer)/subscriptions/\(otid)?environment=\(environment)", headers: auth)
        }
        let ties = try await post(loop)
        // The renewals after the loop are bought in the `renewals` ms before they are minted:
        // after the last tie, as a renewal that follows a loop is.
        try await Task.sleep(for: .milliseconds(renewals + 50))
        log("  \(renewals) renewals after the loop…")
        let after = try await post(try renewalRequests(renewals + 1..<2 * renewals + 1)).latency
        return Result(before: before, after: after, ties: ties.latency, tiesPerSecond: ties.requestsPerSecond, pairs: pairs)
    }
}

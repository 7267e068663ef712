import LedgerTesting
import XCTest
@testable import LedgerCore

final class LifecycleGeneratorTests: XCTestCase {
    let start: EpochMillis = 1_735_689_600_000

    func testSplitMix64MatchesTheReferenceSequence() {
        // Reference values of SplitMix64 seeded with 1234567 (from the published C implementation).
        var rng = SplitMix64(seed: 1_234_567)
        XCTAssertEqual(rng.next(), 6_457_827_717_110_365_317)
        XCTAssertEqual(rng.next(), 3_203_168_211_198_807_973)
        XCTAssertEqual(rng.next(), 9_817_491_932_198_370_423)
    }

    func testSameSeedSameLifecyclesAndCustomersAreIndependent() {
        let a = LifecycleGenerator(customers: 20, days: 365, start: start, seed: 99).lifecycles()
        let b = LifecycleGenerator(customers: 20, days: 365, start: start, seed: 99).lifecycles()
        XCTAssertEqual(a, b)
        let c = LifecycleGenerator(customers: 20, days: 365, start: start, seed: 100).lifecycles()
        XCTAssertNotEqual(a, c)
        // Customer 7 is the same whether 8 or 20 customers are generated: a failure replays alone.
        XCTAssertEqual(LifecycleGenerator(customers: 8, days: 365, start: start, seed: 99).lifecycle(customerIndex: 7), a[7])
    }

    func testLifecyclesAreWellFormed() throws {
        let generator = LifecycleGenerator(customers: 300, days: 730, start: start, seed: 7)
        var kinds = Set<String>()
        var uuids: [String: SimulatedNotification] = [:]
        var transactionOwners: [String: String] = [:]
        let end = start + 730 * 86_400_000
        for life in generator.lifecycles() {
            var previous: EpochMillis = .min
            for n in life.notifications {
                kinds.insert(n.notificationType + (n.subtype.map { "/" + $0 } ?? ""))
                XCTAssertGreaterThanOrEqual(n.deliveredAt, previous, "delivery order")
                previous = n.deliveredAt
                XCTAssertGreaterThan(n.deliveredAt, n.signedDate - 1)
                XCTAssertLessThan(n.signedDate, end + 86_400_000)
                XCTAssertEqual(n.transaction.originalTransactionId, life.originalTransactionId)
                XCTAssertEqual(n.transaction.appAccountToken, life.appAccountToken)
                XCTAssertEqual(n.transaction.signedDate?.millis, n.signedDate)
                XCTAssertEqual(n.renewal.signedDate?.millis, n.signedDate)
                let tx = n.transaction
                XCTAssertLessThan(try XCTUnwrap(tx.purchaseDate), try XCTUnwrap(tx.expiresDate))
                XCTAssertTrue((1...5).contains(n.status))
                if n.notificationType == "REFUND" {
                    XCTAssertNotNil(tx.revocationDate)
                    XCTAssertNotNil(tx.revocationReason)
                    XCTAssertNotNil(tx.revocationType)
                }
                if n.notificationType == "REFUND_REVERSED" { XCTAssertNil(tx.revocationDate) }
                if n.subtype == "GRACE_PERIOD" { XCTAssertNotNil(n.renewal.gracePeriodExpiresDate) }
                if n.notificationType == "EXPIRED" { XCTAssertNotNil(n.renewal.expirationIntent) }
                if let seen = uuids[n.notificationUUID] {
                    // A retried delivery repeats the message exactly, only later.
                    var again = n
                    again.deliveredAt = seen.deliveredAt
                    XCTAssertEqual(again, seen)
                } else {
                    uuids[n.notificationUUID] = n
                }
                if let owner = transactionOwners[tx.transactionId!] {
                    XCTAssertEqual(owner, life.originalTransactionId, "transaction ids are unique across customers")
                }
                transactionOwners[tx.transactionId!] = life.originalTransactionId
            }
        }
        let expected: Set<String> = [
            "SUBSCRIBED/INITIAL_BUY", "SUBSCRIBED/RESUBSCRIBE", "DID_RENEW", "DID_RENEW/BILLING_RECOVERY",
            "DID_FAIL_TO_RENEW", "DID_FAIL_TO_RENEW/GRACE_PERIOD", "GRACE_PERIOD_EXPIRED", "EXPIRED/VOLUNTARY",
            "EXPIRED/BILLING_RETRY", "EXPIRED/PRICE_INCREASE", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED",
            "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_ENABLED", "DID_CHANGE_RENEWAL_PREF/UPGRADE",
            "DID_CHANGE_RENEWAL_PREF/DOWNGRADE", "PRICE_INCREASE/PENDING", "PRICE_INCREASE/ACCEPTED", "REFUND",
            "REFUND_REVERSED",
        ]
        XCTAssertTrue(expected.isSubset(of: kinds), "missing: \(expected.subtracting(kinds))")
        XCTAssertGreaterThan(uuids.count, 1_000)
    }

    func testTrialsAndPlanChangesLookLikeTheAppStore() {
        let all = LifecycleGenerator(customers: 300, days: 730, start: start, seed: 11).notificationsInDeliveryOrder()
        let trials = all.filter { $0.transaction.offerType == 1 }
        XCTAssertFalse(trials.isEmpty)
        XCTAssertTrue(trials.allSatisfy { $0.transaction.price == 0 && $0.transaction.offerDiscountType == "FREE_TRIAL" })
        for n in all where n.subtype == "DOWNGRADE" {
            XCTAssertNotEqual(n.renewal.autoRenewProductId, n.transaction.productId, "a downgrade changes only the next product")
        }
        for n in all where n.subtype == "UPGRADE" {
            XCTAssertEqual(n.renewal.autoRenewProductId, n.transaction.productId)
            XCTAssertEqual(n.transaction.purchaseDate?.millis, n.signedDate, "an upgrade starts a new period at once")
        }
        XCTAssertTrue(all.contains { $0.transaction.isUpgraded == true }, "refunds of upgraded periods carry isUpgraded")
    }

    func testFoldBenchmarkRunsAndCountsWhatItFolded() {
        let result = FoldBenchmark.run(events: 2_000, decodeSample: 200)
        XCTAssertGreaterThanOrEqual(result.facts, 2_000)
        XCTAssertGreaterThan(result.subscriptions, 10)
        XCTAssertGreaterThan(result.factsPerSecond, 0)
        XCTAssertGreaterThan(result.decodedPerSecond, 0)
        XCTAssertLessThanOrEqual(result.entitledAtEnd, result.subscriptions)
    }
}

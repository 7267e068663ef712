import LedgerCore
import XCTest
@testable import LedgerStore

/// The live fold snapshots stay within their capacity (facts held) and drop the least recently
/// used first, down to three quarters of it, so the subscriptions being appended to keep theirs.
final class FoldSnapshotsCapacityTests: XCTestCase {
    func key(_ n: Int) -> SubscriptionKey { SubscriptionKey(environment: SubscriptionKey.production, originalTransactionId: "\(1_000_000 + n)") }

    func entry(_ n: Int, facts: Int) -> FoldSnapshots.Entry {
        FoldSnapshots.Entry(fold: SubscriptionFold(key: key(n)), position: Int64(n), facts: facts, walks: nil)
    }

    func testPastItsCapacityTheLeastRecentlyUsedGoFirstDownToThreeQuarters() {
        let snapshots = FoldSnapshots(capacity: 1_000)
        // Ten subscriptions of 100 facts each, stored one batch at a time: exactly the capacity.
        for n in 0..<10 { snapshots.store([key(n): entry(n, facts: 100)], forget: []) }
        XCTAssertEqual(snapshots.counters.facts, 1_000)
        XCTAssertEqual(snapshots.positions.count, 10)
        // Subscription 0 is appended to again (read and stored back): it is now the most recent.
        let taken = snapshots.peek([key(0)])
        XCTAssertEqual(taken.count, 1)
        snapshots.store(taken, forget: [])
        // One more goes past the capacity: the oldest (1 to 4) go, down to 750 facts or less.
        snapshots.store([key(10): entry(10, facts: 100)], forget: [])
        XCTAssertEqual(snapshots.counters.facts, 700)
        XCTAssertEqual(Set(snapshots.positions.keys), Set([0, 5, 6, 7, 8, 9, 10].map(key)))
    }

    func testForgottenAndReplacedSnapshotsAreNotCountedTwice() {
        let snapshots = FoldSnapshots(capacity: 1_000)
        snapshots.store([key(1): entry(1, facts: 300)], forget: [])
        snapshots.store([key(1): entry(1, facts: 400)], forget: [])
        XCTAssertEqual(snapshots.counters.facts, 400)
        snapshots.store([key(2): entry(2, facts: 100)], forget: [key(1)])
        XCTAssertEqual(snapshots.counters.facts, 100)
        XCTAssertEqual(Set(snapshots.positions.keys), [key(2)])
    }
}

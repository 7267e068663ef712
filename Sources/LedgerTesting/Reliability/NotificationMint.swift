import Foundation
import LedgerCore
import Synchronization

/// One signed V2 notification body and the keys the ledger will file it under.
public struct MintedNotification: Sendable {
    /// `notificationUUID`: the event's dedupe key.
    public let dedupeKey: String
    /// `originalTransactionId`: the event's stream.
    public let streamId: String
    public let body: Data

    /// The request that posts it to `ledger serve`.
    public var request: LoadRequest {
        LoadRequest(method: "POST", path: "/v1/apple/notifications", headers: [("Content-Type", "application/json")], body: body)
    }
}

/// Mints distinct, valid V2 notifications (outer, transaction and renewal JWS, as Apple sends
/// them) deterministically by index: notification i always has the same dedupe key, so the
/// reliability suite can name what it sent without keeping every body, and can mint lazily while
/// load runs. `notificationsPerStream` notifications share one subscription; their nested JWS are
/// signed once per stream (Apple re-sends the same transaction in several notifications too), which
/// keeps minting cheap when a scenario needs tens of thousands.
public final class NotificationMint: Sendable {
    public let authority: AppleTestAuthority
    public let notificationsPerStream: Int
    public let bundleId: String
    public let environment: String
    /// Distinguishes runs, so two runs against one database never collide.
    public let runTag: UInt32
    private let nested = Mutex<[Int: (transaction: String, renewal: String)]>([:])

    public init(authority: AppleTestAuthority, notificationsPerStream: Int = 20, bundleId: String = "com.example",
                environment: String = "Sandbox", runTag: UInt32 = UInt32.random(in: 0...UInt32.max)) {
        self.authority = authority
        self.notificationsPerStream = max(1, notificationsPerStream)
        self.bundleId = bundleId
        self.environment = environment
        self.runTag = runTag
    }

    public func dedupeKey(_ index: Int) -> String {
        // UUID-shaped, lower case like Apple's, unique per (run, index).
        let hex = String(UInt64(index), radix: 16)
        return String(format: "%08x-0000-4000-8000-", runTag) + String(repeating: "0", count: max(0, 12 - hex.count)) + hex
    }

    public func streamId(_ index: Int) -> String {
        String(7_000_000_000_000_000 + UInt64(runTag % 100_000) * 1_000_000_000 + UInt64(index / notificationsPerStream))
    }

    public func notification(_ index: Int) throws -> MintedNotification {
        let stream = index / notificationsPerStream
        // Dates move forward with the index, inside the test chain's validity (2020–2045).
        let signedDate: EpochMillis = 1_767_225_600_000 + EpochMillis(index) * 1000
        var sample = AppleTestAuthority.sample(
            type: "DID_RENEW", subtype: nil, uuid: dedupeKey(index), bundleId: bundleId, environment: environment,
            originalTransactionId: streamId(index), transactionId: streamId(index),
            signedDate: signedDate, expiresDate: signedDate + 30 * 86_400_000)
        let cached = nested.withLock { $0[stream] }
        let signed: (transaction: String, renewal: String)
        if let cached {
            signed = cached
        } else {
            signed = (try authority.sign(sample.transaction), try authority.sign(sample.renewal))
            nested.withLock { cache in
                // Bounded: lazily minted runs walk forward through streams, so old ones can go.
                if cache.count > 4096 { cache.removeAll(keepingCapacity: true) }
                cache[stream] = signed
            }
        }
        sample.notification.data?.signedTransactionInfo = signed.transaction
        sample.notification.data?.signedRenewalInfo = signed.renewal
        let body = try AppleTestAuthority.body(signedPayload: authority.sign(sample.notification))
        return MintedNotification(dedupeKey: dedupeKey(index), streamId: streamId(index), body: body)
    }

    /// A load source posting notification `map(i)` for request i; a mint failure ends the run
    /// (it is a set-up bug, reported by `failure`).
    public func loadSource(map: @escaping @Sendable (Int) -> Int = { $0 }) -> @Sendable (Int) -> LoadRequest? {
        { [self] i in (try? notification(map(i)))?.request }
    }

    /// Mints `count` notifications up front on `threads` threads (benchmarks must not mint while measuring).
    public func premint(_ count: Int, threads: Int = ProcessInfo.processInfo.activeProcessorCount) throws -> [MintedNotification] {
        final class Slots: @unchecked Sendable {
            // Each thread writes only its own indices of a buffer allocated up front; the group
            // wait orders every write before the reads.
            let items: UnsafeMutableBufferPointer<MintedNotification?>
            let failure = Mutex<(any Error)?>(nil)
            init(_ n: Int) {
                items = .allocate(capacity: n)
                items.initialize(repeating: nil)
            }
            deinit {
                items.deinitialize()
                items.deallocate()
            }
        }
        let slots = Slots(count)
        let group = DispatchGroup()
        let workers = max(1, min(threads, count))
        for w in 0..<workers {
            group.enter()
            Thread {
                var i = w
                while i < count {
                    do { slots.items[i] = try self.notification(i) } catch {
                        slots.failure.withLock { $0 = error }
                        break
                    }
                    i += workers
                }
                group.leave()
            }.start()
        }
        group.wait()
        if let error = slots.failure.withLock({ $0 }) { throw error }
        return slots.items.map { $0! }
    }
}

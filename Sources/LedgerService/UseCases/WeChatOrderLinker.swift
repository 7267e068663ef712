import Foundation
import LedgerCore
import LedgerStore
import Synchronization
import WeChatPay

/// Ties order streams (`wechat:order:<id>`: refunds and inquiries, which name only orders) to the
/// subscription their order belongs to, by `OrderLink` events, as soon as the alias index
/// (`WeChatQueries.orderGroup`) connects them — whichever of the order's pushes arrives first.
///
/// Correct under concurrency without serialising pushes: every push naming an order checks its
/// order group before its append (the links go in the same batch) and again after its commit. Of a
/// delivery and a refund of one order that race, the one whose re-check runs last sees both
/// committed and writes the link; if both do, the link's dedupe key (`link:<stream>`) stores it once.
struct WeChatOrderLinker: Sendable {
    let store: Store
    let log: Log

    /// The links `note` brings: its own subscription's (a delivery), else the order group's, for
    /// every order stream of the group no link ties yet — the push's own stream included.
    func links(for note: XPayNotification, group: WeChatOrderGroup) -> [NewEvent] {
        guard note.isReadable else { return [] }
        let own = note.subscriptionStream.map {
            SubscriptionKey(environment: note.environment ?? SubscriptionKey.production, originalTransactionId: $0)
        }
        guard let subscription = own ?? group.subscriptions.first else { return [] }
        if own == nil, group.subscriptions.count > 1 {
            log.warn("a WeChat order belongs to more than one subscription; linking to the least", [
                "ids": group.ids.joined(separator: ","), "subscriptions": group.subscriptions.map(\.text).joined(separator: ","),
            ])
        }
        var streams = group.unlinkedStreams
        // The push's own order stream, before it is stored (an ordinary purchase's is no orphan).
        if case .wechatOrder = StreamId(note.stream).kind, !group.linkedStreams.contains(note.stream),
           !group.purchaseStreams.contains(note.stream), !streams.contains(note.stream) {
            if case .goodsDelivery = note.message {} else { streams.append(note.stream) }
        }
        var anchor = group.anchors[subscription]
        if anchor == nil, own != nil, case .goodsDelivery(let d) = note.message { anchor = d.outTradeNo }
        return streams.sorted().compactMap { stream in
            guard case .wechatOrder(let order) = StreamId(stream).kind else { return nil }
            return OrderLink.event(orderId: order, provisionalStream: stream, subscription: subscription,
                                   linkedVia: anchor, at: note.signedAt)
        }
    }

    /// After `note` committed: its order group again, and the links still missing.
    @discardableResult
    func relink(after note: XPayNotification) async throws -> Int {
        guard note.isReadable, !note.orderIds.isEmpty else { return 0 }
        let group = try await store.wechat.orderGroup(naming: note.orderIds)
        let missing = links(for: note, group: group)
        if missing.isEmpty { return 0 }
        let outcomes = try await store.events.append(missing)
        return outcomes.filter { !$0.duplicate }.count
    }

    /// Links every orphan the index can now place (after reconciliation learned new aliases).
    func linkOrphans(olderThan: EpochMillis, limit: Int = 10_000) async throws -> Int {
        var linked = 0
        for orphan in try await store.wechat.orphans(recordedBefore: olderThan, limit: limit) {
            let group = try await store.wechat.orderGroup(naming: [orphan.orderId])
            guard let subscription = group.subscriptions.first else { continue }
            let events = group.unlinkedStreams.compactMap { stream -> NewEvent? in
                guard case .wechatOrder(let order) = StreamId(stream).kind else { return nil }
                return OrderLink.event(orderId: order, provisionalStream: stream, subscription: subscription,
                                       linkedVia: group.anchors[subscription], at: Clock.nowMillis(),
                                       evidence: "linked by the reconciliation: the alias index ties \(order) to \(group.anchors[subscription] ?? subscription.text)")
            }
            if events.isEmpty { continue }
            linked += try await store.events.append(events).filter { !$0.duplicate }.count
        }
        return linked
    }
}

/// Runs an operation against a deadline without waiting for it past the deadline: the operation
/// keeps running (its own timeouts end it) while the caller goes on with its fallback.
enum Deadline {
    enum Outcome<T: Sendable>: Sendable {
        case value(T)
        case failed(any Error)
        case timedOut
    }

    static func run<T: Sendable>(until deadline: ContinuousClock.Instant,
                                 _ operation: @escaping @Sendable () async throws -> T) async -> Outcome<T> {
        if ContinuousClock.now >= deadline { return .timedOut }
        let race = Race<T>()
        return await withCheckedContinuation { (continuation: CheckedContinuation<Outcome<T>, Never>) in
            race.arm(continuation)
            let sleeper = Task {
                try? await Task.sleep(until: deadline, clock: .continuous)
                race.finish(.timedOut)
            }
            Task {
                let outcome: Outcome<T>
                do { outcome = .value(try await operation()) } catch { outcome = .failed(error) }
                race.finish(outcome)
                sleeper.cancel()
            }
        }
    }

    /// The first outcome wins; the other is dropped.
    private final class Race<T: Sendable>: Sendable {
        private let slot = Mutex<CheckedContinuation<Outcome<T>, Never>?>(nil)
        func arm(_ continuation: CheckedContinuation<Outcome<T>, Never>) { slot.withLock { $0 = continuation } }
        func finish(_ outcome: Outcome<T>) { slot.withLock { $0.take() }?.resume(returning: outcome) }
    }
}

import Foundation

/// The ledger's links from provisional order streams (`wechat:order:<id>`) to subscription streams,
/// read from its `ledger_wechat_order_linked` events. Events are never rewritten, so whoever folds
/// a subscription applies the links: a fact from a linked provisional stream belongs to the
/// subscription. Order-independent: a provisional stream linked twice (to different subscriptions,
/// which the service does not do) goes to the least stream id, whatever the order.
public struct WeChatOrderLinks: Sendable, Equatable {
    public private(set) var subscriptionByProvisional: [String: String] = [:]
    /// Positions of the link events, per provisional stream (evidence for refund cases).
    public private(set) var linkPositions: [String: [Int64]] = [:]

    public init() {}

    public init(events: some Sequence<RecordedEvent>) {
        for e in events { add(e) }
    }

    /// Reads one event; anything but a link event is ignored.
    public mutating func add(_ event: RecordedEvent) {
        guard event.event.source == .ledger, event.event.type == XPayEventName.orderLinked,
              let v = try? JSONDecoder().decode(PushValue.self, from: event.event.payload),
              let provisional = v.text("provisional_stream") else { return }
        let target = v.text("subscription_stream") ?? event.event.streamId
        if subscriptionByProvisional[provisional].map({ target < $0 }) ?? true {
            subscriptionByProvisional[provisional] = target
        }
        if !(linkPositions[provisional] ?? []).contains(event.position) {
            linkPositions[provisional, default: []].append(event.position)
            linkPositions[provisional]!.sort()
        }
    }

    /// The subscription stream an event of `streamId` belongs to (itself when not linked).
    public func subscriptionStream(of streamId: String) -> String {
        subscriptionByProvisional[streamId] ?? streamId
    }

    /// The provisional streams linked to a subscription, to load with it.
    public func provisionalStreams(linkedTo subscription: String) -> [String] {
        subscriptionByProvisional.filter { $0.value == subscription }.keys.sorted()
    }
}

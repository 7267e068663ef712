import Foundation
import Synchronization

/// The service's one rate limiter: a token bucket per key (an app token's fingerprint, a client
/// address). A key may act `burst` times at once and then `perMinute` times a minute; the refusal
/// says how many seconds until it may act again (the `Retry-After` of the 429). Used for the app
/// tokens' appends and for failed authentication of every kind (`AuthenticationFailures`).
///
/// Memory is bounded: at most `maxKeys` buckets are kept; past that, buckets that have refilled
/// (their key is not limited any more) are forgotten first, then the oldest key not limited, and a
/// limited key only when every kept key is limited.
final class RateLimiter: Sendable {
    struct Rule: Sendable, Equatable {
        var burst: Int
        var perMinute: Int

        var perSecond: Double { Double(perMinute) / 60 }
    }

    private struct Bucket {
        var tokens: Double
        var updated: Double
    }

    let rule: Rule
    private let maxKeys: Int
    private let now: @Sendable () -> Double
    private let buckets = Mutex<[String: Bucket]>([:])

    /// - Parameter now: seconds on a monotonic clock (tests move it).
    init(_ rule: Rule, maxKeys: Int = 10_000, now: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        precondition(rule.burst > 0 && rule.perMinute > 0, "a rate limit needs a positive burst and rate")
        self.rule = rule
        self.maxKeys = maxKeys
        self.now = now
    }

    /// Seconds since boot: monotonic, unaffected by wall-clock steps.
    static func monotonicSeconds() -> Double { ProcessInfo.processInfo.systemUptime }

    /// Spends one unit for `key`: nil when allowed, else the whole seconds (at least 1) until a
    /// unit is available again — nothing is spent then.
    func spend(_ key: String) -> Int? {
        let t = now()
        return buckets.withLock { all in
            var bucket = refilled(all[key], at: t)
            guard bucket.tokens >= 1 else {
                all[key] = bucket
                return wait(bucket)
            }
            bucket.tokens -= 1
            if all[key] == nil, all.count >= maxKeys { evict(&all, at: t) }
            all[key] = bucket
            return nil
        }
    }

    /// The seconds until `key` may act again, without spending; nil when it may act now.
    func waitingTime(_ key: String) -> Int? {
        let t = now()
        return buckets.withLock { all in
            guard let stored = all[key] else { return nil }
            let bucket = refilled(stored, at: t)
            return bucket.tokens >= 1 ? nil : wait(bucket)
        }
    }

    private func refilled(_ bucket: Bucket?, at t: Double) -> Bucket {
        guard var bucket else { return Bucket(tokens: Double(rule.burst), updated: t) }
        bucket.tokens = min(Double(rule.burst), bucket.tokens + max(0, t - bucket.updated) * rule.perSecond)
        bucket.updated = t
        return bucket
    }

    private func wait(_ bucket: Bucket) -> Int {
        max(1, Int(((1 - bucket.tokens) / rule.perSecond).rounded(.up)))
    }

    /// Makes room when `maxKeys` buckets are kept: every refilled bucket goes (it says nothing a
    /// new one would not), and if that is not enough, the oldest eighth of the keys that may still
    /// act (forgetting one loses at most part of a burst), a limited key only when every kept key
    /// is limited — so spraying new keys cannot wash out a limit. Clearing an eighth at once keeps
    /// the cost per new key amortised constant-ish (one sort per maxKeys/8 new keys), instead of a
    /// scan of every bucket on each request once the table is full.
    private func evict(_ all: inout [String: Bucket], at t: Double) {
        for (key, stored) in all where refilled(stored, at: t).tokens >= Double(rule.burst) { all.removeValue(forKey: key) }
        guard all.count >= maxKeys else { return }
        let excess = all.count - maxKeys + max(1, maxKeys / 8)
        // Ties in age are common (every bucket touched in one second): limited keys sort last
        // whatever their age.
        let order = all.map { (key: $0.key, bucket: refilled($0.value, at: t)) }.sorted { a, b in
            let (la, lb) = (a.bucket.tokens < 1, b.bucket.tokens < 1)
            return la != lb ? lb : a.bucket.updated < b.bucket.updated
        }
        for victim in order.prefix(excess) { all.removeValue(forKey: victim.key) }
    }
}

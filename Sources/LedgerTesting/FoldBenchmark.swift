import Foundation
import LedgerCore

/// How fast the pure folds run, for `ledger-dev bench fold` (never a timed unit test: timings belong to a
/// release build on a quiet machine, not to a pass/fail check).
public enum FoldBenchmark {
    public struct Result: Sendable, Equatable, CustomStringConvertible {
        /// Facts folded.
        public var facts: Int
        public var subscriptions: Int
        /// Subscriptions entitled at the end of the simulated span (a sanity figure).
        public var entitledAtEnd: Int
        /// Folding prepared facts into `SubscriptionProjection` (what a rebuild does per event).
        public var foldSeconds: Double
        public var factsPerSecond: Double
        /// Evaluating every subscription's state once (what a rebuild does per subscription).
        public var evaluateSeconds: Double
        public var statesPerSecond: Double
        /// Turning stored JSON payloads into facts (`FactDecoder`), paid once per event at append
        /// (and by `ledger rederive`); rebuilds read the stored facts instead.
        public var decodeSeconds: Double
        public var decodedPerSecond: Double
        /// Facts the decoding produced per second (the fold's unit).
        public var decodedFactsPerSecond: Double = 0
        /// Each subscription's report contribution (`SubscriptionRollup.contribution`, what the
        /// reports' pass computes per touched subscription), per second.
        public var contributionsPerSecond: Double = 0
        /// Facts per second taken as the append takes them: each subscription's facts one
        /// position at a time onto its fold, the webhook walk resumed from where the last stopped
        /// (`WebhookDerivation.events(of:now:position:log:)`). Its cost must not grow with the
        /// history a fact lands on.
        public var webhookFactsPerSecond: Double = 0

        public var description: String {
            "folded \(facts) facts of \(subscriptions) subscriptions: \(Int(factsPerSecond)) facts/s, "
                + "\(Int(statesPerSecond)) states/s; "
                + "JSON payload → fact: \(Int(decodedPerSecond)) events/s; "
                + "report contributions: \(Int(contributionsPerSecond))/s; "
                + "webhook derivation, one position at a time: \(Int(webhookFactsPerSecond)) facts/s"
        }
    }

    /// Generates at least `events` notifications (seed 1, 2 years from 2025-01-01), folds them
    /// in delivery order and reports the rates. `decodeSample` caps how many are JSON-decoded.
    /// `runs` runs over the same facts: folding stored facts (what rebuild, the live hook and
    /// `?at=` do) against deriving facts from the JSON payloads (what they would do without the
    /// facts table), both in facts/s.
    public static func summary(events: Int, runs: Int = 3, seed: UInt64 = 1) -> (Result, BenchSummary) {
        var results: [Result] = []
        for _ in 0..<max(1, runs) { results.append(run(events: events, seed: seed)) }
        let summary = BenchSummary(
            name: "fold", command: "ledger-dev bench fold --events \(events)", unit: "facts/s",
            ledgerLabel: "SubscriptionProjection folding stored facts", ledger: results.map(\.factsPerSecond),
            baselineLabel: "FactDecoder deriving facts from the JSON payloads", baseline: results.map(\.decodedFactsPerSecond),
            details: ["states/s": BenchSummary.Figure(results.map(\.statesPerSecond)).median,
                      "report contributions/s": BenchSummary.Figure(results.map(\.contributionsPerSecond)).median,
                      "webhook derivation facts/s": BenchSummary.Figure(results.map(\.webhookFactsPerSecond)).median])
        return (results[results.count / 2], summary)
    }

    public static func run(events: Int, seed: UInt64 = 1, decodeSample: Int = 20_000) -> Result {
        let start: EpochMillis = 1_735_689_600_000
        var notifications: [SimulatedNotification] = []
        var customer = 0
        let generator = LifecycleGenerator(customers: 0, days: 730, start: start, seed: seed)
        while notifications.count < events {
            notifications += generator.lifecycle(customerIndex: customer).notifications
            customer += 1
        }
        notifications.sort(by: LifecycleGenerator.deliveryOrder)
        let facts = notifications.enumerated().flatMap { i, n in
            (try? n.facts(position: Int64(i + 1), recordedAt: n.deliveredAt)) ?? []
        }
        let evaluateAt = start + 730 * 86_400_000

        let clock = ContinuousClock()
        var projection = SubscriptionProjection()
        var entitled = 0
        let foldTime = clock.measure {
            for fact in facts { projection.apply(fact) }
        }
        let evaluateTime = clock.measure {
            for fold in projection.subscriptions.values where fold.state(at: evaluateAt)?.status.isEntitled == true {
                entitled += 1
            }
        }
        var figures = 0
        var webhookEvents = 0
        let contributionTime = clock.measure {
            for fold in projection.subscriptions.values { figures &+= SubscriptionRollup.contribution(of: fold).series.count }
        }
        let webhookTime = clock.measure { webhookEvents = deriveOneAtATime(facts) }
        let sample = Array(notifications.prefix(decodeSample)).enumerated().compactMap { i, n in
            try? n.recordedEvent(position: Int64(i + 1), recordedAt: n.deliveredAt)
        }
        var decoded = 0, decodedFacts = 0
        let decodeTime = clock.measure {
            for event in sample {
                let facts = FactDecoder.facts(of: event)
                if !facts.isEmpty { decoded += 1 }
                decodedFacts += facts.count
            }
        }
        let foldSeconds = seconds(foldTime)
        let evaluateSeconds = seconds(evaluateTime)
        let decodeSeconds = seconds(decodeTime)
        return Result(
            facts: facts.count, subscriptions: projection.subscriptions.count, entitledAtEnd: entitled,
            foldSeconds: foldSeconds, factsPerSecond: Double(facts.count) / max(foldSeconds, 1e-9),
            evaluateSeconds: evaluateSeconds,
            statesPerSecond: Double(projection.subscriptions.count) / max(evaluateSeconds, 1e-9),
            decodeSeconds: decodeSeconds, decodedPerSecond: Double(decoded) / max(decodeSeconds, 1e-9),
            decodedFactsPerSecond: Double(decodedFacts) / max(decodeSeconds, 1e-9),
            contributionsPerSecond: figures > 0 ? Double(projection.subscriptions.count) / max(seconds(contributionTime), 1e-9) : 0,
            webhookFactsPerSecond: webhookEvents > 0 ? Double(facts.count) / max(seconds(webhookTime), 1e-9) : 0)
    }

    /// What the append does per subscription and position: folds the position's facts, forgets
    /// the walks they can change and derives from where the last standing walk stopped. Returns
    /// the events derived (a sanity figure: none would mean nothing was walked).
    static func deriveOneAtATime(_ facts: [Fact]) -> Int {
        let derivation = WebhookDerivation(catalog: RebuildBenchmark.catalog, makeId: { $0 })
        var folds: [SubscriptionKey: (fold: SubscriptionFold, log: WebhookWalkLog)] = [:]
        var events = 0
        var i = 0
        while i < facts.count {
            // One position's facts, as one append brings them.
            var j = i
            while j < facts.count, facts[j].position == facts[i].position { j += 1 }
            var touched: [SubscriptionKey] = []
            for fact in facts[i..<j] {
                guard let key = fact.subscription else { continue }
                var entry = folds.removeValue(forKey: key) ?? (SubscriptionFold(key: key), WebhookWalkLog(position: 0))
                if let effect = entry.fold.earliestEffect(of: fact) { entry.log.forget(from: effect) }
                entry.fold.apply(fact)
                folds[key] = entry
                if !touched.contains(key) { touched.append(key) }
            }
            for key in touched {
                var entry = folds.removeValue(forKey: key)!
                entry.log.position = facts[i].position
                events += derivation.events(of: entry.fold, now: facts[i].recordedAt, position: facts[i].position, log: &entry.log).count
                folds[key] = entry
            }
            i = j
        }
        return events
    }

    private static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18
    }
}

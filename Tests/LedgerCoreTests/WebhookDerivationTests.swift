import Crypto
import LedgerTesting
import XCTest
@testable import LedgerCore

/// The webhook derivation on documented lifecycles, each expectation written by hand from the
/// lifecycle (days from `FoldFixture.base`), then the order-independence of the derived set.
final class WebhookDerivationTests: XCTestCase {
    typealias F = FoldFixture
    let derivation = WebhookDerivation(catalog: F.catalog, makeId: StandardWebhooks.messageId(for:))

    /// (type, day, discriminating detail) — what a reader of the lifecycle expects.
    struct Expected: Equatable, CustomStringConvertible {
        var type: WebhookEventType
        var day: Double
        var detail: String
        init(_ type: WebhookEventType, _ day: Double, _ detail: String = "") {
            self.type = type
            self.day = day
            self.detail = detail
        }
        var description: String { "\(type.rawValue)@\(day)\(detail.isEmpty ? "" : " " + detail)" }
    }

    func derived(_ facts: [Fact], now: Double) -> [WebhookEvent] {
        derivation.events(of: SubscriptionFold(key: F.key, facts: facts), now: F.d(now), position: 7)
    }

    func summary(_ events: [WebhookEvent]) -> [Expected] {
        events.map { e in
            let day = Double(e.effectiveAt - F.base) / Double(F.day)
            let d = e.details
            let detail: String
            switch e.type {
            case .subscriptionStarted, .subscriptionRenewed, .subscriptionRecovered: detail = d["transactionId"]?.text ?? "?"
            case .subscriptionProductChanged:
                detail = "\(d["from"]?.text ?? "?")>\(d["to"]?.text ?? "?") \(d["kind"]?.text ?? "?")"
            case .subscriptionAutoRenewChanged: detail = "auto=\(d["autoRenewStatus"]?.text ?? "?")"
            case .subscriptionBillingIssue: detail = d["stage"]?.text ?? "?"
            case .subscriptionExpired: detail = d["reason"]?.text ?? "?"
            case .subscriptionRefunded, .subscriptionRefundReversed:
                detail = "\(d["transactionId"]?.text ?? "?") inEffect=\(d["periodInEffect"] == .bool(true))"
            case .entitlementGranted: detail = d["entitlement"]?.text ?? "?"
            case .entitlementRevoked: detail = "\(d["entitlement"]?.text ?? "?") \(d["reason"]?.text ?? "?")"
            case .refundCaseDecided, .test: detail = ""
            }
            return Expected(e.type, day, detail)
        }
    }

    func testBoughtRenewedTwiceThenLapsed() {
        let events = derived(F.renewedTwice(), now: 100)
        XCTAssertEqual(summary(events), [
            Expected(.subscriptionStarted, 0, "1000"), Expected(.entitlementGranted, 0, "basic"),
            Expected(.subscriptionRenewed, 30, "1001"),
            Expected(.subscriptionRenewed, 60, "1002"),
            Expected(.subscriptionExpired, 90, "unknown"), Expected(.entitlementRevoked, 90, "basic expired"),
        ])
        // Nothing effective after `now` is announced yet.
        XCTAssertEqual(summary(derived(F.renewedTwice(), now: 45)).map(\.type),
                       [.subscriptionStarted, .entitlementGranted, .subscriptionRenewed])
    }

    func testEveryEventCarriesItsSubscriptionCustomerPositionAndState() throws {
        let events = derived(F.renewedTwice(), now: 100)
        let renewed = try XCTUnwrap(events.first { $0.type == .subscriptionRenewed })
        XCTAssertEqual(renewed.source, "apple")
        XCTAssertEqual(renewed.environment, "Production")
        XCTAssertEqual(renewed.originalTransactionId, F.otid)
        XCTAssertEqual(renewed.customerId, F.customer)
        XCTAssertEqual(renewed.position, 7)
        XCTAssertEqual(renewed.state?.latestTransactionId, "1001")
        XCTAssertEqual(renewed.state?.status, .active)
        XCTAssertEqual(renewed.identity, "Production:1000|subscription.renewed|1001")
        XCTAssertEqual(renewed.id, StandardWebhooks.messageId(for: renewed.identity))
        XCTAssertTrue(renewed.id.hasPrefix("evt_") && renewed.id.count == 36)
        let body = renewed.body
        XCTAssertEqual(body["type"]?.text, "subscription.renewed")
        XCTAssertEqual(body["id"]?.text, renewed.id)
        XCTAssertEqual(body["timestamp"]?.text, "2026-01-31T00:00:00.000Z")
        XCTAssertEqual(body["data"]?["state"], renewed.state?.representation)
        XCTAssertEqual(body["data"]?["effectiveDate"], .integer(F.d(30)))
        // Ids are unique within a subscription.
        XCTAssertEqual(Set(events.map(\.id)).count, events.count)
    }

    func testAutoRenewTurnedOffThenExpiredIsAnUnsubscribe() {
        let facts = [F.tx("1000", from: 0, to: 30, message: "SUBSCRIBED/INITIAL_BUY"), F.renewal(signed: 0),
                     F.renewal(signed: 10, auto: 0), F.renewal(signed: 31, auto: 0, intent: 1)]
        XCTAssertEqual(summary(derived(facts, now: 40)), [
            Expected(.subscriptionStarted, 0, "1000"), Expected(.entitlementGranted, 0, "basic"),
            Expected(.subscriptionAutoRenewChanged, 10, "auto=0"),
            Expected(.subscriptionExpired, 30, "unsubscribe"), Expected(.entitlementRevoked, 30, "basic expired"),
        ])
    }

    func testAutoRenewOffThenOnAgainIsTwoChanges() {
        let facts = [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0), F.renewal(signed: 10, auto: 0), F.renewal(signed: 12, auto: 1)]
        XCTAssertEqual(summary(derived(facts, now: 20)).filter { $0.type == .subscriptionAutoRenewChanged },
                       [Expected(.subscriptionAutoRenewChanged, 10, "auto=0"), Expected(.subscriptionAutoRenewChanged, 12, "auto=1")])
    }

    func testBillingIssueInGraceThenRecovered() {
        let facts = [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0),
                     F.renewal(signed: 30, grace: 36, retry: true),
                     F.tx("1001", from: 33, to: 63), F.renewal(signed: 33, retry: false)]
        XCTAssertEqual(summary(derived(facts, now: 50)), [
            Expected(.subscriptionStarted, 0, "1000"), Expected(.entitlementGranted, 0, "basic"),
            Expected(.subscriptionBillingIssue, 30, "grace_period"),
            Expected(.subscriptionRenewed, 33, "1001"), Expected(.subscriptionRecovered, 33, "1001"),
        ])
        let issue = derived(facts, now: 50).first { $0.type == .subscriptionBillingIssue }
        XCTAssertEqual(issue?.details["gracePeriodExpiresDate"], JSONValue.integer(F.d(36)))
    }

    func testGraceEndsIntoBillingRetryThenExpiresForABillingError() {
        let facts = [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0), F.renewal(signed: 30, grace: 36, retry: true)]
        XCTAssertEqual(summary(derived(facts, now: 100)), [
            Expected(.subscriptionStarted, 0, "1000"), Expected(.entitlementGranted, 0, "basic"),
            Expected(.subscriptionBillingIssue, 30, "grace_period"),
            Expected(.subscriptionBillingIssue, 36, "billing_retry"), Expected(.entitlementRevoked, 36, "basic billing_issue"),
            Expected(.subscriptionExpired, 90, "billing_error"),
        ])
    }

    func testRefundOfThePeriodInEffectThenItsReversal() {
        let facts = F.renewedTwice().prefix(4) + [F.revocation("1001", at: 40), F.reversal("1001", signed: 45)]
        XCTAssertEqual(summary(derived(Array(facts), now: 50)), [
            Expected(.subscriptionStarted, 0, "1000"), Expected(.entitlementGranted, 0, "basic"),
            Expected(.subscriptionRenewed, 30, "1001"),
            Expected(.subscriptionRefunded, 40, "1001 inEffect=true"), Expected(.entitlementRevoked, 40, "basic refunded"),
            Expected(.subscriptionRefundReversed, 45, "1001 inEffect=true"), Expected(.entitlementGranted, 45, "basic"),
        ])
        // The second grant is another event than the first (the n-th grant names it).
        let grants = derived(Array(facts), now: 50).filter { $0.type == .entitlementGranted }
        XCTAssertNotEqual(grants[0].id, grants[1].id)
    }

    func testRefundOfAPastPeriodChangesNoEntitlement() {
        let facts = Array(F.renewedTwice().prefix(4)) + [F.revocation("1000", at: 40)]
        XCTAssertEqual(summary(derived(facts, now: 50)).suffix(1), [Expected(.subscriptionRefunded, 40, "1000 inEffect=false")])
    }

    func testUpgradeIsAProductChangeThatGrantsTheNewEntitlement() {
        let facts = [F.tx("1000", from: 0, to: 30, signed: 10, upgraded: true), F.renewal(signed: 0),
                     F.tx("1001", F.premium, from: 10, to: 40), F.renewal(signed: 10, product: F.premium)]
        XCTAssertEqual(summary(derived(facts, now: 20)), [
            Expected(.subscriptionStarted, 0, "1000"), Expected(.entitlementGranted, 0, "basic"),
            Expected(.subscriptionProductChanged, 10, "\(F.monthly)>\(F.premium) upgrade"),
            Expected(.entitlementGranted, 10, "premium"),
        ])
    }

    func testDowngradeAtRenewalIsNamedByPrice() {
        var cheap = F.tx("1001", F.monthly, from: 30, to: 60)
        cheap.transaction?.price = 4990
        cheap.transaction?.currency = "USD"
        var dear = F.tx("1000", F.premium, from: 0, to: 30)
        dear.transaction?.price = 9990
        dear.transaction?.currency = "USD"
        let events = summary(derived([dear, F.renewal(signed: 0, product: F.premium), cheap], now: 40))
        XCTAssertEqual(events.filter { $0.type == .subscriptionProductChanged },
                       [Expected(.subscriptionProductChanged, 30, "\(F.premium)>\(F.monthly) downgrade")])
        XCTAssertEqual(events.filter { $0.type == .entitlementRevoked }, [Expected(.entitlementRevoked, 30, "premium product_changed")])
    }

    func testACustomerTieMovesTheEntitlement() {
        let facts = [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0), F.tie("someone-else", recorded: 5, position: 9)]
        let events = derived(facts, now: 10)
        XCTAssertEqual(summary(events), [
            Expected(.subscriptionStarted, 0, "1000"), Expected(.entitlementGranted, 0, "basic"),
            Expected(.entitlementGranted, 5, "basic"), Expected(.entitlementRevoked, 5, "basic customer_changed"),
        ])
        XCTAssertEqual(events.filter { $0.day(F.self) == 5 }.map(\.customerId), ["someone-else", F.customer])
    }

    func testRefundCaseDecisions() throws {
        let answer = Fact(position: 41, subscription: F.key, kind: .consumptionAnswer, origin: .ledger, message: "consumption_sent",
                          signedAt: F.d(3), transactionId: "1000", detail: #"{"outcome":"sent"}"#)
        let inquiry = Fact(position: 42, subscription: nil, kind: .refundAnswer, origin: .ledger, message: "refund_inquiry_answer",
                           signedAt: F.d(4), transactionId: "order-1", detail: #"{"decision":"refuse","rule":"consumed"}"#)
        let unrelated = F.renewal(signed: 1)
        let events = derivation.decisions(in: [answer, inquiry, unrelated], subscription: F.key, state: nil)
        XCTAssertEqual(events.map(\.type), [.refundCaseDecided, .refundCaseDecided])
        XCTAssertEqual(events[0].source, "apple")
        XCTAssertEqual(events[0].details["outcome"], .string("sent"))
        XCTAssertEqual(events[1].source, "wechat")
        XCTAssertEqual(events[1].details["decision"], .string("refuse"))
        XCTAssertEqual(events[1].originalTransactionId, F.otid, "an order's answer joins the subscription the caller attached it to")
        XCTAssertNotEqual(events[0].id, events[1].id)
    }

    // MARK: - Order independence

    static func lifecycles() -> [(String, [Fact], Double)] {
        [
            ("renewed twice", F.renewedTwice(), 100),
            ("billing recovered", [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0), F.renewal(signed: 30, grace: 36, retry: true),
                                   F.tx("1001", from: 33, to: 63), F.renewal(signed: 33, retry: false)], 50),
            ("refund and reversal", Array(F.renewedTwice().prefix(4)) + [F.revocation("1001", at: 40), F.reversal("1001", signed: 45)], 50),
            ("upgrade", [F.tx("1000", from: 0, to: 30, signed: 10, upgraded: true), F.renewal(signed: 0),
                         F.tx("1001", F.premium, from: 10, to: 40), F.renewal(signed: 10, product: F.premium)], 60),
            // Notices signed after the expiry instant: inside the settle window, and after it.
            ("grace notice an hour late", [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0),
                                           F.renewal(signed: 30 + 1.0 / 24, grace: 36, retry: true)], 50),
            ("renewal two hours late", [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0),
                                        F.tx("1001", from: 30 + 2.0 / 24, to: 60), F.renewal(signed: 30 + 2.0 / 24)], 50),
            ("grace notice after the window", [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0),
                                               F.renewal(signed: 30.5, grace: 36, retry: true)], 50),
        ]
    }

    // MARK: - An expiry at a renewal boundary settles

    /// Period 0 → 30, auto-renew on; Apple's word on the renewal is signed after the expiry
    /// instant (window 6 h). Written by hand from the rule: a renewal, grace period or billing
    /// retry taking effect within the window supersedes the expiry — the backend hears the
    /// billing issue or the renewal, never `expired`/`revoked` then `granted`.
    func testAnExpiryAtARenewalBoundarySettlesBeforeItIsAnnounced() {
        let base = [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0)]
        let hour = 1.0 / 24
        let opening = [Expected(.subscriptionStarted, 0, "1000"), Expected(.entitlementGranted, 0, "basic")]
        // Grace period, the notice signed an hour after the expiry: access never stops.
        XCTAssertEqual(summary(derived(base + [F.renewal(signed: 30 + hour, grace: 36, retry: true)], now: 33)),
                       opening + [Expected(.subscriptionBillingIssue, 30 + hour, "grace_period")])
        // Billing retry without a grace period: one revocation, for the billing issue.
        XCTAssertEqual(summary(derived(base + [F.renewal(signed: 30 + hour, retry: true)], now: 33)),
                       opening + [Expected(.subscriptionBillingIssue, 30 + hour, "billing_retry"),
                                  Expected(.entitlementRevoked, 30 + hour, "basic billing_issue")])
        // The renewal itself, two hours late: renewed, nothing expired.
        XCTAssertEqual(summary(derived(base + [F.tx("1001", from: 30 + 2 * hour, to: 60), F.renewal(signed: 30 + 2 * hour)], now: 33)),
                       opening + [Expected(.subscriptionRenewed, 30 + 2 * hour, "1001")])
        // Nothing yet, the window open: the expiry waits (and so does everything after it).
        XCTAssertEqual(summary(derived(base, now: 30 + 3 * hour)), opening)
        // Nothing, the window passed: announced at the expiry instant.
        let lapsed = opening + [Expected(.subscriptionExpired, 30, "unknown"), Expected(.entitlementRevoked, 30, "basic expired")]
        XCTAssertEqual(summary(derived(base, now: 30 + 7 * hour)), lapsed)
        // Auto-renew off: nothing is expected to supersede it; announced as it happens.
        XCTAssertEqual(summary(derived(base + [F.renewal(signed: 10, auto: 0)], now: 30 + hour)),
                       opening + [Expected(.subscriptionAutoRenewChanged, 10, "auto=0"), Expected(.subscriptionExpired, 30, "unsubscribe"),
                                  Expected(.entitlementRevoked, 30, "basic expired")])
        // A notice signed after the window comes too late to supersede: the expiry stands.
        XCTAssertEqual(summary(derived(base + [F.renewal(signed: 30.5, grace: 36, retry: true)], now: 33)),
                       lapsed + [Expected(.subscriptionBillingIssue, 30.5, "grace_period"), Expected(.entitlementGranted, 30.5, "basic")])
        // Window 0: every expiry as it happens — the flap the window prevents.
        let immediate = WebhookDerivation(catalog: F.catalog, expirySettle: 0, makeId: StandardWebhooks.messageId(for:))
        let flap = immediate.events(of: SubscriptionFold(key: F.key, facts: base + [F.renewal(signed: 30 + hour, grace: 36, retry: true)]),
                                    now: F.d(33), position: 7)
        XCTAssertEqual(summary(flap), lapsed + [Expected(.subscriptionBillingIssue, 30 + hour, "grace_period"),
                                                Expected(.entitlementGranted, 30 + hour, "basic")])
    }

    /// A notice that supersedes an expiry already walked past (the walk stopped inside the window)
    /// makes that walk stale: a resumed walk must go back before the expiry.
    func testALateNoticeForgetsTheWalkThatStoppedAtTheExpiry() {
        var fold = SubscriptionFold(key: F.key, facts: [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0)])
        var log = WebhookWalkLog(position: 0)
        // Walked to day 31: the expiry at 30 was announced (the window passed at 30.25).
        XCTAssertEqual(summary(derivation.events(of: fold, now: F.d(31), position: 1, log: &log)).map(\.type),
                       [.subscriptionStarted, .entitlementGranted, .subscriptionExpired, .entitlementRevoked])
        // A renewal info signed at 30.2 (inside the window), arriving now.
        let notice = F.renewal(signed: 30.2, grace: 36, retry: true)
        if let effect = fold.earliestEffect(of: notice) { log.forget(from: effect) }
        fold.apply(notice)
        let resumed = derivation.events(of: fold, now: F.d(31), position: 2, log: &log)
        let whole = derivation.events(of: fold, now: F.d(31), position: 2)
        let stored = Set(derivation.events(of: SubscriptionFold(key: F.key, facts: [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0)]),
                                           now: F.d(31), position: 1).map(\.id))
        XCTAssertEqual(resumed.filter { !stored.contains($0.id) }.map(\.bodyBytes), whole.filter { !stored.contains($0.id) }.map(\.bodyBytes))
        XCTAssertEqual(summary(whole.filter { !stored.contains($0.id) }), [Expected(.subscriptionBillingIssue, 30.2, "grace_period")])
    }

    /// The same facts in any order, seen once or twice, derive the same events (ids, bodies).
    func testShuffledAndDuplicatedFactsDeriveTheSameEvents() {
        var rng = SystemRandomNumberGenerator()
        for (name, facts, now) in Self.lifecycles() {
            let reference = derived(facts, now: now)
            XCTAssertFalse(reference.isEmpty, name)
            for _ in 0..<40 {
                var arrival = facts + facts.filter { _ in Bool.random(using: &rng) }
                arrival.shuffle(using: &rng)
                let events = derived(arrival, now: now)
                XCTAssertEqual(events.map(\.id), reference.map(\.id), name)
                XCTAssertEqual(events.map(\.bodyBytes), reference.map(\.bodyBytes), name)
            }
        }
    }

    /// A walk resumed where the last one stopped, after forgetting the walks each new fact can
    /// change (`SubscriptionFold.earliestEffect`), derives at every arrival exactly the new events
    /// the whole walk derives — in every arrival order, with the clock fixed or moving with the
    /// arrivals, across renewals, billing issues, refunds, upgrades and ties. Every lifecycle has
    /// facts that act before points already walked (late renewals, back-dated refunds), so an
    /// effect rule that is too late makes a resumed walk miss an event here.
    func testAResumedWalkDerivesWhatTheWholeWalkDerives() {
        var rng = SystemRandomNumberGenerator()
        let withTies: [(String, [Fact], Double)] = [
            ("ties", F.renewedTwice() + [F.tie("someone-else", recorded: 5, position: 90), F.tie(nil, recorded: 35, position: 91),
                                         F.tie("third", recorded: 62, position: 92), F.tie(F.customer, recorded: 70, position: 93)], 100),
            ("upgrade inside the pre-charge window", [
                F.tx("1000", from: 0, to: 30, upgraded: true), F.renewal(signed: 0),
                F.tx("1001", from: 29.5, to: 59.5), F.tx("1002", F.premium, from: 29, to: 59, message: "DID_CHANGE_RENEWAL_PREF/UPGRADE"),
                F.renewal(signed: 29, product: F.premium), F.revocation("1002", at: 40), F.reversal("1002", signed: 41)], 80),
            ("a refund signed days after its date", F.renewedTwice() + [F.revocation("1001", at: 40, signed: 52),
                                                                        F.renewal(signed: 50, auto: 0)], 100),
        ]
        var resumedAtLeastOnce = 0
        for (name, facts, end) in Self.lifecycles() + withTies {
            for round in 0..<60 {
                var arrival = facts + facts.filter { _ in Bool.random(using: &rng) }
                arrival.shuffle(using: &rng)
                var fold = SubscriptionFold(key: F.key)
                var log = WebhookWalkLog(position: 0)
                var known: Set<String> = []
                var clock = F.d(0)
                for (i, fact) in arrival.enumerated() {
                    if let effect = fold.earliestEffect(of: fact) { log.forget(from: effect) }
                    if !log.isEmpty { resumedAtLeastOnce += 1 }
                    fold.apply(fact)
                    clock = round % 2 == 0 ? F.d(end) : max(clock, fact.signedAt, fact.effectiveAt, fact.recordedAt)
                    let whole = derivation.events(of: fold, now: clock, position: Int64(i)).filter { !known.contains($0.id) }
                    let resumed = derivation.events(of: fold, now: clock, position: Int64(i), log: &log).filter { !known.contains($0.id) }
                    XCTAssertEqual(resumed.map(\.bodyBytes), whole.map(\.bodyBytes), "\(name): arrival \(i) of \(arrival.count)")
                    known.formUnion(whole.map(\.id))
                }
            }
        }
        XCTAssertGreaterThan(resumedAtLeastOnce, 100, "the walks must actually resume")
    }

    /// Thousands of ties: the walk of one more tie visits its own point, not the history.
    func testATieAfterThousandsResumesAtItsOwnPoint() {
        var fold = SubscriptionFold(key: F.key, facts: [F.tx("1000", from: 0, to: 300), F.renewal(signed: 0)])
        var log = WebhookWalkLog(position: 0)
        _ = derivation.events(of: fold, now: F.d(1), position: 1, log: &log)
        for i in 0..<4_000 {
            let tie = F.tie(i % 2 == 0 ? "other" : nil, recorded: 1 + Double(i) / 100, position: Int64(10 + i))
            if let effect = fold.earliestEffect(of: tie) { log.forget(from: effect) }
            XCTAssertFalse(log.isEmpty)
            fold.apply(tie)
            let events = derivation.events(of: fold, now: tie.recordedAt, position: tie.position, log: &log)
            // Each tie or untie moves the entitlement: one grant and one revocation, at the tie.
            XCTAssertEqual(events.count, 2, "tie \(i)")
            XCTAssertEqual(Set(events.map(\.effectiveAt)), [tie.recordedAt])
        }
        XCTAssertEqual(fold.state(at: F.d(100))?.customerId, F.customer, "untied last: the token's customer")
    }

    /// Through the fold batch by batch in arrival order (what the projection does): every event
    /// of the whole history is among those queued, and a duplicate fact adds nothing. Events from what the ledger believed between arrivals may be sent on top (a
    /// renewal learned late after the ledger announced the expiry it saw); in the arrival
    /// orders where each fact arrives before its effect has passed, the sent set is the final one.
    func testIncrementalDerivationQueuesEveryEvent() {
        var rng = SystemRandomNumberGenerator()
        for (name, facts, now) in Self.lifecycles() {
            let reference = Set(derived(facts, now: now).map(\.id))
            for _ in 0..<40 {
                var arrival = facts + facts.filter { _ in Bool.random(using: &rng) }
                arrival.shuffle(using: &rng)
                // The outbox keeps each id once: an event a later fact hid (an n-th grant moved
                // to another time) and a still later fact brought back is not queued again.
                var outbox: Set<String> = []
                var fold: SubscriptionFold?
                for (i, fact) in arrival.enumerated() {
                    var after = fold ?? SubscriptionFold(key: F.key)
                    after.apply(fact)
                    let batch = derivation.newEvents(before: fold, after: after, now: F.d(now), position: Int64(i)).map(\.id)
                    XCTAssertEqual(Set(batch).count, batch.count, "\(name): one batch derived an id twice")
                    outbox.formUnion(batch)
                    fold = after
                }
                XCTAssertTrue(reference.isSubset(of: outbox), "\(name): an event of the history was never queued")
                // A duplicate of every fact, once all are known, adds nothing.
                if let fold {
                    var again = fold
                    for f in facts { again.apply(f) }
                    XCTAssertEqual(derivation.newEvents(before: fold, after: again, now: F.d(now), position: 999), [], name)
                }
            }
        }
        // Arriving in business-time order, with the clock at each fact's time: exactly the history.
        for (name, facts, now) in Self.lifecycles() {
            let inTime = facts.sorted { ($0.signedAt, $0.effectiveAt) < ($1.signedAt, $1.effectiveAt) }
            var sent: [String] = []
            var fold: SubscriptionFold?
            var clock = EpochMillis.min
            for (i, fact) in inTime.enumerated() {
                var after = fold ?? SubscriptionFold(key: F.key)
                after.apply(fact)
                let arrival = max(clock, fact.signedAt, fact.effectiveAt)
                sent += derivation.newEvents(before: fold, derivedAt: clock, after: after, now: arrival, position: Int64(i)).map(\.id)
                fold = after
                clock = arrival
            }
            if let fold { sent += derivation.newEvents(before: fold, derivedAt: clock, after: fold, now: F.d(now), position: 99).map(\.id) }
            XCTAssertEqual(sent.count, Set(sent).count, name)
            XCTAssertEqual(Set(sent), Set(derived(facts, now: now).map(\.id)), name)
        }
    }
}

private extension WebhookEvent {
    func day(_ f: FoldFixture.Type) -> Double { Double(effectiveAt - f.base) / Double(f.day) }
}

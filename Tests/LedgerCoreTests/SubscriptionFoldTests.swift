import XCTest
@testable import LedgerCore

/// One test per semantic rule of the subscription, transaction and entitlement folds. Each
/// scenario is also folded in every arrival order, since every rule must hold order-independently.
final class SubscriptionFoldTests: XCTestCase {
    typealias F = Fixture

    func testActiveUntilExpiresThenExpiredWithoutAnyEvent() throws {
        let facts = F.renewedTwice()
        let s = try XCTUnwrap(F.state(facts, at: 45))
        XCTAssertEqual(s.status, .active)
        XCTAssertEqual(s.latestTransactionId, "t2")
        XCTAssertEqual(s.expiresDate, F.d(60))
        XCTAssertEqual(s.customerId, F.customer)
        XCTAssertEqual(F.grants(facts, at: 45).map(\.entitlement), ["basic"])
        XCTAssertEqual(F.state(facts, at: 60)?.status, .expired, "expiry needs no event")
        XCTAssertEqual(F.grants(facts, at: 60), [])
        F.assertOrderIndependent(facts, at: [10, 45, 61])
    }

    func testGracePeriodIsEntitledUntilItEnds() throws {
        var facts = F.renewedTwice()
        facts.append(F.fact("DID_FAIL_TO_RENEW", "GRACE_PERIOD", signed: 60.01,
                            tx: F.tx("t2", from: 30, to: 60, signed: 60.01),
                            renewal: F.renewal(intent: 2, retry: true, grace: 76, signed: 60.01), status: 4))
        let s = try XCTUnwrap(F.state(facts, at: 70))
        XCTAssertEqual(s.status, .gracePeriod)
        XCTAssertTrue(s.isInBillingRetryPeriod)
        XCTAssertEqual(s.entitledUntil, F.d(76))
        let grants = F.grants(facts, at: 70)
        XCTAssertEqual(grants.map(\.status), [.gracePeriod])
        XCTAssertEqual(grants.first?.expiresDate, F.d(76), "a grace grant lasts until the grace end")
        XCTAssertEqual(F.state(facts, at: 77)?.status, .billingRetry, "grace over, retry continues")
        XCTAssertEqual(F.grants(facts, at: 77), [])
        F.assertOrderIndependent(facts, at: [59, 70, 77])
    }

    func testBillingRetryWithoutGraceIsNotEntitledAndEndsAfterSixtyDays() throws {
        var facts = F.renewedTwice()
        facts.append(F.fact("DID_FAIL_TO_RENEW", signed: 60.01, tx: F.tx("t2", from: 30, to: 60, signed: 60.01),
                            renewal: F.renewal(intent: 2, retry: true, signed: 60.01), status: 3))
        XCTAssertEqual(F.state(facts, at: 61)?.status, .billingRetry)
        XCTAssertEqual(F.grants(facts, at: 61), [])
        XCTAssertEqual(F.state(facts, at: 119.9)?.status, .billingRetry)
        XCTAssertEqual(F.state(facts, at: 120)?.status, .expired, "Apple retries at most 60 days")
        // Recovery: a new transaction, retry flags gone.
        facts.append(F.fact("DID_RENEW", "BILLING_RECOVERY", signed: 70, tx: F.tx("t3", from: 70, to: 100, signed: 70),
                            renewal: F.renewal(signed: 70)))
        let s = try XCTUnwrap(F.state(facts, at: 71))
        XCTAssertEqual(s.status, .active)
        XCTAssertFalse(s.isInBillingRetryPeriod)
        XCTAssertEqual(s.latestTransactionId, "t3")
        F.assertOrderIndependent(facts, at: [61, 71])
    }

    func testRefundOfAnEarlierPeriodKeepsTheCurrentOne() throws {
        var facts = F.renewedTwice()
        facts.append(F.fact("REFUND", signed: 40, tx: F.tx("t1", from: 0, to: 30, signed: 40, revoked: 40),
                            renewal: F.renewal(signed: 40), status: 1))
        let s = try XCTUnwrap(F.state(facts, at: 41))
        XCTAssertEqual(s.status, .active)
        XCTAssertEqual(s.latestTransactionId, "t2")
        XCTAssertEqual(F.grants(facts, at: 41).count, 1)
        let view = SubscriptionProjection(facts: facts).view(at: F.d(41))
        let t1 = try XCTUnwrap(view.transactions.first { $0.transactionId == "t1" })
        XCTAssertTrue(t1.isRevoked)
        XCTAssertEqual(t1.revocationType, "REFUND_FULL")
        XCTAssertEqual(t1.refundSignedDate, F.d(40))
        XCTAssertFalse(view.transactions.first { $0.transactionId == "t2" }!.isRevoked)
        F.assertOrderIndependent(facts, at: [20, 41])
    }

    func testRefundOfTheCurrentPeriodRevokesAndReversalRestores() throws {
        var facts = F.renewedTwice()
        facts.append(F.fact("REFUND", signed: 40, tx: F.tx("t2", from: 30, to: 60, signed: 40, revoked: 40),
                            renewal: F.renewal(autoRenew: 0, signed: 40), status: 5))
        XCTAssertEqual(F.state(facts, at: 39)?.status, .active, "not revoked before the revocation date")
        XCTAssertEqual(F.state(facts, at: 41)?.status, .revoked)
        XCTAssertEqual(F.grants(facts, at: 41), [])
        F.assertOrderIndependent(facts, at: [41])

        // The reversal's snapshot still lists the revocation: a reversal reinstates anyway.
        facts.append(F.fact("REFUND_REVERSED", signed: 45, tx: F.tx("t2", from: 30, to: 60, signed: 45, revoked: 40),
                            renewal: F.renewal(autoRenew: 0, signed: 45), status: 1))
        let s = try XCTUnwrap(F.state(facts, at: 46))
        XCTAssertEqual(s.status, .active)
        XCTAssertEqual(F.grants(facts, at: 46).map(\.entitlement), ["basic"])
        let t2 = try XCTUnwrap(SubscriptionProjection(facts: facts).view(at: F.d(46)).transactions.last)
        XCTAssertFalse(t2.isRevoked)
        XCTAssertNil(t2.revocationDate)
        XCTAssertEqual(t2.refundSignedDate, F.d(40), "the refund stays on record as evidence")
        XCTAssertEqual(t2.refundReversedSignedDate, F.d(45))
        F.assertOrderIndependent(facts, at: [41, 46])
    }

    func testUpgradeTakesEffectAtOnceEvenWithAnEarlierExpiry() throws {
        // Yearly until day 365, upgraded on day 100 to a monthly premium plan (expires day 130).
        let facts = [
            F.fact("SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: F.tx("y1", F.yearly, from: 0, to: 365, signed: 0),
                   renewal: F.renewal(F.yearly, signed: 0)),
            F.fact("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 50,
                   tx: F.tx("y1", F.yearly, from: 0, to: 365, signed: 50), renewal: F.renewal(F.yearly, autoRenew: 0, signed: 50)),
            F.fact("DID_CHANGE_RENEWAL_PREF", "UPGRADE", signed: 100, tx: F.tx("p2", F.premium, from: 100, to: 130, signed: 100),
                   renewal: F.renewal(F.premium, signed: 100)),
        ]
        let s = try XCTUnwrap(F.state(facts, at: 101))
        XCTAssertEqual(s.productId, F.premium)
        XCTAssertEqual(s.latestTransactionId, "p2")
        XCTAssertEqual(s.autoRenewStatus, 1)
        XCTAssertEqual(F.grants(facts, at: 101).map(\.entitlement), ["basic", "premium"])
        XCTAssertEqual(F.state(facts, at: 131)?.status, .expired, "the superseded yearly does not come back")
        XCTAssertEqual(F.state(facts, at: 99)?.productId, F.premium,
                       "state(at:) over all facts is the latest knowledge; use time travel for the past")
        XCTAssertEqual(SubscriptionProjection.asOfBusinessTime(F.d(99), facts: facts).subscription(F.sub)?.productId, F.yearly)
        let records = SubscriptionProjection(facts: facts).view(at: F.d(101)).transactions
        XCTAssertEqual(records.map(\.transactionId), ["y1", "p2"])
        XCTAssertEqual(records.map(\.isUpgraded), [true, false],
                       "the period the upgrade cut short is marked upgraded though Apple sends no message for it")
        F.assertOrderIndependent(facts, at: [101, 131])

        // The old transaction's own snapshot saying isUpgraded (e.g. on its prorated refund) changes nothing.
        var more = facts
        more.append(F.fact("REFUND", signed: 102, tx: F.tx("y1", F.yearly, from: 0, to: 365, signed: 102, revoked: 102, upgraded: true),
                           renewal: F.renewal(F.premium, signed: 102)))
        XCTAssertEqual(F.state(more, at: 103)?.status, .active)
        XCTAssertEqual(F.state(more, at: 103)?.productId, F.premium)
        XCTAssertTrue(SubscriptionProjection(facts: more).view(at: F.d(103)).transactions.first!.isUpgraded)
        F.assertOrderIndependent(more, at: [103])
    }

    func testDowngradeWaitsForTheNextRenewal() throws {
        var facts = [
            F.fact("SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: F.tx("p1", F.premium, from: 0, to: 30, signed: 0),
                   renewal: F.renewal(F.premium, signed: 0)),
            F.fact("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", signed: 10, tx: F.tx("p1", F.premium, from: 0, to: 30, signed: 10),
                   renewal: F.renewal(F.premium, next: F.monthly, signed: 10)),
        ]
        let before = try XCTUnwrap(F.state(facts, at: 11))
        XCTAssertEqual(before.productId, F.premium)
        XCTAssertEqual(before.autoRenewProductId, F.monthly)
        XCTAssertEqual(F.grants(facts, at: 11).map(\.entitlement), ["basic", "premium"])
        facts.append(F.fact("DID_RENEW", signed: 29.9, tx: F.tx("m2", F.monthly, from: 30, to: 60, signed: 29.9),
                            renewal: F.renewal(F.monthly, signed: 29.9)))
        let after = try XCTUnwrap(F.state(facts, at: 31))
        XCTAssertEqual(after.productId, F.monthly)
        XCTAssertEqual(F.grants(facts, at: 31).map(\.entitlement), ["basic"])
        F.assertOrderIndependent(facts, at: [11, 31])
    }

    func testAutoRenewOffIsStillActiveUntilExpiry() throws {
        var facts = F.renewedTwice()
        facts.append(F.fact("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 40,
                            tx: F.tx("t2", from: 30, to: 60, signed: 40), renewal: F.renewal(autoRenew: 0, signed: 40)))
        let s = try XCTUnwrap(F.state(facts, at: 50))
        XCTAssertEqual(s.status, .active)
        XCTAssertEqual(s.autoRenewStatus, 0)
        XCTAssertEqual(F.grants(facts, at: 50).count, 1)
        F.assertOrderIndependent(facts, at: [50, 61])
    }

    func testExpirationIntentIsKept() throws {
        var facts = F.renewedTwice()
        facts.append(F.fact("EXPIRED", "VOLUNTARY", signed: 60.01, tx: F.tx("t2", from: 30, to: 60, signed: 60.01),
                            renewal: F.renewal(autoRenew: 0, intent: 1, signed: 60.01), status: 2))
        for day in [61.0, 400] {
            let s = try XCTUnwrap(F.state(facts, at: day))
            XCTAssertEqual(s.status, .expired)
            XCTAssertEqual(s.expirationIntent, 1)
        }
        // A late, older event (the auto-renew toggle before expiry) does not erase it.
        facts.append(F.fact("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 50,
                            tx: F.tx("t2", from: 30, to: 60, signed: 50), renewal: F.renewal(autoRenew: 0, signed: 50)))
        XCTAssertEqual(F.state(facts, at: 61)?.expirationIntent, 1)
        F.assertOrderIndependent(facts, at: [55, 61])
    }

    func testLateOlderEventsDoNotRegressAndLaterRenewalOnlyChangesApply() throws {
        let initial = F.fact("SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: F.tx("t1", from: 0, to: 30, signed: 0),
                             renewal: F.renewal(signed: 0))
        let oldToggle = F.fact("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", signed: 20,
                               tx: F.tx("t1", from: 0, to: 30, signed: 20), renewal: F.renewal(autoRenew: 1, signed: 20))
        let renew = F.fact("DID_RENEW", signed: 29.8, tx: F.tx("t2", from: 30, to: 60, signed: 29.8), renewal: F.renewal(signed: 29.8))
        let off = F.fact("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 40,
                         tx: F.tx("t2", from: 30, to: 60, signed: 40), renewal: F.renewal(autoRenew: 0, signed: 40))
        let price = F.fact("PRICE_INCREASE", "PENDING", signed: 41,
                           tx: F.tx("t2", from: 30, to: 60, signed: 41), renewal: F.renewal(autoRenew: 0, price: 0, signed: 41))
        // Delivered newest first: the older ones arrive late and must not move anything back.
        let facts = [price, off, renew, oldToggle, initial]
        let s = try XCTUnwrap(F.state(facts, at: 45))
        XCTAssertEqual(s.autoRenewStatus, 0)
        XCTAssertEqual(s.priceIncreaseStatus, 0, "a renewal-info-only change with the same expiry applies when signed later")
        XCTAssertEqual(s.expiresDate, F.d(60))
        XCTAssertEqual(s.versionSignedDate, F.d(41))
        F.assertOrderIndependent(facts, at: [45, 61])
    }

    func testDuplicatesAreNoOpsWhateverTheirPosition() {
        let facts = F.renewedTwice()
        var doubled = facts
        for f in facts {
            var again = f
            again.position += 1_000
            again.recordedAt += 3_600_000
            doubled.append(again)
        }
        XCTAssertEqual(F.snapshot(facts, at: 45), F.snapshot(doubled, at: 45))
        XCTAssertEqual(F.snapshot(facts, at: 61), F.snapshot(doubled, at: 61))
    }

    func testExactVersionTiesAreBrokenByContentNotArrival() {
        // Two different messages with the same expiry and signedDate (Apple signs in ms; it happens).
        let a = F.fact("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 40,
                       tx: F.tx("t2", from: 30, to: 60, signed: 40), renewal: F.renewal(autoRenew: 0, signed: 40))
        let b = F.fact("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", signed: 40,
                       tx: F.tx("t2", from: 30, to: 60, signed: 40), renewal: F.renewal(autoRenew: 1, signed: 40))
        let facts = F.renewedTwice() + [a, b]
        F.assertOrderIndependent(facts, at: [45])
    }

    func testRenewalOnlyFactsOverlayWhenSignedLater() throws {
        // A source without a transaction (e.g. a WeChat contract termination) turning auto-renew off.
        var facts = F.renewedTwice()
        facts.append(SubscriptionFact(position: 9, recordedAt: F.d(41), source: .wechatContractTerminated,
                                      originalTransactionId: F.sub, signedDate: F.d(41), openId: "o-wx",
                                      renewal: RenewalFact(autoRenewStatus: 0)))
        let s = try XCTUnwrap(F.state(facts, at: 42))
        XCTAssertEqual(s.autoRenewStatus, 0)
        XCTAssertEqual(s.status, .active)
        XCTAssertEqual(s.productId, F.monthly, "fields the overlay does not name stay")
        XCTAssertEqual(s.customerId, F.customer, "appAccountToken wins over an openid")
        F.assertOrderIndependent(facts, at: [42])
        // Signed before the head: ignored.
        var early = F.renewedTwice()
        early.append(SubscriptionFact(position: 9, recordedAt: F.d(10), source: .wechatContractTerminated,
                                      originalTransactionId: F.sub, signedDate: F.d(10), renewal: RenewalFact(autoRenewStatus: 0)))
        XCTAssertEqual(F.state(early, at: 42)?.autoRenewStatus, 1)
    }

    func testHostileFactsNeitherCrashNorBecomeOrderDependent() throws {
        var bare = TransactionFact(transactionId: "bare")  // no dates, no product, nothing
        bare.originalTransactionId = F.sub
        var huge = F.tx("huge", from: 0, to: 1, signed: 1)
        huge.expiresDate = .max
        huge.purchaseDate = .min
        let facts = [
            F.fact("DID_RENEW", signed: 1, tx: bare, renewal: nil),
            F.fact("DID_FAIL_TO_RENEW", signed: 2, tx: huge, renewal: F.renewal(retry: true, grace: 1e9, signed: 2)),
            F.fact("UNKNOWN_FUTURE_TYPE", "NEW_SUBTYPE", signed: -5, tx: F.tx("neg", from: -10, to: -5, signed: -5), renewal: nil),
            SubscriptionFact(position: 0, recordedAt: 0, originalTransactionId: F.sub, signedDate: .min),
        ]
        let s = try XCTUnwrap(F.state(facts, at: 10))
        XCTAssertEqual(s.latestTransactionId, "huge")
        XCTAssertEqual(s.status, .active)
        XCTAssertEqual(SubscriptionFold.status(hasTransaction: true, revokedAt: nil, expires: .max - 1,
                                               renewal: RenewalFact(isInBillingRetryPeriod: true), asOf: .max),
                       .billingRetry, "no overflow near the end of time")
        F.assertOrderIndependent(facts, at: [-6, 0, 10])
    }

    func testFactsOfAnotherSubscriptionAreIgnoredByAFold() {
        var fold = SubscriptionFold(originalTransactionId: "other")
        for f in F.renewedTwice() { fold.apply(f) }
        XCTAssertTrue(fold.isEmpty)
        XCTAssertNil(fold.state(at: F.d(1)))
    }

    /// The worked example of docs/projections.md, step by step (Jan 1 = day 0).
    func testTheDocumentedOutOfOrderExample() throws {
        let a = F.fact("SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: F.tx("T1", from: 0, to: 30, signed: 0), renewal: F.renewal(signed: 0))
        let b = F.fact("DID_RENEW", signed: 29, tx: F.tx("T2", from: 30, to: 60, signed: 29), renewal: F.renewal(signed: 29))
        let c = F.fact("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: 40,
                       tx: F.tx("T2", from: 30, to: 60, signed: 40), renewal: F.renewal(autoRenew: 0, signed: 40))
        let d = F.fact("REFUND", signed: 42, tx: F.tx("T1", from: 0, to: 30, signed: 42, revoked: 42),
                       renewal: F.renewal(autoRenew: 0, signed: 42))
        XCTAssertEqual(F.state([d], at: 43)?.status, .revoked, "step 1: D alone")
        let two = try XCTUnwrap(F.state([d, c], at: 43))
        XCTAssertEqual(two.status, .active, "step 2: C's later expiry wins")
        XCTAssertEqual(two.autoRenewStatus, 0)
        XCTAssertEqual(F.state([d, c, a], at: 43), two, "step 3: A is older and moves nothing")
        let all = try XCTUnwrap(F.state([d, c, a, b, b], at: 43))
        XCTAssertEqual(all, two, "step 4: the late renewal does not switch auto-renew back on")
        XCTAssertEqual(all.expiresDate, F.d(60))
        let txs = SubscriptionProjection(facts: [d, c, a, b]).view(at: F.d(43)).transactions
        XCTAssertEqual(txs.map(\.transactionId), ["T1", "T2"])
        XCTAssertEqual(txs.map(\.isRevoked), [true, false])
        XCTAssertEqual(txs[1].signedDate, F.d(40), "T2's snapshot stays C's")
        XCTAssertEqual(F.state([a, b, c, d], at: 43), all)
        XCTAssertEqual(F.state([d, c, a, b], at: 61)?.status, .expired)
        F.assertOrderIndependent([a, b, c, d, b], at: [43, 61])
    }

    // MARK: - Time travel

    func testTimeTravelAtBusinessTimeUsesOnlyFactsSignedByThen() throws {
        var facts = F.renewedTwice()
        facts.append(F.fact("REFUND", signed: 40, tx: F.tx("t2", from: 30, to: 60, signed: 40, revoked: 40),
                            renewal: F.renewal(autoRenew: 0, signed: 40), recorded: 50))
        let before = SubscriptionProjection.asOfBusinessTime(F.d(39), facts: facts)
        XCTAssertEqual(before.evaluatedAt, F.d(39))
        XCTAssertEqual(before.subscription(F.sub)?.status, .active)
        XCTAssertEqual(before.subscription(F.sub)?.autoRenewStatus, 1)
        XCTAssertFalse(before.transactions.contains { $0.isRevoked })
        XCTAssertEqual(before.entitlements(catalog: F.catalog).count, 1)
        XCTAssertEqual(SubscriptionProjection.asOfBusinessTime(F.d(40), facts: facts).subscription(F.sub)?.status, .revoked)
        XCTAssertEqual(SubscriptionProjection.asOfBusinessTime(F.d(20), facts: facts).subscription(F.sub)?.latestTransactionId, "t1")
        XCTAssertNil(SubscriptionProjection.asOfBusinessTime(F.d(-1), facts: facts).subscription(F.sub))
    }

    func testTimeTravelAtRecordedTimeShowsWhatTheLedgerKnew() {
        var facts = F.renewedTwice()
        // Signed on day 40 but recorded on day 50 (Apple delivered it late).
        facts.append(F.fact("REFUND", signed: 40, tx: F.tx("t2", from: 30, to: 60, signed: 40, revoked: 40),
                            renewal: F.renewal(autoRenew: 0, signed: 40), recorded: 50))
        XCTAssertEqual(SubscriptionProjection.asKnownAt(recordedTime: F.d(45), facts: facts).subscription(F.sub)?.status, .active,
                       "on day 45 the ledger did not know of the refund yet")
        XCTAssertEqual(SubscriptionProjection.asOfBusinessTime(F.d(45), facts: facts).subscription(F.sub)?.status, .revoked,
                       "but in business time the refund happened on day 40")
        XCTAssertEqual(SubscriptionProjection.asKnownAt(recordedTime: F.d(50), facts: facts).subscription(F.sub)?.status, .revoked)
        XCTAssertEqual(SubscriptionProjection.asKnownAt(recordedTime: F.d(50), facts: facts).evaluatedAt, F.d(50))
    }
}

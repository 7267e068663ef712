import LedgerTesting
import XCTest
@testable import LedgerCore

/// Facts built directly (the decoders are tested on their own): day numbers from `base`.
enum FoldFixture {
    static let base: EpochMillis = 1_767_225_600_000
    static let day: EpochMillis = 86_400_000
    static let otid = "1000"
    static let key = SubscriptionKey(environment: "Production", originalTransactionId: otid)
    static let customer = "5eed0c0d-0000-4a00-8000-000000000001"
    static let monthly = "com.example.monthly", premium = "com.example.premium.monthly"
    static let catalog = ProductCatalog(entitlementsByProduct: [monthly: ["basic"], premium: ["basic", "premium"]])

    static func d(_ x: Double) -> EpochMillis { base + EpochMillis((x * Double(day)).rounded()) }

    static func tx(_ id: String, _ product: String = monthly, from: Double, to: Double?, signed: Double? = nil,
                   token: String? = customer, upgraded: Bool = false, type: String = ProductType.autoRenewable,
                   key: SubscriptionKey = key, message: String = "DID_RENEW") -> Fact {
        let s = d(signed ?? from)
        return Fact(subscription: key, kind: .transaction, origin: .appleV2, message: message, signedAt: s, effectiveAt: d(from),
                    transactionId: id, customerId: token,
                    transaction: TransactionFact(transactionId: id, originalTransactionId: key.originalTransactionId, productId: product,
                                                 purchaseDate: d(from), expiresDate: to.map(d), signedDate: s, isUpgraded: upgraded,
                                                 appAccountToken: token, environment: key.environment, type: type))
    }

    static func renewal(signed: Double, auto: Int = 1, product: String = monthly, next: String? = nil, grace: Double? = nil,
                        retry: Bool? = nil, intent: Int? = nil, token: String? = nil, key: SubscriptionKey = key) -> Fact {
        Fact(subscription: key, kind: .renewal, origin: .appleV2, message: "DID_RENEW", signedAt: d(signed), customerId: token,
             renewal: RenewalFact(productId: product, autoRenewProductId: next ?? product, autoRenewStatus: auto, expirationIntent: intent,
                                  isInBillingRetryPeriod: retry, gracePeriodExpiresDate: grace.map(d), appAccountToken: token,
                                  signedDate: d(signed)))
    }

    static func revocation(_ id: String, at: Double, signed: Double? = nil, reason: Int = 0) -> Fact {
        Fact(subscription: key, kind: .revocation, origin: .appleV2, message: "REFUND", signedAt: d(signed ?? at), effectiveAt: d(at),
             transactionId: id,
             transaction: TransactionFact(transactionId: id, revocationDate: d(at), revocationReason: reason, revocationType: "REFUND_FULL"))
    }

    static func reversal(_ id: String, signed: Double) -> Fact {
        Fact(subscription: key, kind: .reversal, origin: .appleV2, message: "REFUND_REVERSED", signedAt: d(signed), transactionId: id)
    }

    static func tie(_ customer: String?, recorded: Double, position: Int64) -> Fact {
        Fact(position: position, recordedAt: d(recorded), subscription: key, kind: .customerTie, origin: .ledger,
             message: customer == nil ? LedgerEventType.customerUntied : LedgerEventType.customerTied, signedAt: d(recorded),
             customerId: customer)
    }

    /// Bought day 0, renewed days 30 and 60 (→ 90).
    static func renewedTwice() -> [Fact] {
        [tx("1000", from: 0, to: 30, message: "SUBSCRIBED/INITIAL_BUY"), renewal(signed: 0),
         tx("1001", from: 30, to: 60), renewal(signed: 30),
         tx("1002", from: 60, to: 90), renewal(signed: 60)]
    }

    static func state(_ facts: [Fact], at day: Double) -> SubscriptionState? {
        SubscriptionFold(key: key, facts: facts).state(at: d(day))
    }
}

/// The fold's rules one at a time, on facts built directly. Whole stories checked against the
/// documentation are in `DocumentedScenarioTests`; these pin the edges.
final class SubscriptionFoldTests: XCTestCase {
    typealias F = FoldFixture

    func testASnapshotSignedLaterWinsAndIsUpgradedStaysSaid() throws {
        let first = F.tx("1000", from: 0, to: 30, signed: 0)
        let extended = F.tx("1000", from: 0, to: 37, signed: 20)
        let upgraded = F.tx("1000", from: 0, to: 30, signed: 12, upgraded: true)
        for order in [[first, extended, upgraded], [upgraded, extended, first], [extended, first, upgraded]] {
            let fold = SubscriptionFold(key: F.key, facts: order)
            let record = try XCTUnwrap(fold.transaction("1000"))
            XCTAssertEqual(record.expiresDate, F.d(37), "the snapshot signed last")
            XCTAssertEqual(record.signedDate, F.d(20))
            XCTAssertTrue(record.isUpgraded, "once any snapshot says isUpgraded, it stays said")
        }
    }

    func testAnUpgradedTransactionIsNeverInEffectWhileAnotherIs() {
        // Same purchase instant; the upgraded one would win the id tie-break ("9999" > "1001").
        let old = F.tx("9999", F.monthly, from: 10, to: 40, upgraded: true)
        let new = F.tx("1001", F.premium, from: 10, to: 40)
        for facts in [[old, new], [new, old]] {
            XCTAssertEqual(F.state(facts, at: 20)?.latestTransactionId, "1001")
            XCTAssertEqual(F.state(facts, at: 20)?.productId, F.premium)
        }
        // Only upgraded transactions known (the new one not yet): the latest of them still answers.
        XCTAssertEqual(F.state([old], at: 20)?.latestTransactionId, "9999")
        // Without isUpgraded, equal purchase instants fall to the greater id, in any order.
        let a = F.tx("2000", from: 10, to: 40), b = F.tx("3000", F.premium, from: 10, to: 40)
        XCTAssertEqual(F.state([a, b], at: 20)?.latestTransactionId, "3000")
        XCTAssertEqual(F.state([b, a], at: 20)?.latestTransactionId, "3000")
    }

    func testARevocationIsInForceFromItsDateUntilAReversalSignedAtOrAfterIt() {
        let facts = [F.tx("1000", from: 0, to: 365), F.revocation("1000", at: 20, signed: 22), F.reversal("1000", signed: 30)]
        XCTAssertEqual(F.state(facts, at: 19)?.status, .active)
        XCTAssertEqual(F.state(facts, at: 21)?.status, .revoked, "in effect from revocationDate, before it was signed")
        XCTAssertEqual(F.state(facts, at: 21)?.revocationDate, F.d(20))
        XCTAssertEqual(F.state(facts, at: 30)?.status, .active, "reinstated when the reversal was signed")
        XCTAssertNil(F.state(facts, at: 30)?.revocationDate)
        // A second refund signed after the reversal revokes again.
        let again = facts + [F.revocation("1000", at: 40, signed: 40)]
        XCTAssertEqual(F.state(again, at: 41)?.status, .revoked)
        XCTAssertEqual(F.state(again, at: 41)?.revocationDate, F.d(40))
        // A reversal signed before any refund reverses nothing later.
        let early = [F.tx("1000", from: 0, to: 365), F.reversal("1000", signed: 5), F.revocation("1000", at: 10)]
        XCTAssertEqual(F.state(early, at: 11)?.status, .revoked)
        // The transactions projection: the revocation in force once everything has taken effect, with evidence.
        let record = SubscriptionFold(key: F.key, facts: again).transaction("1000")
        XCTAssertEqual(record?.revocationDate, F.d(40))
        XCTAssertEqual(record?.refundSignedDate, F.d(40))
        XCTAssertEqual(record?.refundReversedSignedDate, F.d(30))
        XCTAssertEqual(record?.revocationType, "REFUND_FULL")
        XCTAssertNil(SubscriptionFold(key: F.key, facts: facts).transaction("1000")?.revocationDate, "reversed")
        XCTAssertEqual(SubscriptionFold(key: F.key, facts: facts).transaction("1000")?.refundSignedDate, F.d(22), "evidence kept")
    }

    func testAFutureRevocationOrEarlySignedRenewalBoundsHowLongAStoredStateHolds() throws {
        let facts = [F.tx("1000", from: 0, to: 30), F.renewal(signed: 0), F.tx("1001", from: 30, to: 60, signed: 29.75),
                     F.renewal(signed: 29.75), F.revocation("1001", at: 45, signed: 29.8)]
        let at29 = try XCTUnwrap(F.state(facts, at: 29.9))
        XCTAssertEqual(at29.latestTransactionId, "1000")
        XCTAssertEqual(at29.validUntil, F.d(30), "the early-signed renewal takes effect at its purchaseDate")
        XCTAssertTrue(at29.needsRefold(at: F.d(30)))
        XCTAssertFalse(at29.needsRefold(at: F.d(29.99)))
        let at40 = try XCTUnwrap(F.state(facts, at: 40))
        XCTAssertEqual(at40.validUntil, F.d(45))
        XCTAssertEqual(F.state(facts, at: 46)?.status, .revoked)
        XCTAssertNil(F.state(facts, at: 46)?.validUntil, "nothing known changes it any more but time")
        // Before validUntil, re-evaluating the stored state is the same as folding again.
        for t in stride(from: 40.0, to: 45.0, by: 0.5) {
            XCTAssertEqual(at40.reevaluated(at: F.d(t)), F.state(facts, at: t), "day \(t)")
        }
    }

    func testStatusRulesAtTheirEdges() {
        let e = F.d(30)
        func status(_ t: EpochMillis, type: String? = ProductType.autoRenewable, revoked: EpochMillis? = nil, expires: EpochMillis? = e,
                    grace: EpochMillis? = nil, retry: Bool = false) -> SubscriptionStatus {
            SubscriptionFold.status(productType: type, revokedAt: revoked, expires: expires, gracePeriodExpiresDate: grace,
                                    isInBillingRetryPeriod: retry, asOf: t)
        }
        XCTAssertEqual(status(e - 1), .active)
        XCTAssertEqual(status(e), .expired, "the period ends at expiresDate")
        XCTAssertEqual(status(e, grace: F.d(46), retry: true), .gracePeriod)
        XCTAssertEqual(status(F.d(46), grace: F.d(46), retry: true), .billingRetry, "grace ended, retry goes on")
        XCTAssertEqual(status(e, grace: e - 1, retry: true), .billingRetry, "a grace end before expiry grants nothing")
        // apple.md §5 (forum 749813): right after a trial a grace-period failure can say isInBillingRetryPeriod=false.
        XCTAssertEqual(status(e, grace: F.d(46), retry: false), .gracePeriod)
        XCTAssertEqual(status(F.d(46), grace: F.d(46), retry: false), .expired)
        XCTAssertEqual(status(e + SubscriptionFold.billingRetryLimit - 1, retry: true), .billingRetry)
        XCTAssertEqual(status(e + SubscriptionFold.billingRetryLimit, retry: true), .expired, "Apple retries at most 60 days")
        XCTAssertEqual(status(.max, expires: .max - 1, retry: true), .billingRetry, "no overflow near the end of time")
        XCTAssertEqual(status(e - 1, revoked: e - 2), .revoked)
        XCTAssertEqual(status(e - 3, revoked: e - 2), .active, "a revocation not yet in effect")
        XCTAssertEqual(status(.max, type: ProductType.nonConsumable, expires: nil), .active)
        XCTAssertEqual(status(0, type: ProductType.nonConsumable, revoked: 0, expires: nil), .revoked)
        XCTAssertEqual(status(0, type: ProductType.consumable, expires: nil), .purchased)
        XCTAssertEqual(status(0, type: ProductType.nonRenewing, expires: nil), .purchased)
        XCTAssertEqual(status(0, type: nil, expires: nil), .expired, "a subscription with no expiry known grants nothing")
        XCTAssertEqual(SubscriptionStatus.allCases.filter(\.isEntitled), [.active, .gracePeriod])
        XCTAssertEqual(SubscriptionStatus.allCases.map(\.appleStatus), [1, 4, 3, 2, 5, 2])
    }

    func testTheCustomerIsTheLatestTieElseTheTokenElseNobody() {
        var facts = F.renewedTwice()
        XCTAssertEqual(F.state(facts, at: 10)?.customerId, F.customer)
        XCTAssertEqual(F.state(facts, at: 10)?.customerSource, .appAccountToken)
        facts += [F.tie("app-user-7", recorded: 20, position: 50)]
        let tied = F.state(facts, at: 25)
        XCTAssertEqual(tied?.customerId, "app-user-7")
        XCTAssertEqual(tied?.customerSource, .tie)
        XCTAssertEqual(tied?.implicitCustomerId, F.customer, "the answer says whom the tie overrides")
        XCTAssertEqual(F.state(facts, at: 15)?.customerId, F.customer, "a tie counts from when it was recorded")
        // Two ties recorded at the same instant: the later position wins, in any fold order.
        let same = facts + [F.tie("app-user-8", recorded: 20, position: 51)]
        XCTAssertEqual(F.state(same, at: 25)?.customerId, "app-user-8")
        XCTAssertEqual(F.state(same.reversed(), at: 25)?.customerId, "app-user-8")
        // Untied: back to the token.
        let untied = same + [F.tie(nil, recorded: 30, position: 60)]
        XCTAssertEqual(F.state(untied, at: 35)?.customerId, F.customer)
        XCTAssertEqual(F.state(untied, at: 35)?.customerSource, .appAccountToken)
        XCTAssertNil(F.state(untied, at: 35)?.implicitCustomerId)
        // A tie to the same customer the token names overrides nobody.
        XCTAssertNil(F.state(F.renewedTwice() + [F.tie(F.customer, recorded: 1, position: 9)], at: 10)?.implicitCustomerId)
        // No token on the transaction in effect: the renewal info's, then any earlier transaction's.
        let quiet = [F.tx("1000", from: 0, to: 30, token: nil), F.renewal(signed: 0, token: "from-renewal")]
        XCTAssertEqual(F.state(quiet, at: 10)?.customerId, "from-renewal")
        let older = [F.tx("1000", from: 0, to: 30), F.tx("1001", from: 30, to: 60, token: nil)]
        XCTAssertEqual(F.state(older, at: 40)?.customerId, F.customer)
        XCTAssertNil(F.state([F.tx("1000", from: 0, to: 30, token: nil)], at: 10)?.customerId)
    }

    func testFactsOfAnotherSubscriptionAreIgnoredByAFold() {
        let sandbox = SubscriptionKey(environment: "Sandbox", originalTransactionId: F.otid)
        let foreign = [F.tx("1000", F.premium, from: 0, to: 365, key: sandbox), F.renewal(signed: 5, auto: 0, key: sandbox)]
        let facts = F.renewedTwice() + foreign
        XCTAssertEqual(F.state(facts, at: 10)?.productId, F.monthly)
        XCTAssertEqual(F.state(facts, at: 10)?.autoRenewStatus, 1)
        XCTAssertEqual(F.state(facts, at: 10)?.environment, "Production")
        let projection = SubscriptionProjection(facts: facts)
        XCTAssertEqual(projection.subscriptions.keys.sorted(), [F.key, sandbox])
        let view = projection.view(at: F.d(10))
        XCTAssertEqual(view.entitlements(catalog: F.catalog, customerId: F.customer, environment: "Production").map(\.entitlement), ["basic"])
        XCTAssertEqual(view.entitlements(catalog: F.catalog, customerId: F.customer, environment: "Sandbox").map(\.entitlement),
                       ["basic", "premium"])
        XCTAssertEqual(Set(view.entitlements(catalog: F.catalog, customerId: F.customer).map(\.environment)), ["Production", "Sandbox"])
    }

    func testEntitlementsGoToTheirCustomerOnlyAndOnlyWhileEntitled() {
        func other(_ otid: String, token: String?) -> [Fact] {
            let key = SubscriptionKey(environment: "Production", originalTransactionId: otid)
            return [F.tx(otid, F.premium, from: 0, to: 30, token: token, key: key), F.renewal(signed: 0, product: F.premium, key: key)]
        }
        let facts = F.renewedTwice() + other("2000", token: "someone-else") + other("3000", token: nil)
        let view = SubscriptionProjection(facts: facts).view(at: F.d(10))
        XCTAssertEqual(view.entitlements(catalog: F.catalog, customerId: F.customer).map(\.entitlement), ["basic"])
        XCTAssertEqual(view.entitlements(catalog: F.catalog, customerId: "someone-else").map(\.entitlement), ["basic", "premium"])
        XCTAssertEqual(view.entitlements(catalog: F.catalog).count, 3, "a subscription with no customer grants nothing")
        XCTAssertEqual(view.entitlements(catalog: F.catalog, customerId: "nobody"), [])
        XCTAssertEqual(view.entitlements(catalog: ProductCatalog(products: [:])), [], "unmapped products grant nothing")
        XCTAssertEqual(view.entitlements(catalog: .productIds, customerId: F.customer).map(\.entitlement), [F.monthly])
        XCTAssertEqual(SubscriptionProjection(facts: facts).view(at: F.d(95)).entitlements(catalog: F.catalog), [], "all expired")
        XCTAssertEqual(view.states.map(\.originalTransactionId), ["1000", "2000", "3000"])
    }

    func testDuplicatesAndArrivalOrderChangeNothingIncludingExactTies() {
        // Two renewal infos signed at the same instant saying different things: the winner is
        // chosen by content, so every order agrees.
        let a = F.renewal(signed: 10, auto: 0), b = F.renewal(signed: 10, auto: 1, next: F.premium)
        let base = F.renewedTwice() + [a, b, F.revocation("1001", at: 40), F.reversal("1001", signed: 40)]
        var rng = SplitMix64(seed: 7)
        let reference = (0...100).map { F.state(base, at: Double($0)) }
        for _ in 0..<50 {
            var shuffled = base + [rng.pick(base), rng.pick(base)]
            shuffled.shuffle(using: &rng)
            for (i, t) in (0...100).enumerated() {
                XCTAssertEqual(F.state(shuffled, at: Double(t)), reference[i], "day \(t)")
            }
        }
        XCTAssertEqual(reference[45]?.status, .active, "refund and reversal signed at the same instant: not revoked")
    }

    func testHostileFactsNeitherCrashNorBecomeOrderDependent() {
        var weird = F.renewedTwice()
        weird.append(F.tx("x", from: 0, to: nil))                        // no expiry
        weird.append(F.tx("y", from: -1_000_000, to: 1e8))              // far past, far future
        weird.append(F.renewal(signed: 1e9, auto: Int.max, grace: -5))  // absurd renewal info
        weird.append(F.revocation("nonexistent", at: 5))
        weird.append(F.reversal("y", signed: -3))
        weird.append(Fact(subscription: F.key, kind: .transaction, origin: .appleV2, signedAt: .max, effectiveAt: .min))  // no body
        weird.append(Fact(subscription: F.key, kind: .renewal, origin: .appleV2, signedAt: .min))
        weird.append(Fact(subscription: F.key, kind: .unreadable, origin: .appleV2, signedAt: 0, detail: #"{"reason":"x"}"#))
        for t in [EpochMillis.min, -1, 0, F.d(10), F.d(1e6), .max] {
            let a = SubscriptionFold(key: F.key, facts: weird).state(at: t)
            let b = SubscriptionFold(key: F.key, facts: weird.reversed()).state(at: t)
            XCTAssertEqual(a, b, "at \(t)")
        }
        XCTAssertEqual(SubscriptionFold(key: F.key, facts: weird).transactions.count, 5)
    }

    func testOneTimePurchasesAreNeverExpiredSubscriptions() {
        let life = [F.tx("1000", "com.example.lifetime", from: 0, to: nil, type: ProductType.nonConsumable, message: "ONE_TIME_CHARGE")]
        XCTAssertEqual(F.state(life, at: 10_000)?.status, .active)
        XCTAssertEqual(SubscriptionProjection(facts: life).view(at: F.d(10_000))
            .entitlements(catalog: .productIds, customerId: F.customer).map(\.entitlement), ["com.example.lifetime"])
        XCTAssertEqual(F.state(life + [F.revocation("1000", at: 50)], at: 60)?.status, .revoked)
        let coins = [F.tx("1000", "com.example.coins", from: 0, to: nil, type: ProductType.consumable, message: "ONE_TIME_CHARGE")]
        XCTAssertEqual(F.state(coins, at: 1)?.status, .purchased)
        XCTAssertEqual(SubscriptionProjection(facts: coins).view(at: F.d(1)).entitlements(catalog: .productIds), [])
    }

    func testTimeTravelRecordedByOnlyFoldsWhatWasRecorded() {
        var facts: [Fact] = []
        for (i, f) in F.renewedTwice().enumerated() {
            // Recorded one day after signing.
            facts.append(f.placed(position: Int64(i + 1), ordinal: 0, recordedAt: f.signedAt + F.day, streamId: F.otid))
        }
        let knownAt40 = SubscriptionProjection.view(at: F.d(65), recordedBy: F.d(40), facts: facts).subscription(F.key)
        XCTAssertEqual(knownAt40?.status, .expired, "on day 40 the ledger knew periods up to day 60 only")
        XCTAssertEqual(knownAt40?.expiresDate, F.d(60))
        let knownNow = SubscriptionProjection.view(at: F.d(65), facts: facts).subscription(F.key)
        XCTAssertEqual(knownNow?.status, .active)
        XCTAssertNil(SubscriptionProjection.view(at: F.d(65), recordedBy: F.d(0.5), facts: facts).subscription(F.key),
                     "nothing recorded yet")
    }
}

import XCTest
@testable import LedgerCore

/// WeChat's answer to `query_subscribe_contract` as the fold uses it: an unsigned statement timed
/// when the ledger asked (minus WeChat's 10 s lag), overriding every push statement older than it
/// and none newer; a period end no push states is a period the ledger missed. Expected states are
/// written from those rules, and every arrival order gives them.
final class WeChatContractAnswerTests: XCTestCase {
    typealias W = WX
    let key = SubscriptionKey(environment: "Production", originalTransactionId: WX.otid)

    func answer(askedAt: EpochMillis, state: String, auto: Int64, renewal: EpochMillis, position: Int64) -> RecordedEvent {
        let answer: JSONValue = .object([
            "errcode": 0, "errmsg": "ok", "authorization_state": .string(state),
            "apple_subscription_info": .object(["original_transaction_id": .string(W.otid), "auto_renew_status": .integer(auto),
                                                "renewal_date": .integer(renewal)]),
        ])
        let payload = JSONValue.object(["api": "query_subscribe_contract", "asked_at": .integer(askedAt), "openid": .string(W.openId),
                                        "product_id": .string(W.product), "answer": answer]).canonicalJSON()
        return RecordedEvent(position: position, recordedAt: askedAt, event: NewEvent(
            streamId: W.otid, dedupeKey: "api:\(position)", source: .wechat, type: XPayEventName.contractQueryAnswer,
            environment: "Production", signedAt: askedAt, payload: payload, raw: answer.canonicalJSON()))
    }

    /// The facts in several arrival orders, with duplicates: (the fold, the facts it was given).
    func folds(_ facts: [Fact]) -> [(SubscriptionFold, [Fact])] {
        [facts, facts.reversed(), facts.shuffled(), facts + facts.prefix(2)].map { (SubscriptionFold(key: key, facts: $0), $0) }
    }

    func testAnAnswerOverridesOlderPushesAndNoNewerOne() throws {
        // Signed day 0 → 30, paid; the unsigning on day 10 never arrived; asked on day 12.
        let pushes = [W.event(W.signing(signed: 0, renewal: 30), position: 1),
                      W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2)]
        let asked = W.d(12)
        let facts = W.facts(pushes + [answer(askedAt: asked, state: "TERMINATED", auto: 0, renewal: W.d(30), position: 3)])
        let answerFact = try XCTUnwrap(facts.first { $0.message == XPayEventName.contractQueryAnswer })
        XCTAssertEqual(answerFact.signedAt, asked - 10_000, "WeChat's state trails Apple's by up to 10 s")
        XCTAssertEqual(answerFact.renewal?.autoRenewStatus, 0)
        for (fold, given) in folds(facts) {
            XCTAssertEqual(fold.state(at: W.d(5))?.autoRenewStatus, 1, "before the asking: what the pushes said")
            XCTAssertEqual(fold.state(at: W.d(13))?.autoRenewStatus, 0, "after: WeChat's answer")
            XCTAssertEqual(fold.state(at: W.d(13))?.status, .active, "paid until day 30")
            XCTAssertEqual(fold.state(at: W.d(31))?.status, .expired)
            XCTAssertEqual(WeChatContractState.of(openId: W.openId, productId: W.product, facts: given).authorizationState, .terminated)
        }
        // A push newer than the answer wins: the user signs again on day 31.
        let later = facts + W.facts([W.event(W.signing(signed: 31, renewal: 61), position: 4)])
        for (fold, given) in folds(later) {
            XCTAssertEqual(fold.state(at: W.d(32))?.autoRenewStatus, 1)
            XCTAssertEqual(fold.state(at: W.d(32))?.status, .active)
            XCTAssertEqual(WeChatContractState.of(openId: W.openId, productId: W.product, facts: given).authorizationState, .signed)
        }
        // A delivery re-pushed after the answer states an old payment: older than the answer.
        var rePush = W.deliver(order: "O1", paid: 0.0001, renewal: 30).objectValue!
        rePush["CreateTime"] = .integer(W.sec(20))
        let rePushed = facts + W.facts([W.event(.object(rePush), position: 5)])
        for (fold, _) in folds(rePushed) {
            XCTAssertEqual(fold.state(at: W.d(21))?.autoRenewStatus, 0)
        }
    }

    /// An unsigning pushed 5 s before the ledger asked may not be in WeChat's answer yet (Apple's
    /// state trails by up to 10 s): a SIGNED answer does not undo it.
    func testAStaleAnswerDoesNotUndoAnUnsigningSecondsBeforeIt() {
        let unsigned = W.d(10)
        let facts = W.facts([
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2),
            W.event(W.unsigning(unsigned: 10, renewal: 30), position: 3),
            answer(askedAt: unsigned + 5_000, state: "SIGNED", auto: 1, renewal: W.d(30), position: 4),
        ])
        for (fold, _) in folds(facts) {
            XCTAssertEqual(fold.state(at: W.d(11))?.autoRenewStatus, 0)
        }
    }

    /// A period end no push states is a renewal the ledger missed: a period from the end of the
    /// one before it; UNBINDUSER states nothing.
    func testAnAnswerNamingAPeriodNoPushStatesOpensIt() {
        let pushes = [W.event(W.signing(signed: 0, renewal: 30), position: 1),
                      W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2)]
        let facts = W.facts(pushes + [answer(askedAt: W.d(40), state: "SIGNED", auto: 1, renewal: W.d(60), position: 3)])
        for (fold, _) in folds(facts) {
            XCTAssertEqual(fold.state(at: W.d(35))?.status, .active, "paid from day 30, where O1 ended")
            XCTAssertEqual(fold.state(at: W.d(35))?.expiresDate, W.d(60))
            XCTAssertEqual(fold.state(at: W.d(29))?.latestTransactionId, "O1")
            XCTAssertEqual(fold.state(at: W.d(61))?.status, .expired)
        }
        // The answer's end equals a pushed one: nothing new is opened.
        let same = W.facts(pushes + [answer(askedAt: W.d(20), state: "SIGNED", auto: 1, renewal: W.d(30), position: 3)])
        XCTAssertEqual(SubscriptionFold(key: key, facts: same).state(at: W.d(31))?.status, .expired)
        // UNBINDUSER: no facts at all (evidence only).
        let unbound = answer(askedAt: W.d(20), state: "UNBINDUSER", auto: 0, renewal: 0, position: 9)
        XCTAssertEqual(FactDecoder.facts(of: unbound), [])
    }
}

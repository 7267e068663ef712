import XCTest
@testable import LedgerCore

/// `GET /v1/wechat/contracts?openid=&product_id=`: query_subscribe_contract's answer (seed 000
/// Step 6) from the ledger's facts.
final class WeChatContractStateTests: XCTestCase {
    typealias W = WX

    func contract(_ events: [RecordedEvent], openId: String = WX.openId, product: String = WX.product) -> WeChatContractState {
        WeChatContractState.of(openId: openId, productId: product, facts: W.facts(events))
    }

    func testUnknownCustomerOrProductIsUnbindUserWithNoInfo() throws {
        let events = [W.event(W.signing(signed: 0, renewal: 30), position: 1)]
        XCTAssertEqual(contract(events, openId: "oSomeoneElse"), WeChatContractState(authorizationState: .unbindUser))
        XCTAssertEqual(contract(events, product: "other_product").authorizationState, .unbindUser)
        XCTAssertEqual(contract([]).authorizationState, .unbindUser)
        let body = try JSONSerialization.jsonObject(with: contract([]).responseJSON()) as? [String: Any]
        XCTAssertEqual(body?["authorization_state"] as? String, "UNBINDUSER")
        XCTAssertEqual(body?["errcode"] as? Int, 0)
        XCTAssertNil(body?["apple_subscription_info"])
    }

    func testSignedThenTerminatedWithTheAppleSubscriptionInfoOfTheLatestPeriod() throws {
        var events = [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2),
            W.event(W.deliver(order: "O2", paid: 30, renewal: 60), position: 3),
        ]
        let signed = contract(events)
        XCTAssertEqual(signed.authorizationState, .signed)
        XCTAssertEqual(signed.appleSubscriptionInfo, .init(originalTransactionId: W.otid, autoRenewStatus: 1,
                                                           recentSubscriptionStartDate: W.d(0), renewalDate: W.d(60),
                                                           autoRenewStatusBasis: "stated"))
        events.append(W.event(W.unsigning(unsigned: 40, renewal: 60), position: 4))
        let terminated = contract(events)
        XCTAssertEqual(terminated.authorizationState, .terminated)
        XCTAssertEqual(terminated.appleSubscriptionInfo?.autoRenewStatus, 0)
        XCTAssertEqual(terminated.appleSubscriptionInfo?.renewalDate, W.d(60))
        XCTAssertEqual(contract(events.reversed()), terminated)
        // The body WeChat's API would send (sorted keys, so byte-comparable).
        XCTAssertEqual(String(decoding: terminated.responseJSON(), as: UTF8.self),
                       #"{"apple_subscription_info":{"auto_renew_status":0,"auto_renew_status_basis":"stated","original_transaction_id":"2000001147426510","#
                       + #""recent_subscription_start_date":\#(W.d(0)),"renewal_date":\#(W.d(60))},"#
                       + #""authorization_state":"TERMINATED","errcode":0,"errmsg":"ok"}"#)
        let decoded = try JSONDecoder().decode(WeChatContractState.self, from: JSONEncoder().encode(terminated))
        XCTAssertEqual(decoded, terminated)
        XCTAssertTrue(String(decoding: try JSONEncoder().encode(terminated), as: UTF8.self).contains("\"authorization_state\""))
    }

    func testADeliveryRePushedAfterTheUnsigningKeepsItTerminated() {
        // No WeChatPayInfo (Apple payments): the re-push is timed by its new CreateTime.
        let events = [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0, renewal: 30, payInfo: false), position: 2),
            W.event(W.unsigning(unsigned: 10, renewal: 30), position: 3),
            W.event(W.deliver(order: "O1", paid: 12, renewal: 30, payInfo: false), position: 4),
        ]
        XCTAssertEqual(contract(events).authorizationState, .terminated)
        XCTAssertEqual(contract(events.reversed()).authorizationState, .terminated)
    }

    func testANewContractAfterALapseWinsOverTheOldTerminatedOne() {
        let events = [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.unsigning(unsigned: 10, renewal: 30), position: 2),
            // Signed again on day 100 under another Apple account: another stream.
            W.event(W.signing(signed: 100, renewal: 130, otid: "2000009999999999"), position: 3, stream: "2000009999999999"),
        ]
        let c = contract(events)
        XCTAssertEqual(c.authorizationState, .signed)
        XCTAssertEqual(c.appleSubscriptionInfo?.originalTransactionId, "2000009999999999")
        XCTAssertEqual(contract(events.reversed()), c)
        // Signed again under the same account (same OriginalTransactionId, seed 000 §4.2): the same stream.
        let same = [events[0], events[1], W.event(W.signing(signed: 100, renewal: 130), position: 3)]
        XCTAssertEqual(contract(same).authorizationState, .signed)
        XCTAssertEqual(contract(same).appleSubscriptionInfo?.renewalDate, W.d(130))
        XCTAssertEqual(contract(same.reversed()), contract(same))
        // recent_subscription_start_date ignores lapses of 60 days or less (seed 000 §6.3): 70 days is a new run.
        XCTAssertEqual(contract(same).appleSubscriptionInfo?.recentSubscriptionStartDate, W.d(100))
        let soon = [events[0], events[1], W.event(W.signing(signed: 40, renewal: 70), position: 3)]
        XCTAssertEqual(contract(soon).appleSubscriptionInfo?.recentSubscriptionStartDate, W.d(0), "a 10-day lapse continues the run")
    }

    func testOtherCustomersAndAppleFactsInTheInputAreIgnored() {
        let events = [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.signing(signed: 5, renewal: 35, otid: "2000000000000077", openId: "oOther"), position: 2,
                    stream: "2000000000000077"),
        ]
        var facts = W.facts(events)
        facts += FoldFixture.renewedTwice()
        let c = WeChatContractState.of(openId: W.openId, productId: W.product, facts: facts)
        XCTAssertEqual(c.appleSubscriptionInfo?.originalTransactionId, W.otid)
        XCTAssertEqual(c.appleSubscriptionInfo?.renewalDate, W.d(30))
        XCTAssertEqual(WeChatContractState.of(openId: "oOther", productId: W.product, facts: facts).appleSubscriptionInfo?.originalTransactionId,
                       "2000000000000077")
    }
}

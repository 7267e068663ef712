import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// A WeChat free trial (seed 000 §2 and §3.3: `activitySellingPrice` 0 — the first period costs 0,
/// renewals the original price; §4.3: `xpay_goods_deliver_notify` after every successful charge,
/// extending the membership to the `RenewalDate` it states; Apple payments carry no PaidTime).
/// States written by hand from the seed, through HTTP in every order and every push format.
final class WeChatTrialTests: XCTestCase {
    let side = WeChatSide()
    static let day: EpochMillis = 86_400_000
    let product = "vip_monthly"

    /// Signed with a 7-day free trial at t0 (RenewalDate t0 + 7 d), then two paid monthly renewals
    /// without PaidTime: D1 sent at the trial's end (RenewalDate + 30 d), D2 a month later
    /// (+ 30 d). By the seed:
    /// - inside the trial: active, on the signing, to the trial's end;
    /// - inside each paid month: active on that charge, to its RenewalDate — the trial's 7 days
    ///   are not the product's period, so no paid month is cut short;
    /// - entitled throughout, never expired in between.
    func testAFreeTrialDoesNotCutThePaidMonthsShortInEveryOrderAndFormat() async throws {
        let now = WeChatSide.nowSeconds() * 1000
        let t0 = now - 70 * Self.day
        let trialEnd = t0 + 7 * Self.day, r1 = trialEnd + 30 * Self.day, r2 = r1 + 30 * Self.day
        try await withService(environment: WeChatSide.environment) { h in
            var i = 0
            for mode in WeChatSide.Mode.allCases {
                for order in WeChatEveryOrderTests.permutations([0, 1, 2]) {
                    i += 1
                    let otid = String(7_350_000_000_000_000 + i), openId = "oTrial\(i)"
                    let messages = [
                        WeChatSide.signing(otid: otid, openId: openId, product: product, signed: t0, renewal: trialEnd),
                        WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "TR\(i)-O1", paid: nil,
                                           create: trialEnd + 60_000, renewal: r1),
                        WeChatSide.deliver(otid: otid, openId: openId, product: product, order: "TR\(i)-O2", paid: nil,
                                           create: r1 + 60_000, renewal: r2),
                    ]
                    for k in order { _ = try await side.push(h, messages[k], mode) }
                    let label = "\(mode) \(order)"
                    let trial = try await h.state(otid, at: t0 + 3 * Self.day)
                    XCTAssertEqual(trial?["status"] as? String, "active", "inside the trial: \(label)")
                    XCTAssertEqual((trial?["expiresDate"] as? NSNumber)?.int64Value, trialEnd, label)
                    for (at, tx, end) in [(trialEnd + 2 * Self.day, "TR\(i)-O1", r1), (trialEnd + 25 * Self.day, "TR\(i)-O1", r1),
                                          (r1 + 2 * Self.day, "TR\(i)-O2", r2), (r1 + 25 * Self.day, "TR\(i)-O2", r2)] {
                        let paid = try await h.state(otid, at: at)
                        XCTAssertEqual(paid?["status"] as? String, "active", "inside a paid month (day \((at - t0) / Self.day)): \(label)")
                        XCTAssertEqual(paid?["latestTransactionId"] as? String, tx, label)
                        XCTAssertEqual((paid?["expiresDate"] as? NSNumber)?.int64Value, end, label)
                        let entitled = try await h.entitlements(openId, at: at)
                        XCTAssertFalse(entitled.isEmpty, "entitled in a paid month: \(label)")
                    }
                }
            }
        }
    }
}

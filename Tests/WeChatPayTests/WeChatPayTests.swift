import XCTest
@testable import WeChatPay

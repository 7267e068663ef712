import XCTest
@testable import AppStore

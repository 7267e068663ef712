import XCTest
@testable import LedgerStore

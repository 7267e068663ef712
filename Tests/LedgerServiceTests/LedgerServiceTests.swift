import XCTest
@testable import LedgerService

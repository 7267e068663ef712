import XCTest
@testable import Postgres

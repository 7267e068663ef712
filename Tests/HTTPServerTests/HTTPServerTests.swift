import XCTest
@testable import HTTPServer

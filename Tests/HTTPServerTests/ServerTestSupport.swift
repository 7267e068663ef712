import Foundation
import HTTPServer
import Synchronization
import XCTest

/// Starts servers on ephemeral ports and guarantees each is shut down when the test ends.
class ServerTestCase: XCTestCase {
    private var servers: [HTTPServer] = []

    override func tearDown() {
        for server in servers { blocking { await server.shutdown(gracePeriod: .seconds(2)) } }
        servers = []
        super.tearDown()
    }

    func serve(
        _ router: Router, configure: (inout HTTPServerConfiguration) -> Void = { _ in }
    ) throws -> (server: HTTPServer, port: Int) {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2)
        configure(&configuration)
        let server = HTTPServer(configuration: configuration, router: router)
        try server.start()
        servers.append(server)
        let port = try XCTUnwrap(server.port)
        XCTAssertGreaterThan(port, 0)
        return (server, port)
    }

    /// Runs async work from a synchronous test. Tests stay synchronous so their blocking socket
    /// calls never occupy the cooperative threads the server's handlers run on.
    func blocking(_ work: @escaping @Sendable () async -> Void) {
        let done = DispatchSemaphore(value: 0)
        Task {
            await work()
            done.signal()
        }
        done.wait()
    }
}

/// A counter/flag shared between a handler and the test thread.
final class Box<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    init(_ value: Value) { storage = Mutex(value) }
    var value: Value { storage.withLock { $0 } }
    func update(_ change: (inout Value) -> Void) { storage.withLock { change(&$0) } }
}

func json(_ object: [String: Any]) -> HTTPResponse {
    .json(200, (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data())
}

func decode(_ body: Data) -> [String: Any] {
    ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any]) ?? [:]
}

import AppStore
import Foundation
import HTTPServer
import LedgerCore
import Synchronization

/// A local verifyReceipt for tests: `POST /production/verifyReceipt` and `POST
/// /sandbox/verifyReceipt` on loopback (`VerifyReceiptConfiguration(baseURL:)` points at both),
/// answering like Apple (reference/apple.md §4.3): a Sandbox receipt sent to Production is 21007,
/// a Production receipt sent to Sandbox 21008, a wrong shared secret 21004, receipt data that is
/// not a known receipt 21002; status and body in JSON with HTTP 200. `enqueueStatus` scripts
/// Apple's other statuses (21005, 21100 with is-retryable, …) and `enqueueHTTP` HTTP failures.
public final class FakeVerifyReceipt: Sendable {
    /// One receipt Apple knows: its environment and the answer's members besides `status` and
    /// `environment` (`receipt`, `latest_receipt_info`, `pending_renewal_info`, `latest_receipt`).
    public struct Receipt: Sendable {
        public var environment: AppStoreEnvironment
        public var answer: JSONValue

        public init(environment: AppStoreEnvironment, answer: JSONValue) {
            self.environment = environment
            self.answer = answer
        }
    }

    /// What the fake saw of one request.
    public struct Seen: Sendable {
        public var environment: AppStoreEnvironment
        public var receiptData: String?
        public var password: String?
        public var excludeOldTransactions: Bool?
    }

    struct State: Sendable {
        var receipts: [String: Receipt] = [:]
        var statuses: [(status: Int, retryable: Bool?)] = []
        var httpFailures: [Int] = []
        var seen: [Seen] = []
    }

    /// nil: any password (or none) is accepted, as Apple does for receipts without subscriptions.
    public let sharedSecret: String?
    public let now: @Sendable () -> Int64
    private let state = Mutex(State())
    private let server: HTTPServer

    public init(sharedSecret: String?, now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }) {
        self.sharedSecret = sharedSecret
        self.now = now
        var router = Router()
        let box = Box()
        for environment in AppStoreEnvironment.allCases {
            router.add("POST", "/\(environment.rawValue.lowercased())/verifyReceipt") { request in
                guard let fake = box.fake else { return HTTPResponse(status: 503) }
                return fake.answer(request, at: environment)
            }
        }
        server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2), router: router)
        box.fake = self
    }

    public func start() throws { try server.start() }
    public func shutdown() async { await server.shutdown(gracePeriod: .seconds(2)) }

    /// The base for `VerifyReceiptConfiguration(baseURL:)`.
    /// Plain http on loopback: the client needs `allowsPlainHTTPLoopback: true` (or the service
    /// `LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK=true`); the outbound client refuses it otherwise.
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port ?? 0)")! }

    public func register(receiptData: String, _ receipt: Receipt) { state.withLock { $0.receipts[receiptData] = receipt } }

    /// The next request is answered with `status` (and `is-retryable` when given) instead.
    public func enqueueStatus(_ status: Int, isRetryable: Bool? = nil, times: Int = 1) {
        state.withLock { for _ in 0..<times { $0.statuses.append((status, isRetryable)) } }
    }

    /// The next request is answered with HTTP `status` and no body.
    public func enqueueHTTP(_ status: Int, times: Int = 1) { state.withLock { for _ in 0..<times { $0.httpFailures.append(status) } } }

    public var requests: [Seen] { state.withLock { $0.seen } }

    func answer(_ request: HTTPRequest, at environment: AppStoreEnvironment) -> HTTPResponse {
        let body = (try? JSONDecoder().decode(JSONValue.self, from: request.body))?.objectValue
        let data = body?["receipt-data"]?.text
        let password = body?["password"]?.text
        var exclude: Bool?
        if case .bool(let b)? = body?["exclude-old-transactions"] { exclude = b }
        let (http, scripted, receipt) = state.withLock { s -> (Int?, (Int, Bool?)?, Receipt?) in
            s.seen.append(Seen(environment: environment, receiptData: data, password: password, excludeOldTransactions: exclude))
            if !s.httpFailures.isEmpty { return (s.httpFailures.removeFirst(), nil, nil) }
            if !s.statuses.isEmpty { return (nil, s.statuses.removeFirst(), nil) }
            return (nil, nil, data.flatMap { s.receipts[$0] })
        }
        if let http { return HTTPResponse(status: http) }
        if let (status, retryable) = scripted {
            var o: [String: JSONValue] = ["status": .integer(Int64(status)), "environment": .string(environment.rawValue)]
            if let retryable { o["is-retryable"] = .bool(retryable) }
            return Self.json(.object(o))
        }
        guard body != nil else { return Self.json(.object(["status": .integer(21000)])) }
        guard let receipt else { return Self.json(.object(["status": .integer(21002), "environment": .string(environment.rawValue)])) }
        if receipt.environment != environment {
            return Self.json(.object(["status": .integer(environment == .production ? 21007 : 21008), "environment": .string(environment.rawValue)]))
        }
        if let sharedSecret, password != sharedSecret {
            return Self.json(.object(["status": .integer(21004), "environment": .string(environment.rawValue)]))
        }
        var o = receipt.answer.objectValue ?? [:]
        o["status"] = .integer(0)
        o["environment"] = .string(environment.rawValue)
        // Apple stamps its answer time into the receipt: two calls never give the same bytes.
        if var r = o["receipt"]?.objectValue {
            let t = now()
            r["request_date_ms"] = .string(String(t))
            r["request_date"] = .string("\(t / 1000) Etc/GMT")
            o["receipt"] = .object(r)
        }
        return Self.json(.object(o))
    }

    static func json(_ value: JSONValue) -> HTTPResponse { .json(200, value.canonicalJSON()) }
}

private final class Box: @unchecked Sendable {
    weak var fake: FakeVerifyReceipt?
}

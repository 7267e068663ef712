import Foundation
import LedgerMetrics
import Outbound

/// The App Store Server API for one environment (reference/appstore-server-api.md): a fresh
/// ES256 bearer token per request, bounded retries with backoff on 429/5xx (and Apple's retryable
/// 404 twins) honouring `Retry-After`, Apple's `errorCode`/`errorMessage` decoded into
/// `AppStoreServerAPIError`, and paging that walks every page.
///
/// It returns Apple's answers as received (`body`) and decoded, but verifies no signature: turn
/// answers into ledger events with `AppleAPIAnswerEvents`, which verifies every signed item.
public struct AppStoreServerAPIClient: Sendable {
    public let configuration: AppStoreServerAPIConfiguration
    public let environment: AppStoreEnvironment
    /// The one outbound client, target `apple_api` (https only; redirects never followed).
    let http: OutboundClient

    public init(configuration: AppStoreServerAPIConfiguration, environment: AppStoreEnvironment, metrics: MetricsRegistry? = nil) {
        self.configuration = configuration
        self.environment = environment
        // Retry-After delays are read against the retry policy's clock (the one the waits use).
        http = OutboundClient(target: configuration.outboundTarget(for: environment), metrics: metrics, clock: configuration.retry.now)
    }

    /// Longest walk through one paged endpoint: 10 000 pages of 20 is 200 000 notifications, far
    /// more than 180 days of one app's history; a server that never says `hasMore: false` stops here.
    public static let maxPages = 10_000

    // MARK: Get Notification History

    /// One page: `POST /inApps/v1/notifications/history[?paginationToken=]`.
    public func notificationHistoryPage(
        _ request: NotificationHistoryRequest, paginationToken: String? = nil
    ) async throws(AppStoreServerAPIError) -> NotificationHistoryResponse {
        try request.validate()
        let endpoint = "Get Notification History"
        let body = try encode(request, endpoint: endpoint)
        let response = try await perform(
            endpoint, method: "POST", path: "/inApps/v1/notifications/history",
            query: paginationToken.map { [("paginationToken", $0)] } ?? [], body: body)
        let wire: NotificationHistoryWire = try decode(response.body, endpoint: endpoint)
        let hasMore = wire.hasMore ?? false
        if hasMore, (wire.paginationToken ?? "").isEmpty {
            throw .unreadableAnswer(endpoint: endpoint, reason: "hasMore is true but there is no paginationToken")
        }
        return NotificationHistoryResponse(
            notificationHistory: wire.notificationHistory ?? [], hasMore: hasMore,
            paginationToken: wire.paginationToken, body: response.body)
    }

    /// Every page of the window, in order, each handed to `body` as it arrives (nothing is held
    /// beyond one page). When Apple says the pagination token expired (4000014/4000017), paging
    /// starts over once from the first page, so `body` must be idempotent — ingesting a
    /// notification twice stores it once. Errors: `AppStoreServerAPIError`, or what `body` throws.
    public func forEachNotificationHistoryPage(
        _ request: NotificationHistoryRequest, _ body: (NotificationHistoryResponse) async throws -> Void
    ) async throws {
        try await walk(endpoint: "Get Notification History", first: { (token: String?) async throws(AppStoreServerAPIError) in
            let page = try await notificationHistoryPage(request, paginationToken: token)
            return (page, page.hasMore ? page.paginationToken : nil)
        }, body)
    }

    /// Every item of every page.
    public func notificationHistory(_ request: NotificationHistoryRequest) async throws(AppStoreServerAPIError) -> [NotificationHistoryItem] {
        var items: [NotificationHistoryItem] = []
        do {
            try await forEachNotificationHistoryPage(request) { items += $0.notificationHistory }
        } catch let e as AppStoreServerAPIError { throw e } catch { throw .paging(endpoint: "Get Notification History", reason: "\(error)") }
        return items
    }

    // MARK: Get All Subscription Statuses

    /// `GET /inApps/v1/subscriptions/{transactionId}[?status=…]`: every subscription of the customer
    /// `transactionId` belongs to, with its latest signed transaction and renewal info.
    public func allSubscriptionStatuses(transactionId: String, status: [Int] = []) async throws(AppStoreServerAPIError) -> StatusResponse {
        let endpoint = "Get All Subscription Statuses"
        let id = try pathSegment(transactionId, "transactionId")
        let response = try await perform(
            endpoint, method: "GET", path: "/inApps/v1/subscriptions/\(id)", query: status.map { ("status", String($0)) }, body: nil)
        let wire: StatusWire = try decode(response.body, endpoint: endpoint)
        return StatusResponse(environment: wire.environment, bundleId: wire.bundleId, appAppleId: wire.appAppleId,
                              data: wire.data ?? [], body: response.body)
    }

    // MARK: Get Transaction History v2

    /// One page: `GET /inApps/v2/history/{transactionId}?revision=…` (omit `revision` first).
    public func transactionHistoryPage(
        transactionId: String, query: TransactionHistoryQuery = TransactionHistoryQuery(), revision: String? = nil
    ) async throws(AppStoreServerAPIError) -> HistoryResponse {
        let endpoint = "Get Transaction History"
        let id = try pathSegment(transactionId, "transactionId")
        var items = query.queryItems
        if let revision { items.insert(("revision", revision), at: 0) }
        let response = try await perform(endpoint, method: "GET", path: "/inApps/v2/history/\(id)", query: items, body: nil)
        let wire: HistoryWire = try decode(response.body, endpoint: endpoint)
        let hasMore = wire.hasMore ?? false
        if hasMore, (wire.revision ?? "").isEmpty {
            throw .unreadableAnswer(endpoint: endpoint, reason: "hasMore is true but there is no revision")
        }
        return HistoryResponse(revision: wire.revision, hasMore: hasMore, bundleId: wire.bundleId, appAppleId: wire.appAppleId,
                               environment: wire.environment, signedTransactions: wire.signedTransactions ?? [], body: response.body)
    }

    /// Every revision page, in order (restarts once on 4000005 invalid revision; see
    /// `forEachNotificationHistoryPage` about idempotence).
    public func forEachTransactionHistoryPage(
        transactionId: String, query: TransactionHistoryQuery = TransactionHistoryQuery(),
        _ body: (HistoryResponse) async throws -> Void
    ) async throws {
        try await walk(endpoint: "Get Transaction History", first: { (revision: String?) async throws(AppStoreServerAPIError) in
            let page = try await transactionHistoryPage(transactionId: transactionId, query: query, revision: revision)
            return (page, page.hasMore ? page.revision : nil)
        }, body)
    }

    /// Every page.
    public func transactionHistory(
        transactionId: String, query: TransactionHistoryQuery = TransactionHistoryQuery()
    ) async throws(AppStoreServerAPIError) -> [HistoryResponse] {
        var pages: [HistoryResponse] = []
        do {
            try await forEachTransactionHistoryPage(transactionId: transactionId, query: query) { pages.append($0) }
        } catch let e as AppStoreServerAPIError { throw e } catch { throw .paging(endpoint: "Get Transaction History", reason: "\(error)") }
        return pages
    }

    // MARK: Send Consumption Information (v2)

    /// `PUT /inApps/v2/transactions/consumption/{transactionId}` with the v2 `ConsumptionRequest`
    /// (Apple answers 202, no body). The request is checked against Apple's rules first
    /// (`ConsumptionRequest.validate`); `productType` is the transaction's `type` when known.
    public func sendConsumptionInformation(
        transactionId: String, _ request: ConsumptionRequest, productType: String? = nil
    ) async throws(AppStoreServerAPIError) {
        let endpoint = "Send Consumption Information"
        try request.validate(productType: productType)
        let id = try pathSegment(transactionId, "transactionId")
        let body = try encode(request, endpoint: endpoint)
        _ = try await perform(endpoint, method: "PUT", path: "/inApps/v2/transactions/consumption/\(id)", query: [], body: body)
    }

    // MARK: Test notifications

    /// `POST /inApps/v1/notifications/test`: Apple sends a TEST notification to this environment's
    /// URL; returns the token to ask about it. 404 4040007: no URL is configured.
    public func requestTestNotification() async throws(AppStoreServerAPIError) -> String {
        let endpoint = "Request a Test Notification"
        let response = try await perform(endpoint, method: "POST", path: "/inApps/v1/notifications/test", query: [], body: nil)
        let wire: TestNotificationTokenWire = try decode(response.body, endpoint: endpoint)
        guard let token = wire.testNotificationToken, !token.isEmpty else {
            throw .unreadableAnswer(endpoint: endpoint, reason: "no testNotificationToken")
        }
        return token
    }

    /// `GET /inApps/v1/notifications/test/{token}`; nil while Apple has not sent it yet (4040008).
    public func testNotificationStatus(token: String) async throws(AppStoreServerAPIError) -> TestNotificationStatus? {
        let endpoint = "Get Test Notification Status"
        let t = try pathSegment(token, "testNotificationToken")
        do {
            let response = try await perform(endpoint, method: "GET", path: "/inApps/v1/notifications/test/\(t)", query: [], body: nil)
            let wire: TestNotificationStatusWire = try decode(response.body, endpoint: endpoint)
            return TestNotificationStatus(signedPayload: wire.signedPayload, sendAttempts: wire.sendAttempts ?? [], body: response.body)
        } catch {
            if error.handling == .notReady { return nil }
            throw error
        }
    }

    // MARK: - Plumbing

    /// Pages until the continuation is nil; restarts once on a restart-paging error; refuses a
    /// continuation seen before (a loop) and more than `maxPages` pages.
    func walk<Page>(
        endpoint: String, first fetch: (String?) async throws(AppStoreServerAPIError) -> (Page, String?),
        _ body: (Page) async throws -> Void
    ) async throws {
        var restarts = 0
        var continuation: String?
        var seen: Set<String> = []
        var pages = 0
        while true {
            // A Result, not `catch where`: the 6.3 compiler crashes on a filtered catch of a typed throw here.
            let fetched: Result<(Page, String?), AppStoreServerAPIError>
            do { fetched = .success(try await fetch(continuation)) } catch { fetched = .failure(error) }
            let page: Page, next: String?
            switch fetched {
            case .success(let value): (page, next) = value
            case .failure(let error):
                guard error.handling == .restartPaging, continuation != nil, restarts < 1 else { throw error }
                restarts += 1
                continuation = nil
                seen = []
                continue
            }
            pages += 1
            try await body(page)
            guard let next else { return }
            guard seen.insert(next).inserted else {
                throw AppStoreServerAPIError.paging(endpoint: endpoint, reason: "Apple returned the same continuation twice; stopping instead of looping")
            }
            guard pages < Self.maxPages else {
                throw AppStoreServerAPIError.paging(endpoint: endpoint, reason: "more than \(Self.maxPages) pages; narrow the request")
            }
            continuation = next
        }
    }

    /// Sends with a fresh token per attempt; retries what `AppStoreServerAPIError.handling` calls
    /// retryable, waiting `Retry-After` when Apple gives one, else exponential backoff.
    func perform(
        _ endpoint: String, method: String, path: String, query: [(String, String)], body: Data?
    ) async throws(AppStoreServerAPIError) -> OutboundResponse {
        let policy = configuration.retry
        _ = try url(path: path, query: query)
        var attempt = 0
        while true {
            attempt += 1
            let token = try AppStoreAPIToken.make(configuration, nowMillis: policy.now())
            var headers = [("Authorization", "Bearer \(token)"), ("Accept", "application/json")]
            if body != nil { headers.append(("Content-Type", "application/json")) }
            let request = OutboundRequest(method: method, path: path, query: query, headers: headers, body: body)
            let failure: AppStoreServerAPIError
            var retryAt: Int64?
            do {
                let response = try await http.send(request)
                if response.isSuccess { return response }
                failure = Self.error(endpoint: endpoint, response)
                retryAt = response.retryAt
            } catch {
                failure = Self.error(endpoint: endpoint, error)
            }
            guard failure.isRetryable else { throw failure }
            let isRateLimit = failure.httpStatus == 429
            guard attempt < policy.maxAttempts else {
                throw isRateLimit ? .rateLimited(endpoint: endpoint, retryAt: retryAt) : failure
            }
            let wait: Duration
            if let retryAt {
                wait = .milliseconds(max(0, retryAt - policy.now()))
                if wait > policy.maxRetryAfter {
                    throw isRateLimit ? .rateLimited(endpoint: endpoint, retryAt: retryAt) : failure
                }
            } else {
                wait = policy.backoff(afterAttempt: attempt)
            }
            do { try await policy.sleep(wait) } catch {
                throw .transport(endpoint: endpoint, reason: "cancelled while waiting to retry")
            }
        }
    }

    /// The typed error of a non-2xx answer: 401 has no body; others carry `{errorCode, errorMessage}`
    /// (or nothing, e.g. a proxy's 502).
    static func error(endpoint: String, _ response: OutboundResponse) -> AppStoreServerAPIError {
        if response.status == 401 { return .unauthorized(endpoint: endpoint) }
        let wire = try? JSONDecoder().decode(APIErrorWire.self, from: response.body)
        var code = wire?.errorCode
        if code == nil, response.status == 429 { code = 4_290_000 }
        return .apple(endpoint: endpoint, httpStatus: response.status, errorCode: code, errorMessage: wire?.errorMessage)
    }

    /// No HTTP answer: a refused URL is a configuration error, the rest transport (retried).
    static func error(endpoint: String, _ error: OutboundError) -> AppStoreServerAPIError {
        switch error {
        case .plainHTTPRefused, .invalidURL: .configuration(error.message)
        case .responseTooLarge: .unreadableAnswer(endpoint: endpoint, reason: error.reason)
        case .timedOut, .unreachable, .cancelled: .transport(endpoint: endpoint, reason: error.reason)
        }
    }

    /// Where a request goes (the outbound client's URL rules: https, the base URL's path kept as a prefix).
    func url(path: String, query: [(String, String)]) throws(AppStoreServerAPIError) -> URL {
        do { return try http.url(for: OutboundRequest(method: "GET", path: path, query: query)) } catch {
            throw .configuration(error.message)
        }
    }

    func pathSegment(_ value: String, _ name: String) throws(AppStoreServerAPIError) -> String {
        guard !value.isEmpty, value.utf8.count <= 1024 else { throw .invalidRequest("\(name) must be 1 to 1024 bytes") }
        return OutboundClient.escape(value)
    }

    func encode<T: Encodable>(_ value: T, endpoint: String) throws(AppStoreServerAPIError) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do { return try encoder.encode(value) } catch { throw .invalidRequest("\(endpoint): the request could not be encoded: \(error)") }
    }

    func decode<T: Decodable>(_ body: Data, endpoint: String) throws(AppStoreServerAPIError) -> T {
        do { return try JSONDecoder().decode(T.self, from: body) } catch {
            throw .unreadableAnswer(endpoint: endpoint, reason: "not the documented JSON (\(error))")
        }
    }
}

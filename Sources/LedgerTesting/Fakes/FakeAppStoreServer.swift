import AppStore
import Crypto
import Foundation
import HTTPServer
import LedgerCore
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A local App Store Server API for tests: a real HTTP server on loopback (the project's
/// `HTTPServer`) that behaves like Apple where the ledger depends on it.
///
/// - **Every request's JWT is checked** the way Apple documents it (reference/appstore-server-api.md
///   §2): header `alg` ES256, `kid`, `typ` JWT; claims `iss`, `aud` appstoreconnect-v1, `bid`, `iat`
///   and `exp` in seconds, `exp` in the future and at most an hour after `iat`; the raw r‖s ES256
///   signature against the key's public half. A bad token is answered 401 with no body, and the
///   reason is recorded (`refusals`) so a test can say which check fired.
/// - Signed items are signed by the `AppleTestAuthority` **at request time** (signedDate = the
///   fake's clock), like Apple, so two calls return different JWS for the same content.
/// - Programmable: notification history (`addNotification`, or `notify` to sign one from a
///   subscription's state, `pageSize`), subscriptions with their
///   transactions and renewal info (`setSubscription`) for Get All Subscription Statuses and Get
///   Transaction History (revision paging), Send Consumption Information (validated like Apple,
///   recorded in `consumptionRequests`), test notifications (POSTed, signed, to `webhookURL`), and
///   scripted failures (`enqueueFailure`: 429 with Retry-After, 5xx, any Apple error, or any body
///   verbatim for malformed answers).
///
/// Status filters (`?status=`) are not applied: the project's HTTP server keeps only the first
/// value of a repeated query parameter. Transaction history honours one `productType`.
public final class FakeAppStoreServer: Sendable {
    public struct Credentials: Sendable {
        public var issuerId: String
        public var keyId: String
        public var bundleId: String
        public var publicKey: ECPublicKey

        public init(issuerId: String, keyId: String, bundleId: String, publicKey: ECPublicKey) {
            self.issuerId = issuerId
            self.keyId = keyId
            self.bundleId = bundleId
            self.publicKey = publicKey
        }
    }

    /// One subscription as Apple knows it: its transactions (the latest purchase is its
    /// `lastTransactions` entry) and renewal info. `customer` groups subscriptions of one customer
    /// (default: the originalTransactionId), so a statuses answer can list several.
    public struct Subscription: Sendable {
        public var originalTransactionId: String
        public var customer: String
        public var groupIdentifier: String
        /// 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
        public var status: Int
        public var transactions: [AppleTransaction]
        public var renewal: AppleRenewalInfo?

        public init(originalTransactionId: String, customer: String? = nil, groupIdentifier: String = "21000001", status: Int = 1,
                    transactions: [AppleTransaction], renewal: AppleRenewalInfo?) {
            self.originalTransactionId = originalTransactionId
            self.customer = customer ?? originalTransactionId
            self.groupIdentifier = groupIdentifier
            self.status = status
            self.transactions = transactions
            self.renewal = renewal
        }

        /// The latest purchase (then transactionId): what Apple reports as the last transaction.
        public var latest: AppleTransaction? {
            transactions.max { ($0.purchaseDate?.millis ?? .min, $0.transactionId ?? "") < ($1.purchaseDate?.millis ?? .min, $1.transactionId ?? "") }
        }
    }

    /// Which endpoint a scripted failure is for (nil in `enqueueFailure`: the next request of any).
    public enum Endpoint: String, Sendable, CaseIterable {
        case notificationHistory, subscriptionStatuses, transactionHistory, consumption, testNotification, testNotificationStatus
    }

    /// An answer the fake gives instead of the real one.
    public struct Failure: Sendable {
        public var status: Int
        public var errorCode: Int?
        public var retryAfter: String?
        /// An answer body given verbatim instead (hostile or broken answers: not JSON, wrong shapes).
        public var body: Data?

        public init(status: Int, errorCode: Int? = nil, retryAfter: String? = nil, body: Data? = nil) {
            self.status = status
            self.errorCode = errorCode
            self.retryAfter = retryAfter
            self.body = body
        }

        /// A 200 whose body is `body`, exactly.
        public static func answer(_ body: Data) -> Failure { Failure(status: 200, body: body) }

        /// 429 with `Retry-After` as Apple sends it (absolute ms), when given.
        public static func rateLimited(retryAtMillis: Int64?) -> Failure {
            Failure(status: 429, errorCode: 4_290_000, retryAfter: retryAtMillis.map(String.init))
        }
    }

    /// What the fake saw of one request.
    public struct Seen: Sendable {
        public var method: String
        public var path: String
        public var query: [String: String]
        public var body: Data
        /// The verified token's claims, nil when the token was refused.
        public var claims: [String: String]?
    }

    public struct ConsumptionRecord: Sendable {
        public var transactionId: String
        public var body: Data
        public var request: ConsumptionRequest?
    }

    struct History: Sendable {
        var signedPayload: String
        var date: Int64
        var failed: Bool
        var transactionIds: Set<String>
    }

    struct TestNotification: Sendable {
        var signedPayload: String
        var attempts: [SendAttempt]
    }

    struct State: Sendable {
        var history: [History] = []
        var subscriptions: [String: Subscription] = [:]
        var failures: [(Endpoint?, Failure)] = []
        var seen: [Seen] = []
        var refusals: [String] = []
        var consumption: [ConsumptionRecord] = []
        var tokens: [String: (request: Data, offset: Int)] = [:]
        var tokenCounter = 0
        var tests: [String: TestNotification?] = [:]
        var pageSize = 20
        var historyPageSize = 20
        var webhookURL: URL?
    }

    public let credentials: Credentials
    public let authority: AppleTestAuthority
    /// `Production` or `Sandbox`: stamped on every answer and signed item.
    public let environment: String
    public let appAppleId: Int64
    /// The fake's clock (ms): signing time of items, token expiry checks.
    public let now: @Sendable () -> Int64
    private let state = Mutex(State())
    private let server: HTTPServer

    public init(credentials: Credentials, authority: AppleTestAuthority, environment: String = "Sandbox", appAppleId: Int64 = 1234,
                now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }) {
        self.credentials = credentials
        self.authority = authority
        self.environment = environment
        self.appAppleId = appAppleId
        self.now = now
        var router = Router()
        let box = WeakBox()
        func route(_ method: String, _ pattern: String, _ endpoint: Endpoint,
                   _ handler: @escaping @Sendable (FakeAppStoreServer, HTTPRequest) async -> HTTPResponse) {
            router.add(method, pattern) { request in
                guard let fake = box.fake else { return HTTPResponse(status: 503) }
                return await fake.authenticated(request, endpoint: endpoint) { await handler(fake, $0) }
            }
        }
        route("POST", "/inApps/v1/notifications/history", .notificationHistory) { $0.notificationHistory($1) }
        route("GET", "/inApps/v1/subscriptions/{id}", .subscriptionStatuses) { $0.statuses($1) }
        route("GET", "/inApps/v2/history/{id}", .transactionHistory) { $0.transactionHistory($1) }
        route("PUT", "/inApps/v2/transactions/consumption/{id}", .consumption) { $0.consumption($1) }
        route("POST", "/inApps/v1/notifications/test", .testNotification) { await $0.requestTest($1) }
        route("GET", "/inApps/v1/notifications/test/{token}", .testNotificationStatus) { $0.testStatus($1) }
        server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2), router: router)
        box.fake = self
    }

    /// Convenience: a fresh P-256 key, its credentials and a fake using them. The key is what the
    /// client signs with (`AppStoreServerAPIConfiguration.privateKey`).
    public static func make(authority: AppleTestAuthority, bundleId: String = "com.example", environment: String = "Sandbox",
                            now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }) throws -> (FakeAppStoreServer, ECPrivateKey) {
        let key = try ECPrivateKey.generate(curve: .p256)
        let credentials = Credentials(issuerId: "57246542-96fe-1a63-e053-0824d011072a", keyId: "2X9R4HXF34",
                                      bundleId: bundleId, publicKey: key.publicKey)
        return (FakeAppStoreServer(credentials: credentials, authority: authority, environment: environment, now: now), key)
    }

    public func start() throws { try server.start() }
    public func shutdown() async { await server.shutdown(gracePeriod: .seconds(2)) }

    /// `http://127.0.0.1:<port>`, once started.
    /// Plain http on loopback: the client needs `allowsPlainHTTPLoopback: true` (or the service
    /// `LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK=true`); the outbound client refuses it otherwise.
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port ?? 0)")! }

    // MARK: programming

    /// Items per notification history page (Apple: 20).
    public var pageSize: Int {
        get { state.withLock { $0.pageSize } }
        set { state.withLock { $0.pageSize = max(1, newValue) } }
    }

    /// Transactions per history page (Apple: 20).
    public var historyPageSize: Int {
        get { state.withLock { $0.historyPageSize } }
        set { state.withLock { $0.historyPageSize = max(1, newValue) } }
    }

    /// Where Request a Test Notification posts the TEST notification (nil: 404 4040007).
    public var webhookURL: URL? {
        get { state.withLock { $0.webhookURL } }
        set { state.withLock { $0.webhookURL = newValue } }
    }

    /// A notification Apple sent (or failed to send) at `date`; `body` is a V2 body
    /// `{"signedPayload": …}` as `AppleTestAuthority.signNotification` makes it.
    public func addNotification(body: Data, date: Int64, failed: Bool = false, transactionIds: Set<String> = []) {
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
              let signed = object["signedPayload"] as? String else { preconditionFailure("addNotification needs a V2 body") }
        state.withLock { $0.history.append(History(signedPayload: signed, date: date, failed: failed, transactionIds: transactionIds)) }
    }

    /// Signs a V2 notification about `originalTransactionId` as Apple would send it at `date`: the
    /// subscription's transaction (`transactionId`, else its latest) and renewal info as the fake
    /// holds them now, each signed at `date`, in this fake's environment. Records it in the
    /// notification history (`failed`: Apple could not deliver it) and returns the V2 body, which
    /// a test posts to the webhook (delivered) or not (lost).
    @discardableResult
    ///
    /// `status` replaces the subscription's status as Apple states it (`data.status`);
    /// `withTransaction: false` sends the renewal info alone (as DID_CHANGE_RENEWAL_STATUS may).
    public func notify(_ type: String, subtype: String? = nil, about originalTransactionId: String, date: Int64,
                       transactionId: String? = nil, failed: Bool = false, consumptionRequestReason: String? = nil,
                       uuid: String = UUID().uuidString.lowercased(), status: Int? = nil, withTransaction: Bool = true) throws -> Data {
        guard let sub = subscription(originalTransactionId) else {
            preconditionFailure("notify: no subscription \(originalTransactionId); setSubscription first")
        }
        var n = AppleNotification()
        n.notificationType = type
        n.subtype = subtype
        n.notificationUUID = uuid
        n.version = "2.0"
        n.signedDate = AppleTime(date)
        var d = AppleNotification.NotificationData()
        d.appAppleId = appAppleId
        d.bundleId = credentials.bundleId
        d.bundleVersion = "1"
        d.environment = environment
        d.status = status ?? sub.status
        d.consumptionRequestReason = consumptionRequestReason
        n.data = d
        let tx = withTransaction ? transactionId.flatMap { id in sub.transactions.first { $0.transactionId == id } } ?? sub.latest : nil
        let body = try authority.signNotification(
            n, transaction: tx, renewal: sub.renewal, editTransaction: { $0["signedDate"] = date }, editRenewal: { $0["signedDate"] = date })
        addNotification(body: body, date: date, failed: failed,
                         transactionIds: Set(sub.transactions.compactMap(\.transactionId) + [originalTransactionId]))
        return body
    }

    /// The notification history as the fake holds it (signedPayload, date, failed), oldest first.
    public var history: [(signedPayload: String, date: Int64, failed: Bool)] {
        state.withLock { $0.history.sorted { $0.date < $1.date }.map { ($0.signedPayload, $0.date, $0.failed) } }
    }

    public func setSubscription(_ subscription: Subscription) {
        state.withLock { $0.subscriptions[subscription.originalTransactionId] = subscription }
    }

    public func subscription(_ originalTransactionId: String) -> Subscription? {
        state.withLock { $0.subscriptions[originalTransactionId] }
    }

    /// The next request (of `endpoint`, or of any when nil) that passes authentication is answered
    /// with `failure` instead; queued failures are used in order.
    public func enqueueFailure(_ failure: Failure, endpoint: Endpoint? = nil, times: Int = 1) {
        state.withLock { for _ in 0..<times { $0.failures.append((endpoint, failure)) } }
    }

    /// Makes every pagination token handed out so far invalid (Apple: 4000017 expired).
    public func expirePaginationTokens() { state.withLock { $0.tokens = [:] } }

    // MARK: observations

    public var requests: [Seen] { state.withLock { $0.seen } }
    /// Why each refused token was refused, in order.
    public var refusals: [String] { state.withLock { $0.refusals } }
    public var consumptionRequests: [ConsumptionRecord] { state.withLock { $0.consumption } }

    // MARK: - Authentication

    func authenticated(_ request: HTTPRequest, endpoint: Endpoint, _ handler: (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse {
        let verdict = checkToken(request.headers["Authorization"])
        let failure: Failure? = state.withLock { s in
            s.seen.append(Seen(method: request.method, path: request.path, query: request.query, body: request.body,
                               claims: verdict.claims))
            if let reason = verdict.refusal { s.refusals.append(reason); return nil }
            guard let i = s.failures.firstIndex(where: { $0.0 == nil || $0.0 == endpoint }) else { return nil }
            return s.failures.remove(at: i).1
        }
        if verdict.refusal != nil { return HTTPResponse(status: 401) }
        if let failure {
            var headers: [(String, String)] = []
            if let r = failure.retryAfter { headers.append(("Retry-After", r)) }
            if let body = failure.body { return .json(failure.status, body, headers: headers) }
            guard let code = failure.errorCode else { return HTTPResponse(status: failure.status, headers: headers) }
            return Self.error(failure.status, code, "scripted failure", headers: headers)
        }
        return await handler(request)
    }

    struct Verdict {
        var claims: [String: String]?
        var refusal: String?
    }

    /// Apple's token rules; the first that fails is the refusal.
    func checkToken(_ authorization: String?) -> Verdict {
        func refuse(_ why: String) -> Verdict { Verdict(claims: nil, refusal: why) }
        guard let authorization, authorization.hasPrefix("Bearer ") else { return refuse("no bearer token") }
        let token = String(authorization.dropFirst("Bearer ".count))
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return refuse("not a compact JWS") }
        guard let headerBytes = Base64.decodeURL(parts[0].utf8), let claimBytes = Base64.decodeURL(parts[1].utf8),
              let signature = Base64.decodeURL(parts[2].utf8) else { return refuse("not base64url") }
        guard let header = try? JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: Any],
              let claims = try? JSONSerialization.jsonObject(with: Data(claimBytes)) as? [String: Any] else {
            return refuse("header or claims are not JSON objects")
        }
        guard header["alg"] as? String == "ES256" else { return refuse("alg") }
        guard header["kid"] as? String == credentials.keyId else { return refuse("kid") }
        guard header["typ"] as? String == "JWT" else { return refuse("typ") }
        guard claims["iss"] as? String == credentials.issuerId else { return refuse("iss") }
        guard claims["aud"] as? String == AppStoreAPIToken.audience else { return refuse("aud") }
        guard claims["bid"] as? String == credentials.bundleId else { return refuse("bid") }
        func seconds(_ v: Any?) -> Int64? {
            guard let n = v as? NSNumber, n.objCType.pointee != CChar(UInt8(ascii: "c")), n.doubleValue == n.doubleValue.rounded() else { return nil }
            return n.int64Value
        }
        guard let iat = seconds(claims["iat"]), let exp = seconds(claims["exp"]) else { return refuse("iat/exp are not integers") }
        let nowSeconds = now() / 1000
        // Times in ms are the classic mistake: they read as dates tens of thousands of years away.
        guard iat < 100_000_000_000, exp < 100_000_000_000 else { return refuse("iat/exp look like milliseconds") }
        guard iat <= nowSeconds + 60 else { return refuse("iat is in the future") }
        guard exp > nowSeconds else { return refuse("exp has passed") }
        guard exp > iat, exp - iat <= AppStoreAPIToken.maxLifetimeSeconds else { return refuse("lifetime over an hour") }
        guard signature.count == 64 else { return refuse("signature is not 64 raw bytes (r‖s)") }
        let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard credentials.publicKey.verifyES256(signature: signature, message: signingInput) else { return refuse("signature") }
        var text: [String: String] = [:]
        for (k, v) in claims { text[k] = "\(v)" }
        return Verdict(claims: text, refusal: nil)
    }

    // MARK: - Endpoints

    func notificationHistory(_ request: HTTPRequest) -> HTTPResponse {
        guard let body = try? JSONDecoder().decode(NotificationHistoryRequest.self, from: request.body) else {
            return Self.error(400, 4_000_000, "Invalid request")
        }
        guard body.endDate > body.startDate else { return Self.error(400, 4_000_013, "Invalid start date") }
        if body.transactionId != nil, body.notificationType != nil { return Self.error(400, 4_000_019, "Multiple filters") }
        let (page, more, token): ([History], Bool, String?)
        do {
            (page, more, token) = try state.withLock { s throws(FakeError) in
                var offset = 0
                if let t = request.query["paginationToken"] {
                    guard let known = s.tokens[t] else { throw FakeError(status: 400, code: 4_000_017, message: "Expired pagination token") }
                    guard known.request == request.body else { throw FakeError(status: 400, code: 4_000_014, message: "Invalid pagination token") }
                    offset = known.offset
                }
                let matching = s.history.filter { h in
                    h.date >= body.startDate && h.date < body.endDate && (!(body.onlyFailures ?? false) || h.failed)
                        && (body.transactionId.map { h.transactionIds.contains($0) } ?? true)
                }.sorted { $0.date < $1.date }
                let slice = Array(matching.dropFirst(offset).prefix(s.pageSize))
                let more = offset + slice.count < matching.count
                var token: String?
                if more {
                    s.tokenCounter += 1
                    let t = "page\(s.tokenCounter)+/=" // characters a client must escape
                    s.tokens[t] = (request.body, offset + slice.count)
                    token = t
                }
                return (slice, more, token)
            }
        } catch { return Self.error(error.status, error.code, error.message) }
        var answer: [String: Any] = [
            "hasMore": more,
            "notificationHistory": page.map { h -> [String: Any] in
                ["signedPayload": h.signedPayload,
                 "sendAttempts": [["attemptDate": h.date, "sendAttemptResult": h.failed ? "TIMED_OUT" : "SUCCESS"]]]
            },
        ]
        if let token { answer["paginationToken"] = token }
        return Self.json(answer)
    }

    /// Every subscription of the customer any of whose transactions has `id`.
    func customerSubscriptions(_ id: String, in s: State) -> [Subscription] {
        guard let owner = s.subscriptions.values.first(where: { sub in
            sub.originalTransactionId == id || sub.transactions.contains { $0.transactionId == id }
        }) else { return [] }
        return s.subscriptions.values.filter { $0.customer == owner.customer }.sorted { $0.originalTransactionId < $1.originalTransactionId }
    }

    func statuses(_ request: HTTPRequest) -> HTTPResponse {
        let id = request.pathParameters["id"] ?? ""
        guard !id.isEmpty, id.allSatisfy(\.isNumber) else { return Self.error(400, 4_000_006, "Invalid transaction id") }
        let subs = state.withLock { customerSubscriptions(id, in: $0) }
        guard !subs.isEmpty else { return Self.error(404, 4_040_010, "Transaction id not found") }
        let signedAt = now()
        var groups: [String: [[String: Any]]] = [:]
        do {
            for sub in subs {
                var item: [String: Any] = ["originalTransactionId": sub.originalTransactionId, "status": sub.status]
                if let tx = sub.latest { item["signedTransactionInfo"] = try sign(tx, at: signedAt) }
                if let r = sub.renewal { item["signedRenewalInfo"] = try sign(r, at: signedAt) }
                groups[sub.groupIdentifier, default: []].append(item)
            }
        } catch { return Self.error(500, 5_000_000, "signing failed: \(error)") }
        return Self.json([
            "environment": environment, "bundleId": credentials.bundleId, "appAppleId": appAppleId,
            "data": groups.keys.sorted().map { ["subscriptionGroupIdentifier": $0, "lastTransactions": groups[$0]!] },
        ])
    }

    func transactionHistory(_ request: HTTPRequest) -> HTTPResponse {
        let id = request.pathParameters["id"] ?? ""
        guard !id.isEmpty, id.allSatisfy(\.isNumber) else { return Self.error(400, 4_000_006, "Invalid transaction id") }
        let (subs, size) = state.withLock { (customerSubscriptions(id, in: $0), $0.historyPageSize) }
        guard !subs.isEmpty else { return Self.error(404, 4_040_010, "Transaction id not found") }
        var offset = 0
        if let revision = request.query["revision"] {
            guard revision.hasPrefix("rev-"), let n = Int(revision.dropFirst(4)), n >= 0 else {
                return Self.error(400, 4_000_005, "Invalid revision")
            }
            offset = n
        }
        // `productType` (Get Transaction History v2): only the first value is seen (see above).
        let types: [String: String] = ["AUTO_RENEWABLE": "Auto-Renewable Subscription", "NON_RENEWABLE": "Non-Renewing Subscription",
                                       "CONSUMABLE": "Consumable", "NON_CONSUMABLE": "Non-Consumable"]
        if let asked = request.query["productType"], types[asked] == nil { return Self.error(400, 4_000_000, "Invalid request") }
        let wanted = request.query["productType"].flatMap { types[$0] }
        let all = subs.flatMap(\.transactions).filter { wanted == nil || $0.type == wanted }.sorted {
            ($0.purchaseDate?.millis ?? .min, $0.transactionId ?? "") < ($1.purchaseDate?.millis ?? .min, $1.transactionId ?? "")
        }
        let page = Array(all.dropFirst(offset).prefix(size))
        let next = offset + page.count
        let signedAt = now()
        let signed: [String]
        do { signed = try page.map { try sign($0, at: signedAt) } } catch { return Self.error(500, 5_000_000, "signing failed") }
        return Self.json([
            "revision": "rev-\(next)", "hasMore": next < all.count, "bundleId": credentials.bundleId, "appAppleId": appAppleId,
            "environment": environment, "signedTransactions": signed,
        ])
    }

    func consumption(_ request: HTTPRequest) -> HTTPResponse {
        let id = request.pathParameters["id"] ?? ""
        guard !id.isEmpty, id.allSatisfy(\.isNumber) else { return Self.error(400, 4_000_006, "Invalid transaction id") }
        let known = state.withLock { s in s.subscriptions.values.contains { $0.transactions.contains { $0.transactionId == id } } }
        guard known else { return Self.error(404, 4_040_010, "Transaction id not found") }
        // A tree, so that `true` and `1` stay different (Apple wants JSON booleans).
        guard let object = (try? JSONDecoder().decode(JSONValue.self, from: request.body))?.objectValue else {
            return Self.error(400, 4_000_000, "Invalid request")
        }
        // Apple's v2 rules (reference/appstore-server-api.md §3.5).
        guard object["customerConsented"] == .bool(true) else { return Self.error(400, 4_000_035, "Invalid customer consented") }
        guard case .string(let delivery)? = object["deliveryStatus"], ConsumptionRequest.DeliveryStatus(rawValue: delivery) != nil else {
            return Self.error(400, 4_000_036, "Invalid delivery status")
        }
        guard case .bool? = object["sampleContentProvided"] else { return Self.error(400, 4_000_037, "Invalid sample content provided") }
        if let preference = object["refundPreference"] {
            guard case .string(let p) = preference, ConsumptionRequest.RefundPreference(rawValue: p) != nil else {
                return Self.error(400, 4_000_038, "Invalid refund preference")
            }
        }
        if let p = object["consumptionPercentage"] {
            guard case .integer(let n) = p, (0...100_000).contains(n) else { return Self.error(400, 4_000_039, "Consumption percentage out of range") }
            let tx = state.withLock { s in s.subscriptions.values.flatMap(\.transactions).first { $0.transactionId == id } }
            if tx?.type == "Auto-Renewable Subscription" {
                return Self.error(400, 4_000_040, "Consumption percentage not allowed for auto-renewable subscriptions")
            }
            if delivery != "DELIVERED", n != 0 { return Self.error(400, 4_000_041, "Undelivered consumption percentage must be 0") }
        }
        let decoded = try? JSONDecoder().decode(ConsumptionRequest.self, from: request.body)
        state.withLock { $0.consumption.append(ConsumptionRecord(transactionId: id, body: request.body, request: decoded)) }
        return HTTPResponse(status: 202)
    }

    func requestTest(_ request: HTTPRequest) async -> HTTPResponse {
        guard let webhook = webhookURL else { return Self.error(404, 4_040_007, "Server notification URL not found") }
        let token = UUID().uuidString.lowercased() + "_" + String(now())
        var n = AppleNotification()
        n.notificationType = "TEST"
        n.notificationUUID = UUID().uuidString.lowercased()
        n.version = "2.0"
        n.signedDate = AppleTime(now())
        var d = AppleNotification.NotificationData()
        d.bundleId = credentials.bundleId
        d.appAppleId = appAppleId
        d.environment = environment
        n.data = d
        let body: Data
        do { body = try authority.signNotification(n) } catch { return Self.error(500, 5_000_000, "signing failed") }
        state.withLock { $0.tests[token] = .some(nil) }
        // Apple sends it on its own schedule; the fake right after answering.
        let signed = (try? JSONSerialization.jsonObject(with: body) as? [String: Any])?["signedPayload"] as? String ?? ""
        let clock = now
        Task.detached { [self] in
            var request = URLRequest(url: webhook, timeoutInterval: 10)
            request.httpMethod = "POST"
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            let session = URLSession(configuration: .ephemeral)
            defer { session.finishTasksAndInvalidate() }
            var result = "SUCCESS"
            do {
                let (_, response) = try await session.upload(for: request, from: body)
                if (response as? HTTPURLResponse)?.statusCode != 200 { result = "UNSUCCESSFUL_HTTP_RESPONSE_CODE" }
            } catch {
                result = "NO_RESPONSE"
            }
            let attempt = SendAttempt(attemptDate: clock(), sendAttemptResult: result)
            state.withLock { $0.tests[token] = TestNotification(signedPayload: signed, attempts: [attempt]) }
        }
        return Self.json(["testNotificationToken": token])
    }

    func testStatus(_ request: HTTPRequest) -> HTTPResponse {
        let token = request.pathParameters["token"] ?? ""
        let known = state.withLock { $0.tests[token] }
        guard let known else { return Self.error(400, 4_000_020, "Invalid test notification token") }
        guard let sent = known else { return Self.error(404, 4_040_008, "Test notification not found") }
        return Self.json([
            "signedPayload": sent.signedPayload,
            "sendAttempts": sent.attempts.map { ["attemptDate": $0.attemptDate ?? 0, "sendAttemptResult": $0.sendAttemptResult ?? ""] },
        ])
    }

    // MARK: - Helpers

    func sign<T: Encodable>(_ value: T, at signedAt: Int64) throws -> String {
        try authority.sign(value) { $0["signedDate"] = signedAt }
    }

    struct FakeError: Error {
        var status: Int
        var code: Int
        var message: String
    }

    static func error(_ status: Int, _ code: Int, _ message: String, headers: [(String, String)] = []) -> HTTPResponse {
        .json(status, (try? JSONSerialization.data(withJSONObject: ["errorCode": code, "errorMessage": message])) ?? Data(), headers: headers)
    }

    static func json(_ object: [String: Any]) -> HTTPResponse {
        .json(200, (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data())
    }
}

/// Lets the routes reach the fake without the fake's initializer capturing `self` early.
private final class WeakBox: @unchecked Sendable {
    weak var fake: FakeAppStoreServer?
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// One request the simulator sends: a signed V2 body (or a sealed WeChat push) and what it is
/// about, so the report can say which notification a failure belongs to.
public struct SimulatedDelivery: Sendable, Equatable {
    /// Apple's notificationUUID; for a WeChat push, what it is (`<otid> deliver <order>`).
    public var notificationUUID: String
    public var originalTransactionId: String
    /// `TYPE` or `TYPE/SUBTYPE`; WeChat: the push's Event.
    public var type: String
    public var signedDate: Int64
    /// `{"signedPayload": …}`, or WeChat's secure-mode JSON envelope.
    public var body: Data
    /// Path and query under the base URL.
    public var path: String
    public var contentType: String

    public init(notificationUUID: String, originalTransactionId: String, type: String, signedDate: Int64, body: Data,
                path: String = NotificationPoster.path, contentType: String = "application/json") {
        self.notificationUUID = notificationUUID
        self.originalTransactionId = originalTransactionId
        self.type = type
        self.signedDate = signedDate
        self.body = body
        self.path = path
        self.contentType = contentType
    }

    /// A WeChat push (answered with WeChat's own reply, not the ledger's JSON).
    public var isWeChat: Bool { path.hasPrefix("/v1/wechat/") }
}

/// What the service answered, counted the way an operator reads it.
public struct DeliveryTally: Sendable, Equatable {
    public var sent = 0
    /// 200 `{"status":"stored"}`.
    public var stored = 0
    /// 200 `{"status":"duplicate"}`: the ledger already had it.
    public var duplicate = 0
    /// 200 with another body (an older service, or a stub).
    public var otherSuccess = 0
    /// WeChat pushes answered 200 (WeChat's reply says nothing of stored or duplicate).
    public var wechatAccepted = 0
    /// Non-200 answers by status code.
    public var otherStatuses: [Int: Int] = [:]
    /// Requests that got no HTTP answer (refused connection, timeout, reset).
    public var transportErrors = 0
    /// The first few distinct failures (status and body, or transport error), for the report.
    public var firstErrors: [String] = []

    public init() {}

    public var failures: Int { otherStatuses.values.reduce(0, +) + transportErrors }

    static let keptErrors = 5

    mutating func record(status: Int?, body: Data, transportError: String?, delivery: SimulatedDelivery) {
        sent += 1
        guard let status else {
            transportErrors += 1
            keep("transport error for \(delivery.type) \(delivery.notificationUUID): \(transportError ?? "no answer")")
            return
        }
        guard status == 200 else {
            otherStatuses[status, default: 0] += 1
            let text = String(decoding: body.prefix(400), as: UTF8.self)
            keep("HTTP \(status) for \(delivery.type) \(delivery.notificationUUID): \(text)")
            return
        }
        if delivery.isWeChat {
            wechatAccepted += 1
            return
        }
        switch (try? JSONSerialization.jsonObject(with: body) as? [String: Any])?["status"] as? String {
        case "stored": stored += 1
        case "duplicate": duplicate += 1
        default: otherSuccess += 1
        }
    }

    private mutating func keep(_ line: String) {
        guard firstErrors.count < Self.keptErrors else { return }
        firstErrors.append(line)
    }
}

/// Why posting could not start; per-request failures are counted in `DeliveryTally` instead.
public enum SimulatorError: Error, CustomStringConvertible, Equatable {
    case invalidURL(String)
    case remoteTarget(String)
    case invalidOption(String)

    public var description: String {
        switch self {
        case .invalidURL(let u):
            return "'\(u)' is not an http:// or https:// base URL such as http://127.0.0.1:8080"
        case .remoteTarget(let host):
            return "refusing to post to \(host): simulated notifications are signed by a throw-away test authority and only "
                + "belong on a local service (127.0.0.0/8, ::1, localhost); pass --allow-remote for a staging service you own"
        case .invalidOption(let why):
            return why
        }
    }
}

/// Posts deliveries to their path (`/v1/apple/notifications`, `/v1/wechat/notifications?…`) of a
/// base URL with at most `concurrency` requests in flight, in the given order (each worker takes
/// the next delivery, so the service sees them close to that order), and tallies the answers.
/// URLSession keeps the connections alive.
public struct NotificationPoster: Sendable {
    public let endpoint: URL
    /// The base URL without a trailing slash.
    public let base: String
    public let concurrency: Int
    public let timeout: TimeInterval

    public static let path = "/v1/apple/notifications"

    public init(baseURL: String, concurrency: Int, timeout: TimeInterval = 30, allowRemote: Bool = false) throws(SimulatorError) {
        var text = baseURL
        while text.hasSuffix("/") { text.removeLast() }
        guard let base = URL(string: text), let scheme = base.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = base.host, !host.isEmpty, let endpoint = URL(string: text + Self.path)
        else { throw .invalidURL(baseURL) }
        guard allowRemote || Self.isLoopback(host) else { throw .remoteTarget(host) }
        guard concurrency >= 1 else { throw .invalidOption("concurrency must be at least 1") }
        self.endpoint = endpoint
        self.base = text
        self.concurrency = concurrency
        self.timeout = timeout
    }

    static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if h == "localhost" || h == "::1" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// Sends every delivery once, in order; `progress` gets the number answered so far.
    public func post(_ deliveries: [SimulatedDelivery], progress: @escaping @Sendable (Int) -> Void = { _ in }) async -> DeliveryTally {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = concurrency
        configuration.timeoutIntervalForRequest = timeout
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let state = PostingState()
        let base = self.base
        let timeout = self.timeout
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<min(concurrency, deliveries.count) {
                group.addTask {
                    while true {
                        let index: Int? = state.shared.withLock { s in
                            guard s.next < deliveries.count else { return nil }
                            defer { s.next += 1 }
                            return s.next
                        }
                        guard let index else { return }
                        let delivery = deliveries[index]
                        var request = URLRequest(url: URL(string: base + delivery.path)!, timeoutInterval: timeout)
                        request.httpMethod = "POST"
                        request.setValue(delivery.contentType, forHTTPHeaderField: "Content-Type")
                        var status: Int?
                        var body = Data()
                        var failure: String?
                        do {
                            let (data, response) = try await session.upload(for: request, from: delivery.body)
                            status = (response as? HTTPURLResponse)?.statusCode
                            body = data
                        } catch {
                            failure = "\(error.localizedDescription)"
                        }
                        let done = state.shared.withLock { s in
                            s.tally.record(status: status, body: body, transportError: failure, delivery: delivery)
                            return s.tally.sent
                        }
                        progress(done)
                    }
                }
            }
        }
        return state.shared.withLock { $0.tally }
    }
}

/// The workers' shared cursor and tally (a class so the task group's closures can share it).
private final class PostingState: Sendable {
    let shared = Mutex((next: 0, tally: DeliveryTally()))
}

import Crypto
import Foundation
import HTTPServer
import Synchronization

/// A webhook receiver for tests and `make demo` (`ledger-dev webhook-receiver`): it verifies each
/// request's Standard Webhooks signature against its secrets, keeps what arrived, and answers as
/// told — 204, a failing status, or a stall — for the next N requests or until a time.
public final class WebhookReceiver: Sendable {
    /// One request as it arrived.
    public struct Delivery: Sendable, Equatable {
        public var id: String?
        public var timestamp: String?
        public var signatures: String?
        public var body: Data
        /// Nil when the signature verified; else why not.
        public var refusal: String?
        /// What the receiver answered.
        public var status: Int
        public var receivedAt: Date
        /// `type` of the JSON body, when it has one.
        public var type: String?
        public var verified: Bool { refusal == nil }
    }

    /// How to answer.
    public enum Behaviour: Sendable, Equatable {
        case accept
        /// Answer this status (e.g. 500), with `Retry-After` when given (seconds) and `body` as
        /// text when given (a hostile receiver's answer, shown escaped on the auditor's page).
        case fail(status: Int, retryAfter: Int?, body: String? = nil)
        /// Wait this long before answering 204 (longer than the sender's timeout: a timeout).
        case stall(seconds: Double)
    }

    private struct State {
        var deliveries: [Delivery] = []
        var behaviour: Behaviour = .accept
        /// Requests still to answer with `behaviour` before going back to accepting (nil: until changed).
        var remaining: Int?
        var until: Date?
    }

    public let secrets: [WebhookSecret]
    private let state = Mutex(State())
    private let server: HTTPServer
    private let onDelivery: @Sendable (Delivery) -> Void

    /// - Parameter tolerance: how far a timestamp may be from this clock (Standard Webhooks: 5 min).
    public init(secrets: [WebhookSecret], host: String = "127.0.0.1", port: Int = 0, tolerance: Int64 = StandardWebhooks.tolerance,
                onDelivery: @escaping @Sendable (Delivery) -> Void = { _ in }) {
        self.secrets = secrets
        self.onDelivery = onDelivery
        let holder = Holder()
        var configuration = HTTPServerConfiguration(host: host, port: port)
        configuration.threadPoolSize = 2
        server = HTTPServer(configuration: configuration) { request in await holder.receiver!.handle(request, tolerance: tolerance) }
        holder.receiver = self
    }

    /// The server's handler is made before `self` exists; it reaches the receiver through this.
    private final class Holder: @unchecked Sendable { weak var receiver: WebhookReceiver? }

    public func start() throws { try server.start() }
    public var port: Int? { server.port }
    public var url: String { "http://127.0.0.1:\(port ?? 0)/hooks" }
    public func stop() async { await server.shutdown(gracePeriod: .seconds(1)) }

    /// Answers with `behaviour` for the next `count` requests (nil: until changed) or until `until`.
    public func behave(_ behaviour: Behaviour, count: Int? = nil, until: Date? = nil) {
        state.withLock {
            $0.behaviour = behaviour
            $0.remaining = count
            $0.until = until
        }
    }

    public var deliveries: [Delivery] { state.withLock { $0.deliveries } }

    /// The verified deliveries' ids, each once, in the order they first arrived (a receiver's dedupe).
    public var uniqueVerifiedIds: [String] {
        var seen = Set<String>()
        return deliveries.filter(\.verified).compactMap(\.id).filter { seen.insert($0).inserted }
    }

    func handle(_ request: HTTPRequest, tolerance: Int64) async -> HTTPResponse {
        let id = request.headers[StandardWebhooks.idHeader], ts = request.headers[StandardWebhooks.timestampHeader]
        let sigs = request.headers[StandardWebhooks.signatureHeader]
        var refusal: String?
        do {
            try StandardWebhooks.verify(id: id, timestamp: ts, signatures: sigs, body: request.body, secrets: secrets,
                                        now: Int64(Date().timeIntervalSince1970), tolerance: tolerance)
        } catch {
            refusal = "\(error)"
        }
        let behaviour: Behaviour = state.withLock { s in
            if let until = s.until, Date() >= until { s.behaviour = .accept; s.until = nil }
            let b = s.behaviour
            if let r = s.remaining {
                if r <= 1 { s.behaviour = .accept; s.remaining = nil } else { s.remaining = r - 1 }
            }
            return b
        }
        var status = refusal == nil ? 204 : 401
        var headers: [(String, String)] = []
        var answer: Data?
        if refusal == nil {
            switch behaviour {
            case .accept: break
            case .fail(let s, let retryAfter, let text):
                status = s
                answer = text.map { Data($0.utf8) }
                if let retryAfter { headers.append(("Retry-After", String(retryAfter))) }
            case .stall(let seconds):
                try? await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            }
        }
        let type = (try? JSONSerialization.jsonObject(with: request.body) as? [String: Any])?["type"] as? String
        let delivery = Delivery(id: id, timestamp: ts, signatures: sigs, body: request.body, refusal: refusal, status: status,
                                receivedAt: Date(), type: type)
        state.withLock { $0.deliveries.append(delivery) }
        onDelivery(delivery)
        if let refusal {
            return .json(401, Data(#"{"error":"bad_signature","message":"\#(refusal.replacingOccurrences(of: "\"", with: "'"))"}"#.utf8))
        }
        if let answer { return HTTPResponse(status: status, headers: headers + [("Content-Type", "text/html")], body: answer) }
        return HTTPResponse(status: status, headers: headers)
    }
}

import AppStore
import Crypto
import CryptoTesting
import Foundation
import LedgerCore
import Synchronization

/// What to simulate. Everything but `start` has a default; with the same values (seed included)
/// the simulator produces the same notifications, UUIDs and order, byte for byte apart from the
/// ECDSA signatures.
public struct SimulationOptions: Sendable, Equatable {
    public var customers: Int
    public var days: Int
    /// Business time (ms) at which the simulated span begins; it ends `days` later.
    public var start: EpochMillis
    public var seed: UInt64 = 42
    public var bundleId = "com.example.app"
    /// `Sandbox` or `Production`.
    public var environment = "Sandbox"
    /// Sent in `data.appAppleId` for Production (Apple leaves it out in Sandbox).
    public var appAppleId: Int64 = 1_234_567_890
    /// Deliver in a seeded random order instead of the App Store's delivery order.
    public var shuffle = false
    /// Extra deliveries of every notification (identical bytes, as an App Store retry).
    public var duplicates = 0
    /// WeChat mini-program xpay subscribers simulated beside the App Store customers
    /// (`WeChatSimulation`, pushed to /v1/wechat/notifications with its push settings).
    public var wechatSubscribers = 0
    /// Lifecycles that end with a notification whose `data.status` disputes the ledger (test data
    /// for the Apple status check: it says REVOKED about a subscription nothing revoked).
    public var disputedStatuses = 0

    public init(customers: Int, days: Int, start: EpochMillis) {
        self.customers = customers
        self.days = days
        self.start = start
    }

    /// Midnight UTC `days` before `now`, so the simulated span ends today and entitlements are
    /// current; pass an explicit start to reproduce a run on another day.
    public static func defaultStart(days: Int, now: Date = Date()) -> EpochMillis {
        let day: EpochMillis = 86_400_000
        let today = EpochMillis(now.timeIntervalSince1970 * 1000) / day * day
        return today - EpochMillis(days) * day
    }

    func validate() throws(SimulatorError) {
        guard customers >= 1 else { throw .invalidOption("--customers must be at least 1") }
        guard (1...9_200).contains(days) else { throw .invalidOption("--days must be between 1 and 9200 (the test chain's 25 years)") }
        guard ["Sandbox", "Production"].contains(environment) else {
            throw .invalidOption("--environment must be Sandbox or Production, not '\(environment)'")
        }
        guard !bundleId.isEmpty else { throw .invalidOption("--bundle-id must not be empty") }
        guard (0...100).contains(duplicates) else { throw .invalidOption("--duplicates must be between 0 and 100") }
        guard wechatSubscribers >= 0 else { throw .invalidOption("--wechat must be 0 or more") }
        // The seeded chain is valid 2020-01-01 → 2045-01-01 and the service checks it at each signedDate.
        let validity = AppleTestAuthority.ChainOptions().leafValidity
        let end = start.addingReportingOverflow(EpochMillis(days) * 86_400_000)
        guard start >= validity.lowerBound * 1000, !end.overflow, end.partialValue <= validity.upperBound * 1000 else {
            throw .invalidOption("the simulated span must lie between 2020-01-01 and 2045-01-01, where the test chain is valid")
        }
    }
}

/// A customer to look up once the simulation has been posted.
public struct SimulatedCustomer: Sendable, Equatable {
    public var appAccountToken: String
    public var originalTransactionId: String
    public var notifications: Int
    /// The last notification the App Store signed for this customer (`TYPE` or `TYPE/SUBTYPE`).
    public var lastType: String
    public var lastExpiresDate: EpochMillis?
}

/// Turns generated subscription lifecycles into signed App Store Server Notifications V2 and posts
/// them to a running ledger, like the App Store would (`ledger-dev simulate`, `make demo`).
/// The lifecycles come from `LifecycleGenerator`; the signatures from a seeded
/// `AppleTestAuthority`, whose root the service must trust (`serviceEnvironment`).
public struct Simulator: Sendable {
    public let options: SimulationOptions
    public let authority: AppleTestAuthority
    let signer: BulkSigner

    /// `authority` nil: the authority seeded by `options.seed` (stable across runs).
    public init(options: SimulationOptions, authority: AppleTestAuthority? = nil) throws {
        try options.validate()
        self.options = options
        self.authority = try authority ?? AppleTestAuthority.seeded(options.seed)
        signer = try BulkSigner(self.authority)
    }

    public var generator: LifecycleGenerator {
        LifecycleGenerator(
            customers: options.customers, days: options.days, start: options.start, seed: options.seed,
            bundleId: options.bundleId, environment: options.environment,
            // Retries are the simulator's business (--duplicates), so the count stays exact.
            duplicateRate: 0)
    }

    public func lifecycles() -> [SimulatedLifecycle] {
        var all = generator.lifecycles()
        var left = options.disputedStatuses
        for i in all.indices where left > 0 {
            guard let last = all[i].notifications.max(by: { $0.signedDate < $1.signedDate }), last.status == 1 else { continue }
            // Apple's word that the ledger cannot agree with: REVOKED, a minute after the last
            // message, with a transaction that states no revocation.
            var disputed = last
            disputed.notificationType = "DID_CHANGE_RENEWAL_STATUS"
            disputed.subtype = "AUTO_RENEW_DISABLED"
            disputed.notificationUUID = String(format: "d15b07ed-0000-4000-8000-%012x", i)
            disputed.signedDate = last.signedDate + 60_000
            disputed.status = 5
            disputed.transaction.signedDate = AppleTime(disputed.signedDate)
            disputed.renewal.signedDate = AppleTime(disputed.signedDate)
            disputed.renewal.autoRenewStatus = 0
            disputed.deliveredAt = max(last.deliveredAt, disputed.signedDate) + 1_000
            all[i].notifications.append(disputed)
            left -= 1
        }
        return all
    }

    /// The WeChat subscribers (none unless `wechatSubscribers`).
    public var wechat: WeChatSimulation {
        WeChatSimulation(subscribers: options.wechatSubscribers, days: options.days, start: options.start, seed: options.seed)
    }

    /// The environment a `ledger serve` needs to accept this simulation, given where the root was
    /// written (`writeRoot`). A simulated Production also needs LEDGER_APPLE_ALLOW_TEST_ROOTS,
    /// because the service refuses a non-Apple root for Production without it.
    public func serviceEnvironment(rootPath: String) -> [(name: String, value: String)] {
        var environment = [("LEDGER_APPLE_ROOT_CERTS", rootPath),
                           ("LEDGER_APPLE_BUNDLE_IDS", options.bundleId),
                           ("LEDGER_APPLE_ENVIRONMENTS", options.environment),
                           ("LEDGER_APPLE_APP_APPLE_IDS", String(options.appAppleId))]
        if options.environment == "Production" { environment.append(("LEDGER_APPLE_ALLOW_TEST_ROOTS", "true")) }
        if options.wechatSubscribers > 0 {
            environment += WeChatSimulation.environment.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        }
        return environment
    }

    /// Writes the authority's root certificate (DER). An existing file holding a root with the same
    /// key and name is left alone, so a running service's trust store never changes under it.
    /// Returns whether the file was (re)written.
    @discardableResult
    public func writeRoot(to path: String) throws -> Bool {
        let url = URL(fileURLWithPath: path)
        if let existing = FileManager.default.contents(atPath: path),
           let cert = try? X509Certificate(der: [UInt8](existing)),
           cert.subject == authority.root.subject,
           let key = try? cert.publicKey(), let mine = try? authority.root.publicKey(),
           key.subjectPublicKeyInfoDER == mine.subjectPublicKeyInfoDER {
            return false
        }
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(authority.root.der).write(to: url, options: .atomic)
        return true
    }

    /// Every notification signed, in posting order: the App Store's delivery order (or a seeded
    /// shuffle), each followed by its `duplicates` identical retries. `progress` gets the number
    /// of notifications signed so far (from several threads).
    public func deliveries(lifecycles: [SimulatedLifecycle]? = nil, progress: @escaping @Sendable (Int) -> Void = { _ in }) throws -> [SimulatedDelivery] {
        let notifications = (lifecycles ?? self.lifecycles()).flatMap(\.notifications).sorted {
            ($0.deliveredAt, $0.signedDate, $0.notificationUUID) < ($1.deliveredAt, $1.signedDate, $1.notificationUUID)
        }
        let signed = try sign(notifications, progress: progress)
        // WeChat's pushes join the App Store's notifications in delivery order.
        var timed = zip(notifications.map(\.deliveredAt), signed).map { (at: $0, delivery: $1) }
        for push in wechat.pushesInDeliveryOrder() {
            let (path, body, contentType) = try push.request()
            timed.append((push.deliveredAt, SimulatedDelivery(
                notificationUUID: push.label, originalTransactionId: String(push.label.prefix { $0 != " " }),
                type: push.message.text("Event") ?? "wechat", signedDate: push.at, body: body, path: path, contentType: contentType)))
        }
        let ordered = timed.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.map(\.element.delivery)
        var out: [SimulatedDelivery] = []
        out.reserveCapacity(ordered.count * (1 + options.duplicates))
        for d in ordered {
            for _ in 0...options.duplicates { out.append(d) }
        }
        if options.shuffle { Self.shuffle(&out, seed: options.seed) }
        return out
    }

    /// Signs on every core: three ES256 signatures per notification dominate the simulator's cost.
    func sign(_ notifications: [SimulatedNotification], progress: @escaping @Sendable (Int) -> Void) throws -> [SimulatedDelivery] {
        let results = SigningResults()
        let chunk = 64
        let chunks = (notifications.count + chunk - 1) / chunk
        DispatchQueue.concurrentPerform(iterations: chunks) { c in
            let range = (c * chunk)..<min((c + 1) * chunk, notifications.count)
            progress(results.store(chunk: c, Result { try notifications[range].map(delivery(for:)) }))
        }
        return try results.collect(chunks: chunks)
    }

    /// One notification as the App Store would post it: nested transaction and renewal JWS inside
    /// a signed notification, all with this authority's chain.
    public func delivery(for n: SimulatedNotification) throws -> SimulatedDelivery {
        var notification = n.notification
        if options.environment == "Production" { notification.data?.appAppleId = options.appAppleId }
        notification.data?.bundleVersion = "1"
        let body = try signer.body(notification, transaction: n.transaction, renewal: n.renewal)
        return SimulatedDelivery(
            notificationUUID: n.notificationUUID, originalTransactionId: n.transaction.originalTransactionId ?? "",
            type: n.subtype.map { "\(n.notificationType)/\($0)" } ?? n.notificationType,
            signedDate: n.signedDate, body: body)
    }

    /// Fisher–Yates with the generator's SplitMix64, written out so the order depends on the seed
    /// alone and not on the standard library's shuffle algorithm.
    static func shuffle(_ items: inout [SimulatedDelivery], seed: UInt64) {
        guard items.count > 1 else { return }
        var rng = SplitMix64(seed: SplitMix64.mix(seed ^ 0x5348_5546_464C_45))  // "SHUFFLE"
        for i in stride(from: items.count - 1, to: 0, by: -1) {
            let j = Int(rng.next() % UInt64(i + 1))
            items.swapAt(i, j)
        }
    }

    /// The customers to look up afterwards, first `limit` by index; with `entitledAt`, those whose
    /// latest transaction is unexpired and not refunded then come first (their entitlements show).
    public static func customers(_ lifecycles: [SimulatedLifecycle], limit: Int = 5, entitledAt: EpochMillis? = nil) -> [SimulatedCustomer] {
        var chosen = lifecycles
        if let t = entitledAt {
            func entitled(_ l: SimulatedLifecycle) -> Bool {
                guard let last = l.notifications.max(by: { $0.signedDate < $1.signedDate })?.transaction else { return false }
                return last.revocationDate == nil && (last.expiresDate?.millis ?? .min) > t
            }
            chosen = lifecycles.filter(entitled) + lifecycles.filter { !entitled($0) }
        }
        return chosen.prefix(limit).map { l in
            let last = l.notifications.max { ($0.signedDate, $0.notificationUUID) < ($1.signedDate, $1.notificationUUID) }
            return SimulatedCustomer(
                appAccountToken: l.appAccountToken, originalTransactionId: l.originalTransactionId,
                notifications: Set(l.notifications.map(\.notificationUUID)).count,
                lastType: last.map { n in n.subtype.map { "\(n.notificationType)/\($0)" } ?? n.notificationType } ?? "-",
                lastExpiresDate: last?.transaction.expiresDate?.millis)
        }
    }
}

/// The parallel signer's chunks, collected from several threads.
private final class SigningResults: Sendable {
    private let state = Mutex((chunks: [Int: [SimulatedDelivery]](), failure: String?.none, done: 0))

    /// Returns the number of notifications signed so far.
    func store(chunk: Int, _ result: Result<[SimulatedDelivery], any Error>) -> Int {
        state.withLock { s in
            switch result {
            case .success(let d):
                s.chunks[chunk] = d
                s.done += d.count
            case .failure(let e):
                if s.failure == nil { s.failure = "\(e)" }
            }
            return s.done
        }
    }

    func collect(chunks: Int) throws -> [SimulatedDelivery] {
        try state.withLock { s in
            if let f = s.failure { throw AppleTestAuthorityError.crypto("signing a simulated notification failed: \(f)") }
            return (0..<chunks).flatMap { s.chunks[$0] ?? [] }
        }
    }
}

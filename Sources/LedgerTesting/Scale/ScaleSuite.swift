import Foundation
import LedgerCore
import Postgres
import Synchronization
import WeChatPay

/// `ledger-dev scale`: two `ledger serve` processes and one `ledger project` worker on one
/// PostgreSQL (and, when the project's streaming replica runs, reads served by it), under 32
/// clients posting distinct and duplicated signed Apple and WeChat notifications split across both
/// instances, with a rebuild started on one instance mid-run. It proves what a load balancer in
/// front of N instances relies on: acknowledged == stored, no duplicates, gapless positions,
/// checkpoints that only move forward, projections equal to a fresh rebuild, and reads that always
/// see the reader's own writes.
public enum ScaleSuite {
    public struct Options: Sendable {
        public var ledgerBinary: String
        public var serverConninfo: String
        /// LEDGER_TEST_REPLICA_URL (scripts/db.sh replica-start): reads go to the replica when set.
        public var replicaConninfo: String?
        public var duration: Duration
        public var connections: Int
        public var keepDatabase = false
        public var log: @Sendable (String) -> Void

        public init(quick: Bool, ledgerBinary: String? = nil,
                    environment: [String: String] = ProcessInfo.processInfo.environment) throws(ReliabilityError) {
            let reliability = try ReliabilityOptions(ledgerBinary: ledgerBinary, environment: environment)
            self.ledgerBinary = reliability.ledgerBinary
            serverConninfo = reliability.serverConninfo
            replicaConninfo = environment["LEDGER_TEST_REPLICA_URL"].flatMap { $0.isEmpty ? nil : $0 }
            duration = quick ? .seconds(5) : .seconds(20)
            connections = 32
            log = { FileHandle.standardError.write(Data(("scale: " + $0 + "\n").utf8)) }
        }
    }

    public struct Report: Sendable {
        public var sent = 0
        public var acknowledged = 0
        public var stored = 0
        public var duplicates = 0
        public var lost = 0
        public var checks: [ReliabilityReport.Check] = []
        public var notes: [String] = []
        public var passed: Bool { lost == 0 && duplicates == 0 && checks.allSatisfy(\.passed) }

        mutating func check(_ name: String, _ ok: Bool, _ detail: String) {
            checks.append(ReliabilityReport.Check(name: name, passed: ok, detail: detail))
        }

        public var text: String {
            var r = ReliabilityReport(scenario: "scale")
            (r.sent, r.acknowledged, r.stored, r.duplicates, r.lost, r.checks, r.notes) = (sent, acknowledged, stored, duplicates, lost, checks, notes)
            return r.text
        }
    }

    public static let help = """
    usage: ledger-dev scale [--quick] [--ledger PATH] [--keep-database]

    Two `ledger serve` instances and one `ledger project` worker (PATH, default the `ledger` next
    to this executable) on one scratch database of the project cluster (LEDGER_TEST_DATABASE_URL),
    reads on the streaming replica when LEDGER_TEST_REPLICA_URL is set; 32 clients post distinct
    and duplicated Apple and WeChat notifications across both for 20 s (--quick: 5 s) while a
    rebuild runs on one instance. Prints the loss table and every check; exits 1 on any failure.
    """

    public static func main(_ arguments: [String]) async -> Int32 {
        var quick = false, keep = false
        var binary: String?
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--quick": quick = true
            case "--keep-database": keep = true
            case "--ledger" where i + 1 < arguments.count:
                i += 1
                binary = arguments[i]
            case "--help", "-h":
                print(help)
                return 0
            default:
                FileHandle.standardError.write(Data("ledger-dev scale: unknown argument '\(arguments[i])'\n\n\(help)\n".utf8))
                return 2
            }
            i += 1
        }
        do {
            var options = try Options(quick: quick, ledgerBinary: binary)
            options.keepDatabase = keep
            let report = try await run(options)
            print(report.text)
            return report.passed ? 0 : 1
        } catch {
            FileHandle.standardError.write(Data("ledger-dev scale: \(error)\n".utf8))
            return 2
        }
    }

    static let adminToken = "scale-admin-token-0123456789abcdef0123456789abcdef"
    static let appToken = "scale-app-token-0123456789abcdef0123456789abcdef"

    public static func run(_ options: Options) async throws -> Report {
        guard FileManager.default.isExecutableFile(atPath: options.ledgerBinary) else {
            throw ReliabilityError.setup("\(options.ledgerBinary) is not an executable; build it or pass --ledger PATH")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-scale-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var chain = AppleTestAuthority.ChainOptions()
        chain.caCurve = .p256
        let authority = try AppleTestAuthority.mint(chain)
        let rootPath = directory.appendingPathComponent("test-root.der")
        try Data(authority.root.der).write(to: rootPath)
        let database = try TestDatabase.create(migrate: true, serverConninfo: options.serverConninfo, prefix: "ledger_scale")
        defer { if !options.keepDatabase { try? database.drop() } }
        options.log("database \(database.name), logs in \(directory.path)")

        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LEDGER_") }
        environment["LEDGER_DATABASE_URL"] = database.serviceConninfo
        environment["LEDGER_APPLE_ROOT_CERTS"] = rootPath.path
        environment["LEDGER_APPLE_BUNDLE_IDS"] = "com.example"
        environment["LEDGER_APPLE_ENVIRONMENTS"] = "Sandbox,Production"
        environment["LEDGER_APPLE_APP_APPLE_IDS"] = "1234"
        environment["LEDGER_APPLE_ALLOW_TEST_ROOTS"] = "true"
        environment["LEDGER_WECHAT_APPID"] = WxCrypto.appId
        environment["LEDGER_WECHAT_TOKEN"] = WxCrypto.token
        environment["LEDGER_WECHAT_AES_KEY"] = WxCrypto.aesKey
        environment["LEDGER_TOKENS"] = "admin:\(adminToken),app:\(appToken)"
        var replicaURL: String?
        if let replica = options.replicaConninfo, let info = try? ConnectionInfo(parsing: replica) {
            replicaURL = info.with("dbname", database.name).with("user", "ledger_service").conninfo
            environment["LEDGER_READ_DATABASE_URL"] = replicaURL
            _ = database.waitForReplica()
        }

        var instances: [ServiceProcess] = []
        for n in 1...2 {
            var env = environment
            let port = try ServiceProcess.freeLoopbackPort()
            env["LEDGER_LISTEN"] = "127.0.0.1:\(port)"
            instances.append(ServiceProcess(binary: options.ledgerBinary, environment: env, target: try LoopbackTarget(host: "127.0.0.1", port: port),
                                            logURL: directory.appendingPathComponent("serve-\(n).log")))
        }
        let worker = ServiceProcess(binary: options.ledgerBinary, environment: environment, target: instances[0].target,
                                    logURL: directory.appendingPathComponent("project.log"), arguments: ["project"])
        defer {
            for p in instances { p.stopQuietly() }
            worker.stopQuietly()
        }
        for p in instances { try p.start() }
        try worker.start()

        let admin = try database.connect()
        let apple = NotificationMint(authority: authority, notificationsPerStream: 5)
        let wechat = try WeChatDeliveryMint(runTag: apple.runTag)
        // Notification n: every fourth one a WeChat delivery, the rest Apple V2 notifications.
        @Sendable func key(_ n: Int) -> String { n % 4 == 3 ? wechat.dedupeKey(n) : apple.dedupeKey(n) }
        @Sendable func request(_ n: Int) -> LoadRequest? {
            n % 4 == 3 ? (try? wechat.request(n)) : (try? apple.notification(n))?.request
        }
        // Instance 1 posts notification i; instance 2 posts the same one for even i (a duplicate
        // racing it on the other instance) and a distinct one for odd i.
        let perInstance = max(1, options.connections / 2)
        let map: [@Sendable (Int) -> Int] = [{ $0 }, { $0 % 2 == 0 ? $0 : 1_000_000 + $0 }]
        let generators = try (0..<2).map { g in
            try LoadGenerator(target: instances[g].target,
                              options: LoadOptions(connections: perInstance, limit: .duration(options.duration), requestTimeout: .seconds(15),
                                                   recordOutcomes: true),
                              source: { i in request(map[g](i)) })
        }

        let sampler = CheckpointSampler(conninfo: database.adminConninfo)
        let sampling = Task { await sampler.run(every: .milliseconds(200)) }
        let ryw = ReadYourWrite(instances: instances.map(\.target), mint: apple, token: appToken)
        let rywTask = Task { await ryw.run() }
        let readers = Readers(instances: instances.map(\.target), mint: apple, token: appToken)
        let readerTask = Task { await readers.run() }

        options.log("posting for \(options.duration) from \(perInstance * 2) clients across \(instances.map(\.target.description))")
        let started = ContinuousClock.now
        async let loads = withTaskGroup(of: (Int, LoadReport).self) { group in
            for (g, generator) in generators.enumerated() { group.addTask { (g, await generator.run()) } }
            var out: [LoadReport?] = [nil, nil]
            for await (g, r) in group { out[g] = r }
            return out.map { $0! }
        }
        // A rebuild on instance 1 while both ingest.
        try await Task.sleep(for: options.duration / 2)
        let rebuild = adminRequest(instances[0].target, method: "POST", path: "/v1/admin/rebuild", body: "{}")
        let reports = await loads
        let elapsed = ContinuousClock.now - started
        ryw.stop()
        readers.stop()
        await rywTask.value
        await readerTask.value

        var report = Report()
        report.check("rebuild during ingestion answered", rebuild.status == 200, "POST /v1/admin/rebuild on instance 1 mid-run: \(rebuild.status) \(rebuild.body.prefix(200))")

        // The worker (and the live hooks) finish; then the log is audited from the database itself.
        let caughtUp = try await ProjectionCatchUp.wait(admin, timeout: .seconds(60)) != nil
        sampling.cancel()
        _ = await sampling.value
        report.check("projections caught up", caughtUp, caughtUp ? "every checkpoint at the head" : "a checkpoint is still behind after 60 s")

        var sent = Set<String>(), acknowledged = Set<String>()
        for (g, load) in reports.enumerated() {
            for (i, outcome) in load.outcomes.enumerated() {
                let k = key(map[g](i))
                switch outcome {
                case .notSent, .notConnected: continue
                case .transportError:
                    report.sent += 1
                    sent.insert(k)
                case .status(let status):
                    report.sent += 1
                    sent.insert(k)
                    if status == 200 { report.acknowledged += 1; acknowledged.insert(k) }
                }
            }
        }
        let rywKeys = ryw.acknowledgedKeys
        sent.formUnion(rywKeys)
        acknowledged.formUnion(rywKeys)
        report.sent += rywKeys.count
        report.acknowledged += rywKeys.count

        var stored: [String: Int] = [:]
        for row in try admin.query("SELECT dedupe_key, count(*) AS n FROM events WHERE source IN ('apple', 'wechat') GROUP BY dedupe_key").rows {
            stored[try row.decode(String.self, "dedupe_key")] = Int(try row.decode(Int64.self, "n"))
        }
        report.stored = sent.filter { stored[$0] != nil }.count
        report.duplicates = stored.values.reduce(0) { $0 + max(0, $1 - 1) }
        let lost = acknowledged.filter { stored[$0] == nil }
        report.lost = lost.count
        if !lost.isEmpty { report.notes.append("lost (first 5): \(lost.sorted().prefix(5).joined(separator: ", "))") }
        let phantoms = Set(stored.keys).subtracting(sent)
        report.check("no event that was never sent", phantoms.isEmpty, "\(phantoms.count) stored keys were never posted")
        let statuses = reports.map(\.statusCounts).reduce(into: [Int: Int]()) { $0.merge($1, uniquingKeysWith: +) }
        report.check("every post answered 200", statuses.keys.allSatisfy { $0 == 200 } && reports.allSatisfy { $0.transportErrors == 0 },
                     "statuses \(statuses.sorted { $0.key < $1.key }); transport errors \(reports.map(\.transportErrors))")

        let positions = try admin.query("SELECT count(*) AS n, COALESCE(min(position), 0) AS lo, COALESCE(max(position), 0) AS hi FROM events").first!
        let (n, lo, hi) = (try positions.decode(Int64.self, "n"), try positions.decode(Int64.self, "lo"), try positions.decode(Int64.self, "hi"))
        report.check("positions gapless", n == hi && (n == 0 || lo == 1), "\(n) events at positions \(lo)…\(hi)")
        let regressions = sampler.regressions
        report.check("checkpoints only move forward", regressions.isEmpty && sampler.samples > 3,
                     regressions.isEmpty ? "\(sampler.samples) samples of every projection checkpoint" : "went back: \(regressions.prefix(3))")
        let difference = try await ProjectionConsistency.compareWithRebuild(conninfo: database.adminConninfo)
        report.check("projections equal a fresh rebuild", difference == nil, difference ?? "every projection table and every subscription's state equal")
        // The auditor's proof over everything two instances and a rebuild wrote (issue 25 item 6).
        let verified = ChainVerification.run(binary: options.ledgerBinary, environment: environment)
        report.check("ledger verify: hash chain and every signature", verified.passed, verified.detail)
        report.check("reads see their own writes", ryw.violations == 0 && ryw.checked > 0,
                     "\(ryw.checked) posts each read back at once with ?minPosition= from the other instance; \(ryw.violations) missed")

        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        report.notes.append(String(format: "throughput: %d posts acknowledged in %.1f s = %.0f/s across two instances (%d stored events)",
                                   report.acknowledged, seconds, Double(report.acknowledged) / seconds, n))
        var served: [String: Int] = [:]
        for target in instances.map(\.target) {
            let metrics = adminRequest(target, method: "GET", path: "/metrics", body: nil).body
            for line in metrics.split(separator: "\n") where line.hasPrefix("ledger_reads_total{source=") {
                let source = line.split(separator: "\"")[1]
                served[String(source), default: 0] += Int(line.split(separator: " ").last ?? "") ?? 0
            }
        }
        if replicaURL != nil {
            let total = served.values.reduce(0, +)
            report.notes.append(String(format: "reads: %d answered (%d by readers, %d read-your-write); the replica served %d (%.0f%%), the primary %d",
                                       total, readers.answered, ryw.checked, served["replica"] ?? 0,
                                       total > 0 ? 100 * Double(served["replica"] ?? 0) / Double(total) : 0, served["primary"] ?? 0))
        } else {
            report.notes.append("reads: no replica (LEDGER_TEST_REPLICA_URL unset): every read on the primary")
        }
        report.notes.append("\(report.sent) posts of \(sent.count) distinct notifications: \(report.sent - sent.count) were posted to both instances at once")
        return report
    }

    /// One request on a fresh connection with the admin token; status 0 when it failed to connect.
    static func adminRequest(_ target: LoopbackTarget, method: String, path: String, body: String?, token: String = adminToken,
                             timeout: Duration = .seconds(600)) -> (status: Int, body: String) {
        guard let c = try? LoopbackConnection(target, timeout: timeout) else { return (0, "cannot connect") }
        defer { c.close() }
        let request = LoadRequest(method: method, path: path,
                                  headers: [("Authorization", "Bearer \(token)")] + (body == nil ? [] : [("Content-Type", "application/json")]),
                                  body: Data((body ?? "").utf8))
        guard (try? c.send(request.encoded(authority: target.authority))) != nil, let answer = try? c.readResponse() else {
            return (0, "no answer")
        }
        return (answer.status, String(decoding: answer.body, as: UTF8.self))
    }
}

/// Samples every projection checkpoint; a value lower than one seen before is a regression.
final class CheckpointSampler: Sendable {
    let conninfo: String
    private let state = Mutex<(last: [String: Int64], samples: Int, regressions: [String])>(([:], 0, []))

    init(conninfo: String) { self.conninfo = conninfo }

    func run(every interval: Duration) async {
        guard let connection = try? TestDatabase.connect(conninfo) else { return }
        while !Task.isCancelled {
            if let rows = try? connection.query("SELECT projection, position FROM projection_checkpoints").rows {
                state.withLock { s in
                    for row in rows {
                        guard let name = try? row.decode(String.self, "projection"), let p = try? row.decode(Int64.self, "position") else { continue }
                        if let before = s.last[name], p < before { s.regressions.append("\(name) \(before) → \(p)") }
                        s.last[name] = max(p, s.last[name] ?? 0)
                    }
                    s.samples += 1
                }
            }
            try? await Task.sleep(for: interval)
        }
    }

    var samples: Int { state.withLock { $0.samples } }
    var regressions: [String] { state.withLock { $0.regressions } }
}

/// Posts a fresh notification to one instance and at once reads it back from the other with
/// `?minPosition=` (the position the append answered): the read must find it, whether the replica
/// or the primary answers.
final class ReadYourWrite: Sendable {
    let instances: [LoopbackTarget]
    let mint: NotificationMint
    let token: String
    private let stopped = Atomic<Bool>(false)
    private let state = Mutex<(checked: Int, violations: Int, keys: Set<String>)>((0, 0, []))

    init(instances: [LoopbackTarget], mint: NotificationMint, token: String) {
        self.instances = instances
        self.mint = mint
        self.token = token
    }

    func stop() { stopped.store(true, ordering: .relaxed) }

    func run() async {
        var k = 0
        while !stopped.load(ordering: .relaxed) {
            let n = 2_000_000 + k * 5  // its own stream each time
            k += 1
            guard let minted = try? mint.notification(n) else { continue }
            let post = ScaleSuite.adminRequest(instances[k % 2], method: "POST", path: "/v1/apple/notifications",
                                               body: String(decoding: minted.body, as: UTF8.self), timeout: .seconds(15))
            guard post.status == 200,
                  let json = try? JSONSerialization.jsonObject(with: Data(post.body.utf8)) as? [String: Any],
                  let position = (json["position"] as? NSNumber)?.int64Value else { continue }
            let read = ScaleSuite.adminRequest(instances[(k + 1) % 2], method: "GET",
                                               path: "/v1/subscriptions/\(minted.streamId)?environment=Sandbox&minPosition=\(position)",
                                               body: nil, token: token, timeout: .seconds(15))
            state.withLock { s in
                s.checked += 1
                s.keys.insert(minted.dedupeKey)
                if read.status != 200 { s.violations += 1 }
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    var checked: Int { state.withLock { $0.checked } }
    var violations: Int { state.withLock { $0.violations } }
    var acknowledgedKeys: Set<String> { state.withLock { $0.keys } }
}

/// App reads without a position, alternating instances, over the subscriptions being written.
final class Readers: Sendable {
    let instances: [LoopbackTarget]
    let mint: NotificationMint
    let token: String
    private let stopped = Atomic<Bool>(false)
    private let count = Atomic<Int>(0)

    init(instances: [LoopbackTarget], mint: NotificationMint, token: String) {
        self.instances = instances
        self.mint = mint
        self.token = token
    }

    func stop() { stopped.store(true, ordering: .relaxed) }

    func run() async {
        await withTaskGroup(of: Void.self) { group in
            for r in 0..<4 {
                group.addTask { [self] in
                    var i = r
                    while !stopped.load(ordering: .relaxed) {
                        let stream = mint.streamId(i * 7 % 2000)
                        let answer = ScaleSuite.adminRequest(instances[i % 2], method: "GET",
                                                             path: "/v1/subscriptions/\(stream)?environment=Sandbox", body: nil, token: token,
                                                             timeout: .seconds(15))
                        if answer.status != 0 { count.add(1, ordering: .relaxed) }
                        i += 4
                        try? await Task.sleep(for: .milliseconds(5))
                    }
                }
            }
        }
    }

    var answered: Int { count.load(ordering: .relaxed) }
}

/// Signed secure-mode (JSON, AES) WeChat goods deliveries of distinct orders, each for its own
/// subscription, as WeChat pushes them.
final class WeChatDeliveryMint: Sendable {
    let crypto: WxCrypto
    let runTag: UInt32

    init(runTag: UInt32) throws {
        crypto = try WxCrypto()
        self.runTag = runTag
    }

    func orderId(_ n: Int) -> String { "SCALE\(runTag)-\(n)" }
    func dedupeKey(_ n: Int) -> String { DedupeKey.wechatDelivery(orderId(n)) }
    func originalTransactionId(_ n: Int) -> String { String(9_000_000_000_000_000 + UInt64(runTag % 100_000) * 1_000_000_000 + UInt64(n)) }

    func request(_ n: Int) throws -> LoadRequest {
        let now = Int64(Date().timeIntervalSince1970)
        let members: [(String, WxValue)] = [
            ("ToUserName", .s("gh_97417a04a28d")), ("FromUserName", .s("o_wechat_official")), ("CreateTime", .i(now)),
            ("MsgType", .s("event")), ("Event", .s(XPayEventName.goodsDeliver)),
            ("OpenId", .s("o_scale_\(n % 500)")), ("OutTradeNo", .s(orderId(n))), ("Env", .i(0)),
            ("GoodsInfo", .o([("ProductId", .s("com.example.monthly")), ("Quantity", .i(1)), ("OrigPrice", .i(3000)), ("ActualPrice", .i(3000))])),
            ("WeChatPayInfo", .o([("MchOrderNo", .s("M" + orderId(n))), ("TransactionId", .s("T" + orderId(n))), ("PaidTime", .i(now - 5))])),
            ("AppleSubscriptionInfo", .o([("OriginalTransactionId", .s(originalTransactionId(n))), ("AutoRenewStatus", .i(1)),
                                          ("RenewalDate", .i((now + 30 * 86_400) * 1000))])),
        ]
        let ts = String(now), nonce = "scale\(n)"
        let encrypt = try crypto.encrypt(WxValue.o(members).json(), nonce: nonce, timestamp: now)
        let signature = PushSignature.compute([WxCrypto.token, ts, nonce])
        let msgSignature = PushSignature.compute([WxCrypto.token, ts, nonce, encrypt])
        return LoadRequest(
            method: "POST",
            path: "/v1/wechat/notifications?signature=\(signature)&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(msgSignature)",
            headers: [("Content-Type", "application/json")],
            body: Data(WxValue.o([("ToUserName", .s("gh_97417a04a28d")), ("Encrypt", .s(encrypt))]).json().utf8))
    }
}

import Foundation
import Synchronization
import LedgerCommandLine
import LedgerCore
import LedgerTesting

/// `ledger-dev simulate`: feeds a running service realistic, signed App Store notifications.
enum SimulateCommand {
    static let help = """
    usage: ledger-dev simulate [--customers N] [--days D] [options]
           ledger-dev simulate --mint-root PATH [--seed S] [--bundle-id ID] [--environment E]

    Generates realistic subscription lifecycles (monthly and yearly products, trials, renewals,
    billing failures with grace and recovery, voluntary churn, refunds and reversals, upgrades and
    downgrades, price increases), signs each App Store Server Notification V2 with a test authority
    derived from the seed, and POSTs them to URL/v1/apple/notifications. With --wechat, WeChat
    mini-program xpay subscribers too (signing, a goods-deliver push per paid order with its price,
    unsigning, refunds, re-signing), sealed in secure mode and POSTed to URL/v1/wechat/notifications.
    The service must trust the authority's root (and know the simulated WeChat's push settings):
    this command writes the root to a file and prints the environment line to start `ledger serve`
    with. Everything is deterministic from the seed and the start day.

      --customers N        App Store subscribers to simulate (default 50)
      --wechat N           WeChat xpay subscribers to simulate besides (default 0; the environment
                           line then names the simulated WeChat's push settings, a demo's only)
      --days D             length of the simulated span, ending at today's midnight UTC (default 120)
      --start MS           start of the span in epoch milliseconds instead (reproduces a run exactly)
      --seed S             seed of the lifecycles, the order and the authority's keys (default 42)
      --url URL            base URL of the service (default http://127.0.0.1:8080); loopback only
      --allow-remote       allow a non-loopback URL (a staging service you own)
      --shuffle            post in a seeded random order instead of the App Store's delivery order
      --duplicates K       post every notification K more times, identical bytes (default 0)
      --disputed-statuses N  end N lifecycles with a notification whose data.status (REVOKED) the
                           ledger disagrees with: test data for the drift page's Apple status check
      --concurrency C      requests in flight (default 8)
      --bundle-id ID       bundleId of the simulated app (default com.example.app)
      --environment E      Sandbox or Production (default Sandbox)
      --app-apple-id N     appAppleId sent for Production (default 1234567890)
      --root-file PATH     where to write the authority's root certificate (DER)
                           (default: $TMPDIR/ledger-simulator-root-SEED.der)
      --mint-root PATH     write the root certificate to PATH, print the service's environment
                           line on standard output, and exit without posting
      --dry-run            generate and sign, print the summary, post nothing

    Exit status: 0 when every request was answered 200 (stored or duplicate), 1 otherwise.
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(
            raw, command: "simulate",
            valued: ["customers", "wechat", "days", "start", "seed", "url", "duplicates", "concurrency", "bundle-id", "disputed-statuses",
                     "environment", "app-apple-id", "root-file", "mint-root"],
            boolean: ["shuffle", "allow-remote", "dry-run"], help: help)
        guard args.positionals.isEmpty else {
            throw CommandFailure(message: "unexpected argument \(args.positionals[0]); see ledger-dev simulate --help", exitCode: 2)
        }
        func int(_ name: String, _ d: Int) throws -> Int {
            do { return try args.int(name, default: d) } catch { throw CommandFailure(message: "\(error)", exitCode: 2) }
        }
        let days = try int("days", 120)
        let seed = try unsigned(args, "seed", default: 42)
        var options = SimulationOptions(
            customers: try int("customers", 50), days: days,
            start: args.options["start"] != nil
                ? try int64(args, "start", default: 0)
                : SimulationOptions.defaultStart(days: days))
        options.seed = seed
        options.bundleId = args.options["bundle-id"] ?? options.bundleId
        options.environment = args.options["environment"] ?? options.environment
        options.appAppleId = try int64(args, "app-apple-id", default: options.appAppleId)
        options.shuffle = args.has("shuffle")
        options.duplicates = try int("duplicates", 0)
        options.wechatSubscribers = try int("wechat", 0)
        options.disputedStatuses = try int("disputed-statuses", 0)
        let simulator: Simulator
        do { simulator = try Simulator(options: options) } catch {
            throw CommandFailure(message: "\(error)", exitCode: 2)
        }

        if let path = args.options["mint-root"] {
            let absolute = absolutePath(path)
            try writeRoot(simulator, absolute)
            note("wrote the simulator's root certificate (seed \(seed)) to \(absolute); start the service with:")
            print(envLine(simulator, absolute))
            return
        }

        let tmp = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        let rootPath = absolutePath(args.options["root-file"] ?? "\(tmp)/ledger-simulator-root-\(seed).der")
        let baseURL = args.options["url"] ?? "http://127.0.0.1:8080"
        let poster: NotificationPoster?
        do {
            poster = args.has("dry-run") ? nil : try NotificationPoster(
                baseURL: baseURL,
                concurrency: max(1, try int("concurrency", 8)), allowRemote: args.has("allow-remote"))
        } catch {
            throw CommandFailure(message: "\(error)", exitCode: 2)
        }
        try writeRoot(simulator, rootPath)

        let lifecycles = simulator.lifecycles()
        let wechat = simulator.wechat.lifecycles()
        let pushCount = wechat.reduce(0) { $0 + $1.pushes.count }
        let notificationCount = lifecycles.reduce(0) { $0 + $1.notifications.count } + pushCount
        // Signed bodies are held in memory until posted (about 13 KB each; retries share them).
        guard notificationCount <= maxNotifications else {
            throw CommandFailure(
                message: "\(options.customers) customers over \(days) days make \(notificationCount) notifications, more than the "
                    + "\(maxNotifications) one run holds in memory (about 13 KB each); use fewer --customers or --days", exitCode: 2)
        }
        let signing = ProgressBar(total: notificationCount, label: "signing")
        let signStart = Date()
        // ProgressBar is not thread-safe and both phases report from several threads.
        let barLock = Mutex(())
        let deliveries = try simulator.deliveries(lifecycles: lifecycles) { n in barLock.withLock { _ in signing.update(n) } }
        signing.finish(notificationCount)
        let signSeconds = Date().timeIntervalSince(signStart)

        note("trusting the simulator's root: \(envLine(simulator, rootPath))")
        var tally = DeliveryTally()
        var postSeconds = 0.0
        if let poster {
            let posting = ProgressBar(total: deliveries.count, label: "posting")
            let postStart = Date()
            tally = await poster.post(deliveries) { n in barLock.withLock { _ in posting.update(n) } }
            posting.finish(tally.sent)
            postSeconds = Date().timeIntervalSince(postStart)
            print("posted to \(poster.endpoint.absoluteString)")
        }
        printSummary(options: options, notifications: notificationCount, deliveries: deliveries.count,
                     signSeconds: signSeconds, postSeconds: postSeconds, tally: tally, posted: poster != nil,
                     customers: Simulator.customers(lifecycles, entitledAt: simulator.wechat.end),
                     wechat: Array((wechat.filter { $0.isEntitled(at: $0.end - 1) } + wechat.filter { !$0.isEntitled(at: $0.end - 1) && !$0.pushes.isEmpty }).prefix(3)),
                     pushes: pushCount, baseURL: baseURL)
        if poster != nil, tally.failures > 0 || tally.sent != deliveries.count {
            var message = "\(tally.failures) of \(tally.sent) requests were not answered 200 (first errors in the table)"
            if tally.otherStatuses[401] != nil {
                message += "; on untrusted_chain the service does not trust seed \(seed): start it with \(envLine(simulator, rootPath))"
            }
            throw CommandFailure(message: message)
        }
    }

    static let maxNotifications = 100_000

    static func printSummary(options: SimulationOptions, notifications: Int, deliveries: Int, signSeconds: Double,
                             postSeconds: Double, tally: DeliveryTally, posted: Bool, customers: [SimulatedCustomer],
                             wechat: [WeChatSimulatedLifecycle] = [], pushes: Int = 0, baseURL: String) {
        func row(_ name: String, _ value: String) { print(name.padding(toLength: 26, withPad: " ", startingAt: 0) + value) }
        let startDay = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(options.start) / 1000))
        print("")
        row("customers", "\(options.customers) over \(options.days) days from \(startDay) (seed \(options.seed))")
        if options.wechatSubscribers > 0 { row("WeChat subscribers", "\(options.wechatSubscribers) (\(pushes) pushes)") }
        row("notifications", "\(notifications) signed in \(String(format: "%.2f", signSeconds)) s")
        row("order", options.shuffle ? "shuffled (seeded)" : "App Store delivery order")
        row("deliveries", "\(deliveries) (each notification \(1 + options.duplicates)×)")
        if posted {
            row("sent", "\(tally.sent) in \(String(format: "%.2f", postSeconds)) s (\(String(format: "%.0f", Double(tally.sent) / max(postSeconds, 0.001))) req/s)")
            row("200 stored", "\(tally.stored)")
            row("200 duplicate", "\(tally.duplicate)")
            if tally.wechatAccepted > 0 { row("200 WeChat push", "\(tally.wechatAccepted)") }
            if tally.otherSuccess > 0 { row("200 other body", "\(tally.otherSuccess)") }
            for (status, count) in tally.otherStatuses.sorted(by: { $0.key < $1.key }) { row("HTTP \(status)", "\(count)") }
            if tally.transportErrors > 0 { row("no answer", "\(tally.transportErrors)") }
            if !tally.firstErrors.isEmpty {
                print("\nfirst errors:")
                for e in tally.firstErrors { print("  " + e) }
            }
        } else {
            row("sent", "nothing (--dry-run)")
        }
        print("\nsample customers (appAccountToken = customerId of the entitlements API):")
        print("  appAccountToken                       originalTransactionId  events  last notification")
        for c in customers {
            print("  \(c.appAccountToken)  \(c.originalTransactionId.padding(toLength: 21, withPad: " ", startingAt: 0))  "
                  + "\(String(c.notifications).padding(toLength: 6, withPad: " ", startingAt: 0))  \(c.lastType)")
        }
        if !wechat.isEmpty {
            print("\nsample WeChat subscribers (openid = customerId of the entitlements API):")
            print("  openid                                originalTransactionId  orders")
            for l in wechat {
                print("  \(l.openId.padding(toLength: 36, withPad: " ", startingAt: 0))  "
                      + "\(l.originalTransactionId.padding(toLength: 21, withPad: " ", startingAt: 0))  \(l.orders.filter { $0.paid < l.end }.count)")
            }
        }
        if let c = customers.first {
            print("\ntry (with a token of role app or auditor from LEDGER_TOKENS):")
            print("  curl -H \"Authorization: Bearer $TOKEN\" \(baseURL)/v1/subscriptions/\(c.originalTransactionId)")
            print("  curl -H \"Authorization: Bearer $TOKEN\" \(baseURL)/v1/customers/\(c.appAccountToken)/entitlements")
        }
    }

    static func envLine(_ s: Simulator, _ rootPath: String) -> String {
        s.serviceEnvironment(rootPath: rootPath).map { "\($0.name)=\(shellQuoted($0.value))" }.joined(separator: " ")
    }

    static func writeRoot(_ s: Simulator, _ path: String) throws {
        do { try s.writeRoot(to: path) } catch {
            throw CommandFailure(message: "cannot write the root certificate to \(path): \(error.localizedDescription)")
        }
    }

    static func unsigned(_ args: Arguments, _ name: String, default d: UInt64) throws -> UInt64 {
        guard let v = args.options[name] else { return d }
        guard let n = UInt64(v.filter { $0 != "_" }) else {
            throw CommandFailure(message: "option --\(name): '\(v)' is not a non-negative integer", exitCode: 2)
        }
        return n
    }

    static func int64(_ args: Arguments, _ name: String, default d: Int64) throws -> Int64 {
        guard let n = Int64(exactly: try unsigned(args, name, default: UInt64(d))) else {
            throw CommandFailure(message: "option --\(name): \(args.options[name] ?? "") is too large", exitCode: 2)
        }
        return n
    }

    static func absolutePath(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// Values are paths and identifiers; quote only when the shell would split or expand them.
    static func shellQuoted(_ v: String) -> String {
        let plain = v.allSatisfy { $0.isLetter || $0.isNumber || "/._-,:+=@".contains($0) }
        return plain && !v.isEmpty ? v : "'" + v.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    static func note(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }
}

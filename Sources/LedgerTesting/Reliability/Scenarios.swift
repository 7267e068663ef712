import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The five scenarios of issue 6. Each runs a bounded load, breaks something on purpose, and
/// audits the event log against what the clients were told.
enum Scenarios {
    /// Statuses a webhook may answer while things break: 200 (stored) or 503 (retry later).
    static func unexpectedStatuses(_ load: LoadReport) -> [Int: Int] {
        load.statusCounts.filter { $0.key != 200 && $0.key != 503 }
    }

    static func statusDetail(_ load: LoadReport) -> String {
        let bad = unexpectedStatuses(load)
        if bad.isEmpty { return "only 200 and 503: \(load.summary)" }
        let sample = bad.keys.sorted().compactMap { load.sampleBodies[$0] }.first ?? "-"
        return "unexpected \(bad.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " ")); e.g. \(sample)"
    }

    static func postingOptions(_ h: Harness, duration: Duration, connections: Int? = nil, requestTimeout: Duration = .seconds(15)) -> LoadOptions {
        LoadOptions(connections: connections ?? h.options.connections, limit: .duration(duration), requestTimeout: requestTimeout,
                    reconnectDelay: .milliseconds(50), recordOutcomes: true)
    }

    /// Waits (bounded) until the load has at least `count` acknowledgements.
    static func waitForAcknowledgements(_ generator: LoadGenerator, atLeast count: Int, within: Duration = .seconds(30)) async throws -> Bool {
        let deadline = monotonicNanos() + nanos(within)
        while generator.progress.ok < count {
            if monotonicNanos() >= deadline { return false }
            try await Task.sleep(for: .milliseconds(20))
        }
        return true
    }

    // MARK: kill -9

    static func kill9(_ h: Harness) async throws -> ReliabilityReport {
        var report = ReliabilityReport(scenario: "kill9")
        let mint = NotificationMint(authority: h.authority)
        try h.service.start()
        // Longer than the scenario can take: the controller stops the load a third of the load
        // duration after the last restart answered, so a slow restart (a busy machine) cannot
        // outlast the load and leave the next kill without traffic.
        let generator = try LoadGenerator(target: h.service.target, options: postingOptions(h, duration: h.options.loadDuration + .seconds(90)),
                                          source: mint.loadSource())
        let running = Task { await generator.run() }
        let kills = 2
        var restarted = 0
        var killFailure: (any Error)?
        do {
            for k in 1...kills {
                try await Task.sleep(for: h.options.loadDuration / (kills + 1))
                let acknowledgedBefore = generator.progress.ok
                guard try await waitForAcknowledgements(generator, atLeast: acknowledgedBefore + 1, within: .seconds(15)) else {
                    report.check("load acknowledged before kill \(k)", false, "no 200 within 15 s; service log:\n\(h.service.logTail())")
                    break
                }
                try h.service.kill9()
                h.options.log("kill9: killed the service (-9) with \(generator.progress.ok) acknowledged so far")
                try await Task.sleep(for: .milliseconds(300))
                try h.service.start()
                restarted += 1
            }
            if restarted == kills {
                let acknowledged = generator.progress.ok
                if !(try await waitForAcknowledgements(generator, atLeast: acknowledged + 1, within: .seconds(15))) {
                    report.check("load acknowledged after the last restart", false, "no 200 within 15 s; service log:\n\(h.service.logTail())")
                }
                try await Task.sleep(for: h.options.loadDuration / (kills + 1))
            }
        } catch {
            killFailure = error
        }
        generator.stop()
        let load = await running.value
        if let killFailure { throw killFailure }
        try h.tally(&report, outcomes: load.outcomes, mint: mint)
        try await repostFailed(h, &report, outcomes: load.outcomes, mint: mint)
        report.check("service killed and restarted", restarted == kills, "\(restarted) of \(kills) kill -9 / restart cycles")
        report.check("answers", unexpectedStatuses(load).isEmpty, statusDetail(load))
        report.check("load acknowledged", report.acknowledged > 0, "\(report.acknowledged) notifications acknowledged")
        report.notes.append("transport errors (killed connections, refused while down): \(load.transportErrorKinds)")
        return report
    }

    /// What a sender does after a crash (README: "re-posted, they are answered as duplicates"):
    /// every request that got no answer (connection reset or refused mid-request by the fault) or
    /// a 503 is posted again once the service recovered, like a sender's retry. Each must be
    /// answered 200 — as a duplicate when the crashed process (or database) had committed it,
    /// stored now otherwise — and afterwards each of those notifications is in the log exactly
    /// once. Re-posted concurrently (8 connections); in quick mode at most `quickLimit` of them,
    /// spread evenly over the run (an outage fails thousands), every one in a full run.
    static func repostFailed(_ h: Harness, _ report: inout ReliabilityReport, outcomes: [RequestOutcome], mint: NotificationMint,
                             fault: String = "the kill", quickLimit: Int = 400) async throws {
        let allFailed = outcomes.indices.filter { outcomes[$0] == .transportError || outcomes[$0] == .status(503) }
        let stride = h.options.quick && allFailed.count > quickLimit ? Double(allFailed.count) / Double(quickLimit) : 1
        let failed = stride == 1 ? allFailed : (0..<quickLimit).map { allFailed[Int(Double($0) * stride)] }
        let before = try h.storedKeys()
        var answers: [Int: Int] = [:]
        var notOK: [String] = []
        if !failed.isEmpty {
            let generator = try LoadGenerator(
                target: h.service.target,
                options: LoadOptions(connections: min(8, failed.count), limit: .count(failed.count), requestTimeout: .seconds(15),
                                     reconnectDelay: .milliseconds(50), recordOutcomes: true),
                source: { [failed] i in i < failed.count ? (try? mint.notification(failed[i]))?.request : nil })
            let load = await generator.run()
            for (i, outcome) in load.outcomes.enumerated() where i < failed.count {
                let status: Int
                switch outcome {
                case .status(let s): status = s
                default: status = -1
                }
                answers[status, default: 0] += 1
                if status != 200, notOK.count < 5 { notOK.append("\(mint.dedupeKey(failed[i])) → \(status == -1 ? "\(outcome)" : String(status))") }
            }
            let unanswered = failed.count - load.outcomes.prefix(failed.count).count
            if unanswered > 0 { answers[-2, default: 0] += unanswered }
        }
        let after = try h.storedKeys()
        let keys = failed.map { mint.dedupeKey($0) }
        let wereStored = keys.filter { before[$0] != nil }.count
        let notOnce = keys.filter { after[$0] != 1 }
        let sampled = failed.count < allFailed.count ? " (an even sample of the \(allFailed.count) that failed)" : ""
        report.check("failed requests re-posted after \(fault) answered 200", !failed.isEmpty && answers.keys.allSatisfy { $0 == 200 },
                     failed.isEmpty ? "no request failed during \(fault): nothing re-posted, so nothing shown (the fault missed the load)"
                        : "\(failed.count) re-posted\(sampled): answers \(answers.sorted { $0.key < $1.key }); \(wereStored) had been stored before (duplicates), \(failed.count - wereStored) not stored before the re-post" + (notOK.isEmpty ? "" : "; not 200: \(notOK)"))
        report.check("re-posted notifications stored exactly once", notOnce.isEmpty,
                     notOnce.isEmpty ? "each of the \(keys.count) in the log once" : "\(notOnce.count) not stored exactly once, e.g. \(notOnce.prefix(3)) (rows \(notOnce.prefix(3).map { after[$0] ?? 0 }))")
    }

    // MARK: PostgreSQL outage

    /// How PostgreSQL goes away in an outage scenario (`scripts/db.sh` verb).
    enum Outage: String {
        /// `stop`: a fast shutdown (clients disconnected, a checkpoint written).
        case stop
        /// `crash`: an immediate shutdown — no checkpoint; crash recovery from the WAL at start.
        case crash
        /// `kill-postmaster`: kill -9 of the postmaster; its backends die with it; recovery at start.
        case killPostmaster = "kill-postmaster"

        var scenario: String {
            switch self {
            case .stop: "postgres-outage"
            case .crash: "postgres-crash"
            case .killPostmaster: "postgres-kill9"
            }
        }
    }

    static func postgresOutage(_ h: Harness, _ outage: Outage = .stop) async throws -> ReliabilityReport {
        var report = ReliabilityReport(scenario: outage.scenario)
        guard let script = h.options.databaseScript, FileManager.default.isExecutableFile(atPath: script) else {
            throw ReliabilityError.setup("LEDGER_TEST_DB_SCRIPT must name scripts/db.sh to stop and start PostgreSQL")
        }
        let mint = NotificationMint(authority: h.authority)
        try h.service.start()
        let before: Duration = h.options.quick ? .milliseconds(1500) : .seconds(3)
        let recoveryBound: Duration = .seconds(30)
        // Longer than the scenario can take: the controller stops the load once recovery is seen.
        let generator = try LoadGenerator(
            target: h.service.target,
            options: postingOptions(h, duration: before + h.options.outageDuration + recoveryBound + .seconds(10), requestTimeout: .seconds(20)),
            source: mint.loadSource())
        let running = Task { await generator.run() }
        var recoverySeconds: Double?
        var outageFailure: (any Error)?
        do {
            try await Task.sleep(for: before)
            try runScript(script, outage.rawValue)
            let stoppedAt = generator.progress
            h.options.log("\(outage.scenario): PostgreSQL \(outage == .stop ? "stopped" : "crashed (\(outage.rawValue))") with \(stoppedAt.ok) acknowledged")
            try await Task.sleep(for: h.options.outageDuration)
            let duringOutage = generator.progress.ok - stoppedAt.ok
            report.notes.append("acknowledged while PostgreSQL was down (in flight at the stop): \(duringOutage)")
            try runScript(script, "start")
            let restartedAt = monotonicNanos()
            let okAtRestart = generator.progress.ok
            h.options.log("\(outage.scenario): PostgreSQL started again")
            if try await waitForAcknowledgements(generator, atLeast: okAtRestart + 10, within: recoveryBound) {
                recoverySeconds = Double(monotonicNanos() - restartedAt) / 1e9
            }
            try await Task.sleep(for: .seconds(1))
        } catch {
            outageFailure = error
            try? runScript(script, "start")
        }
        generator.stop()
        let load = await running.value
        if let outageFailure { throw outageFailure }
        try h.tally(&report, outcomes: load.outcomes, mint: mint)
        try await repostFailed(h, &report, outcomes: load.outcomes, mint: mint, fault: "the outage")
        report.check("no 500, only 200 or 503", unexpectedStatuses(load).isEmpty, statusDetail(load))
        report.check("clients saw the outage as 503", load.count(503) > 0, "\(load.count(503)) answers 503")
        report.check("recovered by itself", recoverySeconds != nil,
                     recoverySeconds.map { String(format: "10 acknowledgements %.1f s after PostgreSQL came back", $0) }
                        ?? "no acknowledgement within \(recoveryBound) of PostgreSQL coming back; log:\n\(h.service.logTail())")
        let hung = load.transportErrorKinds["timeout", default: 0]
        report.check("no request hung", hung == 0 && load.latency.max < 20_000,
                     String(format: "%d timed out; slowest answer %.0f ms", hung, load.latency.max))
        report.check("the service was not restarted", h.service.isRunning && h.service.starts == 1,
                     "one `ledger serve` process served before, during and after (\(h.service.starts) start)")
        report.notes.append("transport errors: \(load.transportErrorKinds)")
        return report
    }

    // MARK: hanging connection

    /// The request deadline the service runs with in the hanging-connection scenario.
    static let hangDeadlineSeconds = 3

    /// The path to PostgreSQL hangs mid-stream (every byte held, every connection left open) under
    /// load, then recovers: requests answer (503) within their deadline and never hang, and the
    /// same process recovers by itself once bytes flow again.
    static func hangingConnection(_ h: Harness, proxy: StallingProxy) async throws -> ReliabilityReport {
        var report = ReliabilityReport(scenario: "hanging-connection")
        let mint = NotificationMint(authority: h.authority)
        try h.service.start()
        let before: Duration = h.options.quick ? .milliseconds(1500) : .seconds(3)
        let stall: Duration = h.options.quick ? .seconds(5) : .seconds(15)
        let recoveryBound: Duration = .seconds(30)
        let generator = try LoadGenerator(
            target: h.service.target,
            options: postingOptions(h, duration: before + stall + recoveryBound + .seconds(10), requestTimeout: .seconds(20)),
            source: mint.loadSource())
        let running = Task { await generator.run() }
        var recoverySeconds: Double?
        do {
            try await Task.sleep(for: before)
            proxy.stall()
            let stalledAt = generator.progress
            h.options.log("hanging-connection: the database path stalled with \(stalledAt.ok) acknowledged")
            try await Task.sleep(for: stall)
            let during = generator.progress
            report.notes.append("during the \(stall) stall: \(during.answered - stalledAt.answered) answered, \(during.ok - stalledAt.ok) of them 200 (in flight when it began)")
            proxy.resume()
            let resumedAt = monotonicNanos()
            h.options.log("hanging-connection: bytes flow again")
            if try await waitForAcknowledgements(generator, atLeast: generator.progress.ok + 10, within: recoveryBound) {
                recoverySeconds = Double(monotonicNanos() - resumedAt) / 1e9
            }
            try await Task.sleep(for: .seconds(1))
        } catch {
            proxy.resume()
            generator.stop()
            _ = await running.value
            throw error
        }
        generator.stop()
        let load = await running.value
        try h.tally(&report, outcomes: load.outcomes, mint: mint)
        try await repostFailed(h, &report, outcomes: load.outcomes, mint: mint, fault: "the stall")
        report.check("no 500, only 200 or 503", unexpectedStatuses(load).isEmpty, statusDetail(load))
        report.check("clients saw the stall as 503", load.count(503) > 0, "\(load.count(503)) answers 503")
        let bound = Double(hangDeadlineSeconds) * 1000 + 2000
        report.check("answered within the deadline", load.latency.max < bound,
                     String(format: "slowest answer %.0f ms (deadline %d s, bound %.0f ms)", load.latency.max, hangDeadlineSeconds, bound))
        let hung = load.transportErrorKinds["timeout", default: 0]
        report.check("no request hung", hung == 0, "\(hung) requests timed out; transport errors \(load.transportErrorKinds)")
        report.check("recovered by itself", recoverySeconds != nil,
                     recoverySeconds.map { String(format: "10 acknowledgements %.1f s after bytes flowed again", $0) }
                        ?? "no acknowledgement within \(recoveryBound) of the path recovering; log:\n\(h.service.logTail())")
        report.check("the service was not restarted", h.service.isRunning && h.service.starts == 1, "\(h.service.starts) start")
        report.notes.append("connections through the proxy: \(proxy.connectionsAccepted)")
        return report
    }

    /// Runs `scripts/db.sh stop|start` (bounded: 90 s). posix_spawn + waitpid rather than
    /// Foundation's Process: Process learns of the exit through a descriptor the child inherits,
    /// and the postmaster that `start` daemonises inherits it too, so Process would wait for
    /// PostgreSQL to stop rather than for the script to finish.
    static func runScript(_ script: String, _ verb: String) throws {
        let words: [String] = ["/bin/bash", script, verb]
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { (word: String) in strdup(word) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/bin/bash", nil, nil, argv, environ)
        guard rc == 0 else { throw ReliabilityError.database("cannot run \(script) \(verb): posix_spawn error \(rc)") }
        let deadline = monotonicNanos() + 90_000_000_000
        var status: Int32 = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            if monotonicNanos() > deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                throw ReliabilityError.database("\(script) \(verb) did not finish within 90 s")
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        // WIFEXITED / WEXITSTATUS are macros Swift cannot import.
        let exited = status & 0x7f == 0
        let code = (status >> 8) & 0xff
        guard exited, code == 0 else { throw ReliabilityError.database("\(script) \(verb) failed (wait status \(status))") }
    }

    // MARK: duplicate storm

    static func duplicateStorm(_ h: Harness) async throws -> ReliabilityReport {
        var report = ReliabilityReport(scenario: "duplicate-storm")
        let n = h.options.stormNotifications
        let copies = h.options.stormCopies
        let mint = NotificationMint(authority: h.authority)
        let requests = try mint.premint(n).map(\.request)
        try h.service.start()
        // Request i posts notification i / copies: the copies of one notification are adjacent,
        // so they are in flight on different connections at the same moment.
        let generator = try LoadGenerator(
            target: h.service.target,
            options: LoadOptions(connections: h.options.connections, limit: .count(n * copies), requestTimeout: .seconds(15), recordOutcomes: true)
        ) { i in requests[i / copies] }
        let load = await generator.run()
        try h.tally(&report, outcomes: load.outcomes, mint: mint, notificationOf: { $0 / copies })
        let rows = try h.storedKeys().values.reduce(0, +)
        report.check("every post answered 200", load.count(200) == n * copies, load.summary)
        report.check("exactly one event per notification", rows == n && report.stored == n,
                     "\(rows) events for \(n) notifications posted \(copies) times each")
        return report
    }

    // MARK: slowloris

    static func slowloris(_ h: Harness) async throws -> ReliabilityReport {
        var report = ReliabilityReport(scenario: "slowloris")
        let mint = NotificationMint(authority: h.authority)
        try h.service.start()
        let slow = SlowClients(target: h.service.target, count: h.options.slowConnections)
        report.check("slow connections opened", slow.opened >= h.options.slowConnections * 9 / 10,
                     "\(slow.opened) of \(h.options.slowConnections) from 127.0.0.2 (idle, slow head, slow body)")
        let (interval, duration) = (h.options.slowByteInterval, h.options.loadDuration)
        let dribbling = Thread { slow.dribble(every: interval, for: duration) }
        dribbling.start()
        let generator = try LoadGenerator(target: h.service.target,
                                          options: postingOptions(h, duration: h.options.loadDuration, connections: 8, requestTimeout: .seconds(10)),
                                          source: mint.loadSource())
        let load = await generator.run()
        slow.waitUntilDone()
        try h.tally(&report, outcomes: load.outcomes, mint: mint)
        report.check("other clients answered", load.count(200) == load.attempted && load.transportErrors == 0 && load.attempted > 0, load.summary)
        let bound = 1000.0
        report.check("bounded latency", load.latency.p99 < bound, String(format: "p99 %.1f ms (bound %.0f ms), max %.1f ms", load.latency.p99, bound, load.latency.max))
        // The service's default per-IP limit (64) keeps at most that many from one address; the
        // rest are closed at once, and the ones kept are closed on the idle timeout.
        report.check("per-IP limit held", slow.stillOpen <= 64,
                     "slow connections still open at the end: \(slow.stillOpen) of \(slow.opened) (at most 64 per address by default)")
        return report
    }

    // MARK: graceful shutdown

    /// The held request's notification: far beyond what the load reaches in a scenario.
    static let heldIndex = 10_000_000

    static func gracefulShutdown(_ h: Harness) async throws -> ReliabilityReport {
        var report = ReliabilityReport(scenario: "graceful-shutdown")
        let mint = NotificationMint(authority: h.authority)
        try h.service.start()
        let generator = try LoadGenerator(target: h.service.target, options: postingOptions(h, duration: h.options.loadDuration),
                                          source: mint.loadSource())
        let running = Task { await generator.run() }
        var exit: (status: Int32, seconds: Double)?
        var failure: (any Error)?
        var held: HeldRequest?
        do {
            try await Task.sleep(for: h.options.loadDuration / 2)
            _ = try await waitForAcknowledgements(generator, atLeast: 1, within: .seconds(15))
            let inFlightOK = generator.progress.ok
            // One request held in flight across the SIGTERM: its head and all but the last bytes
            // of its body are written before the signal, the rest 300 ms after it.
            held = try HeldRequest(h.service.target, request: mint.notification(Self.heldIndex).request)
            held!.finishLater(after: .milliseconds(300))
            exit = try h.service.terminate(timeout: .seconds(25))
            h.options.log("graceful-shutdown: SIGTERM with \(inFlightOK) acknowledged; exited after \(exit!.seconds) s")
        } catch {
            failure = error
        }
        generator.stop()
        let load = await running.value
        if let failure { throw failure }
        try h.tally(&report, outcomes: load.outcomes, mint: mint, alsoPosted: [mint.dedupeKey(Self.heldIndex)])
        // The held request: 200 and stored, or 503 (or refused before it was read) and not
        // stored — never 200 and lost.
        let stored = try h.storedKeys()
        if let held {
            let status = held.waitForAnswer()
            let rows = stored[mint.dedupeKey(Self.heldIndex)] ?? 0
            let ok = (status == 200 && rows == 1) || (status != 200 && rows == 0)
            report.check("request in flight at SIGTERM: 200 and stored, or not 200 and not stored", ok,
                         "answer \(status.map(String.init) ?? "none (connection closed)"), \(rows) event(s) stored for it")
        }
        let unanswered503Stored = load.outcomes.indices.filter { load.outcomes[$0] == .status(503) && stored[mint.dedupeKey($0)] != nil }.count
        report.notes.append("load answered 503 ×\(load.count(503)); of those stored anyway (a retry is then a duplicate): \(unanswered503Stored)")
        report.check("exited cleanly", exit?.status == 0,
                     "exit status \(exit.map { "\($0.status)" } ?? "-")" + (exit?.status == 0 ? "" : "; log:\n\(h.service.logTail())"))
        report.check("within its grace period", (exit?.seconds ?? 99) < 12, String(format: "%.2f s after SIGTERM (grace 10 s)", exit?.seconds ?? -1))
        report.check("no 500, only 200 or 503", unexpectedStatuses(load).isEmpty, statusDetail(load))
        let hung = load.transportErrorKinds["timeout", default: 0]
        report.check("nothing hung", hung == 0, "\(hung) requests timed out; transport errors: \(load.transportErrorKinds)")
        return report
    }
}

/// A request written up to its last 16 body bytes and finished later from its own thread, so
/// it is in flight (read by the server, not yet complete) when the service is signalled.
final class HeldRequest: @unchecked Sendable {
    // `answer` is written by the finishing thread before `done` is signalled, read after the wait.
    private let connection: LoopbackConnection
    private let tail: [UInt8]
    private var answer: Int?
    private let done = DispatchSemaphore(value: 0)

    init(_ target: LoopbackTarget, request: LoadRequest) throws {
        let bytes = request.encoded(authority: target.authority)
        connection = try LoopbackConnection(target, timeout: .seconds(20))
        try connection.send(Array(bytes.dropLast(16)))
        tail = Array(bytes.suffix(16))
        // Give the server a moment to read what was sent.
        Thread.sleep(forTimeInterval: 0.1)
    }

    func finishLater(after delay: Duration) {
        Thread { [self] in
            Thread.sleep(forTimeInterval: Double(nanos(delay)) / 1e9)
            if (try? connection.send(tail)) != nil { answer = (try? connection.readResponse())?.status }
            connection.close()
            done.signal()
        }.start()
    }

    /// The status the server answered, nil when it closed the connection without one.
    func waitForAnswer() -> Int? {
        done.wait()
        return answer
    }
}

/// Connections that hold the server's resources without finishing a request, from 127.0.0.2 so
/// a per-IP limit on them does not also starve the well-behaved clients on 127.0.0.1: a third
/// send nothing, a third send a request head one byte at a time, a third a body one byte at a time.
final class SlowClients: @unchecked Sendable {
    // Touched only by the dribbling thread after init; `waitUntilDone` orders the final reads.
    private var sockets: [Int32] = []
    private var progress: [Int] = []
    private let done = DispatchSemaphore(value: 0)
    let target: LoopbackTarget
    private(set) var stillOpen = 0

    private static let head = Array("POST /v1/apple/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: ".utf8)
    private static let bodyHead = Array("POST /v1/apple/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{\"signedPayload\":\"".utf8)

    init(target: LoopbackTarget, count: Int) {
        self.target = target
        for i in 0..<count {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { continue }
            var source = sockaddr_in()
            source.sin_family = sa_family_t(AF_INET)
            source.sin_addr.s_addr = inet_addr("127.0.0.2")
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_port = in_port_t(UInt16(target.port).bigEndian)
            a.sin_addr.s_addr = inet_addr(target.host)
            var tv = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            let ok = withUnsafePointer(to: &source) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } } == 0
                && withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } } == 0
            guard ok else {
                close(fd)
                continue
            }
            // Slow bodies announce themselves at once, then trickle.
            if i % 3 == 2 { _ = Self.bodyHead.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
            sockets.append(fd)
            progress.append(i % 3)
        }
    }

    var opened: Int { sockets.count }

    /// Sends one byte on every slow connection each `interval` for `duration` (bounded), then closes them.
    func dribble(every interval: Duration, for duration: Duration) {
        let deadline = monotonicNanos() + nanos(duration)
        var position = [Int](repeating: 0, count: sockets.count)
        var open = [Bool](repeating: true, count: sockets.count)
        while monotonicNanos() < deadline {
            for (i, fd) in sockets.enumerated() where open[i] && progress[i] != 0 {
                let bytes: [UInt8] = progress[i] == 1 ? [Self.head[min(position[i], Self.head.count - 1)]] : [0x41]
                let sent = bytes.withUnsafeBytes { send(fd, $0.baseAddress, 1, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
                if sent < 0, errno != EAGAIN { open[i] = false }
                // After the fixed head, keep the header value growing: the head never ends.
                position[i] += 1
            }
            let step = min(nanos(interval), deadline > monotonicNanos() ? deadline - monotonicNanos() : 0)
            Thread.sleep(forTimeInterval: Double(step) / 1e9)
        }
        // A closed peer shows as readable with 0 bytes.
        for (i, fd) in sockets.enumerated() where open[i] {
            var byte: UInt8 = 0
            if recv(fd, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK)) == 0 { open[i] = false }
        }
        stillOpen = open.filter { $0 }.count
        for fd in sockets { close(fd) }
        done.signal()
    }

    func waitUntilDone() { done.wait() }
}

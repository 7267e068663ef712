import Foundation
import LedgerCommandLine
import LedgerService
import LedgerStore

/// `ledger verify`: the auditor's proof that the log is what was appended.
enum VerifyCommand {
    static let help = """
    usage: ledger verify [--from N] [--anchor] [--anchor-file F] [--wechat-key-history FILE]

    Walks the hash chain over the event log (docs/hash-chain.md), recomputing every link from the
    event's own fields, and re-verifies each event's raw evidence: every Apple JWS at its own
    signedDate against the configured roots (LEDGER_APPLE_ROOT_CERTS, else Apple Root CA - G3),
    every WeChat push against the key history — the configured token and EncodingAESKeys (current
    and previous) and the older ones of the key-history file — as `ledger verify-payload` does. A
    plaintext-mode push counts as unsigned (its signature does not cover the body). Reports the
    first broken position and why, then the others (up to 100).

      --from N          start at position N (the link before N is taken as stored); default 1
      --anchor          after a clean walk, print one line `<position> <hex hash>` of the head on
                        standard output: keep it somewhere the database's owner cannot write
      --anchor-file F   check that the log still extends each anchor in F (one `<position> <hex>`
                        per line, # comments allowed): a chain rewritten after an edit passes the
                        walk but not an anchor kept from before the edit
      --wechat-key-history FILE
                        the WeChat keys in use before the current ones, to re-verify pushes
                        stored under them (default: LEDGER_WECHAT_KEY_HISTORY_FILE):
                        {"keys": [{"appId": "wx…", "token": "…", "aesKey": "<43 characters>", "label": "until 2026-03-01"}]}

    Progress and the report go to standard error. Exit status: 0 when nothing is broken, 1 when
    something is (the first broken position is named), 2 on bad usage. Database: LEDGER_DATABASE_URL
    (the service role can read everything this needs).
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "verify", valued: ["from", "anchor-file", "wechat-key-history"], boolean: ["anchor"], help: help)
        guard args.positionals.isEmpty else {
            throw CommandFailure(message: "unexpected argument \(args.positionals[0]); see ledger verify --help", exitCode: 2)
        }
        let from: Int
        do { from = try args.int("from", default: 1) } catch { throw CommandFailure(message: "\(error)", exitCode: 2) }
        guard from >= 1 else { throw CommandFailure(message: "--from must be a position ≥ 1", exitCode: 2) }
        let anchors = try args.options["anchor-file"].map(readAnchors) ?? []
        let configuration = try loadConfiguration()
        let evidence: EvidenceVerifier
        do {
            evidence = try EvidenceVerifier(configuration: configuration, wechatKeyHistoryFile: args.options["wechat-key-history"])
        } catch {
            throw CommandFailure(message: "\(error)", exitCode: 2)
        }
        let store = Store(.init(databaseURL: configuration.databaseURL, poolSize: 2, liveProjections: false))
        defer { store.close() }
        let bar = LazyProgressBar(label: "verify")
        let report: LogVerificationReport
        do {
            report = try await LogVerifier(store: store, evidence: evidence).verify(from: Int64(from), anchors: anchors) { done, total in
                bar.update(Int(done), Int(max(total, 1)))
            }
        } catch {
            bar.finish()
            throw CommandFailure(message: "\(error)")
        }
        bar.finish()
        let err = FileHandle.standardError
        func say(_ line: String) { err.write(Data((line + "\n").utf8)) }
        say(String(format: "checked %d events (positions %lld…%lld) in %.1f s: %d signatures re-verified, %d unsigned, %d anchors",
                   report.eventsChecked, report.from, report.head, report.seconds, report.signaturesVerified, report.unsigned,
                   report.anchorsChecked))
        if let first = report.breaks.first {
            say("BROKEN: first broken position \(first.position): \(first.kind.rawValue): \(first.reason)")
            for other in report.breaks.dropFirst() { say("  also \(other)") }
            throw CommandFailure(message: "the log does not verify: \(report.breaks.count) break(s), the first at position \(first.position)")
        }
        say("intact: the chain holds from \(report.from) to \(report.head) and every signature verified")
        if args.has("anchor") { print(report.headAnchor.description) }
    }

    static func readAnchors(_ path: String) throws -> [ChainAnchor] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CommandFailure(message: "cannot read the anchor file \(path)", exitCode: 2)
        }
        var anchors: [ChainAnchor] = []
        for (n, line) in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let text = line.trimmingCharacters(in: .whitespacesAndNewlines)
            if text.isEmpty || text.hasPrefix("#") { continue }
            guard let anchor = ChainAnchor(line: text) else {
                throw CommandFailure(message: "\(path):\(n + 1): not an anchor; each line is `<position> <64 hex digits>` as `ledger verify --anchor` prints", exitCode: 2)
            }
            anchors.append(anchor)
        }
        return anchors
    }
}

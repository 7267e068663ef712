import Crypto
import Foundation
import LedgerCommandLine
import LedgerTesting

/// `ledger-dev webhook-receiver`: a receiver that verifies Standard Webhooks signatures and prints
/// each event, for `make demo` and trying an endpoint by hand; it can be told to fail or stall.
enum WebhookReceiverCommand {
    static let help = """
    usage: ledger-dev webhook-receiver --secret whsec_… [--secret whsec_…] [--listen 127.0.0.1:8099]
                                       [--fail-status 500 --fail-count N | --fail-seconds S] [--stall-seconds S]

    Prints one line per request: time, webhook-id, type, verified or why not, the answer.
    --secret may be given twice (a rotation); LEDGER_WEBHOOK_SECRET is read when none is given.
    --fail-status answers that status to the first --fail-count requests (or for --fail-seconds);
    --stall-seconds waits that long before each answer (a sender's timeout is 15 s).
    Point the ledger at it with LEDGER_WEBHOOK_URL=http://127.0.0.1:8099/hooks.
    """

    static func run(_ arguments: [String]) async throws {
        if arguments.contains("--help") || arguments.contains("-h") { print(help); return }
        var secrets: [WebhookSecret] = []
        var listen = "127.0.0.1:8099"
        var failStatus: Int?, failCount: Int?, failSeconds: Double?, stall: Double?
        var i = 0
        func value() throws -> String {
            i += 1
            guard i < arguments.count else { throw CommandFailure(message: "\(arguments[i - 1]) needs a value\n\n\(help)", exitCode: 2) }
            return arguments[i]
        }
        while i < arguments.count {
            switch arguments[i] {
            case "--secret":
                let text = try value()
                do { secrets.append(try WebhookSecret(text: text)) } catch { throw CommandFailure(message: "--secret: \(error)", exitCode: 2) }
            case "--listen": listen = try value()
            case "--fail-status": failStatus = Int(try value())
            case "--fail-count": failCount = Int(try value())
            case "--fail-seconds": failSeconds = Double(try value())
            case "--stall-seconds": stall = Double(try value())
            default: throw CommandFailure(message: "unknown option \(arguments[i])\n\n\(help)", exitCode: 2)
            }
            i += 1
        }
        if secrets.isEmpty, let env = ProcessInfo.processInfo.environment["LEDGER_WEBHOOK_SECRET"] {
            do { secrets.append(try WebhookSecret(text: env)) } catch { throw CommandFailure(message: "LEDGER_WEBHOOK_SECRET: \(error)", exitCode: 2) }
        }
        guard !secrets.isEmpty else { throw CommandFailure(message: "give --secret whsec_… (the endpoint's secret)\n\n\(help)", exitCode: 2) }
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]) else {
            throw CommandFailure(message: "--listen must be host:port, e.g. 127.0.0.1:8099", exitCode: 2)
        }
        let receiver = WebhookReceiver(secrets: secrets, host: String(listen[..<colon]), port: port) { d in
            let verdict = d.refusal.map { "REFUSED (\($0))" } ?? "verified"
            var line = "\(ISO8601DateFormatter().string(from: d.receivedAt)) \(d.id ?? "-") \(d.type ?? "-") \(verdict) → \(d.status)\n"
            if d.verified, let text = String(data: d.body, encoding: .utf8) { line += "  " + text + "\n" }
            // Written unbuffered, so `make demo` shows each event as it arrives.
            FileHandle.standardOutput.write(Data(line.utf8))
        }
        if let failStatus {
            receiver.behave(.fail(status: failStatus, retryAfter: nil), count: failCount,
                            until: failSeconds.map { Date().addingTimeInterval($0) })
        } else if let stall {
            receiver.behave(.stall(seconds: stall))
        }
        do { try receiver.start() } catch { throw CommandFailure(message: "cannot listen on \(listen): \(error)", exitCode: 1) }
        FileHandle.standardOutput.write(Data("webhook receiver on http://\(listen)/hooks (secrets \(secrets.map(\.fingerprint).joined(separator: ", ")))\n".utf8))
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
}

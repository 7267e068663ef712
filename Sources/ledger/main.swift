import Foundation
import LedgerCommandLine
import LedgerService

// The `ledger` executable, the product: one sub-command per operator task, each with its own
// --help. It links no test support (no test authority, certificate minting, simulator or scratch
// databases); those are in `ledger-dev`, and a test reads the package graph to keep it so.

let usage = """
usage: ledger <command> [options]

commands:
  serve            serve the HTTP API (webhooks, queries, metrics)
  migrate          apply pending database migrations (Migrations/*.sql), exactly once each
  rebuild          rebuild projections from position 0 into fresh tables and swap them in
  project          run the catch-up worker that advances projection checkpoints
  rederive         derive the facts of this build's fact schema version for every event
  verify-payload   verify stored evidence offline (Apple JWS, notification bodies, App Store API answers, WeChat pushes)
  reconcile        reconcile with Apple (backfill missed notifications, heal drift, test notifications);
                   with --wechat, ask WeChat for the contract state the ledger may have missed
  verify           walk the hash chain over the log and re-verify every stored signature

Run `ledger <command> --help` for a command's options. Configuration comes from LEDGER_CONFIG
(a JSON file) and the LEDGER_* environment variables listed in README.md. The development tools
(simulate, bench, reliability) are the separate `ledger-dev` executable.
"""

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first, command != "--help", command != "-h", command != "help" else {
    print(usage)
    exit(arguments.isEmpty ? 2 : 0)
}
let rest = Array(arguments.dropFirst())

do {
    switch command {
    case "serve": try await ServeCommand.run(rest)
    case "migrate": try await MigrateCommand.run(rest)
    case "rebuild": try await RebuildCommand.run(rest)
    case "project": try await ProjectCommand.run(rest)
    case "rederive": try await RederiveCommand.run(rest)
    case "verify-payload": try await VerifyPayloadCommand.run(rest)
    case "verify": try await VerifyCommand.run(rest)
    case "reconcile":
        if rest.contains("--wechat") { try await ReconcileWeChat.run(rest) } else { try await ReconcileCommand.run(rest) }
    case "simulate", "bench", "reliability":
        FileHandle.standardError.write(Data("ledger: '\(command)' is a development tool: run `ledger-dev \(command)` (swift build --product ledger-dev)\n".utf8))
        exit(2)
    default:
        FileHandle.standardError.write(Data("ledger: unknown command '\(command)'\n\n\(usage)\n".utf8))
        exit(2)
    }
} catch let failure as CommandFailure {
    FileHandle.standardError.write(Data("ledger \(command): \(failure.message)\n".utf8))
    exit(failure.exitCode)
} catch {
    FileHandle.standardError.write(Data("ledger \(command): \(error)\n".utf8))
    exit(1)
}

import Foundation
import LedgerService
import LedgerTesting

// The `ledger` executable: one sub-command per operator task. Each prints its own --help.

let usage = """
usage: ledger <command> [options]

commands:
  serve            serve the HTTP API (webhooks, queries, metrics)
  migrate          apply pending database migrations (Migrations/*.sql), exactly once each
  rebuild          rebuild projections from position 0 into fresh tables and swap them in
  project          run the catch-up worker that advances projection checkpoints
  rederive         derive the facts of this build's fact schema version for every event
  verify-payload   verify an Apple JWS or notification body offline and print it decoded
  simulate         post realistic signed subscription lifecycles to a running service
  bench            benchmarks: append | ingest | read | rebuild | refund-inquiry | verify | fold
  reliability      crash, outage, duplicate-storm, slowloris and shutdown scenarios (make test-reliability)

Run `ledger <command> --help` for a command's options. Configuration comes from LEDGER_CONFIG
(a JSON file) and the LEDGER_* environment variables listed in README.md.
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
    case "simulate": try await SimulateCommand.run(rest)
    case "bench": try await BenchCommand.run(rest)
    case "reliability": exit(await ReliabilitySuite.main(rest))
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

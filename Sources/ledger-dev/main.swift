import Foundation
import LedgerCommandLine
import LedgerTesting

// The `ledger-dev` executable: development and test tooling around the product. It links the
// test support (LedgerTesting, CryptoTesting) that `ledger` must not: a test authority that
// mints Apple-shaped chains, the simulator, benchmarks and scratch databases. Never deploy it.

let usage = """
usage: ledger-dev <command> [options]

commands:
  simulate         post realistic signed subscription lifecycles to a running service
  bench            benchmarks: append | ingest | read | rebuild | refund-inquiry | verify | fold
  reliability      crash, outage, duplicate-storm, slowloris and shutdown scenarios (make test-reliability)
  scale            two service instances, a worker and a read replica on one database (make test-scale)
  soak             generated lifecycles through the real service under kill -9, checked against their truth (make test-soak)
  webhook-receiver a receiver that verifies webhook signatures and prints events (can fail or stall)

Run `ledger-dev <command> --help` for a command's options. The services these tools start or
talk to are the product binary, `ledger` (by default the one next to this executable).
"""

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first, command != "--help", command != "-h", command != "help" else {
    print(usage)
    exit(arguments.isEmpty ? 2 : 0)
}
let rest = Array(arguments.dropFirst())

do {
    switch command {
    case "simulate": try await SimulateCommand.run(rest)
    case "bench": try await BenchCommand.run(rest)
    case "reliability": exit(await ReliabilitySuite.main(rest))
    case "scale": exit(await ScaleSuite.main(rest))
    case "soak": exit(await SoakSuite.main(rest))
    case "webhook-receiver": try await WebhookReceiverCommand.run(rest)
    default:
        FileHandle.standardError.write(Data("ledger-dev: unknown command '\(command)'\n\n\(usage)\n".utf8))
        exit(2)
    }
} catch let failure as CommandFailure {
    FileHandle.standardError.write(Data("ledger-dev \(command): \(failure.message)\n".utf8))
    exit(failure.exitCode)
} catch {
    FileHandle.standardError.write(Data("ledger-dev \(command): \(error)\n".utf8))
    exit(1)
}

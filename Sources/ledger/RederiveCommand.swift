import Foundation
import LedgerCommandLine
import LedgerCore
import LedgerStore

enum RederiveCommand {
    static let help = """
    usage: ledger rederive [--status] [--drop-other-versions]

    Derives the facts of this build's fact schema version (v\(FactDecoder.schemaVersion)) for every
    stored event that has none yet, from the events' payloads and envelopes, in position order,
    beside the facts of other versions. Run it when a new release changes a decoder (its fact
    schema version): derive first (old instances keep serving their version), then switch the
    instances over (blue/green), then drop the old version. `serve` and `ledger project` also
    derive what is missing, in the background; this command does it now, with a progress bar.

      --status               print how far each fact schema version has got and exit
      --drop-other-versions  after deriving, delete the facts of every other version

    Database: LEDGER_DATABASE_URL (the service role may run it).
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "rederive", boolean: ["status", "drop-other-versions"], help: help)
        let configuration = try loadConfiguration()
        let store = Store(.init(databaseURL: configuration.databaseURL, poolSize: 1, liveProjections: false))
        defer { store.close() }
        let deriver = store.facts
        do {
            let before = try deriver.status()
            if args.has("status") {
                print(before.description)
                return
            }
            let bar = LazyProgressBar(label: "rederive v\(before.version)")
            let after = try await deriver.run { done, head in bar.update(Int(done), Int(head)) }
            bar.finish()
            print("derived \(after.derivedUpTo - before.derivedUpTo) events' facts; " + after.description)
            if args.has("drop-other-versions") {
                let deleted = try deriver.dropOtherVersions()
                print("deleted \(deleted) facts of other schema versions")
            }
        } catch {
            throw CommandFailure(message: "\(error)")
        }
    }
}

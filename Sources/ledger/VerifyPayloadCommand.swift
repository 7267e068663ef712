import AppStore
import Crypto
import Foundation
import LedgerCommandLine

/// `ledger verify-payload`: an auditor's tool for raw evidence, offline (no service, no database).
enum VerifyPayloadCommand {
    static let help = """
    usage: ledger verify-payload [--root PATH]... [--test-pki] FILE|-

    Verifies stored or captured Apple evidence offline and prints it decoded: a compact JWS, a whole
    App Store Server Notifications V2 body ({"signedPayload": …}), a V1 body, or an App Store
    Server API answer the ledger stored (the raw of API/subscription-status: a Get All Subscription
    Statuses answer; API/transaction: a JWS; also Get Transaction History and Get Notification
    History pages; API/verify-receipt: a verifyReceipt answer, which Apple does not sign). Every
    JWS (the notification and its nested signedTransactionInfo / signedRenewalInfo /
    signedAppTransactionInfo, every signed item of an answer) is checked at its own signedDate
    against the trusted roots, so years-old evidence still verifies; no app or environment policy
    is applied. The raw column of an event is such an input.

      FILE         the input; - reads standard input
      --root PATH  trusted root certificate(s), DER or PEM; repeatable or colon-separated.
                   Default: LEDGER_APPLE_ROOT_CERTS, else the bundled Apple Root CA - G3.
      --test-pki   tolerate the X.509 profile gaps of Apple's published test PKI (missing key
                   identifiers, non-critical CA constraints), e.g. with --root testCA.der for the
                   app-store-server-library mock data. Never needed for Apple's real chain.

    Prints the outcome per JWS, then the decoded JSON (nested JWS decoded in place as
    transactionInfo / renewalInfo / appTransactionInfo). Exit status: 0 when every JWS verified,
    1 when any did not (or the input is a V1 body or a verifyReceipt answer, which carry no
    signature), 2 on bad usage.
    """

    static func run(_ raw: [String]) async throws {
        let args = try parse(raw, command: "verify-payload", valued: ["root"], boolean: ["test-pki"], help: help)
        guard args.positionals.count == 1, let source = args.positionals.first else {
            throw CommandFailure(message: "give exactly one FILE (or - for standard input); see ledger verify-payload --help", exitCode: 2)
        }
        let roots = try trustedRoots(rawArguments: raw)
        let input = try read(source)
        let report: InspectionReport
        do {
            var options = SignedDataVerifierOptions()
            options.tolerateTestPKIProfileGaps = args.has("test-pki")
            report = try PayloadInspector(verifier: SignedDataVerifier(trustedRoots: roots, options: options)).inspect(input)
        } catch {
            throw CommandFailure(message: "\(error.code): \(error.message)")
        }
        print(report.render())
        if !report.allVerified {
            let refused = report.outcomes.filter { !$0.verified }.count
            let why = report.outcomes.isEmpty ? "nothing was verified (V1 bodies and verifyReceipt answers carry no signature)"
                : "\(refused) of \(report.outcomes.count) JWS did not verify"
            FileHandle.standardError.write(Data("ledger verify-payload: \(why)\n".utf8))
            exit(1)
        }
    }

    /// `--root` may repeat; `Arguments` keeps only the last value of an option, so the raw
    /// arguments are read again for every occurrence.
    static func trustedRoots(rawArguments raw: [String]) throws -> [X509Certificate] {
        var paths: [String] = []
        var i = 0
        while i < raw.count {
            let a = raw[i]
            if a == "--" { break }
            if a == "--root", i + 1 < raw.count {
                paths.append(raw[i + 1])
                i += 1
            } else if a.hasPrefix("--root=") {
                paths.append(String(a.dropFirst("--root=".count)))
            }
            i += 1
        }
        let split = paths.flatMap { $0.split(separator: ":").map(String.init) }.filter { !$0.isEmpty }
        do {
            if !split.isEmpty { return try AppleTrustedRoots.load(paths: split) }
            return try AppleTrustedRoots.fromEnvironmentValue(ProcessInfo.processInfo.environment["LEDGER_APPLE_ROOT_CERTS"])
        } catch {
            throw CommandFailure(message: "\(error)", exitCode: 2)
        }
    }

    static func read(_ source: String) throws -> Data {
        if source == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        guard let data = FileManager.default.contents(atPath: source) else {
            throw CommandFailure(message: "cannot read \(source): no such readable file", exitCode: 2)
        }
        return data
    }
}

import Foundation
import XCTest

/// The shipped `ledger` links no test support, read from the package graph SwiftPM itself
/// computes (`swift package dump-package`), not from the binary's strings: a test authority that
/// mints Apple-shaped chains, signing keys made from a public seed, or `DROP DATABASE` helpers must
/// not be one careless dependency away from production.
final class PackageGraphTests: XCTestCase {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Modules that exist for tests only. Any target named `…Testing` counts too, so a new
    /// test-support target is covered without editing this list.
    static let testSupport: Set<String> = ["LedgerTesting", "CryptoTesting", "XCTest"]

    static func isTestSupport(_ name: String) -> Bool { testSupport.contains(name) || name.hasSuffix("Testing") }

    func testLedgerDependsOnNoTestSupportAndLedgerDevDoes() throws {
        let graph = try PackageGraph(json: Self.dumped.get())

        let ledger = try graph.closure(ofProduct: "ledger")
        // Not vacuous: the product really reaches the service and the C libraries through the graph.
        for expected in ["ledger", "LedgerService", "LedgerStore", "AppStore", "Crypto", "COpenSSL", "CLibPQ", "LedgerCommandLine"] {
            XCTAssertTrue(ledger.targets.contains(expected), "ledger should depend on \(expected); closure: \(ledger.targets.sorted())")
        }
        XCTAssertEqual(ledger.targets.filter(Self.isTestSupport).sorted(), [], "ledger depends on test support")
        XCTAssertEqual(ledger.products, [], "ledger depends on products of other packages (XCTest, …)")
        XCTAssertEqual(ledger.targets.filter { graph.targets[$0]?.type == "test" }.sorted(), [], "ledger depends on a test target")
        XCTAssertEqual(try graph.productType("ledger"), "executable")

        let dev = try graph.closure(ofProduct: "ledger-dev")
        XCTAssertTrue(dev.targets.isSuperset(of: ["LedgerTesting", "CryptoTesting"]), "ledger-dev: \(dev.targets.sorted())")
        XCTAssertFalse(dev.targets.contains("ledger"), "ledger-dev spawns the ledger executable; it does not link it")

        // Every test-support target is used by a test target (else it would be product code in disguise).
        for name in graph.targets.keys where Self.isTestSupport(name) {
            let users = graph.targets.values.filter { $0.type == "test" && $0.dependencies.contains(name) }
            XCTAssertFalse(users.isEmpty, "\(name) is test support no test target uses")
        }
    }

    /// SwiftPM puts every module of a build into one module directory, so a product target could
    /// `import LedgerTesting` without declaring it and still compile when the module happens to be
    /// built: the sources of the product's closure are read for such imports too, and for the
    /// OpenSSL calls that create keys or certificates (CryptoTesting's job, never the product's).
    func testNoSourceOfLedgersClosureImportsTestSupportOrMints() throws {
        let graph = try PackageGraph(json: Self.dumped.get())
        let ledger = try graph.closure(ofProduct: "ledger")
        let forbiddenCalls = ["X509_sign", "EVP_PKEY_generate", "EVP_PKEY_keygen", "DROP DATABASE"]
        var offences: [String] = []
        var files = 0
        for name in ledger.targets.sorted() {
            guard let target = graph.targets[name], target.type != "system" else { continue }
            let directory = Self.packageRoot.appendingPathComponent(target.path ?? "Sources/\(name)")
            let enumerator = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
            while let url = enumerator?.nextObject() as? URL {
                guard url.pathExtension == "swift" else { continue }
                files += 1
                let text = try String(contentsOf: url, encoding: .utf8)
                for module in Self.importedModules(text) where Self.isTestSupport(module) {
                    offences.append("\(url.path) imports \(module)")
                }
                for call in forbiddenCalls where text.contains(call) {
                    offences.append("\(url.path) contains \(call)")
                }
            }
        }
        XCTAssertGreaterThan(files, 50, "the product's sources were not found under \(Self.packageRoot.path)")
        XCTAssertEqual(offences, [])
    }

    /// The boundaries the architecture promises (README §Architecture): libpq is reached only
    /// through LedgerStore's façade — neither the service nor the command line may name `Postgres`
    /// or a C module, in the graph or in an import — and every C module is imported `internal`, so
    /// no C type can appear in a public API (the compiler refuses one).
    func testOnlyTheStoreSeesPostgresAndCModulesAreInternalImports() throws {
        let graph = try PackageGraph(json: Self.dumped.get())
        let cModules = Set(graph.targets.filter { $0.value.type == "system" }.map(\.key))
        XCTAssertEqual(cModules, ["CLibPQ", "COpenSSL", "CMicroHTTPD"], "the C libraries the package wraps")
        let walledOff = cModules.union(["Postgres"])
        for name in ["LedgerService", "ledger", "LedgerCommandLine", "LedgerCore", "AppStore", "WeChatPay"] {
            let target = try XCTUnwrap(graph.targets[name], name)
            XCTAssertEqual(Set(target.dependencies).intersection(walledOff).sorted(), [], "\(name) depends directly on \(walledOff.sorted())")
        }
        var offences: [String] = []
        var cImports = 0
        for (name, target) in graph.targets where target.type != "system" && target.type != "test" {
            for (url, text) in try Self.sources(of: name, target) {
                for line in text.split(separator: "\n") {
                    let words = line.split(whereSeparator: \.isWhitespace).map(String.init)
                    guard let module = Self.importedModules(String(line)).first else { continue }
                    if cModules.contains(module) {
                        cImports += 1
                        if !words.contains("internal") && !words.contains("private") && !words.contains("fileprivate") {
                            offences.append("\(url.lastPathComponent) (\(name)) imports the C module \(module) without `internal import`")
                        }
                    }
                    if module == "Postgres", ["LedgerService", "ledger", "LedgerCommandLine", "LedgerCore", "AppStore", "WeChatPay"].contains(name) {
                        offences.append("\(url.lastPathComponent) (\(name)) imports Postgres: go through LedgerStore's Store")
                    }
                }
            }
        }
        XCTAssertGreaterThan(cImports, 5, "no C imports found: the check read nothing")
        XCTAssertEqual(offences, [])
    }

    /// HTTP status codes live only at the HTTP edge: a use case (Sources/LedgerService/UseCases)
    /// throws a `ServiceFailure` of a domain `Refusal` kind or its module's error, and Errors.swift
    /// alone maps those to statuses — so no use case imports HTTPServer or spells a status.
    func testUseCasesKnowNoHTTP() throws {
        let graph = try PackageGraph(json: Self.dumped.get())
        let service = try XCTUnwrap(graph.targets["LedgerService"])
        var offences: [String] = []
        var read = 0
        for (url, text) in try Self.sources(of: "LedgerService", service) where url.path.contains("/UseCases/") {
            read += 1
            for line in text.split(separator: "\n") {
                if Self.importedModules(String(line)).first == "HTTPServer" {
                    offences.append("\(url.lastPathComponent) imports HTTPServer")
                }
                if line.contains("HTTPRenderableError") || line.range(of: #"ServiceFailure\(\s*[0-9]"#, options: .regularExpression) != nil {
                    offences.append("\(url.lastPathComponent): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        XCTAssertGreaterThan(read, 10, "no use case read: the check read nothing")
        XCTAssertEqual(offences, [], "render a use case's refusal in Errors.swift (the HTTP edge), not in the use case")
    }

    /// The Swift sources of a target.
    static func sources(of name: String, _ target: PackageGraph.Target) throws -> [(URL, String)] {
        let directory = packageRoot.appendingPathComponent(target.path ?? "Sources/\(name)")
        var out: [(URL, String)] = []
        let enumerator = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
        while let url = enumerator?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            out.append((url, try String(contentsOf: url, encoding: .utf8)))
        }
        return out
    }

    // MARK: the checker itself must be able to fail

    func testTheClosureFollowsEveryDependencyFormAndFindsATestSupportTargetTwoHopsAway() throws {
        let json = """
        {"products": [{"name": "app", "targets": ["app"], "type": {"executable": null}}],
         "targets": [
           {"name": "app", "type": "executable", "dependencies": [{"byName": ["Service", null]}]},
           {"name": "Service", "type": "regular", "dependencies": [{"target": ["Helpers", null]},
                                                               {"product": ["XCTest", "xctest", null, null]}]},
           {"name": "Helpers", "type": "regular", "dependencies": [{"byName": ["SneakyTesting", {"platformNames": ["linux"]}]}]},
           {"name": "SneakyTesting", "type": "regular", "dependencies": []},
           {"name": "Unrelated", "type": "regular", "dependencies": [{"byName": ["LedgerTesting", null]}]}
         ]}
        """
        let graph = try PackageGraph(json: Data(json.utf8))
        let closure = try graph.closure(ofProduct: "app")
        XCTAssertEqual(closure.targets, ["app", "Service", "Helpers", "SneakyTesting"])
        XCTAssertEqual(closure.products, ["XCTest"])
        XCTAssertEqual(closure.targets.filter(Self.isTestSupport), ["SneakyTesting"])
        XCTAssertThrowsError(try graph.closure(ofProduct: "missing"))
    }

    func testImportsAreReadInEveryForm() {
        let text = """
        import Foundation
        @testable import LedgerTesting
        internal import CryptoTesting
        @_implementationOnly import XCTest
        import struct LedgerCore.Fact
        // import NotThis
        let s = "import NorThis"
        """
        XCTAssertEqual(Self.importedModules(text), ["Foundation", "LedgerTesting", "CryptoTesting", "XCTest", "LedgerCore"])
    }

    /// Module names of the `import` declarations (attributes, access levels and kinds allowed).
    static func importedModules(_ text: String) -> [String] {
        text.split(separator: "\n").compactMap { raw in
            var words = raw.split(whereSeparator: \.isWhitespace).map(String.init)
            while let first = words.first, first.hasPrefix("@") || ["public", "package", "internal", "fileprivate", "private"].contains(first) {
                words.removeFirst()
            }
            guard words.first == "import", words.count >= 2 else { return nil }
            let kinds: Set<String> = ["struct", "class", "enum", "protocol", "typealias", "func", "let", "var"]
            let path = kinds.contains(words[1]) && words.count >= 3 ? words[2] : words[1]
            return path.split(separator: ".").first.map(String.init)
        }
    }

    // MARK: running SwiftPM

    /// Run once per test process: both tests read the same graph.
    static let dumped = Result { try dumpPackage() }

    /// `swift package dump-package` for this package. A scratch path of its own, because the
    /// `swift test` running this holds the lock on .build; manifests are cached by SwiftPM across
    /// scratch paths, so this takes about a second.
    static func dumpPackage() throws -> Data {
        let swift = try swiftExecutable()
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-package-graph-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let process = Process()
        process.executableURL = swift
        process.arguments = ["package", "--package-path", packageRoot.path, "--scratch-path", scratch.path, "dump-package"]
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read while it runs: a full pipe would block it.
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let errorText = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw GraphError("`\(swift.path) \(process.arguments!.joined(separator: " "))` exited \(process.terminationStatus): \(errorText)")
        }
        return data
    }

    /// The `swift` driver: SWIFT_EXEC's directory, then PATH, then the toolchain's usual home.
    static func swiftExecutable() throws -> URL {
        let environment = ProcessInfo.processInfo.environment
        var directories: [String] = []
        if let exec = environment["SWIFT_EXEC"], !exec.isEmpty { directories.append((exec as NSString).deletingLastPathComponent) }
        directories += (environment["PATH"] ?? "").split(separator: ":").map(String.init)
        directories += ["/opt/swift/usr/bin", "/usr/bin", "/usr/local/bin"]
        for directory in directories where !directory.isEmpty {
            let candidate = URL(fileURLWithPath: directory).appendingPathComponent("swift")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw GraphError("no `swift` executable in \(directories.joined(separator: ":")): put the toolchain's bin directory on PATH")
    }
}

struct GraphError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The parts of `dump-package` JSON the check reads.
struct PackageGraph {
    struct Target {
        var type: String
        var path: String?
        /// Target names (byName and target dependencies).
        var dependencies: [String]
        /// Products of other packages.
        var products: [String]
    }

    var targets: [String: Target] = [:]
    var products: [String: (type: String, targets: [String])] = [:]

    init(json: Data) throws {
        guard let root = try JSONSerialization.jsonObject(with: json) as? [String: Any],
              let targetList = root["targets"] as? [[String: Any]], let productList = root["products"] as? [[String: Any]]
        else { throw GraphError("dump-package output has no targets/products: \(String(decoding: json.prefix(300), as: UTF8.self))") }
        for t in targetList {
            guard let name = t["name"] as? String else { throw GraphError("a target without a name: \(t)") }
            var target = Target(type: t["type"] as? String ?? "", path: t["path"] as? String, dependencies: [], products: [])
            for dependency in t["dependencies"] as? [[String: Any]] ?? [] {
                guard let (kind, value) = dependency.first, let fields = value as? [Any], let first = fields.first as? String else {
                    throw GraphError("unreadable dependency of \(name): \(dependency)")
                }
                switch kind {
                case "byName", "target": target.dependencies.append(first)
                case "product": target.products.append(first)
                default: throw GraphError("unknown dependency kind \(kind) of \(name): update PackageGraph")
                }
            }
            targets[name] = target
        }
        for p in productList {
            guard let name = p["name"] as? String, let names = p["targets"] as? [String] else { throw GraphError("unreadable product: \(p)") }
            let type = (p["type"] as? [String: Any])?.keys.first ?? ""
            products[name] = (type, names)
        }
    }

    func productType(_ name: String) throws -> String {
        guard let product = products[name] else { throw GraphError("no product \(name); products: \(products.keys.sorted())") }
        return product.type
    }

    /// Every target a product's targets reach (themselves included), and the outside products
    /// they name. A `byName` that is not a target of this package is an outside product.
    func closure(ofProduct name: String) throws -> (targets: Set<String>, products: Set<String>) {
        guard let product = products[name] else { throw GraphError("no product \(name); products: \(products.keys.sorted())") }
        var seen = Set<String>(), outside = Set<String>()
        var queue = product.targets
        while let next = queue.popLast() {
            guard let target = targets[next] else { outside.insert(next); continue }
            guard seen.insert(next).inserted else { continue }
            outside.formUnion(target.products)
            queue += target.dependencies
        }
        return (seen, outside)
    }
}

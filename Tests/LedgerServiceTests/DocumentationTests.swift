import Foundation
import XCTest

/// The README and docs/ cite tests as proof ("proved by …"): every cited test must exist, so a
/// renamed or removed test cannot leave a claim without its proof.
final class DocumentationTests: XCTestCase {
    func testEveryTestCitedInTheDocumentationExists() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let fm = FileManager.default
        var documents = [root.appendingPathComponent("README.md")]
        documents += try fm.contentsOfDirectory(at: root.appendingPathComponent("docs"), includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "md" }
        var sources = ""
        for case let file as URL in fm.enumerator(at: root.appendingPathComponent("Tests"), includingPropertiesForKeys: nil)!
        where file.pathExtension == "swift" {
            sources += try String(contentsOf: file, encoding: .utf8)
        }
        let pattern = try NSRegularExpression(pattern: #"\b([A-Z][A-Za-z0-9]*Tests)\.(test[A-Za-z0-9_]+)"#)
        var cited = 0
        var missing: [String] = []
        for document in documents {
            let text = try String(contentsOf: document, encoding: .utf8)
            for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                let test = String(text[Range(match.range(at: 2), in: text)!])
                cited += 1
                if !sources.contains("func \(test)(") { missing.append("\(document.lastPathComponent): \(text[Range(match.range, in: text)!])") }
            }
        }
        XCTAssertGreaterThan(cited, 20)
        XCTAssertEqual(missing, [], "cited as proof but no such test")
    }
}

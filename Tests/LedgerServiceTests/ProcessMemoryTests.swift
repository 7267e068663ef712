import Foundation
@testable import LedgerService
import XCTest

/// The allocator's free pages go back to the kernel: memory freed below a block still in use is
/// resident until a trim, and gone after it.
final class ProcessMemoryTests: XCTestCase {
    #if os(Linux)
    func testFreedMemoryBelowABlockStillHeldLeavesTheResidentSetAfterATrim() throws {
        // 1 KB blocks come from the heap (not mmap), and every 64th is kept: the heap cannot
        // shrink from its top, so without a trim what was freed stays resident.
        let count = 200_000, size = 1024
        var blocks: [UnsafeMutableRawPointer] = []
        blocks.reserveCapacity(count)
        for _ in 0..<count {
            let block = malloc(size)!
            memset(block, 1, size)
            blocks.append(block)
        }
        var kept: [UnsafeMutableRawPointer] = []
        for (index, block) in blocks.enumerated() {
            if index % 64 == 63 { kept.append(block) } else { free(block) }
        }
        defer { for block in kept { free(block) } }
        let before = try residentBytes()
        ProcessMemory.returnFreePages()
        let after = try residentBytes()
        // About 190 MB were freed; at least half of that must have left the resident set.
        XCTAssertGreaterThan(before - after, 95_000_000, "resident \(before) before the trim, \(after) after")
    }

    func testTheServiceTrimsUntilShutdown() async throws {
        let service = ProcessMemoryService(interval: .milliseconds(10))
        let running = Task { try await service.run() }
        try await Task.sleep(for: .milliseconds(50))
        await service.shutdown()
        try await running.value
    }

    private func residentBytes() throws -> Int {
        let statm = try String(contentsOfFile: "/proc/self/statm", encoding: .utf8)
        let pages = Int(statm.split(separator: " ")[1])!
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
    #endif
}

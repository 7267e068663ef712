// Commands whose implementation lands on other branches; each file replaces its line here.
enum RebuildCommand { static func run(_ a: [String]) async throws { throw CommandFailure(message: "not built yet") } }
enum ProjectCommand { static func run(_ a: [String]) async throws { throw CommandFailure(message: "not built yet") } }
enum BenchCommand { static func run(_ a: [String]) async throws { throw CommandFailure(message: "not built yet") } }

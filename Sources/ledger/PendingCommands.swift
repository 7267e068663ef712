// Commands whose implementation lands on other branches; each file replaces its line here.
enum BenchCommand { static func run(_ a: [String]) async throws { throw CommandFailure(message: "not built yet") } }

import Foundation

/// A line chart drawn by the server as inline SVG (the CSP forbids scripts and styles from
/// anywhere else, and the desk loads nothing external): axes, labels at the ends and middle,
/// a legend, one `<circle>` per point with a `<title>` (the hover text) inside a link to the
/// subscriptions or refund cases behind it. Every text goes through `HTML` escaping.
struct SVGChart: Sendable {
    struct Series: Sendable {
        var label: String
        var values: [Int64]
        /// Where each point drills down to (nil: no link).
        var links: [AuditURL?]
    }

    var title: String
    var periods: [String]
    var series: [Series]
    /// Formats a value for labels and titles (money in units, counts as digits).
    var format: @Sendable (Int64) -> String = { String($0) }

    static let colours = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#57606a", "#953800"]
    static let width = 800, height = 280, left = 70, right = 16, top = 16, bottom = 40

    /// The number of point circles drawn (what the UI test counts).
    var pointCount: Int { series.reduce(0) { $0 + $1.values.count } }

    var svg: HTML {
        let all = series.flatMap(\.values)
        let hi = max(all.max() ?? 0, 1), lo = min(all.min() ?? 0, 0)
        let plotW = Double(Self.width - Self.left - Self.right), plotH = Double(Self.height - Self.top - Self.bottom)
        func x(_ i: Int) -> Double {
            periods.count <= 1 ? Double(Self.left) + plotW / 2 : Double(Self.left) + plotW * Double(i) / Double(periods.count - 1)
        }
        func y(_ v: Int64) -> Double { Double(Self.top) + plotH * (1 - Double(v - lo) / Double(hi - lo)) }
        func n(_ d: Double) -> String { String(format: "%.1f", d) }
        var parts: [HTML] = []
        let baseline = y(0)
        parts.append("<line class=\"axis\" x1=\"\(n(Double(Self.left)))\" y1=\"\(n(Double(Self.top)))\" x2=\"\(n(Double(Self.left)))\" y2=\"\(n(Double(Self.top) + plotH))\" stroke=\"#57606a\"/>")
        parts.append("<line class=\"axis\" x1=\"\(n(Double(Self.left)))\" y1=\"\(n(baseline))\" x2=\"\(n(Double(Self.width - Self.right)))\" y2=\"\(n(baseline))\" stroke=\"#57606a\"/>")
        for v in Set([lo, 0, hi, hi / 2]).sorted() {
            parts.append("<text class=\"ylabel\" x=\"\(n(Double(Self.left - 6)))\" y=\"\(n(y(v) + 4))\" text-anchor=\"end\" font-size=\"11\">\(format(v))</text>")
        }
        let labelled = periods.isEmpty ? [] : Array(Set([0, periods.count / 2, periods.count - 1])).sorted()
        for i in labelled {
            // The last label ends at its point and the first starts at it, so neither is clipped
            // by the plot's edge (a centred "2026-11" overran the right margin).
            let anchor = periods.count > 1 && i == periods.count - 1 ? "end" : (periods.count > 1 && i == 0 ? "start" : "middle")
            parts.append("<text class=\"xlabel\" x=\"\(n(x(i)))\" y=\"\(n(Double(Self.height - Self.bottom + 16)))\" text-anchor=\"\(anchor)\" font-size=\"11\">\(periods[i])</text>")
        }
        for (s, line) in series.enumerated() {
            let colour = Self.colours[s % Self.colours.count]
            let points = line.values.enumerated().map { "\(n(x($0.offset))),\(n(y($0.element)))" }.joined(separator: " ")
            parts.append("<polyline fill=\"none\" stroke=\"\(colour)\" stroke-width=\"2\" points=\"\(points)\"/>")
            for (i, v) in line.values.enumerated() {
                let circle: HTML = "<circle class=\"point\" data-series=\"\(line.label)\" data-period=\"\(periods[i])\" data-value=\"\(v)\" cx=\"\(n(x(i)))\" cy=\"\(n(y(v)))\" r=\"4\" fill=\"\(colour)\"><title>\(line.label) \(periods[i]): \(format(v))</title></circle>"
                if i < line.links.count, let link = line.links[i] {
                    parts.append("<a href=\"\(link)\">\(circle)</a>")
                } else {
                    parts.append(circle)
                }
            }
            let lx = Double(Self.left + 10 + s * 150)
            parts.append("<rect x=\"\(n(lx))\" y=\"\(n(Double(Self.height - 14)))\" width=\"10\" height=\"10\" fill=\"\(colour)\"/><text class=\"legend\" x=\"\(n(lx + 14))\" y=\"\(n(Double(Self.height - 5)))\" font-size=\"11\">\(line.label)</text>")
        }
        return "<svg class=\"chart\" role=\"img\" aria-label=\"\(title)\" width=\"100%\" viewBox=\"0 0 \(Self.width) \(Self.height)\" xmlns=\"http://www.w3.org/2000/svg\"><title>\(title)</title>\(parts)</svg>"
    }
}

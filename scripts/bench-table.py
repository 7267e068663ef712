#!/usr/bin/env python3
"""Writes README's performance table from .build/bench.json (what `ledger-dev bench` records).

usage: scripts/bench-table.py [BENCH_JSON] [README]

Replaces the lines between `<!-- bench-table:start -->` and `<!-- bench-table:end -->` in README
with one row per recorded benchmark: the ledger's median (min–max), the same-run baseline's median
(min–max), the median of the per-run ratios and its target. Nothing else in README changes.
"""
import json
import sys

ORDER = ["append/c1", "append/c8", "append/c32", "ingest", "ingest/10-prior", "ingest/100-prior", "ingest/100-prior-vs-1-prior", "webhooks", "ties",
         "verify", "read", "read/entitlements", "read/at", "rebuild", "refund-inquiry", "refunds", "fold"]


def number(x, unit):
    if unit == "s":
        return f"{x * 1000:,.1f} ms" if x < 1 else f"{x:,.2f} s"
    return f"{x:,.0f} {unit}" if abs(x) >= 100 else f"{x:,.2f} {unit}"


def figure(f, unit):
    return f"{number(f['median'], unit)} ({number(f['min'], unit)}–{number(f['max'], unit)})"


def ratios(s):
    """Per-run ratios, as BenchSummary.ratios computes them (runs paired by index)."""
    out = []
    for l, b in zip(s["ledger"]["runs"], s["baseline"]["runs"]):
        num, den = (l, b) if (s["ratioIsLedgerOverBaseline"] or s["higherIsBetter"]) else (b, l)
        out.append(num / den if den > 0 else 0)
    return out


def median(xs):
    xs = sorted(xs)
    if not xs:
        return 0
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def row(s):
    unit = s["unit"]
    rs = ratios(s)
    ratio = f"**{median(rs):.2f}**"
    per_run = ", ".join(f"{r:.2f}" for r in rs)
    target = ""
    if s.get("target"):
        target = f"; target {s['target']}: {'met' if s.get('targetMet') else '**not met**'}"
    details = "; ".join(f"{k} {v:,.1f}" for k, v in sorted(s.get("details", {}).items()))
    ledger = f"{s['ledgerLabel']}: {figure(s['ledger'], unit)}" + (f"<br>{details}" if details else "")
    load = f", load {s['loadAverage']:.1f}" if s.get("loadAverage") is not None else ""
    return (f"| {s['name']} | `{s['command']}` | {ledger} | {s['baselineLabel']}: {figure(s['baseline'], unit)} "
            f"| {ratio} (runs: {per_run}{load}){target} |")


def main():
    bench = sys.argv[1] if len(sys.argv) > 1 else ".build/bench.json"
    readme = sys.argv[2] if len(sys.argv) > 2 else "README.md"
    with open(bench) as f:
        summaries = json.load(f)
    names = [n for n in ORDER if n in summaries] + sorted(n for n in summaries if n not in ORDER)
    rows = ["| benchmark | command | ledger: median (min–max) | same-run baseline: median (min–max) | ratio (median of per-run ratios) |",
            "|---|---|---|---|---|"]
    rows += [row(summaries[n]) for n in names]
    measured = sorted({summaries[n]["measuredAt"][:10] for n in names})
    rows.append("")
    rows.append(f"Medians of each row's runs (listed with the load average when they began), measured "
                f"{', '.join(measured)} on {summaries[names[0]]['cpus']} CPUs (`make bench`, from `.build/bench.json`).")
    with open(readme) as f:
        text = f.read()
    start, end = "<!-- bench-table:start -->", "<!-- bench-table:end -->"
    if start not in text or end not in text:
        sys.exit(f"{readme} has no {start} … {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    with open(readme, "w") as f:
        f.write(head + start + "\n" + "\n".join(rows) + "\n" + end + tail)
    print(f"{readme}: {len(names)} benchmarks from {bench}")


if __name__ == "__main__":
    main()

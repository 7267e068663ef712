#!/usr/bin/env python3
"""Writes README's performance table from .build/bench.json (what `ledger-dev bench` records).

usage: scripts/bench-table.py [BENCH_JSON] [README]
       scripts/bench-table.py --check [README]

Replaces the lines between `<!-- bench-table:start -->` and `<!-- bench-table:end -->` in README
with one row per recorded benchmark: the ledger's median (min–max), the same-run baseline's median
(min–max), the median of the per-run ratios and its target, and a last line naming BENCH_JSON.
Nothing else in README changes.

--check: regenerates the table from the bench file its last line names (a committed copy under
docs/bench/) and exits 1 when README's table differs — the figures in README are that file's.
"""
import json
import os
import re
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


START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"


def table(bench):
    with open(bench) as f:
        summaries = json.load(f)
    names = [n for n in ORDER if n in summaries] + sorted(n for n in summaries if n not in ORDER)
    rows = ["| benchmark | command | ledger: median (min–max) | same-run baseline: median (min–max) | ratio (median of per-run ratios) |",
            "|---|---|---|---|---|"]
    rows += [row(summaries[n]) for n in names]
    measured = sorted({summaries[n]["measuredAt"][:10] for n in names})
    rows.append("")
    rows.append(f"Medians of each row's runs (listed with the load average when they began), measured "
                f"{', '.join(measured)} on {summaries[names[0]]['cpus']} CPUs (`make bench`, from `{bench}`).")
    return rows, names


def split(readme):
    with open(readme) as f:
        text = f.read()
    if START not in text or END not in text:
        sys.exit(f"{readme} has no {START} … {END} markers")
    head, rest = text.split(START, 1)
    body, tail = rest.split(END, 1)
    return head, body, tail


def check(readme):
    _, body, _ = split(readme)
    named = re.findall(r"from `([^`]+\.json)`\)\.\s*$", body.strip())
    if not named:
        sys.exit(f"{readme}: the table's last line names no bench file (`make bench` writes it)")
    bench = named[-1]
    if not os.path.exists(bench):
        sys.exit(f"{readme}: the table was written from {bench}, which is not in the checkout; commit it (make bench copies it to docs/bench/)")
    rows, _ = table(bench)
    if body.strip("\n") != "\n".join(rows):
        expected = "\n".join(rows).splitlines()
        for got, want in zip(body.strip("\n").splitlines() + [""] * len(expected), expected):
            if got != want:
                print(f"README:   {got[:200]}\n{bench}: {want[:200]}", file=sys.stderr)
                break
        sys.exit(f"{readme}: the performance table differs from {bench}; regenerate it with scripts/bench-table.py {bench} {readme}")
    print(f"{readme}: the performance table is {bench}'s")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        check(sys.argv[2] if len(sys.argv) > 2 else "README.md")
        return
    bench = sys.argv[1] if len(sys.argv) > 1 else ".build/bench.json"
    readme = sys.argv[2] if len(sys.argv) > 2 else "README.md"
    rows, names = table(bench)
    head, _, tail = split(readme)
    with open(readme, "w") as f:
        f.write(head + START + "\n" + "\n".join(rows) + "\n" + END + tail)
    print(f"{readme}: {len(names)} benchmarks from {bench}")


if __name__ == "__main__":
    main()

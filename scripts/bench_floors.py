#!/usr/bin/env python3
"""Checks `make bench-smoke`'s figures (a `ledger-dev bench` JSON file) against its floors.

Each floor is a ratio against the same run's baseline, far below the performance targets
(README "Performance"): it catches a hot path made several times slower, not a few percent.
Every run's ratio must clear it, not only the median. Exit status 1 names each floor missed.
"""
import json
import sys

# (summary name, floor, what it guards). Each floor sits at about half of what a quiet run of this
# commit measures (ingest 0.18-0.23, 100-prior ÷ 1-prior 0.61-0.65, webhooks 0.47, entitlements
# ~0.35), so a hot path made two or three times slower fails CI while run-to-run noise does not.
# The floors the performance issue asks for (0.25, 0.7, 0.5, 0.25) replace these once the targets
# they sit below are met; raising a floor is the point, lowering one needs a profile and a reason.
FLOORS = [
    ("ingest", 0.10, "ingest with 1 prior event ÷ pgbench of the same bytes"),
    ("ingest/100-prior-vs-1-prior", 0.35, "ingest with 100 prior events ÷ with 1 (history must not cost)"),
    ("webhooks", 0.20, "webhook events delivered ÷ derived by the same run's ingest"),
    ("read/entitlements", 0.15, "GET entitlements ÷ GET /healthz maximum"),
]


def ratios(summary):
    # Every floor is a rate against a rate: ledger ÷ baseline, paired by run.
    ledger, baseline = summary["ledger"]["runs"], summary["baseline"]["runs"]
    return [l / b if b else 0.0 for l, b in zip(ledger, baseline)]


def main(path):
    with open(path) as f:
        figures = json.load(f)
    missed = []
    for name, floor, what in FLOORS:
        summary = figures.get(name)
        if summary is None:
            missed.append(f"{name}: no figure recorded (did its benchmark run?)")
            continue
        rs = ratios(summary)
        load = summary.get("loadAverage")
        line = f"{name}: {', '.join(f'{r:.2f}' for r in rs)} (floor {floor:.2f}; {what}; load {load})"
        if not rs or min(rs) < floor:
            missed.append(line)
            print("MISSED " + line)
        else:
            print("ok     " + line)
    if missed:
        print(f"bench-smoke: {len(missed)} floor(s) missed — the hot path got several times slower; profile it "
              f"(perf record -g of `ledger serve` and PostgreSQL during `ledger-dev bench ingest`) before changing floors",
              file=sys.stderr)
        return 1
    print("bench-smoke: every floor cleared")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".build/bench-smoke.json"))

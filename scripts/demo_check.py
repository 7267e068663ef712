#!/usr/bin/env python3
"""Runs every command `make demo` printed, as printed, and checks each answers as the demo says.

usage: demo_check.py DEMO_OUTPUT ENVIRONMENT

The demo's output after "Try:" holds comment lines ("  # …"), commands ("  curl …", the
`ledger verify` line, the psql | verify-payload pipeline continued with a backslash) and one
"open URL" line for a person. Exit status 1 names every command that did not answer as expected.
"""
import json
import re
import subprocess
import sys
import urllib.request


def commands(text):
    """(comment, command) pairs in the order printed."""
    lines = text.split("Try:", 1)[1].splitlines()
    out, comment, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("  #"):
            comment = line.strip()
        elif line.startswith("  ") and not line.startswith("   ") and not line.startswith("  open "):
            command = line.strip()
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            out.append((comment, command))
        elif line.startswith("  open "):
            out.append(("a page for a person", line.strip()))
        i += 1
    return out


def run(command):
    p = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def check(comment, command, environment):
    """Returns a problem, or None when the command answered as printed."""
    if command.startswith("open "):
        base = re.search(r"(http://[^ ]+)/audit", command).group(1)
        with urllib.request.urlopen(base + "/audit/login", timeout=10) as r:
            return None if r.status == 200 else f"/audit/login answered {r.status}"
    code, out, err = run(command)
    if code != 0:
        return f"exit status {code}: {(err or out)[:300]}"
    if "verify" in command:
        return None
    if command.startswith("grep -c ' verified '"):
        return None if out.strip().isdigit() and int(out.strip()) > 0 else f"no verified webhook: {out[:200]}"
    if command.startswith("grep ' verified '"):
        lines = [l for l in out.splitlines() if l.strip()]
        if not lines or any("REFUSED" in l for l in lines):
            return f"expected verified webhook lines: {out[:300]}"
        return None
    if not out.strip():
        return "no output"
    url = re.search(r'"?(http://[^" ]+)"?', command)
    url = url.group(1) if url else ""
    if environment == "Sandbox" and ("/v1/subscriptions/" in url or "/v1/customers/" in url) and "WeChat" not in comment:
        if "environment=Sandbox" not in url:
            return "a Sandbox demo printed a lookup without ?environment=Sandbox"
    if "format=csv" in url:
        rows = out.strip().splitlines()
        if not rows[0].startswith("# ledger report") or len(rows) < 3:
            return f"not a report CSV: {out[:200]}"
        return None
    if "/metrics" in url:
        return None if all(l.startswith("ledger_") for l in out.strip().splitlines()) else "metrics lines expected"
    try:
        body = json.loads(out)
    except ValueError:
        return f"not JSON: {out[:200]}"
    if isinstance(body, dict) and "error" in body:
        return f"answered an error: {out[:300]}"
    if "/readyz" in url:
        return None if body.get("status") == "ready" else f"not ready: {out[:300]}"
    if "/entitlements" in url:
        if "at=" not in url and not body.get("entitlements"):
            return f"no entitlements for a customer the demo printed as entitled: {out[:300]}"
        return None
    if "/events" in url:
        return None if body.get("events") else f"no events: {out[:200]}"
    if "/v1/subscriptions/" in url:
        return None if body.get("status") else f"no status: {out[:200]}"
    if "/v1/reports/retention" in url:
        return None if body.get("cohorts") else f"no cohorts: {out[:200]}"
    if "/v1/reports/" in url:
        rows = body.get("rows") or []
        if len(rows) < 12 or not any(r.get("active", 0) > 0 for r in rows):
            return f"expected twelve months with active subscriptions: {out[:300]}"
        return None
    return None


def main():
    text = open(sys.argv[1]).read()
    environment = sys.argv[2]
    found = commands(text)
    problems = []
    for comment, command in found:
        problem = check(comment, command, environment)
        print(("ok    " if problem is None else "FAIL  ") + command[:150])
        if problem:
            problems.append(f"{command[:200]}\n      {problem}")
    if len(found) < 15:
        problems.append(f"only {len(found)} commands found in the demo's output")
    if problems:
        print(f"demo_check ({environment}): {len(problems)} of {len(found)} commands did not answer as printed:")
        for p in problems:
            print("  " + p)
        return 1
    print(f"demo_check ({environment}): all {len(found)} printed commands answered as printed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# The Standard Webhooks reference library (PyPI `standardwebhooks`, unchanged) in the git-ignored
# .venv, once: the webhook tests verify every signature the ledger sends with it (make test runs
# this first). Prints the venv's python.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
if ! "$venv/bin/python" -c 'import standardwebhooks' 2>/dev/null; then
    echo "webhooks-venv: installing standardwebhooks into $venv" >&2
    [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "standardwebhooks>=1.0,<2" >&2
fi
echo "$venv/bin/python"

#!/usr/bin/env bash
# Contract test of a running service against docs/openapi.yaml with schemathesis: no 5xx, and every
# response (status, content type, body) as the contract describes it.
#
#   LEDGER_API_URL=http://127.0.0.1:8080 TOKEN=<app token> scripts/test-api.sh
#   LEDGER_API_URL=… LEDGER_API_TOKENS="<app token> <auditor token>" scripts/test-api.sh
#
# It starts nothing: the caller (make test-api) runs the service and passes its URL and tokens.
# schemathesis comes from PyPI into the git-ignored .venv at the repository root, once.
# Optional: LEDGER_API_MAX_EXAMPLES (default 50 per operation), LEDGER_API_SEED (reproduce a run),
# LEDGER_API_REPORT_DIR (write a JUnit report there), SCHEMATHESIS_SPEC (pip requirement).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

: "${LEDGER_API_URL:?set LEDGER_API_URL to the running service, e.g. http://127.0.0.1:8080}"
tokens="${LEDGER_API_TOKENS:-${TOKEN:-}}"
if [[ -z "$tokens" ]]; then
    echo "test-api: set TOKEN (or LEDGER_API_TOKENS, space-separated) to bearer tokens of the service (LEDGER_TOKENS)" >&2
    exit 2
fi
schema="$root/docs/openapi.yaml"
venv="$root/.venv"
spec="${SCHEMATHESIS_SPEC:-schemathesis>=4.1,<5}"

if [[ ! -x "$venv/bin/schemathesis" ]]; then
    echo "test-api: installing schemathesis into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet "$spec"
fi
st="$venv/bin/schemathesis"

# v3 and v4 spell the base URL and the check list differently; ask the installed one.
version="$("$st" --version | sed -E 's/[^0-9]*([0-9]+)\..*/\1/')"
checks=(not_a_server_error response_schema_conformance)
args=()
if [[ "$version" -ge 4 ]]; then
    args+=(--url "$LEDGER_API_URL" --checks "$(IFS=,; echo "${checks[*]}")")
    # No example database: it would be written into the repository (.schemathesis/).
    args+=(--max-examples "${LEDGER_API_MAX_EXAMPLES:-50}" --request-timeout 10 --no-color --generation-database none)
    [[ -n "${LEDGER_API_SEED:-}" ]] && args+=(--seed "$LEDGER_API_SEED")
    [[ -n "${LEDGER_API_REPORT_DIR:-}" ]] && args+=(--report junit --report-dir "$(realpath -m "$LEDGER_API_REPORT_DIR")")
else
    args+=(--base-url "$LEDGER_API_URL")
    for c in "${checks[@]}"; do args+=(--checks "$c"); done
    args+=(--hypothesis-max-examples "${LEDGER_API_MAX_EXAMPLES:-50}" --request-timeout 10000 --no-color)
    [[ -n "${LEDGER_API_SEED:-}" ]] && args+=(--hypothesis-seed "$LEDGER_API_SEED")
    [[ -n "${LEDGER_API_REPORT_DIR:-}" ]] && args+=(--junit-xml "$(realpath -m "$LEDGER_API_REPORT_DIR")/junit.xml")
fi

status=0
n=0
for token in $tokens; do
    n=$((n + 1))
    # The token is a secret: name it by its position, never echo it.
    echo "test-api: schemathesis $version against $LEDGER_API_URL with token #$n" >&2
    # Run inside the ignored .venv: schemathesis keeps its crash cache (for `st replay`) in the
    # working directory, which must not be the repository.
    (cd "$venv" && "$st" run "$schema" "${args[@]}" -H "Authorization: Bearer $token") || status=$?
done
exit "$status"

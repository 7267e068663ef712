# Two commands do all set-up on a fresh Debian machine with the Swift toolchain:
#   make run    install what is missing, start the project-local PostgreSQL, migrate, serve
#   make test   the same database set-up, then the whole test suite
# Two executables: `ledger` is the product (serve, migrate, rebuild, project, rederive,
# verify-payload) and links no test support; `ledger-dev` (simulate, bench, reliability) does.
SHELL := /bin/bash
SWIFT_BIN := $(firstword $(wildcard /opt/swift/usr/bin) $(dir $(shell command -v swift 2>/dev/null)))
export PATH := $(SWIFT_BIN):$(PATH)
DB := scripts/db.sh
SWIFT_FLAGS ?= -c debug
LEDGER := .build/debug/ledger

.PHONY: run test build build-dev release db-start db-stop deps migrate demo bench bench-smoke test-api test-reliability test-scale test-soak test-ui test-demo clean

deps:
	@$(DB) deps

db-start: deps
	@$(DB) start

db-stop:
	@$(DB) replica-stop
	@$(DB) stop

build: deps
	swift build $(SWIFT_FLAGS) --product ledger

# Development tools (simulate, bench, reliability); never deployed.
build-dev: deps
	swift build $(SWIFT_FLAGS) --product ledger-dev

release: deps
	swift build -c release --product ledger

# Migrations run as ledger_owner, the database's owner and not a superuser (scripts/db.sh creates
# it): they create the schema and grant the restricted roles; the service then connects as
# ledger_service, which appends only through append_events() and reads.
migrate: db-start build
	@eval "$$($(DB) env)"; LEDGER_DATABASE_URL="$$LEDGER_OWNER_DATABASE_URL" $(LEDGER) migrate

run: migrate
	@eval "$$($(DB) env)"; LEDGER_INSECURE_COOKIES=$${LEDGER_INSECURE_COOKIES:-true} exec $(LEDGER) serve

# The read-replica tests need the streaming replica beside the cluster.
test: db-start
	@$(DB) replica-start
	@scripts/webhooks-venv.sh >/dev/null
	@eval "$$($(DB) env)"; swift test --disable-swift-testing $(SWIFT_TEST_FLAGS)

# Real data in the API within a minute: serve in the background and post a simulated population.
demo: deps
	@scripts/demo.sh

# `make demo` on a scratch database and port (Production, then Sandbox), and every command it
# prints run as printed and checked (scripts/demo_check.py).
test-demo: deps
	@scripts/demo-test.sh

# schemathesis (PyPI, in a git-ignored .venv) against the running service and docs/openapi.yaml.
test-api: deps
	@scripts/api-test.sh

# The auditor's pages in Debian's Chromium (chromium-driver + selenium in the git-ignored .venv):
# sign-in, search, timeline, refund case, CSV = API, sign-out, app-token refusal, CSP; screenshots
# in .build/ui/.
test-ui: deps
	@scripts/ui-test.sh

# Crash, outage, duplicate-storm, slowloris and graceful-shutdown scenarios against the real binary.
test-reliability: deps
	@scripts/test-reliability.sh $(RELIABILITY_FLAGS)

# Two service instances, a worker and the read replica on one database under mixed load.
test-scale: deps
	@scripts/test-scale.sh $(SCALE_FLAGS)

# Generated lifecycles (the differential generator and model) through the real service while it
# is killed, checked against their truth, the database, a rebuild and `ledger verify` (issue 25).
# SOAK_FLAGS="--quick --debug" runs the couple-of-minutes version.
test-soak: deps
	@scripts/test-soak.sh $(SOAK_FLAGS)

# Every benchmark, in a release build: each prints the median of 3 runs with min/max beside its
# same-run baseline and one `ratio:` line, and records them in .build/bench.json; that file is
# kept as docs/bench/<date>.json (commit it) and README's performance table is rewritten from it
# (scripts/bench-table.py; `make test` checks the table against the file it names).
# (`ledger-dev bench` spawns the release `ledger` next to it for ingest, read, refund-inquiry.)
BENCHMARKS ?= verify fold append ingest read rebuild refund-inquiry refunds reports webhooks ties
bench: release db-start
	swift build -c release --product ledger-dev
	@rm -f .build/bench.json
	@eval "$$($(DB) env)"; for b in $(BENCHMARKS); do \
	  echo "== ledger-dev bench $$b"; .build/release/ledger-dev bench $$b || exit 1; done
	@mkdir -p docs/bench && cp .build/bench.json docs/bench/$$(date -u +%F).json
	@python3 scripts/bench-table.py docs/bench/$$(date -u +%F).json README.md

# The regression guard CI runs (.ci/run): a release build, one small run of the ingest (1 and 100
# prior events), webhook and entitlement-read benchmarks, each checked against a floor far below
# its target (scripts/bench_floors.py). Figures go to .build/bench-smoke.json, never the README.
bench-smoke: deps
	@scripts/bench-smoke.sh

clean: db-stop
	rm -rf .build .pg

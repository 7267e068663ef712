-- 0007: reconciliation with Apple and answers to CONSUMPTION_REQUEST.
--
-- What Apple answers and what the ledger decides are events (API/…, consumption/…, reconcile/…);
-- these two tables are only the bookkeeping of the jobs that produce them, like
-- projection_checkpoints: which runs ran (and who asked), and which consumption requests still
-- wait for an answer. Losing them loses no evidence.

-- One row per reconciliation run (`ledger reconcile`, POST /v1/admin/reconcile, the periodic
-- runner). The periodic runner reads the latest finished run to decide whether a period has
-- passed, so two instances on one database run once per period.
CREATE TABLE reconciliation_runs (
    run_id          text    PRIMARY KEY CHECK (run_id <> ''),
    trigger         text    NOT NULL CHECK (trigger IN ('cli', 'admin', 'periodic')),
    environments    text[]  NOT NULL,
    window_since    bigint  NOT NULL,          -- ms
    window_until    bigint  NOT NULL,          -- ms
    dry_run         boolean NOT NULL,
    all_known       boolean NOT NULL,
    requested_by    jsonb   NOT NULL,
    started_at      bigint  NOT NULL,          -- ms
    finished_at     bigint,
    status          text    NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    summary         jsonb,                     -- the report's counts
    error           text,
    report_position bigint                     -- the reconcile/report event, when one was stored
);
CREATE INDEX reconciliation_runs_latest ON reconciliation_runs (trigger, started_at DESC);

-- One row per CONSUMPTION_REQUEST notification (its event's position) the responder has taken up:
-- `pending` until an answer event (consumption/sent, /refused, /not-sent) is stored, then `done`.
-- Rows are added from the facts (kind consumption_request), so a request stored while no sender ran
-- is still answered: the outbox survives restarts because the requests are events.
CREATE TABLE consumption_outbox (
    request_position bigint  PRIMARY KEY,
    subscription     text    NOT NULL,         -- '<environment>:<originalTransactionId>'
    transaction_id   text    NOT NULL,
    requested_at     bigint  NOT NULL,         -- the notification's signedDate (ms)
    deadline         bigint  NOT NULL,         -- requested_at + 12 h: Apple's window
    status           text    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  bigint  NOT NULL,
    last_error       text,
    answer_position  bigint,
    enqueued_at      bigint  NOT NULL
);
CREATE INDEX consumption_outbox_due ON consumption_outbox (next_attempt_at) WHERE status = 'pending';

GRANT SELECT, INSERT, UPDATE ON reconciliation_runs, consumption_outbox TO ledger_service;

-- The consent in force for a customer is its latest `consent` fact: one lookup per consumption
-- request, indexed so it does not scan every customer's consent.
CREATE INDEX facts_consent ON public.facts (schema_version, customer_id, position) WHERE kind = 'consent';

-- Fact schema version 3 (FactDecoder.schemaVersion): App Store API snapshots state reversals,
-- consent and consumption answers have facts. Its checkpoint starts at 0 like version 2's did
-- (0004): the catch-up worker (or `ledger rederive`) derives it for existing events, and appends
-- record it from then on.
INSERT INTO projection_checkpoints (projection, position, status) VALUES ('facts.v3', 0, 'running')
ON CONFLICT (projection) DO NOTHING;
-- A database with no events has nothing to switch over from: version 2's checkpoint goes at once
-- (with events, `ledger rederive` derives version 3 and `--drop-other-versions` retires version 2).
DELETE FROM projection_checkpoints WHERE projection = 'facts.v2' AND NOT EXISTS (SELECT 1 FROM events);

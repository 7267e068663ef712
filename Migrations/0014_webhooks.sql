-- 0014: outbound webhooks (Sources/*/Webhooks): the endpoints the ledger announces events to.
--
-- Every change of an endpoint is a ledger event first (`webhooks/endpoint-*` in stream
-- ledger:admin, naming who asked and the secret's fingerprint, never the secret); this table is
-- the state those events leave, plus the secrets themselves, which the log must never hold (it is
-- kept forever and read by auditors). `last_position` is the event that set the row: applying an
-- older event after a newer one changes nothing.
CREATE SCHEMA IF NOT EXISTS webhooks;
GRANT USAGE ON SCHEMA webhooks TO ledger_service, ledger_projector;

CREATE TABLE webhooks.endpoints (
    name                  text    PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    url                   text    NOT NULL CHECK (url <> ''),
    event_types           text[],                    -- null: every type
    environments          text[],                    -- null: Production and Sandbox
    enabled               boolean NOT NULL,
    disabled_reason       text,                      -- why it is off (an operator, or failing for days)
    origin                text    NOT NULL CHECK (origin IN ('config', 'admin')),
    secret                text    NOT NULL,          -- whsec_…: signs every request
    previous_secret       text,                      -- the one before a rotation, also signing until…
    previous_secret_until bigint,                    -- ms
    secret_fingerprint    text    NOT NULL,
    last_position         bigint  NOT NULL,
    updated_at            bigint  NOT NULL           -- ms
);

GRANT SELECT, INSERT, UPDATE ON webhooks.endpoints TO ledger_service;

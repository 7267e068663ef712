-- 0017: fact schema version 6 — "Apple status facts + consent + extension summary + the new Apple
-- fields" (issue 20 items 1–3, issue 19 item 3).
--
-- * Apple's own word on a subscription's status (V2 `data.status`, Get All Subscription Statuses
--   `status`) is an `apple_status` fact; RESCIND_CONSENT a `consent_rescinded` fact and
--   RENEWAL_EXTENSION/SUMMARY an `extension_summary` fact.
-- * The non-core Apple fields of `AppleFields` (LedgerCore/Facts/AppleFields.swift) get their
--   fact columns here, in the table's order, after the fixed ones; those an answer shows get their
--   projection columns too. Adding an Apple field: a row in AppleFields, its columns in a
--   migration like this one, docs/openapi.yaml (ARCHITECTURE.md "How to add a field").
-- * The Apple status check (projections.apple_status_checks): each Apple statement compared with
--   the ledger's fold at its signedDate.
-- * Reconciliation's periodic backfill saves how far it got (reconciliation_progress).
--
-- New databases record v6 facts at append from the start; existing ones derive them with the
-- catch-up worker or `ledger rederive` (then `ledger rebuild` applies them to the projections).

ALTER TABLE public.facts
    ADD COLUMN offer_discount_type   text,      -- transaction offerDiscountType
    ADD COLUMN app_transaction_id    text,      -- transaction appTransactionId
    ADD COLUMN renewal_price         bigint,    -- renewal info renewalPrice (milliunits)
    ADD COLUMN r_currency            text,      -- renewal info currency
    ADD COLUMN r_offer_discount_type text,      -- renewal info offerDiscountType
    ADD COLUMN r_app_transaction_id  text;      -- renewal info appTransactionId

-- RENEWAL_EXTENSION/SUMMARY is checked against the RENEWAL_EXTENDED notifications of its product
-- (ExtensionSummaryCheck): a few rows per mass extension, found without scanning every fact.
CREATE INDEX facts_renewal_extended ON public.facts (schema_version, product_id, signed_at)
    WHERE kind = 'transaction' AND message = 'RENEWAL_EXTENDED';

SET LOCAL ROLE ledger_projector;

ALTER TABLE projections.transactions
    ADD COLUMN offer_discount_type text,
    ADD COLUMN app_transaction_id  text;

ALTER TABLE projections.subscriptions
    ADD COLUMN purchase_date               bigint,   -- the period in effect began (non-renewing grants)
    ADD COLUMN renewal_price               bigint,
    ADD COLUMN renewal_currency            text,
    ADD COLUMN renewal_offer_discount_type text;

-- One row per Apple status statement (an `apple_status` fact): Apple's status, the ledger's status
-- at the same signedDate folded from the facts signed by then — as known when the statement was
-- recorded (`arrival_*`) and as known now (`ledger_*`) — and whether they agree.
CREATE TABLE projections.apple_status_checks (
    subscription        text    NOT NULL,   -- '<environment>:<originalTransactionId>'
    position            bigint  NOT NULL,   -- the statement's event
    ordinal             integer NOT NULL,
    environment         text    NOT NULL,
    original_transaction_id text NOT NULL,
    customer_id         text,
    source              text    NOT NULL,   -- notification | api
    message             text,
    signed_at           bigint  NOT NULL,
    recorded_at         bigint  NOT NULL,
    apple_status        integer NOT NULL,   -- 1 active … 5 revoked
    ledger_status       text,               -- the fold's status now (NULL: nothing in effect)
    agrees              boolean NOT NULL,
    arrival_ledger_status text,             -- the fold's status when the statement was recorded
    arrival_agrees      boolean NOT NULL,
    transaction_id      text,               -- the transaction the statement came with
    PRIMARY KEY (subscription, position, ordinal)
);
CREATE INDEX apple_status_checks_disagreeing ON projections.apple_status_checks (recorded_at) WHERE NOT agrees;
CREATE INDEX apple_status_checks_arrival ON projections.apple_status_checks (environment, source) WHERE NOT arrival_agrees;

RESET ROLE;

INSERT INTO projection_checkpoints (projection, position, status) VALUES ('apple_status', 0, 'running')
ON CONFLICT (projection) DO NOTHING;

-- The periodic backfill (Get Notification History, onlyFailures) moves its window forward page by
-- page: where each environment and app got to, so an interrupted pass resumes there.
CREATE TABLE reconciliation_progress (
    environment  text   NOT NULL,
    bundle_id    text   NOT NULL,
    stage        text   NOT NULL,           -- backfill
    cursor_ms    bigint NOT NULL,           -- history read up to here (ms)
    updated_at   bigint NOT NULL,
    PRIMARY KEY (environment, bundle_id, stage)
);
GRANT SELECT, INSERT, UPDATE ON reconciliation_progress TO ledger_service;

INSERT INTO projection_checkpoints (projection, position, status) VALUES ('facts.v6', 0, 'running')
ON CONFLICT (projection) DO NOTHING;
-- On an empty log the older versions have nothing to serve (as in 0013).
DELETE FROM projection_checkpoints
WHERE projection IN ('facts.v2', 'facts.v3', 'facts.v4', 'facts.v5') AND (SELECT position FROM event_head WHERE singleton) = 0;

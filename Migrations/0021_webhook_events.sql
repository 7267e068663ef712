-- 0021: outbound webhooks learned and delivered (issue 21 items 1, 4–6).
--
-- * projections.webhook_events: every webhook event derived from the committed facts
--   (LedgerStore/Webhooks/WebhookEventsProjection.swift), one row per stable id. Kept like every
--   projection: live in the append transaction, caught up by the worker from its checkpoint
--   `webhooks`, rebuilt by `ledger rebuild --projection webhooks` (which recomputes the same ids).
-- * What is sent lives in the kernel's outbox (consumer `webhooks`, one item per event and
--   enabled endpoint whose filters match, id `<endpoint>/<event id>`), written by the transaction
--   that stores the event row — so a rebuild, which only refills the table, sends nothing, and an
--   item is never enqueued twice (ON CONFLICT DO NOTHING on its id).
-- * outbox_items.sequence: several events derived at one position for one subscription keep the
--   order they took effect in (the claim orders a key's items by cause position, then sequence).
-- * webhooks.attempts: every delivery attempt (time, status, latency, a capped excerpt of the
--   answer), for GET /v1/admin/webhooks/events; the outbox's `outbox/*` events stay the record.

ALTER TABLE outbox_items ADD COLUMN sequence integer NOT NULL DEFAULT 0;

SET LOCAL ROLE ledger_projector;

CREATE TABLE projections.webhook_events (
    id            text   NOT NULL,   -- evt_<32 hex>: StandardWebhooks.messageId(identity)
    subscription  text,              -- '<environment>:<originalTransactionId>' (null: a decision naming only an order)
    type          text   NOT NULL,
    environment   text   NOT NULL,
    customer_id   text,
    effective_at  bigint NOT NULL,   -- ms: the business time it took effect
    position      bigint NOT NULL,   -- the first position whose facts derive it
    sequence      integer NOT NULL,  -- its place among the events derived at that position
    body          text   NOT NULL,   -- the JSON sent (canonical: sorted keys)
    PRIMARY KEY (id)
);
CREATE INDEX webhook_events_position ON projections.webhook_events (position, sequence);
CREATE INDEX webhook_events_subscription ON projections.webhook_events (subscription);

RESET ROLE;

INSERT INTO projection_checkpoints (projection, position, status) VALUES ('webhooks', 0, 'running')
ON CONFLICT (projection) DO NOTHING;

-- The projection enqueues for the endpoints enabled when it derives.
GRANT SELECT ON webhooks.endpoints TO ledger_projector;

CREATE TABLE webhooks.attempts (
    endpoint    text    NOT NULL,
    event_id    text    NOT NULL,
    generation  integer NOT NULL,    -- the outbox item's generation (+1 per replay)
    attempt     integer NOT NULL,    -- 1-based within the generation
    at          bigint  NOT NULL,    -- ms, when the request was sent
    status      integer,             -- HTTP status (null: no answer — timeout, refused…)
    latency_ms  bigint  NOT NULL,
    outcome     text    NOT NULL CHECK (outcome IN ('delivered', 'failed')),
    excerpt     text,                -- the answer's first bytes or the error (capped at 512)
    PRIMARY KEY (endpoint, event_id, generation, attempt)
);
CREATE INDEX webhooks_attempts_endpoint_at ON webhooks.attempts (endpoint, at);
GRANT SELECT, INSERT, UPDATE ON webhooks.attempts TO ledger_service;

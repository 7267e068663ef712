-- 0011: the one outbox (Sources/LedgerStore/Outbox): durable "do this once, retry, record the
-- answer" work derived from committed facts.
--
-- A row is written by the append transaction that commits its cause (or by the catch-up that
-- derives that transaction's facts later), never by anyone else, so an item exists iff its cause
-- was committed. Its state changes are ledger events (`outbox/attempt-failed`, `outbox/delivered`,
-- `outbox/exhausted`, `outbox/requeued`, or a consumer's own answer event) applied to the row by
-- the transaction that stores them: the table is a projection of the log. `last_position` is the
-- newest event applied, so applying an event twice (a catch-up after the live path) changes
-- nothing. Claiming takes a lease (`lease_until`) under FOR UPDATE SKIP LOCKED, so one instance
-- works each item and no connection is held across the work itself.
CREATE TABLE outbox_items (
    consumer        text    NOT NULL,          -- OutboxConsumer.name
    id              text    NOT NULL,          -- stable: the same cause derives the same id
    ordering_key    text    NOT NULL,          -- e.g. a subscription; see `ordered`
    ordered         boolean NOT NULL,          -- not claimable while an earlier item of the key is pending
    payload         jsonb   NOT NULL,
    cause_position  bigint  NOT NULL,          -- the event that caused it
    status          text    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'exhausted')),
    attempts        integer NOT NULL DEFAULT 0, -- in the current generation
    generation      integer NOT NULL DEFAULT 0, -- +1 per replay (dedupe keys of attempts carry it)
    next_attempt_at bigint  NOT NULL,          -- ms
    last_error      text,
    answer_position bigint,                    -- the event that settled it
    last_position   bigint  NOT NULL,          -- the newest event applied to this row
    lease_until     bigint,                    -- ms; claimed by an instance until then
    created_at      bigint  NOT NULL,          -- ms, when derived
    PRIMARY KEY (consumer, id)
);
CREATE INDEX outbox_items_due ON outbox_items (consumer, next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_items_key ON outbox_items (consumer, ordering_key, cause_position) WHERE status = 'pending' AND ordered;

GRANT SELECT, INSERT, UPDATE ON outbox_items TO ledger_service, ledger_projector;

-- The consumption outbox of 0007 moves here (the old table stays as history). Item ids are the
-- answer's dedupe key, `consumption:<request position>`; `deadline` (Apple's 12-hour window)
-- travels in the payload.
INSERT INTO outbox_items (consumer, id, ordering_key, ordered, payload, cause_position, status, attempts,
                          next_attempt_at, last_error, answer_position, last_position, created_at)
SELECT 'apple.consumption', 'consumption:' || request_position, subscription, false,
       jsonb_build_object('subscription', subscription, 'transactionId', transaction_id,
                          'requestedAt', requested_at, 'deadline', deadline),
       request_position, status, attempts, next_attempt_at, last_error, answer_position,
       coalesce(answer_position, request_position), enqueued_at
FROM consumption_outbox
ON CONFLICT (consumer, id) DO NOTHING;

-- 0004: one fact path. Every event's facts are derived once, by one Swift decoder per source
-- (LedgerCore/Facts, FactDecoder.schemaVersion), and stored here; the live tables, the catch-up
-- worker, rebuilds, time travel, entitlements and refund cases all read these rows. No projection
-- reads events.payload with SQL any more.
--
-- Facts are derived data: `ledger rederive` can always derive them again from the events (payload
-- and envelope), so a new decoder version is derived beside the old one (blue/green) and the
-- readers switch when it is complete. Within a version the table is append-only.

CREATE TABLE public.facts (
    schema_version  smallint NOT NULL,
    position        bigint   NOT NULL,
    ordinal         smallint NOT NULL,
    recorded_at     bigint   NOT NULL,  -- ms, the event's recorded_at (readers need no join)
    stream_id       text     NOT NULL,
    subscription    text,               -- '<environment>:<originalTransactionId>'; NULL: joins through its order ids
    kind            text     NOT NULL,
    origin          text     NOT NULL,
    message         text,
    signed_at       bigint   NOT NULL,
    effective_at    bigint   NOT NULL,
    transaction_id  text,
    order_alias     text,
    customer_id     text,
    -- the transaction snapshot (kind transaction, revocation, evidence of refunds)
    has_transaction boolean  NOT NULL,
    tx_original_transaction_id text,
    web_order_line_item_id text,
    bundle_id       text,
    product_id      text,
    product_type    text,
    purchase_date   bigint,
    expires_date    bigint,
    tx_signed_date  bigint,
    revocation_date bigint,
    revocation_reason bigint,
    revocation_type text,
    revocation_percentage bigint,
    is_upgraded     boolean,
    price           bigint,
    currency        text,
    offer_type      bigint,
    offer_identifier text,
    app_account_token text,
    environment     text,
    in_app_ownership_type text,
    -- the renewal snapshot (kind renewal)
    has_renewal     boolean  NOT NULL,
    r_product_id    text,
    auto_renew_product_id text,
    auto_renew_status bigint,
    expiration_intent bigint,
    is_in_billing_retry_period boolean,
    grace_period_expires_date bigint,
    price_increase_status bigint,
    r_offer_type    bigint,
    r_offer_identifier text,
    recent_subscription_start_date bigint,
    renewal_date    bigint,
    r_app_account_token text,
    r_signed_date   bigint,
    -- evidence no fold reads (canonical JSON object)
    detail          text,
    PRIMARY KEY (schema_version, position, ordinal)
);

-- A subscription's facts, in log order (fold reads, rebuild's grouped scan).
CREATE INDEX facts_subscription ON public.facts (schema_version, subscription, position);
-- WeChat orders: facts without a subscription join one through these ids; the few facts that
-- carry order ids are WeChat's and the ledger's, so the index stays small.
CREATE INDEX facts_order ON public.facts (schema_version, transaction_id) WHERE origin IN ('wechat', 'ledger');
CREATE INDEX facts_order_alias ON public.facts (schema_version, order_alias) WHERE order_alias IS NOT NULL;
-- Refund cases and the timeline look facts up by kind and by event.
CREATE INDEX facts_kind ON public.facts (schema_version, kind) WHERE kind NOT IN ('transaction', 'renewal');

-- Append-only within a version: rows are never changed. (Deleting a whole retired version is
-- `ledger rederive --drop-other-versions`; nothing else deletes.)
CREATE FUNCTION facts_are_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'facts are derived once per schema version: % on facts is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'derive a new schema version with `ledger rederive` instead of changing facts';
END
$$;
CREATE TRIGGER facts_no_update BEFORE UPDATE ON public.facts
    FOR EACH STATEMENT EXECUTE FUNCTION facts_are_immutable();

REVOKE ALL ON public.facts FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON public.facts TO ledger_projector;
GRANT SELECT ON public.facts TO ledger_service;

-- The projections are re-keyed by subscription (environment + originalTransactionId) instead of
-- stream: a Sandbox event never changes a Production subscription. They are caches of folds, so
-- the old tables go and the new ones start empty; their checkpoints restart at 0 and the catch-up
-- worker (or `ledger rebuild`) fills them from the facts.
DROP TABLE projections.subscriptions, projections.transactions, projections.entitlements, projections.customer_streams;
DROP TABLE IF EXISTS projections.subscriptions_next, projections.transactions_next, projections.entitlements_next,
    projections.customer_streams_next, projections.subscriptions_retired, projections.transactions_retired,
    projections.entitlements_retired, projections.customer_streams_retired;
DROP FUNCTION projections.json_millis(jsonb), projections.json_int(jsonb), projections.json_bool(jsonb), projections.json_text(jsonb);

SET LOCAL ROLE ledger_projector;

CREATE TABLE projections.subscriptions (
    subscription                   text    PRIMARY KEY,
    environment                    text    NOT NULL,
    original_transaction_id        text    NOT NULL,
    customer_id                    text,
    customer_source                text,
    implicit_customer_id           text,
    status                         text    NOT NULL,
    evaluated_at                   bigint  NOT NULL,
    bundle_id                      text,
    product_id                     text,
    product_type                   text,
    auto_renew_product_id          text,
    expires_date                   bigint,
    grace_period_expires_date      bigint,
    is_in_billing_retry_period     boolean NOT NULL,
    auto_renew_status              integer,
    expiration_intent              integer,
    price_increase_status          integer,
    offer_type                     integer,
    offer_identifier               text,
    app_account_token              text,
    latest_transaction_id          text,
    recent_subscription_start_date bigint,
    renewal_date                   bigint,
    revocation_date                bigint,
    valid_until                    bigint
);

CREATE TABLE projections.transactions (
    subscription                text    NOT NULL,
    transaction_id              text    NOT NULL,
    original_transaction_id     text    NOT NULL,
    web_order_line_item_id      text,
    bundle_id                   text,
    product_id                  text,
    purchase_date               bigint,
    expires_date                bigint,
    revocation_date             bigint,
    revocation_reason           integer,
    revocation_type             text,
    revocation_percentage       integer,
    refund_signed_date          bigint,
    refund_reversed_signed_date bigint,
    is_upgraded                 boolean NOT NULL,
    price                       bigint,
    currency                    text,
    offer_type                  integer,
    offer_identifier            text,
    app_account_token           text,
    environment                 text,
    type                        text,
    in_app_ownership_type       text,
    signed_date                 bigint  NOT NULL,
    PRIMARY KEY (subscription, transaction_id)
);

-- The grants each subscription's current product carries for its customer under the catalog of
-- the last fold, whatever the status: readers join `subscriptions` and re-evaluate at their time.
CREATE TABLE projections.entitlements (
    customer_id  text   NOT NULL,
    environment  text   NOT NULL,
    entitlement  text   NOT NULL,
    subscription text   NOT NULL,
    product_id   text   NOT NULL,
    expires_date bigint,
    status       text   NOT NULL,
    PRIMARY KEY (customer_id, environment, entitlement, subscription)
);
CREATE INDEX ON projections.entitlements (subscription);

-- Every customer id a subscription's facts ever named (appAccountToken, openid, ties), so time
-- travel for a customer finds subscriptions whose current state names someone else.
CREATE TABLE projections.customer_subscriptions (
    customer_id  text NOT NULL,
    subscription text NOT NULL,
    PRIMARY KEY (customer_id, subscription)
);
CREATE INDEX ON projections.customer_subscriptions (subscription);

RESET ROLE;

UPDATE projection_checkpoints SET position = 0, status = 'running', last_error = NULL, failed_position = NULL, updated_at = now()
WHERE projection IN ('subscriptions', 'transactions', 'entitlements');
-- The facts themselves advance like a projection: one checkpoint per schema version
-- (`facts.v<version>`). Version 2 is the first; later versions are created by `ledger rederive`
-- or the catch-up worker of a build that derives them. Existing events get their facts from the
-- catch-up (it derives from position 0); new appends record theirs in the append transaction.
INSERT INTO projection_checkpoints (projection, position, status) VALUES ('facts.v2', 0, 'running')
ON CONFLICT (projection) DO NOTHING;

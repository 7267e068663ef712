-- 0002: projection tables (subscriptions, transactions, entitlements, customer → streams), the
-- helpers that extract fact fields from the payload jsonb, and the rights a rebuild needs.
--
-- Ownership: the projection tables live in schema `projections`, owned by the NOLOGIN role
-- `ledger_projector`, of which `ledger_service` is a member. A rebuild creates fresh tables and
-- swaps them in by renaming, which needs ownership of the tables and CREATE on the schema; the
-- membership gives the service exactly that for this schema and nothing for the event log
-- (events stay INSERT/SELECT only). Tables a rebuild creates are created under
-- `SET LOCAL ROLE ledger_projector`, so every generation has the same owner.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger_projector') THEN
        CREATE ROLE ledger_projector NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger_service') THEN
        CREATE ROLE ledger_service NOLOGIN;
    END IF;
END
$$;
GRANT ledger_projector TO ledger_service;

CREATE SCHEMA projections AUTHORIZATION ledger_projector;

-- Reading the log: a projector reads events (never their `raw` column in bulk) and the head.
GRANT USAGE ON SCHEMA public TO ledger_projector;
GRANT SELECT ON events, event_head TO ledger_projector;
GRANT SELECT, INSERT, UPDATE ON projection_checkpoints TO ledger_projector;

-- Why a projection stopped: the position of the event it could not apply.
ALTER TABLE projection_checkpoints ADD COLUMN failed_position bigint;

-- Folding a stream reads its events by stream; the unique (stream_id, dedupe_key) index finds
-- them but not in position order, and the rebuild streams the whole log grouped by stream.
CREATE INDEX events_stream_position ON events (stream_id, position);

-- Payload fields as SQL values, with the rules AppleTime and the Codable models use: times are
-- (possibly fractional) milliseconds, rounded; a field of the wrong JSON type reads as absent.
-- Plain SQL and IMMUTABLE so the planner inlines them into the extraction query.
CREATE FUNCTION projections.json_millis(v jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN jsonb_typeof(v) = 'number' THEN round(v::numeric)::bigint END $$;

CREATE FUNCTION projections.json_int(v jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN jsonb_typeof(v) = 'number' THEN round(v::numeric)::bigint END $$;

CREATE FUNCTION projections.json_bool(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN jsonb_typeof(v) = 'boolean' THEN v::boolean END $$;

CREATE FUNCTION projections.json_text(v jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN jsonb_typeof(v) = 'string' THEN v #>> '{}' END $$;

-- The rebuild's swap must stop appends while it catches up and renames: it takes the head-row
-- lock that append_events() takes. Row locks need UPDATE rights, which the service must not have
-- on the head; this function takes the lock for the caller's transaction and nothing else.
CREATE FUNCTION projections.lock_event_head() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT h.position FROM public.event_head h WHERE h.singleton FOR UPDATE $$;
REVOKE ALL ON FUNCTION projections.lock_event_head() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION projections.lock_event_head() TO ledger_projector;

SET LOCAL ROLE ledger_projector;

-- One row per subscription: the SubscriptionState fields, the status at fold time, and what the
-- status rule needs to re-evaluate it at read time (expiry, grace, retry, revocation).
CREATE TABLE projections.subscriptions (
    stream_id                      text    PRIMARY KEY,
    customer_id                    text,
    status                         text    NOT NULL,
    evaluated_at                   bigint  NOT NULL,
    bundle_id                      text,
    environment                    text,
    product_id                     text,
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
    version_expires_date           bigint,
    version_signed_date            bigint,
    revocation_date                bigint
);

-- One row per transaction (purchase or renewal period), per-transaction facts merged.
CREATE TABLE projections.transactions (
    stream_id                   text    NOT NULL,
    transaction_id              text    NOT NULL,
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
    PRIMARY KEY (stream_id, transaction_id)
);

-- The grants each subscription's current product carries for its customer, under the catalog of
-- the last fold, whatever the status: `status` is the status at fold time, and readers join
-- `subscriptions` and re-evaluate it at their own time, keeping the rows that are entitled then
-- (a subscription expires or leaves grace without any event).
CREATE TABLE projections.entitlements (
    customer_id  text   NOT NULL,
    entitlement  text   NOT NULL,
    stream_id    text   NOT NULL,
    product_id   text   NOT NULL,
    expires_date bigint,
    status       text   NOT NULL,
    PRIMARY KEY (customer_id, entitlement, stream_id)
);
CREATE INDEX ON projections.entitlements (stream_id);

-- Every customer id a stream's facts ever named (appAccountToken, WeChat openid), so time travel
-- for a customer finds streams whose current state names someone else.
CREATE TABLE projections.customer_streams (
    customer_id text NOT NULL,
    stream_id   text NOT NULL,
    PRIMARY KEY (customer_id, stream_id)
);
CREATE INDEX ON projections.customer_streams (stream_id);

RESET ROLE;

INSERT INTO projection_checkpoints (projection, position, status)
VALUES ('subscriptions', 0, 'running'), ('transactions', 0, 'running'), ('entitlements', 0, 'running')
ON CONFLICT (projection) DO NOTHING;

-- 0001: the event log, its position counter, and projection checkpoints.
--
-- Everything lives in schema `public` (one ledger per database). Run as the database owner or a
-- superuser; the service connects as `ledger_service`, which may only read and append.

DO $$
BEGIN
    -- scripts/db.sh creates the role with LOGIN; elsewhere make sure it exists so the GRANTs
    -- below work, and leave it to the operator to allow it to log in.
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger_service') THEN
        CREATE ROLE ledger_service NOLOGIN;
    END IF;
END
$$;

-- The log. `position` is global, gapless and in commit order: it is handed out by
-- append_events() under the lock on event_head, so a transaction holding positions commits before
-- the next one can take any (see append_events).
CREATE TABLE events (
    position    bigint      PRIMARY KEY CHECK (position > 0),
    stream_id   text        NOT NULL CHECK (stream_id <> '' AND octet_length(stream_id) <= 1024),
    dedupe_key  text        NOT NULL CHECK (dedupe_key <> '' AND octet_length(dedupe_key) <= 1024),
    source      text        NOT NULL CHECK (source IN ('apple', 'wechat', 'ledger')),
    type        text        NOT NULL CHECK (type <> ''),
    environment text,
    signed_at   timestamptz,
    expires_at  timestamptz,
    payload     jsonb       NOT NULL,
    raw         bytea       NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT transaction_timestamp(),
    -- Makes every append idempotent; its leading stream_id also serves reads of one stream.
    CONSTRAINT events_stream_dedupe UNIQUE (stream_id, dedupe_key)
);

-- One row: the last position handed out. Locking it serialises appenders; bumping it in the same
-- transaction as the insert means a rolled-back append gives its positions back (no gaps).
CREATE TABLE event_head (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    position  bigint  NOT NULL CHECK (position >= 0)
);
INSERT INTO event_head (singleton, position) VALUES (true, 0);

-- Events are verified evidence: never changed, never removed. Statement-level triggers stop even a
-- superuser (who bypasses GRANTs); TRUNCATE needs its own trigger because it fires no DELETE one.
CREATE FUNCTION events_are_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the event log is append-only: % on % is not allowed', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'events are facts; record a correcting event instead of changing history';
END
$$;
CREATE TRIGGER events_no_update_delete BEFORE UPDATE OR DELETE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_immutable();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_immutable();
CREATE TRIGGER event_head_no_delete BEFORE DELETE OR TRUNCATE ON event_head
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_immutable();

CREATE FUNCTION event_head_only_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'event_head may only move forward (from % to %)', OLD.position, NEW.position
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER event_head_forward BEFORE UPDATE ON event_head
    FOR EACH ROW WHEN (NEW.position < OLD.position) EXECUTE FUNCTION event_head_only_forward();

-- The service role holds INSERT on events (as the design asks), but a row inserted around
-- append_events() would either reuse a position (primary key violation) or run ahead of the head
-- (a gap). This refuses the latter, so the only way to add an event is through the head lock.
CREATE FUNCTION events_position_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.position > (SELECT h.position FROM event_head h WHERE h.singleton) THEN
        RAISE EXCEPTION 'event position % was not handed out by append_events()', NEW.position
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'append through append_events(); it assigns gapless positions under the head lock';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER events_position_claimed BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_position_claimed();

-- Appends a batch in one call (one round trip). Element i of every array is one event. Returns,
-- for each input ordinal, the event's position, whether it was already stored (by an earlier
-- append or earlier in this batch), and when it was recorded.
--
-- Order matters: lock the head first, then look for duplicates (each statement of a plpgsql
-- function takes a fresh snapshot, so this sees every append committed before we got the lock),
-- and only then allocate positions — so duplicates never burn positions and positions stay gapless.
-- Because the lock is held to commit and the next appender cannot take positions before it, commit
-- order equals position order: a reader that sees position n sees every position below n.
--
-- SECURITY DEFINER so the service role needs no privilege on event_head: moving the counter is
-- the integrity of the whole log, and nothing but this function may do it.
CREATE FUNCTION append_events(
    p_stream_id   text[],
    p_dedupe_key  text[],
    p_source      text[],
    p_type        text[],
    p_environment text[],
    p_signed_at   timestamptz[],
    p_expires_at  timestamptz[],
    p_payload     jsonb[],
    p_raw         bytea[]
) RETURNS TABLE (ordinal integer, event_position bigint, duplicate boolean, event_recorded_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_count integer := coalesce(cardinality(p_stream_id), 0);
    v_head  bigint;
    v_fresh integer[];
BEGIN
    IF coalesce(cardinality(p_dedupe_key), 0) <> v_count OR coalesce(cardinality(p_source), 0) <> v_count
        OR coalesce(cardinality(p_type), 0) <> v_count OR coalesce(cardinality(p_environment), 0) <> v_count
        OR coalesce(cardinality(p_signed_at), 0) <> v_count OR coalesce(cardinality(p_expires_at), 0) <> v_count
        OR coalesce(cardinality(p_payload), 0) <> v_count OR coalesce(cardinality(p_raw), 0) <> v_count THEN
        RAISE EXCEPTION 'append_events: every array must have one element per event'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_count = 0 THEN
        RETURN;
    END IF;

    SELECT h.position INTO v_head FROM event_head h WHERE h.singleton FOR UPDATE;

    -- First occurrence of each key in the batch that is not stored yet, in input order.
    SELECT coalesce(array_agg(k.ord ORDER BY k.ord), '{}') INTO v_fresh
    FROM (
        SELECT i.ord, i.stream_id, i.dedupe_key,
               min(i.ord) OVER (PARTITION BY i.stream_id, i.dedupe_key) AS first_ord
        FROM unnest(p_stream_id, p_dedupe_key) WITH ORDINALITY AS i(stream_id, dedupe_key, ord)
    ) k
    WHERE k.ord = k.first_ord
      AND NOT EXISTS (SELECT 1 FROM events e WHERE e.stream_id = k.stream_id AND e.dedupe_key = k.dedupe_key);

    IF cardinality(v_fresh) > 0 THEN
        UPDATE event_head SET position = v_head + cardinality(v_fresh) WHERE singleton;
        INSERT INTO events (position, stream_id, dedupe_key, source, type, environment,
                            signed_at, expires_at, payload, raw)
        SELECT v_head + f.n, i.stream_id, i.dedupe_key, i.source, i.type, i.environment,
               i.signed_at, i.expires_at, i.payload, i.raw
        FROM unnest(v_fresh) WITH ORDINALITY AS f(ord, n)
        JOIN unnest(p_stream_id, p_dedupe_key, p_source, p_type, p_environment,
                    p_signed_at, p_expires_at, p_payload, p_raw)
             WITH ORDINALITY AS i(stream_id, dedupe_key, source, type, environment,
                                  signed_at, expires_at, payload, raw, ord)
          ON i.ord = f.ord
        ORDER BY f.n;
        -- Delivered at commit, so a listener never hears of an event it cannot read yet.
        PERFORM pg_notify('ledger_events', (v_head + cardinality(v_fresh))::text);
    END IF;

    RETURN QUERY
    SELECT k.ord::integer, e.position,
           NOT (e.position > v_head AND k.ord = min(k.ord) OVER (PARTITION BY k.stream_id, k.dedupe_key)),
           e.recorded_at
    FROM unnest(p_stream_id, p_dedupe_key) WITH ORDINALITY AS k(stream_id, dedupe_key, ord)
    JOIN events e ON e.stream_id = k.stream_id AND e.dedupe_key = k.dedupe_key
    ORDER BY k.ord;
END
$$;

-- Where each projection has got to. The projections engine owns the rows; see LedgerStore.
CREATE TABLE projection_checkpoints (
    projection text        PRIMARY KEY,
    position   bigint      NOT NULL DEFAULT 0 CHECK (position >= 0),
    status     text        NOT NULL DEFAULT 'running',
    last_error text,
    updated_at timestamptz NOT NULL DEFAULT now()
);

REVOKE ALL ON events, event_head, projection_checkpoints FROM PUBLIC;
REVOKE ALL ON FUNCTION append_events(text[], text[], text[], text[], text[], timestamptz[], timestamptz[], jsonb[], bytea[]) FROM PUBLIC;
GRANT SELECT, INSERT ON events TO ledger_service;
GRANT SELECT ON event_head TO ledger_service;
GRANT EXECUTE ON FUNCTION append_events(text[], text[], text[], text[], text[], timestamptz[], timestamptz[], jsonb[], bytea[]) TO ledger_service;
GRANT SELECT, INSERT, UPDATE ON projection_checkpoints TO ledger_service;

-- The migrator creates schema_migrations before applying this file; /readyz (running as the
-- service role) reads it to report pending migrations.
DO $$
BEGIN
    IF to_regclass('public.schema_migrations') IS NOT NULL THEN
        GRANT SELECT ON schema_migrations TO ledger_service;
    END IF;
END
$$;

-- 0008: the auditor's desk — a tamper-evident hash chain over the event log, and refund cases as a
-- projection.
--
-- 1. event_chain: one row per event, hash_n = SHA-256(hash_{n-1} ‖ message_n), computed by
--    append_events() under the head lock, in the append transaction. Append-only like the log.
--    The exact bytes are documented in docs/hash-chain.md (and implemented again, independently,
--    in LedgerStore/Chain/EventChainHash.swift, which `ledger verify` uses); a test checks that
--    both agree. The triggers stop mistakes, not a superuser: a superuser can disable them and
--    rewrite events and chain together, which is what anchors kept elsewhere
--    (`ledger verify --anchor`) are for.
-- 2. append_events() recreated with the same signature, result and behaviour (head lock, dedupe
--    before allocating, gapless positions, NOTIFY at commit) plus the chain rows. CREATE OR
--    REPLACE keeps its owner, SECURITY DEFINER and grants.
-- 3. Existing events are chained here, in position order (the log is read once, raw included).
-- 4. projections.refund_cases (+ refund_case_orders): the refund cases of RefundCaseFold, kept by
--    the live hook, the catch-up worker and `ledger rebuild --projection refund_cases` like the
--    other projections; checkpoint `refund_cases` starts at 0 and the worker fills it.

-- The chain hash of one event (docs/hash-chain.md). Text fields are their UTF-8 bytes, each
-- preceded by its length as a 4-byte big-endian integer, so no two different events can give the
-- same message; the time is microseconds since 1970 (timestamptz's own resolution).
CREATE FUNCTION public.event_chain_hash(
    p_previous bytea, p_position bigint, p_stream_id text, p_dedupe_key text, p_type text, p_source text,
    p_recorded_at timestamptz, p_raw bytea
) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog
AS $$
    SELECT sha256(
        p_previous
        || int8send(p_position)
        || int4send(octet_length(convert_to(p_stream_id, 'UTF8'))) || convert_to(p_stream_id, 'UTF8')
        || int4send(octet_length(convert_to(p_dedupe_key, 'UTF8'))) || convert_to(p_dedupe_key, 'UTF8')
        || int4send(octet_length(convert_to(p_type, 'UTF8'))) || convert_to(p_type, 'UTF8')
        || int4send(octet_length(convert_to(p_source, 'UTF8'))) || convert_to(p_source, 'UTF8')
        || int8send((extract(epoch FROM p_recorded_at) * 1000000)::bigint)
        || sha256(p_raw))
$$;

CREATE TABLE public.event_chain (
    -- No foreign key to events: TRUNCATE events must still meet the immutability trigger (a
    -- foreign key would refuse it first, with another error); `ledger verify` finds orphan links.
    position bigint PRIMARY KEY,
    hash     bytea  NOT NULL CHECK (octet_length(hash) = 32)
);

-- Like the log: never changed, never removed (statement triggers, so even a superuser must first
-- disable them — which is visible in the server log and what `ledger verify` then catches).
CREATE TRIGGER event_chain_no_update_delete BEFORE UPDATE OR DELETE ON public.event_chain
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_immutable();
CREATE TRIGGER event_chain_no_truncate BEFORE TRUNCATE ON public.event_chain
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_immutable();

-- Existing events, in position order. 32 zero bytes stand before position 1.
DO $$
DECLARE
    v_previous bytea := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    v_expected bigint := 1;
    r record;
BEGIN
    FOR r IN SELECT e.position, e.stream_id, e.dedupe_key, e.type, e.source, e.recorded_at, e.raw
             FROM public.events e ORDER BY e.position LOOP
        IF r.position <> v_expected THEN
            RAISE EXCEPTION 'cannot chain the log: position % follows %; positions must be gapless', r.position, v_expected - 1;
        END IF;
        v_previous := public.event_chain_hash(v_previous, r.position, r.stream_id, r.dedupe_key, r.type, r.source, r.recorded_at, r.raw);
        INSERT INTO public.event_chain (position, hash) VALUES (r.position, v_previous);
        v_expected := v_expected + 1;
    END LOOP;
END
$$;

-- append_events() of 0001, unchanged but for the chain: after the insert, each new event's hash
-- is computed in position order from the previous one (the head's row, or 32 zero bytes for an
-- empty log), from the same input arrays (no read-back of the TOASTed raw) and the transaction's
-- timestamp, which is what `recorded_at` defaults to for every row of this insert.
CREATE OR REPLACE FUNCTION append_events(
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
    v_previous bytea;
    v_hashes bytea[];
    v_ord integer;
    v_now timestamptz := transaction_timestamp();
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

        -- The chain, under the same head lock: the previous hash cannot change under us.
        IF v_head = 0 THEN
            v_previous := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
        ELSE
            SELECT c.hash INTO v_previous FROM event_chain c WHERE c.position = v_head;
            IF v_previous IS NULL THEN
                RAISE EXCEPTION 'the hash chain has no link for position %: the log cannot be extended', v_head
                    USING ERRCODE = 'data_corrupted',
                          HINT = 'someone removed event_chain rows; run `ledger verify` and restore the chain from a backup';
            END IF;
        END IF;
        v_hashes := '{}';
        FOR n IN 1 .. cardinality(v_fresh) LOOP
            v_ord := v_fresh[n];
            v_previous := event_chain_hash(v_previous, v_head + n, p_stream_id[v_ord], p_dedupe_key[v_ord],
                                           p_type[v_ord], p_source[v_ord], v_now, p_raw[v_ord]);
            v_hashes := v_hashes || v_previous;
        END LOOP;
        INSERT INTO event_chain (position, hash)
        SELECT v_head + h.n, h.hash FROM unnest(v_hashes) WITH ORDINALITY AS h(hash, n);

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

REVOKE ALL ON public.event_chain FROM PUBLIC;
GRANT SELECT ON public.event_chain TO ledger_service, ledger_projector;
REVOKE ALL ON FUNCTION public.event_chain_hash(bytea, bigint, text, text, text, text, timestamptz, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION public.event_chain_hash(bytea, bigint, text, text, text, text, timestamptz, bytea)
    TO ledger_service, ledger_projector;

-- Refund cases, one row per case of RefundCaseFold: the filter columns of GET /v1/refunds, and
-- the case itself as JSON (`body`, sorted keys), so a list or an export is read, not folded.
-- refund_case_orders indexes each WeChat case under the order ids of its order, so a new fact
-- naming any of them finds (and refolds) the cases it may change.
SET LOCAL ROLE ledger_projector;

CREATE TABLE projections.refund_cases (
    case_id                 text   PRIMARY KEY,
    source                  text   NOT NULL,
    order_id                text   NOT NULL,
    opened_at               bigint NOT NULL,
    original_transaction_id text,
    open_id                 text,
    decision                text,
    outcome                 text   NOT NULL,
    body                    text   NOT NULL
);
-- The list's order and cursor: (opened_at, case_id) in byte order, the order the fold sorts in.
CREATE INDEX refund_cases_opened ON projections.refund_cases (opened_at, case_id COLLATE "C");
CREATE INDEX refund_cases_subscription ON projections.refund_cases (original_transaction_id);
CREATE INDEX refund_cases_open_id ON projections.refund_cases (open_id);
CREATE INDEX refund_cases_order ON projections.refund_cases (order_id);

CREATE TABLE projections.refund_case_orders (
    order_id text NOT NULL,
    case_id  text NOT NULL,
    PRIMARY KEY (order_id, case_id)
);
CREATE INDEX refund_case_orders_case ON projections.refund_case_orders (case_id);

RESET ROLE;

INSERT INTO projection_checkpoints (projection, position, status) VALUES ('refund_cases', 0, 'running')
ON CONFLICT (projection) DO NOTHING;

-- 0027: append_events() finds each key's stored event by one probe of events_stream_dedupe.
--
-- Written as NOT EXISTS and a join, both lookups were planned from the table statistics, and
-- PL/pgSQL keeps a plan once it has settled on one: in a log that grew faster than autovacuum
-- analysed it, the dedupe and the answer were a hash join over a sequential scan of every stored
-- event, on every batch, so each append cost more than the one before. OFFSET 0 keeps either
-- subquery from being flattened into a join: it stays a probe per key whatever the statistics say.
-- Nothing else changes (same arguments, answer, locking and chain).
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
      AND NOT EXISTS (SELECT 1 FROM events e WHERE e.stream_id = k.stream_id AND e.dedupe_key = k.dedupe_key OFFSET 0);

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
    CROSS JOIN LATERAL (
        SELECT e.position, e.recorded_at FROM events e
        WHERE e.stream_id = k.stream_id AND e.dedupe_key = k.dedupe_key OFFSET 0) e
    ORDER BY k.ord;
END
$$;

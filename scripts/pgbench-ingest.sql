-- `ledger-dev bench ingest`'s baseline: one single-row INSERT per transaction, carrying what the
-- ledger stored per notification in the same run, read back from its tables: :raw the raw body
-- (a bytea literal), :payload the payload (a jsonb literal), :facts the notification's fact rows
-- as text. The benchmark sets them with -D as quoted literals and creates bench_ingest (the
-- events table's columns plus facts text; IngestSuite.swift, PgbenchIngest.createTable).
\set n random(1, 2000000000)
INSERT INTO bench_ingest (stream_id, dedupe_key, source, type, environment, signed_at, expires_at, payload, raw, facts)
VALUES ('20000' || :client_id, 'bench-' || :client_id || '-' || :n || '-' || clock_timestamp(), 'apple', 'DID_RENEW', 'Sandbox',
        now(), now() + interval '30 days', :payload::jsonb, :raw::bytea, :facts);

-- 0008: WeChat — the nonce memory of plaintext-mode pushes, the index that finds order streams
-- (orphans), and the facts checkpoint of fact schema version 4.

-- Plaintext-mode pushes are authenticated by a signature over the token, timestamp and nonce
-- only, not the body: within the replay window a captured query string would authorise any body.
-- So a nonce may carry one body (the same body again is a re-push: stored once by its dedupe key).
-- The memory is shared by every instance (this table), and forgets after twice the window: by
-- then the timestamp the nonce was signed with is refused anyway.
CREATE TABLE wechat_push_nonces (
    nonce           text        PRIMARY KEY CHECK (nonce <> '' AND octet_length(nonce) <= 128),
    push_timestamp  bigint      NOT NULL,           -- the query's timestamp (s), as signed
    body_sha256     text        NOT NULL,           -- hex SHA-256 of the exact body
    seen_at         timestamptz NOT NULL DEFAULT now(),
    stored_position bigint                          -- the event's position, once it is stored
);
CREATE INDEX wechat_push_nonces_seen ON wechat_push_nonces (seen_at);

-- Claims `p_nonce` for a body: 'fresh' (first use, or the earlier holder never stored its event
-- and gave up), 'same' (this body again: a re-push, which the append answers as a duplicate), or
-- 'reused' (another body: a replay, refused). One statement, so two instances racing with one
-- nonce get one 'fresh' and one 'same' or 'reused'.
CREATE FUNCTION wechat_claim_nonce(p_nonce text, p_timestamp bigint, p_body_sha256 text, p_window_seconds integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_row wechat_push_nonces%ROWTYPE;
BEGIN
    DELETE FROM wechat_push_nonces WHERE seen_at < now() - make_interval(secs => 2 * p_window_seconds);
    INSERT INTO wechat_push_nonces (nonce, push_timestamp, body_sha256) VALUES (p_nonce, p_timestamp, p_body_sha256)
    ON CONFLICT (nonce) DO NOTHING;
    IF FOUND THEN
        RETURN 'fresh';
    END IF;
    SELECT * INTO v_row FROM wechat_push_nonces WHERE nonce = p_nonce FOR UPDATE;
    IF v_row.body_sha256 = p_body_sha256 THEN
        RETURN 'same';
    END IF;
    -- An attempt whose event never got stored (its append failed, the sender was told to retry)
    -- must not hold the nonce against WeChat's retry, which may carry a new RetryTimes.
    IF v_row.stored_position IS NULL AND v_row.seen_at < now() - interval '30 seconds' THEN
        UPDATE wechat_push_nonces SET push_timestamp = p_timestamp, body_sha256 = p_body_sha256, seen_at = now()
        WHERE nonce = p_nonce;
        RETURN 'fresh';
    END IF;
    RETURN 'reused';
END
$$;

REVOKE ALL ON wechat_push_nonces FROM PUBLIC;
REVOKE ALL ON FUNCTION wechat_claim_nonce(text, bigint, text, integer) FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON wechat_push_nonces TO ledger_service;
GRANT EXECUTE ON FUNCTION wechat_claim_nonce(text, bigint, text, integer) TO ledger_service;

-- Order streams (`wechat:order:<id>`: refunds, inquiries and answers naming an order, ordinary
-- purchases): the orphan listing and its metric group them by stream and age. A partial index,
-- so it holds only those streams' rows.
CREATE INDEX events_wechat_order_streams ON events (stream_id, recorded_at) WHERE stream_id LIKE 'wechat:order:%';

-- Fact schema version 4 (WeChat: deliveries without PaidTime carry no purchase date, ordinary
-- purchases and the API's answers are facts, links name their environment and matched id; on
-- top of version 3's App Store API facts, 0007).
-- New databases record v4 facts at append from the start; existing ones derive them with the
-- catch-up worker or `ledger rederive` (then `ledger rebuild` applies the new WeChat rules).
INSERT INTO projection_checkpoints (projection, position, status) VALUES ('facts.v4', 0, 'running')
ON CONFLICT (projection) DO NOTHING;
-- On an empty log the older versions have nothing to serve: their checkpoints go, so they do not
-- show as lagging. On a populated one, instances of the previous release still read v3 until they
-- are replaced; then `ledger rederive --drop-other-versions` retires it.
DELETE FROM projection_checkpoints
WHERE projection IN ('facts.v2', 'facts.v3') AND (SELECT position FROM event_head WHERE singleton) = 0;

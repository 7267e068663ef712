-- Fact schema version 5 (WeChat: refund_time or PaidTime in milliseconds, and SignedTime,
-- UnsignedTime or RenewalDate in seconds, are refused as unreadable; on top of version 4, 0008).
-- New databases record v5 facts at append from the start; existing ones derive them with the
-- catch-up worker or `ledger rederive` (then `ledger rebuild` applies the new rules).
-- Idempotent: another change of this round that also moves to v5 may insert the same row.
INSERT INTO projection_checkpoints (projection, position, status) VALUES ('facts.v5', 0, 'running')
ON CONFLICT (projection) DO NOTHING;
-- On an empty log the older versions have nothing to serve (see 0008).
DELETE FROM projection_checkpoints
WHERE projection IN ('facts.v2', 'facts.v3', 'facts.v4') AND (SELECT position FROM event_head WHERE singleton) = 0;

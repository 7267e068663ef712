-- 0022: fact schema version 7 (issue 20, WeChat): a signing or unsigning push without its own time
-- (AppleSubscriptionInfo.SignedTime / UnsignedTime) is a contract change at the push's CreateTime,
-- the basis named in the fact's detail (`time_basis`), instead of an `unreadable` fact. No column
-- changes: the facts table holds the new facts as it holds the old.
-- New databases record v7 facts at append from the start; existing ones derive them with the
-- catch-up worker or `ledger rederive` (then `ledger rebuild` applies them to the projections).
INSERT INTO projection_checkpoints (projection, position, status) VALUES ('facts.v7', 0, 'running')
ON CONFLICT (projection) DO NOTHING;
-- On an empty log the older versions have nothing to serve (as in 0013 and 0017).
DELETE FROM projection_checkpoints
WHERE projection IN ('facts.v2', 'facts.v3', 'facts.v4', 'facts.v5', 'facts.v6') AND (SELECT position FROM event_head WHERE singleton) = 0;

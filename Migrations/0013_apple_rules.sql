-- Fact schema version 5 (Apple, issue 20): every V2 transaction snapshot states a revocation (with
-- revocationDate) or a reversal (without), whatever the notification type; V1 and receipt
-- cancellations of upgraded entries are no revocations. (WeChat's v5 changes share this version.)
-- New databases record v5 facts at append from the start; existing ones derive them with the
-- catch-up worker or `ledger rederive` (then `ledger rebuild` applies the new rules).
INSERT INTO projection_checkpoints (projection, position, status) VALUES ('facts.v5', 0, 'running')
ON CONFLICT (projection) DO NOTHING;
-- On an empty log the older versions have nothing to serve (as in 0008).
DELETE FROM projection_checkpoints
WHERE projection IN ('facts.v2', 'facts.v3', 'facts.v4') AND (SELECT position FROM event_head WHERE singleton) = 0;

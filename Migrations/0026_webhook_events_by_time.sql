-- 0026: a subscription's webhook events found from a business time on.
--
-- The live derivation resumes a walk of a subscription's states where its last walk stopped
-- (WebhookWalkLog) and needs only the events stored after that time to tell new from known; with
-- the index on subscription alone it read every event the subscription ever had (thousands after
-- a tie loop) on each notification. The composite index serves lookups by subscription as before.
SET LOCAL ROLE ledger_projector;
DROP INDEX projections.webhook_events_subscription;
CREATE INDEX webhook_events_subscription_time ON projections.webhook_events (subscription, effective_at);
RESET ROLE;

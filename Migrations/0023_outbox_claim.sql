-- 0023: a claim whose cost does not grow with the queue.
--
-- The claim takes the due pending items in (next_attempt_at, cause_position, sequence, id) order,
-- skipping those whose key has an earlier pending item. With the due index on
-- (consumer, next_attempt_at) alone, PostgreSQL had to read and sort every due item, checking
-- each one's key, to return the first few: with a few thousand webhook events queued a claim took
-- seconds, and the delivery worker claims whenever an attempt finishes. Indexed in the claim's
-- own order, the scan stops once it has its LIMIT; the key index in the same order answers
-- "an earlier pending item of this key?" with one probe.
DROP INDEX outbox_items_due;
CREATE INDEX outbox_items_due ON outbox_items (consumer, next_attempt_at, cause_position, sequence, id) WHERE status = 'pending';
DROP INDEX outbox_items_key;
CREATE INDEX outbox_items_key ON outbox_items (consumer, ordering_key, cause_position, sequence, id) WHERE status = 'pending' AND ordered;

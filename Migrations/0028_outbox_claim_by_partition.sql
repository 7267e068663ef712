-- 0028: a claim that never reads the items of a partition it cannot take.
--
-- A delivery worker at its cap of attempts in flight for an endpoint claims "anything due
-- except that endpoint's items". Filtered from the due index, that claim read every pending
-- item of the busy endpoint before it found nothing: with one endpoint and a few thousand
-- webhook events queued, half of all claims were such scans (2.5 ms each), the largest cost
-- PostgreSQL had during the webhook benchmark. Indexed by partition first, the claim walks the
-- partitions that have pending items (one probe each) and reads only the due items of those it
-- may take, each in the claim's own order. This index serves every query the old due index did.
DROP INDEX outbox_items_due;
CREATE INDEX outbox_items_partition_due
    ON outbox_items (consumer, split_part(ordering_key, '|', 1), next_attempt_at, cause_position, sequence, id)
    WHERE status = 'pending';

-- 0029: finding the subscriptions that hold an Apple statement without reading their histories.
--
-- The Apple status check's catch-up asks, for each subscription a pass touched, whether it has
-- an `apple_status` fact. Through facts_subscription that probe read a subscription's facts in
-- position order until it met one: during `ledger-dev bench ingest` with 100 prior events per
-- subscription it took 58 ms a pass (2.3 s of PostgreSQL time in one run, the third-largest
-- statement). One entry per statement, so the probe is a single index lookup per subscription.
CREATE INDEX facts_apple_status ON public.facts (schema_version, subscription, position) WHERE kind = 'apple_status';

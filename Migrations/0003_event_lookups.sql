-- Lookups by dedupe key across streams: the WeChat refund inquiry names an order, and the
-- delivery of that order is found by its key `deliver:<OutTradeNo>`; an existing answer to an
-- inquiry is found by `refund-decision:<pay_order_id>`. (dedupe_key is at most 1,024 bytes by
-- the events table's CHECK, within a btree entry's limit; `type` has no such bound, so it is
-- not indexed.)
CREATE INDEX events_dedupe_key ON events (dedupe_key);

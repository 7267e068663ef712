-- Lookups by dedupe key across streams: the WeChat refund inquiry names an order, and the
-- delivery of that order is found by its key `deliver:<OutTradeNo>`; an existing answer to an
-- inquiry is found by `refund-decision:<pay_order_id>`.
CREATE INDEX events_dedupe_key ON events (dedupe_key);
-- Refund-case reads select events by type.
CREATE INDEX events_type ON events (type);

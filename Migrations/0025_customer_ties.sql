-- 0025: a subscription's ties and unties found without reading its history.
--
-- Tying answers from the latest tie in force and refuses past a cap of ties per subscription per
-- day (CustomerTies): both read only this subscription's tie facts, newest first, so a
-- subscription with thousands of renewals (or of ties) costs one short index range per tie.
CREATE INDEX facts_customer_tie ON public.facts (schema_version, subscription, recorded_at, position)
    WHERE kind = 'customer_tie';

-- 0024: an Apple refund case's facts found by its transaction.
--
-- A case of Apple's is its transaction's case facts (RefundCaseFacts.apple): they were found
-- through facts_kind, i.e. among every fact of those kinds in the ledger — and every transaction
-- snapshot without a revocationDate states a reversal, so that was one row per notification ever
-- stored, read under the append's lock whenever a refund arrived. The kind list is
-- RefundFactQueries.caseKindList (sorted): the planner uses the index only when the query's list
-- implies this one.
CREATE INDEX facts_case_transaction ON public.facts (schema_version, transaction_id)
    WHERE kind IN ('consumption_answer', 'consumption_request', 'refund_answer', 'refund_declined', 'refund_failed',
                   'refund_inquiry', 'reversal', 'revocation');

-- 0005: the service role appends only through append_events(), and no statement of its runs
-- unbounded.
--
-- 0001 granted ledger_service INSERT on events (DESIGN.md's first wording) and relied on a trigger
-- to refuse positions not handed out under the head lock. The grant is withdrawn: append_events()
-- is SECURITY DEFINER, so the service never needs it, and a compromised service process can then
-- add events only the way every append does (gapless positions, dedupe, NOTIFY).
REVOKE INSERT ON events FROM ledger_service;

-- Bounded statements: a request that waits on a lock or a slow plan gives up (SQLSTATE 57014,
-- answered 503 "retry later") instead of holding a connection past the HTTP deadline. Sessions
-- that legitimately run long (rebuild, rederive, exports) lift it for themselves with SET.
-- An idle transaction left open by a hung client is ended too.
ALTER ROLE ledger_service SET statement_timeout = '5s';
ALTER ROLE ledger_service SET idle_in_transaction_session_timeout = '60s';
ALTER ROLE ledger_service SET lock_timeout = '4s';

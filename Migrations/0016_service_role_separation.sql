-- 0016: the service role no longer holds the projector's rights implicitly.
--
-- 0002 made ledger_service a member of ledger_projector, which owns schema `projections` and may
-- INSERT and DELETE facts; with inheritance every statement of the service ran with those rights
-- (a DELETE of facts, a CREATE or DROP in `projections`, from anything that reached SQL). Now the
-- membership is NOINHERIT: the service's own statements can only read projections and facts and
-- append through append_events(); the few places that write projections and facts (the append's
-- fact and projection step, the catch-up worker, rederive, rebuilds) switch for their transaction
-- with `SET LOCAL ROLE ledger_projector` (LedgerStore `Connection.asProjector()`), and are back to
-- the service's rights at COMMIT.
ALTER ROLE ledger_service NOINHERIT;

-- What the service reads in `projections` it now needs granted, for the tables that exist and for
-- every table a rebuild creates (as ledger_projector) from now on.
SET LOCAL ROLE ledger_projector;
GRANT USAGE ON SCHEMA projections TO ledger_service;
GRANT SELECT ON ALL TABLES IN SCHEMA projections TO ledger_service;
ALTER DEFAULT PRIVILEGES FOR ROLE ledger_projector IN SCHEMA projections GRANT SELECT ON TABLES TO ledger_service;
RESET ROLE;

-- The append's projector step marks the plaintext nonce its push was admitted with (the same
-- transaction as the event: WeChatNonceHook).
GRANT SELECT, UPDATE ON wechat_push_nonces TO ledger_projector;

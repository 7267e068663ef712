-- The restricted role the service connects as (INSERT and SELECT on events only; grants come
-- from the migrations).
CREATE ROLE ledger_service LOGIN PASSWORD 'ledger_service';

-- 0010: the raw evidence is TOAST-compressed with lz4 instead of pglz, where the server has it.
--
-- A notification's raw body (~12 KB: three JWS with their certificate chains) is compressed on
-- insert. With pglz that was the largest single cost of an append in PostgreSQL (perf during
-- `ledger-dev bench ingest`: pglz_compress ≈ 30 % of the server's CPU); lz4 compresses the same
-- text several times faster, and reads decompress faster too. Bytes in and out are unchanged (the
-- hash chain and `ledger verify` see the same raw). Rows already stored keep their compression; a
-- server built without lz4 keeps pglz (nothing to do).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE public.events ALTER COLUMN raw SET COMPRESSION lz4;
        ALTER TABLE public.events ALTER COLUMN payload SET COMPRESSION lz4;
    END IF;
END
$$;

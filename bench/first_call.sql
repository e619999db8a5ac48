-- First-call cost of ctxwin in a fresh backend: latency of the first
-- count_tokens (library load included) and the backend's memory growth.
-- Run: psql -X -At -v enc=cl100k_base -f bench/first_call.sql  (one fresh connection per run)
\set QUIET 1
SELECT set_config('ctxwin_bench.enc', :'enc', false) \gset
DO $$ BEGIN PERFORM 1; END $$;   -- load PL/pgSQL before measuring
CREATE TEMP TABLE mem (at text, status text);
INSERT INTO mem SELECT 'before', pg_read_file('/proc/self/status');
DO $$
DECLARE
	t0 timestamptz := clock_timestamp();
	n int;
BEGIN
	n := ctxwin.count_tokens('The quick brown fox jumps over the lazy dog', current_setting('ctxwin_bench.enc'));
	RAISE NOTICE 'first call: % ms', round(extract(epoch FROM clock_timestamp() - t0) * 1000, 3);
	t0 := clock_timestamp();
	n := ctxwin.count_tokens('The quick brown fox jumps over the lazy dog', current_setting('ctxwin_bench.enc'));
	RAISE NOTICE 'second call: % ms', round(extract(epoch FROM clock_timestamp() - t0) * 1000, 3);
END $$;
INSERT INTO mem SELECT 'after first call', pg_read_file('/proc/self/status');
SELECT ctxwin.count_tokens(repeat('A paragraph of English prose, some code x = f(y); and numbers 12345. ', 150),
						   current_setting('ctxwin_bench.enc')) \gset
INSERT INTO mem SELECT 'after a 10 kB text', pg_read_file('/proc/self/status');
SELECT at,
	   (regexp_match(status, 'RssAnon:\s+(\d+)'))[1]::int - first_value((regexp_match(status, 'RssAnon:\s+(\d+)'))[1]::int) OVER () AS private_kb,
	   (regexp_match(status, 'RssFile:\s+(\d+)'))[1]::int - first_value((regexp_match(status, 'RssFile:\s+(\d+)'))[1]::int) OVER () AS shared_file_kb
FROM mem;

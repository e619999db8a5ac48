\set n random(1, 200)
SELECT * FROM ctxwin.context_status(('00000000-0000-4000-8000-' || lpad(:n::text, 12, '0'))::uuid);

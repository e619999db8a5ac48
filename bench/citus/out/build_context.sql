\set n random(1, 200)
SELECT ctxwin.build_context(('00000000-0000-4000-8000-' || lpad(:n::text, 12, '0'))::uuid, 16384);

\set n random(1, 200)
\set p random(1, 1000000)
INSERT INTO ctxwin.messages (session_id, role, content)
VALUES (('00000000-0000-4000-8000-' || lpad(:n::text, 12, '0'))::uuid, 'user', bench.prose(:p, 500));

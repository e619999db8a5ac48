-- Measurement 3: one user message of about 500 bytes into one of 100
-- sessions, through ctxwin's insert trigger (numbering, token counting,
-- session counters, foreign key to the session).
\set s random(1, 100)
\set p random(1, 100)
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT s.id, 'user', p.content
FROM bench.insert_sessions s, bench.payloads p
WHERE s.k = :s AND p.k = :p;

-- Measurement 3, a second baseline: the same message into a table of the same
-- shape, indexes and foreign key to ctxwin.sessions, without the trigger; the id comes from an identity
-- column and the token count is a constant.
\set s random(1, 100)
\set p random(1, 100)
INSERT INTO plain_fk_messages (session_id, role, content, token_count, token_encoding)
SELECT s.id, 'user', p.content, 110, 'o200k_base'
FROM bench.insert_sessions s, bench.payloads p
WHERE s.k = :s AND p.k = :p;

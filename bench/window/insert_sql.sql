-- Measurement 3, by hand: what ctxwin's contract asks of an insert (but
-- counting tokens), written as one SQL statement: the session row updated
-- (the next id, counters, updated_at; the row lock that keeps the ids of a
-- session gapless and in commit order) and the message inserted with that
-- id and a foreign key to its session, into copies of ctxwin's tables
-- without triggers.  No token counting (a constant), no checks.
\set s random(1, 100)
\set p random(1, 100)
WITH s AS (
    UPDATE bench.sql_sessions x
    SET message_count = x.message_count + 1, token_count = x.token_count + 110,
        unsummarized_messages = x.unsummarized_messages + 1,
        unsummarized_tokens = x.unsummarized_tokens + 110, updated_at = now()
    FROM bench.insert_sessions i
    WHERE i.k = :s AND x.id = i.id
    RETURNING x.id, x.message_count)
INSERT INTO bench.sql_messages (session_id, id, role, content, token_count, token_encoding)
SELECT s.id, s.message_count, 'user', p.content, 110, 'o200k_base'
FROM s, bench.payloads p
WHERE p.k = :p;

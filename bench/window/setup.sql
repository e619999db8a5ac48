-- bench/window/setup.sql: the data the window benchmarks measure, loaded
-- through ctxwin's real insert trigger into a throwaway cluster.
--
-- The window sessions use profile 'bench' (gpt-4o, o200k_base) with every summary
-- trigger off, so nothing is ever queued or summarized: build_context walks
-- all of a session's history as unsummarized messages.
\set ON_ERROR_STOP on
SET client_min_messages = warning;

-- (IF NOT EXISTS: the baseline database of bench/window/run has 0.1.0's
-- schema installed first)
CREATE EXTENSION IF NOT EXISTS ctxwin;
CREATE SCHEMA bench;

-- No autovacuum on the messages while they load: the run first measures
-- build_context before any ANALYZE (a fresh table), then runs VACUUM ANALYZE
-- itself and gives autovacuum back its default.
ALTER TABLE ctxwin.messages SET (autovacuum_enabled = off);

INSERT INTO ctxwin.profiles (name, model, trigger_ratio, max_messages_before_summary,
                             max_tokens_before_summary)
VALUES ('bench', 'gpt-4o', NULL, NULL, NULL);
-- the sliding window, 0.1.0's (whose schema the baseline database has):
-- every window fills the budget, so both measure the same work
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'ctxwin.profiles'::regclass
                                         AND attname = 'window_policy') THEN
        UPDATE ctxwin.profiles SET window_policy = 'sliding' WHERE name = 'bench';
    END IF;
END $$;

\ir ../prose.sql

-- The messages of a chat: user and assistant alternate, with one tool call
-- group in every 20 messages: message 18 of each 20 is an assistant message
-- with one tool call, 19 the tool's result, 20 the assistant's answer.
CREATE FUNCTION bench.chat(sid uuid, lo bigint, hi bigint)
RETURNS TABLE (session_id uuid, role text, content text, tool_calls jsonb, tool_call_id text)
LANGUAGE sql IMMUTABLE AS $$
SELECT sid,
       CASE WHEN j = 18 THEN 'tool' WHEN j % 2 = 0 THEN 'user' ELSE 'assistant' END,
       CASE WHEN j = 17 THEN NULL ELSE bench.prose(i) END,
       CASE WHEN j = 17 THEN jsonb_build_array(jsonb_build_object(
                'id', 'call_' || i, 'type', 'function',
                'function', jsonb_build_object('name', 'search_orders',
                    'arguments', jsonb_build_object('query', bench.prose(i, 60),
                                                    'limit', 20)::text))) END,
       CASE WHEN j = 18 THEN 'call_' || (i - 1) END
FROM generate_series(lo, hi) AS i, LATERAL (SELECT (i - 1) % 20 AS j) AS x
ORDER BY i
$$;

-- Loads n messages into a session of bench.sessions, 1,000 per transaction (as the
-- earlier runs did: before the insert trigger wrote the session row once per
-- statement, 100,000 versions of one row in a single transaction made each
-- lookup of it walk them all; measurement 4 times one statement).
CREATE PROCEDURE bench.load(session_name text, n bigint)
LANGUAGE plpgsql AS $$
DECLARE
    sid uuid := (SELECT id FROM bench.sessions WHERE name = session_name);
    lo bigint := 1;
BEGIN
    WHILE lo <= n LOOP
        INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id)
        SELECT * FROM bench.chat(sid, lo, least(lo + 999, n));
        COMMIT;
        lo := lo + 1000;
    END LOOP;
END $$;

-- The two sessions of measurement 1 (the 1k one is also measurement 2's).
CREATE TABLE bench.sessions (name text PRIMARY KEY, id uuid NOT NULL);
WITH s AS (INSERT INTO ctxwin.sessions (profile, system_prompt)
           VALUES ('bench', 'You are a helpful assistant for the orders service.') RETURNING id)
INSERT INTO bench.sessions SELECT '1k', id FROM s;
WITH s AS (INSERT INTO ctxwin.sessions (profile, system_prompt)
           VALUES ('bench', 'You are a helpful assistant for the orders service.') RETURNING id)
INSERT INTO bench.sessions SELECT '100k', id FROM s;

-- Measurement 3: 100 sessions of the default profile to insert into, 100
-- user messages of about 500 bytes to insert, and the same table without
-- ctxwin's trigger (nor its foreign key, which LIKE does not copy).
CREATE TABLE bench.insert_sessions (k int PRIMARY KEY, id uuid NOT NULL);
WITH s AS (INSERT INTO ctxwin.sessions (system_prompt)
           SELECT 'You are a helpful assistant.' FROM generate_series(1, 100) RETURNING id)
INSERT INTO bench.insert_sessions SELECT row_number() OVER (), id FROM s;
CREATE TABLE bench.payloads (k int PRIMARY KEY, content text NOT NULL);
INSERT INTO bench.payloads SELECT k, bench.prose(1000000 + k) FROM generate_series(1, 100) AS k;

CREATE TABLE plain_messages (LIKE ctxwin.messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS
                             INCLUDING INDEXES);
ALTER TABLE plain_messages ALTER id ADD GENERATED ALWAYS AS IDENTITY;

-- Measurement 3's plain table with the foreign key to its session that
-- ctxwin.messages has (insert_plain_fk.sql).
CREATE TABLE plain_fk_messages (LIKE ctxwin.messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS
                                INCLUDING INDEXES,
                                FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id));
ALTER TABLE plain_fk_messages ALTER id ADD GENERATED ALWAYS AS IDENTITY;

-- The same work by hand, for measurement 3 (insert_sql.sql): copies of ctxwin's sessions
-- and messages, without triggers, messages with the foreign key to their
-- session, holding the same 100 sessions.
CREATE TABLE bench.sql_sessions (LIKE ctxwin.sessions INCLUDING DEFAULTS INCLUDING CONSTRAINTS
                                   INCLUDING INDEXES);
INSERT INTO bench.sql_sessions SELECT x.* FROM ctxwin.sessions x JOIN bench.insert_sessions USING (id);
CREATE TABLE bench.sql_messages (LIKE ctxwin.messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS
                                   INCLUDING INDEXES,
                                   FOREIGN KEY (session_id) REFERENCES bench.sql_sessions (id));

-- Measurement 1, server side: the time of each of n calls of build_context
-- (after `warm` calls that fill the caches), from clock_timestamp() around
-- the call, so it excludes the client, the protocol and the jsonb output.
-- Warm-up and timed calls each stop after max_s seconds, so that a slow
-- build_context cannot stretch the run; calls says how many were timed.
CREATE FUNCTION bench.latency(session_name text, budget int, warm int, n int,
                              max_s float8 DEFAULT 15, what text DEFAULT 'build_context',
                              OUT median_ms float8, OUT p90_ms float8, OUT p99_ms float8,
                              OUT window_messages int, OUT window_tokens int, OUT calls int)
LANGUAGE plpgsql AS $$
DECLARE
    sid uuid := (SELECT id FROM bench.sessions WHERE name = session_name);
    t0 timestamptz;
    start timestamptz := clock_timestamp();
    ms float8[] := '{}';
    w jsonb;
BEGIN
    FOR i IN 1 .. warm LOOP
        IF what = 'context_status' THEN
            PERFORM ctxwin.context_status(sid);
        ELSE
            w := ctxwin.build_context(sid, budget);
        END IF;
        EXIT WHEN clock_timestamp() - start > max_s * interval '1 second';
    END LOOP;
    start := clock_timestamp();
    FOR i IN 1 .. n LOOP
        t0 := clock_timestamp();
        IF what = 'context_status' THEN
            PERFORM ctxwin.context_status(sid);
        ELSE
            w := ctxwin.build_context(sid, budget);
        END IF;
        ms := ms || 1000 * extract(epoch FROM clock_timestamp() - t0)::float8;
        EXIT WHEN clock_timestamp() - start > max_s * interval '1 second';
    END LOOP;
    SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x),
           percentile_cont(0.9) WITHIN GROUP (ORDER BY x),
           percentile_cont(0.99) WITHIN GROUP (ORDER BY x)
    INTO median_ms, p90_ms, p99_ms
    FROM unnest(ms) AS x;
    w := ctxwin.build_context(sid, budget);
    window_messages := jsonb_array_length(w);
    window_tokens := 3 + ctxwin.messages_tokens(w, 'o200k_base');
    calls := cardinality(ms);
END $$;

-- Diagnosis of measurement 1: k more sessions of n messages each, written
-- interleaved (one message of each session in turn, as concurrent chats
-- write them), so the rows of one session are spread over the table.
CREATE PROCEDURE bench.load_interleaved(k int, n bigint)
LANGUAGE plpgsql AS $$
DECLARE
    lo bigint := 1;
BEGIN
    WITH s AS (INSERT INTO ctxwin.sessions (profile, system_prompt)
               SELECT 'bench', 'You are a helpful assistant for the orders service.'
               FROM generate_series(1, k) RETURNING id)
    INSERT INTO bench.sessions SELECT 'mix' || row_number() OVER (), id FROM s;
    COMMIT;
    WHILE lo <= n LOOP
        INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id)
        SELECT c.*
        FROM bench.sessions s, generate_series(lo, least(lo + 99, n)) AS i,
             LATERAL bench.chat(s.id, i, i) AS c
        WHERE s.name LIKE 'mix%'
        ORDER BY i, s.name;
        COMMIT;
        lo := lo + 100;
    END LOOP;
END $$;

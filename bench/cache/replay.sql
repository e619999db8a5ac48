-- bench/cache/replay.sql: replays chat sessions turn by turn and measures
-- what a provider's prompt cache would serve of each request.
--
-- A turn: the user's message is inserted, the app asks build_context for
-- the request (what it sends), then the assistant's answer (and, in the
-- tool scenario, every fifth turn a tool call and its result before it) is
-- inserted, and compact() runs, as a worker would between turns, with the
-- built-in extractive summarizer (offline, deterministic).
--
-- What the cache serves and what is billed: bench/cache/cached.sql
-- (cacheable: the whole leading messages of a request identical to those
-- of the previous request, and the old part of a message that grew by
-- appended text, a summary with a new segment; billed: uncached + 0.1 x
-- cached).
--
-- New: the tokens of a request that were not in the previous request, which
-- no cache can serve: its messages absent from the previous request, or,
-- for a message that is one of the previous request's with text appended,
-- what was appended.  The ceiling, 1 - new / input, is the share of the
-- input any cache could serve at best; "of the ceiling" is cacheable / (input
-- - new).
\set ON_ERROR_STOP 1
\set QUIET 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ctxwin;
CREATE SCHEMA bench;
\ir ../prose.sql
\ir cached.sql

-- budget 16,384: a context window of 20,480 less the response reserve 4,096
CREATE FUNCTION bench.profile(name text, policy text, triggers boolean) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO ctxwin.profiles (name, model, context_window, response_reserve, window_policy,
                                 summary_placement, summary_strategy, max_summary_tokens,
                                 max_messages_before_summary, max_tokens_before_summary, trigger_ratio)
    SELECT name, 'gpt-4o', 20480, 4096, policy, 'message', 'extractive', 600,
           CASE WHEN triggers THEN 30 END, CASE WHEN triggers THEN 128000 END,
           CASE WHEN triggers THEN 0.8::real END
$$;

CREATE TABLE bench.requests (
    scenario text, policy text, turn int, body jsonb, tokens int, cached int, fresh int,
    compacted boolean);

-- The tokens of a request's messages that the previous request did not hold.
CREATE FUNCTION bench.fresh(body jsonb, prev jsonb) RETURNS int
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(sum(CASE
               WHEN EXISTS (SELECT FROM jsonb_array_elements(prev) p WHERE p = m) THEN 0
               ELSE ctxwin.count_message_tokens(m, 'o200k_base')
                    - coalesce((SELECT max(ctxwin.count_message_tokens(p, 'o200k_base') - 1)
                                FROM jsonb_array_elements(prev) p WHERE bench.extends(m, p)), 0) END), 0)::int
           + CASE WHEN jsonb_array_length(prev) = 0 THEN 3 ELSE 0 END
    FROM jsonb_array_elements(body) m $$;

-- One session of `turns` turns under a profile; every request recorded.
CREATE FUNCTION bench.replay(scenario text, policy text, profile text, turns int, tools boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    sid uuid;
    t int;
    body jsonb;
    prev jsonb := '[]';
BEGIN
    INSERT INTO ctxwin.sessions (profile, system_prompt)
    VALUES (profile, 'You are the engineering assistant of a small team that runs a web shop. '
                     || bench.prose(7, 600))
    RETURNING id INTO sid;
    FOR t IN 1 .. turns LOOP
        INSERT INTO ctxwin.messages (session_id, role, content)
        VALUES (sid, 'user', bench.prose(t * 2, 150 + (t * 37) % 450));
        body := ctxwin.build_context(sid);
        INSERT INTO bench.requests
        SELECT scenario, policy, t, body, ctxwin.messages_tokens(body, 'o200k_base') + 3,
               bench.cached_tokens(body, prev, 'o200k_base'),
               bench.fresh(body, prev),
               -- the first request with a new summary (placement 'message': the second message)
               body -> 1 ->> 'role' = 'system' AND body -> 1 IS DISTINCT FROM prev -> 1;
        prev := body;
        IF tools AND t % 5 = 0 THEN
            INSERT INTO ctxwin.messages (session_id, role, content, tool_calls)
            VALUES (sid, 'assistant', NULL, jsonb_build_array(jsonb_build_object(
                        'id', 'call_' || t, 'type', 'function',
                        'function', jsonb_build_object('name', 'search_orders',
                                                       'arguments', jsonb_build_object('query', bench.prose(t, 60))::text))));
            INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
            VALUES (sid, 'tool', bench.prose(t * 3, 900), 'call_' || t);
        END IF;
        INSERT INTO ctxwin.messages (session_id, role, content)
        VALUES (sid, 'assistant', bench.prose(t * 2 + 1, 400 + (t * 53) % 1200));
        PERFORM ctxwin.compact();
    END LOOP;
END $$;

\o /dev/null
SELECT bench.profile('stable', 'stable', false), bench.profile('sliding', 'sliding', false),
       bench.profile('stable_tr', 'stable', true), bench.profile('sliding_tr', 'sliding', true);

SELECT bench.replay('chat, no summary triggers', 'stable', 'stable', :turns, false);
SELECT bench.replay('chat, no summary triggers', 'sliding', 'sliding', :turns, false);
SELECT bench.replay('chat, summary triggers', 'stable', 'stable_tr', :turns, false);
SELECT bench.replay('chat, summary triggers', 'sliding', 'sliding_tr', :turns, false);
SELECT bench.replay('chat with tool calls, no summary triggers', 'stable', 'stable', :turns, true);
SELECT bench.replay('chat with tool calls, no summary triggers', 'sliding', 'sliding', :turns, true);
SELECT bench.replay('chat with tool calls, summary triggers', 'stable', 'stable_tr', :turns, true);
SELECT bench.replay('chat with tool calls, summary triggers', 'sliding', 'sliding_tr', :turns, true);

\o
-- The report, as Markdown.
\pset format unaligned
\pset tuples_only on
\pset fieldsep ''
SELECT '| scenario | policy | requests | input tokens | new tokens | ceiling | cacheable | of the ceiling | billed (uncached + 0.1 x cached) | billed / sliding | largest request (budget 16,384) |';
SELECT '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|';
WITH s AS (
    SELECT scenario, policy, count(*) AS requests, sum(tokens) AS input, sum(cached) AS cached,
           sum(fresh) AS fresh, sum(tokens - cached) + 0.1 * sum(cached) AS billed, max(tokens) AS largest
    FROM bench.requests GROUP BY scenario, policy)
SELECT format('| %s | %s | %s | %s | %s | %s %% | %s %% | %s %% | %s | %s | %s |', a.scenario, a.policy, a.requests,
              a.input, a.fresh, round(100.0 * (a.input - a.fresh) / a.input, 1),
              round(100.0 * a.cached / a.input, 1), round(100.0 * a.cached / (a.input - a.fresh), 1),
              round(a.billed),
              CASE WHEN a.policy = 'stable' THEN round(100.0 * a.billed / b.billed, 1) || ' %' ELSE '' END,
              a.largest)
FROM s a JOIN s b ON b.scenario = a.scenario AND b.policy = 'sliding'
ORDER BY a.scenario, a.policy DESC;
SELECT '';
SELECT format('goals, %s: cacheable >= 90 %% of the ceiling (%s), cacheable >= 90 %% (%s), billed <= 25 %% of sliding (%s), no request over the budget (%s)',
              scenario,
              CASE WHEN cc >= 0.9 THEN 'met' ELSE 'missed' END,
              CASE WHEN c >= 0.9 THEN 'met' ELSE 'missed' END,
              CASE WHEN r <= 0.25 THEN 'met' ELSE 'missed' END,
              CASE WHEN largest <= 16384 THEN 'met' ELSE 'missed' END)
FROM (SELECT a.scenario, a.cached::numeric / a.input AS c, a.cached::numeric / (a.input - a.fresh) AS cc,
             a.billed / b.billed AS r, greatest(a.largest, b.largest) AS largest
      FROM (SELECT scenario, policy, sum(tokens) AS input, sum(cached) AS cached, sum(fresh) AS fresh,
                   sum(tokens - cached) + 0.1 * sum(cached) AS billed, max(tokens) AS largest
            FROM bench.requests GROUP BY scenario, policy) a
      JOIN (SELECT scenario, sum(tokens - cached) + 0.1 * sum(cached) AS billed, max(tokens) AS largest
            FROM bench.requests WHERE policy = 'sliding' GROUP BY scenario) b USING (scenario)
      WHERE a.policy = 'stable') x
ORDER BY scenario;
SELECT '';
SELECT '| scenario | policy | requests with a new summary | their input tokens | cacheable of it | new | of the ceiling |';
SELECT '|---|---|---:|---:|---:|---:|---:|';
SELECT format('| %s | %s | %s | %s | %s %% | %s %% | %s %% |', scenario, policy, count(*), sum(tokens),
              round(100.0 * sum(cached) / sum(tokens), 1), round(100.0 * sum(fresh) / sum(tokens), 1),
              round(100.0 * sum(cached) / sum(tokens - fresh), 1))
FROM bench.requests WHERE compacted GROUP BY scenario, policy ORDER BY scenario, policy DESC;
SELECT '';
-- (segments: a column of ctxwin.summaries since segmented summaries, read
-- from the row so that the replay runs on the versions before them too)
SELECT format('summaries written: %s', (SELECT string_agg(format('%s %s (%s appended as segments)', p, n, a), ', ')
    FROM (SELECT s.profile AS p, count(*) AS n, count(*) FILTER (WHERE to_jsonb(x) ->> 'segments' IS NOT NULL) AS a
          FROM ctxwin.summaries x JOIN ctxwin.sessions s ON s.id = x.session_id
          GROUP BY s.profile ORDER BY s.profile) y));

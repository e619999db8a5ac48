-- bench/agent/replay.sql: replays coding-agent sessions with large tool
-- outputs through ctxwin at a 32,768-token budget, with tool results
-- cleared in the window and without, under both window policies.
--
-- A session of :turns turns, :runs sessions per profile (each its own
-- seed).  A turn: the user's request, then one to three steps of the
-- agent, each an assistant message calling a tool (read_file: a source
-- file of 2,000 to 5,000 tokens; run_tests: a test log of 1,500 to 3,500;
-- grep: 500 to 1,200) and its result, then the assistant's answer.  The
-- app asks build_context for the request before every assistant message
-- (the LLM is called once per step and once for the answer), so each turn
-- makes two to four requests.  Everything is generated from the seed
-- (bench.prose and hashint8): the same rows on every run.
--
-- Per profile: the turns the window keeps (user messages in the request,
-- on average and at least, over the requests of the second half of each
-- session, when the windows are full), the input tokens sent, what a
-- provider's prompt cache serves and the bill, counted as bench/cache
-- counts them (bench/cache/cached.sql: the whole leading messages of a
-- request identical to the previous request's are cached; billed =
-- uncached + 0.1 x cached).
\set ON_ERROR_STOP 1
\set QUIET 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ctxwin;
CREATE SCHEMA bench;
\ir ../prose.sql
\ir ../cache/cached.sql

-- A pseudo-random number in 0 .. n - 1 for a seed.
CREATE FUNCTION bench.pick(seed bigint, n int) RETURNS int
LANGUAGE sql IMMUTABLE RETURN (abs(hashint8(seed)) % n)::int;

-- A Python source file of `lines` lines.
CREATE FUNCTION bench.source_file(seed bigint, lines int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
SELECT string_agg(CASE g % 8
    WHEN 0 THEN format('def handle_%s_%s(request, session, limit=%s):', bench.prose(seed * 31 + g, 12), g,
                       bench.pick(seed * 37 + g, 500))
    WHEN 1 THEN format('    """%s"""', bench.prose(seed * 41 + g, 90))
    WHEN 2 THEN format('    rows = await db.fetch("SELECT id, total, created_at FROM orders_v%s WHERE user_id = $1 LIMIT $2", session.user_id, limit)',
                       bench.pick(seed * 43 + g, 9))
    WHEN 3 THEN format('    for row in rows:  # %s', bench.prose(seed * 47 + g, 40))
    WHEN 4 THEN format('        if row["total"] > %s and row["status"] != "%s":', bench.pick(seed * 53 + g, 100000),
                       (ARRAY['paid', 'open', 'void', 'refunded'])[1 + bench.pick(seed * 59 + g, 4)])
    WHEN 5 THEN format('            log.warning("order %%s over limit %s", row["id"])', bench.pick(seed * 61 + g, 1000))
    WHEN 6 THEN format('            raise OrderError(%s, row["id"])', bench.pick(seed * 67 + g, 600))
    ELSE format('    return {"count": len(rows), "page": %s}', bench.pick(seed * 71 + g, 50))
    END, E'\n' ORDER BY g)
FROM generate_series(1, lines) g $$;

-- A pytest log of `lines` lines, a few failures with their tracebacks.
CREATE FUNCTION bench.test_log(seed bigint, lines int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
SELECT string_agg(CASE WHEN bench.pick(seed * 73 + g, 17) = 0 THEN
        format(E'tests/test_%s.py::test_%s_%s FAILED\n    assert response.status == %s, "%s"\nE   AssertionError: expected %s, got %s',
               bench.pick(seed * 79 + g, 40), bench.prose(seed * 83 + g, 14), g, 200, bench.prose(seed * 89 + g, 50),
               200, 500 + bench.pick(seed * 97 + g, 4))
    ELSE format('tests/test_%s.py::test_%s_%s PASSED [%s%%] (%s ms)', bench.pick(seed * 79 + g, 40),
                bench.prose(seed * 83 + g, 14), g, 100 * g / lines, bench.pick(seed * 101 + g, 900))
    END, E'\n' ORDER BY g)
FROM generate_series(1, lines) g $$;

-- grep output: `lines` matches.
CREATE FUNCTION bench.grep(seed bigint, lines int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
SELECT string_agg(format('src/shop/%s.py:%s:    %s', bench.prose(seed * 103 + g, 12), bench.pick(seed * 107 + g, 900),
                         bench.prose(seed * 109 + g, 70)), E'\n' ORDER BY g)
FROM generate_series(1, lines) g $$;

-- budget 32,768 is passed to build_context; no summary triggers, so the
-- window alone decides what is sent
CREATE FUNCTION bench.profile(name text, policy text, keep int, max_tokens int DEFAULT NULL, at_least int DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.profiles (name, model, window_policy, summary_placement, max_messages_before_summary,
                                 max_tokens_before_summary, trigger_ratio, keep_tool_results,
                                 tool_result_max_tokens, clear_at_least)
    VALUES (name, 'gpt-4o', policy, 'message', NULL, NULL, NULL, keep, max_tokens, at_least)
$$;

CREATE TABLE bench.requests (profile text, run int, turn int, tokens int, cached int, turns_kept int);

-- One session under a profile; every request recorded.
CREATE FUNCTION bench.replay(p text, run int, turns int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    sid uuid;
    prev jsonb := '[]';
    seed bigint := run * 100003;
    ncall int := 0;
BEGIN
    INSERT INTO ctxwin.sessions (profile, system_prompt)
    VALUES (p, 'You are a coding agent working in the repository of a web shop. Use the tools to read files, '
               || 'search the code and run the tests before you change anything. ' || bench.prose(seed, 1200))
    RETURNING id INTO sid;
    FOR t IN 1 .. turns LOOP
        INSERT INTO ctxwin.messages (session_id, role, content)
        VALUES (sid, 'user', bench.prose(seed + t * 2, 200 + (t * 37) % 500));
        prev := bench.request(p, run, t, sid, prev);
        FOR s IN 1 .. 1 + bench.pick(seed + t, 3) LOOP
            ncall := ncall + 1;
            DECLARE
                kind int := bench.pick(seed * 7 + ncall, 3);
                tool text := (ARRAY['read_file', 'run_tests', 'grep'])[1 + kind];
                cid text := 'call_' || ncall;
            BEGIN
                INSERT INTO ctxwin.messages (session_id, role, content, tool_calls)
                VALUES (sid, 'assistant', CASE WHEN s = 1 THEN bench.prose(seed + ncall * 3, 120) END,
                        jsonb_build_array(jsonb_build_object(
                            'id', cid, 'type', 'function',
                            'function', jsonb_build_object('name', tool, 'arguments',
                                CASE kind WHEN 0 THEN format('{"path": "src/shop/orders_%s.py"}', ncall)
                                          WHEN 1 THEN format('{"args": ["-x", "tests/test_%s.py"]}', ncall % 40)
                                          ELSE format('{"pattern": "def handle_%s", "path": "src/"}', ncall % 97) END))));
                INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
                VALUES (sid, 'tool',
                        CASE kind WHEN 0 THEN bench.source_file(seed + ncall, 150 + bench.pick(seed * 11 + ncall, 220))
                                  WHEN 1 THEN bench.test_log(seed + ncall, 90 + bench.pick(seed * 13 + ncall, 120))
                                  ELSE bench.grep(seed + ncall, 25 + bench.pick(seed * 17 + ncall, 35)) END,
                        cid);
            END;
            prev := bench.request(p, run, t, sid, prev);
        END LOOP;
        INSERT INTO ctxwin.messages (session_id, role, content)
        VALUES (sid, 'assistant', bench.prose(seed + t * 2 + 1, 300 + (t * 53) % 900));
    END LOOP;
END $$;

-- A request: the window build_context sends now, recorded with what the
-- cache serves of it; returns it (the next request's previous one).
CREATE FUNCTION bench.request(p text, run int, t int, sid uuid, prev jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    body jsonb := ctxwin.build_context(sid, 32768);
BEGIN
    INSERT INTO bench.requests
    VALUES (p, run, t, ctxwin.messages_tokens(body, 'o200k_base') + 3, bench.cached_tokens(body, prev, 'o200k_base'),
            (SELECT count(*) FROM jsonb_array_elements(body) m WHERE m ->> 'role' = 'user'));
    RETURN body;
END $$;

\o /dev/null
SELECT bench.profile('sliding', 'sliding', NULL),
       bench.profile('stable', 'stable', NULL),
       bench.profile('sliding, clearing, no batches', 'sliding', 3),
       bench.profile('sliding, clearing', 'sliding', 3, NULL, 8000),
       bench.profile('stable, clearing', 'stable', 3),
       bench.profile('stable, clearing, cut at 2000', 'stable', 3, 2000);
SELECT bench.replay(p.name, r, :turns)
FROM ctxwin.profiles p, generate_series(1, :runs) r
WHERE p.name IN ('sliding', 'stable', 'sliding, clearing, no batches', 'sliding, clearing', 'stable, clearing',
                 'stable, clearing, cut at 2000')
ORDER BY p.name, r;

\o
-- The report, as Markdown.
\pset format unaligned
\pset tuples_only on
\pset fieldsep ''
SELECT '| profile | requests | turns kept (mean, least) | input tokens | cacheable | billed (uncached + 0.1 x cached) | billed / sliding | largest request (budget 32,768) |';
SELECT '|---|---:|---:|---:|---:|---:|---:|---:|';
WITH s AS (
    SELECT profile, count(*) AS requests, sum(tokens) AS input, sum(cached) AS cached,
           sum(tokens - cached) + 0.1 * sum(cached) AS billed, max(tokens) AS largest
    FROM bench.requests GROUP BY profile),
k AS (
    SELECT profile, round(avg(turns_kept), 1) AS mean, min(turns_kept) AS least
    FROM bench.requests WHERE turn > :turns / 2 GROUP BY profile)
SELECT format('| %s | %s | %s, %s | %s | %s %% | %s | %s %% | %s |', s.profile, s.requests, k.mean, k.least, s.input,
              round(100.0 * s.cached / s.input, 1), round(s.billed),
              round(100.0 * s.billed / (SELECT billed FROM s x WHERE x.profile = 'sliding'), 1), s.largest)
FROM s JOIN k USING (profile)
ORDER BY array_position(ARRAY['sliding', 'stable', 'sliding, clearing, no batches', 'sliding, clearing', 'stable, clearing',
                              'stable, clearing, cut at 2000'],
                        s.profile);
SELECT '';
SELECT format('tool results: %s, of %s to %s tokens (mean %s); %s requests over the budget',
              count(*), min(m.token_count), max(m.token_count), round(avg(m.token_count)),
              (SELECT count(*) FROM bench.requests WHERE tokens > 32768))
FROM ctxwin.messages m JOIN ctxwin.sessions s ON s.id = m.session_id
WHERE m.role = 'tool' AND s.profile = 'sliding';

-- Tool results in the window (src/window/clear.c): the profile settings
-- keep_tool_results, tool_result_max_tokens, clear_tool_inputs,
-- exclude_tools and clear_at_least, each against the stored rows, in both
-- formats; the budget and the call/result pairs under clearing; batches
-- by clear_at_least; a stable window that clears only when it jumps; and
-- ctxwin.message(session, id), which gives a cleared result back.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

-- An agent's turn t: the user asks, the assistant calls a tool (read_file,
-- or another), the tool answers with `lines` lines, the assistant answers.
-- Its messages are 4t-3 .. 4t; the result is 4t-1, its call call_t.
CREATE FUNCTION pg_temp.turn(sid uuid, t int, tool text, lines int) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content)
    VALUES (sid, 'user', format('Turn %s: look at src/file_%s.c, please.', t, t));
    INSERT INTO ctxwin.messages (session_id, role, content, tool_calls)
    VALUES (sid, 'assistant', NULL, jsonb_build_array(jsonb_build_object(
                'id', 'call_' || t, 'type', 'function',
                'function', jsonb_build_object('name', tool,
                                               'arguments', format('{"path": "src/file_%s.c", "lines": %s}', t, lines)))));
    INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
    SELECT sid, 'tool', string_agg(format('%s line %s of src/file_%s.c: x_%s = compute(%s);', tool, g, t, g, g * t),
                                   E'\n' ORDER BY g), 'call_' || t
    FROM generate_series(1, lines) g;
    INSERT INTO ctxwin.messages (session_id, role, content)
    VALUES (sid, 'assistant', format('Turn %s: src/file_%s.c computes %s values.', t, t, lines));
$$;

-- sliding windows, no summary triggers: only the settings decide
CREATE FUNCTION pg_temp.profile(name text, keep int, max_tokens int, inputs boolean, exclude text[],
                                at_least int, policy text DEFAULT 'sliding') RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                                 trigger_ratio, min_recent_messages, response_reserve, window_policy,
                                 keep_tool_results, tool_result_max_tokens, clear_tool_inputs, exclude_tools,
                                 clear_at_least)
    VALUES (name, 'gpt-4o', NULL, NULL, NULL, 2, 100, policy, keep, max_tokens, inputs, exclude, at_least) $$;
SELECT pg_temp.profile('cl_null', NULL, NULL, NULL, NULL, NULL),
       pg_temp.profile('cl_keep2', 2, NULL, NULL, NULL, NULL),
       pg_temp.profile('cl_keep9', 9, NULL, NULL, NULL, NULL),
       pg_temp.profile('cl_inputs', 2, NULL, true, NULL, NULL),
       pg_temp.profile('cl_excl', 2, NULL, NULL, '{run_tests}', NULL),
       pg_temp.profile('cl_max', 2, 200, NULL, '{run_tests}', NULL),
       pg_temp.profile('cl_max_only', NULL, 200, NULL, NULL, NULL),
       pg_temp.profile('cl_batch', 1, NULL, NULL, NULL, 3000),
       pg_temp.profile('cl_batch0', 1, NULL, NULL, NULL, NULL),
       pg_temp.profile('cl_stable', 1, NULL, NULL, NULL, NULL, 'stable'),
       pg_temp.profile('cl_stable_batch', 1, 300, true, NULL, 1500, 'stable'),
       pg_temp.profile('cl_stable_null', NULL, NULL, NULL, NULL, NULL, 'stable');

-- ---- the settings --------------------------------------------------------
SELECT is((SELECT format('%s|%s|%s|%s|%s', keep_tool_results, tool_result_max_tokens, clear_tool_inputs,
                         exclude_tools, clear_at_least) FROM ctxwin.profiles WHERE name = 'default'),
          '||||', 'the five settings are NULL (off) unless set: the default profile clears nothing');
SELECT throws_ok($$UPDATE ctxwin.profiles SET keep_tool_results = -1 WHERE name = 'cl_null'$$, '23514',
                 'new row for relation "profiles" violates check constraint "profiles_keep_tool_results_check"',
                 'a negative keep_tool_results is refused');
SELECT throws_ok($$UPDATE ctxwin.profiles SET tool_result_max_tokens = 0 WHERE name = 'cl_null'$$, '23514',
                 'new row for relation "profiles" violates check constraint "profiles_tool_result_max_tokens_check"',
                 'a tool_result_max_tokens of 0 is refused');
SELECT throws_ok($$UPDATE ctxwin.profiles SET clear_at_least = -5 WHERE name = 'cl_null'$$, '23514',
                 'new row for relation "profiles" violates check constraint "profiles_clear_at_least_check"',
                 'a negative clear_at_least is refused');
SELECT throws_ok($$UPDATE ctxwin.profiles SET exclude_tools = '{read_file,NULL}' WHERE name = 'cl_null'$$, '23514',
                 'new row for relation "profiles" violates check constraint "profiles_exclude_tools_check"',
                 'exclude_tools with a NULL element is refused');
SELECT lives_ok($$UPDATE ctxwin.profiles SET keep_tool_results = 0, clear_at_least = 0, exclude_tools = '{}'
                  WHERE name = 'cl_null'$$, 'keep_tool_results 0, clear_at_least 0 and no excluded tool are allowed');
UPDATE ctxwin.profiles SET keep_tool_results = NULL, clear_at_least = NULL, exclude_tools = NULL WHERE name = 'cl_null';

-- Session A: six turns of 60-line results; turn 3 runs the tests.
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
VALUES ('40000000-0000-4000-8000-00000000000a', 'cl_null', 'You are a coding agent.');
SELECT pg_temp.turn('40000000-0000-4000-8000-00000000000a', t, CASE WHEN t = 3 THEN 'run_tests' ELSE 'read_file' END, 60)
FROM generate_series(1, 6) t;

-- Session A's window under a profile (the session's profile changed for the call).
CREATE FUNCTION pg_temp.ctx(p text, budget int DEFAULT NULL, f text DEFAULT 'openai') RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ctxwin.sessions SET profile = p WHERE id = '40000000-0000-4000-8000-00000000000a';
    RETURN ctxwin.build_context('40000000-0000-4000-8000-00000000000a', budget, f);
END $$;
CREATE FUNCTION pg_temp.win(p text, budget int DEFAULT NULL) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ctxwin.sessions SET profile = p WHERE id = '40000000-0000-4000-8000-00000000000a';
    RETURN ctxwin._window('40000000-0000-4000-8000-00000000000a', budget);
END $$;
-- what became of each tool result of a window: call_t:whole, cleared or cut
CREATE FUNCTION pg_temp.results(w jsonb) RETURNS text[] LANGUAGE sql AS $$
    SELECT array_agg(format('%s:%s', m ->> 'tool_call_id',
                            CASE WHEN m ->> 'content' = x.content THEN 'whole'
                                 WHEN m ->> 'content' LIKE '[tool result cleared: %' THEN 'cleared'
                                 WHEN m ->> 'content' LIKE E'%\n[... % tokens omitted ...]\n%' THEN 'cut'
                                 ELSE 'other' END) ORDER BY n)
    FROM jsonb_array_elements(w) WITH ORDINALITY e(m, n)
    JOIN ctxwin.messages x ON x.session_id = '40000000-0000-4000-8000-00000000000a' AND x.role = 'tool'
                          AND x.tool_call_id = m ->> 'tool_call_id'
    WHERE m ->> 'role' = 'tool' $$;

SELECT pg_temp.ctx('cl_excl') IS NOT NULL;
SELECT is((SELECT keep_tool_results || ' ' || exclude_tools::text FROM ctxwin.session_settings
           WHERE session_id = '40000000-0000-4000-8000-00000000000a'), '2 {run_tests}',
          'ctxwin.session_settings shows the settings a session gets');

-- ---- NULL is off, byte for byte --------------------------------------------
SELECT is((SELECT count(*) FROM generate_series(600, 9000, 600) b, unnest(ARRAY['openai', 'anthropic']) f
           WHERE pg_temp.ctx('cl_keep9', b, f)::text <> pg_temp.ctx('cl_null', b, f)::text)::int, 0,
          'keep_tool_results over the number of results: the same bytes as without it, every budget, both formats');
SELECT ok(NOT pg_temp.win('cl_null') ? 'cleared_tool_results' AND pg_temp.win('cl_keep2') ? 'cleared_tool_results',
          '_window reports what was cleared only where the profile clears');

-- ---- keep_tool_results -------------------------------------------------------
SELECT is(pg_temp.results(pg_temp.ctx('cl_keep2')),
          ARRAY['call_1:cleared', 'call_2:cleared', 'call_3:cleared', 'call_4:cleared', 'call_5:whole', 'call_6:whole'],
          'keep_tool_results 2: the two newest results are whole, the older ones cleared');
SELECT is((SELECT m ->> 'content' FROM jsonb_array_elements(pg_temp.ctx('cl_keep2')) m WHERE m ->> 'tool_call_id' = 'call_1' AND m ->> 'role' = 'tool'),
          '[tool result cleared: read_file, call call_1, message 3; ctxwin.message(session, 3) returns it]',
          'the placeholder names the tool, the call and the message, and how to get it back');
SELECT is((SELECT m ->> 'content' FROM jsonb_array_elements(pg_temp.ctx('cl_keep2')) m WHERE m ->> 'tool_call_id' = 'call_3' AND m ->> 'role' = 'tool'),
          '[tool result cleared: run_tests, call call_3, message 11; ctxwin.message(session, 11) returns it]',
          'the tool is the function its call names');
SELECT is((SELECT jsonb_agg(m) FROM jsonb_array_elements(pg_temp.ctx('cl_keep2')) m WHERE m ->> 'role' <> 'tool'),
          (SELECT jsonb_agg(m) FROM jsonb_array_elements(pg_temp.ctx('cl_null')) m WHERE m ->> 'role' <> 'tool'),
          'every other message is sent as stored');
SELECT is((SELECT count(*) FROM jsonb_array_elements(pg_temp.ctx('cl_keep2')) m
           WHERE m ->> 'content' LIKE '[tool result cleared: %'
             AND ctxwin.message('40000000-0000-4000-8000-00000000000a',
                                substring(m ->> 'content' from 'message ([0-9]+);')::bigint) ->> 'content'
                 = (SELECT content FROM ctxwin.messages x WHERE x.session_id = '40000000-0000-4000-8000-00000000000a'
                                                          AND x.tool_call_id = m ->> 'tool_call_id' AND x.role = 'tool'))::int,
          4, 'ctxwin.message() of the id a placeholder names gives the cleared result back whole');
SELECT is((SELECT (w ->> 'tokens')::int - 3 - ctxwin.messages_tokens(w -> 'messages', 'o200k_base')
           FROM pg_temp.win('cl_keep2') w), 0,
          'the placeholders are counted as the messages are (the window''s tokens recounted from what it sends)');
SELECT is((SELECT format('%s %s', w ->> 'cleared_tool_results', w ->> 'cleared_tokens') FROM pg_temp.win('cl_keep2') w),
          (SELECT format('4 %s', sum(x.token_count) - ctxwin.messages_tokens(jsonb_agg(m), 'o200k_base'))
           FROM jsonb_array_elements(pg_temp.ctx('cl_keep2')) m
           JOIN ctxwin.messages x ON x.session_id = '40000000-0000-4000-8000-00000000000a' AND x.role = 'tool'
                                 AND x.tool_call_id = m ->> 'tool_call_id'
           WHERE m ->> 'content' LIKE '[tool result cleared: %'),
          '_window reports 4 results cleared and the tokens that saves');
SELECT is((SELECT window_tokens FROM ctxwin.context_status('40000000-0000-4000-8000-00000000000a')),
          (pg_temp.win('cl_keep2') ->> 'tokens')::int, 'context_status counts the window as cleared');

-- Clearing comes before dropping: the budget that holds the whole cleared window.
CREATE TEMP TABLE fit AS SELECT (pg_temp.win('cl_keep2') ->> 'tokens')::int AS b;
SELECT is((SELECT (pg_temp.win('cl_keep2', b) ->> 'dropped_messages')::int FROM fit), 0,
          'with the cleared results every message fits the budget');
SELECT cmp_ok((SELECT (pg_temp.win('cl_null', b) ->> 'dropped_messages')::int FROM fit), '>=', 8,
              'without clearing, the same budget drops at least two turns');
SELECT is((SELECT count(*) FROM generate_series(1000, 14000, 250) b
           WHERE (pg_temp.win('cl_keep2', b) ->> 'first_id')::int > (pg_temp.win('cl_null', b) ->> 'first_id')::int)::int, 0,
          'at no budget does clearing keep fewer messages');
SELECT is((SELECT count(*) FROM generate_series(40, 14000, 97) b, LATERAL (SELECT pg_temp.win('cl_keep2', b) AS w) x
           WHERE (w ->> 'tokens')::int > b OR ctxwin.messages_tokens(w -> 'messages', 'o200k_base') + 3 > b)::int, 0,
          'the budget is never exceeded under clearing (145 budgets)');
SELECT is((SELECT count(*) FROM generate_series(40, 14000, 97) b, LATERAL (SELECT pg_temp.ctx('cl_keep2', b) AS w) x,
                 jsonb_array_elements(w) WITH ORDINALITY e(m, n)
           WHERE (m ->> 'role' = 'tool' AND NOT EXISTS (
                     SELECT FROM jsonb_array_elements(w) WITH ORDINALITY a(c, k), jsonb_array_elements(c -> 'tool_calls') t
                     WHERE k < n AND t ->> 'id' = m ->> 'tool_call_id'))
              OR EXISTS (SELECT FROM jsonb_array_elements(m -> 'tool_calls') t
                         WHERE NOT EXISTS (SELECT FROM jsonb_array_elements(w) r WHERE r ->> 'tool_call_id' = t ->> 'id')))::int, 0,
          'a call and its result are never split under clearing');

-- ---- clear_tool_inputs -------------------------------------------------------
SELECT is((SELECT array_agg(format('%s=%s', c ->> 'id', c -> 'function' ->> 'arguments') ORDER BY c ->> 'id')
           FROM jsonb_array_elements(pg_temp.ctx('cl_inputs')) m, jsonb_array_elements(m -> 'tool_calls') c),
          ARRAY['call_1={}', 'call_2={}', 'call_3={}', 'call_4={}',
                'call_5={"path": "src/file_5.c", "lines": 60}', 'call_6={"path": "src/file_6.c", "lines": 60}'],
          'clear_tool_inputs: the arguments of the calls whose results are cleared are "{}", the others as stored');
SELECT is((SELECT array_agg(format('%s=%s', b ->> 'id', b -> 'input') ORDER BY b ->> 'id')
           FROM jsonb_array_elements(pg_temp.ctx('cl_inputs', NULL, 'anthropic') -> 'messages') t,
                jsonb_array_elements(t -> 'content') b WHERE b ->> 'type' = 'tool_use'),
          ARRAY['call_1={}', 'call_2={}', 'call_3={}', 'call_4={}',
                'call_5={"path": "src/file_5.c", "lines": 60}', 'call_6={"path": "src/file_6.c", "lines": 60}'],
          'anthropic: the tool_use input of a cleared call is {}');
SELECT is((SELECT array_agg(format('%s=%s', b ->> 'tool_use_id', left(b ->> 'content', 40)) ORDER BY b ->> 'tool_use_id')
           FROM jsonb_array_elements(pg_temp.ctx('cl_inputs', NULL, 'anthropic') -> 'messages') t,
                jsonb_array_elements(t -> 'content') b WHERE b ->> 'type' = 'tool_result'),
          ARRAY['call_1=[tool result cleared: read_file, call ca', 'call_2=[tool result cleared: read_file, call ca',
                'call_3=[tool result cleared: run_tests, call ca', 'call_4=[tool result cleared: read_file, call ca',
                'call_5=read_file line 1 of src/file_5.c: x_1 = ', 'call_6=read_file line 1 of src/file_6.c: x_1 = '],
          'anthropic: a cleared result is still a tool_result block, its content the placeholder');
SELECT cmp_ok((pg_temp.win('cl_inputs') ->> 'cleared_tokens')::int, '>', (pg_temp.win('cl_keep2') ->> 'cleared_tokens')::int,
              'clearing the inputs saves more tokens');
SELECT is((SELECT (w ->> 'tokens')::int - 3 - ctxwin.messages_tokens(w -> 'messages', 'o200k_base')
           FROM pg_temp.win('cl_inputs') w), 0, 'and the rewritten tool_calls are counted as sent');

-- ---- exclude_tools -----------------------------------------------------------
SELECT is(pg_temp.results(pg_temp.ctx('cl_excl')),
          ARRAY['call_1:cleared', 'call_2:cleared', 'call_3:whole', 'call_4:cleared', 'call_5:whole', 'call_6:whole'],
          'exclude_tools: the run_tests result stays whole, and the two kept are the newest of the others');

-- ---- tool_result_max_tokens --------------------------------------------------
SELECT is(pg_temp.results(pg_temp.ctx('cl_max')),
          ARRAY['call_1:cleared', 'call_2:cleared', 'call_3:whole', 'call_4:cleared', 'call_5:cut', 'call_6:cut'],
          'tool_result_max_tokens: the kept results are cut, the excluded tool''s is not');
SELECT is((SELECT count(*) FROM jsonb_array_elements(pg_temp.ctx('cl_max')) m
           JOIN ctxwin.messages x ON x.session_id = '40000000-0000-4000-8000-00000000000a' AND x.role = 'tool'
                                 AND x.tool_call_id = m ->> 'tool_call_id'
           WHERE m ->> 'tool_call_id' IN ('call_5', 'call_6')
             AND m ->> 'content' = ctxwin.truncate_middle(x.content, 200, 'o200k_base'))::int, 2,
          'a cut result is truncate_middle of the stored one to tool_result_max_tokens');
SELECT is(pg_temp.results(pg_temp.ctx('cl_max_only')),
          ARRAY['call_1:cut', 'call_2:cut', 'call_3:cut', 'call_4:cut', 'call_5:cut', 'call_6:cut'],
          'tool_result_max_tokens alone cuts every longer result and clears none');
SELECT is((SELECT count(*) FROM jsonb_array_elements(pg_temp.ctx('cl_max_only')) m
           WHERE m ->> 'role' = 'tool' AND ctxwin.count_tokens(m ->> 'content', 'o200k_base') > 200)::int, 0,
          'no result sent is over 200 tokens');
SELECT is((SELECT format('%s %s', w ->> 'cut_tool_results', w ->> 'cleared_tool_results') FROM pg_temp.win('cl_max_only') w),
          '6 0', '_window reports the six cut');
SELECT is((SELECT (w ->> 'tokens')::int - 3 - ctxwin.messages_tokens(w -> 'messages', 'o200k_base')
           FROM pg_temp.win('cl_max') w), 0, 'cut results are counted as sent');
SELECT is((SELECT count(*) FROM generate_series(40, 6000, 61) b, LATERAL (SELECT pg_temp.win('cl_max', b) AS w) x
           WHERE (w ->> 'tokens')::int > b OR ctxwin.messages_tokens(w -> 'messages', 'o200k_base') + 3 > b)::int, 0,
          'never over the budget with cut and cleared results (98 budgets)');

-- ---- ctxwin.message ------------------------------------------------------------
SELECT is(ctxwin.message('40000000-0000-4000-8000-00000000000a', 3),
          (SELECT jsonb_build_object('role', 'tool', 'content', content, 'tool_call_id', 'call_1', 'id', 3,
                                     'created_at', created_at)
           FROM ctxwin.messages WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND id = 3),
          'message(): a tool result whole, with its id and created_at');
SELECT is(ctxwin.message('40000000-0000-4000-8000-00000000000a', 2) - 'created_at',
          (SELECT jsonb_build_object('role', 'assistant', 'tool_calls', tool_calls, 'id', 2)
           FROM ctxwin.messages WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND id = 2),
          'message(): an assistant call as stored, its NULL content left out');
SELECT throws_ok($$SELECT ctxwin.message(NULL, 3)$$, '22004', 'session id must not be null', 'message(): NULL session');
SELECT throws_ok($$SELECT ctxwin.message('40000000-0000-4000-8000-00000000000a', NULL)$$, '22004',
                 'message id must not be null', 'message(): NULL id');
SELECT throws_ok($$SELECT ctxwin.message('40000000-0000-4000-8000-0000000000ff', 3)$$, 'P0002',
                 'session 40000000-0000-4000-8000-0000000000ff does not exist', 'message(): unknown session');
SELECT throws_ok($$SELECT ctxwin.message('40000000-0000-4000-8000-00000000000a', 99)$$, 'P0002',
                 'message 99 of session 40000000-0000-4000-8000-00000000000a does not exist', 'message(): unknown id');
CREATE ROLE ctxwin_clear_r;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_clear_r;
SET ROLE ctxwin_clear_r;
SELECT throws_ok($$SELECT ctxwin.message('40000000-0000-4000-8000-00000000000a', 3)$$, '42501',
                 'permission denied for table messages', 'message(): read as the caller, without SELECT it is refused');
RESET ROLE;
GRANT SELECT ON ctxwin.sessions, ctxwin.messages TO ctxwin_clear_r;
ALTER TABLE ctxwin.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.messages ENABLE ROW LEVEL SECURITY;
CREATE POLICY mine ON ctxwin.sessions USING (metadata ->> 'owner' = current_user);
CREATE POLICY mine ON ctxwin.messages USING (EXISTS (SELECT FROM ctxwin.sessions s WHERE s.id = session_id));
SET ROLE ctxwin_clear_r;
SELECT throws_ok($$SELECT ctxwin.message('40000000-0000-4000-8000-00000000000a', 3)$$, 'P0002',
                 'session 40000000-0000-4000-8000-00000000000a does not exist',
                 'message(): under row-level security another''s session does not exist');
RESET ROLE;
UPDATE ctxwin.sessions SET metadata = '{"owner": "ctxwin_clear_r"}' WHERE id = '40000000-0000-4000-8000-00000000000a';
SET ROLE ctxwin_clear_r;
SELECT is(ctxwin.message('40000000-0000-4000-8000-00000000000a', 3) ->> 'tool_call_id', 'call_1',
          'message(): and its own is read');
RESET ROLE;
ALTER TABLE ctxwin.sessions DISABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.messages DISABLE ROW LEVEL SECURITY;

-- ---- replays: a request after every turn ------------------------------------
-- each request's window, and which results it sends cleared
CREATE TABLE pg_temp.requests (profile text, turn int, budget int, first_id bigint, tokens int,
                               body jsonb, cleared text[], calls text[], jump bigint);
CREATE FUNCTION pg_temp.replay(sid uuid, p text, turns int, lines int, budget int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w jsonb;
BEGIN
    INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES (sid, p, 'You are a coding agent.');
    FOR t IN 1 .. turns LOOP
        PERFORM pg_temp.turn(sid, t, 'read_file', lines + (t * 7) % 11);
        w := ctxwin._window(sid, budget);
        INSERT INTO pg_temp.requests
        SELECT p, t, budget, (w ->> 'first_id')::bigint, (w ->> 'tokens')::int, ctxwin.build_context(sid, budget),
               ARRAY(SELECT m ->> 'tool_call_id' FROM jsonb_array_elements(w -> 'messages') m
                     WHERE m ->> 'content' LIKE '[tool result cleared: %' ORDER BY m ->> 'tool_call_id'),
               ARRAY(SELECT m ->> 'tool_call_id' FROM jsonb_array_elements(w -> 'messages') m
                     WHERE m ->> 'role' = 'tool' ORDER BY m ->> 'tool_call_id'),
               -- where a stable window last jumped (StableJumpAt, rules.c), from the
               -- tokens since the summary: room = budget - prompt, low = 0.6 x budget - prompt
               (SELECT CASE WHEN total <= room THEN -1
                            ELSE room + ((total - room + (room - low) - 1) / (room - low) - 1) * (room - low) END
                FROM (SELECT s.unsummarized_tokens AS total, budget - x.prompt AS room,
                             floor(0.6::real * budget)::bigint - x.prompt AS low
                      FROM ctxwin.sessions s,
                           (SELECT 3 + ctxwin.message_tokens('system', 'You are a coding agent.', NULL, NULL, NULL,
                                                             'o200k_base') AS prompt) x
                      WHERE s.id = sid) y);
    END LOOP;
END $$;
CREATE VIEW pg_temp.pairs AS
SELECT r.*, p.first_id AS prev_first_id, p.body AS prev_body, p.cleared AS prev_cleared,
       -- the previous request's messages are the beginning of this one
       (SELECT bool_and(r.body -> (n::int - 1) = e) FROM jsonb_array_elements(p.body) WITH ORDINALITY a(e, n)) AS prefix
FROM pg_temp.requests r JOIN pg_temp.requests p ON p.profile = r.profile AND p.turn = r.turn - 1;

-- a cleared result that is in the next request is cleared there too
CREATE VIEW pg_temp.uncleared AS
SELECT * FROM pg_temp.pairs WHERE EXISTS (SELECT FROM unnest(prev_cleared) c WHERE c = ANY (calls) AND NOT c = ANY (cleared));

SELECT pg_temp.replay('40000000-0000-4000-8000-0000000000b1', 'cl_batch', 14, 40, 60000);
SELECT pg_temp.replay('40000000-0000-4000-8000-0000000000b0', 'cl_batch0', 14, 40, 60000);

-- clear_at_least 3000 (results of about 800 tokens), keep 1, everything fits
SELECT is((SELECT count(*) FROM pg_temp.uncleared WHERE profile = 'cl_batch')::int, 0,
          'clear_at_least: a cleared result stays cleared');
SELECT is((SELECT count(*) FROM pg_temp.pairs x
           WHERE profile = 'cl_batch' AND cleared <> prev_cleared
             AND (SELECT sum(token_count) FROM ctxwin.messages m
                  WHERE m.session_id = '40000000-0000-4000-8000-0000000000b1' AND m.role = 'tool'
                    AND m.tool_call_id = ANY (x.cleared) AND NOT m.tool_call_id = ANY (x.prev_cleared)) < 3000)::int, 0,
          'clear_at_least: every change clears at least 3000 tokens of results');
SELECT is((SELECT count(*) FROM pg_temp.requests x
           WHERE profile = 'cl_batch'
             AND (SELECT coalesce(sum(token_count), 0) FROM ctxwin.messages m
                  WHERE m.session_id = '40000000-0000-4000-8000-0000000000b1' AND m.role = 'tool'
                    AND NOT m.tool_call_id = ANY (x.cleared) AND m.id < 4 * x.turn - 1) >= 3000)::int, 0,
          'clear_at_least: the results waiting to be cleared never hold 3000 tokens');
SELECT ok((SELECT count(*) FROM pg_temp.pairs WHERE profile = 'cl_batch' AND cleared <> prev_cleared) BETWEEN 2 AND 5,
          'so the cleared set changes a few times in 14 turns');
SELECT is((SELECT count(*) FROM pg_temp.pairs WHERE profile = 'cl_batch0' AND cleared <> prev_cleared)::int, 13,
          'without clear_at_least it changes at every turn from the second');
SELECT is((SELECT count(*) FROM pg_temp.pairs WHERE profile = 'cl_batch' AND cleared = prev_cleared AND NOT prefix)::int, 0,
          'between changes, each request begins with the previous one, byte for byte');

-- Stable windows: a small budget, so that the window jumps.
SELECT pg_temp.replay('40000000-0000-4000-8000-0000000000c1', 'cl_stable', 40, 30, 6000);
SELECT pg_temp.replay('40000000-0000-4000-8000-0000000000c2', 'cl_stable_batch', 40, 30, 6000);
SELECT pg_temp.replay('40000000-0000-4000-8000-0000000000c0', 'cl_stable_null', 40, 30, 6000);
SELECT is((SELECT count(*) FROM pg_temp.requests WHERE tokens > budget
              OR ctxwin.messages_tokens(body, 'o200k_base') + 3 > budget)::int, 0,
          'no request of any replay is over its budget');
SELECT is((SELECT count(*) FROM pg_temp.requests r, jsonb_array_elements(r.body) m
           WHERE m ->> 'role' = 'tool' AND NOT EXISTS (
                 SELECT FROM jsonb_array_elements(r.body) c, jsonb_array_elements(c -> 'tool_calls') t
                 WHERE t ->> 'id' = m ->> 'tool_call_id'))::int, 0,
          'no request of any replay has a result without its call');
SELECT is((SELECT count(*) FROM pg_temp.requests WHERE profile LIKE 'cl_stable%' AND jump < 0 AND cleared <> '{}')::int, 0,
          'stable: nothing is cleared before the window first jumps');
SELECT cmp_ok((SELECT count(DISTINCT jump) FROM pg_temp.requests WHERE profile = 'cl_stable')::int, '>=', 8,
              '(the stable windows jump at least 7 times in 40 turns)');
SELECT is((SELECT count(*) FROM pg_temp.pairs p WHERE profile IN ('cl_stable', 'cl_stable_batch')
             AND jump = (SELECT q.jump FROM pg_temp.requests q WHERE q.profile = p.profile AND q.turn = p.turn - 1)
             AND (cleared <> prev_cleared OR first_id <> prev_first_id OR NOT prefix))::int, 0,
          'stable: between jumps the cleared set and the start stay, and each request begins with the previous one, byte for byte');
SELECT cmp_ok((SELECT count(*) FROM pg_temp.pairs WHERE profile = 'cl_stable' AND cleared <> prev_cleared)::int,
              '>=', 4, 'stable: jumps clear results');
SELECT is((SELECT count(*) FROM pg_temp.uncleared WHERE profile LIKE 'cl_stable%')::int, 0,
          'stable: a cleared result stays cleared while it is in the window');
SELECT cmp_ok((SELECT avg(jsonb_array_length(body)) FROM pg_temp.requests WHERE profile = 'cl_stable' AND turn > 20),
              '>', (SELECT 1.5 * avg(jsonb_array_length(body)) FROM pg_temp.requests WHERE profile = 'cl_stable_null' AND turn > 20),
              'stable: with clearing the window holds half as many messages again as without');
SELECT is((SELECT count(*) FROM pg_temp.pairs WHERE profile = 'cl_stable_null'
             AND first_id <> prev_first_id AND cleared = prev_cleared
             AND jump = (SELECT q.jump FROM pg_temp.requests q WHERE q.profile = 'cl_stable_null' AND q.turn = pairs.turn - 1))::int, 0,
          '(the jumps computed here are those of the stable window without clearing)');
SELECT is(ctxwin.build_context('40000000-0000-4000-8000-0000000000c2', 6000)::text,
          (SELECT body::text FROM pg_temp.requests WHERE profile = 'cl_stable_batch' AND turn = 40),
          'the same rows give the same bytes');

SELECT * FROM finish();
ROLLBACK;

-- Recall: search over the whole history (summarized messages included),
-- its filters, ranking, identifiers, snippets, bounds, errors and row-level
-- security; the conversation_search tool in build_request (counted in the
-- budget as any tool) and answer_tool_call's round trip; the sections of
-- the summaries.  The search's speed on a long session: bench/recall/run.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

\ir lib/sliding.sql

INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy,
                             response_reserve)
VALUES ('r', 'gpt-4o', 12, NULL, NULL, 4, 400, 'extractive', 500);
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
  ('a0000000-0000-4000-8000-000000000001', 'r', 'You help with orders.'),
  ('a0000000-0000-4000-8000-000000000002', 'r', 'Another session.');

-- messages at known times, an hour apart from 2025-01-01 00:00 UTC
CREATE PROCEDURE pg_temp.say(s uuid, r text, c text, h int, calls jsonb DEFAULT NULL, call_id text DEFAULT NULL)
LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id, created_at)
    VALUES (s, r, c, calls, call_id, '2025-01-01 00:00:00+00'::timestamptz + make_interval(hours => h)) $$;
CREATE FUNCTION pg_temp.ids(q text, roles text[] DEFAULT NULL, since timestamptz DEFAULT NULL,
                            until timestamptz DEFAULT NULL, n int DEFAULT 10,
                            s uuid DEFAULT 'a0000000-0000-4000-8000-000000000001')
RETURNS bigint[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(x.id ORDER BY x.rank DESC, x.id DESC), '{}')
    FROM ctxwin.search(s, q, roles, since, until, n) x $$;

CALL pg_temp.say('a0000000-0000-4000-8000-000000000001', 'user',
                   'My order ORD-48213 has not arrived. Can you check the shipping database?', 1);      -- 1
CALL pg_temp.say('a0000000-0000-4000-8000-000000000001', 'assistant',
                   'The crash is in src/window/walk.c at line 120, error E4031 from the packer.', 2);   -- 2
CALL pg_temp.say('a0000000-0000-4000-8000-000000000001', 'user',
                   'We decided to keep PostgreSQL as the database. The database is fine; the database stays.', 3); -- 3
CALL pg_temp.say('a0000000-0000-4000-8000-000000000001', 'assistant',
                   'Checking the order now.', 4,
                   '[{"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": "{\"order_id\": \"ORD-77001\"}"}}]'); -- 4
CALL pg_temp.say('a0000000-0000-4000-8000-000000000001', 'tool', '{"order": "ORD-77001", "status": "shipped"}', 5,
                   NULL, 'call_1');                                                                    -- 5
-- trigrams of walk.c (wal alk lk. k.c) in tokens that are not walk.c
CALL pg_temp.say('a0000000-0000-4000-8000-000000000001', 'assistant', 'Tokens walk1 and lk.c here, and metadata.', 6); -- 6
CALL pg_temp.say('a0000000-0000-4000-8000-000000000001', 'user',
                   repeat('Filler words about nothing in particular. ', 30) || 'The needle is haystack-7781 right here. '
                   || repeat('More filler to pad the message out. ', 30), 7);                          -- 7
INSERT INTO ctxwin.messages (session_id, role, content, created_at)
SELECT 'a0000000-0000-4000-8000-000000000001', CASE WHEN g % 2 = 0 THEN 'user' ELSE 'assistant' END,
       'Routine message ' || g || ' about the ' || CASE WHEN g % 3 = 0 THEN 'database' ELSE 'weather' END || '.',
       '2025-01-01 00:00:00+00'::timestamptz + make_interval(hours => 7 + g)
FROM generate_series(1, 9) g;        -- 8 .. 16; database in 10 (assistant), 13 (user), 16 (assistant)
-- the other session holds the same identifier: never in the first one's results
CALL pg_temp.say('a0000000-0000-4000-8000-000000000002', 'user', 'Order ORD-48213 of the other session; database.', 1);

-- a summary covers the oldest messages: they are no longer in the window
CREATE TEMP TABLE s1 AS SELECT * FROM ctxwin.summarize_session('a0000000-0000-4000-8000-000000000001', true);
SELECT is((SELECT summary_through_id FROM ctxwin.sessions WHERE id = 'a0000000-0000-4000-8000-000000000001'), 12::bigint,
          '(the summary covers messages 1-12)');
SELECT is((SELECT count(*) FROM jsonb_array_elements(ctxwin.build_context('a0000000-0000-4000-8000-000000000001')) e
           WHERE e ->> 'role' <> 'system' AND e ->> 'content' LIKE '%has not arrived%'), 0::bigint,
          '(message 1 is no longer in the window)');

-- search finds summarized messages
SELECT is(pg_temp.ids('arrived'), ARRAY[1]::bigint[], 'search finds a message the summary covers, by a word');
SELECT is(pg_temp.ids('ORD-48213'), ARRAY[1]::bigint[],
          'an order number finds its message, and not the other session''s');
SELECT is(pg_temp.ids('ord-48213'), ARRAY[1]::bigint[], '... case aside');
SELECT is(pg_temp.ids('48213'), ARRAY[1]::bigint[], 'a part of an identifier finds it (the trigram fallback)');
SELECT is(pg_temp.ids('src/window/walk.c'), ARRAY[2]::bigint[], 'a path finds its message');
SELECT is(pg_temp.ids('walk.c'), ARRAY[2]::bigint[],
          'a file name finds the path it ends, and not a message that has its trigrams in other tokens');
SELECT is(pg_temp.ids('E4031'), ARRAY[2]::bigint[], 'an error code finds its message');
SELECT is(pg_temp.ids('4031'), ARRAY[2]::bigint[], '... and a part of it');
SELECT is(pg_temp.ids('ORD-77001'), ARRAY[5, 4]::bigint[],
          'an identifier in a tool call''s arguments and in a tool result finds both messages');
SELECT is(pg_temp.ids('get_order'), ARRAY[4]::bigint[], 'a tool''s name finds the call');
SELECT is(pg_temp.ids('data'), '{}'::bigint[], 'a word matches whole words only: data is not database');
SELECT is(pg_temp.ids('DATABASE'), ARRAY[3, 16, 13, 10, 1]::bigint[],
          'a word, case aside: the message that has it three times first, then newest first');
SELECT is(pg_temp.ids('shipping database'), ARRAY[1]::bigint[], 'every word must be in a message');
SELECT is(pg_temp.ids('walk.c arrived'), ARRAY[2, 1]::bigint[],
          'when no message has every term, those with some of them');
SELECT is(pg_temp.ids('metadata'), ARRAY[6]::bigint[], '(the word metadata is found where it is)');

-- filters
SELECT is(pg_temp.ids('database', roles => '{assistant}'), ARRAY[16, 10]::bigint[], 'roles keeps those roles only');
SELECT is(pg_temp.ids('database', roles => '{user,tool}'), ARRAY[3, 13, 1]::bigint[], '... several of them');
SELECT is(pg_temp.ids('database', since => '2025-01-01 10:00+00'), ARRAY[16, 13, 10]::bigint[],
          'since: from that time on, inclusive');
SELECT is(pg_temp.ids('database', until => '2025-01-01 03:00+00'), ARRAY[1]::bigint[], 'until: before that time');
SELECT is(pg_temp.ids('database', since => '2025-01-01 03:00+00', until => '2025-01-01 13:00+00'),
          ARRAY[3, 10]::bigint[], 'since and until together, until excluded');
SELECT is(pg_temp.ids('database', n => 2), ARRAY[3, 16]::bigint[], 'max_results bounds the results, best first');
SELECT is((SELECT count(*) FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', 'database', max_results => 100)),
          5::bigint, 'max_results 100 is allowed');

-- snippets and the rest of the row
SELECT is((SELECT row(role, created_at, snippet)::text FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', 'E4031')),
          row('assistant', '2025-01-01 02:00:00+00'::timestamptz,
              'The crash is in src/window/walk.c at line 120, error E4031 from the packer.')::text,
          'a short message''s snippet is its text, with its role and time');
SELECT ok((SELECT snippet LIKE '...%haystack-7781%...' AND length(snippet) BETWEEN 150 AND 210
           FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', 'haystack-7781')),
          'a long message''s snippet is the part around the match, cut at both ends');
SELECT ok((SELECT snippet LIKE '%get_order%ORD-77001%' FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', 'get_order')),
          'a tool call''s snippet shows its name and arguments');
SELECT ok((SELECT bool_and(rank > 0) FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', 'database')),
          'ranks are positive');

-- errors
SELECT throws_ok($$SELECT * FROM ctxwin.search(NULL, 'x')$$, '22004', 'session id must not be null', 'a NULL session');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', NULL)$$, '22004',
                 'search query must not be null', 'a NULL query');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-0000000000ff', 'x')$$, 'P0002',
                 'session a0000000-0000-4000-8000-0000000000ff does not exist', 'an unknown session');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', ' ?! ')$$, '22023',
                 'search query has no words to search for', 'a query without words');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', (SELECT string_agg('w' || g, ' ') FROM generate_series(1, 65) g))$$,
                 '22023', 'search query has more than 64 words', 'a query of 65 words');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', 'x', max_results => 0)$$, '22023',
                 'max_results must be between 1 and 100', 'max_results 0');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', 'x', max_results => 101)$$, '22023',
                 'max_results must be between 1 and 100', 'max_results 101');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', 'x', roles => '{user,bot}')$$, '22023',
                 'roles has a value that is not a message role: ''bot''', 'an unknown role');

-- the index serves the search (also under row-level security: its operator is leakproof)
SELECT ok((SELECT proleakproof FROM pg_proc WHERE oid = 'ctxwin._search_match(tsvector, tsquery)'::regprocedure),
          'the index''s match operator is leakproof');

-- row-level security
-- (the plan of the search's probe of the whole session)
CREATE FUNCTION pg_temp.plan_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    l text;
    p text := '';
BEGIN
    FOR l IN EXECUTE format('EXPLAIN SELECT m.id FROM ctxwin.messages m WHERE m.session_id = %L '
                            'AND m.searchable AND ctxwin._search_vector(m.session_id, m.id, m.content, m.tool_calls) '
                            'OPERATOR(ctxwin.@@) ctxwin._search_query(%L, 3, NULL, %L, false)',
                            'a0000000-0000-4000-8000-000000000004', 'a0000000-0000-4000-8000-000000000004', q) LOOP
        p := p || l || E'\n';
    END LOOP;
    RETURN p;
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.plan_of(text) TO PUBLIC;
CREATE ROLE ctxwin_recall_a;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_recall_a;
GRANT SELECT ON ctxwin.sessions, ctxwin.messages, ctxwin.models, ctxwin.profiles TO ctxwin_recall_a;
ALTER TABLE ctxwin.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.messages ENABLE ROW LEVEL SECURITY;
-- A sees the first session only, and not its tool results
CREATE POLICY a_sessions ON ctxwin.sessions TO ctxwin_recall_a
    USING (id IN ('a0000000-0000-4000-8000-000000000001', 'a0000000-0000-4000-8000-000000000004'));
CREATE POLICY a_messages ON ctxwin.messages TO ctxwin_recall_a
    USING (session_id IN ('a0000000-0000-4000-8000-000000000001', 'a0000000-0000-4000-8000-000000000004')
           AND role <> 'tool');
-- a session of 3000 messages, where the index is what a probe for a rare
-- word should use
INSERT INTO ctxwin.sessions (id, profile) VALUES ('a0000000-0000-4000-8000-000000000004', 'r');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT 'a0000000-0000-4000-8000-000000000004', 'user', 'Filler ' || g || CASE WHEN g = 1500 THEN ' needle' ELSE '' END
FROM generate_series(1, 3000) g;
ANALYZE ctxwin.messages;
SET ROLE ctxwin_recall_a;
SELECT is(pg_temp.ids('ORD-77001'), ARRAY[4]::bigint[], 'row-level security: a message the policy hides is not found');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-000000000002', 'database')$$, 'P0002',
                 'session a0000000-0000-4000-8000-000000000002 does not exist',
                 '... and a session the policy hides does not exist');
-- (messages_search, or a partition's index of it: messages_pN__search_vector_idx)
SELECT ok(pg_temp.plan_of('needle') ~ 'Bitmap Index Scan on messages(_p[0-9]+_)?_search',
          '... and a probe of the search still uses the index');
SELECT is(pg_temp.ids('needle', s => 'a0000000-0000-4000-8000-000000000004'), ARRAY[1500]::bigint[], '... and finds');
RESET ROLE;

-- the conversation_search tool in build_request, counted as any tool
CREATE TEMP TABLE tool AS SELECT ctxwin.recall_tool() AS t,
                                 ctxwin.count_tool_tokens(jsonb_build_array(ctxwin.recall_tool()), 'gpt-4o') AS cost;
SELECT is((SELECT t -> 'function' ->> 'name' FROM tool), 'conversation_search', 'recall_tool() is conversation_search');
SELECT is((SELECT t -> 'function' -> 'parameters' -> 'required' FROM tool), '["query"]'::jsonb, '... and needs a query');
SELECT is((SELECT jsonb_object_keys(t -> 'function' -> 'parameters' -> 'properties') FROM tool ORDER BY 1 LIMIT 1), 'max_results',
          '... and takes max_results');
SELECT is(ctxwin.build_request('a0000000-0000-4000-8000-000000000001', recall => true) -> 'tools',
          (SELECT jsonb_build_array(t) FROM tool), 'build_request with recall sends the tool');
SELECT is(ctxwin.build_request('a0000000-0000-4000-8000-000000000001') -> 'tools', NULL, '... and without it, none');
-- a session whose window is cut by its budget: 40 messages of about 30 tokens
INSERT INTO ctxwin.sessions (id, profile) VALUES ('a0000000-0000-4000-8000-000000000003', 'r');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT 'a0000000-0000-4000-8000-000000000003', CASE WHEN g % 2 = 0 THEN 'user' ELSE 'assistant' END,
       'Message ' || g || ': ' || repeat('some words ', 10 + g % 5)
FROM generate_series(1, 40) g;
SELECT is((SELECT count(*) FROM generate_series(300, 1300, 7) b
           WHERE ctxwin.build_request('a0000000-0000-4000-8000-000000000003', b, recall => true) -> 'messages'
                 IS DISTINCT FROM ctxwin.build_context('a0000000-0000-4000-8000-000000000003', b - (SELECT cost FROM tool))),
          0::bigint, 'the window with recall is the window of the budget less the tool''s tokens, at every budget');
SELECT is((SELECT count(*) FROM generate_series(300, 1300, 7) b
           WHERE ctxwin.build_request('a0000000-0000-4000-8000-000000000003', b, recall => true) -> 'messages'
                 IS DISTINCT FROM ctxwin.build_request('a0000000-0000-4000-8000-000000000003', b) -> 'messages'),
          (SELECT count(*) FROM generate_series(300, 1300, 7) b
           WHERE ctxwin.build_context('a0000000-0000-4000-8000-000000000003', b)
                 IS DISTINCT FROM ctxwin.build_context('a0000000-0000-4000-8000-000000000003', b - (SELECT cost FROM tool))),
          '... so it shrinks by exactly that cost, where that cost changes it');
SELECT cmp_ok((SELECT cost FROM tool), '>', 100, '(the tool costs over 100 tokens)');
SELECT is((SELECT count(*) FROM generate_series(300, 1300, 7) b
           WHERE ctxwin.build_request('a0000000-0000-4000-8000-000000000003', b,
                                      tools => '[{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]',
                                      recall => true) -> 'messages'
                 IS DISTINCT FROM ctxwin.build_context('a0000000-0000-4000-8000-000000000003', b,
                                      tools => '[{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]'::jsonb
                                               || jsonb_build_array(ctxwin.recall_tool()))),
          0::bigint, 'with tools of the application, the tool is counted with them, after them');
SELECT is(ctxwin.build_request('a0000000-0000-4000-8000-000000000003', 2000, 'anthropic', recall => true) -> 'tools' -> 0 ->> 'name',
          'conversation_search', 'the Anthropic request carries it in Anthropic''s shape');
SELECT ok(ctxwin.build_request('a0000000-0000-4000-8000-000000000003', 2000, 'anthropic', recall => true) -> 'tools' -> 0 ? 'input_schema',
          '... with its input_schema');
SELECT hasnt_function('ctxwin', 'build_request', ARRAY['uuid', 'integer', 'text', 'jsonb', 'boolean'],
                      'the build_request without recall is gone (no ambiguous calls)');
SELECT throws_ok($$SELECT ctxwin.build_request('a0000000-0000-4000-8000-000000000003', 2000, tools => jsonb_build_array(ctxwin.recall_tool()), recall => true)$$,
                 '22023', 'tools has a tool named "conversation_search" already, and recall adds one',
                 'recall with a tool of that name already is an error');

-- answer_tool_call: an OpenAI tool call, answered, appended, and the window still valid
CREATE TEMP TABLE call AS SELECT
    '{"id": "call_s1", "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": \"ORD-48213\", \"max_results\": 3}"}}'::jsonb AS c;
CREATE TEMP TABLE answer AS SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', c) AS a FROM call;
SELECT is((SELECT a - 'content' FROM answer),
          '{"role": "tool", "tool_call_id": "call_s1", "name": "conversation_search"}'::jsonb,
          'the answer is a tool message for the call');
SELECT is((SELECT a ->> 'content' FROM answer),
          E'1 message matches ''ORD-48213'', best first:\n[#1 user 2025-01-01T01:00:00Z] My order ORD-48213 has not arrived. Can you check the shipping database?',
          '... its content the results, one line each with the message''s id, role and time (UTC)');
SELECT is(ctxwin.append_messages('a0000000-0000-4000-8000-000000000001',
              jsonb_build_array(jsonb_build_object('role', 'assistant', 'content', NULL,
                                                   'tool_calls', jsonb_build_array((SELECT c FROM call))),
                                (SELECT a FROM answer))),
          ARRAY[17, 18]::bigint[], 'the call and its answer append as they are');
SELECT is(ctxwin.build_context('a0000000-0000-4000-8000-000000000001') -> -1,
          (SELECT a FROM answer), 'build_context ends with the answer');
SELECT is(ctxwin.build_context('a0000000-0000-4000-8000-000000000001') -> -2 -> 'tool_calls' -> 0 ->> 'id',
          'call_s1', '... after the call it answers');
-- an Anthropic tool_use block
SELECT is(ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001',
              '{"type": "tool_use", "id": "toolu_01", "name": "conversation_search", "input": {"query": "walk.c", "roles": ["assistant"], "since": "2025-01-01T00:00:00Z", "until": "2025-01-02T00:00:00Z"}}') - 'content',
          '{"role": "tool", "tool_call_id": "toolu_01", "name": "conversation_search"}'::jsonb,
          'an Anthropic tool_use block is answered too');
SELECT ok(ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001',
              '{"type": "tool_use", "id": "toolu_01", "name": "conversation_search", "input": {"query": "walk.c", "roles": ["assistant"]}}') ->> 'content'
          LIKE E'1 message matches ''walk.c'', best first:\n[#2 assistant 2025-01-01T02:00:00Z] The crash is in src/window/walk.c%',
          '... with its arguments');
SELECT is(ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001',
              '{"type": "tool_use", "id": "toolu_02", "name": "conversation_search", "input": {"query": "walk.c", "roles": ["user"]}}') ->> 'content',
          'No earlier message matches ''walk.c''.', 'no result says so');
SELECT ok(ctxwin.append_messages('a0000000-0000-4000-8000-000000000001',
              jsonb_build_array(jsonb_build_object('role', 'assistant', 'content', NULL, 'tool_calls',
                                  '[{"id": "toolu_01", "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": \"walk.c\"}"}}]'::jsonb),
                                ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001',
                                  '{"type": "tool_use", "id": "toolu_01", "name": "conversation_search", "input": {"query": "walk.c"}}'))) IS NOT NULL,
          '(an Anthropic round trip appended)');
SELECT is((ctxwin.build_context('a0000000-0000-4000-8000-000000000001', format => 'anthropic') -> 'messages' -> -1 -> 'content' -> 0)
              - 'content' - 'cache_control',
          '{"type": "tool_result", "tool_use_id": "toolu_01"}'::jsonb,
          'the Anthropic window ends with the tool_result of the tool_use');
-- the errors of a call
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"id": "c", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}')$$,
                 '22023', 'ctxwin answers calls of conversation_search, not of get_order', 'a call of another tool');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"id": "c", "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": "}}')$$,
                 '22023', 'the arguments of tool call c are not valid JSON', 'arguments that are not JSON');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"id": "c", "type": "function", "function": {"name": "conversation_search", "arguments": "{}"}}')$$,
                 '22023', 'the argument query of conversation_search must be a string', 'no query');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"id": "c", "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": \"x\", \"limit\": 3}"}}')$$,
                 '22023', 'conversation_search has no argument limit', 'an argument it does not have');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"id": "c", "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": \"x\", \"max_results\": 0}"}}')$$,
                 '22023', 'the argument max_results of conversation_search must be an integer from 1 to 50', 'max_results 0');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"id": "c", "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": \"x\", \"since\": \"last week\"}"}}')$$,
                 '22023', 'the argument since of conversation_search is not a time: last week', 'a time that is not one');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"id": "c", "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": \"x\", \"roles\": \"user\"}"}}')$$,
                 '22023', 'the argument roles of conversation_search must be an array of strings', 'roles that are not an array');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": \"x\"}"}}')$$,
                 '22023', 'tool_call has no id', 'a call without an id');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '["c"]')$$,
                 '22023', 'tool_call must be a JSON object', 'a call that is not an object');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"id": "c"}')$$,
                 '22023', 'tool_call is neither an OpenAI tool call nor an Anthropic tool_use block', 'a call of neither shape');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', '{"type": "tool_use", "id": "t", "name": "conversation_search", "input": "x"}')$$,
                 '22023', 'the input of tool_use block t must be a JSON object', 'a tool_use block whose input is not an object');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call(NULL, '{}')$$, '22004', 'session id must not be null', 'a NULL session');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-000000000001', NULL)$$, '22004',
                 'tool_call must not be null', 'a NULL call');
SELECT throws_ok($$SELECT ctxwin.answer_tool_call('a0000000-0000-4000-8000-0000000000ff', '{"type": "tool_use", "id": "t", "name": "conversation_search", "input": {"query": "x"}}')$$,
                 'P0002', 'session a0000000-0000-4000-8000-0000000000ff does not exist', 'an unknown session');

-- summaries in fixed sections, with lookup hints that name message ids
SELECT is((SELECT array_agg(h ORDER BY o) FROM regexp_matches((SELECT content FROM s1), '^([A-Z][a-z ]+):', 'gn')
               WITH ORDINALITY AS x(h, o)),
          ARRAY[['Goal and state'], ['Decisions'], ['Identifiers'], ['Open items'], ['Lookup hints']],
          'the extractive summary has the sections, in order');
SELECT ok((SELECT content FROM s1) ~ E'\nLookup hints:\n- Messages #1-#12: tools get_order; search ',
          '... its lookup hint names the messages it covers, the tools they called and terms to search for');
SELECT ok((SELECT content FROM s1) ~ 'Identifiers: [^\n]*ORD-48213', '... and its identifiers are verbatim');
SELECT is((SELECT count(*) FROM unnest(ARRAY['"Goal and state:"', '"Decisions:"', '"Identifiers:"', '"Open items:"',
                                              '"Lookup hints:"', 'message ids (#12)', 'verbatim']) w
           WHERE strpos(ctxwin.default_summary_prompt(), w) = 0), 0::bigint,
          'the LLM''s prompt asks for the same sections, message ids in the lookup hints, identifiers verbatim');
SELECT ok(ctxwin.transcript('[{"role": "user", "content": "hi", "id": 12}, {"role": "assistant", "content": "hello"}]')
          = E'[user #12] hi\n[assistant] hello', 'the transcript marks a message with its id where it has one');
SELECT ok(ctxwin.extractive_summary(E'Requests:\n- Move the cron job to Friday.\nFacts: OLD-1; /srv/x.py\nTools used: deploy (2)',
                                    '[{"role": "user", "content": "ok"}]', 300)
          ~ E'^Goal and state:\n- Move the cron job to Friday\\.\nIdentifiers: OLD-1; /srv/x\\.py\nLookup hints:\n- Tools used: deploy \\(2\\)$',
          'a summary in the sections of 0.1.0 is read into the new ones');
SELECT is(ctxwin.extractive_summary(E'Earlier: The user likes tea.\nAnd short answers.',
                                    '[{"role": "user", "content": "Book the table for 8pm on Friday.", "id": 40}]', 300),
          E'Goal and state:\n- Book the table for 8pm on Friday.\nLookup hints:\n- Messages #40\nEarlier: The user likes tea.\nAnd short answers.',
          'a previous summary of another kind is kept whole as Earlier, after the sections');

-- search off for a profile (profiles.search): its messages are stored
-- unsearchable (whatever an insert says), have no entries in the index, and
-- a search of its session is a clear error; turned on, it applies to the
-- messages stored after it
INSERT INTO ctxwin.profiles (name, search) VALUES ('quiet', false);
INSERT INTO ctxwin.sessions (id, profile) VALUES ('a0000000-0000-4000-8000-000000000009', 'quiet');
INSERT INTO ctxwin.messages (session_id, role, content, searchable)
VALUES ('a0000000-0000-4000-8000-000000000009', 'user', 'the quokka ticket ORD-99120', true),
       ('a0000000-0000-4000-8000-000000000009', 'assistant', 'quokka noted', DEFAULT);
SELECT is((SELECT array_agg(searchable ORDER BY id) FROM ctxwin.messages
           WHERE session_id = 'a0000000-0000-4000-8000-000000000009'),
          ARRAY[false, false], 'search off: the messages are stored unsearchable, even one that said otherwise');
SELECT throws_ok($$SELECT * FROM ctxwin.search('a0000000-0000-4000-8000-000000000009', 'quokka')$$, '55000',
                 'search is off for the profile ''quiet'' of session a0000000-0000-4000-8000-000000000009',
                 '... and a search of its session is an error that names the profile');
SELECT throws_ok($$SELECT ctxwin.build_request('a0000000-0000-4000-8000-000000000009', recall => true)$$, '55000',
                 'search is off for the profile "quiet" of session a0000000-0000-4000-8000-000000000009, and recall needs it',
                 '... build_request refuses recall for it up front, rather than offer a tool whose every call fails');
SELECT throws_ok($$SELECT ctxwin.append_and_build('a0000000-0000-4000-8000-000000000009',
                                                  '[{"role": "user", "content": "anything about quokkas?"}]',
                                                  request => true, recall => true)$$, '55000', NULL,
                 '... and so does append_and_build with request and recall');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE session_id = 'a0000000-0000-4000-8000-000000000009'),
          2::bigint, '... storing nothing');
SELECT ok(ctxwin.build_request('a0000000-0000-4000-8000-000000000009') ? 'messages',
          '... while a request without recall is built');
SELECT is((SELECT count(*) FROM ctxwin.messages m
           WHERE m.searchable AND ctxwin._search_vector(m.session_id, m.id, m.content, m.tool_calls)
                 OPERATOR(ctxwin.@@) ctxwin._search_query('a0000000-0000-4000-8000-000000000009', 3, NULL, 'quokka', false)),
          0::bigint, '... and the search index has no entries for them');
UPDATE ctxwin.profiles SET search = true WHERE name = 'quiet';
INSERT INTO ctxwin.messages (session_id, role, content)
VALUES ('a0000000-0000-4000-8000-000000000009', 'user', 'another quokka');
SELECT is((SELECT array_agg(x.id ORDER BY x.id) FROM ctxwin.search('a0000000-0000-4000-8000-000000000009', 'quokka') x),
          ARRAY[3]::bigint[], 'turned on: the messages stored after it are found, those before are not');

-- without the index (an application that never searches may drop it), the
-- same answers, by a scan of the session
CREATE TEMP TABLE with_index AS
SELECT q, (SELECT array_agg(row(x.id, x.snippet, x.rank)::text ORDER BY x.rank DESC, x.id DESC)
           FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', q) x) AS r
FROM unnest(ARRAY['database', 'ORD-48213', 'walk.c', '4031', 'walk.c arrived', 'get_order', 'metadata']) q;
DROP INDEX ctxwin.messages_search;
SELECT is((SELECT count(*) FROM with_index w
           WHERE w.r IS DISTINCT FROM (SELECT array_agg(row(x.id, x.snippet, x.rank)::text ORDER BY x.rank DESC, x.id DESC)
                                       FROM ctxwin.search('a0000000-0000-4000-8000-000000000001', w.q) x)),
          0::bigint, 'without the search index, search gives the same answers');

SELECT * FROM finish();
ROLLBACK;

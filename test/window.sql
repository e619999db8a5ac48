-- Sessions, messages and build_context: the invariants of the window, each
-- with a case a naive implementation gets wrong.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

-- a profile with small numbers so triggers and budgets are easy to reach,
-- and the sliding window (the newest messages that fit; test/stable.sql
-- checks the stable one)
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, response_reserve, window_policy)
VALUES ('t', 'gpt-4o', 10, 500, 0.8, 2, 100, 'sliding');
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
VALUES ('10000000-0000-0000-0000-000000000001', 't', 'You are a careful assistant.');

-- 30 messages of varied length, with two tool groups
CREATE FUNCTION pg_temp.add(r text, c text, calls jsonb DEFAULT NULL, call_id text DEFAULT NULL)
RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id)
    VALUES ('10000000-0000-0000-0000-000000000001', r, c, calls, call_id) RETURNING id $$;

SELECT pg_temp.add(CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
                   'Message ' || g || ': ' || repeat('word' || g || ' ', (g * 7) % 23 + 1))
FROM generate_series(1, 12) g;
SELECT pg_temp.add('assistant', NULL, '[{"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"/etc/hosts\"}"}},
                                      {"id": "call_b", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]');
SELECT pg_temp.add('tool', repeat('127.0.0.1 localhost ', 40), NULL, 'call_b');
SELECT pg_temp.add('tool', 'hosts file content', NULL, 'call_a');
SELECT pg_temp.add(CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
                   'Later ' || g || ': ' || repeat('token' || g || ' ', (g * 5) % 17 + 1))
FROM generate_series(16, 27) g;
SELECT pg_temp.add('assistant', 'Checking.', '[{"id": "call_c", "type": "function", "function": {"name": "date", "arguments": "{}"}}]');
SELECT pg_temp.add('tool', repeat('2026-11-21 ', 30), NULL, 'call_c');
SELECT pg_temp.add('user', 'Thanks, that is all.');

-- ids and counters
SELECT is((SELECT array_agg(id ORDER BY id) FROM ctxwin.messages),
          ARRAY(SELECT generate_series(1, 30)::bigint), 'message ids are 1 .. 30');
SELECT is((SELECT message_count FROM ctxwin.sessions), 30::bigint, 'message_count counts them');
SELECT is((SELECT token_count FROM ctxwin.sessions), (SELECT sum(token_count) FROM ctxwin.messages),
          'the session''s token_count is the sum of its messages''');

-- token_count is the contract's definition, recomputed independently
SELECT is((SELECT count(*) FROM ctxwin.messages m
           WHERE m.token_count <> 4 + ctxwin.count_tokens(m.role, 'o200k_base')
                 + coalesce(ctxwin.count_tokens(m.content, 'o200k_base'), 0)
                 + coalesce(ctxwin.count_tokens(m.tool_call_id, 'o200k_base'), 0)
                 + coalesce(ctxwin.count_tokens(m.tool_calls::text, 'o200k_base'), 0))::int, 0,
          'token_count = 4 + tokens of role, content, tool_call_id and the tool_calls JSON text');
SELECT is((SELECT count(*) FROM ctxwin.messages m
           WHERE m.token_count <> ctxwin.count_message_tokens(
                     ctxwin._message_json(m.role, m.content, m.name, m.tool_call_id, m.tool_calls), 'o200k_base'))::int, 0,
          'count_message_tokens of the message as JSON agrees with token_count');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE token_encoding <> 'o200k_base')::int, 0,
          'messages are counted with the encoding of the profile''s model (gpt-4o: o200k_base)');

-- Invariant 1: never over budget, for every budget from tiny to ample
CREATE TEMP TABLE budgets AS SELECT b FROM generate_series(40, 1500, 7) b;
SELECT is((SELECT count(*) FROM budgets
           WHERE ctxwin.messages_tokens(ctxwin.build_context('10000000-0000-0000-0000-000000000001', b), 'o200k_base') + 3 > b)::int, 0,
          'invariant 1: build_context never exceeds the budget (209 budgets)');
SELECT is((SELECT count(*) FROM budgets
           WHERE jsonb_typeof(ctxwin.build_context('10000000-0000-0000-0000-000000000001', b, 'anthropic') -> 'messages') IS DISTINCT FROM 'array')::int, 0,
          'the anthropic format is produced for every budget');
-- and it is tight: the next older unit would not have fitted
SELECT is((SELECT count(*) FROM budgets, LATERAL (
               SELECT (w ->> 'tokens')::int AS used, (w ->> 'first_id')::bigint AS first_id
               FROM ctxwin._window('10000000-0000-0000-0000-000000000001', b) w) x
           WHERE x.first_id > 1 AND NOT x.used + (
               SELECT sum(token_count) FROM ctxwin.messages m
               WHERE m.id >= (SELECT max(id) FROM ctxwin.messages p WHERE p.id < x.first_id AND p.role <> 'tool')
                 AND m.id < x.first_id) > b)::int, 0,
          'the window is as full as the budget allows: the next older unit does not fit');

-- Invariant 4: tool calls stay whole; never an orphan tool result first
SELECT is((SELECT count(*) FROM budgets, LATERAL jsonb_array_elements(
               ctxwin.build_context('10000000-0000-0000-0000-000000000001', b)) WITH ORDINALITY e(m, n)
           WHERE e.m ->> 'role' = 'tool' AND NOT EXISTS (
               SELECT 1 FROM jsonb_array_elements(ctxwin.build_context('10000000-0000-0000-0000-000000000001', b))
                             WITH ORDINALITY a(m, n),
                             jsonb_array_elements(a.m -> 'tool_calls') c
               WHERE a.n < e.n AND c ->> 'id' = e.m ->> 'tool_call_id'))::int, 0,
          'invariant 4: every tool result in a window follows the call it answers');
SELECT is((SELECT count(*) FROM budgets, LATERAL jsonb_array_elements(
               ctxwin.build_context('10000000-0000-0000-0000-000000000001', b)) c(m),
               LATERAL jsonb_array_elements(c.m -> 'tool_calls') call
           WHERE NOT EXISTS (
               SELECT 1 FROM jsonb_array_elements(ctxwin.build_context('10000000-0000-0000-0000-000000000001', b)) r(m)
               WHERE r.m ->> 'tool_call_id' = call ->> 'id'))::int, 0,
          'invariant 4: every tool call in a window has its result with it');
SELECT is((SELECT count(*) FROM budgets
           WHERE ctxwin.build_context('10000000-0000-0000-0000-000000000001', b) -> 1 ->> 'role' = 'tool')::int, 0,
          'a window never starts with a tool result');

-- Invariant 1 for the oversized: the newest group is over a small budget,
-- so its largest content is cut in the middle with a marker, and it fits
SELECT pg_temp.add('assistant', 'Reading the log.', '[{"id": "call_d", "type": "function", "function": {"name": "cat", "arguments": "{\"file\": \"app.log\"}"}}]');
SELECT pg_temp.add('tool', string_agg('line ' || g || ': GET /api/items/' || g || ' 200 in ' || g % 97 || ' ms', E'\n'), NULL, 'call_d')
FROM generate_series(1, 3000) g;
SELECT cmp_ok((SELECT token_count FROM ctxwin.messages WHERE id = 32), '>', 30000, 'the tool result is over 30,000 tokens');
SELECT ok(ctxwin.build_context('10000000-0000-0000-0000-000000000001', 300)::text LIKE '%tokens omitted ...]%',
          'an oversized newest message is cut with a visible marker');
SELECT cmp_ok(ctxwin.messages_tokens(ctxwin.build_context('10000000-0000-0000-0000-000000000001', 300), 'o200k_base') + 3,
              '<=', 300, 'and the cut window fits the budget');
SELECT is(jsonb_array_length(ctxwin.build_context('10000000-0000-0000-0000-000000000001', 300)), 3,
          'the cut window holds the system prompt and the whole newest group');
SELECT ok(ctxwin.build_context('10000000-0000-0000-0000-000000000001', 300) -> 2 ->> 'content' LIKE 'line 1: GET%line 3000: GET%',
          'the cut keeps the beginning and the end of the content');
SELECT is((SELECT count(*) FROM generate_series(76, 400, 3) b
           WHERE ctxwin.messages_tokens(ctxwin.build_context('10000000-0000-0000-0000-000000000001', b), 'o200k_base') + 3 > b)::int, 0,
          'cut windows fit every budget from 76 (the smallest) to 400');
SELECT is((SELECT count(*) FROM generate_series(76, 400) b,
                 jsonb_array_elements(ctxwin.build_context('10000000-0000-0000-0000-000000000001', b)) m
           WHERE m ->> 'role' <> 'system'
             AND m ->> 'content' NOT IN ('Reading the log.', '')
             AND m ->> 'content' !~ E'\\n\\[\\.\\.\\. [0-9]+ tokens omitted \\.\\.\\.\\]\\n')::int, 0,
          'every cut content carries the marker, down to the smallest budget');
SELECT throws_ok($$SELECT ctxwin.build_context('10000000-0000-0000-0000-000000000001', 75)$$, '22023',
                 'token budget 75 is too small for the newest message',
                 'below the tool group with its contents cut to their markers, the budget is too small');
SELECT throws_ok($$SELECT ctxwin.build_context('10000000-0000-0000-0000-000000000001', 10)$$, '22023',
                 'token budget 10 is too small for the system prompt and summary (14 tokens)',
                 'a budget below the system prompt is an error, not an overflow');

-- Invariant 7: when the history exceeds the budget, the oldest are dropped
-- and context_status says how many
SELECT is((SELECT dropped_messages FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')), 0::bigint,
          'with the default budget (127,900 tokens) nothing is dropped');
UPDATE ctxwin.profiles SET response_reserve = 127000 WHERE name = 't';
SELECT is((SELECT budget FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')), 1000,
          'a profile change changes the budget at the next call');
SELECT is((SELECT dropped_messages + window_messages FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')),
          32::bigint, 'dropped + window = unsummarized messages');
SELECT cmp_ok((SELECT dropped_messages FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')), '>', 0::bigint,
              'the oldest unsummarized messages are dropped and counted');
SELECT ok((SELECT note FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')) LIKE '%do not fit the budget%',
          'context_status explains the drop');
UPDATE ctxwin.profiles SET response_reserve = 100 WHERE name = 't';

-- Triggers: N messages (10) fired long ago; the session is queued
SELECT isnt((SELECT compaction_queued_at FROM ctxwin.sessions), NULL, 'a session over a trigger is queued');
SELECT is((SELECT triggers_firing FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')),
          ARRAY['messages', 'tokens'], 'context_status names the triggers that fire');

-- Summaries: a summary written into the session is used and moves the window
UPDATE ctxwin.sessions SET conversation_summary = 'The user and the assistant discussed words and tokens; the hosts file was read.',
                           summary_through_id = 15;
SELECT is((SELECT unsummarized_messages FROM ctxwin.sessions), 17::bigint, 'unsummarized counters follow the summary point');
SELECT is((SELECT unsummarized_tokens FROM ctxwin.sessions),
          (SELECT sum(token_count) FROM ctxwin.messages WHERE id > 15), 'unsummarized tokens too');
SELECT is(ctxwin.build_context('10000000-0000-0000-0000-000000000001') -> 0 ->> 'content',
          E'You are a careful assistant.\n\nSummary of earlier conversation:\nThe user and the assistant discussed words and tokens; the hosts file was read.',
          'placement system: the summary follows the system prompt');
SELECT is(jsonb_array_length(ctxwin.build_context('10000000-0000-0000-0000-000000000001')), 18,
          'the window is the system message and the 17 unsummarized messages');
SELECT is(ctxwin.build_context('10000000-0000-0000-0000-000000000001') -> 1 ->> 'content',
          (SELECT content FROM ctxwin.messages WHERE id = 16),
          'invariant 2: the first message after the summary point comes right after the system message');
UPDATE ctxwin.profiles SET summary_placement = 'message' WHERE name = 't';
SELECT is(ctxwin.build_context('10000000-0000-0000-0000-000000000001') -> 1,
          '{"role": "system", "content": "Summary of earlier conversation:\nThe user and the assistant discussed words and tokens; the hosts file was read."}'::jsonb,
          'placement message: the summary is a system message of its own');
UPDATE ctxwin.profiles SET summary_placement = 'system' WHERE name = 't';
SELECT throws_ok($$UPDATE ctxwin.sessions SET summary_through_id = 10$$, '23514',
                 'summary_through_id cannot move back from 15 to 10', 'invariant 5: the summary point never moves back');
SELECT throws_ok($$UPDATE ctxwin.sessions SET summary_through_id = 28$$, '23514',
                 'summary_through_id 28 would end inside a tool call group', 'a summary never ends inside a tool group');
SELECT throws_ok($$UPDATE ctxwin.sessions SET summary_through_id = 31$$, '23514',
                 'summary_through_id 31 would end inside a tool call group', 'nor after a call whose results may come');

-- Invariant 6: after a compaction below every trigger, the session leaves
-- the queue and the next insert does not queue it again
UPDATE ctxwin.sessions SET conversation_summary = 'Everything up to the log was discussed.', summary_through_id = 32;
SELECT is((SELECT compaction_queued_at FROM ctxwin.sessions), NULL, 'invariant 6: compacted below every trigger, the session leaves the queue');
SELECT pg_temp.add('assistant', 'The log shows healthy requests.');
SELECT is((SELECT compaction_queued_at FROM ctxwin.sessions), NULL, 'invariant 6: and the next insert does not queue it again');

-- Invariant 3: nothing deleted or rewritten
SELECT throws_ok($$DELETE FROM ctxwin.messages WHERE id = 3$$, '23000', 'a single message cannot be deleted',
                 'invariant 3: deleting one message is refused');
SELECT throws_ok($$UPDATE ctxwin.messages SET content = 'edited' WHERE id = 3$$, '23000', 'messages cannot be changed',
                 'invariant 3: rewriting a message is refused');
SELECT lives_ok($$UPDATE ctxwin.messages SET metadata = '{"flag": true}' WHERE id = 3$$, 'metadata can be updated');

-- A model change changes the encoding: the window is recounted in it
UPDATE ctxwin.profiles SET model = 'gpt-4' WHERE name = 't';
SELECT is((SELECT encoding FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')), 'cl100k_base',
          'a model change changes the encoding at the next call');
SELECT is((SELECT count(*) FROM generate_series(80, 400, 11) b
           WHERE ctxwin.messages_tokens(ctxwin.build_context('10000000-0000-0000-0000-000000000001', b), 'cl100k_base') + 3 > b)::int, 0,
          'invariant 1 holds in the new encoding (messages stored with the old one are recounted)');
SELECT is((SELECT budget FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')), 8092,
          'and the budget follows the new model''s window (8,192 - 100)');
UPDATE ctxwin.profiles SET model = 'gpt-4o' WHERE name = 't';

-- Anthropic format
SELECT is(ctxwin.build_context('10000000-0000-0000-0000-000000000001', format => 'anthropic') -> 'system' -> 0 ->> 'text',
          E'You are a careful assistant.\n\nSummary of earlier conversation:\nEverything up to the log was discussed.',
          'anthropic: the system prompt and summary are the top-level system (a text block: test/request.sql)');
SELECT is((SELECT count(*) FROM budgets, LATERAL jsonb_array_elements(
               ctxwin.build_context('10000000-0000-0000-0000-000000000001', b, 'anthropic') -> 'messages') WITH ORDINALITY t(m, n)
           WHERE t.m ->> 'role' = (ctxwin.build_context('10000000-0000-0000-0000-000000000001', b, 'anthropic') -> 'messages' -> (t.n::int) ->> 'role'))::int, 0,
          'anthropic: no two consecutive turns have the same role');

-- Errors
SELECT throws_ok($$SELECT ctxwin.build_context('10000000-0000-0000-0000-0000000000ff')$$, 'P0002',
                 'session 10000000-0000-0000-0000-0000000000ff does not exist', 'unknown session');
SELECT throws_ok($$SELECT ctxwin.build_context(NULL)$$, '22004', 'session id must not be null', 'NULL session');
-- one message, two SQLSTATEs: a function's argument finds no data; a
-- message inserted for no session violates the foreign key
SELECT throws_ok($$SELECT * FROM ctxwin.context_status('10000000-0000-0000-0000-0000000000ff')$$, 'P0002',
                 'session 10000000-0000-0000-0000-0000000000ff does not exist', 'context_status: unknown session');
SELECT throws_ok($$SELECT * FROM ctxwin.messages_after('10000000-0000-0000-0000-0000000000ff')$$, 'P0002',
                 'session 10000000-0000-0000-0000-0000000000ff does not exist', 'messages_after: unknown session');
SELECT throws_ok($$SELECT * FROM ctxwin.messages_after(NULL)$$, '22004', 'session id must not be null',
                 'messages_after: NULL session');
SELECT throws_ok($$SELECT * FROM ctxwin.context_status(NULL)$$, '22004', 'session id must not be null',
                 'context_status: NULL session');
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('10000000-0000-0000-0000-0000000000ff', 'user', 'x')$$,
                 '23503', 'session 10000000-0000-0000-0000-0000000000ff does not exist', 'insert into an unknown session');
SELECT is(ctxwin._session_due('10000000-0000-0000-0000-0000000000ff'), false, '_session_due of no session: false');
SELECT is(ctxwin._session_due(NULL), false, '_session_due of NULL: false');
SELECT throws_ok($$SELECT ctxwin.build_context('10000000-0000-0000-0000-000000000001', -5)$$, '22023',
                 'token budget must be greater than zero', 'negative budget');
SELECT throws_ok($$SELECT ctxwin.build_context('10000000-0000-0000-0000-000000000001', 100, 'xml')$$, '22023',
                 'unrecognized format "xml"', 'unknown format');
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('10000000-0000-0000-0000-000000000001', 'robot', 'x')$$,
                 '23514', 'invalid message role "robot"', 'invalid role');
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES ('10000000-0000-0000-0000-000000000001', 'tool', 'x', 'call_zz')$$,
                 '23503', 'tool result "call_zz" answers no pending tool call', 'tool result without a matching call');

-- A user's row under a built-in name takes the built-in row over, even
-- while profiles use it; pg_dump then carries it
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('gpt-4o', 'o200k_base', 64000, 'proxy');
SELECT is((SELECT format('%s %s %s', context_window, provider, builtin) FROM ctxwin.models WHERE name = 'gpt-4o'),
          '64000 proxy f', 'a user row under a built-in name replaces the built-in one');
SELECT is((SELECT context_window FROM ctxwin.context_status('10000000-0000-0000-0000-000000000001')), 64000,
          'and sessions whose profile uses that model see it at once');
INSERT INTO ctxwin.profiles (name, model, window_policy, window_low_water, cache_ttl)
VALUES ('default', 'gpt-4o-mini', 'sliding', 0.5, '1 min');
SELECT is((SELECT format('%s %s %s %s %s', model, window_policy, window_low_water, cache_ttl, builtin)
           FROM ctxwin.profiles WHERE name = 'default'),
          'gpt-4o-mini sliding 0.5 00:01:00 f',
          'a user row under the built-in profile''s name replaces it, window settings included');

-- Deleting a whole session deletes its messages (retention, erasure)
DELETE FROM ctxwin.sessions WHERE id = '10000000-0000-0000-0000-000000000001';
SELECT is((SELECT count(*) FROM ctxwin.messages)::int, 0, 'deleting a session deletes its messages');

SELECT * FROM finish();
ROLLBACK;

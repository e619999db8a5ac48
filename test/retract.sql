-- Retract, never delete: ctxwin.retract(session, from_id) takes back the
-- messages of a session from an id on.  The rows stay stored, marked with
-- retracted_at, and leave every later window (both formats, both window
-- policies, build_request, append_and_build), summary (extractive, LLM
-- through the plan and the finish, segments), search, messages_after and
-- count (the session's counters, context_status, context_report); a summary
-- that covers one is replaced by the newest one that ends before from_id.
-- message() still returns them, marked.  Also: the errors, idempotence,
-- ids after a retract, another session's ids, tool calls and their results
-- (a retract is a rewind: the session is as it was before from_id), client
-- keys set free, the guard of retracted_at, and a summary planned before a
-- retract refused at its finish.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
                             min_recent_messages, max_summary_tokens, summary_strategy, summary_placement,
                             window_policy, response_reserve)
VALUES ('r_none', 'gpt-4o', NULL, NULL, NULL, 2, 400, 'extractive', 'message', 'sliding', 100),
       ('r_sld', 'gpt-4o', 10, NULL, NULL, 2, 400, 'extractive', 'message', 'sliding', 100),
       ('r_stb', 'gpt-4o', 10, NULL, NULL, 2, 400, 'extractive', 'message', 'stable', 100),
       ('r_llm', 'gpt-4o', 10, NULL, NULL, 2, 400, 'llm', 'message', 'sliding', 100),
       ('r_hyb', 'gpt-4o', 10, NULL, NULL, 2, 400, 'hybrid', 'message', 'sliding', 100);

-- messages a .. b of a session: users ask, assistants answer, each naming
-- its own word (word_<i>) so that a window, a summary or a search shows
-- which messages it holds
CREATE FUNCTION pg_temp.talk(sid uuid, a int, b int) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content)
    SELECT sid, CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
           format('Message %s names word_%s and ORD-%s.', i, i, 1000 + i)
    FROM generate_series(a, b) i ORDER BY i $$;
-- the words of word_<i> in a text, as a sorted list of i
CREATE FUNCTION pg_temp.words(t text) RETURNS int[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(DISTINCT m[1]::int ORDER BY m[1]::int), '{}')
    FROM regexp_matches(t, 'word_([0-9]+)', 'g') m $$;
CREATE FUNCTION pg_temp.answer(t text) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('status', 200, 'provider', 'openai', 'latency_ms', 5,
        'body', jsonb_build_object('model', 'gpt-4o-mini', 'usage', '{"prompt_tokens": 1, "completion_tokens": 1}'::jsonb,
            'choices', jsonb_build_array(jsonb_build_object('index', 0, 'finish_reason', 'stop',
                'message', jsonb_build_object('role', 'assistant', 'content', t))))) $$;

INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
    ('40000000-0000-4000-8000-00000000000a', 'r_none', 'You help.'),
    ('40000000-0000-4000-8000-00000000000b', 'r_none', 'You help.'),
    ('40000000-0000-4000-8000-00000000000c', 'r_none', 'You help.'),
    ('40000000-0000-4000-8000-00000000000d', 'r_sld', 'You help.'),
    ('40000000-0000-4000-8000-00000000000e', 'r_stb', 'You help.'),
    ('40000000-0000-4000-8000-00000000000f', 'r_llm', 'You help.'),
    ('40000000-0000-4000-8000-000000000010', 'r_stb', 'You help.'),
    ('40000000-0000-4000-8000-000000000011', 'r_hyb', 'You help.');

-- --- the column and the errors ----------------------------------------------------
SELECT has_column('ctxwin', 'messages', 'retracted_at', 'ctxwin.messages has retracted_at');
SELECT col_type_is('ctxwin', 'messages', 'retracted_at', 'timestamp with time zone', '... a timestamptz');
SELECT col_hasnt_default('ctxwin', 'messages', 'retracted_at', '... without a default (added without a rewrite)');
SELECT has_column('ctxwin', 'summaries', 'retracted_at', 'ctxwin.summaries has retracted_at');
SELECT throws_ok($$SELECT ctxwin.retract(NULL, 1)$$, '22004', 'session id must not be null', 'a NULL session: 22004');
SELECT throws_ok($$SELECT ctxwin.retract('40000000-0000-4000-8000-00000000000a', NULL)$$, '22004',
                 'from_id must not be null', 'a NULL from_id: 22004');
SELECT throws_ok($$SELECT ctxwin.retract('40000000-0000-4000-8000-0000000000ff', 1)$$, 'P0002',
                 'session 40000000-0000-4000-8000-0000000000ff does not exist', 'an unknown session: P0002');
SELECT throws_ok($$SELECT ctxwin.retract('40000000-0000-4000-8000-00000000000a', 0)$$, '22023',
                 'from_id must be at least 1', 'from_id 0: 22023');

-- --- windows, counts, message(), messages_after, search --------------------------
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000a', 1, 10);
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000b', 1, 3);
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000a', 11), 0, 'retract past the newest message: 0');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000a', 7), 4, 'retract from 7 of 10: 4 messages');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000a', 7), 0, 'again: 0, nothing changes');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000a', 9), 0, 'from a retracted message on: 0');
SELECT is((SELECT array_agg(id ORDER BY id) FROM ctxwin.messages
           WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND retracted_at IS NOT NULL),
          '{7,8,9,10}'::bigint[], 'messages 7 to 10 are marked');
SELECT is((SELECT count(DISTINCT retracted_at) FROM ctxwin.messages
           WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND retracted_at IS NOT NULL),
          1::bigint, '... with one time');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE session_id = '40000000-0000-4000-8000-00000000000a'),
          10::bigint, '... and every row is still stored');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000a')::text),
          '{1,2,3,4,5,6}', 'build_context (openai) leaves them out');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000a', NULL, 'anthropic')::text),
          '{1,2,3,4,5,6}', 'build_context (anthropic) leaves them out');
SELECT is(pg_temp.words(ctxwin.build_request('40000000-0000-4000-8000-00000000000a', NULL, 'anthropic')::text),
          '{1,2,3,4,5,6}', 'build_request leaves them out');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000a', 70)::text),
          '{4,5,6}', 'a small budget: the newest messages not retracted, and no retracted one');
SELECT is((SELECT array_agg(id ORDER BY id) FROM ctxwin.messages_after('40000000-0000-4000-8000-00000000000a')),
          '{1,2,3,4,5,6}'::bigint[], 'messages_after leaves them out');
SELECT is((SELECT format('%s %s %s %s', unsummarized_messages, message_count, unsummarized_tokens, token_count)
           FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000a'),
          (SELECT format('6 10 %s %s', sum(token_count), sum(token_count)) FROM ctxwin.messages
           WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND id <= 6),
          'the counters: 6 unsummarized messages, their tokens; message_count stays the newest id');
SELECT is((SELECT format('%s %s %s', messages_since_summary, tokens_since_summary, window_messages)
           FROM ctxwin.context_status('40000000-0000-4000-8000-00000000000a')),
          (SELECT format('6 %s 6', sum(token_count)) FROM ctxwin.messages
           WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND id <= 6),
          'context_status counts the six');
SELECT is((SELECT window_tokens FROM ctxwin.context_status('40000000-0000-4000-8000-00000000000a')),
          (ctxwin._window('40000000-0000-4000-8000-00000000000a', NULL) ->> 'tokens')::int,
          'context_status''s window is build_context''s');
SELECT matches(ctxwin.context_report('40000000-0000-4000-8000-00000000000a'), 'window +6 messages',
               'context_report shows a window of six messages');
SELECT is(ctxwin.message('40000000-0000-4000-8000-00000000000a', 8) ->> 'content', 'Message 8 names word_8 and ORD-1008.',
          'message() returns a retracted message whole');
SELECT ok((ctxwin.message('40000000-0000-4000-8000-00000000000a', 8) ->> 'retracted_at')::timestamptz
          = (SELECT retracted_at FROM ctxwin.messages WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND id = 8),
          '... with its "retracted_at"');
SELECT ok(NOT ctxwin.message('40000000-0000-4000-8000-00000000000a', 6) ? 'retracted_at',
          'a message not retracted has no "retracted_at"');
SELECT is((SELECT count(*) FROM ctxwin.search('40000000-0000-4000-8000-00000000000a', 'word_8')), 0::bigint,
          'search does not find a retracted message');
SELECT is((SELECT count(*) FROM ctxwin.search('40000000-0000-4000-8000-00000000000a', 'ORD-1008')), 0::bigint,
          '... by an identifier either');
SELECT is((SELECT array_agg(id) FROM ctxwin.search('40000000-0000-4000-8000-00000000000a', 'word_5')),
          '{5}'::bigint[], '... and finds one that is not');
SELECT is(ctxwin.answer_tool_call('40000000-0000-4000-8000-00000000000a',
              '{"id": "c1", "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": \"word_9\"}"}}')
          ->> 'content' ~ 'Message 9', false, 'the recall tool does not find it');

-- later appends: new ids, in the window after the messages kept
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000a', 11, 11);
SELECT is((SELECT max(id) FROM ctxwin.messages WHERE session_id = '40000000-0000-4000-8000-00000000000a'),
          11::bigint, 'the next message gets id 11, after the retracted ones');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000a')::text),
          '{1,2,3,4,5,6,11}', 'the window: 1 to 6, then 11');
SELECT is(pg_temp.words((ctxwin.append_and_build('40000000-0000-4000-8000-00000000000a',
                                                 '[{"role": "assistant", "content": "Reply word_12."}]') -> 'context')::text),
          '{1,2,3,4,5,6,11,12}', 'append_and_build''s window too');
SELECT is((SELECT unsummarized_messages FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000a'),
          8::bigint, 'the counter goes on from six');
SELECT is((SELECT array_agg((x ->> 'id')::bigint ORDER BY n) FROM jsonb_array_elements(
               ctxwin.build_window('40000000-0000-4000-8000-00000000000a') -> 'messages') WITH ORDINALITY a(x, n)),
          '{1,2,3,4,5,6,11,12}'::bigint[], 'build_window''s rows: no retracted one');

-- ids are per session: another session's message ids mean this session's positions
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000b', 7), 0,
          'from_id 7 in a session of three messages (7 is another session''s message): 0');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE session_id = '40000000-0000-4000-8000-00000000000b'
           AND retracted_at IS NOT NULL), 0::bigint, '... none of its messages marked');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000b', 2), 2, 'retract(b, 2): two of b''s');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE session_id = '40000000-0000-4000-8000-00000000000a'
           AND retracted_at IS NOT NULL), 4::bigint, '... and a''s rows are as they were');

-- the guard: only retract() marks, and a mark stays
SELECT throws_ok($$UPDATE ctxwin.messages SET retracted_at = now()
                   WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND id = 1$$,
                 '23000', 'messages cannot be changed', 'an UPDATE cannot retract a message');
SELECT throws_ok($$UPDATE ctxwin.messages SET retracted_at = NULL
                   WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND id = 8$$,
                 '23000', 'messages cannot be changed', '... nor bring one back');
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content, retracted_at)
                   VALUES ('40000000-0000-4000-8000-00000000000a', 'user', 'born retracted', now())$$,
                 '23514', 'a new message cannot be retracted', 'an INSERT cannot bring a retracted message');
SELECT lives_ok($$UPDATE ctxwin.messages SET metadata = '{"seen": true}'
                  WHERE session_id = '40000000-0000-4000-8000-00000000000a' AND id = 8$$,
                'metadata of a retracted message may still change');

-- client keys are set free: the same key appends a new message
SELECT is(ctxwin.append_messages('40000000-0000-4000-8000-00000000000c',
                                 '[{"role": "user", "content": "Hi word_1."}, {"role": "assistant", "content": "Hello word_2."}]',
                                 ARRAY['k1', 'k2']), '{1,2}'::bigint[], 'two messages with keys');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000c', 2), 1, 'the reply retracted (pop_item)');
SELECT is(ctxwin.append_messages('40000000-0000-4000-8000-00000000000c',
                                 '[{"role": "user", "content": "Hi word_1."}, {"role": "assistant", "content": "Hello again word_3."}]',
                                 ARRAY['k1', 'k2']), '{1,3}'::bigint[],
          'appending k1 and k2 again: k1 is message 1, k2 a new message');
SELECT is((SELECT metadata ->> 'retracted_client_key' FROM ctxwin.messages
           WHERE session_id = '40000000-0000-4000-8000-00000000000c' AND id = 2), 'k2',
          'the retracted message keeps its key in its metadata');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000c')::text), '{1,3}',
          'edit and resend: the window has the new reply only');
SELECT isnt(ctxwin.record_usage('40000000-0000-4000-8000-00000000000c', '{"prompt_tokens": 30, "completion_tokens": 5}'),
            NULL, 'record_usage after a retract');
SELECT is((SELECT window_first_id FROM ctxwin.usage_log WHERE session_id = '40000000-0000-4000-8000-00000000000c'),
          1::bigint, 'record_usage: the window starts at message 1, the retracted message 2 inside it not counted');

-- --- tool calls: a retract is a rewind ---------------------------------------------
INSERT INTO ctxwin.sessions (id, profile) VALUES ('40000000-0000-4000-8000-000000000020', 'r_none');
INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id) VALUES
    ('40000000-0000-4000-8000-000000000020', 'user', 'Read word_1 please.', NULL, NULL),
    ('40000000-0000-4000-8000-000000000020', 'assistant', NULL,
     '[{"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{}"}},
       {"id": "call_b", "type": "function", "function": {"name": "read", "arguments": "{}"}}]', NULL),
    ('40000000-0000-4000-8000-000000000020', 'tool', 'word_3 result a', NULL, 'call_a'),
    ('40000000-0000-4000-8000-000000000020', 'tool', 'word_4 result b', NULL, 'call_b'),
    ('40000000-0000-4000-8000-000000000020', 'assistant', 'Done word_5.', NULL, NULL);
SELECT is(ctxwin.retract('40000000-0000-4000-8000-000000000020', 4), 2,
          'retract from a tool result (4): the result and what came after');
SELECT is((SELECT pending_tool_calls FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-000000000020'),
          '{call_b}'::text[], 'the call it answered is pending again, as before the result came');
SELECT is((SELECT array_agg(x ->> 'role' ORDER BY n) FROM jsonb_array_elements(
               ctxwin.build_context('40000000-0000-4000-8000-000000000020')) WITH ORDINALITY a(x, n)),
          '{user,assistant,tool}', 'the window: the call and the result kept, as at that point of the turn');
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
                   VALUES ('40000000-0000-4000-8000-000000000020', 'tool', 'again', 'call_a')$$,
                 '23503', NULL, 'call_a stays answered');
SELECT lives_ok($$INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
                  VALUES ('40000000-0000-4000-8000-000000000020', 'tool', 'word_6 result b again', 'call_b')$$,
                'call_b can be answered again');
SELECT is((SELECT array_agg(x ->> 'role' ORDER BY n) FROM jsonb_array_elements(
               ctxwin.build_context('40000000-0000-4000-8000-000000000020')) WITH ORDINALITY a(x, n)),
          '{user,assistant,tool,tool}', '... and the window has the call with both results');
SELECT is((SELECT array_agg(x -> 'content' ->> 0 ORDER BY n) FILTER (WHERE x ->> 'role' = 'user')
           FROM jsonb_array_elements(ctxwin.build_context('40000000-0000-4000-8000-000000000020', NULL, 'anthropic')
                                     -> 'messages') WITH ORDINALITY a(x, n)) IS NOT NULL, true,
          'the anthropic window builds');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-000000000020', NULL, 'anthropic')::text),
          '{1,3,6}', '... with the tool_result blocks of 3 and 6, not 4');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-000000000020', 2), 3, 'retract from the call: the call and its results');
SELECT is((SELECT pending_tool_calls FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-000000000020'), NULL,
          'nothing pending');
SELECT is(ctxwin.build_context('40000000-0000-4000-8000-000000000020') -> -1 ->> 'role', 'user',
          'the window ends with the user''s message, no orphan result');
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
                   VALUES ('40000000-0000-4000-8000-000000000020', 'tool', 'late', 'call_b')$$,
                 '23503', NULL, 'a result of a retracted call is refused');

-- --- summaries (sliding, extractive) ---------------------------------------------
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000d', 1, 12);
SELECT is((ctxwin.summarize_session('40000000-0000-4000-8000-00000000000d', true)).through_id, 10::bigint,
          'a first summary, through 10');
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000d', 13, 24);
SELECT is((ctxwin.summarize_session('40000000-0000-4000-8000-00000000000d', true)).through_id, 22::bigint,
          'a second, through 22');
CREATE TEMP TABLE first_summary AS
SELECT content, segments FROM ctxwin.summaries WHERE session_id = '40000000-0000-4000-8000-00000000000d' AND version = 1;
SELECT ok(pg_temp.words((SELECT conversation_summary FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'))
          @> '{15}', '(the summary names word_15)');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000d', 15), 10, 'retract from 15, inside the second summary');
SELECT is((SELECT format('%s %s', conversation_summary = f.content, summary_through_id)
           FROM ctxwin.sessions, first_summary f WHERE id = '40000000-0000-4000-8000-00000000000d'), 't 10',
          'the session falls back to the first summary, through 10');
SELECT is((SELECT array_agg(format('%s %s', version, retracted_at IS NOT NULL) ORDER BY version)
           FROM ctxwin.summaries WHERE session_id = '40000000-0000-4000-8000-00000000000d'),
          '{"1 f","2 t"}', 'both summaries rows kept, the second marked');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000d')::text)
          && '{15,16,17,18,19,20,21,22,23,24}', false, 'no retracted message in the window, summary included');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000d')::text)
          @> '{11,12,13,14}', true, '... and every message after the summary kept');
SELECT is((SELECT format('%s %s', unsummarized_messages, compaction_queued_at IS NULL)
           FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'), '4 t',
          'four unsummarized: below the trigger of 10, not queued');
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000d', 25, 30);
SELECT is((SELECT format('%s %s', unsummarized_messages, compaction_queued_at IS NOT NULL)
           FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'), '10 t',
          'six more: ten, queued as the trigger says');
SELECT is((ctxwin.summarize_session('40000000-0000-4000-8000-00000000000d')).through_id, 28::bigint,
          'the next summary goes through 28');
SELECT is(pg_temp.words((SELECT conversation_summary FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'))
          && '{15,16,17,18,19,20,21,22,23,24}', false, '... and covers no retracted message');
SELECT ok(pg_temp.words((SELECT conversation_summary FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'))
          @> '{13,25}', '... but those around them');
SELECT is((SELECT unsummarized_messages FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'),
          2::bigint, 'two left after it');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000d', 29), 2, 'retract after the summary''s end');
SELECT is((SELECT format('%s %s', summary_through_id, unsummarized_messages)
           FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'), '28 0',
          'the summary stays (it covers no retracted message)');
SELECT is((SELECT count(*) FROM ctxwin.summaries WHERE session_id = '40000000-0000-4000-8000-00000000000d'
           AND retracted_at IS NULL), 2::bigint, '... and stays in effect');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000d', 3), 16,
          'retract from 3, inside the first summary: 3 to 14 and 25 to 28 (29 and 30 already were)');
SELECT is((SELECT format('%s %s %s', conversation_summary IS NULL, summary_through_id, unsummarized_messages)
           FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'), 't 0 2',
          'no summary ends before 3: none, and messages 1 and 2 unsummarized');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000d')::text), '{1,2}',
          'the window: 1 and 2');
SELECT is((SELECT count(*) FROM ctxwin.summaries WHERE session_id = '40000000-0000-4000-8000-00000000000d'),
          3::bigint, 'every summaries row kept');

-- --- the stable policy: the segments that reach from_id are dropped ---------------
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000e', 1, 12);
SELECT is((ctxwin.summarize_session('40000000-0000-4000-8000-00000000000e', true)).through_id, 10::bigint,
          'stable: a first segment, through 10');
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000e', 13, 24);
SELECT is((ctxwin.summarize_session('40000000-0000-4000-8000-00000000000e', true)).through_id, 22::bigint,
          'a second segment, through 22');
SELECT is(cardinality((SELECT summary_segments FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000e')),
          2, '(two segments)');
CREATE TEMP TABLE first_segment AS
SELECT content FROM ctxwin.summaries WHERE session_id = '40000000-0000-4000-8000-00000000000e' AND version = 1;
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000e', 20), 5, 'retract from 20');
SELECT is((SELECT format('%s %s %s', conversation_summary = f.content, summary_segments IS NULL, summary_through_id)
           FROM ctxwin.sessions, first_segment f WHERE id = '40000000-0000-4000-8000-00000000000e'), 't t 10',
          'the second segment is dropped: the first alone, through 10');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000e', NULL, 'anthropic')::text)
          && '{20,21,22,23,24}', false, 'anthropic, stable: no retracted message');
SELECT ok(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-00000000000e', NULL, 'anthropic')::text)
          @> '{11,12,13,19}', '... the messages after the summary kept');
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000e', 25, 32);
SELECT is((ctxwin.summarize_session('40000000-0000-4000-8000-00000000000e', true)).through_id, 30::bigint,
          'a new segment through 30');
SELECT is(cardinality((SELECT summary_segments FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000e')),
          2, '... appended to the first');
SELECT is(pg_temp.words((SELECT conversation_summary FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000e'))
          && '{20,21,22,23,24}', false, '... without the retracted messages');

-- --- a summary planned before a retract is refused at its finish ------------------
SET ctxwin.llm_provider = 'openai';
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000f', 1, 12);
CREATE TEMP TABLE plans (name text PRIMARY KEY, plan jsonb);
INSERT INTO plans VALUES ('f1', ctxwin._summary_plan('40000000-0000-4000-8000-00000000000f', true, NULL));
SELECT is((SELECT (plan ->> 'through')::bigint FROM plans WHERE name = 'f1'), 10::bigint, 'a plan through 10');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-00000000000f', 8), 5, 'retract from 8 meanwhile');
SELECT throws_ok($$SELECT ctxwin._summary_finish(plan, pg_temp.answer('Messages 1 to 10 word_9.')) FROM plans
                   WHERE name = 'f1'$$, '40001', NULL, 'the finish of the plan is refused');
SELECT is((SELECT format('%s %s', summary_through_id, conversation_summary IS NULL)
           FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000f'), '0 t',
          '... nothing written');
SELECT is((SELECT count(*) FROM ctxwin.summaries WHERE session_id = '40000000-0000-4000-8000-00000000000f'), 0::bigint,
          '... no summaries row');
INSERT INTO plans VALUES ('f2', ctxwin._summary_plan('40000000-0000-4000-8000-00000000000f', true, NULL));
SELECT is((SELECT (plan ->> 'through')::bigint FROM plans WHERE name = 'f2'), 5::bigint,
          'planned again: through 5 (7 messages, the newest 2 kept)');
SELECT is(pg_temp.words((SELECT plan::text FROM plans WHERE name = 'f2')) && '{8,9,10,11,12}', false,
          '... its request carries no retracted message');
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer('Messages 1 to 5.'))).through_id, 5::bigint, '... and lands')
FROM plans WHERE name = 'f2';


-- hybrid: the facts of the plan are those of the messages not retracted
SELECT pg_temp.talk('40000000-0000-4000-8000-000000000011', 1, 14);
SELECT is(ctxwin.retract('40000000-0000-4000-8000-000000000011', 6), 9, 'hybrid: retract from 6 of 14');
SELECT pg_temp.talk('40000000-0000-4000-8000-000000000011', 15, 22);
INSERT INTO plans VALUES ('h1', ctxwin._summary_plan('40000000-0000-4000-8000-000000000011', true, NULL));
SELECT is((SELECT (plan ->> 'through')::bigint FROM plans WHERE name = 'h1'), 20::bigint, 'a plan through 20');
SELECT ok((SELECT plan ->> 'facts' ~ 'ORD-1005' AND plan ->> 'facts' ~ 'ORD-1015' FROM plans WHERE name = 'h1'),
          '... whose facts name messages 5 and 15');
SELECT ok((SELECT plan ->> 'facts' !~ 'ORD-10(0[6-9]|1[0-4])' AND pg_temp.words(plan::text) && '{6,7,8,9,10,11,12,13,14}' = false
           FROM plans WHERE name = 'h1'), '... and no retracted one, nor does its request');
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer('Orders.'))).through_id, 20::bigint, '... and it lands')
FROM plans WHERE name = 'h1';
SELECT ok((SELECT conversation_summary !~ 'ORD-10(0[6-9]|1[0-4])' FROM ctxwin.sessions
           WHERE id = '40000000-0000-4000-8000-000000000011'), 'the hybrid summary names no retracted message');
RESET ctxwin.llm_provider;

-- the summary point moves back only past a retracted message
SELECT throws_ok($$UPDATE ctxwin.sessions SET summary_through_id = 2
                   WHERE id = '40000000-0000-4000-8000-00000000000f'$$,
                 '23514', NULL, 'an application cannot move the summary point back');

-- --- the hybrid strategy and search over a summarized, then retracted history -----
SELECT pg_temp.talk('40000000-0000-4000-8000-000000000010', 1, 12);
SELECT ok((ctxwin.summarize_session('40000000-0000-4000-8000-000000000010', true)).through_id = 10, 'summarized through 10');
SELECT is((SELECT array_agg(id) FROM ctxwin.search('40000000-0000-4000-8000-000000000010', 'word_4')),
          '{4}'::bigint[], 'search finds a summarized message');
SELECT is(ctxwin.retract('40000000-0000-4000-8000-000000000010', 4), 9, 'retract from 4');
SELECT is((SELECT count(*) FROM ctxwin.search('40000000-0000-4000-8000-000000000010', 'word_4')), 0::bigint,
          '... then not');
SELECT is(pg_temp.words(ctxwin.build_context('40000000-0000-4000-8000-000000000010')::text), '{1,2,3}',
          '... and the window holds 1 to 3, the summary gone');

SELECT * FROM finish();
ROLLBACK;

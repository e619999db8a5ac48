-- append_messages and append_and_build, what the client packages call:
-- messages stored once per client key, ids in order, bad input refused
-- whole, and a chat turn's window or request body in one call.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

INSERT INTO ctxwin.sessions (id, system_prompt) VALUES
    ('c1000000-0000-4000-8000-000000000001', 'You are terse.'),
    ('c1000000-0000-4000-8000-000000000002', NULL);

-- ids in order, keys stored
SELECT is(ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
          '[{"role": "user", "content": "Deploy billing-7."},
            {"role": "assistant", "content": null,
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "deploy", "arguments": "{\"svc\": \"billing-7\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "deployed"}]',
          ARRAY['k1', 'k2', 'k3']),
          '{1,2,3}'::bigint[], 'append_messages returns the new ids in order');
SELECT is((SELECT array_agg(client_key ORDER BY id) FROM ctxwin.messages WHERE session_id = 'c1000000-0000-4000-8000-000000000001'),
          ARRAY['k1', 'k2', 'k3'], 'with their keys');
SELECT is((SELECT tool_calls -> 0 ->> 'id' FROM ctxwin.messages WHERE session_id = 'c1000000-0000-4000-8000-000000000001' AND id = 2),
          'call_1', 'the tool call is stored');
SELECT is((SELECT tool_call_id || '|' || role FROM ctxwin.messages WHERE session_id = 'c1000000-0000-4000-8000-000000000001' AND id = 3),
          'call_1|tool', 'and its result');
SELECT is((SELECT tool_calls IS NULL AND metadata = '{}' FROM ctxwin.messages WHERE session_id = 'c1000000-0000-4000-8000-000000000001' AND id = 1),
          true, 'no tool_calls is NULL, no metadata is {}');

-- the same keys again: nothing stored twice
SELECT is(ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
          '[{"role": "user", "content": "Deploy billing-7."}, {"role": "user", "content": "And billing-8."}]',
          ARRAY['k1', 'k4']),
          '{1,4}'::bigint[], 'a key already stored gives the stored id; a new one is appended');
SELECT is((SELECT message_count FROM ctxwin.sessions WHERE id = 'c1000000-0000-4000-8000-000000000001'),
          4::bigint, 'the session counts 4 messages');
SELECT is((SELECT token_count FROM ctxwin.sessions WHERE id = 'c1000000-0000-4000-8000-000000000001'),
          (SELECT sum(token_count) FROM ctxwin.messages WHERE session_id = 'c1000000-0000-4000-8000-000000000001'),
          'and their tokens, each once');
SELECT is(ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
          '[{"role": "user", "content": "x"}, {"role": "user", "content": "x"}]', ARRAY['k5', 'k5']),
          '{5,5}'::bigint[], 'one key twice in one call: stored once');
SELECT is(ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
          '[{"role": "user", "content": "no key"}, {"role": "user", "content": "no key"}]', ARRAY[NULL, NULL]::text[]),
          '{6,7}'::bigint[], 'messages without a key are all stored');
SELECT is(ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
          '[{"role": "user", "content": "no keys at all", "metadata": {"from": "test"}}]'),
          '{8}'::bigint[], 'keys may be left out');
SELECT is((SELECT metadata ->> 'from' FROM ctxwin.messages WHERE session_id = 'c1000000-0000-4000-8000-000000000001' AND id = 8),
          'test', 'metadata is stored');
SELECT is(ctxwin.append_messages('c1000000-0000-4000-8000-000000000002', '[{"role": "user", "content": "hi"}]', ARRAY['k1']),
          '{1}'::bigint[], 'keys are per session');

-- bad input: refused whole, nothing stored
SELECT throws_ok($$SELECT ctxwin.append_messages(NULL, '[]')$$, '22004', 'session must not be null', 'a NULL session');
SELECT throws_ok($$SELECT ctxwin.append_messages('c1000000-0000-4000-8000-0000000000ff', '[{"role": "user", "content": "x"}]')$$,
                 'P0002', 'session c1000000-0000-4000-8000-0000000000ff does not exist', 'an unknown session');
SELECT throws_ok($$SELECT ctxwin.append_messages('c1000000-0000-4000-8000-000000000001', '{"role": "user"}')$$,
                 '22023', 'messages must be a JSON array of chat messages', 'an object, not an array');
SELECT throws_ok($$SELECT ctxwin.append_messages('c1000000-0000-4000-8000-000000000001', NULL)$$,
                 '22023', 'messages must be a JSON array of chat messages', 'NULL messages');
SELECT throws_ok($$SELECT ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
                   '[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]', ARRAY['only one'])$$,
                 '22023', 'keys must have one element per message', 'keys of another length');
SELECT throws_ok($$SELECT ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
                   '[{"role": "user", "content": "fine"}, {"role": "user", "content": "x", "id": "msg_1"}]')$$,
                 '22023', 'message 2 has keys ctxwin does not store: id', 'a key ctxwin does not store, named');
SELECT throws_ok($$SELECT ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
                   '[{"role": "user", "content": {"type": "text", "text": "x"}}]')$$,
                 '22023', 'message 1 has a value of the wrong type', 'content that is neither a string nor an array');
SELECT throws_ok($$SELECT ctxwin.append_messages('c1000000-0000-4000-8000-000000000001', '["hello"]')$$,
                 '22023', 'message 1 is not a JSON object', 'a message that is not an object');
SELECT throws_ok($$SELECT ctxwin.append_messages('c1000000-0000-4000-8000-000000000001',
                   '[{"role": "user", "content": "fine"}, {"role": "robot", "content": "x"}]')$$,
                 '23514', NULL, 'a role ctxwin does not know: the table''s check');
SELECT is((SELECT message_count FROM ctxwin.sessions WHERE id = 'c1000000-0000-4000-8000-000000000001'),
          8::bigint, 'none of them stored anything');

-- a plain INSERT of a stored key is refused, and counts nothing
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content, client_key)
                   VALUES ('c1000000-0000-4000-8000-000000000001', 'user', 'again', 'k1')$$,
                 '23505', NULL, 'a plain INSERT with a stored key');
SELECT is((SELECT message_count || '|' || (SELECT max(id) FROM ctxwin.messages WHERE session_id = s.id)
           FROM ctxwin.sessions s WHERE s.id = 'c1000000-0000-4000-8000-000000000001'),
          '8|8', 'counts unchanged, no id spent');

-- a chat turn in one call
SELECT is(ctxwin.append_and_build('c1000000-0000-4000-8000-000000000002', '[{"role": "user", "content": "What now?"}]',
                                  ARRAY['k2']) -> 'ids', '[2]'::jsonb, 'append_and_build returns the ids');
SELECT is(ctxwin.append_and_build('c1000000-0000-4000-8000-000000000002', '[{"role": "user", "content": "What now?"}]',
                                  ARRAY['k2']) -> 'context',
          ctxwin.build_context('c1000000-0000-4000-8000-000000000002'),
          'and build_context of the session with the message (a retry: stored once)');
SELECT is(jsonb_array_length(ctxwin.build_context('c1000000-0000-4000-8000-000000000002')), 2,
          'the window holds both messages');
CREATE TEMP TABLE turn AS
SELECT ctxwin.append_and_build('c1000000-0000-4000-8000-000000000001', '[{"role": "user", "content": "Summarize."}]',
                               format => 'anthropic', request => true) AS t;
SELECT is((SELECT t -> 'request' FROM turn),
          ctxwin.build_request('c1000000-0000-4000-8000-000000000001', format => 'anthropic'),
          'with request: build_request''s body of the session with the message, in the format asked for');
SELECT throws_ok($$SELECT ctxwin.append_and_build('c1000000-0000-4000-8000-000000000001', '[]', request => NULL)$$,
                 '22004', 'request must not be null', 'a NULL request');
SELECT is((ctxwin.append_and_build('c1000000-0000-4000-8000-000000000001', '[]', request => true,
                                   recall => true) -> 'request'),
          ctxwin.build_request('c1000000-0000-4000-8000-000000000001', recall => true),
          'with recall: build_request''s body with recall');
SELECT is(ctxwin.append_and_build('c1000000-0000-4000-8000-000000000001', '[]', request => true,
                                  recall => true) #>> '{request,tools,-1,function,name}',
          'conversation_search', 'its last tool is conversation_search');
SELECT throws_ok($$SELECT ctxwin.append_and_build('c1000000-0000-4000-8000-000000000001', '[]', recall => true)$$,
                 '22023', 'recall needs request', 'recall without request');

SELECT * FROM finish();
ROLLBACK;

-- The shape a model's host takes (ShapeUserFirst, src/policy/rules.c):
-- Amazon Bedrock (ctxwin.models.provider 'bedrock') refuses a conversation
-- whose first turn after the system prompt is not the user's.  A window
-- for it that would begin with another turn begins with the user turn
-- "Please continue.", in its budget, and still holds every message it
-- would hold otherwise; a window for any other host is unchanged.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

-- the same model twice: served by Bedrock, and by Anthropic's own API
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES
  ('us.anthropic.claude-sonnet-4-20250514-v1:0', 'cl100k_base', 200000, 'bedrock'),
  ('claude-sonnet-4-direct', 'cl100k_base', 200000, 'anthropic');
INSERT INTO ctxwin.profiles (name, model, window_policy, max_messages_before_summary, response_reserve) VALUES
  ('s_bedrock', 'us.anthropic.claude-sonnet-4-20250514-v1:0', 'sliding', NULL, 0),
  ('s_direct', 'claude-sonnet-4-direct', 'sliding', NULL, 0),
  ('s_bedrock_stable', 'us.anthropic.claude-sonnet-4-20250514-v1:0', 'stable', NULL, 0);
-- a chat that opens with the assistant's greeting, as chat UIs do
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
  ('92000000-0000-4000-8000-000000000001', 's_bedrock', 'You help with orders.'),
  ('92000000-0000-4000-8000-000000000002', 's_direct', 'You help with orders.'),
  ('92000000-0000-4000-8000-000000000003', 's_bedrock_stable', 'You help with orders.');
\ir lib/add.sql
DO $$ BEGIN
    PERFORM pg_temp.add(s.id, 'assistant', 'Hi! How can I help with your order?') FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'user', 'Where is order ORD-7731?') FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'assistant', 'Checking.',
                        '[{"id": "call_1", "type": "function", "function": {"name": "track", "arguments": "{\"order\": \"ORD-7731\"}"}}]')
    FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'tool', '{"order": "ORD-7731", "status": "in transit"}', NULL, 'call_1')
    FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'assistant', 'ORD-7731 is in transit.') FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'user', 'When will it arrive?') FROM ctxwin.sessions s ORDER BY s.id;
END $$;

CREATE FUNCTION pg_temp.w(s text, b int) RETURNS jsonb LANGUAGE sql AS $$
    SELECT ctxwin._window(('92000000-0000-4000-8000-00000000000' || s)::uuid, b) $$;
CREATE FUNCTION pg_temp.bridge_tokens() RETURNS int LANGUAGE sql AS $$
    SELECT ctxwin.message_tokens('user', 'Please continue.', NULL, NULL, NULL, 'cl100k_base') $$;

-- the whole conversation: Bedrock's window begins with the bridge, then every message
SELECT is(pg_temp.w('1', 4000) -> 'messages' -> 1, '{"role": "user", "content": "Please continue."}',
          'a Bedrock window that would begin with the assistant begins with a user turn');
SELECT is(jsonb_path_query_array(pg_temp.w('1', 4000) -> 'messages', '$[2 to last].content'),
          jsonb_path_query_array(pg_temp.w('2', 4000) -> 'messages', '$[1 to last].content'),
          '... followed by every message the same window for Anthropic''s own API sends');
SELECT is(pg_temp.w('2', 4000) -> 'messages' -> 1 ->> 'role', 'assistant',
          'Anthropic''s own API gets the greeting first, with no user turn added');
SELECT is((pg_temp.w('1', 4000) ->> 'tokens')::int,
          (pg_temp.w('2', 4000) ->> 'tokens')::int + pg_temp.bridge_tokens(),
          'the user turn is counted in the window''s tokens');
SELECT is(pg_temp.w('1', 4000) -> 'window_messages', '6', 'window_messages counts stored messages only');
SELECT is(pg_temp.w('1', 4000) -> 'first_id', '1', 'first_id is the first stored message''s');
SELECT is(pg_temp.w('1', 4000) -> 'dropped_messages', '0', 'and nothing is dropped');

-- the Anthropic body: the first turn of "messages" is the user's
SELECT is(ctxwin.build_context('92000000-0000-4000-8000-000000000001', 4000, 'anthropic') -> 'messages' -> 0,
          '{"role": "user", "content": [{"text": "Please continue.", "type": "text"}]}',
          'the Anthropic format for Bedrock begins with the user turn');
SELECT is(ctxwin.build_context('92000000-0000-4000-8000-000000000001', 4000, 'anthropic') -> 'messages' -> 1 ->> 'role',
          'assistant', '... then the greeting');
-- build_window's rows are stored messages: the bridge is none
SELECT is((SELECT array_agg((r ->> 'id')::int) FROM jsonb_array_elements(
              ctxwin.build_window('92000000-0000-4000-8000-000000000001', 4000) -> 'messages') r),
          ARRAY[1, 2, 3, 4, 5, 6], 'build_window lists the stored messages shown, not the user turn');
SELECT is((ctxwin.build_window('92000000-0000-4000-8000-000000000001', 4000) -> 'context' -> 1 ->> 'content'),
          'Please continue.', '... while its body sends it');

-- every budget: never over it, never an assistant or tool turn first, the
-- same stored messages as the window for the other host where both fit
-- (or one unit fewer, the room the user turn takes)
CREATE FUNCTION pg_temp.safe_w(s text, b int) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN pg_temp.w(s, b);
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN NULL;
END $$;
CREATE TEMP TABLE budgets AS
SELECT b, pg_temp.safe_w('1', b) AS bed, pg_temp.safe_w('2', b) AS dir FROM generate_series(20, 200) b;
SELECT cmp_ok((SELECT count(*) FROM budgets WHERE bed IS NOT NULL), '>', 100::bigint,
              'most budgets from 20 to 200 hold a Bedrock window');
SELECT is((SELECT count(*) FROM budgets WHERE bed IS NOT NULL AND (bed ->> 'tokens')::int > b), 0::bigint,
          'no Bedrock window is over its budget');
SELECT is((SELECT count(*) FROM budgets
           WHERE bed IS NOT NULL AND jsonb_array_length(bed -> 'messages') > 1
             AND bed -> 'messages' -> 1 ->> 'role' <> 'user'), 0::bigint,
          'no Bedrock window begins with a turn not the user''s');
SELECT is((SELECT count(*) FROM budgets
           WHERE bed IS NOT NULL AND (bed ->> 'window_messages')::int + (bed ->> 'dropped_messages')::int <> 6),
          0::bigint, 'every Bedrock window is the newest messages with no gap (window + dropped = all)');
SELECT is((SELECT count(*) FROM budgets
           WHERE bed IS NOT NULL AND dir IS NOT NULL
             AND bed -> 'messages' -> 1 ->> 'content' = 'Please continue.'
             AND (bed ->> 'tokens')::int - pg_temp.bridge_tokens() <> (dir ->> 'tokens')::int
             AND (bed ->> 'window_messages')::int = (dir ->> 'window_messages')::int), 0::bigint,
          'where both hold the same messages, the Bedrock window costs the user turn more, exactly');
SELECT is((SELECT count(*) FROM budgets WHERE (bed IS NULL) <> (dir IS NULL)), 0::bigint,
          'a budget holds the Bedrock window exactly when it holds the other');

-- a window that begins with the user's turn is sent as it is
SELECT is(pg_temp.w('1', 33) -> 'messages' -> 1 ->> 'content', 'When will it arrive?',
          'a window that begins with the user''s turn gets no second one');
SELECT is((pg_temp.w('1', 33) ->> 'tokens')::int, (pg_temp.w('2', 33) ->> 'tokens')::int,
          '... and costs what the other host''s does');
-- where the other host's window begins with the assistant and the room
-- left cannot hold the user turn, the window is packed again: it begins
-- with the user's own turn, one unit fewer
SELECT is(pg_temp.w('2', 40) -> 'messages' -> 1 ->> 'role', 'assistant', 'at 40 tokens the other host''s window begins with the assistant');
SELECT is(pg_temp.w('1', 40) -> 'messages' -> 1 ->> 'content', 'When will it arrive?',
          '... and the Bedrock window with the user''s turn, in its budget');
SELECT is(pg_temp.w('1', 40) -> 'window_messages', '1', '... one message');
SELECT is(pg_temp.w('1', 40) -> 'dropped_messages', '5', '... the older ones counted as dropped');

-- a stable window keeps its beginning, the user turn included, while it grows
SELECT is(pg_temp.w('3', 4000) -> 'messages' -> 1 ->> 'content', 'Please continue.',
          'a stable Bedrock window begins with the user turn');
CREATE TEMP TABLE before AS SELECT pg_temp.w('3', 4000) -> 'messages' AS m;
SELECT pg_temp.add('92000000-0000-4000-8000-000000000003', 'assistant', 'Tomorrow, by noon.');
SELECT pg_temp.add('92000000-0000-4000-8000-000000000003', 'user', 'Thanks.');
SELECT is(jsonb_path_query_array(pg_temp.w('3', 4000) -> 'messages', '$[0 to 7]'), (SELECT m FROM before),
          'and begins with the same messages after two more turns');
SELECT is(jsonb_array_length(pg_temp.w('3', 4000) -> 'messages'), 10, '... which follow them');

-- a budget too small for the user turn says so
CREATE FUNCTION pg_temp.error_of(b int) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_temp.w('1', b);
    RETURN NULL;
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN SQLERRM;
END $$;
INSERT INTO ctxwin.sessions (id, profile) VALUES ('92000000-0000-4000-8000-000000000004', 's_bedrock');
SELECT pg_temp.add('92000000-0000-4000-8000-000000000004', 'assistant', 'Hi! How can I help with your order?');
SELECT ok(pg_temp.w('4', 4000) -> 'messages' -> 0 ->> 'content' = 'Please continue.',
          'a Bedrock session that holds only a greeting begins with the user turn');
CREATE FUNCTION pg_temp.error_of(s text, b int) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_temp.w(s, b);
    RETURN NULL;
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN SQLERRM;
END $$;
SELECT is((SELECT count(*) FROM generate_series(1, 60) b
           WHERE CASE WHEN pg_temp.error_of('4', b) IS NULL
                      THEN pg_temp.w('4', b) -> 'messages' -> 0 ->> 'role' <> 'user' END), 0::bigint,
          'no budget gets a window that begins with the greeting');
SELECT is((SELECT min(b) FROM generate_series(1, 60) b WHERE pg_temp.error_of('4', b) IS NULL),
          (SELECT min(b) FROM generate_series(1, 60) b
           WHERE CASE WHEN pg_temp.error_of('4', b) IS NULL
                      THEN pg_temp.w('4', b) -> 'messages' -> 0 ->> 'content' = 'Please continue.' END),
          'every budget that holds a window holds the user turn and the greeting');

-- a Claude model on Bedrock counts images and tools by Anthropic's rules
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES
  ('bedrock-other-model', 'cl100k_base', 200000, 'bedrock');
CREATE TEMP TABLE img AS SELECT jsonb_build_object('role', 'user', 'content', jsonb_build_array(
    jsonb_build_object('type', 'text', 'text', 'What is in this picture?'),
    jsonb_build_object('type', 'image_url', 'image_url', jsonb_build_object('url',
        'data:image/png;base64,' || encode(decode('89504e470d0a1a0a0000000d4948445200000400000004000802000000f07fbcd4', 'hex'), 'base64')))))
    AS m;
INSERT INTO ctxwin.profiles (name, model) VALUES ('s_bedrock_other', 'bedrock-other-model');
INSERT INTO ctxwin.sessions (id, profile) VALUES
  ('92000000-0000-4000-8000-000000000005', 's_bedrock'),
  ('92000000-0000-4000-8000-000000000006', 's_direct'),
  ('92000000-0000-4000-8000-000000000007', 's_bedrock_other');
INSERT INTO ctxwin.messages (session_id, role, content_parts)
SELECT s.id, 'user', (SELECT m -> 'content' FROM img) FROM ctxwin.sessions s
WHERE s.id::text LIKE '92000000-0000-4000-8000-00000000000_' AND s.id::text > '92000000-0000-4000-8000-000000000004';
CREATE FUNCTION pg_temp.img_tokens(s text) RETURNS int LANGUAGE sql AS $$
    SELECT token_count FROM ctxwin.messages WHERE session_id = ('92000000-0000-4000-8000-00000000000' || s)::uuid $$;
SELECT is(pg_temp.img_tokens('5'), pg_temp.img_tokens('6'),
          'an image costs a Claude model on Bedrock what it costs on Anthropic''s own API');
SELECT isnt(pg_temp.img_tokens('5'), pg_temp.img_tokens('7'),
            '... and another model on Bedrock is counted by another rule');
SELECT is((ctxwin._window('92000000-0000-4000-8000-000000000001', 4000,
                          '[{"type": "function", "function": {"name": "track", "description": "Where an order is.", "parameters": {"type": "object", "properties": {"order": {"type": "string"}}}}}]') ->> 'tool_tokens')::int,
          (ctxwin._window('92000000-0000-4000-8000-000000000002', 4000,
                          '[{"type": "function", "function": {"name": "track", "description": "Where an order is.", "parameters": {"type": "object", "properties": {"order": {"type": "string"}}}}}]') ->> 'tool_tokens')::int,
          'tools cost a Claude model on Bedrock what they cost on Anthropic''s own API');

-- the provider of a model decides: moved off Bedrock, the window is as any other
UPDATE ctxwin.models SET provider = 'anthropic' WHERE name = 'us.anthropic.claude-sonnet-4-20250514-v1:0';
SELECT is(pg_temp.w('1', 4000) -> 'messages' -> 1 ->> 'role', 'assistant',
          'the same model with provider anthropic gets the greeting first');

SELECT * FROM finish();
ROLLBACK;

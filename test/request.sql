-- Tools in the budget, the Anthropic prompt-cache breakpoints and
-- build_request: each with a case a naive implementation gets wrong.  (The
-- tools' counts against counts made without ctxwin, and the same bytes
-- from two connections: test/tool_tokens.pl.)
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

-- a model served by an OpenAI-compatible server (no provider)
INSERT INTO ctxwin.models (name, encoding, context_window) VALUES ('local-llama', 'cl100k_base', 32768);
INSERT INTO ctxwin.profiles (name, model, response_reserve, summary_placement) VALUES
  ('r_sys', 'gpt-4o', 500, 'system'),
  ('r_msg', 'gpt-4o', 500, 'message'),
  ('r_claude', 'claude-sonnet-4', 800, 'message'),
  ('r_local', 'local-llama', 300, 'system'),
  ('r_zero', 'claude-sonnet-4', 0, 'system');
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
  ('90000000-0000-4000-8000-000000000001', 'r_sys', 'You help with invoices.'),
  ('90000000-0000-4000-8000-000000000002', 'r_msg', 'You help with invoices.'),
  ('90000000-0000-4000-8000-000000000003', 'r_claude', 'You help with invoices.'),
  ('90000000-0000-4000-8000-000000000004', 'r_local', 'You help with invoices.'),
  ('90000000-0000-4000-8000-000000000005', 'r_sys', NULL),
  ('90000000-0000-4000-8000-000000000006', 'r_zero', 'You help with invoices.');

-- the same 20 messages in each session, a tool group among them; a summary of
-- the first 4 in all but the fifth
CREATE FUNCTION pg_temp.add(s uuid, r text, c text, calls jsonb DEFAULT NULL, call_id text DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id)
    VALUES (s, r, c, calls, call_id) $$;
DO $$ BEGIN PERFORM pg_temp.add(s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
                       'Turn ' || g || ': invoice INV-' || (100 + g) || ' ' || repeat('line item ' || g || ' ', (g * 5) % 13 + 1))
    FROM ctxwin.sessions s, generate_series(1, 14) g ORDER BY s.id, g; END $$;
DO $$ BEGIN PERFORM pg_temp.add(s.id, 'assistant', 'Looking it up.',
                       '[{"id": "call_1", "type": "function", "function": {"name": "get_invoice", "arguments": "{\"id\": \"INV-114\"}"}}]')
    FROM ctxwin.sessions s ORDER BY s.id; END $$;
DO $$ BEGIN PERFORM pg_temp.add(s.id, 'tool', '{"id": "INV-114", "total": 1250, "paid": false}', NULL, 'call_1')
    FROM ctxwin.sessions s ORDER BY s.id; END $$;
DO $$ BEGIN PERFORM pg_temp.add(s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, 'Later turn ' || g || ' about INV-114.')
    FROM ctxwin.sessions s, generate_series(17, 20) g ORDER BY s.id, g; END $$;
UPDATE ctxwin.sessions SET conversation_summary = 'The user asked about invoices INV-101 to INV-104.', summary_through_id = 4
WHERE id <> '90000000-0000-4000-8000-000000000005';

-- the tools of an agent
CREATE TEMP TABLE t (tools jsonb);
INSERT INTO t VALUES ('[
  {"type": "function", "function": {"name": "get_invoice", "description": "Fetch an invoice by its id.",
   "parameters": {"type": "object", "properties": {"id": {"type": "string", "description": "Invoice id, e.g. INV-101."}}, "required": ["id"]}}},
  {"type": "function", "function": {"name": "send_reminder", "description": "Email a payment reminder",
   "strict": true,
   "parameters": {"type": "object", "properties": {
      "id": {"type": "string"},
      "tone": {"type": "string", "enum": ["friendly", "firm", "final"]},
      "cc": {"type": "array", "items": {"type": "string"}, "description": "Extra recipients."},
      "schedule": {"type": "object", "properties": {"at": {"type": "string", "description": "ISO 8601 time"}, "repeat_days": {"type": "integer"}}}},
    "required": ["id", "tone", "cc", "schedule"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "list_overdue"}}]');

CREATE TEMP TABLE budgets AS SELECT b FROM generate_series(150, 1400, 9) b;
-- those that hold the prompt, the summary, the tools and the newest message
CREATE TEMP TABLE tbudgets AS SELECT b FROM budgets WHERE b >= 420;

-- Tools in the budget ---------------------------------------------------------

SELECT is(ctxwin.count_tool_tokens(tools, 'gpt-4o'), ctxwin.count_tool_tokens(tools, 'o200k_base'), 'count_tool_tokens: a model counts in its encoding (gpt-4o: o200k_base)')
FROM t;
SELECT is(ctxwin.count_tool_tokens(tools, 'claude-sonnet-4'),
          346 + (SELECT sum(ctxwin.count_tokens(a::text, 'cl100k_base'))::int
                 FROM jsonb_array_elements(ctxwin.build_request('90000000-0000-4000-8000-000000000003', 2000, 'anthropic', tools) -> 'tools') a),
          'count_tool_tokens: a Claude model counts the tool-use system prompt (346) and the JSON text of each tool as sent')
FROM t;
SELECT is(ctxwin.count_tool_tokens(tools, 'claude-3-5-haiku') - ctxwin.count_tool_tokens(tools, 'claude-sonnet-4'), 264 - 346,
          'count_tool_tokens: Claude 3.5 Haiku''s tool-use system prompt is 264 tokens')
FROM t;
SELECT is(ctxwin.count_tool_tokens('[]', 'o200k_base'), 0, 'count_tool_tokens: no tools cost nothing');
SELECT is(ctxwin.count_tool_tokens(NULL, 'o200k_base'), NULL, 'count_tool_tokens: NULL tools, NULL');

-- the window with tools is the window of the budget less their tokens: the
-- same messages, for every budget, in both formats
SELECT is((SELECT count(*) FROM tbudgets, t
           WHERE ctxwin.build_context('90000000-0000-4000-8000-000000000001', b, 'openai', tools)
                 IS DISTINCT FROM ctxwin.build_context('90000000-0000-4000-8000-000000000001', b - ctxwin.count_tool_tokens(tools, 'gpt-4o'))
             )::int, 0,
          'build_context with tools = build_context of the budget less the tools'' tokens (openai)');
SELECT is((SELECT count(*) FROM tbudgets, t
           WHERE ctxwin.build_context('90000000-0000-4000-8000-000000000003', b + 900, 'anthropic', tools)
                 IS DISTINCT FROM ctxwin.build_context('90000000-0000-4000-8000-000000000003', b + 900 - ctxwin.count_tool_tokens(tools, 'claude-sonnet-4'), 'anthropic')
             )::int, 0,
          '... and (anthropic, a Claude model: its tools cost the tool-use system prompt too)');
SELECT is(ctxwin.build_context('90000000-0000-4000-8000-000000000001', NULL, 'openai', tools),
          ctxwin.build_context('90000000-0000-4000-8000-000000000001', 128000 - 500 - ctxwin.count_tool_tokens(tools, 'gpt-4o')),
          '... and the default budget (context window less response reserve) less the tools')
FROM t;
-- and the tools did take room: a budget where the window without them holds more
SELECT cmp_ok((SELECT count(*) FROM tbudgets, t
               WHERE jsonb_array_length(ctxwin.build_context('90000000-0000-4000-8000-000000000001', b, 'openai', tools))
                     < jsonb_array_length(ctxwin.build_context('90000000-0000-4000-8000-000000000001', b)))::int, '>', 20,
              'with tools, many budgets hold fewer messages');
-- never over budget: messages + 3 + tools
SELECT is((SELECT count(*) FROM tbudgets, t
           WHERE ctxwin.messages_tokens(ctxwin.build_context('90000000-0000-4000-8000-000000000001', b, 'openai', tools), 'o200k_base')
                 + 3 + ctxwin.count_tool_tokens(tools, 'gpt-4o') > b)::int, 0,
          'invariant 1 with tools: messages, list and tools never exceed the budget');
SELECT is((SELECT count(*) FROM tbudgets, t, LATERAL ctxwin._window('90000000-0000-4000-8000-000000000002', b, tools) w
           WHERE (w ->> 'tool_tokens')::int <> ctxwin.count_tool_tokens(tools, 'gpt-4o')
              OR (w ->> 'tokens')::int <> ctxwin.messages_tokens(w -> 'messages', 'o200k_base') + 3 + (w ->> 'tool_tokens')::int
              OR (w ->> 'tokens')::int > b)::int, 0,
          '_window reports the tools'' tokens, counted in its total, within the budget');
SELECT is((ctxwin._window('90000000-0000-4000-8000-000000000001', 900) ->> 'tool_tokens')::int, 0,
          '_window without tools: tool_tokens 0');
SELECT is(ctxwin.build_context('90000000-0000-4000-8000-000000000001', 600, 'openai', '[]'),
          ctxwin.build_context('90000000-0000-4000-8000-000000000001', 600),
          'an empty tool list takes nothing');
-- a budget that holds the prompt and summary but not the tools too
CREATE FUNCTION pg_temp.err(b int) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ctxwin.build_context('90000000-0000-4000-8000-000000000001', b, 'openai', (SELECT tools FROM t));
    RETURN 'no error';
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN SQLERRM;
END $$;
CREATE TEMP TABLE fixed AS
SELECT 3 + ctxwin.count_message_tokens(ctxwin.build_context('90000000-0000-4000-8000-000000000001', 10000) -> 0, 'o200k_base') AS prompt,
       ctxwin.count_tool_tokens(tools, 'gpt-4o') AS tools
FROM t;
SELECT is(pg_temp.err(prompt + tools - 1),
          format('token budget %s is too small for the system prompt, summary and tools (%s tokens)', prompt + tools - 1, prompt + tools),
          'a budget that cannot hold the prompt, summary and tools is an error that says how many tokens they take')
FROM fixed;
SELECT is(pg_temp.err(prompt - 1),
          format('token budget %s is too small for the system prompt and summary (%s tokens)', prompt - 1, prompt),
          '... and one too small for the prompt and summary alone says so, as without tools')
FROM fixed;

-- Malformed tools: a clear error naming the value, whichever function gets them
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai', '{"type": "function"}')$$,
                 '22023', 'tools must be a JSON array', 'tools: an object');
SELECT throws_ok($$SELECT ctxwin.build_request('90000000-0000-4000-8000-000000000001', 900, 'openai', '"get_invoice"')$$,
                 '22023', 'tools must be a JSON array', 'tools: a string (build_request)');
SELECT throws_ok($$SELECT ctxwin._window('90000000-0000-4000-8000-000000000001', 900, '[42]')$$,
                 '22023', 'tools[0] must be an object', 'tools: an element that is no object (_window)');
SELECT throws_ok($$SELECT ctxwin.count_tool_tokens('[{"type": "web_search"}]', 'gpt-4o')$$,
                 '22023', 'tools[0].type must be "function"', 'tools: a tool that is not a function (count_tool_tokens)');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai', '[{"type": "function"}]')$$,
                 '22023', 'tools[0].function must be an object', 'tools: no function');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"description": "no name"}}]')$$,
                 '22023', 'tools[1].function.name must be a non-empty string', 'tools: the second tool has no name');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000003', 900, 'anthropic',
                   '[{"type": "function", "function": {"name": ""}}]')$$,
                 '22023', 'tools[0].function.name must be a non-empty string', 'tools: an empty name (a Claude model checks the same)');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": 7}}]')$$,
                 '22023', 'tools[0].function.name must be a string', 'tools: a name that is no string');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": "a", "description": ["x"]}}]')$$,
                 '22023', 'tools[0].function.description must be a string', 'tools: a description that is no string');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": "a", "parameters": "object"}}]')$$,
                 '22023', 'tools[0].function.parameters must be an object (a JSON Schema)', 'tools: parameters that are no object');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": ["id"]}}}]')$$,
                 '22023', 'tools[0].function.parameters.properties must be an object', 'tools: properties that are no object');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"id": "string"}}}}]')$$,
                 '22023', 'tools[0].function.parameters.properties.id must be an object (a JSON Schema)', 'tools: a property that is no schema');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties":
                      {"when": {"type": "object", "properties": {"tz": {"type": 5}}}}}}}]')$$,
                 '22023', 'tools[0].function.parameters.properties.when.properties.tz.type must be a string or an array of strings',
                 'tools: a nested property''s type that is no string');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties":
                      {"rows": {"type": "array", "items": {"type": "array", "items": {"type": "object", "properties": {"v": {"description": false}}}}}}}}}]')$$,
                 '22023', 'tools[0].function.parameters.properties.rows.items.items.properties.v.description must be a string',
                 'tools: a description deep in arrays of arrays');
SELECT throws_ok($$SELECT ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai',
                   '[{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"tone": {"type": "string", "enum": "firm"}}}}}]')$$,
                 '22023', 'tools[0].function.parameters.properties.tone.enum must be an array', 'tools: an enum that is no array');

-- Anthropic prompt-cache breakpoints ------------------------------------------

CREATE FUNCTION pg_temp.breakpoints(body jsonb) RETURNS int LANGUAGE sql AS $$
    SELECT jsonb_array_length(jsonb_path_query_array(body, 'strict $.**.cache_control')) $$;
CREATE FUNCTION pg_temp.last_block(body jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT body -> 'messages' -> -1 -> 'content' -> -1 $$;

-- summary appended to the prompt: one system block, with the last message two breakpoints
SELECT is(ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'anthropic') -> 'system',
          '[{"type": "text", "text": "You help with invoices.\n\nSummary of earlier conversation:\nThe user asked about invoices INV-101 to INV-104.", "cache_control": {"type": "ephemeral"}}]',
          'placement system: one system block, prompt and summary, ending in a breakpoint');
SELECT is(pg_temp.last_block(ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'anthropic')),
          '{"type": "text", "text": "Later turn 20 about INV-114.", "cache_control": {"type": "ephemeral"}}',
          'the last block of the last turn is a breakpoint');
SELECT is(pg_temp.breakpoints(ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'anthropic')), 2,
          'placement system: two breakpoints in all');
-- summary as its own message: the prompt and the summary each end in one
SELECT is(ctxwin.build_context('90000000-0000-4000-8000-000000000002', 900, 'anthropic') -> 'system',
          '[{"type": "text", "text": "You help with invoices.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Summary of earlier conversation:\nThe user asked about invoices INV-101 to INV-104.", "cache_control": {"type": "ephemeral"}}]',
          'placement message: the prompt and the summary are two blocks, each ending in a breakpoint');
SELECT is(pg_temp.breakpoints(ctxwin.build_context('90000000-0000-4000-8000-000000000002', 900, 'anthropic')), 3,
          'placement message: three breakpoints in all');
SELECT is((SELECT count(*) FROM budgets, unnest(ARRAY['90000000-0000-4000-8000-000000000001',
                                                      '90000000-0000-4000-8000-000000000002']::uuid[]) s,
                  LATERAL ctxwin.build_context(s, b, 'anthropic') x
           WHERE pg_temp.breakpoints(x) > 4 OR pg_temp.last_block(x) -> 'cache_control' IS NULL
              OR pg_temp.breakpoints(x) <> jsonb_array_length(x -> 'system') + 1)::int, 0,
          'for every budget and both placements: never more than 4, the system blocks and the last block');
-- no prompt, no summary: only the last block
SELECT is(ctxwin.build_context('90000000-0000-4000-8000-000000000005', 900, 'anthropic') ? 'system', false,
          'no prompt, no summary: no system');
SELECT is(pg_temp.breakpoints(ctxwin.build_context('90000000-0000-4000-8000-000000000005', 900, 'anthropic')), 1,
          '... and one breakpoint, on the last block');
-- the newest message a tool result: its tool_result block is the breakpoint
DO $$ BEGIN PERFORM pg_temp.add('90000000-0000-4000-8000-000000000005', 'system', 'Reminders are sent on weekdays only.'); END $$;
DO $$ BEGIN PERFORM pg_temp.add('90000000-0000-4000-8000-000000000005', 'assistant', NULL,
                       '[{"id": "call_2", "type": "function", "function": {"name": "list_overdue", "arguments": "{}"}}]'); END $$;
DO $$ BEGIN PERFORM pg_temp.add('90000000-0000-4000-8000-000000000005', 'tool', '["INV-114"]', NULL, 'call_2'); END $$;
SELECT is(pg_temp.last_block(ctxwin.build_context('90000000-0000-4000-8000-000000000005', 900, 'anthropic')),
          '{"type": "tool_result", "tool_use_id": "call_2", "content": "[\"INV-114\"]", "cache_control": {"type": "ephemeral"}}',
          'a tool result last: its tool_result block carries the breakpoint');
SELECT is(ctxwin.build_context('90000000-0000-4000-8000-000000000005', 900, 'anthropic') -> 'system',
          '[{"type": "text", "text": "Reminders are sent on weekdays only."}]',
          'a system message of the history is a system block without a breakpoint (it leaves as the window moves)');

-- cache => false: the body without breakpoints, "system" one text (0.1.0's shape)
SELECT is(ctxwin.build_context('90000000-0000-4000-8000-000000000002', 900, 'anthropic', cache => false) -> 'system',
          to_jsonb(E'You help with invoices.\n\nSummary of earlier conversation:\nThe user asked about invoices INV-101 to INV-104.'::text),
          'cache => false: system is the system texts joined by a blank line');
SELECT is(pg_temp.breakpoints(ctxwin.build_context('90000000-0000-4000-8000-000000000002', 900, 'anthropic', cache => false)), 0,
          'cache => false: no breakpoint');
SELECT is((SELECT count(*) FROM budgets, LATERAL ctxwin.build_context('90000000-0000-4000-8000-000000000002', b, 'anthropic') x,
                  LATERAL ctxwin.build_context('90000000-0000-4000-8000-000000000002', b, 'anthropic', cache => false) y
           WHERE (SELECT string_agg(e ->> 'text', E'\n\n' ORDER BY n) FROM jsonb_array_elements(x -> 'system') WITH ORDINALITY s(e, n))
                 IS DISTINCT FROM y ->> 'system'
              OR (x #- '{messages,-1,content,-1,cache_control}') -> 'messages' IS DISTINCT FROM y -> 'messages')::int, 0,
          'with and without breakpoints the same texts and blocks, for every budget');
SELECT is(ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai', cache => false),
          ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900),
          'the openai format has no breakpoints: cache changes nothing');

-- build_request -------------------------------------------------------------

SELECT is((SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(ctxwin.build_request('90000000-0000-4000-8000-000000000001', 900, 'openai', tools)) k),
          ARRAY['max_completion_tokens', 'messages', 'model', 'prompt_cache_key', 'tools'],
          'openai body: model, messages, max_completion_tokens, tools, prompt_cache_key')
FROM t;
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000001', 900, 'openai', tools),
          jsonb_build_object('model', 'gpt-4o',
                             'messages', ctxwin.build_context('90000000-0000-4000-8000-000000000001', 900, 'openai', tools),
                             'max_completion_tokens', 500, 'tools', tools,
                             'prompt_cache_key', '90000000-0000-4000-8000-000000000001'),
          'openai body: the profile''s model and response_reserve, build_context''s messages, the tools as given, the session id as cache key')
FROM t;
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000004', 900, 'openai') - 'messages',
          '{"model": "local-llama", "max_tokens": 300, "prompt_cache_key": "90000000-0000-4000-8000-000000000004"}',
          'openai body for a model without provider (an OpenAI-compatible server): max_tokens; no tools: no "tools"');
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000001', 900, 'openai', '[]', cache => false) - 'messages',
          '{"model": "gpt-4o", "max_completion_tokens": 500}',
          'openai body: an empty tool list is left out; cache => false leaves out prompt_cache_key');
SELECT is((SELECT count(*) FROM tbudgets, t
           WHERE ctxwin.messages_tokens(ctxwin.build_request('90000000-0000-4000-8000-000000000001', b, 'openai', tools) -> 'messages', 'o200k_base')
                 + 3 + ctxwin.count_tool_tokens(tools, 'gpt-4o') > b)::int, 0,
          'openai body: its messages and tools within the budget');

SELECT is((SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(ctxwin.build_request('90000000-0000-4000-8000-000000000003', 2000, 'anthropic', tools)) k),
          ARRAY['max_tokens', 'messages', 'model', 'system', 'tools'],
          'anthropic body: model, system, messages, max_tokens, tools')
FROM t;
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000003', 2000, 'anthropic', tools) - 'tools',
          ctxwin.build_context('90000000-0000-4000-8000-000000000003', 2000, 'anthropic', tools)
          || '{"model": "claude-sonnet-4", "max_tokens": 800}',
          'anthropic body: build_context''s system and messages, breakpoints included, the model and response_reserve')
FROM t;
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000003', 2000, 'anthropic', tools) -> 'tools',
          '[{"name": "get_invoice", "description": "Fetch an invoice by its id.",
             "input_schema": {"type": "object", "properties": {"id": {"type": "string", "description": "Invoice id, e.g. INV-101."}}, "required": ["id"]}},
            {"name": "send_reminder", "description": "Email a payment reminder",
             "input_schema": {"type": "object", "properties": {
                "id": {"type": "string"},
                "tone": {"type": "string", "enum": ["friendly", "firm", "final"]},
                "cc": {"type": "array", "items": {"type": "string"}, "description": "Extra recipients."},
                "schedule": {"type": "object", "properties": {"at": {"type": "string", "description": "ISO 8601 time"}, "repeat_days": {"type": "integer"}}}},
              "required": ["id", "tone", "cc", "schedule"], "additionalProperties": false}},
            {"name": "list_overdue", "input_schema": {"type": "object", "properties": {}}}]',
          'anthropic body: tools as Anthropic tools (name, description, input_schema; no "strict"; no parameters: an empty object)')
FROM t;
SELECT is(pg_temp.breakpoints(ctxwin.build_request('90000000-0000-4000-8000-000000000003', 2000, 'anthropic', tools)), 3,
          'anthropic body: the breakpoints of the prompt, the summary and the last message, none on the tools')
FROM t;
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000003', 2000, 'anthropic', cache => false) ->> 'system',
          E'You help with invoices.\n\nSummary of earlier conversation:\nThe user asked about invoices INV-101 to INV-104.',
          'anthropic body, cache => false: system as one text');
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000003', 2000, 'anthropic', '[]') ? 'tools', false,
          'anthropic body: an empty tool list is left out');
SELECT throws_ok($$SELECT ctxwin.build_request('90000000-0000-4000-8000-000000000006', 2000, 'anthropic')$$,
                 '22023', 'profile "r_zero" has a response_reserve of 0, and an Anthropic request needs max_tokens of at least 1',
                 'anthropic body: a response_reserve of 0 is an error');
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000006', 2000, 'openai') ? 'max_tokens', false,
          'openai body: a response_reserve of 0 leaves the limit out');
SELECT is(ctxwin.build_request('90000000-0000-4000-8000-000000000001') -> 'messages',
          ctxwin.build_context('90000000-0000-4000-8000-000000000001'),
          'build_request with the defaults: build_context''s default window');
SELECT throws_ok($$SELECT ctxwin.build_request('90000000-0000-4000-8000-000000000001', 900, 'vertex')$$,
                 '22023', 'unrecognized format "vertex"', 'build_request: an unknown format');
SELECT throws_ok($$SELECT ctxwin.build_request('90000000-0000-4000-8000-0000000000ff')$$,
                 'P0002', 'session 90000000-0000-4000-8000-0000000000ff does not exist', 'build_request: an unknown session');
SELECT throws_ok($$SELECT ctxwin.build_request(NULL)$$, '22004', 'session id must not be null', 'build_request: a NULL session');

-- the functions are what the contract says
SELECT is((SELECT p.provolatile::text || ' ' || array_to_string(p.proconfig, ',') FROM pg_proc p
           WHERE p.oid = 'ctxwin.build_request(uuid, int, text, jsonb, boolean, boolean)'::regprocedure),
          's search_path=pg_catalog, pg_temp', 'build_request is STABLE with a pinned search_path');
SELECT is((SELECT p.provolatile::text || ' ' || array_to_string(p.proconfig, ',') FROM pg_proc p
           WHERE p.oid = 'ctxwin.build_context(uuid, int, text, jsonb, boolean)'::regprocedure),
          's search_path=pg_catalog, pg_temp', 'build_context(session, budget, format, tools, cache) is STABLE with a pinned search_path');
SELECT has_function('ctxwin', 'count_tool_tokens', ARRAY['jsonb', 'text'], 'count_tool_tokens(jsonb, text) exists');
SELECT hasnt_function('ctxwin', 'build_context', ARRAY['uuid', 'integer', 'text'], 'the 3-argument build_context is gone (no ambiguous calls)');

SELECT * FROM finish();
ROLLBACK;

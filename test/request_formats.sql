-- build_request in the formats the provider files add (src/llm/responses.c,
-- src/llm/gemini.c): the same window as the openai body, in OpenAI's
-- Responses shape and in Gemini's generateContent shape, with the tool
-- group, the tools and the answer's limit where each API wants them.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

INSERT INTO ctxwin.profiles (name, model, response_reserve, summary_placement) VALUES
  ('f_sys', 'gpt-4o', 500, 'system'),
  ('f_msg', 'gpt-4o', 0, 'message');
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
  ('91000000-0000-4000-8000-000000000001', 'f_sys', 'You help with invoices.'),
  ('91000000-0000-4000-8000-000000000002', 'f_msg', 'You help with invoices.');
\ir lib/add.sql
DO $$ BEGIN
    PERFORM pg_temp.add(s.id, 'user', 'Is INV-114 paid?') FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'assistant', 'Looking it up.',
                        '[{"id": "call_1", "type": "function", "function": {"name": "get_invoice", "arguments": "{\"id\": \"INV-114\"}"}},
                          {"id": "call_2", "type": "function", "function": {"name": "list_overdue", "arguments": "not json"}}]')
    FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'tool', '{"id": "INV-114", "total": 1250, "paid": false}', NULL, 'call_1')
    FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'tool', '["INV-114"]', NULL, 'call_2') FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'assistant', 'INV-114 is not paid: 1250 is due.') FROM ctxwin.sessions s ORDER BY s.id;
    PERFORM pg_temp.add(s.id, 'user', 'Send a reminder.') FROM ctxwin.sessions s ORDER BY s.id;
END $$;
UPDATE ctxwin.sessions SET conversation_summary = 'The user asked about invoices INV-101 to INV-104.';

CREATE TEMP TABLE t (tools jsonb);
INSERT INTO t VALUES ('[
  {"type": "function", "function": {"name": "get_invoice", "description": "Fetch an invoice by its id.",
   "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}},
  {"type": "function", "function": {"name": "send_reminder", "strict": true,
   "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "list_overdue"}}]');

CREATE TEMP TABLE b AS
SELECT s.id,
       ctxwin.build_request(s.id, 4000, 'openai', t.tools) AS chat,
       ctxwin.build_request(s.id, 4000, 'responses', t.tools) AS resp,
       ctxwin.build_request(s.id, 4000, 'gemini', t.tools) AS gem
FROM ctxwin.sessions s, t;

-- Responses ------------------------------------------------------------------
SELECT is((SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(resp) k),
          '{input,max_output_tokens,model,prompt_cache_key,tools}',
          'responses: model, input, max_output_tokens, tools and prompt_cache_key')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT is(resp ->> 'max_output_tokens', '500', 'responses: the profile''s response_reserve as max_output_tokens')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT ok(NOT resp ? 'max_output_tokens', 'responses: a response_reserve of 0 leaves the limit out')
FROM b WHERE id = '91000000-0000-4000-8000-000000000002';
SELECT is(resp ->> 'prompt_cache_key', id::text, 'responses: the session as prompt_cache_key') FROM b;
SELECT is((SELECT jsonb_agg(coalesce(i ->> 'type', 'message') || ':' || coalesce(i ->> 'role', i ->> 'call_id'))
           FROM jsonb_array_elements(resp -> 'input') i),
          '["message:system", "message:user", "message:assistant", "function_call:call_1", "function_call:call_2",
            "function_call_output:call_1", "function_call_output:call_2", "message:assistant", "message:user"]'::jsonb,
          'responses: the window''s messages in order; the assistant''s text, then a function_call item per tool call, then their outputs')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT is((SELECT jsonb_agg(i - 'type') FROM jsonb_array_elements(resp -> 'input') i WHERE i ->> 'type' = 'function_call'),
          '[{"call_id": "call_1", "name": "get_invoice", "arguments": "{\"id\": \"INV-114\"}"},
            {"call_id": "call_2", "name": "list_overdue", "arguments": "not json"}]'::jsonb,
          'responses: each tool call with its call_id, name and arguments as stored')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT is((SELECT i ->> 'output' FROM jsonb_array_elements(resp -> 'input') i WHERE i ->> 'call_id' = 'call_1' AND i ->> 'type' = 'function_call_output'),
          '{"id": "INV-114", "total": 1250, "paid": false}', 'responses: a tool result as the output of its call')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT is((SELECT jsonb_agg(i -> 'content') FROM jsonb_array_elements(resp -> 'input') i WHERE i ? 'role'),
          (SELECT jsonb_agg(m -> 'content') FROM jsonb_array_elements(chat -> 'messages') m
           WHERE NOT (m ? 'tool_call_id')),
          'responses: every message''s content is the openai body''s (the same window, summary included)')
FROM b;
SELECT is(resp -> 'tools',
          '[{"type": "function", "name": "get_invoice", "description": "Fetch an invoice by its id.",
             "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}},
            {"type": "function", "name": "send_reminder", "strict": true,
             "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": false}},
            {"type": "function", "name": "list_overdue"}]'::jsonb,
          'responses: the tools flattened, as the Responses API takes them')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';

-- Gemini ---------------------------------------------------------------------
SELECT is((SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(gem) k),
          '{contents,generationConfig,systemInstruction,tools}',
          'gemini: contents, systemInstruction, tools, generationConfig; no model (it goes into the URL)')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT is(gem -> 'generationConfig', '{"maxOutputTokens": 500}', 'gemini: response_reserve as maxOutputTokens')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT ok(NOT gem ? 'generationConfig', 'gemini: a response_reserve of 0 leaves it out')
FROM b WHERE id = '91000000-0000-4000-8000-000000000002';
SELECT is((SELECT string_agg(p ->> 'text', E'\n') FROM jsonb_array_elements(gem -> 'systemInstruction' -> 'parts') p),
          (SELECT string_agg(m ->> 'content', E'\n') FROM jsonb_array_elements(chat -> 'messages') m WHERE m ->> 'role' = 'system'),
          'gemini: the system messages (prompt and summary) as systemInstruction')
FROM b;
SELECT is((SELECT jsonb_agg(c ->> 'role') FROM jsonb_array_elements(gem -> 'contents') c),
          '["user", "model", "user", "model", "user"]'::jsonb,
          'gemini: turns alternate: the two tool results are one user turn, the assistant''s are model turns')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT is(gem -> 'contents' -> 1 -> 'parts',
          '[{"text": "Looking it up."},
            {"functionCall": {"id": "call_1", "name": "get_invoice", "args": {"id": "INV-114"}}},
            {"functionCall": {"id": "call_2", "name": "list_overdue", "args": {"arguments": "not json"}}}]'::jsonb,
          'gemini: the tool calls as functionCall parts, their arguments an object (arguments that are not one are wrapped)')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT is(gem -> 'contents' -> 2 -> 'parts',
          '[{"functionResponse": {"id": "call_1", "name": "get_invoice", "response": {"output": "{\"id\": \"INV-114\", \"total\": 1250, \"paid\": false}"}}},
            {"functionResponse": {"id": "call_2", "name": "list_overdue", "response": {"output": "[\"INV-114\"]"}}}]'::jsonb,
          'gemini: the tool results as functionResponse parts named by their calls')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';
SELECT is(gem -> 'tools',
          '[{"functionDeclarations": [
             {"name": "get_invoice", "description": "Fetch an invoice by its id.",
              "parametersJsonSchema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}},
             {"name": "send_reminder",
              "parametersJsonSchema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": false}},
             {"name": "list_overdue"}]}]'::jsonb,
          'gemini: the tools as one functionDeclarations list, their JSON Schema as parametersJsonSchema')
FROM b WHERE id = '91000000-0000-4000-8000-000000000001';

-- Gemini 3's thought signature on a call, stored as Gemini's OpenAI
-- compatibility returns it, goes back with its functionCall part
INSERT INTO ctxwin.sessions (id, profile) VALUES ('91000000-0000-4000-8000-000000000003', 'f_sys');
SELECT pg_temp.add('91000000-0000-4000-8000-000000000003', 'user', 'Weather in Paris?');
SELECT pg_temp.add('91000000-0000-4000-8000-000000000003', 'assistant', NULL,
                   '[{"id": "call_w", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"},
                      "extra_content": {"google": {"thought_signature": "CsQBAb4+9vu7"}}},
                     {"id": "call_x", "type": "function", "function": {"name": "time", "arguments": "{}"}}]');
SELECT pg_temp.add('91000000-0000-4000-8000-000000000003', 'tool', '18 C', NULL, 'call_w');
SELECT pg_temp.add('91000000-0000-4000-8000-000000000003', 'tool', '14:00', NULL, 'call_x');
SELECT is(ctxwin.build_request('91000000-0000-4000-8000-000000000003', 4000, 'gemini') -> 'contents' -> 1 -> 'parts',
          '[{"functionCall": {"id": "call_w", "name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "CsQBAb4+9vu7"},
            {"functionCall": {"id": "call_x", "name": "time", "args": {}}}]'::jsonb,
          'gemini: a call''s thought signature goes back beside its functionCall; a call without one gets none');

-- a format no provider has
SELECT throws_ok($$SELECT ctxwin.build_request('91000000-0000-4000-8000-000000000001', 4000, 'bedrock')$$,
                 '22023', 'unrecognized format "bedrock"', 'an unknown format is refused');
CREATE FUNCTION pg_temp.hint_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE h text;
BEGIN
    EXECUTE q;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
    RETURN h;
END $$;
SELECT is(pg_temp.hint_of($$SELECT ctxwin.build_request('91000000-0000-4000-8000-000000000001', 4000, 'bedrock')$$),
          'Valid formats are openai, anthropic, responses and gemini.', 'and the hint names every format');

SELECT * FROM finish();
ROLLBACK;

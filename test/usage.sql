-- The bill: record_usage with the providers' usage objects as they come,
-- their normalization, the errors, the ledger and usage views against the
-- rows and against costs worked out by hand, LLM summaries in the ledger,
-- and the calibration of a model's budget margin.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;
SET ctxwin.llm_provider = 'openai';

-- Usage objects as the providers document them.
-- OpenAI Chat Completions, the prompt caching guide: prompt_tokens includes
-- the cached_tokens.
CREATE TEMP TABLE shapes (name text PRIMARY KEY, usage jsonb);
INSERT INTO shapes VALUES
    ('chat cached', '{"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                      "prompt_tokens_details": {"cached_tokens": 1920},
                      "completion_tokens_details": {"reasoning_tokens": 0, "accepted_prediction_tokens": 0,
                                                    "rejected_prediction_tokens": 0}}'),
    -- the Chat Completions API reference's example object
    ('chat', '{"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
               "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
               "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}'),
    -- what OpenAI-compatible servers (and test/mockllm.py) send
    ('chat bare', '{"prompt_tokens": 1200, "completion_tokens": 150, "total_tokens": 1350}'),
    -- the Responses API reference's example, and one with a cache hit
    ('responses', '{"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 87,
                    "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 123}'),
    ('responses cached', '{"input_tokens": 5000, "input_tokens_details": {"cached_tokens": 4096}, "output_tokens": 512,
                           "output_tokens_details": {"reasoning_tokens": 448}, "total_tokens": 5512}'),
    -- Anthropic Messages, the prompt caching docs: the first call writes the
    -- cache, the next reads it; input_tokens is neither
    ('anthropic write', '{"input_tokens": 21, "cache_creation_input_tokens": 188086, "cache_read_input_tokens": 0,
                          "output_tokens": 393}'),
    ('anthropic read', '{"input_tokens": 21, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 188086,
                         "output_tokens": 393}'),
    -- the current Messages API, with the cache writes by lifetime and more
    ('anthropic now', '{"input_tokens": 2095, "output_tokens": 503, "cache_creation_input_tokens": 2051,
                        "cache_read_input_tokens": 2051,
                        "cache_creation": {"ephemeral_5m_input_tokens": 2051, "ephemeral_1h_input_tokens": 0},
                        "server_tool_use": {"web_search_requests": 0}, "service_tier": "standard"}'),
    -- without caching, the cache fields are null or absent
    ('anthropic plain', '{"input_tokens": 12, "output_tokens": 6, "cache_creation_input_tokens": null,
                          "cache_read_input_tokens": null}'),
    ('anthropic bare', '{"input_tokens": 12, "output_tokens": 6}'),
    -- Gemini's usageMetadata, from the generateContent reference: a
    -- thinking model's thoughts are billed as output; a context cache hit
    -- is part of promptTokenCount; tool-use prompts are input too
    ('gemini', '{"promptTokenCount": 11, "candidatesTokenCount": 26, "totalTokenCount": 37,
                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 11}]}'),
    ('gemini thinking', '{"promptTokenCount": 4200, "cachedContentTokenCount": 4096, "candidatesTokenCount": 180,
                          "thoughtsTokenCount": 612, "toolUsePromptTokenCount": 35, "totalTokenCount": 5027}'),
    -- a prompt blocked before any candidate: no candidatesTokenCount
    ('gemini blocked', '{"promptTokenCount": 9, "totalTokenCount": 9}');

SELECT results_eq(
    $$SELECT s.name, t.provider, t.input_tokens, t.cached_tokens, t.cache_write_tokens, t.output_tokens
      FROM shapes s, ctxwin.usage_tokens(s.usage) t ORDER BY s.name$$,
    $$VALUES ('anthropic bare', 'anthropic', 12::bigint, 0::bigint, 0::bigint, 6::bigint),
             ('anthropic now', 'anthropic', 6197, 2051, 2051, 503),
             ('anthropic plain', 'anthropic', 12, 0, 0, 6),
             ('anthropic read', 'anthropic', 188107, 188086, 0, 393),
             ('anthropic write', 'anthropic', 188107, 0, 188086, 393),
             ('chat', 'openai', 19, 0, 0, 10),
             ('chat bare', 'openai', 1200, 0, 0, 150),
             ('chat cached', 'openai', 2006, 1920, 0, 300),
             ('gemini', 'gemini', 11, 0, 0, 26),
             ('gemini blocked', 'gemini', 9, 0, 0, 0),
             ('gemini thinking', 'gemini', 4235, 4096, 0, 792),
             ('responses', 'openai', 36, 0, 0, 87),
             ('responses cached', 'openai', 5000, 4096, 0, 512)$$,
    'usage_tokens normalizes each shape: input is every prompt token (OpenAI''s and Gemini''s include their cache reads, Anthropic''s is added to its cache reads and writes; Gemini''s tool-use prompt is input, its thoughts output)');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"promptTokenCount": 5, "candidatesTokenCount": 1, "prompt_tokens": 5}')$$,
                 '22023', 'usage is not an OpenAI, Anthropic or Gemini usage object', 'Gemini''s shape with OpenAI''s');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"candidatesTokenCount": 3}')$$,
                 '22023', 'usage field "promptTokenCount" is missing', 'a Gemini object without its prompt count');

-- What a usage object that is none of them gets.
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"tokens": 5, "cost": 1}')$$, '22023',
                 'usage is not an OpenAI, Anthropic or Gemini usage object', 'an object of neither shape');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"prompt_tokens": 5, "completion_tokens": 1, "input_tokens": 5, "output_tokens": 1}')$$,
                 '22023', 'usage is not an OpenAI, Anthropic or Gemini usage object', 'an object of both shapes');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"input_tokens": 5, "output_tokens": 1, "total_tokens": 6, "cache_read_input_tokens": 0}')$$,
                 '22023', 'usage is not an OpenAI, Anthropic or Gemini usage object',
                 'a Responses API object with Anthropic''s cache fields');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('[{"prompt_tokens": 5}]')$$, '22023',
                 'usage must be a JSON object, not array', 'an array');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"prompt_tokens": -3, "completion_tokens": 1}')$$, '22023',
                 'usage field "prompt_tokens" must be a non-negative integer', 'a negative count');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"prompt_tokens": 12.5, "completion_tokens": 1}')$$, '22023',
                 'usage field "prompt_tokens" must be a non-negative integer', 'a count that is not an integer');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"input_tokens": "12", "output_tokens": 1}')$$, '22023',
                 'usage field "input_tokens" must be a non-negative integer', 'a count that is a string');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": -1}')$$,
                 '22023', 'usage field "cache_read_input_tokens" must be a non-negative integer',
                 'a negative cache count');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"prompt_tokens": 12, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 1.5}}')$$,
                 '22023', 'usage field "prompt_tokens_details.cached_tokens" must be a non-negative integer',
                 'a nested count that is not an integer');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"prompt_tokens": 12, "total_tokens": 12}')$$, '22023',
                 'usage field "completion_tokens" is missing', 'a count that must be there');
SELECT throws_ok($$SELECT ctxwin.usage_tokens('{"prompt_tokens": 20, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 30}}')$$,
                 '22023', 'usage counts more cached tokens (30) than input tokens (20)',
                 'more cached tokens than prompt tokens');
SELECT is((SELECT row(t.*)::text FROM ctxwin.usage_tokens('{"tokens": 5}', true) t), '(,,,,)',
          'quiet: an object of neither shape gives NULLs');
SELECT is((SELECT row(t.*)::text FROM ctxwin.usage_tokens('{"prompt_tokens": -1, "completion_tokens": 1}', true) t), '(,,,,)',
          'quiet: a count it cannot read gives NULLs, not the other counts');

-- Sessions of three models: an OpenAI one, a Claude one (counted with
-- cl100k_base, Anthropic's tokenizer is another), a Gemini one (no prices).
INSERT INTO ctxwin.profiles (name, model, response_reserve, summary_strategy, summary_model, max_messages_before_summary)
VALUES ('gpt', 'gpt-4o', 4096, 'llm', 'gpt-4o-mini', 100),
       ('claude', 'claude-sonnet-4-5', 1000, 'llm', 'claude-3-5-haiku', 100),
       ('gemini', 'gemini-2.5-flash', 8192, 'extractive', NULL, 100);
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
    ('00000000-0000-4000-8000-0000000000a1', 'gpt', 'You are terse.'),
    ('00000000-0000-4000-8000-0000000000a2', 'claude', 'You are terse.'),
    ('00000000-0000-4000-8000-0000000000a3', 'gemini', 'You are terse.');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT s, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, format('Turn %s: the order %s ships on day %s.', g, g * 7, g)
FROM unnest(ARRAY['00000000-0000-4000-8000-0000000000a1', '00000000-0000-4000-8000-0000000000a2',
                  '00000000-0000-4000-8000-0000000000a3']::uuid[]) s, generate_series(1, 12) g;

-- record_usage: the errors first
SELECT throws_ok($$SELECT ctxwin.record_usage(NULL, '{"prompt_tokens": 1, "completion_tokens": 1}')$$, '22004',
                 'session id must not be null', 'a NULL session');
SELECT throws_ok($$SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000ff', '{"prompt_tokens": 1, "completion_tokens": 1}')$$,
                 'P0002', 'session 00000000-0000-4000-8000-0000000000ff does not exist',
                 'an unknown session: the error every function of ctxwin gives');
SELECT throws_ok($$SELECT ctxwin.context_status('00000000-0000-4000-8000-0000000000ff')$$,
                 'P0002', 'session 00000000-0000-4000-8000-0000000000ff does not exist',
                 '... as context_status gives it');
SELECT throws_ok($$SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a1', NULL)$$, '22004',
                 'usage must not be null', 'a NULL usage');
SELECT throws_ok($$SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a1', '{"total": 3}')$$, '22023',
                 'usage is not an OpenAI, Anthropic or Gemini usage object', 'a usage object of neither shape');
SELECT throws_ok($$SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a1', '{"prompt_tokens": 1, "completion_tokens": 1}', 13, 100)$$,
                 '22023', 'window_first_id 13 is not a message of session 00000000-0000-4000-8000-0000000000a1',
                 'a window that starts past the newest message');
SELECT throws_ok($$SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a1', '{"prompt_tokens": 1, "completion_tokens": 1}', NULL, 0)$$,
                 '22023', 'window_tokens must be greater than zero', 'a window of no tokens');
SELECT is((SELECT count(*) FROM ctxwin.usage_log), 0::bigint, '... and none of them recorded anything');

-- Without a window, the request answered the window build_context returns now.
CREATE TEMP TABLE before_a1 AS
SELECT (w ->> 'first_id')::bigint AS first_id, (w ->> 'tokens')::int AS tokens
FROM ctxwin._window('00000000-0000-4000-8000-0000000000a1', NULL) w;
SELECT is(ctxwin.record_usage('00000000-0000-4000-8000-0000000000a1', (SELECT usage FROM shapes WHERE name = 'chat cached')),
          1::bigint, 'the first request of a session is 1');
SELECT is(ctxwin.record_usage('00000000-0000-4000-8000-0000000000a1', (SELECT usage FROM shapes WHERE name = 'chat'), 5, 180),
          2::bigint, '... the next 2');
SELECT is(ctxwin.record_usage('00000000-0000-4000-8000-0000000000a2', (SELECT usage FROM shapes WHERE name = 'anthropic write'), 1, 156000),
          1::bigint, 'requests are numbered per session');
SELECT results_eq(
    $$SELECT id, kind, provider, model, input_tokens, cached_tokens, cache_write_tokens, output_tokens,
             window_first_id, window_tokens, window_encoding
      FROM ctxwin.usage_log ORDER BY session_id, id$$,
    $$VALUES (1::bigint, 'request', 'openai', 'gpt-4o', 2006::bigint, 1920::bigint, 0::bigint, 300::bigint,
              (SELECT first_id FROM before_a1), (SELECT tokens FROM before_a1), 'o200k_base'),
             (2, 'request', 'openai', 'gpt-4o', 19, 0, 0, 10, 5, 180, 'o200k_base'),
             (1, 'request', 'anthropic', 'claude-sonnet-4-5', 188107, 0, 188086, 393, 1, 156000, 'cl100k_base')$$,
    'each row: the normalized counts, the session''s model, and the window (_window''s first id and tokens when none is given)');
SELECT ok((SELECT first_id FROM before_a1) = 1 AND (SELECT tokens FROM before_a1) > 100,
          '... that window held every message');
SELECT is((SELECT usage FROM ctxwin.usage_log WHERE session_id = '00000000-0000-4000-8000-0000000000a1' AND id = 1),
          (SELECT usage FROM shapes WHERE name = 'chat cached'), 'the usage object is kept as it came');
SELECT is((SELECT window_tokens FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a1')),
          (SELECT tokens FROM before_a1), 'context_status''s window_tokens is the same window');

-- A model that changes later leaves the recorded model as it was.
UPDATE ctxwin.profiles SET model = 'gpt-4o-mini' WHERE name = 'gpt';
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a1', (SELECT usage FROM shapes WHERE name = 'responses cached'), 1, 200);
UPDATE ctxwin.profiles SET model = 'gpt-4o' WHERE name = 'gpt';
SELECT is((SELECT array_agg(model ORDER BY id) FROM ctxwin.usage_log WHERE session_id = '00000000-0000-4000-8000-0000000000a1'),
          ARRAY['gpt-4o', 'gpt-4o', 'gpt-4o-mini'], 'the model is the profile''s when the usage was recorded');
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a3', (SELECT usage FROM shapes WHERE name = 'chat bare'), 1, 1100);

-- Summaries: made through the summary code with the answers providers give,
-- dated model names included.
CREATE FUNCTION pg_temp.openai_answer(model text, usage jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('status', 200, 'provider', 'openai', 'latency_ms', 5,
        'body', jsonb_build_object('model', model, 'usage', usage,
            'choices', jsonb_build_array(jsonb_build_object('index', 0, 'finish_reason', 'stop',
                'message', jsonb_build_object('role', 'assistant', 'content', 'Orders ship on their day.'))))) $$;
CREATE FUNCTION pg_temp.anthropic_answer(model text, usage jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('status', 200, 'provider', 'anthropic', 'latency_ms', 5,
        'body', jsonb_build_object('model', model, 'usage', usage, 'type', 'message', 'role', 'assistant',
            'stop_reason', 'end_turn',
            'content', jsonb_build_array(jsonb_build_object('type', 'text', 'text', 'Orders ship on their day.')))) $$;
SELECT ok((ctxwin._summary_finish(ctxwin._summary_plan('00000000-0000-4000-8000-0000000000a1', true, NULL),
                                  pg_temp.openai_answer('gpt-4o-mini-2024-07-18', (SELECT usage FROM shapes WHERE name = 'chat bare')))).version = 1,
          'an OpenAI summary of the gpt session');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '00000000-0000-4000-8000-0000000000a1', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, format('More %s.', g)
FROM generate_series(13, 22) g;
SELECT ok((ctxwin._summary_finish(ctxwin._summary_plan('00000000-0000-4000-8000-0000000000a1', true, NULL),
                                  pg_temp.openai_answer('gpt-4o-mini-2024-07-18', NULL))).version = 2,
          '... and one whose answer reported no usage');
SELECT ok((ctxwin._summary_finish(ctxwin._summary_plan('00000000-0000-4000-8000-0000000000a2', true, NULL),
                                  pg_temp.anthropic_answer('claude-3-5-haiku-20241022', (SELECT usage FROM shapes WHERE name = 'anthropic read')))).version = 1,
          'an Anthropic summary of the claude session');
SELECT ok((ctxwin.summarize_session('00000000-0000-4000-8000-0000000000a3', true)).strategy = 'extractive',
          'an extractive summary of the gemini session (no LLM call)');

SELECT results_eq(
    $$SELECT session_id, kind, id, provider, model, input_tokens, cached_tokens, cache_write_tokens, output_tokens
      FROM ctxwin.usage_ledger WHERE kind = 'summary' ORDER BY session_id, id$$,
    $$VALUES ('00000000-0000-4000-8000-0000000000a1'::uuid, 'summary', 1::bigint, 'openai', 'gpt-4o-mini-2024-07-18',
              1200::bigint, 0::bigint, 0::bigint, 150::bigint),
             ('00000000-0000-4000-8000-0000000000a1'::uuid, 'summary', 2::bigint, NULL, 'gpt-4o-mini-2024-07-18',
              NULL, NULL, NULL, NULL),
             ('00000000-0000-4000-8000-0000000000a2'::uuid, 'summary', 1::bigint, 'anthropic', 'claude-3-5-haiku-20241022',
              188107::bigint, 188086::bigint, 0::bigint, 393::bigint)$$,
    'the ledger holds the LLM summaries, normalized as record_usage does, and not the extractive one');
SELECT is((SELECT count(*) FROM ctxwin.usage_ledger WHERE kind = 'request'), (SELECT count(*) FROM ctxwin.usage_log),
          '... and every recorded request');

-- Costs by hand, at the prices of the built-in rows (per million tokens).
-- gpt-4o (2.50 input, 1.25 cached, 10 output):
--   request 1: (2006 - 1920) * 2.50 + 1920 * 1.25 + 300 * 10 = 5615
--   request 2: 19 * 2.50 + 10 * 10 = 147.5
-- gpt-4o-mini (0.15, 0.075, 0.60):
--   request 3: (5000 - 4096) * 0.15 + 4096 * 0.075 + 512 * 0.60 = 750
--   summary 1 (gpt-4o-mini-2024-07-18): 1200 * 0.15 + 150 * 0.60 = 270
-- claude-sonnet-4-5 (3 input, 0.30 cache read, 3.75 cache write, 15 output):
--   request 1: 21 * 3 + 188086 * 3.75 + 393 * 15 = 711280.5
-- claude-3-5-haiku (0.80, 0.08, 1, 4):
--   summary 1: 21 * 0.80 + 188086 * 0.08 + 393 * 4 = 16635.68
SELECT results_eq(
    $$SELECT session_id, kind, id, cost FROM ctxwin.usage_ledger ORDER BY session_id, kind, id$$,
    $$VALUES ('00000000-0000-4000-8000-0000000000a1'::uuid, 'request', 1::bigint, 0.005615),
             ('00000000-0000-4000-8000-0000000000a1'::uuid, 'request', 2::bigint, 0.0001475),
             ('00000000-0000-4000-8000-0000000000a1'::uuid, 'request', 3::bigint, 0.00075),
             ('00000000-0000-4000-8000-0000000000a1'::uuid, 'summary', 1::bigint, 0.00027),
             ('00000000-0000-4000-8000-0000000000a1'::uuid, 'summary', 2::bigint, NULL),
             ('00000000-0000-4000-8000-0000000000a2'::uuid, 'request', 1::bigint, 0.7112805),
             ('00000000-0000-4000-8000-0000000000a2'::uuid, 'summary', 1::bigint, 0.01663568),
             ('00000000-0000-4000-8000-0000000000a3'::uuid, 'request', 1::bigint, NULL)$$,
    'each call''s cost by hand; NULL without usage, and for a model without prices (Gemini)');

SELECT results_eq(
    $$SELECT session_id, profile, requests, input_tokens, cached_tokens, cache_write_tokens, output_tokens,
             cache_hit_ratio, summary_requests, summary_input_tokens, summary_output_tokens
      FROM ctxwin.usage ORDER BY session_id$$,
    $$SELECT s.id, s.profile,
             count(l.id), coalesce(sum(l.input_tokens), 0)::bigint, coalesce(sum(l.cached_tokens), 0)::bigint,
             coalesce(sum(l.cache_write_tokens), 0)::bigint, coalesce(sum(l.output_tokens), 0)::bigint,
             round(sum(l.cached_tokens) / nullif(sum(l.input_tokens), 0), 4),
             (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id AND x.strategy = 'llm'),
             coalesce((SELECT sum(coalesce((x.usage ->> 'prompt_tokens')::bigint,
                                           (x.usage ->> 'input_tokens')::bigint
                                           + (x.usage ->> 'cache_read_input_tokens')::bigint
                                           + (x.usage ->> 'cache_creation_input_tokens')::bigint))
                       FROM ctxwin.summaries x WHERE x.session_id = s.id AND x.strategy = 'llm'), 0)::bigint,
             coalesce((SELECT sum(coalesce(x.usage ->> 'completion_tokens', x.usage ->> 'output_tokens')::bigint)
                       FROM ctxwin.summaries x WHERE x.session_id = s.id AND x.strategy = 'llm'), 0)::bigint
      FROM ctxwin.sessions s LEFT JOIN ctxwin.usage_log l ON l.session_id = s.id
      GROUP BY s.id ORDER BY s.id$$,
    'ctxwin.usage: the sums of each session''s stored requests and summaries');
SELECT results_eq(
    $$SELECT session_id, cache_hit_ratio, request_cost, summary_cost, cost FROM ctxwin.usage ORDER BY session_id$$,
    $$VALUES ('00000000-0000-4000-8000-0000000000a1'::uuid, round(6016 / 7025.0, 4), 0.0065125, NULL::numeric, NULL::numeric),
             ('00000000-0000-4000-8000-0000000000a2'::uuid, 0.0000, 0.7112805, 0.01663568, 0.72791618),
             ('00000000-0000-4000-8000-0000000000a3'::uuid, 0.0000, NULL, 0, NULL)$$,
    '... its cache hit ratio and costs: NULL where a call''s usage or a price is unknown, never counted as 0');
SELECT results_eq(
    $$SELECT profile, sessions, requests, input_tokens, cached_tokens, output_tokens, summary_requests,
             request_cost, summary_cost, cost FROM ctxwin.profile_usage ORDER BY profile$$,
    $$SELECT p.name, (SELECT count(*) FROM ctxwin.sessions s WHERE s.profile = p.name),
             coalesce(sum(u.requests), 0)::bigint, coalesce(sum(u.input_tokens), 0)::bigint,
             coalesce(sum(u.cached_tokens), 0)::bigint, coalesce(sum(u.output_tokens), 0)::bigint,
             coalesce(sum(u.summary_requests), 0)::bigint,
             CASE WHEN count(u.request_cost) = count(u.session_id) THEN coalesce(sum(u.request_cost), 0) END,
             CASE WHEN count(u.summary_cost) = count(u.session_id) THEN coalesce(sum(u.summary_cost), 0) END,
             CASE WHEN count(u.cost) = count(u.session_id) THEN coalesce(sum(u.cost), 0) END
      FROM ctxwin.profiles p LEFT JOIN ctxwin.usage u ON u.profile = p.name
      GROUP BY p.name ORDER BY p.name$$,
    'ctxwin.profile_usage: the sessions of each profile summed');
SELECT is((SELECT cost FROM ctxwin.profile_usage WHERE profile = 'claude'), 0.72791618,
          '... with a cost where every price is known');

-- usage_cost: a price is needed only for tokens there are; dated names
SELECT is(ctxwin.usage_cost('gpt-4-turbo', 100, 0, 0, 10), 0.0013, 'gpt-4-turbo: 100 * 10 + 10 * 30 per million');
SELECT is(ctxwin.usage_cost('gpt-4-turbo', 100, 50, 0, 10), NULL, '... NULL with cached tokens it has no price for');
SELECT is(ctxwin.usage_cost('gpt-4o-mini-2024-07-18', 1000000, 0, 0, 0), 0.15,
          'a dated name is priced as the longest model name it starts with (gpt-4o-mini, not gpt-4o)');
SELECT is(ctxwin.usage_cost('claude-sonnet-4-5-20250929', 0, 0, 0, 1000000), 15.000000,
          '... claude-sonnet-4-5-20250929 as claude-sonnet-4-5');
SELECT is(ctxwin.usage_cost('gpt-4ox', 1, 0, 0, 0), NULL, '... and only at a dash');
SELECT is(ctxwin.usage_cost('no-such-model', 0, 0, 0, 0), NULL, 'a model ctxwin.models does not have: NULL');
SELECT is((SELECT count(*) FROM ctxwin.models WHERE builtin AND provider = 'google' AND input_price IS NOT NULL), 0::bigint,
          'Gemini''s prices, which depend on the prompt''s length, are unknown (NULL), not 0');
SELECT throws_ok($$INSERT INTO ctxwin.models (name, encoding, context_window, input_price) VALUES ('neg', 'chars4', 10, -1)$$,
                 '23514', NULL, 'a negative price is refused');
-- a user's row under a built-in name keeps its prices
INSERT INTO ctxwin.models (name, encoding, context_window, provider, input_price, cached_input_price, output_price)
VALUES ('gpt-4o', 'o200k_base', 128000, 'openai', 2, 1, 8);
SELECT is((SELECT row(input_price, cached_input_price, cache_write_price, output_price, builtin)::text
           FROM ctxwin.models WHERE name = 'gpt-4o'), '(2,1,,8,f)',
          'a user''s row under a built-in name replaces its prices too');
SELECT is((SELECT request_cost FROM ctxwin.usage WHERE session_id = '00000000-0000-4000-8000-0000000000a1'),
          ((2006 - 1920) * 2 + 1920 * 1 + 300 * 8 + 19 * 2 + 10 * 8) * 0.000001 + 0.00075,
          'costs follow the prices in ctxwin.models now');

-- Deleting a session deletes its ledger.
INSERT INTO ctxwin.sessions (id) VALUES ('00000000-0000-4000-8000-0000000000d1');
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000d1', (SELECT usage FROM shapes WHERE name = 'chat'));
DELETE FROM ctxwin.sessions WHERE id = '00000000-0000-4000-8000-0000000000d1';
SELECT is((SELECT count(*) FROM ctxwin.usage_log WHERE session_id = '00000000-0000-4000-8000-0000000000d1'), 0::bigint,
          'deleting a session deletes its usage rows');
SELECT is((SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_extension e, unnest(e.extconfig) x(oid)
           JOIN pg_class c ON c.oid = x.oid WHERE e.extname = 'ctxwin' AND c.relname IN ('usage_log', 'calibration')),
          ARRAY['calibration', 'usage_log'], 'pg_dump carries the ledger and the calibration');

------------------------------------------------------------------------------
-- Calibration
------------------------------------------------------------------------------

-- Claude, whose provider counts 20 % more than ctxwin's cl100k_base count:
-- five requests of windows of 10,000 tokens, each 12,000 by Anthropic's count.
DELETE FROM ctxwin.usage_log;
DELETE FROM ctxwin.calibration;
SELECT is((SELECT budget_margin FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a2')), 1.0::real,
          'no margin while the model is not calibrated...');
SELECT is((SELECT budget FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a2')), 199000,
          '... the default budget is the window less the reserve');
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a2',
                           jsonb_build_object('input_tokens', 4000, 'cache_read_input_tokens', 8000,
                                              'cache_creation_input_tokens', 0, 'output_tokens', 100), 1, 10000)
FROM generate_series(1, 5);
SELECT is((SELECT row(requests, provider_tokens, counted_tokens, margin)::text FROM ctxwin.calibration
           WHERE model = 'claude-sonnet-4-5'), '(5,60000,50000,1.2)',
          'calibration: provider input tokens (cache reads included) against ctxwin''s window tokens');
SELECT is((SELECT budget_margin FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a2')), 1.2::real,
          'context_status reports the margin');
SELECT is((SELECT budget FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a2')),
          floor(199000 / 1.2::real::float8)::int, '... and the default budget divided by it');
SELECT is((SELECT (w ->> 'budget')::int FROM ctxwin._window('00000000-0000-4000-8000-0000000000a2', NULL) w),
          floor(199000 / 1.2::real::float8)::int, 'build_context''s default budget is that one');
SELECT is((SELECT (w ->> 'budget')::int FROM ctxwin._window('00000000-0000-4000-8000-0000000000a2', 199000) w),
          199000, '... an explicit budget is the caller''s, untouched');
SELECT matches(ctxwin.context_report('00000000-0000-4000-8000-0000000000a2'), 'provider margin 1\.20',
               'context_report shows the margin');

-- A window that fits by ctxwin's count but not by Claude's no longer fills
-- the budget: a session whose messages add up to about 95 % of it.
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('claude-small', 'cl100k_base', 2000, 'anthropic');
-- (a sliding window: it fills the budget)
INSERT INTO ctxwin.profiles (name, model, response_reserve, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, window_policy)
VALUES ('small', 'claude-small', 200, NULL, NULL, NULL, 'sliding');
INSERT INTO ctxwin.sessions (id, profile) VALUES ('00000000-0000-4000-8000-0000000000b1', 'small');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '00000000-0000-4000-8000-0000000000b1', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
       (SELECT string_agg(format('w%s', g * 100 + k), ' ') FROM generate_series(1, 40) k)
FROM generate_series(1, 20) g;
SELECT cmp_ok((SELECT (w ->> 'tokens')::int FROM ctxwin._window('00000000-0000-4000-8000-0000000000b1', NULL) w),
              '>', 1500, 'uncalibrated, the window fills the 1,800 tokens by ctxwin''s count...');
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000b1',
                           jsonb_build_object('input_tokens', 2100, 'output_tokens', 50), NULL, 1750);
SELECT cmp_ok((SELECT (w ->> 'tokens')::int FROM ctxwin._window('00000000-0000-4000-8000-0000000000b1', NULL) w) * 1.2,
              '<=', 1800::numeric, '... calibrated (1.2), it fits the 1,800 by Claude''s count too');

-- Bounded: a provider that counts twice ctxwin's gives 1.5; one that counts
-- fewer gives 1 (the budget never grows).
UPDATE ctxwin.profiles SET model = 'claude-opus-4' WHERE name = 'claude';
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a2',
                           '{"input_tokens": 20000, "output_tokens": 10}', 1, 10000);
SELECT is((SELECT margin FROM ctxwin.calibration WHERE model = 'claude-opus-4'), 1.5::real, 'the margin is at most 1.5');
SELECT is((SELECT budget FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a2')),
          floor(199000 / 1.5::real::float8)::int, '... and the budget follows');
UPDATE ctxwin.profiles SET model = 'claude-haiku-4-5' WHERE name = 'claude';
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a2',
                           '{"input_tokens": 8000, "output_tokens": 10}', 1, 10000);
SELECT is((SELECT margin FROM ctxwin.calibration WHERE model = 'claude-haiku-4-5'), 1.0::real,
          'the margin is at least 1 (a provider that counts fewer tokens)');
SELECT is((SELECT budget FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a2')), 199000,
          '... and the budget is the default one');

-- Over the newest 50 requests only: 10 old ones at 2.0, then 50 at 1.1.
UPDATE ctxwin.profiles SET model = 'claude-3-7-sonnet' WHERE name = 'claude';
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a2', '{"input_tokens": 2000, "output_tokens": 1}', 1, 1000)
FROM generate_series(1, 10);
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a2', '{"input_tokens": 1100, "output_tokens": 1}', 1, 1000)
FROM generate_series(1, 50);
SELECT is((SELECT row(requests, provider_tokens, counted_tokens, margin)::text FROM ctxwin.calibration
           WHERE model = 'claude-3-7-sonnet'), '(50,55000,50000,1.1)',
          'the margin is over the newest 50 requests of the model (all 60 would give 1.25)');
-- requests without a window do not count
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a2', '{"input_tokens": 9000, "output_tokens": 1}', 1, NULL);
SELECT is((SELECT margin FROM ctxwin.calibration WHERE model = 'claude-3-7-sonnet'), 1.1::real,
          'a request recorded without its window tokens is not calibration');

-- The margin was measured in the encoding the model had: counted in
-- another, it no longer applies.
UPDATE ctxwin.models SET encoding = 'chars4' WHERE name = 'claude-3-7-sonnet';
SELECT is((SELECT budget_margin FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a2')), 1.0::real,
          'a margin measured in another encoding than the model''s now does not apply');
UPDATE ctxwin.models SET encoding = 'cl100k_base' WHERE name = 'claude-3-7-sonnet';
SELECT is((SELECT budget_margin FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a2')), 1.1::real,
          '... and applies again when the model is counted in it');

-- gpt-4o is counted with its own vocabulary: no margin, whatever the counts.
SELECT ctxwin.record_usage('00000000-0000-4000-8000-0000000000a1', '{"prompt_tokens": 1300, "completion_tokens": 1}', 1, 1000)
FROM generate_series(1, 5);
SELECT is((SELECT row(requests, provider_tokens, counted_tokens, margin)::text FROM ctxwin.calibration
           WHERE model = 'gpt-4o'), '(5,6500,5000,1)', 'gpt-4o is exact: its counts are kept, its margin is 1');
SELECT is((SELECT row(budget, budget_margin)::text FROM ctxwin.context_status('00000000-0000-4000-8000-0000000000a1')),
          row(128000 - 4096, 1.0::real)::text, '... and its default budget is the window less the reserve');

-- The calibration is ctxwin's: an application role reads it, and records
-- usage with the README's grants, but does not write it.
CREATE ROLE ctxwin_usage_app;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_usage_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO ctxwin_usage_app;
GRANT SELECT ON ctxwin.models, ctxwin.profiles, ctxwin.summaries, ctxwin.flush_events TO ctxwin_usage_app;
GRANT SELECT, INSERT ON ctxwin.usage_log TO ctxwin_usage_app;
SELECT max(id) + 1 AS next_a2 FROM ctxwin.usage_log WHERE session_id = '00000000-0000-4000-8000-0000000000a2' \gset
SET ROLE ctxwin_usage_app;
SELECT is(ctxwin.record_usage('00000000-0000-4000-8000-0000000000a2', '{"input_tokens": 1200, "output_tokens": 1}', 1, 1000),
          :next_a2::bigint, 'an application role records usage');
SELECT is((SELECT requests FROM ctxwin.usage WHERE session_id = '00000000-0000-4000-8000-0000000000a2'), :next_a2::bigint,
          '... and reads the usage views');
SELECT throws_ok($$UPDATE ctxwin.calibration SET margin = 1$$, '42501', NULL, '... but does not write the calibration');
SELECT throws_ok($$INSERT INTO ctxwin.calibration (model, encoding, requests, provider_tokens, counted_tokens, margin)
                   VALUES ('gpt-4o-mini', 'o200k_base', 1, 1, 1, 1)$$, '42501', NULL, '... nor add to it');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;

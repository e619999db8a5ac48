-- Token counts in indexes and generated columns: the counting functions are
-- IMMUTABLE and resolve encodings and the models ctxwin ships without
-- reading a table; a model added to ctxwin.models goes through the STABLE
-- model_encoding.  (A database that had such indexes under 0.1.0, updated:
-- test/upgrade.pl.)
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

-- The declarations: every public counting function IMMUTABLE and PARALLEL
-- SAFE; model_encoding STABLE, with a pinned search_path.
SELECT is((SELECT string_agg(format('%s %s %s', p.proname, p.provolatile, p.proparallel), ', ' ORDER BY p.proname)
           FROM pg_proc p
           WHERE p.pronamespace = 'ctxwin'::regnamespace
             AND p.proname IN ('count_tokens', 'tokenize', 'detokenize', 'count_message_tokens', 'message_tokens',
                               'messages_tokens', 'truncate_middle', 'count_tool_tokens')),
          'count_message_tokens i s, count_tokens i s, count_tool_tokens i s, detokenize i s, message_tokens i s, '
          'messages_tokens i s, tokenize i s, truncate_middle i s',
          'the counting functions are IMMUTABLE and PARALLEL SAFE');
SELECT is((SELECT format('%s %s %s %s', p.provolatile, p.proparallel, p.proisstrict, array_to_string(p.proconfig, ','))
           FROM pg_proc p WHERE p.oid = 'ctxwin.model_encoding(text)'::regprocedure),
          's s t search_path=pg_catalog, pg_temp',
          'model_encoding is STABLE STRICT PARALLEL SAFE with a pinned search_path');

-- The models the library knows are the built-in rows of ctxwin.models.
SELECT results_eq($$SELECT name, encoding, provider FROM ctxwin._builtin_models() ORDER BY name$$,
                  $$SELECT name, encoding, provider FROM ctxwin.models WHERE builtin ORDER BY name$$,
                  'the library''s built-in models are the built-in rows of ctxwin.models: names, encodings, providers');
SELECT is((SELECT count(*) FROM ctxwin._builtin_models() b
           WHERE ctxwin.count_tokens(repeat(chr(52793), 86), b.name) <> ctxwin.count_tokens(repeat(chr(52793), 86), b.encoding)
              OR ctxwin.tokenize('hello world', b.name) <> ctxwin.tokenize('hello world', b.encoding))::int, 0,
          'each built-in model counts and tokenizes in its encoding');

-- An expression index on a token count, by encoding and by built-in model.
CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL);
INSERT INTO docs
SELECT g, CASE WHEN g % 97 = 0 THEN repeat(chr(52793), 86)
               ELSE repeat('word ', g % 50) || 'Grüße 日本語 ' || g END
FROM generate_series(1, 2000) g;
CREATE INDEX docs_cl100k ON docs ((ctxwin.count_tokens(body, 'cl100k_base')));
CREATE INDEX docs_gpt4o ON docs ((ctxwin.count_tokens(body, 'gpt-4o')));
ANALYZE docs;
SELECT is((SELECT string_agg(pg_get_indexdef(i.indexrelid), E'\n' ORDER BY i.indexrelid::regclass::text)
           FROM pg_index i WHERE i.indrelid = 'docs'::regclass AND i.indexprs IS NOT NULL),
          E'CREATE INDEX docs_cl100k ON public.docs USING btree (ctxwin.count_tokens(body, ''cl100k_base''::text))\n'
          'CREATE INDEX docs_gpt4o ON public.docs USING btree (ctxwin.count_tokens(body, ''gpt-4o''::text))',
          'CREATE INDEX on count_tokens(body, ''cl100k_base'') and on count_tokens(body, ''gpt-4o'')');

CREATE FUNCTION pg_temp.plan_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    line text;
    result text := '';
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        result := result || line || E'\n';
    END LOOP;
    RETURN result;
END $$;
SELECT matches(pg_temp.plan_of($$SELECT id FROM docs WHERE ctxwin.count_tokens(body, 'cl100k_base') = 258$$),
               'docs_cl100k', 'a query on count_tokens(body, ''cl100k_base'') uses the index');
SELECT matches(pg_temp.plan_of($$SELECT id FROM docs WHERE ctxwin.count_tokens(body, 'gpt-4o') = 172$$),
               'docs_gpt4o', 'a query on count_tokens(body, ''gpt-4o'') uses its index');
-- the texts of 86 U+CE39: 258 tokens in cl100k_base, 172 in o200k_base (tiktoken)
SELECT is(ARRAY(SELECT id FROM docs WHERE ctxwin.count_tokens(body, 'cl100k_base') = 258 ORDER BY id),
          ARRAY(SELECT g FROM generate_series(97, 2000, 97) g),
          'the index finds the rows of 258 cl100k_base tokens');
SELECT is(ARRAY(SELECT id FROM docs WHERE ctxwin.count_tokens(body, 'gpt-4o') = 172 ORDER BY id),
          ARRAY(SELECT g FROM generate_series(97, 2000, 97) g),
          'the index on gpt-4o finds the rows of 172 o200k_base tokens');
CREATE TEMP TABLE by_index AS
SELECT id, ctxwin.count_tokens(body, 'cl100k_base') AS n FROM docs WHERE ctxwin.count_tokens(body, 'cl100k_base') BETWEEN 5 AND 40;
SET LOCAL enable_indexscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT doesnt_match(pg_temp.plan_of($$SELECT id FROM docs WHERE ctxwin.count_tokens(body, 'cl100k_base') BETWEEN 5 AND 40$$),
                    'docs_cl100k', '(the same query without the index)');
SELECT set_eq($$SELECT id, n FROM by_index$$,
              $$SELECT id, ctxwin.count_tokens(body, 'cl100k_base') FROM docs WHERE ctxwin.count_tokens(body, 'cl100k_base') BETWEEN 5 AND 40$$,
              'a range scan of the index and a scan of the table give the same rows');
RESET enable_indexscan;
RESET enable_bitmapscan;

-- Stored generated columns: by encoding, by built-in model, a message and
-- tools.
CREATE TABLE notes (
    id int PRIMARY KEY,
    body text NOT NULL,
    msg jsonb,
    tools jsonb,
    o200k int GENERATED ALWAYS AS (ctxwin.count_tokens(body, 'o200k_base')) STORED,
    claude int GENERATED ALWAYS AS (ctxwin.count_tokens(body, 'claude-sonnet-4')) STORED,
    ids int[] GENERATED ALWAYS AS (ctxwin.tokenize(body, 'gpt-4')) STORED,
    msg_tokens int GENERATED ALWAYS AS (ctxwin.count_message_tokens(msg, 'gpt-4o-mini')) STORED,
    tool_tokens int GENERATED ALWAYS AS (ctxwin.count_tool_tokens(tools, 'claude-sonnet-4')) STORED,
    short text GENERATED ALWAYS AS (ctxwin.truncate_middle(body, 20, 'gemini-2.5-pro')) STORED
);
INSERT INTO notes (id, body, msg, tools) VALUES
  (1, repeat(chr(52793), 86), '{"role": "user", "content": "hello world"}',
   '[{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]'),
  (2, 'hello world', NULL, NULL);
SELECT is((SELECT format('%s %s %s', o200k, claude, cardinality(ids)) FROM notes WHERE id = 1), '172 258 258',
          'generated columns: 172 tokens in o200k_base, 258 for claude-sonnet-4 (cl100k_base), 258 ids for gpt-4');
SELECT is((SELECT ids FROM notes WHERE id = 2), '{15339,1917}', 'the ids of "hello world" for gpt-4 are cl100k_base''s');
SELECT is((SELECT msg_tokens FROM notes WHERE id = 1), 4 + 1 + 2,
          'a generated count_message_tokens: 4 + role + content');
SELECT is((SELECT tool_tokens FROM notes WHERE id = 1),
          346 + ctxwin.count_tokens(('{"name": "get_weather", "description": "Weather of a city.", '
                                     '"input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}')::jsonb::text,
                                    'cl100k_base'),
          'a generated count_tool_tokens for claude-sonnet-4 takes Anthropic''s rule: 346 + the tool''s JSON text');
SELECT isnt((SELECT tool_tokens FROM notes WHERE id = 1), ctxwin.count_tool_tokens((SELECT tools FROM notes WHERE id = 1), 'cl100k_base'),
            '... not OpenAI''s rule of its encoding');
SELECT is((SELECT short FROM notes WHERE id = 2), 'hello world', 'a generated truncate_middle');
SELECT is((SELECT ctxwin.count_tokens(short, 'o200k_base') <= 20 AND short LIKE '%tokens omitted%' FROM notes WHERE id = 1), true,
          '... cut within 20 tokens of the model''s encoding');
UPDATE notes SET body = 'hello world' WHERE id = 1;
SELECT is((SELECT format('%s %s %s', o200k, claude, ids) FROM notes WHERE id = 1), '2 2 {15339,1917}',
          'generated columns follow an update of the text');

-- None of them reads ctxwin.models: a role that may not read it counts by
-- encoding and by built-in model all the same.
CREATE ROLE ctxwin_imm_app;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_imm_app;
GRANT SELECT, INSERT ON notes TO ctxwin_imm_app;
SET LOCAL ROLE ctxwin_imm_app;
SELECT is(ctxwin.count_tokens(repeat(chr(52793), 86), 'claude-3-5-haiku'), 258,
          'a role without SELECT on ctxwin.models counts for a built-in model');
SELECT is(ctxwin.count_tool_tokens('[]', 'claude-sonnet-4'), 0, '... and counts tools for one');
INSERT INTO notes (id, body) VALUES (3, 'hello world');
SELECT is((SELECT claude FROM notes WHERE id = 3), 2, '... and writes a generated column of one');
RESET ROLE;

-- A model added to ctxwin.models: the immutable functions refuse it, with a
-- hint naming model_encoding; model_encoding reads its row.
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('my-model', 'chars4', 8000, 'acme');
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
    det text;
    hint text;
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN others THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RETURN st || ' ' || msg || E'\n' || coalesce(det, '') || E'\n' || coalesce(hint, '');
END $$;
SELECT is(pg_temp.err($$SELECT ctxwin.count_tokens('x', 'my-model')$$),
          E'22023 model "my-model" is not built in\n'
          'The counting functions are immutable, so that a count can be indexed: they take an encoding or a model ctxwin ships and read no table, and "my-model" was added to ctxwin.models.\n'
          'Pass its encoding instead: ctxwin.count_tokens(t, ctxwin.model_encoding(''my-model'')).',
          'count_tokens with a model added to ctxwin.models: an error whose hint names model_encoding');
SELECT is(split_part(pg_temp.err($$SELECT ctxwin.message_tokens('user', 'x', NULL, NULL, NULL, 'my-model')$$), E'\n', 3),
          'Pass its encoding instead: ctxwin.message_tokens(role, content, name, tool_call_id, tool_calls, ctxwin.model_encoding(''my-model'')).',
          '... the hint of message_tokens is its own call');
SELECT is((SELECT string_agg(split_part(pg_temp.err(q), E'\n', 1), ', ' ORDER BY q)
           FROM (VALUES ($$SELECT ctxwin.tokenize('x', 'my-model')$$), ($$SELECT ctxwin.detokenize('{1}', 'my-model')$$),
                        ($$SELECT ctxwin.count_message_tokens('{}', 'my-model')$$), ($$SELECT ctxwin.truncate_middle('x', 1, 'my-model')$$),
                        ($$SELECT ctxwin.count_tool_tokens('[]', 'my-model')$$), ($$SELECT ctxwin.messages_tokens('[{}]', 'my-model')$$)) v(q)),
          '22023 model "my-model" is not built in, 22023 model "my-model" is not built in, 22023 model "my-model" is not built in, '
          '22023 model "my-model" is not built in, 22023 model "my-model" is not built in, 22023 model "my-model" is not built in',
          '... and so do tokenize, detokenize, count_message_tokens, truncate_middle, count_tool_tokens and messages_tokens');
SELECT is(split_part(pg_temp.err($$CREATE INDEX ON docs ((ctxwin.count_tokens(body, 'my-model')))$$), E'\n', 1),
          '22023 model "my-model" is not built in', 'an index on a count for a model added to ctxwin.models is refused');
SELECT is(pg_temp.err($$SELECT ctxwin.count_tokens('x', 'no-such-model')$$),
          E'22023 unrecognized encoding or model "no-such-model"\n\n'
          'Valid encodings are cl100k_base, o200k_base, chars4 and chars3.5, and the models ctxwin ships; for another model of ctxwin.models, pass ctxwin.model_encoding(model).',
          'a name of nothing: unrecognized, with the encodings in the hint');
SET LOCAL ROLE ctxwin_imm_app;
SELECT is(split_part(pg_temp.err($$SELECT ctxwin.count_tokens('x', 'my-model')$$), E'\n', 1),
          '22023 unrecognized encoding or model "my-model"',
          'a role that may not read ctxwin.models gets the error of an unknown name, not a permission error');
RESET ROLE;

SELECT is(ctxwin.model_encoding('my-model'), 'chars4', 'model_encoding of a model added to ctxwin.models: its row''s');
SELECT is(ctxwin.model_encoding('gpt-4'), 'cl100k_base', 'model_encoding of a built-in model');
SELECT is(ctxwin.model_encoding('chars3.5'), 'chars3.5', 'model_encoding of an encoding: itself');
SELECT is(ctxwin.model_encoding(NULL), NULL, 'model_encoding is strict');
SELECT is(pg_temp.err($$SELECT ctxwin.model_encoding('nope')$$),
          E'22023 unrecognized encoding or model "nope"\n\n'
          'Models are the rows of ctxwin.models; valid encodings are cl100k_base, o200k_base, chars4 and chars3.5.',
          'model_encoding of an unknown name: an error');
SELECT is(ctxwin.count_tokens('abcdefgh', ctxwin.model_encoding('my-model')), 2,
          'count_tokens(t, model_encoding(model)) counts in the model''s encoding');
SELECT is((SELECT count(*) FROM docs WHERE ctxwin.count_tokens(body, ctxwin.model_encoding('my-model')) <> length(body) / 4)::int, 0,
          '... on every row of a table');
SET LOCAL ROLE ctxwin_imm_app;
SELECT throws_ok($$SELECT ctxwin.model_encoding('my-model')$$, '42501', NULL,
                 'model_encoding reads ctxwin.models with the caller''s privileges');
RESET ROLE;

-- A user's row that replaces a built-in model: model_encoding and the
-- session functions follow the row; the immutable functions keep the
-- model's published encoding and provider, so indexes stay valid.
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('gpt-4o', 'chars4', 64000, 'proxy');
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('claude-sonnet-4', 'cl100k_base', 200000, 'openai');
SELECT is(ctxwin.model_encoding('gpt-4o'), 'chars4', 'model_encoding of a replaced built-in model: the user''s row');
SELECT is(ctxwin.count_tokens(repeat(chr(52793), 86), 'gpt-4o'), 172,
          'count_tokens of a replaced built-in model: still its published encoding');
SELECT is(ARRAY(SELECT id FROM docs WHERE ctxwin.count_tokens(body, 'gpt-4o') = 172 ORDER BY id),
          ARRAY(SELECT g FROM generate_series(97, 2000, 97) g),
          '... so its index still finds the same rows');
SELECT is((SELECT tool_tokens FROM notes WHERE id = 1),
          ctxwin.count_tool_tokens((SELECT tools FROM notes WHERE id = 1), 'claude-sonnet-4'),
          'count_tool_tokens of a replaced built-in model: still the rule of its published provider');
INSERT INTO ctxwin.sessions (id, profile) VALUES ('a0000000-0000-4000-8000-000000000001', 'default');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('a0000000-0000-4000-8000-000000000001', 'user', 'abcdefgh');
SELECT is((SELECT format('%s %s', token_encoding, token_count) FROM ctxwin.messages
           WHERE session_id = 'a0000000-0000-4000-8000-000000000001'), 'chars4 7',
          'a session of the replaced model counts in the row''s encoding: 4 + user (1) + abcdefgh (2)');

-- A built-in model whose row is gone: model_encoding keeps its encoding.
DELETE FROM ctxwin.models WHERE name = 'gpt-3.5-turbo';
SELECT is(ctxwin.model_encoding('gpt-3.5-turbo'), 'cl100k_base', 'model_encoding of a built-in model whose row is deleted');

SELECT * FROM finish();
ROLLBACK;

-- build_window: build_context's window with the stored rows it shows.
--  - its "context" is build_context's result for the same arguments, byte
--    for byte, over many sessions: sliding and stable windows, tool results
--    cleared and cut, content parts, a summary in the system prompt or as a
--    message of its own, both formats, with and without tools and cache,
--    budgets from too small to none given; where build_context raises an
--    error, build_window raises the same (SQLSTATE and message);
--  - its "messages" are exactly the rows in the window: the ids first_id ..
--    message_count that _window reports (the window is always the newest
--    rows), one per non-system message sent in OpenAI's format, paired in
--    order (a cleared tool result's placeholder names the row's id), with
--    the stored client key and role;
--  - summary, summary_version and summary_through_id are the session's,
--    tokens _window's;
--  - read through SQL (row-level security on) it is the same as read
--    directly;
--  - append_and_build returns the same rows as "messages", for the window
--    and for the request body.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

-- profiles: (name, policy, keep_tool_results, tool_result_max_tokens, clear_tool_inputs,
-- clear_at_least, placement, model)
INSERT INTO ctxwin.profiles (name, model, context_window, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, response_reserve, max_summary_tokens,
                             summary_strategy, window_policy, keep_tool_results, tool_result_max_tokens,
                             clear_tool_inputs, clear_at_least, summary_placement)
VALUES ('w_sliding', 'gpt-4o',            2500, NULL, NULL, NULL, 4, 300, 200, 'extractive', 'sliding', NULL, NULL, NULL, NULL, 'system'),
       ('w_stable',  'gpt-4o',            2500, NULL, NULL, NULL, 4, 300, 200, 'extractive', 'stable',  NULL, NULL, NULL, NULL, 'system'),
       ('w_clear_s', 'gpt-4o',            2500, NULL, NULL, NULL, 4, 300, 200, 'extractive', 'sliding', 1,    40,   true, NULL, 'system'),
       ('w_clear_t', 'gpt-4o',            2500, NULL, NULL, NULL, 4, 300, 200, 'extractive', 'stable',  2,    NULL, NULL, 60,   'message'),
       ('w_message', 'gpt-4o-mini',       2500, NULL, NULL, NULL, 4, 300, 200, 'extractive', 'sliding', NULL, 30,   NULL, NULL, 'message'),
       ('w_claude',  'claude-sonnet-4-5', 2500, NULL, NULL, NULL, 4, 300, 200, 'extractive', 'stable',  1,    NULL, NULL, NULL, 'system');

-- a conversation of n messages: user and assistant turns, some with content
-- parts, an assistant tool call with two results every seventh message;
-- every third message with a client key
CREATE FUNCTION pg_temp.chat(s uuid, profile text, n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    msgs jsonb := '[]';
    keys text[] := '{}';
    i int := 1;
BEGIN
    INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES (s, profile, 'You are the agent of ' || s || '.');
    WHILE i <= n LOOP
        IF i % 7 = 0 THEN
            msgs := msgs || jsonb_build_array(
                jsonb_build_object('role', 'assistant', 'content', NULL, 'tool_calls', jsonb_build_array(
                    jsonb_build_object('id', 'call_' || i || 'a', 'type', 'function',
                                       'function', jsonb_build_object('name', 'read_log', 'arguments', format('{"host": "h%s"}', i))),
                    jsonb_build_object('id', 'call_' || i || 'b', 'type', 'function',
                                       'function', jsonb_build_object('name', 'ping', 'arguments', '{}')))),
                jsonb_build_object('role', 'tool', 'tool_call_id', 'call_' || i || 'a', 'name', 'read_log',
                                   'content', repeat('line ' || i || ' of the log: disk full on /var. ', 3 + (i * 5) % 17)),
                jsonb_build_object('role', 'tool', 'tool_call_id', 'call_' || i || 'b', 'name', 'ping',
                                   'content', 'pong ' || i));
            keys := keys || ARRAY['call-' || i, NULL, 'result-' || i || 'b'];
            i := i + 3;
        ELSE
            msgs := msgs || jsonb_build_array(CASE
                WHEN i % 5 = 0 THEN jsonb_build_object('role', 'user', 'content', jsonb_build_array(
                    jsonb_build_object('type', 'text', 'text', 'Part one of message ' || i || '.'),
                    jsonb_build_object('type', 'text', 'text', repeat('detail' || i || ' ', 1 + i % 9))))
                ELSE jsonb_build_object('role', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
                                        'content', 'Message ' || i || ': ' || repeat('word' || i || ' ', 2 + (i * 7) % 23))
                END);
            keys := keys || CASE WHEN i % 3 = 0 THEN 'key-' || i END;
            i := i + 1;
        END IF;
    END LOOP;
    PERFORM ctxwin.append_messages(s, msgs, keys);
END $$;

SELECT pg_temp.chat(('a0000000-0000-4000-8000-' || lpad((p.o * 10 + k)::text, 12, '0'))::uuid, p.name, 8 + k * 9)
FROM unnest(ARRAY['w_sliding', 'w_stable', 'w_clear_s', 'w_clear_t', 'w_message', 'w_claude']) WITH ORDINALITY p(name, o),
     generate_series(1, 4) k;
-- half of them summarized (extractive)
SELECT count(ctxwin.summarize_session(s.id, true)) FROM ctxwin.sessions s
WHERE right(s.id::text, 1) IN ('2', '4');
SELECT cmp_ok((SELECT count(*)::int FROM ctxwin.sessions WHERE summary_through_id > 0), '>=', 12,
              'sessions with a summary and without');

-- every combination: build_context against build_window, and the rows
-- against _window and the stored rows; what differs goes into bad
CREATE TEMP TABLE bad (combo text, what text);
CREATE TEMP TABLE tally (errors int, windows int, cleared int, cut int, keyed int, empty int);
CREATE FUNCTION pg_temp.check_all(role_name text DEFAULT NULL) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s record;
    b int;
    f text;
    t jsonb;
    c boolean;
    ctx jsonb;
    win jsonb;
    rep jsonb;
    e1 text;
    e2 text;
    combo text;
    want jsonb;
    sent jsonb;
    n_err int := 0;
    n_win int := 0;
    n_cleared int := 0;
    n_cut int := 0;
    n_keyed int := 0;
    n_empty int := 0;
BEGIN
    FOR s IN SELECT * FROM ctxwin.sessions ORDER BY id LOOP
        FOREACH b IN ARRAY ARRAY[NULL, 40, 150, 400, 900, 20000]::int[] LOOP
            FOREACH f IN ARRAY ARRAY['openai', 'anthropic'] LOOP
                FOREACH t IN ARRAY ARRAY[NULL, '[{"type": "function", "function": {"name": "lookup", "description": "Looks a thing up.", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]']::jsonb[] LOOP
                    FOREACH c IN ARRAY ARRAY[true, false] LOOP
                        CONTINUE WHEN f = 'openai' AND NOT c;
                        combo := format('%s budget %s %s tools %s cache %s', s.id, b, f, t IS NOT NULL, c);
                        ctx := NULL; win := NULL; e1 := NULL; e2 := NULL;
                        BEGIN
                            ctx := ctxwin.build_context(s.id, b, f, t, c);
                        EXCEPTION WHEN OTHERS THEN
                            e1 := SQLSTATE || ': ' || SQLERRM;
                        END;
                        BEGIN
                            win := ctxwin.build_window(s.id, b, f, t, c);
                        EXCEPTION WHEN OTHERS THEN
                            e2 := SQLSTATE || ': ' || SQLERRM;
                        END;
                        IF e1 IS NOT NULL OR e2 IS NOT NULL THEN
                            n_err := n_err + 1;
                            IF e1 IS DISTINCT FROM e2 THEN
                                INSERT INTO bad VALUES (combo, format('errors %s / %s', e1, e2));
                            END IF;
                            CONTINUE;
                        END IF;
                        n_win := n_win + 1;
                        IF (win -> 'context')::text <> ctx::text OR win -> 'context' <> ctx THEN
                            INSERT INTO bad VALUES (combo, 'context differs');
                        END IF;
                        IF (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(win) k)
                           <> ARRAY['context', 'messages', 'summary', 'summary_through_id', 'summary_version', 'tokens'] THEN
                            INSERT INTO bad VALUES (combo, 'keys ' || win::text);
                        END IF;
                        rep := ctxwin._window(s.id, b, t);
                        -- the rows: first_id .. message_count, as stored
                        SELECT coalesce(jsonb_agg(jsonb_build_object('id', m.id, 'client_key', m.client_key, 'role', m.role)
                                                  ORDER BY m.id), '[]')
                        INTO want
                        FROM ctxwin.messages m
                        WHERE m.session_id = s.id AND m.id >= (rep ->> 'first_id')::bigint;
                        IF win -> 'messages' <> want THEN
                            INSERT INTO bad VALUES (combo, format('rows %s, want %s', win -> 'messages', want));
                        END IF;
                        IF (rep ->> 'first_id') IS NULL AND jsonb_array_length(win -> 'messages') <> 0 THEN
                            INSERT INTO bad VALUES (combo, 'rows in an empty window');
                        END IF;
                        IF jsonb_array_length(win -> 'messages') = 0 THEN
                            n_empty := n_empty + 1;
                        END IF;
                        IF (win -> 'tokens') <> (rep -> 'tokens') THEN
                            INSERT INTO bad VALUES (combo, format('tokens %s, _window %s', win -> 'tokens', rep -> 'tokens'));
                        END IF;
                        IF (win ->> 'summary') IS DISTINCT FROM nullif(s.conversation_summary, '')
                           OR (win ->> 'summary_version')::int IS DISTINCT FROM nullif(s.summary_version, 0)
                           OR (win ->> 'summary_through_id')::bigint IS DISTINCT FROM nullif(s.summary_through_id, 0) THEN
                            INSERT INTO bad VALUES (combo, 'summary fields ' || (win - 'context' - 'messages')::text);
                        END IF;
                        IF (win -> 'messages' -> 0 ->> 'id')::bigint <= s.summary_through_id THEN
                            INSERT INTO bad VALUES (combo, 'a summarized row listed');
                        END IF;
                        n_keyed := n_keyed + (SELECT count(*) FROM jsonb_array_elements(win -> 'messages') e
                                              WHERE e ->> 'client_key' IS NOT NULL);
                        n_cut := n_cut + CASE WHEN (rep ->> 'cut')::boolean THEN 1 ELSE 0 END;
                        -- OpenAI's format: the non-system messages sent pair with the rows, in order
                        IF f = 'openai' THEN
                            SELECT jsonb_agg(jsonb_build_object('role', x.m ->> 'role', 'content', x.m ->> 'content')
                                             ORDER BY x.i)
                            INTO sent
                            FROM jsonb_array_elements(ctx) WITH ORDINALITY x(m, i)
                            WHERE x.m ->> 'role' <> 'system';
                            IF coalesce(jsonb_array_length(sent), 0) <> jsonb_array_length(win -> 'messages') THEN
                                INSERT INTO bad VALUES (combo, format('%s sent, %s rows', coalesce(jsonb_array_length(sent), 0),
                                                                      jsonb_array_length(win -> 'messages')));
                            ELSIF EXISTS (SELECT FROM jsonb_array_elements(sent) WITH ORDINALITY x(m, i)
                                          WHERE x.m ->> 'role' <> win -> 'messages' -> (x.i::int - 1) ->> 'role'
                                             OR (x.m ->> 'content' LIKE '[tool result cleared: %'
                                                 AND x.m ->> 'content' NOT LIKE
                                                     format('%%(session, %s) returns it]', win -> 'messages' -> (x.i::int - 1) ->> 'id'))) THEN
                                INSERT INTO bad VALUES (combo, format('sent and rows do not pair: %s / %s', sent, win -> 'messages'));
                            END IF;
                            n_cleared := n_cleared + (SELECT count(*) FROM jsonb_array_elements(sent) x(m)
                                                      WHERE x.m ->> 'content' LIKE '[tool result cleared: %');
                        END IF;
                    END LOOP;
                END LOOP;
            END LOOP;
        END LOOP;
    END LOOP;
    INSERT INTO tally VALUES (n_err, n_win, n_cleared, n_cut, n_keyed, n_empty);
END $$;

-- and one with no message at all
INSERT INTO ctxwin.sessions (id, profile) VALUES ('a0000000-0000-4000-8000-000000000099', 'w_stable');
SELECT pg_temp.check_all();
SELECT is((SELECT count(*) FROM bad), 0::bigint,
          'build_window''s context is build_context''s, its rows those of the window, over every session, budget, format and tools');
SELECT diag(combo || ': ' || what) FROM (SELECT * FROM bad LIMIT 10) b;
-- the combinations reached every case
SELECT diag(format('%s windows compared, %s errors, %s cleared results, %s cut, %s keyed rows, %s empty', windows, errors, cleared, cut, keyed, empty)) FROM tally;
SELECT cmp_ok(windows, '>', 500, 'windows compared') FROM tally;
SELECT cmp_ok(errors, '>', 20, 'budgets too small compared as errors') FROM tally;
SELECT cmp_ok(cleared, '>', 20, 'cleared tool results listed with their rows') FROM tally;
SELECT cmp_ok(cut, '>', 5, 'windows whose newest unit was cut') FROM tally;
SELECT cmp_ok(keyed, '>', 100, 'rows with client keys') FROM tally;
SELECT cmp_ok(empty, '>', 0, 'windows with no message') FROM tally;

-- the same read through SQL: a role under row-level security that may see everything
-- (the windows read directly first: with row-level security enabled even a
-- superuser's walk goes through SQL)
CREATE TEMP TABLE direct AS
SELECT s.id, ctxwin.build_window(s.id, 900, 'openai') AS w FROM ctxwin.sessions s;
CREATE ROLE ctxwin_window_ids;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_window_ids;
GRANT SELECT ON ctxwin.sessions, ctxwin.messages, ctxwin.models, ctxwin.profiles TO ctxwin_window_ids;
GRANT INSERT ON bad, tally TO ctxwin_window_ids;
ALTER TABLE ctxwin.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.messages ENABLE ROW LEVEL SECURITY;
CREATE POLICY everyone ON ctxwin.sessions USING (true);
CREATE POLICY everyone ON ctxwin.messages USING (true);
GRANT SELECT ON direct TO ctxwin_window_ids;
SET ROLE ctxwin_window_ids;
SELECT is((SELECT count(*) FROM direct d WHERE ctxwin.build_window(d.id, 900, 'openai') <> d.w), 0::bigint,
          'read through SQL under row-level security, every window and its rows are the same');
RESET ROLE;
ALTER TABLE ctxwin.sessions DISABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.messages DISABLE ROW LEVEL SECURITY;

-- a window by hand: a summary, a cleared tool result and a cut newest message
SELECT is((SELECT jsonb_path_query_array(ctxwin.build_window(id), '$.messages[*].role') FROM ctxwin.sessions
           WHERE id = 'a0000000-0000-4000-8000-000000000031'),
          (SELECT jsonb_agg(m.role ORDER BY m.id) FROM ctxwin.messages m, ctxwin.sessions s
           WHERE s.id = 'a0000000-0000-4000-8000-000000000031' AND m.session_id = s.id AND m.id > s.summary_through_id),
          'with no budget the window of a short session lists every unsummarized row');
SELECT is(ctxwin.build_window('a0000000-0000-4000-8000-000000000032') - 'context' - 'messages' - 'tokens',
          (SELECT jsonb_build_object('summary', conversation_summary, 'summary_version', summary_version,
                                     'summary_through_id', summary_through_id)
           FROM ctxwin.sessions WHERE id = 'a0000000-0000-4000-8000-000000000032'),
          'a summarized session: its summary, version and the id it covers through');
SELECT is(ctxwin.build_window('a0000000-0000-4000-8000-000000000031') - 'context' - 'messages' - 'tokens',
          '{"summary": null, "summary_version": null, "summary_through_id": null}',
          'a session never summarized: the summary fields are null');

-- the errors are build_context's
SELECT throws_ok($$SELECT ctxwin.build_window('a0000000-0000-4000-8000-000000000011', 100, 'gemini')$$,
                 '22023', 'unrecognized format "gemini"', 'an unknown format');
SELECT throws_ok($$SELECT ctxwin.build_window('a0000000-0000-4000-8000-000000000011', 100, NULL)$$,
                 '22023', 'unrecognized format "NULL"', 'a NULL format');
SELECT throws_ok($$SELECT ctxwin.build_window('a0000000-0000-4000-8000-000000000011', 0)$$,
                 '22023', 'token budget must be greater than zero', 'a budget of 0');
SELECT throws_ok($$SELECT ctxwin.build_window(NULL)$$, '22004', NULL, 'a NULL session');
SELECT throws_ok($$SELECT ctxwin.build_context(NULL)$$, '22004', NULL, '... as build_context');
SELECT throws_ok($$SELECT ctxwin.build_window('a0000000-0000-4000-8000-0000000000ff')$$, 'P0002',
                 'session a0000000-0000-4000-8000-0000000000ff does not exist', 'a session that does not exist');
SELECT throws_ok($$SELECT ctxwin.build_window('a0000000-0000-4000-8000-000000000011', 100, 'openai', '{"not": "a list"}')$$,
                 '22023', NULL, 'tools that are not a list');
SELECT throws_ok($$SELECT ctxwin.build_context('a0000000-0000-4000-8000-000000000011', 100, 'openai', '{"not": "a list"}')$$,
                 '22023', NULL, '... as build_context');
SELECT is(ctxwin.build_window('a0000000-0000-4000-8000-000000000011', 900, 'openai', NULL, NULL) -> 'context',
          ctxwin.build_context('a0000000-0000-4000-8000-000000000011', 900, 'openai', NULL, NULL),
          'a NULL cache is true, as for build_context');

-- append_and_build: the rows of the window as "messages", with the request body too
CREATE TEMP TABLE turn AS
SELECT ctxwin.append_and_build('a0000000-0000-4000-8000-000000000013',
                               '[{"role": "user", "content": "One more question."}]', ARRAY['q-last'], 400) AS t;
SELECT is((SELECT t - 'ids' FROM turn),
          ctxwin.build_window('a0000000-0000-4000-8000-000000000013', 400) - 'summary' - 'summary_version'
          - 'summary_through_id' - 'tokens',
          'append_and_build returns the window and its rows as build_window does');
SELECT is((SELECT t #>> '{messages,-1}' FROM turn),
          (SELECT jsonb_build_object('id', message_count, 'client_key', 'q-last', 'role', 'user')::text
           FROM ctxwin.sessions WHERE id = 'a0000000-0000-4000-8000-000000000013'),
          'the appended message is the newest row, with its key');
CREATE TEMP TABLE turn2 AS
SELECT ctxwin.append_and_build('a0000000-0000-4000-8000-000000000023',
                               '[{"role": "user", "content": "And the request?"}]', NULL, 400, 'anthropic',
                               NULL, true, true, true) AS t;
SELECT is((SELECT t FROM turn2),
          jsonb_build_object('ids', jsonb_build_array((SELECT message_count FROM ctxwin.sessions
                                                       WHERE id = 'a0000000-0000-4000-8000-000000000023')),
                             'request', ctxwin.build_request('a0000000-0000-4000-8000-000000000023', 400, 'anthropic',
                                                             NULL, true, true),
                             'messages', ctxwin._request_window('a0000000-0000-4000-8000-000000000023', 400, 'anthropic',
                                                                NULL, true, true) -> 'messages'),
          'with request: the body and the rows of its window (recall''s tool counted)');
SELECT isnt(ctxwin._request_window('a0000000-0000-4000-8000-000000000023', 400, 'anthropic', NULL, true, true) -> 'messages',
            ctxwin.build_window('a0000000-0000-4000-8000-000000000023', 400, 'anthropic') -> 'messages',
            '... which has fewer rows than the window without the tool');
SELECT is((SELECT count(*) FROM ctxwin.sessions s
           WHERE ctxwin._request_window(s.id, 900, 'openai', NULL, true, false) -> 'messages'
                 <> ctxwin.build_window(s.id, 900) -> 'messages'
              OR ctxwin._request_window(s.id, 900, 'openai', NULL, true, false) -> 'request'
                 <> ctxwin.build_request(s.id, 900)),
          0::bigint, 'without tools a request''s rows are the window''s, its body build_request''s');

-- declared as build_context is
SELECT is((SELECT row(provolatile, prosecdef, proconfig)::text FROM pg_proc
           WHERE oid = 'ctxwin.build_window(uuid,int,text,jsonb,boolean)'::regprocedure),
          row('s', false, ARRAY['search_path=pg_catalog, pg_temp'])::text,
          'build_window is stable, runs as the caller, with a pinned search_path');

SELECT * FROM finish();
ROLLBACK;

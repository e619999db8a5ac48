-- Every public function and trigger of ctxwin once, on session :'sid'.
-- test/hostile.pl runs it with hostile objects first on search_path, so it
-- uses no operator and no function of its own: only literals and ctxwin's
-- functions, whose results the test compares.
\set ON_ERROR_STOP 1
SELECT ctxwin.count_tokens('hello world'), ctxwin.count_tokens('hello world', 'gpt-4o'),
       ctxwin.count_tokens('hello world', 'chars4'), ctxwin.count_tokens('hello world', 'chars3.5'),
       ctxwin.detokenize(ctxwin.tokenize('hello world', 'gpt-4o'), 'o200k_base'),
       ctxwin.count_message_tokens('{"role": "user", "content": "hi", "name": "bo"}', 'gpt-4o'),
       ctxwin.message_tokens('user', 'hi', NULL, NULL, NULL, 'cl100k_base'),
       ctxwin.truncate_middle('one two three four five six seven eight nine ten eleven twelve', 8) IS NOT NULL;
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES (:'sid', :'profile', 'You help.');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES
    (:'sid', 'user', 'Message 1 about the file /srv/app/config-1.yaml and ticket ABC-7.'),
    (:'sid', 'assistant', 'Message 2 about the file /srv/app/config-2.yaml and ticket ABC-14.'),
    (:'sid', 'user', 'Message 3 about the file /srv/app/config-3.yaml and ticket ABC-21.'),
    (:'sid', 'assistant', 'Message 4 about the file /srv/app/config-4.yaml and ticket ABC-28.');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES (:'sid', 'user', 'Look it up.');
INSERT INTO ctxwin.messages (session_id, role, content, tool_calls) VALUES
    (:'sid', 'assistant', NULL, '[{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": 1}"}}]');
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES (:'sid', 'tool', 'result 1', 'c1');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES
    (:'sid', 'assistant', 'Later message 1.'), (:'sid', 'user', 'Later message 2.'),
    (:'sid', 'assistant', 'Later message 3.'), (:'sid', 'user', 'Later message 4.');
SELECT ctxwin.build_context(:'sid') IS NOT NULL, ctxwin.build_context(:'sid', 60) IS NOT NULL,
       ctxwin.build_context(:'sid', NULL, 'anthropic') IS NOT NULL;
SELECT messages_since_summary, will_trigger FROM ctxwin.context_status(:'sid');
SELECT ctxwin.context_report(:'sid') IS NOT NULL;
SELECT count(*) FROM ctxwin.messages_after(:'sid', 3);
SELECT (ctxwin.summarize_session(:'sid', true, 'keep the file names')).version;
INSERT INTO ctxwin.messages (session_id, role, content) VALUES
    (:'sid', 'assistant', 'Even later 1.'), (:'sid', 'user', 'Even later 2.'),
    (:'sid', 'assistant', 'Even later 3.'), (:'sid', 'user', 'Even later 4.'),
    (:'sid', 'assistant', 'Even later 5.'), (:'sid', 'user', 'Even later 6.'),
    (:'sid', 'assistant', 'Even later 7.'), (:'sid', 'user', 'Even later 8.');
SELECT ctxwin.compact(10);
SELECT summary_version, summary_through_id FROM ctxwin.sessions WHERE id OPERATOR(pg_catalog.=) :'sid';
SELECT count(*) FROM ctxwin.worker_status;
UPDATE ctxwin.sessions SET system_prompt = 'You help a lot.', metadata = '{"k": 1}' WHERE id OPERATOR(pg_catalog.=) :'sid';
UPDATE ctxwin.messages SET metadata = '{"seen": true}' WHERE session_id OPERATOR(pg_catalog.=) :'sid' AND id OPERATOR(pg_catalog.=) 2;
SELECT ctxwin.build_context(:'sid') IS NOT NULL;
SELECT ctxwin.record_usage(:'sid', '{"input_tokens": 900, "output_tokens": 20, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 0}');
SELECT ctxwin.record_usage(:'sid', '{"prompt_tokens": 300, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 128}}', 1, 250);
SELECT ctxwin.record_usage(:'sid', '{"input_tokens": 300, "output_tokens": 20, "total_tokens": 320, "input_tokens_details": {"cached_tokens": 0}}', NULL, 250);
SELECT requests, cost IS NOT NULL, cache_hit_ratio IS NOT NULL FROM ctxwin.usage WHERE session_id OPERATOR(pg_catalog.=) :'sid';
SELECT count(*) FROM ctxwin.profile_usage;
SELECT count(*) FROM ctxwin.usage_ledger WHERE session_id OPERATOR(pg_catalog.=) :'sid';
SELECT budget_margin, budget FROM ctxwin.context_status(:'sid');
SELECT ctxwin.usage_cost('claude-haiku-4-5-20251001', 10, 1, 1, 10), ctxwin.context_report(:'sid') IS NOT NULL;
SELECT * FROM ctxwin.usage_tokens('{"tokens": 1}', true);

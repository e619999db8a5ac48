-- build_context, context_report and errors: exact outputs.
\set SHOW_CONTEXT never
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages, response_reserve)
VALUES ('support', 'gpt-4o-mini', 8, 2, 1000);
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
VALUES ('20000000-0000-0000-0000-000000000001', 'support', 'You are the support agent of Acme.');

INSERT INTO ctxwin.messages (session_id, role, content) VALUES
    ('20000000-0000-0000-0000-000000000001', 'user', 'My order 1042 has not arrived.'),
    ('20000000-0000-0000-0000-000000000001', 'assistant', 'Let me look it up.');
INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES
    ('20000000-0000-0000-0000-000000000001', 'assistant',
     '[{"id": "call_1", "type": "function", "function": {"name": "order_status", "arguments": "{\"order\": 1042}"}}]');
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES
    ('20000000-0000-0000-0000-000000000001', 'tool', '{"status": "shipped", "eta": "2026-11-24"}', 'call_1');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES
    ('20000000-0000-0000-0000-000000000001', 'assistant', 'It shipped and should arrive on November 24.'),
    ('20000000-0000-0000-0000-000000000001', 'user', 'Thanks!');

SELECT id, role, token_count, token_encoding FROM ctxwin.messages ORDER BY id;
SELECT message_count, token_count, unsummarized_messages, unsummarized_tokens, prompt_tokens,
       compaction_queued_at IS NOT NULL AS queued
FROM ctxwin.sessions;

SELECT jsonb_pretty(ctxwin.build_context('20000000-0000-0000-0000-000000000001'));
SELECT jsonb_pretty(ctxwin.build_context('20000000-0000-0000-0000-000000000001', format => 'anthropic'));

-- a budget that holds only the newest messages: the tool group goes whole
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000001', 60);

-- two more messages fire the messages trigger (8)
INSERT INTO ctxwin.messages (session_id, role, content) VALUES
    ('20000000-0000-0000-0000-000000000001', 'assistant', 'You are welcome.'),
    ('20000000-0000-0000-0000-000000000001', 'user', 'One more thing: can I change the address?');
SELECT compaction_queued_at IS NOT NULL AS queued FROM ctxwin.sessions;

BEGIN;
UPDATE ctxwin.sessions
SET conversation_summary = 'Order 1042 shipped; ETA 2026-11-24.', summary_through_id = 5;
SELECT regexp_replace(ctxwin.context_report('20000000-0000-0000-0000-000000000001'),
                      'queued since [0-9: -]+', 'queued since (time)');
COMMIT;
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000001');

SELECT session_id, budget, messages_since_summary, tokens_since_summary, will_trigger,
       summary_version, summary_tokens, window_messages, dropped_messages
FROM ctxwin.context_status('20000000-0000-0000-0000-000000000001');

SELECT id, role FROM ctxwin.messages_after('20000000-0000-0000-0000-000000000001', 6);

-- errors
SELECT ctxwin.build_context('20000000-0000-0000-0000-00000000ffff');
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000001', 0);
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000001', 5);
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000001', 100, 'gemini');
SELECT ctxwin.messages_after('20000000-0000-0000-0000-00000000ffff');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('20000000-0000-0000-0000-000000000001', 'narrator', 'x');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('20000000-0000-0000-0000-00000000ffff', 'user', 'x');
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES ('20000000-0000-0000-0000-000000000001', 'tool', 'x', 'call_9');
INSERT INTO ctxwin.messages (session_id, role, content, tool_calls) VALUES ('20000000-0000-0000-0000-000000000001', 'user', 'x', '[{"id": "c"}]');
INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES ('20000000-0000-0000-0000-000000000001', 'assistant', '{"id": "c"}');
INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES ('20000000-0000-0000-0000-000000000001', 'assistant', '[{"type": "function"}]');
INSERT INTO ctxwin.messages (session_id, id, role, content) VALUES ('20000000-0000-0000-0000-000000000001', 3, 'user', 'x');
INSERT INTO ctxwin.messages (session_id, id, role, content) VALUES ('20000000-0000-0000-0000-000000000001', 99, 'user', 'x');
UPDATE ctxwin.messages SET content = 'changed' WHERE id = 1;
DELETE FROM ctxwin.messages WHERE id = 1;
UPDATE ctxwin.sessions SET summary_through_id = 2;
UPDATE ctxwin.sessions SET summary_through_id = 3;
UPDATE ctxwin.sessions SET summary_through_id = 50;
SELECT ctxwin.count_message_tokens('[1, 2]');
SELECT ctxwin.count_message_tokens('{"role": "user", "content": "hi", "extra": "ignored"}', 'cl100k_base');
SELECT ctxwin.truncate_middle(repeat('abc ', 100), 20, 'cl100k_base');
SELECT ctxwin.count_tokens(ctxwin.truncate_middle(repeat('abc ', 100), 20, 'cl100k_base'), 'cl100k_base');

-- a cut always carries its marker: below the marker, the budget is too small
INSERT INTO ctxwin.sessions (id, profile) VALUES ('20000000-0000-0000-0000-000000000002', 'support');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('20000000-0000-0000-0000-000000000002', 'user',
    'Please summarize the attached quarterly report for the board meeting tomorrow morning.');
SELECT b, ctxwin.build_context('20000000-0000-0000-0000-000000000002', b)
FROM (VALUES (30), (20), (17)) v(b);
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000002', 17, 'anthropic');
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000002', 16);
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000002', 12);
SELECT ctxwin.build_context('20000000-0000-0000-0000-000000000002', 8, 'anthropic');

DELETE FROM ctxwin.sessions;
SELECT count(*) FROM ctxwin.messages;
INSERT INTO ctxwin.sessions (profile) VALUES ('no_such_profile');

-- Tenants under row-level security, with the grants the README gives an
-- application role: tenant A sees nothing of tenant B's sessions through any
-- function or view, and every function works for A on A's own sessions.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

\ir lib/sliding.sql

CREATE ROLE ctxwin_rls_a;
CREATE ROLE ctxwin_rls_b;
-- the README's grants
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_rls_a, ctxwin_rls_b;
GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO ctxwin_rls_a, ctxwin_rls_b;
GRANT SELECT ON ctxwin.models, ctxwin.profiles, ctxwin.summaries, ctxwin.flush_events
    TO ctxwin_rls_a, ctxwin_rls_b;
-- and, for a role that calls summarize_session or compact() itself
GRANT INSERT ON ctxwin.summaries, ctxwin.flush_events TO ctxwin_rls_a, ctxwin_rls_b;
-- and, for a role that records usage
GRANT SELECT, INSERT ON ctxwin.usage_log TO ctxwin_rls_a, ctxwin_rls_b;
-- one policy per table: a session belongs to the tenant named in its metadata
ALTER TABLE ctxwin.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.summaries ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.flush_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.usage_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON ctxwin.sessions
    USING (metadata ->> 'tenant' = current_user) WITH CHECK (metadata ->> 'tenant' = current_user);
CREATE POLICY tenant ON ctxwin.messages
    USING (EXISTS (SELECT FROM ctxwin.sessions s WHERE s.id = session_id));
CREATE POLICY tenant ON ctxwin.summaries
    USING (EXISTS (SELECT FROM ctxwin.sessions s WHERE s.id = session_id));
CREATE POLICY tenant ON ctxwin.flush_events
    USING (EXISTS (SELECT FROM ctxwin.sessions s WHERE s.id = session_id));
CREATE POLICY tenant ON ctxwin.usage_log
    USING (EXISTS (SELECT FROM ctxwin.sessions s WHERE s.id = session_id));

INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy)
VALUES ('rls', 'gpt-4o', 6, NULL, NULL, 2, 200, 'extractive');

CREATE FUNCTION pg_temp.fill(s uuid, n int) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content)
    SELECT s, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
           format('Tenant %s, message %s: the build of service-%s failed on host h%s.', current_user, g, g, g)
    FROM generate_series(1, n) g $$;
GRANT EXECUTE ON FUNCTION pg_temp.fill(uuid, int) TO PUBLIC;

SET ROLE ctxwin_rls_b;
INSERT INTO ctxwin.sessions (id, profile, system_prompt, metadata)
VALUES ('b0000000-0000-4000-8000-000000000001', 'rls', 'B''s secret prompt.', '{"tenant": "ctxwin_rls_b"}'),
       ('b0000000-0000-4000-8000-000000000002', 'rls', 'B again.', '{"tenant": "ctxwin_rls_b"}');
SELECT pg_temp.fill('b0000000-0000-4000-8000-000000000001', 10);
SELECT pg_temp.fill('b0000000-0000-4000-8000-000000000002', 10);
SELECT is((ctxwin.summarize_session('b0000000-0000-4000-8000-000000000001', true)).version, 1,
          'B summarizes its own session (with INSERT on summaries and flush_events)');
SELECT is(ctxwin.record_usage('b0000000-0000-4000-8000-000000000001', '{"prompt_tokens": 500, "completion_tokens": 40}'),
          1::bigint, 'B records the usage of a request');

SET ROLE ctxwin_rls_a;
INSERT INTO ctxwin.sessions (id, profile, system_prompt, metadata)
VALUES ('a0000000-0000-4000-8000-000000000001', 'rls', 'A''s prompt.', '{"tenant": "ctxwin_rls_a"}');
SELECT pg_temp.fill('a0000000-0000-4000-8000-000000000001', 10);

-- A's own session: every function works with the README's grants
SELECT ok(jsonb_array_length(ctxwin.build_context('a0000000-0000-4000-8000-000000000001')) > 1,
          'build_context works for an application role with the README''s grants');
SELECT ok(ctxwin.build_context('a0000000-0000-4000-8000-000000000001', 500, 'anthropic') ? 'messages',
          '... in the anthropic format too');
SELECT is(jsonb_path_query_array(ctxwin.build_window('a0000000-0000-4000-8000-000000000001'), '$.messages[*].id'),
          '[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]', 'build_window works for A on A''s session, with its rows');
SELECT is(ctxwin.append_messages((ctxwin.ensure_session('a0000000-0000-4000-8000-000000000002', 'rls', NULL,
                                                        '{"tenant": "ctxwin_rls_a"}')).id,
                                 '[{"role": "user", "content": "A again."}]'),
          ARRAY[1]::bigint[], 'ensure_session creates a session of A''s and append_messages writes to it, in one statement');
DELETE FROM ctxwin.sessions WHERE id = 'a0000000-0000-4000-8000-000000000002';
SELECT is((SELECT messages_since_summary FROM ctxwin.context_status('a0000000-0000-4000-8000-000000000001')),
          10::bigint, 'context_status works for A on A''s session');
SELECT ok(ctxwin.context_report('a0000000-0000-4000-8000-000000000001') LIKE 'Session a0000000%',
          'context_report works for A on A''s session');
SELECT is((SELECT count(*) FROM ctxwin.messages_after('a0000000-0000-4000-8000-000000000001', 4)), 6::bigint,
          'messages_after works for A on A''s session');
SELECT is((SELECT count(*) FROM ctxwin.session_settings), 1::bigint,
          'session_settings shows A only A''s session');
SELECT is(ctxwin.record_usage('a0000000-0000-4000-8000-000000000001', '{"prompt_tokens": 300, "completion_tokens": 20}'),
          1::bigint, 'record_usage works for A on A''s session');
SELECT is((SELECT row(requests, input_tokens)::text FROM ctxwin.usage), '(1,300)',
          'ctxwin.usage shows A its own session only');
SELECT is((SELECT count(*) FROM ctxwin.usage_ledger), 1::bigint, 'the ledger shows A none of B''s requests');
SELECT is((SELECT sum(requests) FROM ctxwin.profile_usage), 1::numeric,
          'profile_usage counts A''s requests only');

-- B's sessions: nothing, through any function or view
SELECT is((SELECT count(*) FROM ctxwin.sessions), 1::bigint, 'A sees one session: its own');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE session_id::text LIKE 'b%'), 0::bigint,
          'A sees none of B''s messages');
SELECT is((SELECT count(*) FROM ctxwin.summaries), 0::bigint, 'A sees none of B''s summaries');
SELECT is((SELECT count(*) FROM ctxwin.flush_events), 0::bigint, 'A sees none of B''s flush events');
SELECT throws_ok($$SELECT ctxwin.build_context('b0000000-0000-4000-8000-000000000001')$$,
                 NULL, 'session b0000000-0000-4000-8000-000000000001 does not exist',
                 'build_context of B''s session: does not exist, for A');
SELECT throws_ok($$SELECT ctxwin.build_context('b0000000-0000-4000-8000-000000000001', 100, 'anthropic')$$,
                 NULL, 'session b0000000-0000-4000-8000-000000000001 does not exist',
                 '... in the anthropic format too');
SELECT throws_ok($$SELECT ctxwin.build_window('b0000000-0000-4000-8000-000000000001')$$,
                 NULL, 'session b0000000-0000-4000-8000-000000000001 does not exist',
                 'build_window of B''s session: does not exist, for A');
SELECT throws_ok($$SELECT ctxwin.ensure_session('b0000000-0000-4000-8000-000000000001', 'rls', NULL,
                                                '{"tenant": "ctxwin_rls_a"}')$$,
                 '42501', NULL, 'ensure_session of B''s session id: refused, for A');
SELECT throws_ok($$SELECT * FROM ctxwin.context_status('b0000000-0000-4000-8000-000000000001')$$,
                 NULL, 'session b0000000-0000-4000-8000-000000000001 does not exist',
                 'context_status of B''s session: does not exist');
SELECT throws_ok($$SELECT ctxwin.context_report('b0000000-0000-4000-8000-000000000001')$$,
                 NULL, 'session b0000000-0000-4000-8000-000000000001 does not exist',
                 'context_report of B''s session: does not exist');
SELECT throws_ok($$SELECT * FROM ctxwin.messages_after('b0000000-0000-4000-8000-000000000001')$$,
                 NULL, 'session b0000000-0000-4000-8000-000000000001 does not exist',
                 'messages_after of B''s session: does not exist');
SELECT throws_ok($$SELECT ctxwin.record_usage('b0000000-0000-4000-8000-000000000001', '{"prompt_tokens": 1, "completion_tokens": 1}')$$,
                 'P0002', 'session b0000000-0000-4000-8000-000000000001 does not exist',
                 'record_usage for B''s session: does not exist');
SELECT throws_ok($$SELECT ctxwin.summarize_session('b0000000-0000-4000-8000-000000000002', true)$$,
                 NULL, 'session b0000000-0000-4000-8000-000000000002 does not exist',
                 'summarize_session of B''s session: does not exist');
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content)
                   VALUES ('b0000000-0000-4000-8000-000000000002', 'user', 'injected by A')$$,
                 NULL, NULL, 'A cannot add a message to B''s session');
SELECT throws_ok($$INSERT INTO ctxwin.messages (session_id, role, content, retracted_at)
                   VALUES ('a0000000-0000-4000-8000-000000000001', 'user', 'born retracted', now())$$,
                 '42501', 'permission denied to write column "retracted_at" of ctxwin.messages',
                 'an application role cannot insert a retracted message');
SELECT throws_ok($$UPDATE ctxwin.messages SET retracted_at = now()
                   WHERE session_id = 'a0000000-0000-4000-8000-000000000001' AND id = 1$$,
                 '23000', 'messages cannot be changed', '... nor mark one retracted by an UPDATE');
SELECT throws_ok($$SELECT ctxwin.retract('b0000000-0000-4000-8000-000000000001', 1)$$,
                 'P0002', 'session b0000000-0000-4000-8000-000000000001 does not exist',
                 'retract of B''s session: does not exist');
SELECT is((SELECT ctxwin._session_visible('b0000000-0000-4000-8000-000000000001')), false,
          'worker_status would hide an error of B''s session from A');
SELECT is((SELECT ctxwin._session_visible('a0000000-0000-4000-8000-000000000001')), true,
          '... and show one of A''s own');
UPDATE ctxwin.sessions SET system_prompt = 'taken over' WHERE id = 'b0000000-0000-4000-8000-000000000002';
DELETE FROM ctxwin.sessions WHERE id = 'b0000000-0000-4000-8000-000000000002';
SELECT lives_ok($$SELECT count(*) FROM ctxwin.worker_status$$, 'A can read worker_status');

-- compact() as A summarizes A's queued sessions, never B's
SELECT is(ctxwin.compact(100), 1, 'compact() as A summarizes exactly one session: A''s');

RESET ROLE;
SELECT is((SELECT system_prompt FROM ctxwin.sessions WHERE id = 'b0000000-0000-4000-8000-000000000002'),
          'B again.', 'A''s UPDATE of B''s session changed nothing');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE session_id = 'b0000000-0000-4000-8000-000000000002'),
          10::bigint, 'A''s DELETE of B''s session deleted nothing');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE session_id::text LIKE 'b%' AND retracted_at IS NOT NULL),
          0::bigint, 'A''s retract of B''s session marked nothing');
SELECT is((SELECT summary_version FROM ctxwin.sessions WHERE id = 'b0000000-0000-4000-8000-000000000002'),
          0, 'B''s queued session was not summarized by A''s compact()');
SELECT isnt((SELECT compaction_queued_at FROM ctxwin.sessions WHERE id = 'b0000000-0000-4000-8000-000000000002'),
            NULL, '... and is still queued');
SELECT is((SELECT summary_version FROM ctxwin.sessions WHERE id = 'a0000000-0000-4000-8000-000000000001'),
          1, 'A''s session was summarized');
SELECT is((SELECT count(*) FROM ctxwin.summaries WHERE content LIKE '%Tenant ctxwin_rls_b%'
             AND session_id::text LIKE 'a%'), 0::bigint, 'no summary of A quotes B''s messages');

SET ROLE ctxwin_rls_b;
SELECT is((SELECT count(*) FROM ctxwin.summaries), 1::bigint, 'B sees its own summary');
SELECT is((SELECT count(*) FROM ctxwin.sessions), 2::bigint, 'B sees its two sessions');
SELECT is((SELECT count(*) FROM ctxwin.session_settings), 2::bigint, 'session_settings shows B its two');
SELECT is((SELECT row(requests, input_tokens)::text FROM ctxwin.usage ORDER BY requests DESC LIMIT 1), '(1,500)',
          'B sees its own usage, and none of A''s');
SELECT is(ctxwin.retract('b0000000-0000-4000-8000-000000000001', 3), 8,
          'B retracts in its own summarized session, with the README''s grants');
SELECT is((SELECT format('%s %s', s.summary_through_id, (SELECT count(*) FROM ctxwin.summaries x
                                                         WHERE x.session_id = s.id AND x.retracted_at IS NOT NULL))
           FROM ctxwin.sessions s WHERE s.id = 'b0000000-0000-4000-8000-000000000001'), '0 1',
          '... its summary marked (B has no UPDATE on summaries) and no longer the session''s');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;

-- ensure_session: a session created in the statement of its first write.
-- A new id is created with the settings given (NULLs: the defaults), an
-- existing one is returned as it is stored whatever the arguments say, the
-- one statement a client sends (append_messages of ensure_session's id)
-- works in an open transaction and leaves it usable, and under row-level
-- security a session of another tenant is an error, never a second row.
-- (Two transactions creating the same id at once: test/sessions_ensure.pl.)
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

INSERT INTO ctxwin.profiles (name, model, response_reserve) VALUES ('small', 'gpt-4o-mini', 50);

-- a new id: created, with the defaults for NULLs
SELECT is((ctxwin.ensure_session('e0000000-0000-4000-8000-000000000001')).id,
          'e0000000-0000-4000-8000-000000000001'::uuid, 'a new id is created and returned');
SELECT is((SELECT row(profile, system_prompt, metadata, message_count)::text FROM ctxwin.sessions
           WHERE id = 'e0000000-0000-4000-8000-000000000001'),
          row('default', NULL::text, '{}'::jsonb, 0::bigint)::text,
          'with profile default, no system prompt and metadata {} when they are NULL');
SELECT is((ctxwin.ensure_session('e0000000-0000-4000-8000-000000000002', 'small', 'Be brief.',
                                 '{"user": "ada"}')).profile,
          'small', 'profile, system prompt and metadata as given');
SELECT is((SELECT row(profile, system_prompt, metadata)::text FROM ctxwin.sessions
           WHERE id = 'e0000000-0000-4000-8000-000000000002'),
          row('small', 'Be brief.', '{"user": "ada"}'::jsonb)::text, 'stored as given');

-- an existing id: the stored row, its settings untouched, no error
SELECT ctxwin.append_messages('e0000000-0000-4000-8000-000000000002', '[{"role": "user", "content": "Hello there."}]');
SELECT is(ctxwin.ensure_session('e0000000-0000-4000-8000-000000000002', 'default', 'Be verbose.', '{"user": "bob"}'),
          (SELECT s FROM ctxwin.sessions s WHERE id = 'e0000000-0000-4000-8000-000000000002'),
          'an existing id returns its row as stored, counters included');
SELECT is((SELECT row(profile, system_prompt, metadata, message_count)::text FROM ctxwin.sessions
           WHERE id = 'e0000000-0000-4000-8000-000000000002'),
          row('small', 'Be brief.', '{"user": "ada"}'::jsonb, 1::bigint)::text,
          'and leaves its settings as they were');
SELECT is((SELECT count(*) FROM ctxwin.sessions), 2::bigint, 'two sessions, no duplicate');

-- the errors
SELECT throws_ok($$SELECT ctxwin.ensure_session(NULL)$$, '22004', 'session id must not be null',
                 'a NULL id is refused');
SELECT throws_ok($$SELECT ctxwin.ensure_session('e0000000-0000-4000-8000-000000000003', 'nope')$$, '23503', NULL,
                 'an unknown profile is the foreign key''s error');
SELECT is((SELECT count(*) FROM ctxwin.sessions WHERE id = 'e0000000-0000-4000-8000-000000000003'), 0::bigint,
          'and creates nothing');

-- the client's one statement: a new session and its first messages
SELECT is(ctxwin.append_messages((ctxwin.ensure_session('e0000000-0000-4000-8000-000000000004', 'small')).id,
                                 '[{"role": "user", "content": "First."}, {"role": "assistant", "content": "Second."}]',
                                 ARRAY['k1', 'k2']),
          ARRAY[1, 2]::bigint[], 'append_messages of ensure_session''s id stores the first messages of a new session');
SELECT is(ctxwin.append_messages((ctxwin.ensure_session('e0000000-0000-4000-8000-000000000004', 'small')).id,
                                 '[{"role": "assistant", "content": "Second."}, {"role": "user", "content": "Third."}]',
                                 ARRAY['k2', 'k3']),
          ARRAY[2, 3]::bigint[], 'and the next write of the same session goes on from them');
SELECT is((ctxwin.append_and_build((ctxwin.ensure_session('e0000000-0000-4000-8000-000000000005')).id,
                                   '[{"role": "user", "content": "Hi."}]')) -> 'ids',
          '[1]'::jsonb, 'append_and_build nests the same way');
SELECT is((SELECT string_agg(content, ' ' ORDER BY id) FROM ctxwin.messages
           WHERE session_id = 'e0000000-0000-4000-8000-000000000004'),
          'First. Second. Third.', 'each message stored once');

-- inside the caller's transaction: the statement works and the transaction
-- goes on (the suite itself runs in one; a savepoint shows it was never
-- aborted: a later statement and a RELEASE both work)
SAVEPOINT caller;
SELECT ctxwin.append_messages((ctxwin.ensure_session('e0000000-0000-4000-8000-000000000006')).id,
                              '[{"role": "user", "content": "Inside a transaction."}]');
SELECT is((SELECT message_count FROM ctxwin.sessions WHERE id = 'e0000000-0000-4000-8000-000000000006'),
          1::bigint, 'in an open transaction the first write creates the session and stores the message');
RELEASE SAVEPOINT caller;
SELECT is(txid_current_if_assigned() IS NOT NULL, true, 'the transaction is still usable after it');

-- the function as declared: invoker, search_path pinned
SELECT is((SELECT row(prosecdef, proconfig)::text FROM pg_proc
           WHERE oid = 'ctxwin.ensure_session(uuid,text,text,jsonb)'::regprocedure),
          row(false, ARRAY['search_path=pg_catalog, pg_temp'])::text,
          'ensure_session runs as the caller with a pinned search_path');

-- row-level security: tenants by the metadata of their sessions (as test/rls.sql)
CREATE ROLE ctxwin_ensure_a;
CREATE ROLE ctxwin_ensure_b;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_ensure_a, ctxwin_ensure_b;
GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO ctxwin_ensure_a, ctxwin_ensure_b;
GRANT SELECT ON ctxwin.models, ctxwin.profiles TO ctxwin_ensure_a, ctxwin_ensure_b;
ALTER TABLE ctxwin.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.messages ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON ctxwin.sessions
    USING (metadata ->> 'tenant' = current_user) WITH CHECK (metadata ->> 'tenant' = current_user);
CREATE POLICY tenant ON ctxwin.messages
    USING (EXISTS (SELECT FROM ctxwin.sessions s WHERE s.id = session_id));

SET ROLE ctxwin_ensure_b;
SELECT is(ctxwin.append_messages((ctxwin.ensure_session('e0000000-0000-4000-8000-0000000000b1', NULL, NULL,
                                                        '{"tenant": "ctxwin_ensure_b"}')).id,
                                 '[{"role": "user", "content": "B''s first."}]'),
          ARRAY[1]::bigint[], 'under row-level security a tenant creates its session and writes to it in one statement');
SELECT is((ctxwin.ensure_session('e0000000-0000-4000-8000-0000000000b1')).message_count, 1::bigint,
          'and finds it again');
SET ROLE ctxwin_ensure_a;
SELECT throws_ok($$SELECT ctxwin.ensure_session('e0000000-0000-4000-8000-0000000000b1', NULL, NULL,
                                                '{"tenant": "ctxwin_ensure_a"}')$$,
                 '42501', 'session e0000000-0000-4000-8000-0000000000b1 exists but is not visible to role ctxwin_ensure_a',
                 'another tenant''s session id is refused, not taken over');
SELECT throws_ok($$SELECT ctxwin.ensure_session('e0000000-0000-4000-8000-0000000000a1')$$,
                 '42501', NULL, 'a new session the policy refuses (metadata {}) is the policy''s error');
RESET ROLE;
SELECT is((SELECT count(*) FROM ctxwin.sessions WHERE id IN ('e0000000-0000-4000-8000-0000000000b1',
                                                            'e0000000-0000-4000-8000-0000000000a1')),
          1::bigint, 'B''s session is still one row, A created none');
SELECT is((SELECT metadata FROM ctxwin.sessions WHERE id = 'e0000000-0000-4000-8000-0000000000b1'),
          '{"tenant": "ctxwin_ensure_b"}'::jsonb, 'and still B''s');

SELECT * FROM finish();
ROLLBACK;

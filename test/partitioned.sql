-- ctxwin.messages hash-partitioned by session (ctxwin.messages_partitions
-- set when the extension is created): the table and its partitions, rows
-- in the partition of their session, the same numbering, counting, window
-- and summaries as the plain table gives, pg_dump's configuration, and the
-- values refused.  (scripts/test.sh also runs the window and summary
-- suites with the messages partitioned.)
\ir lib/begin.sql

SET LOCAL ctxwin.messages_partitions = 1;
SELECT throws_ok('CREATE EXTENSION ctxwin', '22023',
                 'invalid value for ctxwin.messages_partitions: 1',
                 'one partition is refused: 0 (a plain table) or 2 to 1024; nothing is created');
SET LOCAL ctxwin.messages_partitions = 4;
CREATE EXTENSION ctxwin;

SELECT is((SELECT relkind::text FROM pg_class WHERE oid = 'ctxwin.messages'::regclass), 'p',
          'ctxwin.messages is a partitioned table');
SELECT is((SELECT string_agg(c.relname || ' ' || pg_get_expr(c.relpartbound, c.oid), '; ' ORDER BY c.relname)
           FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
           WHERE i.inhparent = 'ctxwin.messages'::regclass),
          'messages_p0 FOR VALUES WITH (modulus 4, remainder 0); messages_p1 FOR VALUES WITH (modulus 4, remainder 1); '
          'messages_p2 FOR VALUES WITH (modulus 4, remainder 2); messages_p3 FOR VALUES WITH (modulus 4, remainder 3)',
          '... hash-partitioned by session into four partitions');
SELECT is((SELECT count(*)::int FROM pg_depend d
           WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e'
             AND d.objid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'ctxwin.messages'::regclass)),
          4, 'the partitions belong to the extension');
SELECT is((SELECT count(*)::int FROM pg_extension e, unnest(e.extconfig) c
           WHERE e.extname = 'ctxwin' AND c::regclass::text ~ '^ctxwin\.messages(_p[0-3])?$'),
          5, 'pg_dump dumps the rows of every partition (the table and its partitions are configuration tables)');

INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy,
                             window_policy)
VALUES ('p', 'gpt-4o', 6, NULL, NULL, 2, 200, 'extractive', 'sliding');
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
SELECT ('70000000-0000-0000-0000-00000000000' || g)::uuid, 'p', 'You help.' FROM generate_series(1, 8) g;
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT s.id, CASE WHEN k % 2 = 1 THEN 'user' ELSE 'assistant' END,
       'Message ' || k || ' of session ' || right(s.id::text, 1) || ' about invoice E' || (k * 7) || '.'
FROM ctxwin.sessions s, generate_series(1, 8) k ORDER BY k, s.id;

SELECT is((SELECT count(DISTINCT tableoid)::int FROM ctxwin.messages), 4,
          'the messages of eight sessions are spread over the four partitions');
SELECT is((SELECT count(*)::int FROM (SELECT session_id FROM ctxwin.messages
                                      GROUP BY session_id HAVING count(DISTINCT tableoid) = 1) x),
          8, '... each session in one partition');
SELECT is((SELECT count(*)::int FROM ctxwin.sessions s
           WHERE s.message_count = 8
             AND s.token_count = (SELECT sum(token_count) FROM ctxwin.messages m WHERE m.session_id = s.id)
             AND (SELECT array_agg(id ORDER BY id) FROM ctxwin.messages m WHERE m.session_id = s.id)
                 = ARRAY[1, 2, 3, 4, 5, 6, 7, 8]::bigint[]),
          8, 'ids 1 to 8 in each session, counters exact');
SELECT is(ctxwin.count_message_tokens(jsonb_build_object('role', 'user', 'content', content), 'o200k_base'),
          token_count, 'token count of a message: ' || left(content, 30))
FROM ctxwin.messages WHERE session_id = '70000000-0000-0000-0000-000000000003' AND id IN (1, 2);
-- the budget that holds the system message and messages 6 to 8 exactly
-- (3: the tokens of the list); one token less holds 7 and 8 only
CREATE TEMP TABLE fit AS
SELECT ctxwin.messages_tokens(ctxwin.system_messages('You help.', NULL, 'system'), 'o200k_base')
       + (SELECT sum(token_count) FROM ctxwin.messages
          WHERE session_id = '70000000-0000-0000-0000-000000000003' AND id >= 6)::int + 3 AS budget;
SELECT is(ctxwin.build_context('70000000-0000-0000-0000-000000000003', (SELECT budget FROM fit)),
          ctxwin.system_messages('You help.', NULL, 'system')
          || (SELECT jsonb_agg(jsonb_build_object('role', role, 'content', content) ORDER BY id)
              FROM ctxwin.messages WHERE session_id = '70000000-0000-0000-0000-000000000003' AND id >= 6),
          'build_context: the newest messages that fit the budget exactly, read from the partition');
SELECT is(jsonb_array_length(ctxwin.build_context('70000000-0000-0000-0000-000000000003', (SELECT budget - 1 FROM fit))),
          3, '... and one token less drops the oldest of them');
SELECT is(ctxwin.compact(), 8, 'compact() summarized the eight queued sessions');
SELECT is((SELECT count(*)::int FROM ctxwin.sessions WHERE summary_through_id = 6 AND summary_version = 1), 8,
          '... each through message 6 (two recent messages kept)');
SELECT is(jsonb_array_length(ctxwin.build_context('70000000-0000-0000-0000-000000000005')), 3,
          'build_context after the summary: the system message with it and the two recent messages');
SELECT * FROM finish();
ROLLBACK;

-- summarize_session, compact and the extractive strategy: offline, so no
-- LLM server is needed.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

\ir lib/sliding.sql

INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy)
VALUES ('s', 'gpt-4o', 12, NULL, NULL, 4, 300, 'extractive');
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
VALUES ('30000000-0000-0000-0000-000000000001', 's', 'You help with the billing service.');

CREATE FUNCTION pg_temp.say(r text, c text, calls jsonb DEFAULT NULL, call_id text DEFAULT NULL)
RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id)
    VALUES ('30000000-0000-0000-0000-000000000001', r, c, calls, call_id) RETURNING id $$;

SELECT pg_temp.say('user', 'The invoice job fails with error E4242 in billing/money.py. Why?');
SELECT pg_temp.say('assistant', 'The root cause is float rounding. We should use Decimal with ROUND_HALF_EVEN.');
SELECT pg_temp.say('user', 'Deploys go through https://ci.example.com/billing and take 12 min.');
SELECT pg_temp.say('assistant', 'Agreed: switch the money type to NUMERIC(12,2) in migration 0042.');
SELECT pg_temp.say('user', 'ok');

-- no trigger fires: nothing happens without force
SELECT is((SELECT ctxwin.summarize_session('30000000-0000-0000-0000-000000000001')), NULL,
          'without force and below every trigger, summarize_session does nothing');
SELECT is((SELECT summary_through_id FROM ctxwin.sessions), 0::bigint, 'and the session is unchanged');

SELECT pg_temp.say(CASE WHEN g % 2 = 0 THEN 'user' ELSE 'assistant' END, 'Filler message number ' || g || '.')
FROM generate_series(1, 7) g;
SELECT isnt((SELECT compaction_queued_at FROM ctxwin.sessions), NULL, '12 messages fire the trigger and queue the session');

-- the first summary
CREATE TEMP TABLE s1 AS SELECT * FROM ctxwin.summarize_session('30000000-0000-0000-0000-000000000001');
SELECT is((SELECT version FROM s1), 1, 'the first summary is version 1');
SELECT is((SELECT from_id FROM s1), 1::bigint, 'it starts at the first message');
SELECT is((SELECT through_id FROM s1), 8::bigint, 'and leaves the newest 4 messages (min_recent_messages)');
SELECT is((SELECT summary_through_id FROM ctxwin.sessions), 8::bigint, 'the session''s summary point moved');
SELECT is((SELECT conversation_summary FROM ctxwin.sessions), (SELECT content FROM s1), 'the session holds the summary');
SELECT cmp_ok((SELECT token_count FROM s1), '<=', 300, 'the summary is within max_summary_tokens');
SELECT is((SELECT token_count FROM s1), ctxwin.count_tokens((SELECT content FROM s1), 'o200k_base'),
          'the summaries row records its tokens');
SELECT ok((SELECT content FROM s1) LIKE '%E4242%' AND (SELECT content FROM s1) LIKE '%billing/money.py%'
          AND (SELECT content FROM s1) LIKE '%https://ci.example.com/billing%' AND (SELECT content FROM s1) LIKE '%12 min%',
          'identifiers, paths, URLs and numbers with units are kept verbatim');
SELECT ok((SELECT content FROM s1) LIKE '%ROUND_HALF_EVEN%', 'decisions are kept');
SELECT is((SELECT array[from_id, through_id] FROM ctxwin.flush_events), ARRAY[1, 8]::bigint[],
          'a flush event carries the newly covered range');
SELECT is((SELECT compaction_queued_at FROM ctxwin.sessions), NULL, 'invariant 6: the session leaves the queue');
SELECT is((SELECT will_trigger FROM ctxwin.context_status('30000000-0000-0000-0000-000000000001')), false,
          'invariant 6: below every trigger');
SELECT is((SELECT ctxwin.summarize_session('30000000-0000-0000-0000-000000000001')), NULL,
          'invariant 6: no immediate re-trigger');

-- a second summary is incremental: it starts after the first and keeps its facts
SELECT pg_temp.say('user', 'Also the PDF renderer crashes with RenderError on page 3.');
SELECT pg_temp.say('assistant', 'We will pin weasyprint to 60.1 and retry.', '[{"id": "t1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]');
SELECT pg_temp.say('tool', '41 passed', NULL, 't1');
SELECT pg_temp.say(CASE WHEN g % 2 = 0 THEN 'user' ELSE 'assistant' END, 'More filler ' || g || '.')
FROM generate_series(1, 5) g;
CREATE TEMP TABLE s2 AS SELECT * FROM ctxwin.summarize_session('30000000-0000-0000-0000-000000000001', true,
                                                               'keep the renderer decisions');
SELECT is((SELECT from_id FROM s2), 9::bigint, 'invariant 5: the next summary starts right after the previous one');
SELECT is((SELECT through_id FROM s2), 16::bigint, 'and covers up to the newest 4');
SELECT ok((SELECT content FROM s2) LIKE '%E4242%' AND (SELECT content FROM s2) LIKE '%billing/money.py%',
          'facts of the previous summary survive into the new one');
SELECT ok((SELECT content FROM s2) LIKE '%RenderError%' AND (SELECT content FROM s2) LIKE '%run_tests%',
          'facts and tools of the newly covered messages are in it');
SELECT ok((SELECT content FROM s2) LIKE E'Goal and state:\n- Also the PDF renderer crashes%',
          'instructions bring matching sentences first');
SELECT is((SELECT array_agg(array[from_id, through_id] ORDER BY id) FROM ctxwin.flush_events),
          ARRAY[ARRAY[1, 8], ARRAY[9, 16]]::bigint[], 'summary ranges chain without gaps or overlaps');
SELECT is((SELECT array_agg(version ORDER BY version) FROM ctxwin.summaries), ARRAY[1, 2],
          'ctxwin.summaries keeps every version');

-- a cut never splits a tool group: with 2 recent messages kept, the target
-- would be the call; the summary stops before it
UPDATE ctxwin.profiles SET min_recent_messages = 2 WHERE name = 's';
SELECT pg_temp.say('assistant', 'Checking.', '[{"id": "t2", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]');
SELECT pg_temp.say('tool', 'no match', NULL, 't2');
SELECT pg_temp.say('assistant', 'Nothing found.');
CREATE TEMP TABLE s3 AS SELECT * FROM ctxwin.summarize_session('30000000-0000-0000-0000-000000000001', true);
SELECT is((SELECT through_id FROM s3), 20::bigint, 'the summary ends before a tool group rather than inside it');

-- summaries stay within small budgets
UPDATE ctxwin.profiles SET max_summary_tokens = 40 WHERE name = 's';
SELECT pg_temp.say('user', 'Final question: what about the currency table? ' || repeat('Detail ' || g || '. ', 20))
FROM generate_series(1, 3) g;
SELECT cmp_ok((SELECT token_count FROM ctxwin.summarize_session('30000000-0000-0000-0000-000000000001', true)), '<=', 40,
              'a summary never exceeds max_summary_tokens');

-- compact() processes the queue
INSERT INTO ctxwin.sessions (id, profile) SELECT ('3' || lpad(g::text, 7, '0') || '-0000-0000-0000-000000000002')::uuid, 's'
FROM generate_series(1, 3) g;
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT ('3' || lpad(g::text, 7, '0') || '-0000-0000-0000-000000000002')::uuid,
       CASE WHEN i % 2 = 0 THEN 'user' ELSE 'assistant' END, 'Message ' || i || ' about ticket BILL-' || g || '.'
FROM generate_series(1, 3) g, generate_series(1, 12) i;
SELECT is((SELECT count(*) FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL)::int, 3, 'three sessions are queued');
SELECT is(ctxwin.compact(), 3, 'compact() summarizes them');
SELECT is((SELECT count(*) FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL)::int, 0, 'and empties the queue');

-- errors leave the session unchanged
UPDATE ctxwin.profiles SET summary_strategy = 'llm' WHERE name = 's';
SELECT pg_temp.say('user', 'x' || g) FROM generate_series(1, 12) g;
SELECT throws_ok($$SELECT ctxwin.summarize_session('30000000-0000-0000-0000-000000000001', true)$$, '0A000',
                 'summary strategy "llm" needs an LLM, and none is configured', 'the llm strategy without an LLM is an error');
SELECT throws_ok($$SELECT ctxwin.summarize_session('30000000-0000-0000-0000-0000000000ff')$$, 'P0002',
                 'session 30000000-0000-0000-0000-0000000000ff does not exist', 'unknown session');
SELECT throws_ok($$SELECT ctxwin.compact(0)$$, '22023', 'max_sessions must be greater than zero', 'compact(0)');
SELECT throws_ok($$SELECT ctxwin._llm_summarize('{}')$$, '22004', 'session id must not be null',
                 '_llm_summarize of a plan without a session: a NULL session, as everywhere');
SELECT throws_ok($$SELECT ctxwin._llm_summarize('{"session": "30000000-0000-0000-0000-0000000000ff"}')$$, 'P0002',
                 'session 30000000-0000-0000-0000-0000000000ff does not exist', '_llm_summarize of an unknown session');

-- a profile change queues what it puts over a trigger
INSERT INTO ctxwin.profiles (name, max_messages_before_summary, min_recent_messages, summary_strategy)
VALUES ('late', 100, 2, 'extractive');
INSERT INTO ctxwin.sessions (id, profile) VALUES ('30000000-0000-0000-0000-000000000010', 'late');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '30000000-0000-0000-0000-000000000010', 'user', 'note ' || g FROM generate_series(1, 10) g;
SELECT is((SELECT compaction_queued_at FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000010'), NULL,
          '10 messages under a trigger of 100: not queued');
UPDATE ctxwin.profiles SET max_messages_before_summary = 8 WHERE name = 'late';
SELECT isnt((SELECT compaction_queued_at FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000010'), NULL,
            'lowering the profile''s trigger to 8 queues it');

-- queued, but its only cut points are inside an unanswered tool call
-- group: it stays queued (the counters say it is due) and is looked at
-- again later, instead of leaving the queue for good
UPDATE ctxwin.profiles SET max_messages_before_summary = 100 WHERE name = 'late';
INSERT INTO ctxwin.sessions (id, profile) VALUES ('30000000-0000-0000-0000-000000000011', 'late');
INSERT INTO ctxwin.messages (session_id, role, content, tool_calls)
VALUES ('30000000-0000-0000-0000-000000000011', 'assistant', NULL,
        (SELECT jsonb_agg(jsonb_build_object('id', 'c' || g, 'type', 'function',
                                             'function', jsonb_build_object('name', 'f', 'arguments', '{}')))
         FROM generate_series(1, 12) g));
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
SELECT '30000000-0000-0000-0000-000000000011', 'tool', 'result ' || g, 'c' || g FROM generate_series(1, 11) g;
UPDATE ctxwin.profiles SET max_messages_before_summary = 8 WHERE name = 'late';
SELECT is((SELECT ctxwin.summarize_session('30000000-0000-0000-0000-000000000011')), NULL,
          'nothing to summarize while the tool group is open');
SELECT ok((SELECT compaction_queued_at IS NOT NULL AND compaction_retry_at > now()
           FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000011'),
          'the session stays queued, to be looked at again later');
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
VALUES ('30000000-0000-0000-0000-000000000011', 'tool', 'result 12', 'c12');
SELECT ok((SELECT compaction_retry_at IS NULL FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000011'),
          'the next message clears the wait');
INSERT INTO ctxwin.messages (session_id, role, content)
VALUES ('30000000-0000-0000-0000-000000000011', 'assistant', 'All twelve done.'),
       ('30000000-0000-0000-0000-000000000011', 'user', 'Thanks.');
SELECT is((SELECT through_id FROM ctxwin.summarize_session('30000000-0000-0000-0000-000000000011')), 13::bigint,
          'once answered and followed by two messages, the whole group is summarized');

-- an application role with the README's grants (and INSERT on summaries and
-- flush_events) runs compact() and summarize_session: the queue and failure
-- bookkeeping is written by ctxwin's own functions, not by the role
INSERT INTO ctxwin.profiles (name, max_messages_before_summary, min_recent_messages, summary_strategy)
VALUES ('app_llm', 6, 2, 'llm');
CREATE ROLE ctxwin_sum_app;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_sum_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO ctxwin_sum_app;
GRANT SELECT ON ctxwin.models, ctxwin.profiles TO ctxwin_sum_app;
GRANT SELECT, INSERT ON ctxwin.summaries, ctxwin.flush_events TO ctxwin_sum_app;
SET ROLE ctxwin_sum_app;
INSERT INTO ctxwin.sessions (id, profile) VALUES ('30000000-0000-0000-0000-000000000021', 'app_llm');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '30000000-0000-0000-0000-000000000021', 'user', 'note ' || g FROM generate_series(1, 8) g;
SELECT lives_ok($$SELECT ctxwin.compact()$$, 'compact() runs as an application role');
SELECT ok((SELECT compaction_failures = 1 AND compaction_retry_at > now() AND last_error LIKE '%needs an LLM%'
           AND compaction_queued_at IS NOT NULL
           FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000021'),
          'a compaction that fails is recorded (failures, retry time, error) when compact() runs as an application role');
INSERT INTO ctxwin.sessions (id, profile) VALUES ('30000000-0000-0000-0000-000000000022', 'late');
INSERT INTO ctxwin.messages (session_id, role, content, tool_calls)
VALUES ('30000000-0000-0000-0000-000000000022', 'assistant', NULL,
        (SELECT jsonb_agg(jsonb_build_object('id', 'c' || g, 'type', 'function',
                                             'function', jsonb_build_object('name', 'f', 'arguments', '{}')))
         FROM generate_series(1, 12) g));
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
SELECT '30000000-0000-0000-0000-000000000022', 'tool', 'result ' || g, 'c' || g FROM generate_series(1, 11) g;
SELECT is((SELECT ctxwin.summarize_session('30000000-0000-0000-0000-000000000022')), NULL,
          'summarize_session as an application role: nothing to summarize while the tool group is open');
SELECT ok((SELECT compaction_queued_at IS NOT NULL AND compaction_retry_at > now()
           FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000022'),
          '... and the session is left queued, to be looked at again later');
-- the circuit breaker's backoff: 1, 4, 16 ... s after each failure, an hour at most
SELECT is((SELECT extract(epoch FROM compaction_retry_at - now())::int
           FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000022'), 60,
          '... looked at again a minute later');
RESET ROLE;
-- a role that may read sessions but not update them is refused before any
-- summary is planned (the write at the end would fail), and nothing changes
CREATE ROLE ctxwin_sum_ro;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_sum_ro;
GRANT SELECT ON ctxwin.sessions, ctxwin.messages, ctxwin.models, ctxwin.profiles TO ctxwin_sum_ro;
SET ROLE ctxwin_sum_ro;
SELECT throws_ok($$SELECT ctxwin.summarize_session('30000000-0000-0000-0000-000000000001', true)$$,
                 '42501', 'permission denied for table sessions',
                 'summarize_session by a role that cannot update sessions');
RESET ROLE;
SELECT is((SELECT summary_version FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000001'),
          (SELECT max(version) FROM ctxwin.summaries WHERE session_id = '30000000-0000-0000-0000-000000000001'),
          '... and no summary was written');
CREATE TEMP TABLE backoff AS
SELECT g, extract(epoch FROM ctxwin._compaction_failed('30000000-0000-0000-0000-000000000021', 'boom ' || g) - now())::int AS s
FROM generate_series(1, 8) g ORDER BY g;
SELECT is((SELECT array_agg(s ORDER BY g) FROM backoff), '{4,16,64,256,1024,3600,3600,3600}'::int[],
          'each further failure waits 4 times longer, an hour at most (the first waited 1 s)');
SELECT is((SELECT compaction_failures || ' ' || last_error || ' ' || (last_error_at = now())
           FROM ctxwin.sessions WHERE id = '30000000-0000-0000-0000-000000000021'),
          '9 boom 8 true', '... counted, with the last error and its time');


-- What 0.2.0's extractive summarizer got wrong (bench/summaries, run 2),
-- each once: facts it cut or missed, the latest goal, answered questions.
SELECT is(ctxwin.extract_facts('Booking BK-LHHGX2 on TP1821, invoice INV-2026-1995, job build-7729 red since 2026-09-25; '
                               || 'web-ap-7.prod.internal pins left-pad@1.3.0 and @acme/ui-kit@4.5.0-beta.6; '
                               || 'segment 000000010000076E000000BE, 87 line items, 152 passed, mail ops@example.org.'),
          ARRAY['BK-LHHGX2', 'TP1821', 'INV-2026-1995', 'build-7729', '2026-09-25', 'web-ap-7.prod.internal',
                'left-pad@1.3.0', '@acme/ui-kit@4.5.0-beta.6', '000000010000076E000000BE', '87 line items',
                '152 passed', 'ops@example.org'],
          'extract_facts: ids of letters and digits whole, dates, host names, packages, hex, counted numbers, e-mail');
SELECT is((ctxwin._tool_facts(string_agg(format('CUS-%s | customer%s@example.net | active', 100000 + g, g), E'\n')
                              || E'\nCB-24576 | disputed'))[1],
          'CB-24576', '_tool_facts: the fact of a shape no other fact of the result has comes first')
FROM generate_series(1, 150) g;
SELECT ok(ctxwin._answered('Does the fare include seat selection?',
                           ARRAY[ctxwin._content_words('The fare does include seat selection, no extra charge.')]),
          '_answered: a later sentence with most of the question''s words answers it');
SELECT ok(NOT ctxwin._answered('Does the fare include seat selection?',
                               ARRAY[ctxwin._content_words('Let me check the fare rules before I answer that.')]),
          '... one with one of them does not');
CREATE TEMP TABLE goal_change AS
SELECT ctxwin.extractive_summary(NULL, '[
  {"role": "user", "content": "I want to plan a relaxed holiday in Lisbon, mostly museums."},
  {"role": "assistant", "content": "Lovely. Flight TP1821 leaves at 9."},
  {"role": "user", "content": "Does the fare include seat selection?"},
  {"role": "assistant", "content": "Let me check the fare rules first."},
  {"role": "user", "content": "Will the hotel have a fitness room?"},
  {"role": "assistant", "content": "I cannot see that from here."},
  {"role": "user", "content": "Change of plans. The trip is now a work trip to Porto."},
  {"role": "assistant", "content": "The fare does include seat selection, so a window seat costs nothing."},
  {"role": "assistant", "content": "Next step: submit the expense form."}]'::jsonb, 300) AS s;
SELECT alike((SELECT s FROM goal_change),
            E'Goal and state:\n- Change of plans.\n- The trip is now a work trip to Porto.\n- Earlier goal: I want to plan a relaxed holiday in Lisbon, mostly museums.\n- Next step: submit the expense form.\n%',
            'the latest goal leads Goal and state, the rest of its message with it, the older goal marked');
SELECT ok((SELECT s FROM goal_change) ~ E'Open items:\n- Will the hotel have a fitness room\\?\n'
          AND (SELECT s FROM goal_change) !~ 'seat selection\?',
          'an answered question is no open item, an unanswered one is');
SELECT is((SELECT string_agg(v, ' | ') FROM regexp_matches(ctxwin.extractive_summary(NULL, '[
  {"role": "user", "content": "When is the next release window?"},
  {"role": "assistant", "content": "Tuesday 14:00 UTC; the freeze starts on Monday."},
  {"role": "user", "content": "Can you check the shipping database?"},
  {"role": "assistant", "content": "The crash is in walk.c at line 120."},
  {"role": "user", "content": "Is the backport to 2.3 possible?"},
  {"role": "assistant", "content": "Yes, cherry-pick it onto release/2.3."},
  {"role": "user", "content": "Does the export include refunds?"},
  {"role": "assistant", "content": "The export lists refunds as negative lines."}]'::jsonb, 300), E'\n- ([^\n]*\\?)', 'g') AS x(a), unnest(a) v),
          'Can you check the shipping database?',
          'the reply to a question''s message answers it: to a when question any statement, to another one that says yes or takes up its words');
SELECT is((SELECT string_agg(v, ' | ') FROM regexp_matches(substring(ctxwin.extractive_summary(NULL, '[
  {"role": "user", "content": "Anything else before we start on the invoices?"},
  {"role": "assistant", "content": "Add a regression test with 10.045 EUR first."},
  {"role": "user", "content": "Is the currency table complete?"},
  {"role": "assistant", "content": "It lacks ISK and CLP; add them with exponent 0."},
  {"role": "user", "content": "Does that change the tax calculation too?"},
  {"role": "assistant", "content": "The tax module calls to_cents() twice; we decided to round once."},
  {"role": "user", "content": "Can you check the shipping database?"},
  {"role": "assistant", "content": "The crash is in walk.c at line 120."}]'::jsonb, 300) FROM E'Open items:\n((?:- [^\n]*\n?)*)'),
                                                     E'- ([^\n]*)', 'g') AS x(a), unnest(a) v),
          'Can you check the shipping database?',
          'to an "any" question any statement answers, to another one that starts with it, they, that... or with "the" and a word of the question; "The crash ..." answers no question of the shipping database');
SELECT alike(ctxwin.extractive_summary(NULL, '[
  {"role": "user", "content": "Hello there, I have a billing question."},
  {"role": "assistant", "content": "Sure, go ahead."},
  {"role": "user", "content": "When does the March invoice run start?"}]'::jsonb, 300),
             E'%Open items:\n- When does the March invoice run start?%',
             'a question of the newest message, with no reply yet, is an open item');
SELECT unalike(ctxwin.extractive_summary((SELECT s FROM goal_change),
                                        '[{"role": "assistant", "content": "The hotel has a fitness room on the top floor."}]', 300),
              '%hotel have a fitness room%', 'an open item of the previous summary that the new messages answer is dropped');

SELECT * FROM finish();
ROLLBACK;

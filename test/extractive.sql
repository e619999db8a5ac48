-- The extractive strategy never gives an empty summary for a non-empty set
-- of messages, and always stays within max_tokens: small talk, bare
-- identifiers, hashes, log lines, tool calls without text, tiny budgets, and
-- a few hundred generated message sets (fixed seed).
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

\ir lib/sliding.sql

CREATE FUNCTION pg_temp.msgs(VARIADIC c text[]) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_agg(jsonb_build_object('role', CASE WHEN o % 2 = 1 THEN 'user' ELSE 'assistant' END,
                                        'content', x) ORDER BY o)
    FROM unnest(c) WITH ORDINALITY AS u(x, o) $$;

SELECT ok(ctxwin.extractive_summary(NULL, pg_temp.msgs('ok.', 'Sure.', 'ok.', 'Sure.', 'ok.', 'Sure.',
                                                        'ok.', 'Sure.', 'ok.', 'Sure.'), 200) LIKE '%Sure.%',
          'ten messages of small talk give a summary that quotes them');
SELECT ok(ctxwin.extractive_summary(NULL, pg_temp.msgs(
              (SELECT string_agg('n1xw' || lpad(g::text, 4, '0'), ' ') FROM generate_series(1, 100) g),
              'n1xw0101 n1xw0102'), 200) LIKE '%n1xw0102%',
          'a long line of identifier-like words and a short one give a summary that keeps them');
SELECT ok(coalesce(ctxwin.extractive_summary(NULL, (SELECT jsonb_agg(jsonb_build_object('role', 'assistant', 'content', md5(g::text)))
                                                   FROM generate_series(1, 12) g), 100), '') <> '',
          'md5 hashes from the assistant give a non-empty summary');
SELECT ok(ctxwin.extractive_summary(NULL, '[{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]}, {"role": "tool", "content": "", "tool_call_id": "c"}]', 50) <> '',
          'a tool call without a name and an empty result give a non-empty summary');
SELECT ok(ctxwin.extractive_summary(NULL, '[{"role": "assistant", "content": "2026-01-01T10:00:00Z 7f3a 200 0.013"},
                                              {"role": "assistant", "content": "2026-01-01T10:00:01Z 7f3b 500 0.020"}]', 100)
          ~ '7f3b.*7f3a', 'log lines give a summary that quotes them, newest first');

-- tiny budgets, every encoding
SELECT is((SELECT count(*) FROM (VALUES ('cl100k_base'), ('o200k_base'), ('chars4'), ('chars3.5')) e(enc),
                                generate_series(1, 12) b
           WHERE coalesce(ctxwin.extractive_summary(NULL, pg_temp.msgs('ok.', 'Sure.', 'ok.'), b, e.enc), '') = ''
              OR ctxwin.count_tokens(ctxwin.extractive_summary(NULL, pg_temp.msgs('ok.', 'Sure.', 'ok.'), b, e.enc), e.enc) > b),
          0::bigint, 'budgets of 1 to 12 tokens in each encoding: never empty, never over');
SELECT is((SELECT count(*) FROM (VALUES ('cl100k_base'), ('chars4')) e(enc), generate_series(1, 8) b
           WHERE coalesce(ctxwin.extractive_summary(NULL, pg_temp.msgs(repeat('verylongunbrokenword', 400)), b, e.enc), '') = ''
              OR ctxwin.count_tokens(ctxwin.extractive_summary(NULL, pg_temp.msgs(repeat('verylongunbrokenword', 400)), b, e.enc), e.enc) > b),
          0::bigint, 'one huge unbroken word and tiny budgets: never empty, never over');

-- a generator of message sets: junk words, short words, hashes, ids, and
-- now and then a sentence the strategy recognizes
SELECT setseed(0.42);
CREATE TEMP TABLE gen AS
SELECT c AS case_no, 1 + (random() * 400)::int AS budget,
       (SELECT jsonb_agg(jsonb_build_object(
                   'role', (ARRAY['user', 'assistant'])[1 + (m % 2)],
                   'content', (SELECT string_agg(CASE (random() * 9)::int
                                        WHEN 0 THEN 'ok.' WHEN 1 THEN 'Sure!' WHEN 2 THEN md5(random()::text)
                                        WHEN 3 THEN 'x' || (random() * 1e6)::int WHEN 4 THEN 'n1xw' || lpad((random() * 9999)::int::text, 4, '0')
                                        WHEN 5 THEN 'k' WHEN 6 THEN '...' WHEN 7 THEN 'We decided to use /srv/app.'
                                        ELSE 'hm' END, ' ')
                               FROM generate_series(1, 1 + (random() * 12)::int + m * 0)))
                ORDER BY m)
        FROM generate_series(1, 1 + (random() * 14)::int + c * 0) m) AS msgs
FROM generate_series(1, 300) c;
CREATE TEMP TABLE res AS
SELECT case_no, budget, ctxwin.extractive_summary(NULL, msgs, budget) AS s FROM gen;
SELECT is((SELECT count(*) FROM res WHERE coalesce(btrim(s), '') = ''), 0::bigint,
          '300 generated message sets: no empty summary');
SELECT is((SELECT count(*) FROM res WHERE ctxwin.count_tokens(s) > budget), 0::bigint,
          '... and none over its budget');
SELECT cmp_ok((SELECT count(*) FROM res WHERE s LIKE 'Messages:%'), '>', 0::bigint,
              '... some of them through the fallback');

-- through summarize_session and compact(), which failed on such sessions
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy)
VALUES ('x', 'gpt-4o', 8, NULL, NULL, 2, 100, 'extractive');
INSERT INTO ctxwin.sessions (id, profile) VALUES
    ('e0000000-0000-4000-8000-000000000001', 'x'), ('e0000000-0000-4000-8000-000000000002', 'x');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT s, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, CASE WHEN g % 2 = 1 THEN 'ok.' ELSE 'Sure.' END
FROM generate_series(1, 10) g,
     (VALUES ('e0000000-0000-4000-8000-000000000001'::uuid), ('e0000000-0000-4000-8000-000000000002')) v(s);
SELECT is((ctxwin.summarize_session('e0000000-0000-4000-8000-000000000001')).version, 1,
          'summarize_session summarizes ten messages of small talk');
SELECT ok((SELECT conversation_summary LIKE 'Messages:%' FROM ctxwin.sessions
           WHERE id = 'e0000000-0000-4000-8000-000000000001'), '... with the fallback summary');
SELECT is(ctxwin.compact(10), 1, 'compact() summarizes the other one');
SELECT is((SELECT compaction_failures FROM ctxwin.sessions WHERE id = 'e0000000-0000-4000-8000-000000000002'),
          0, '... without a failure');
SELECT is((SELECT summary_through_id FROM ctxwin.sessions WHERE id = 'e0000000-0000-4000-8000-000000000002'),
          8::bigint, '... up to the newest min_recent_messages');

-- a huge message stays linear: 1 MB of decisions within the bound
SELECT ok(length(ctxwin.extractive_summary(NULL, pg_temp.msgs(repeat('We decided to use the cache here. ', 30000)), 200)) > 0,
          'a 1 MB message of 30,000 sentences is summarized');

SELECT * FROM finish();
ROLLBACK;

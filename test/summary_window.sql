-- A summary request fits the summary model's context window, even when the
-- session's model has a larger one: the plan covers fewer messages (the rest
-- follows in the next summaries), and a single message longer than the
-- summary model's window is cut in the middle of the transcript.  No
-- network: the plans are checked as they are, and answers are given by hand.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;
-- summaries written whole, in max_summary_tokens (a stable window's are
-- segments of a part of it: test/segments.sql)
\ir lib/sliding.sql
SELECT ctxwin.count_tokens('load the library') IS NOT NULL AS loaded \gset
SET ctxwin.llm_provider = 'openai';

INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('tiny-summarizer', 'o200k_base', 3000, 'openai');
INSERT INTO ctxwin.profiles (name, model, summary_model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy)
VALUES ('big', 'gpt-4.1', 'tiny-summarizer', 10, NULL, NULL, 2, 300, 'llm');
INSERT INTO ctxwin.sessions (id, profile) VALUES
    ('f0000000-0000-4000-8000-000000000001', 'big'), ('f0000000-0000-4000-8000-000000000002', 'big');
-- 40 messages of about 100 tokens: 4,000 tokens, more than the 3,000 of the summarizer
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT 'f0000000-0000-4000-8000-000000000001', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
       (SELECT string_agg(format('item%s-%s', g, k), ' ') FROM generate_series(1, 40) k)
FROM generate_series(1, 40) g;

-- the tokens a plan's request takes in the summary model: both messages,
-- their overhead, and the room it asks for the answer
CREATE FUNCTION pg_temp.request_tokens(p jsonb) RETURNS int LANGUAGE sql AS $$
    SELECT ctxwin.count_tokens(p ->> 'system_prompt', 'o200k_base') + ctxwin.count_tokens(p ->> 'prompt', 'o200k_base')
           + 2 * 4 + 3 + (p ->> 'answer_tokens')::int $$;
CREATE FUNCTION pg_temp.answer(t text) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('status', 200, 'provider', 'openai', 'latency_ms', 5,
        'body', jsonb_build_object('model', 'tiny-summarizer', 'usage', '{"prompt_tokens": 1, "completion_tokens": 1}'::jsonb,
            'choices', jsonb_build_array(jsonb_build_object('index', 0, 'finish_reason', 'stop',
                'message', jsonb_build_object('role', 'assistant', 'content', t))))) $$;

CREATE TEMP TABLE plans (step int, plan jsonb);
INSERT INTO plans SELECT 1, ctxwin._summary_plan('f0000000-0000-4000-8000-000000000001', false, NULL);
SELECT cmp_ok((SELECT (plan ->> 'through')::int FROM plans WHERE step = 1), '<', 38,
              'the first plan covers fewer messages than the trigger would: they do not fit the summary model');
SELECT cmp_ok((SELECT pg_temp.request_tokens(plan) FROM plans WHERE step = 1), '<=', 3000,
              '... and its request fits the summary model''s 3,000 tokens');
SELECT cmp_ok((SELECT pg_temp.request_tokens(plan) FROM plans WHERE step = 1), '>', 2000,
              '... and uses most of them');
SELECT is((ctxwin._summary_finish((SELECT plan FROM plans WHERE step = 1), pg_temp.answer('Summary, part 1.'))).version, 1,
          'the answer to the first part becomes version 1');
SELECT isnt((SELECT compaction_queued_at FROM ctxwin.sessions WHERE id = 'f0000000-0000-4000-8000-000000000001'), NULL,
            '... and the session stays queued for the rest');

-- the following steps, until nothing is left
DO $$
DECLARE
    p jsonb;
    k int := 1;
BEGIN
    LOOP
        p := ctxwin._summary_plan('f0000000-0000-4000-8000-000000000001', false, NULL);
        EXIT WHEN p IS NULL OR k > 20;
        k := k + 1;
        INSERT INTO plans VALUES (k, p);
        PERFORM ctxwin._summary_finish(p, pg_temp.answer(format('Summary, part %s.', k)));
    END LOOP;
END $$;
SELECT cmp_ok((SELECT max(step) FROM plans), '>=', 2, 'the rest is summarized in further steps');
SELECT is((SELECT count(*) FROM plans WHERE pg_temp.request_tokens(plan) > 3000), 0::bigint,
          '... each of which fits the summary model');
SELECT is((SELECT summary_through_id FROM ctxwin.sessions WHERE id = 'f0000000-0000-4000-8000-000000000001'), 38::bigint,
          '... until every message but the newest min_recent_messages is covered');
SELECT is((SELECT compaction_queued_at FROM ctxwin.sessions WHERE id = 'f0000000-0000-4000-8000-000000000001'), NULL,
          '... and the session leaves the queue');

-- one message longer than the summary model's whole window
INSERT INTO ctxwin.messages (session_id, role, content) VALUES
    ('f0000000-0000-4000-8000-000000000002', 'user',
     (SELECT string_agg(format('word%s', k), ' ') FROM generate_series(1, 6000) k)),
    ('f0000000-0000-4000-8000-000000000002', 'assistant', 'Noted.'),
    ('f0000000-0000-4000-8000-000000000002', 'user', 'Thanks.');
TRUNCATE plans;
INSERT INTO plans SELECT 1, ctxwin._summary_plan('f0000000-0000-4000-8000-000000000002', true, NULL);
SELECT is((SELECT (plan ->> 'through')::int || ' ' || (plan ->> 'transcript_cut') FROM plans), '1 true',
          'a message longer than the summary model''s window is summarized alone, its transcript cut');
SELECT cmp_ok((SELECT pg_temp.request_tokens(plan) FROM plans), '<=', 3000, '... and the request fits');
SELECT ok((SELECT plan ->> 'prompt' LIKE '%tokens omitted%word6000%' FROM plans),
          '... keeping the beginning and the end of the message around the marker');

-- a summary model too small for even the prompt and the answer
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('wee-summarizer', 'o200k_base', 400, 'openai');
UPDATE ctxwin.profiles SET summary_model = 'wee-summarizer' WHERE name = 'big';
SELECT throws_ok($$SELECT ctxwin._summary_plan('f0000000-0000-4000-8000-000000000002', true, NULL)$$,
                 '54000', 'the summary request leaves no room for messages',
                 'a summary model whose window the prompt and max_summary_tokens fill: a clear error');

SELECT * FROM finish();
ROLLBACK;

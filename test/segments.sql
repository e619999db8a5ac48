-- Segmented summaries: under a stable window a compaction appends a segment
-- (a summary of the newly covered messages alone) after the summary, which
-- stays byte for byte, so the window keeps its beginning and a prompt cache
-- serves it; when the segments would pass max_summary_tokens they are
-- consolidated into one (a rewrite).  Under a sliding window nothing
-- changes: each summary is written whole, as before.  Checked on the
-- extractive strategy end to end, on the LLM strategy through the plan and
-- the finish with answers given by hand (no network), on the window in both
-- formats, and on the sessions trigger that keeps summary_segments true.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;
SELECT ctxwin.count_tokens('load the library') IS NOT NULL AS loaded \gset

INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
                             min_recent_messages, max_summary_tokens, summary_strategy, summary_placement, window_policy)
VALUES ('seg', 'gpt-4o', 10, NULL, NULL, 2, 400, 'extractive', 'message', 'stable'),
       ('segsys', 'gpt-4o', 10, NULL, NULL, 2, 400, 'extractive', 'system', 'stable'),
       ('sld', 'gpt-4o', 10, NULL, NULL, 2, 400, 'extractive', 'message', 'sliding'),
       ('segllm', 'gpt-4o', 10, NULL, NULL, 2, 400, 'llm', 'message', 'stable'),
       ('sldllm', 'gpt-4o', 10, NULL, NULL, 2, 400, 'llm', 'message', 'sliding'),
       ('seghyb', 'gpt-4o', 10, NULL, NULL, 2, 400, 'hybrid', 'message', 'stable');
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
    ('30000000-0000-4000-8000-00000000000a', 'seg', 'You run deployments.'),
    ('30000000-0000-4000-8000-00000000000b', 'sld', 'You run deployments.'),
    ('30000000-0000-4000-8000-00000000000c', 'segsys', 'You run deployments.'),
    ('30000000-0000-4000-8000-00000000000d', 'segllm', 'You run deployments.'),
    ('30000000-0000-4000-8000-00000000000e', 'sldllm', 'You run deployments.'),
    ('30000000-0000-4000-8000-00000000000f', 'seghyb', 'You run deployments.'),
    ('30000000-0000-4000-8000-000000000010', 'seg', 'You run deployments.');

-- messages lo .. hi of a session, each naming its own number (release_N,
-- /srv/app_N, EN ...), so a summary shows which messages it covers
CREATE FUNCTION pg_temp.talk(sid uuid, lo int, hi int) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content)
    SELECT sid, CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
           CASE WHEN i % 2 = 1
                THEN format('Please deploy release_%s to /srv/app_%s and check E%s? We decided to use the canary for step_%s on /srv/shared.', i, i, 4000 + i, i)
                ELSE format('Deployed release_%s to /srv/app_%s; error E%s fixed because the config_%s was wrong. We will switch to blue_green_%s next.', i, i, 4000 + i, i, i) END
    FROM generate_series(lo, hi) i $$;
-- the release numbers a text names
CREATE FUNCTION pg_temp.releases(t text) RETURNS int[] LANGUAGE sql AS $$
    SELECT array_agg(DISTINCT m[1]::int ORDER BY m[1]::int) FROM regexp_matches(t, 'release_([0-9]+)', 'g') m $$;
CREATE FUNCTION pg_temp.summary(sid uuid) RETURNS text LANGUAGE sql AS $$
    SELECT conversation_summary FROM ctxwin.sessions WHERE id = sid $$;
-- the texts of the "system" blocks of a session's Anthropic window, and where its breakpoints are
CREATE FUNCTION pg_temp.blocks(sid uuid) RETURNS text[] LANGUAGE sql AS $$
    SELECT array_agg(b ->> 'text' ORDER BY n)
    FROM jsonb_array_elements(ctxwin.build_context(sid, NULL, 'anthropic') -> 'system') WITH ORDINALITY x(b, n) $$;
CREATE FUNCTION pg_temp.breakpoints(sid uuid) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(CASE WHEN b ? 'cache_control' THEN 'B' ELSE '-' END, '' ORDER BY n)
    FROM jsonb_array_elements(ctxwin.build_context(sid, NULL, 'anthropic') -> 'system') WITH ORDINALITY x(b, n) $$;
-- an OpenAI answer, as _llm_summarize returns it
CREATE FUNCTION pg_temp.answer(t text) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('status', 200, 'provider', 'openai', 'latency_ms', 5,
        'body', jsonb_build_object('model', 'gpt-4o-mini', 'usage', '{"prompt_tokens": 1, "completion_tokens": 1}'::jsonb,
            'choices', jsonb_build_array(jsonb_build_object('index', 0, 'finish_reason', 'stop',
                'message', jsonb_build_object('role', 'assistant', 'content', t))))) $$;
CREATE TEMP TABLE seen (step text PRIMARY KEY, summary text, tokens int, system text, blocks text[], body jsonb);

-- --- the rule ------------------------------------------------------------------
SELECT is((SELECT array_agg(format('%s %s', x.segment, x.budget) ORDER BY n)
           FROM (VALUES (1, 'sliding', 300), (2, 'stable', 0), (3, 'stable', 200), (4, 'stable', 300), (5, 'stable', 350)) v(n, p, t),
                ctxwin._summary_segment(p, t, 400) x),
          ARRAY['f 400', 'f 200', 't 100', 't 96', 'f 200'],
          '_summary_segment: sliding whole in max_summary_tokens; stable: the first whole in half, then segments in a quarter or what is left, consolidated below an eighth');

-- --- two compactions under a stable window -------------------------------------
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000a', 1, 10);
SELECT is((SELECT format('%s %s %s %s', version, from_id, through_id, segments IS NULL)
           FROM ctxwin.summarize_session('30000000-0000-4000-8000-00000000000a', true)),
          '1 1 8 t', 'the first summary of a stable session covers messages 1 to 8 and is one segment');
SELECT is(pg_temp.summary('30000000-0000-4000-8000-00000000000a'),
          ctxwin.extractive_summary(NULL, ctxwin._summary_messages('30000000-0000-4000-8000-00000000000a', 0, 8), 200, 'o200k_base'),
          '... written whole, in half of max_summary_tokens (room for the segments after it)');
INSERT INTO seen
SELECT 'a1', s.conversation_summary, s.summary_tokens, ctxwin.build_context(s.id) -> 1 ->> 'content',
       pg_temp.blocks(s.id), ctxwin.build_context(s.id, NULL, 'anthropic', cache => false)
FROM ctxwin.sessions s WHERE s.id = '30000000-0000-4000-8000-00000000000a';

SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000a', 11, 20);
SELECT is((SELECT format('%s %s %s', version, from_id, through_id)
           FROM ctxwin.summarize_session('30000000-0000-4000-8000-00000000000a', true)),
          '2 9 18', 'the second compaction covers messages 9 to 18');
SELECT is(left(pg_temp.summary('30000000-0000-4000-8000-00000000000a'), length(summary)), summary,
          'the first segment is byte-identical after the second compaction')
FROM seen WHERE step = 'a1';
SELECT is(pg_temp.summary('30000000-0000-4000-8000-00000000000a'),
          summary || E'\n\n' || ctxwin.extractive_summary(NULL, ctxwin._summary_messages('30000000-0000-4000-8000-00000000000a', 8, 18),
                                                          least(100, 400 - tokens - 4), 'o200k_base'),
          '... and the new segment, after a blank line, summarizes messages 9 to 18 alone, in a quarter of max_summary_tokens')
FROM seen WHERE step = 'a1';
SELECT is((SELECT summary_segments FROM ctxwin.sessions WHERE id = '30000000-0000-4000-8000-00000000000a'),
          ARRAY[length(summary), length(pg_temp.summary('30000000-0000-4000-8000-00000000000a')) - length(summary) - 2],
          'summary_segments holds the length in characters of each segment')
FROM seen WHERE step = 'a1';
SELECT ok(pg_temp.releases(summary) <@ ARRAY(SELECT generate_series(1, 8)) AND cardinality(pg_temp.releases(summary)) > 0
          AND pg_temp.releases(substr(pg_temp.summary('30000000-0000-4000-8000-00000000000a'), length(summary) + 3))
              <@ ARRAY(SELECT generate_series(9, 18))
          AND cardinality(pg_temp.releases(substr(pg_temp.summary('30000000-0000-4000-8000-00000000000a'), length(summary) + 3))) > 0,
          'the first segment names only messages 1 to 8, the second only messages 9 to 18')
FROM seen WHERE step = 'a1';
SELECT is((SELECT array_agg(format('%s:%s-%s %s %s', x.version, x.from_id, x.through_id, x.segments,
                                   x.content = s.conversation_summary) ORDER BY x.version)
           FROM ctxwin.summaries x JOIN ctxwin.sessions s ON s.id = x.session_id
           WHERE x.session_id = '30000000-0000-4000-8000-00000000000a'),
          ARRAY['1:1-8  f', format('2:9-18 %s t', (SELECT summary_segments FROM ctxwin.sessions
                                                            WHERE id = '30000000-0000-4000-8000-00000000000a'))],
          'the summaries rows: each the range it newly covers, the summary it left and its segments');
SELECT is((SELECT array_agg(format('%s-%s', from_id, through_id) ORDER BY id) FROM ctxwin.flush_events
           WHERE session_id = '30000000-0000-4000-8000-00000000000a'),
          ARRAY['1-8', '9-18'], 'the flush events: exactly the messages each compaction newly summarized');
SELECT is((SELECT format('%s %s %s', summary_through_id, unsummarized_messages,
                         summary_tokens = ctxwin.count_tokens(conversation_summary, 'o200k_base'))
           FROM ctxwin.sessions WHERE id = '30000000-0000-4000-8000-00000000000a'),
          '18 2 t', 'the session is summarized through 18, two messages left, the summary counted whole');

-- the window: the system part starts with the old bytes
SELECT ok(starts_with(ctxwin.build_context('30000000-0000-4000-8000-00000000000a') -> 1 ->> 'content', system || E'\n\n'),
          'the window''s summary message starts with the bytes it had before the compaction')
FROM seen WHERE step = 'a1';
SELECT is(ctxwin.build_context('30000000-0000-4000-8000-00000000000a') -> 1 ->> 'content',
          'Summary of earlier conversation:' || E'\n' || pg_temp.summary('30000000-0000-4000-8000-00000000000a'),
          '... and holds the whole summary, as conversation_summary does');
SELECT is((pg_temp.blocks('30000000-0000-4000-8000-00000000000a'))[1:2], blocks,
          'Anthropic: the system prompt''s and the first segment''s blocks are as they were')
FROM seen WHERE step = 'a1';
SELECT is(array_length(pg_temp.blocks('30000000-0000-4000-8000-00000000000a'), 1) || ' '
          || pg_temp.breakpoints('30000000-0000-4000-8000-00000000000a'), '3 B-B',
          '... a block per segment, breakpoints after the system prompt and after the last segment');
SELECT is((SELECT count(*) FROM jsonb_path_query(ctxwin.build_context('30000000-0000-4000-8000-00000000000a', NULL, 'anthropic'),
                                                 'strict $.**.cache_control'))::int, 3,
          '... and one after the last message: three in all, under the four the API takes');
SELECT ok(starts_with(ctxwin.build_context('30000000-0000-4000-8000-00000000000a', NULL, 'anthropic', cache => false) ->> 'system',
                      (body ->> 'system') || E'\n\n'),
          'Anthropic without breakpoints: the system text starts with the one before')
FROM seen WHERE step = 'a1';

-- a third compaction: three segments, the first two untouched
INSERT INTO seen
SELECT 'a2', s.conversation_summary, s.summary_tokens, NULL, pg_temp.blocks(s.id), NULL
FROM ctxwin.sessions s WHERE s.id = '30000000-0000-4000-8000-00000000000a';
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000a', 21, 30);
SELECT is((ctxwin.summarize_session('30000000-0000-4000-8000-00000000000a', true)).through_id, 28::bigint,
          'a third compaction covers messages 19 to 28');
SELECT is(pg_temp.summary('30000000-0000-4000-8000-00000000000a'),
          summary || E'\n\n' || ctxwin.extractive_summary(NULL, ctxwin._summary_messages('30000000-0000-4000-8000-00000000000a', 18, 28),
                                                          least(100, 400 - tokens - 4), 'o200k_base'),
          '... and appends a third segment, in what is left when that is less than a quarter; the first two stay byte for byte')
FROM seen WHERE step = 'a2';
SELECT is(cardinality((SELECT summary_segments FROM ctxwin.sessions WHERE id = '30000000-0000-4000-8000-00000000000a')), 3,
          '... three segments');
SELECT is((pg_temp.blocks('30000000-0000-4000-8000-00000000000a'))[1:3], blocks,
          '... the Anthropic blocks of the system prompt and the first two segments as they were')
FROM seen WHERE step = 'a2';

-- a fourth: the segments would pass max_summary_tokens, so they are consolidated
INSERT INTO seen
SELECT 'a3', s.conversation_summary, s.summary_tokens, NULL, NULL, NULL
FROM ctxwin.sessions s WHERE s.id = '30000000-0000-4000-8000-00000000000a';
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000a', 31, 40);
SELECT cmp_ok(tokens, '>', 400 - 50 - 4, '(the three segments leave less than an eighth of max_summary_tokens)')
FROM seen WHERE step = 'a3';
SELECT is((SELECT format('%s %s %s', through_id, segments IS NULL, token_count <= 200)
           FROM ctxwin.summarize_session('30000000-0000-4000-8000-00000000000a', true)),
          '38 t t', 'past max_summary_tokens the segments are consolidated into one, in half of it');
SELECT is(pg_temp.summary('30000000-0000-4000-8000-00000000000a'),
          ctxwin.extractive_summary(summary, ctxwin._summary_messages('30000000-0000-4000-8000-00000000000a', 28, 38),
                                    200, 'o200k_base'),
          '... a rewrite of the summary with the new messages, as a sliding window''s summary is made')
FROM seen WHERE step = 'a3';
SELECT is((SELECT summary_segments FROM ctxwin.sessions WHERE id = '30000000-0000-4000-8000-00000000000a'), NULL,
          '... summary_segments NULL: one segment');
SELECT is(pg_temp.breakpoints('30000000-0000-4000-8000-00000000000a'), 'BB',
          '... and the Anthropic window has the prompt and the summary, a block each');
SELECT cmp_ok((SELECT max(token_count) FROM ctxwin.summaries WHERE session_id = '30000000-0000-4000-8000-00000000000a'), '<=', 400,
              'no summary of the session ever passed max_summary_tokens (400)');

-- --- a summary appended to the system prompt (placement 'system') ------------------
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000c', 1, 10);
SELECT is((ctxwin.summarize_session('30000000-0000-4000-8000-00000000000c', true)).version, 1, '(placement system: a summary)');
INSERT INTO seen
SELECT 'c1', s.conversation_summary, s.summary_tokens, ctxwin.build_context(s.id) -> 0 ->> 'content', pg_temp.blocks(s.id), NULL
FROM ctxwin.sessions s WHERE s.id = '30000000-0000-4000-8000-00000000000c';
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000c', 11, 20);
SELECT is((ctxwin.summarize_session('30000000-0000-4000-8000-00000000000c', true)).version, 2, '(and a segment)');
SELECT ok(starts_with(ctxwin.build_context('30000000-0000-4000-8000-00000000000c') -> 0 ->> 'content', system || E'\n\n'),
          'placement system: the system message starts with the old bytes (prompt and first segment)')
FROM seen WHERE step = 'c1';
SELECT is(pg_temp.blocks('30000000-0000-4000-8000-00000000000c'),
          ARRAY[blocks[1], substr(pg_temp.summary('30000000-0000-4000-8000-00000000000c'), length(summary) + 3)],
          '... in Anthropic''s form the first block (prompt and first segment) as it was, then the new segment')
FROM seen WHERE step = 'c1';
SELECT is(pg_temp.breakpoints('30000000-0000-4000-8000-00000000000c'), 'BB', '... each with a breakpoint');

-- --- the queue: compact() appends too ---------------------------------------------
SELECT pg_temp.talk('30000000-0000-4000-8000-000000000010', 1, 10);
SELECT is(ctxwin.compact(), 1, 'compact() summarizes the queued stable session');
SELECT pg_temp.talk('30000000-0000-4000-8000-000000000010', 11, 20);
SELECT is(ctxwin.compact(), 1, '... and again when its trigger fires again');
SELECT is((SELECT cardinality(summary_segments) FROM ctxwin.sessions WHERE id = '30000000-0000-4000-8000-000000000010'), 2,
          '... appending a second segment');

-- --- a sliding window: nothing changes ---------------------------------------------
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000b', 1, 10);
SELECT is((ctxwin.summarize_session('30000000-0000-4000-8000-00000000000b', true)).through_id, 8::bigint, '(sliding: a summary)');
INSERT INTO seen
SELECT 'b1', s.conversation_summary, s.summary_tokens, NULL, NULL, NULL
FROM ctxwin.sessions s WHERE s.id = '30000000-0000-4000-8000-00000000000b';
SELECT is(summary, ctxwin.extractive_summary(NULL, ctxwin._summary_messages('30000000-0000-4000-8000-00000000000b', 0, 8), 400, 'o200k_base'),
          'sliding: the first summary is written whole in max_summary_tokens, as before')
FROM seen WHERE step = 'b1';
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000b', 11, 20);
SELECT is((ctxwin.summarize_session('30000000-0000-4000-8000-00000000000b', true)).through_id, 18::bigint, '(sliding: a second)');
SELECT is(pg_temp.summary('30000000-0000-4000-8000-00000000000b'),
          ctxwin.extractive_summary(summary, ctxwin._summary_messages('30000000-0000-4000-8000-00000000000b', 8, 18), 400, 'o200k_base'),
          '... and the second rewrites it with the new messages, byte for byte as before')
FROM seen WHERE step = 'b1';
SELECT is((SELECT array_agg(x.segments IS NULL) || (SELECT summary_segments IS NULL FROM ctxwin.sessions
                                                     WHERE id = '30000000-0000-4000-8000-00000000000b')
           FROM ctxwin.summaries x WHERE x.session_id = '30000000-0000-4000-8000-00000000000b'),
          ARRAY[true, true, true], '... no segments anywhere');

-- --- the LLM strategy: the request of a segment, and its answer appended -------------
SET ctxwin.llm_provider = 'openai';
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000e', 1, 10);
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000d', 1, 10);
CREATE TEMP TABLE plans (step text PRIMARY KEY, plan jsonb);
INSERT INTO plans VALUES ('e1', ctxwin._summary_plan('30000000-0000-4000-8000-00000000000e', true, NULL));
SELECT is(ARRAY[plan ->> 'system_prompt', plan ->> 'prompt', plan ->> 'segment'],
          ARRAY[ctxwin.default_summary_prompt() || ' Write at most 400 tokens.',
                'Previous summary:' || E'\n' || '(none)' || E'\n\nNew messages:\n'
                || ctxwin.transcript(ctxwin._summary_messages('30000000-0000-4000-8000-00000000000e', 0, 8), 'o200k_base'),
                'false'],
          'sliding, LLM: the request is the one of before (the prompt, max_summary_tokens, the transcript)')
FROM plans WHERE step = 'e1';
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer('Deploys 1 to 8 done.'))).content, 'Deploys 1 to 8 done.',
          '... and its answer is the summary')
FROM plans WHERE step = 'e1';
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000e', 11, 20);
INSERT INTO plans VALUES ('e2', ctxwin._summary_plan('30000000-0000-4000-8000-00000000000e', true, NULL));
SELECT is(ARRAY[plan ->> 'system_prompt', plan ->> 'prompt'],
          ARRAY[ctxwin.default_summary_prompt() || ' Write at most 400 tokens.',
                'Previous summary:' || E'\n' || 'Deploys 1 to 8 done.' || E'\n\nNew messages:\n'
                || ctxwin.transcript(ctxwin._summary_messages('30000000-0000-4000-8000-00000000000e', 8, 18), 'o200k_base')],
          'sliding, LLM: the second request too')
FROM plans WHERE step = 'e2';
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer('Deploys 1 to 18 done.'))).content, 'Deploys 1 to 18 done.',
          '... and its answer replaces the summary')
FROM plans WHERE step = 'e2';

INSERT INTO plans VALUES ('d1', ctxwin._summary_plan('30000000-0000-4000-8000-00000000000d', true, NULL));
SELECT is(ARRAY[plan ->> 'system_prompt', plan ->> 'segment', plan ->> 'budget'],
          ARRAY[ctxwin.default_summary_prompt() || ' Write at most 200 tokens.', 'false', '200'],
          'stable, LLM: the first summary is asked whole, in half of max_summary_tokens')
FROM plans WHERE step = 'd1';
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer('Deploys 1 to 8: release_8 is live.'))).segments, NULL,
          '... and written as one segment')
FROM plans WHERE step = 'd1';
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000d', 11, 20);
INSERT INTO plans VALUES ('d2', ctxwin._summary_plan('30000000-0000-4000-8000-00000000000d', true, NULL));
SELECT is(ARRAY[plan ->> 'segment', plan ->> 'budget', plan ->> 'through'], ARRAY['true', '100', '18'],
          'stable, LLM: the second is a segment of messages 9 to 18, in a quarter of max_summary_tokens')
FROM plans WHERE step = 'd2';
SELECT is(plan ->> 'system_prompt',
          ctxwin.default_summary_prompt() || ' ' || ctxwin.segment_summary_prompt() || ' Write at most 100 tokens.',
          '... its system prompt is the summary prompt with the segment instruction appended')
FROM plans WHERE step = 'd2';
SELECT is(plan ->> 'prompt',
          'Previous summary:' || E'\n' || 'Deploys 1 to 8: release_8 is live.' || E'\n\nNew messages:\n'
          || ctxwin.transcript(ctxwin._summary_messages('30000000-0000-4000-8000-00000000000d', 8, 18), 'o200k_base'),
          '... and its prompt gives the earlier segments as context, and the new messages alone to summarize')
FROM plans WHERE step = 'd2';
SELECT is((SELECT string_agg(DISTINCT l, ' ') FROM regexp_split_to_table(plan ->> 'prompt', E'\n') l
           WHERE l ~ '^\[' AND (pg_temp.releases(l))[1] <= 8),
          NULL, '... none of the messages summarized before among them')
FROM plans WHERE step = 'd2';
SELECT is((plan ->> 'answer_tokens')::int, 400,
          '... and its request lets the answer take max_summary_tokens (a model that writes more than the target is not cut off)')
FROM plans WHERE step = 'd2';
-- an answer longer than the summary has room for: written in a savepoint, read, undone
SAVEPOINT too_long;
SELECT (ctxwin._summary_finish(plan, pg_temp.answer(repeat('release_9 deployed and verified. ', 60)))).content AS cut_content
FROM plans WHERE step = 'd2' \gset
ROLLBACK TO SAVEPOINT too_long;
SELECT cmp_ok(ctxwin.count_tokens(:'cut_content', 'o200k_base'), '<=', 400,
              'an answer that would take the summary over max_summary_tokens is cut to fit, not refused (it would be retried forever)');
SELECT ok(starts_with(:'cut_content', 'Deploys 1 to 8: release_8 is live.' || E'\n\n' || 'release_9 deployed and verified.')
          AND :'cut_content' LIKE '%tokens omitted%' AND :'cut_content' LIKE '%release_9 deployed and verified.',
          '... in the middle of the segment, the summary before it byte for byte');
SELECT is(pg_temp.summary('30000000-0000-4000-8000-00000000000d'), 'Deploys 1 to 8: release_8 is live.',
          '... (undone here, for the checks below)');
SELECT throws_ok(format('SELECT ctxwin._llm_summarize(%L)', jsonb_set(plan, '{segment}', 'false')),
                 '22023', 'summary plan does not match session 30000000-0000-4000-8000-00000000000d',
                 'a plan that says whole where the session''s settings say segment is refused before any request')
FROM plans WHERE step = 'd2';
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer('Deploys 9 to 18: release_18 is live.'))).content,
          'Deploys 1 to 8: release_8 is live.' || E'\n\n' || 'Deploys 9 to 18: release_18 is live.',
          'the answer is appended after a blank line, the first segment byte for byte')
FROM plans WHERE step = 'd2';
SELECT is((SELECT summary_segments FROM ctxwin.sessions WHERE id = '30000000-0000-4000-8000-00000000000d'), ARRAY[34, 36],
          '... with its segments'' lengths');

-- a segment's request fits the summary model's window too, the summary so far included
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('tiny-summarizer', 'o200k_base', 3000, 'openai');
INSERT INTO ctxwin.profiles (name, model, summary_model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy)
VALUES ('segtiny', 'gpt-4.1', 'tiny-summarizer', 10, NULL, NULL, 2, 1200, 'llm');
INSERT INTO ctxwin.sessions (id, profile) VALUES ('30000000-0000-4000-8000-000000000011', 'segtiny');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '30000000-0000-4000-8000-000000000011', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
       (SELECT string_agg(format('item%s-%s', g, k), ' ') FROM generate_series(1, 40) k)
FROM generate_series(1, 40) g;
INSERT INTO plans VALUES ('t1', ctxwin._summary_plan('30000000-0000-4000-8000-000000000011', true, NULL));
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer((SELECT string_agg(format('fact%s', k), ' ') FROM generate_series(1, 300) k)))).version,
          1, '(a first summary of some 500 tokens)')
FROM plans WHERE step = 't1';
INSERT INTO plans VALUES ('t2', ctxwin._summary_plan('30000000-0000-4000-8000-000000000011', true, NULL));
SELECT is(ARRAY[plan ->> 'segment', (position(pg_temp.summary('30000000-0000-4000-8000-000000000011') IN plan ->> 'prompt') > 0)::text],
          ARRAY['true', 'true'], 'a segment asked of a summary model with a small window holds the summary so far')
FROM plans WHERE step = 't2';
SELECT cmp_ok(ctxwin.count_tokens(plan ->> 'system_prompt', 'o200k_base') + ctxwin.count_tokens(plan ->> 'prompt', 'o200k_base')
              + 2 * 4 + 3 + (plan ->> 'answer_tokens')::int, '<=', 3000,
              '... and fits its 3,000 tokens')
FROM plans WHERE step = 't2';
SELECT cmp_ok((plan ->> 'through')::int, '<', 38, '... covering fewer messages than are due (the rest comes next)')
FROM plans WHERE step = 't2';

-- hybrid: a segment's facts are its messages' own, not those the summary holds
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000f', 1, 10);
INSERT INTO plans VALUES ('f1', ctxwin._summary_plan('30000000-0000-4000-8000-00000000000f', true, NULL));
SELECT ok((SELECT plan ->> 'facts' LIKE 'Facts: %/srv/shared%' FROM plans WHERE step = 'f1'),
          '(hybrid: the first summary''s facts name /srv/shared)');
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer('Deploys 1 to 8.'))).version, 1, '(hybrid: written)')
FROM plans WHERE step = 'f1';
SELECT pg_temp.talk('30000000-0000-4000-8000-00000000000f', 11, 20);
INSERT INTO plans VALUES ('f2', ctxwin._summary_plan('30000000-0000-4000-8000-00000000000f', true, NULL));
SELECT is(ARRAY[plan ->> 'segment', (plan ->> 'facts' LIKE '%/srv/shared%')::text, (plan ->> 'facts' LIKE 'Facts: release_9;%')::text],
          ARRAY['true', 'false', 'true'],
          'hybrid: a segment''s facts are those of its messages the summary does not hold yet')
FROM plans WHERE step = 'f2';
INSERT INTO seen
SELECT 'f1', s.conversation_summary, s.summary_tokens, NULL, NULL, NULL
FROM ctxwin.sessions s WHERE s.id = '30000000-0000-4000-8000-00000000000f';
SELECT is((ctxwin._summary_finish(plan, pg_temp.answer('Deploys 9 to 18.'))).version, 2, '(hybrid: the segment written)')
FROM plans WHERE step = 'f2';
SELECT is(pg_temp.summary('30000000-0000-4000-8000-00000000000f'),
          summary || E'\n\n' || (SELECT plan ->> 'facts' FROM plans WHERE step = 'f2') || E'\n\nDeploys 9 to 18.',
          '... after the summary: its facts, then the LLM''s text')
FROM seen WHERE step = 'f1';
-- consolidated: the Facts line of every segment merged into one (a summary
-- of two segments written by hand, long enough to leave less than an eighth)
INSERT INTO ctxwin.sessions (id, profile) VALUES ('30000000-0000-4000-8000-000000000012', 'seghyb');
SELECT pg_temp.talk('30000000-0000-4000-8000-000000000012', 1, 20);
UPDATE ctxwin.sessions
SET conversation_summary = 'Facts: alpha_one' || E'\n\n' || 'Deploys 1 to 8.' || repeat(' Fine.', 95)
                           || E'\n\n' || 'Facts: beta_two' || E'\n\n' || 'Deploys 9 to 18.' || repeat(' Fine.', 95),
    summary_segments = ARRAY[length('Facts: alpha_one' || E'\n\n' || 'Deploys 1 to 8.' || repeat(' Fine.', 95)),
                             length('Facts: beta_two' || E'\n\n' || 'Deploys 9 to 18.' || repeat(' Fine.', 95))],
    summary_through_id = 18
WHERE id = '30000000-0000-4000-8000-000000000012';
SELECT pg_temp.talk('30000000-0000-4000-8000-000000000012', 21, 30);
INSERT INTO plans VALUES ('g1', ctxwin._summary_plan('30000000-0000-4000-8000-000000000012', true, NULL));
SELECT is(ARRAY[plan ->> 'segment', left(plan ->> 'facts', 29), (plan ->> 'prompt' LIKE '%Facts: %New messages:%')::text],
          ARRAY['false', 'Facts: alpha_one; beta_two; r', 'false'],
          'hybrid, consolidated: the facts of every segment lead the one Facts line, and the previous summary is the segments'' texts')
FROM plans WHERE step = 'g1';
RESET ctxwin.llm_provider;

-- --- the sessions trigger keeps summary_segments true ---------------------------------
SELECT throws_ok($$UPDATE ctxwin.sessions SET summary_segments = ARRAY[34, 35] WHERE id = '30000000-0000-4000-8000-00000000000d'$$,
                 '23514', 'summary_segments {34,35} does not match conversation_summary',
                 'segments that do not add up to the summary are refused');
SELECT throws_ok($$UPDATE ctxwin.sessions SET summary_segments = ARRAY[35, 35] WHERE id = '30000000-0000-4000-8000-00000000000d'$$,
                 '23514', NULL, '... as are segments that do not end before a blank line');
SELECT lives_ok($$UPDATE ctxwin.sessions SET summary_segments = ARRAY[34, 36] WHERE id = '30000000-0000-4000-8000-00000000000d'$$,
                'the right ones are taken');
UPDATE ctxwin.sessions SET summary_segments = ARRAY[length(conversation_summary)] WHERE id = '30000000-0000-4000-8000-00000000000d';
SELECT is((SELECT summary_segments FROM ctxwin.sessions WHERE id = '30000000-0000-4000-8000-00000000000d'), NULL,
          'one segment the length of the summary is NULL');
UPDATE ctxwin.sessions SET summary_segments = ARRAY[34, 36] WHERE id = '30000000-0000-4000-8000-00000000000d';
UPDATE ctxwin.sessions SET conversation_summary = 'Written by the application.' WHERE id = '30000000-0000-4000-8000-00000000000d';
SELECT is((SELECT summary_segments FROM ctxwin.sessions WHERE id = '30000000-0000-4000-8000-00000000000d'), NULL,
          'a summary an application writes without segments is one segment');
SELECT is(pg_temp.breakpoints('30000000-0000-4000-8000-00000000000d'), 'BB', '... and one block in the Anthropic window');

SELECT * FROM finish();
ROLLBACK;

-- Summary jobs: summaries made by the application's own model.  A claim
-- (claim_summary, claim_next_summary) gives the plan the worker would make
-- (the range, the exact prompt, the previous summary) with a token and a
-- lease; complete_summary writes the answer with the worker's code and
-- checks; fail_summary records a failure with the worker's backoff,
-- release_summary gives a job back with none.  A
-- claim holds the session against every other summarizer until it ends;
-- a stale token is CW001, an empty answer 22023, and neither writes
-- anything.  The profile's summary_strategy 'app' leaves a session queued
-- for the application (compact() and the worker pass it over).
\ir lib/begin.sql
CREATE EXTENSION ctxwin;
SELECT ctxwin.count_tokens('load the library') IS NOT NULL AS loaded \gset

INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
                             min_recent_messages, max_summary_tokens, summary_strategy, window_policy)
VALUES ('japp', 'gpt-4o', 10, NULL, NULL, 2, 400, 'app', 'sliding'),
       ('jseg', 'gpt-4o', 10, NULL, NULL, 2, 400, 'app', 'stable'),
       ('jext', 'gpt-4o', 10, NULL, NULL, 2, 400, 'extractive', 'sliding');
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
    ('40000000-0000-4000-8000-00000000000a', 'japp', 'You run deployments.'),
    ('40000000-0000-4000-8000-00000000000b', 'jseg', 'You run deployments.'),
    ('40000000-0000-4000-8000-00000000000c', 'jext', 'You run deployments.'),
    ('40000000-0000-4000-8000-00000000000d', 'japp', 'You run deployments.');

CREATE FUNCTION pg_temp.talk(sid uuid, lo int, hi int) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content)
    SELECT sid, CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
           CASE WHEN i % 2 = 1 THEN format('Please deploy release_%s to /srv/app_%s.', i, i)
                ELSE format('Deployed release_%s to /srv/app_%s; E%s fixed.', i, i, 4000 + i) END
    FROM generate_series(lo, hi) i $$;
CREATE FUNCTION pg_temp.written(sid uuid) RETURNS text LANGUAGE sql AS $$
    SELECT format('v%s through %s, %s summaries, %s flush events', s.summary_version, s.summary_through_id,
                  (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = sid),
                  (SELECT count(*) FROM ctxwin.flush_events f WHERE f.session_id = sid))
    FROM ctxwin.sessions s WHERE s.id = sid $$;
CREATE TEMP TABLE jobs (step text PRIMARY KEY, job jsonb);
\set a '''40000000-0000-4000-8000-00000000000a'''
\set b '''40000000-0000-4000-8000-00000000000b'''

-- --- nothing to claim --------------------------------------------------------
SELECT is(ctxwin.claim_summary(:a), NULL, 'a session with no messages: no job');
SELECT pg_temp.talk(:a, 1, 6);
SELECT is(ctxwin.claim_summary(:a), NULL, 'a session not queued: no job');
SELECT throws_ok($$SELECT ctxwin.claim_summary('40000000-0000-4000-8000-0000000000ff')$$, 'P0002', NULL,
                 'a session that does not exist: P0002');
SELECT throws_ok($$SELECT ctxwin.claim_summary('40000000-0000-4000-8000-00000000000a', NULL)$$, '22004', NULL,
                 'force NULL: 22004');

-- --- the first job -------------------------------------------------------------
SELECT pg_temp.talk(:a, 7, 12);
SELECT isnt((SELECT compaction_queued_at FROM ctxwin.sessions WHERE id = :a), NULL, 'twelve messages queue the session');
INSERT INTO jobs VALUES ('a1', ctxwin.claim_summary(:a));
SELECT is((SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(job) k),
          ARRAY['expires_at', 'from_id', 'max_tokens', 'messages', 'model', 'previous_summary', 'previous_version',
                'server_llm', 'session_id', 'strategy', 'through_id', 'token', 'transcript'],
          'a job has the keys of the contract') FROM jobs WHERE step = 'a1';
SELECT is(ARRAY[job ->> 'session_id', job ->> 'from_id', job ->> 'through_id', job ->> 'strategy',
                job ->> 'server_llm', job ->> 'previous_summary', job ->> 'previous_version', job ->> 'model'],
          ARRAY['40000000-0000-4000-8000-00000000000a', '1', '10', 'app', 'false', NULL, NULL, NULL],
          'it covers messages 1 to 10 (the newest two kept), strategy app, no previous summary, no server LLM or model')
FROM jobs WHERE step = 'a1';
SELECT ok(job ->> 'token' ~ '^40000000-0000-4000-8000-00000000000a\.[0-9a-f]{32}$', 'the token names the session and 128 random bits')
FROM jobs WHERE step = 'a1';
SELECT ok((job ->> 'expires_at')::timestamptz BETWEEN clock_timestamp() + interval '4 min' AND clock_timestamp() + interval '5 min',
          'the lease is ctxwin.summary_job_lease_ms, 5 minutes by default') FROM jobs WHERE step = 'a1';
SELECT is(job -> 'messages',
          jsonb_build_array(jsonb_build_object('role', 'system', 'content', r ->> 'system_prompt'),
                            jsonb_build_object('role', 'user', 'content', r ->> 'prompt')),
          'its messages are the system prompt and the prompt of the worker''s request for that range')
FROM jobs, ctxwin._summary_request(:a, 0, 10, NULL) r WHERE step = 'a1';
SELECT is((job -> 'messages' -> 0 ->> 'content'), ctxwin.default_summary_prompt() || ' Write at most 400 tokens.',
          '... the built-in prompt, in max_summary_tokens') FROM jobs WHERE step = 'a1';
SELECT is((job ->> 'max_tokens')::int, 400, 'max_tokens: max_summary_tokens') FROM jobs WHERE step = 'a1';
SELECT is((SELECT array_agg((t ->> 'id')::int ORDER BY o) FROM jsonb_array_elements(job -> 'transcript') WITH ORDINALITY x(t, o)),
          ARRAY[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 'its transcript is the stored messages 1 to 10') FROM jobs WHERE step = 'a1';
SELECT is(job -> 'transcript' -> 1, jsonb_build_object('id', 2, 'role', 'assistant', 'content',
          'Deployed release_2 to /srv/app_2; E4002 fixed.', 'name', NULL, 'tool_calls', NULL, 'tool_call_id', NULL),
          '... each with id, role, content, name, tool_calls and tool_call_id') FROM jobs WHERE step = 'a1';

-- --- single-flight -------------------------------------------------------------
SELECT is(ctxwin.claim_summary(:a), NULL, 'a second claim while the first is held: NULL');
SELECT is(ctxwin.claim_summary(:a, true), NULL, '... with force too');
SELECT is(ctxwin.claim_next_summary(), NULL, 'claim_next_summary passes the held session over');
SELECT throws_ok($$SELECT ctxwin.summarize_session('40000000-0000-4000-8000-00000000000a', true)$$, '55P03',
                 'session 40000000-0000-4000-8000-00000000000a is being summarized by the application',
                 'summarize_session refuses a session a job holds (55P03)');
SELECT is(ctxwin.compact(), 0, 'compact() passes it over ...');
SELECT is((SELECT compaction_failures FROM ctxwin.sessions WHERE id = :a), 0, '... and records no failure');
SELECT matches((ctxwin.context_status(:a)).note, 'summary job \(claim_summary\) holds the session until',
               'context_status says a job holds the session');

-- --- refusals write nothing ----------------------------------------------------
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', job ->> 'token', E' \n '), '22023',
                 'the summary of a job must not be empty', 'an empty summary: 22023') FROM jobs WHERE step = 'a1';
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, NULL)', job ->> 'token'), '22023', NULL,
                 'a NULL summary (a refusal): 22023') FROM jobs WHERE step = 'a1';
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L, %L)', job ->> 'token', 'Deploys 1 to 10.', '{"tokens": 5}'),
                 '22023', NULL, 'a usage that is no provider''s: 22023') FROM jobs WHERE step = 'a1';
SELECT is(pg_temp.written(:a), 'v0 through 0, 0 summaries, 0 flush events', '... and nothing was written');
SELECT is(ctxwin.claim_summary(:a), NULL, '... and the job is still held');
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', '40000000-0000-4000-8000-00000000000a.' || repeat('0', 32), 'x'),
                 'CW001', 'summary job is stale: a newer claim of session 40000000-0000-4000-8000-00000000000a superseded it',
                 'a token of the session that is not its job''s: CW001');
SELECT throws_ok($$SELECT ctxwin.complete_summary('not a token', 'x')$$, 'CW001',
                 'summary job is stale: the token is unknown', 'a malformed token: CW001');
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', '40000000-0000-4000-8000-0000000000ee.' || repeat('0', 32), 'x'),
                 'CW001', 'summary job is stale: the token is unknown', 'a token of a session without a job: CW001');
SELECT throws_ok($$SELECT ctxwin.complete_summary(NULL, 'x')$$, '22004', NULL, 'a NULL token: 22004');
SELECT is(pg_temp.written(:a), 'v0 through 0, 0 summaries, 0 flush events', '... nothing written by any of them');

-- --- completed -----------------------------------------------------------------
CREATE TEMP TABLE done AS
SELECT d.* FROM jobs, ctxwin.complete_summary(job ->> 'token', 'Goal and state:' || E'\n' || '- releases 1 to 10 deployed',
                                              '{"prompt_tokens": 900, "completion_tokens": 12}') d WHERE step = 'a1';
SELECT is(ARRAY[version::text, from_id::text, through_id::text, strategy, usage::text],
          ARRAY['1', '1', '10', 'app', '{"prompt_tokens": 900, "completion_tokens": 12}'],
          'complete_summary returns the summaries row: version 1, messages 1 to 10, strategy app, the usage') FROM done;
SELECT is(pg_temp.written(:a), 'v1 through 10, 1 summaries, 1 flush events', 'the session, a summaries row and a flush event');
SELECT is((SELECT conversation_summary FROM ctxwin.sessions WHERE id = :a), 'Goal and state:' || E'\n' || '- releases 1 to 10 deployed',
          'the session''s summary is the answer');
SELECT is((SELECT row(kind, input_tokens, output_tokens)::text FROM ctxwin.usage_ledger WHERE session_id = :a),
          '(summary,900,12)', 'the usage is in the ledger as a summary call');
SELECT is((SELECT compaction_queued_at FROM ctxwin.sessions WHERE id = :a), NULL, 'the session left the queue');
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', job ->> 'token', 'again'), 'CW001',
                 'summary job is stale: it was already completed', 'completing it twice: CW001') FROM jobs WHERE step = 'a1';
SELECT throws_ok(format('SELECT ctxwin.fail_summary(%L, %L)', job ->> 'token', 'late'), 'CW001',
                 'summary job is stale: it was already completed', 'failing a completed job: CW001') FROM jobs WHERE step = 'a1';
SELECT is(pg_temp.written(:a), 'v1 through 10, 1 summaries, 1 flush events', '... neither wrote anything');

-- --- the next job is incremental -----------------------------------------------
SELECT pg_temp.talk(:a, 13, 22);
INSERT INTO jobs VALUES ('a2', ctxwin.claim_summary(:a));
SELECT is(ARRAY[job ->> 'from_id', job ->> 'through_id', job ->> 'previous_summary', job ->> 'previous_version'],
          ARRAY['11', '20', 'Goal and state:' || E'\n' || '- releases 1 to 10 deployed', '1'],
          'the second job starts after the first''s through_id, with the previous summary and version') FROM jobs WHERE step = 'a2';
SELECT is(job -> 'messages' -> 1 ->> 'content', r ->> 'prompt', '... and the worker''s prompt for messages 11 to 20')
FROM jobs, ctxwin._summary_request(:a, 10, 20, NULL) r WHERE step = 'a2';
SELECT ok(starts_with(job -> 'messages' -> 1 ->> 'content', 'Previous summary:' || E'\n' || 'Goal and state:'),
          '... which gives the previous summary') FROM jobs WHERE step = 'a2';

-- --- failed --------------------------------------------------------------------
SELECT lives_ok(format('SELECT ctxwin.fail_summary(%L, %L)', job ->> 'token', 'my model timed out'),
                'fail_summary releases the job') FROM jobs WHERE step = 'a2';
SELECT is((SELECT row(compaction_failures, last_error, compaction_retry_at > now())::text FROM ctxwin.sessions WHERE id = :a),
          '(1,"my model timed out",t)', 'the failure is recorded with the worker''s backoff');
SELECT is(pg_temp.written(:a), 'v1 through 10, 1 summaries, 1 flush events', '... and nothing else written');
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', job ->> 'token', 'late'), 'CW001',
                 'summary job is stale: it was already failed', 'completing a failed job: CW001') FROM jobs WHERE step = 'a2';
SELECT is(ctxwin.claim_summary(:a), NULL, 'in its backoff the session is not claimed without force');
INSERT INTO jobs VALUES ('a3', ctxwin.claim_summary(:a, true));
SELECT is(job ->> 'from_id', '11', '... with force it is, from the same place') FROM jobs WHERE step = 'a3';
SELECT throws_ok(format('SELECT ctxwin.fail_summary(%L, %L)', job ->> 'token', 'late'), 'CW001',
                 'summary job is stale: a newer claim of session 40000000-0000-4000-8000-00000000000a superseded it',
                 'the failed job''s token after a new claim: CW001, superseded') FROM jobs WHERE step = 'a2';

-- --- given back -----------------------------------------------------------------
SELECT compaction_failures AS failures_before, last_error AS error_before FROM ctxwin.sessions WHERE id = :a \gset
SELECT is(ctxwin.release_summary(job ->> 'token'), true, 'release_summary gives a claimed job back') FROM jobs WHERE step = 'a3';
SELECT is((SELECT row(compaction_failures, last_error)::text FROM ctxwin.sessions WHERE id = :a),
          row(:failures_before, :'error_before')::text, '... recording no failure');
SELECT is(ctxwin._summary_job_held(:a), NULL, '... and the session is held no more');
SELECT is(ctxwin.release_summary(job ->> 'token'), false, 'releasing it again: false') FROM jobs WHERE step = 'a3';
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', job ->> 'token', 'late'), 'CW001',
                 'summary job is stale: it was already released', 'completing a released job: CW001') FROM jobs WHERE step = 'a3';
SELECT is(ctxwin.release_summary(job ->> 'token'), false, 'releasing a superseded job: false') FROM jobs WHERE step = 'a2';
SELECT throws_ok($$SELECT ctxwin.release_summary('not a token')$$, 'CW001', 'summary job is stale: the token is unknown',
                 'releasing with a malformed token: CW001');
SELECT throws_ok($$SELECT ctxwin.release_summary(NULL)$$, '22004', 'token must not be null', 'releasing NULL: 22004');
SELECT is(pg_temp.written(:a), 'v1 through 10, 1 summaries, 1 flush events', '... none of them wrote anything');

-- --- expired -------------------------------------------------------------------
SET LOCAL ctxwin.summary_job_lease_ms = 100;
INSERT INTO jobs VALUES ('a4', ctxwin.claim_summary(:a, true));
SELECT pg_sleep(0.2);
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', job ->> 'token', 'too late'), 'CW001', NULL,
                 'completing after the lease: CW001') FROM jobs WHERE step = 'a4';
SELECT is(pg_temp.written(:a), 'v1 through 10, 1 summaries, 1 flush events', '... nothing written');
-- a lease long enough for the checks below on a slow server (valgrind),
-- short enough to wait out before claim_next_summary's (below)
SET LOCAL ctxwin.summary_job_lease_ms = 1500;
INSERT INTO jobs VALUES ('a5', ctxwin.claim_summary(:a, true));
SELECT isnt(job, NULL, 'an expired job''s session is claimed again') FROM jobs WHERE step = 'a5';
RESET ctxwin.summary_job_lease_ms;

-- --- the summary moved under the job -------------------------------------------
UPDATE ctxwin.sessions SET conversation_summary = 'written by hand', summary_through_id = 12 WHERE id = :a;
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', job ->> 'token', 'x'), 'CW001',
                 'summary job is stale: the summary of session 40000000-0000-4000-8000-00000000000a changed since it was claimed',
                 'a job whose session''s summary changed meanwhile: CW001') FROM jobs WHERE step = 'a5';

-- --- segments under a stable window ----------------------------------------------
SELECT pg_temp.talk(:b, 1, 12);
INSERT INTO jobs VALUES ('b1', ctxwin.claim_summary(:b, true));
SELECT is((ctxwin.complete_summary(job ->> 'token', 'Deploys 1 to 10.')).usage, 'null'::jsonb,
          'a job completed without usage stores a JSON null, as the worker does for an answer without one') FROM jobs WHERE step = 'b1';
SELECT pg_temp.talk(:b, 13, 22);
INSERT INTO jobs VALUES ('b2', ctxwin.claim_summary(:b, true));
SELECT ok(job -> 'messages' -> 0 ->> 'content' LIKE '%' || ctxwin.segment_summary_prompt() || ' Write at most 100 tokens.',
          'under a stable window the second job asks for a segment, in a quarter of max_summary_tokens') FROM jobs WHERE step = 'b2';
SELECT is((ctxwin.complete_summary(job ->> 'token', 'Deploys 11 to 20.')).content, 'Deploys 1 to 10.' || E'\n\n' || 'Deploys 11 to 20.',
          'its answer is appended as a segment, the first byte for byte') FROM jobs WHERE step = 'b2';
SELECT is((SELECT summary_segments FROM ctxwin.sessions WHERE id = :b), ARRAY[16, 17], '... with the segments'' lengths');
SELECT pg_temp.talk(:b, 23, 32);
INSERT INTO jobs VALUES ('b3', ctxwin.claim_summary(:b, true));
SELECT is((job ->> 'max_tokens')::int, 400,
          'a segment''s job may answer up to max_summary_tokens, above the target its prompt asks for') FROM jobs WHERE step = 'b3';
CREATE TEMP TABLE long_done AS
SELECT d.* FROM jobs, ctxwin.complete_summary(job ->> 'token', repeat('release_25 deployed and verified. ', 80)) d WHERE step = 'b3';
SELECT ok(token_count <= 400 AND starts_with(content, 'Deploys 1 to 10.' || E'\n\n' || 'Deploys 11 to 20.' || E'\n\n' || 'release_25')
          AND content LIKE '%tokens omitted%',
          'an answer longer than the summary has room for is cut in the middle to fit, not refused') FROM long_done;
SELECT pg_temp.talk(:b, 33, 42);
INSERT INTO jobs VALUES ('b4', ctxwin.claim_summary(:b, true));
SELECT throws_ok(format('SELECT ctxwin.complete_summary(%L, %L)', job ->> 'token', repeat('release_35 deployed and verified. ', 400)),
                 '22023', NULL, 'an answer more than twice as long as max_summary_tokens is refused: 22023') FROM jobs WHERE step = 'b4';
SELECT is((SELECT summary_version FROM ctxwin.sessions WHERE id = :b), 3, '... nothing written');

-- --- the app strategy: left queued for the application ---------------------------
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000d', 1, 12);
SELECT pg_temp.talk('40000000-0000-4000-8000-00000000000c', 1, 12);
SELECT is(ctxwin.compact(), 1, 'compact() summarizes the extractive session only');
SELECT isnt((SELECT compaction_queued_at FROM ctxwin.sessions WHERE id = '40000000-0000-4000-8000-00000000000d'), NULL,
            'the app session stays queued');
SELECT matches((ctxwin.context_status('40000000-0000-4000-8000-00000000000d')).note,
               'written by the application''s own model \(summary_strategy ''app''\)', 'context_status says it waits for the application');
-- the job of step a5 (a 1.5 s lease) expired
SELECT pg_sleep(greatest(0, extract(epoch FROM (job ->> 'expires_at')::timestamptz - clock_timestamp())) + 0.05)
FROM jobs WHERE step = 'a5';
INSERT INTO jobs VALUES ('n1', ctxwin.claim_next_summary());
INSERT INTO jobs VALUES ('n2', ctxwin.claim_next_summary());
INSERT INTO jobs VALUES ('n3', ctxwin.claim_next_summary());
SELECT is(array_agg(job ->> 'session_id' ORDER BY step),
          ARRAY['40000000-0000-4000-8000-00000000000a', '40000000-0000-4000-8000-00000000000d', NULL],
          'claim_next_summary gives the queued sessions oldest queued first (the expired job''s, then the app session), then none')
FROM jobs WHERE step IN ('n1', 'n2', 'n3');
SELECT throws_ok($$INSERT INTO ctxwin.profiles (name, summary_strategy) VALUES ('bad', 'model')$$, '23514', NULL,
                 'summary_strategy takes app, and still refuses other words');

SELECT * FROM finish();
ROLLBACK;

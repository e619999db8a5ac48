-- ctxwin demo (run by scripts/demo.sh; test/demo.pl checks what it shows).
-- Each step says what it does, then shows the result.
\set QUIET 1
\set ON_ERROR_STOP 1
\pset footer off
CREATE EXTENSION IF NOT EXISTS ctxwin;
SELECT current_database() AS demo_db \gset
\echo
\echo '== 1. Token counts'
\echo 'ctxwin counts tokens in the server, exactly as OpenAI''s tiktoken does: cl100k_base is the'
\echo 'vocabulary of GPT-4 and GPT-3.5, o200k_base that of GPT-4o and GPT-4.1. chars4 is no tokenizer:'
\echo 'it is the rule of thumb "characters / 4" that apps use when they have none (ctxwin offers it for'
\echo 'a model whose tokenizer is unknown). It is shown beside the exact counts to see how far off it is.'
SELECT t AS text,
       char_length(t) AS chars,
       ctxwin.count_tokens(t, 'cl100k_base') AS cl100k,
       ctxwin.count_tokens(t, 'o200k_base') AS o200k,
       ctxwin.count_tokens(t, 'chars4') AS chars4
FROM (VALUES ('hello world'),
             ('The quick brown fox jumps over the lazy dog.'),
             ('日本語のテキストも数えます'),
             (E'def add(a, b):\n    return a + b'),
             ('<|endoftext|> is ordinary text here')) AS v(t);

\echo 'The token ids of a text (cl100k_base), and the text they stand for:'
SELECT ctxwin.tokenize('ctxwin counts tokens exactly') AS ids,
       ctxwin.detokenize(ctxwin.tokenize('ctxwin counts tokens exactly'), 'cl100k_base') AS text;

\echo 'Checked against tiktoken: the texts of the test corpus (code, prose, many languages), ctxwin''s'
\echo 'count beside the count tiktoken itself produced for it (a sample, then the whole corpus):'
CREATE TEMP TABLE raw_text (n bigserial, line text);
CREATE TEMP TABLE raw_counts (n bigserial, line text);
\copy raw_text (line) FROM 'test/corpus/dev.jsonl' WITH (FORMAT csv, QUOTE E'\x01', DELIMITER E'\x02')
\copy raw_counts (line) FROM 'test/corpus/dev.counts.jsonl' WITH (FORMAT csv, QUOTE E'\x01', DELIMITER E'\x02')
CREATE TEMP TABLE corpus AS
SELECT t.n, t.line::jsonb ->> 'text' AS txt,
       (c.line::jsonb ->> 'cl100k_base')::int AS tiktoken_cl100k,
       (c.line::jsonb ->> 'o200k_base')::int AS tiktoken_o200k
FROM raw_text t JOIN raw_counts c USING (n)
WHERE strpos(t.line, '\u0000') = 0;

SELECT left(regexp_replace(txt, '\s+', ' ', 'g'), 40) AS sample,
       ctxwin.count_tokens(txt, 'cl100k_base') AS ctxwin_cl100k, tiktoken_cl100k,
       ctxwin.count_tokens(txt, 'o200k_base') AS ctxwin_o200k, tiktoken_o200k
FROM corpus WHERE n IN (1, 200, 900, 1500, 2100, 2600, 3000) ORDER BY n;

SELECT count(*) AS texts,
       pg_size_pretty(sum(octet_length(txt))) AS size,
       count(*) FILTER (WHERE ctxwin.count_tokens(txt, 'cl100k_base') = tiktoken_cl100k) AS exact_cl100k,
       count(*) FILTER (WHERE ctxwin.count_tokens(txt, 'o200k_base') = tiktoken_o200k) AS exact_o200k
FROM corpus;

\echo
\echo '== 2. A chat, and the window to send'
\echo 'The app stores each message with a plain INSERT into ctxwin.messages: here a debugging chat of'
\echo '30 turns with tool calls, under a profile for gpt-4o that asks for a summary after 40 messages.'
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, response_reserve, max_summary_tokens)
VALUES ('demo', 'gpt-4o', 40, 2000, 400)
ON CONFLICT (name) DO NOTHING;
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
VALUES ('d0000000-0000-0000-0000-000000000001', 'demo',
        'You are a coding assistant for the Acme billing service. Be precise.')
ON CONFLICT (id) DO NOTHING;

-- a debugging conversation of 30 turns, with tool calls
DO $$
DECLARE
    turns text[][] := ARRAY[
        ['Invoices for EUR customers are off by one cent. Where do we round?', 'Rounding happens in billing/money.py, function to_cents(), with float arithmetic.'],
        ['Can you show me to_cents()?', 'It multiplies by 100 and calls round(), which rounds half to even on floats like 10.045.'],
        ['Is that the bug behind ticket BILL-412?', 'Yes: 10.045 is stored as 10.04499999, so round() gives 10.04 instead of 10.05.'],
        ['What do you propose?', 'We should use Decimal with ROUND_HALF_UP and quantize to two places.'],
        ['Does that change the tax calculation too?', 'The tax module calls to_cents() twice; we decided to round only once, at the end.'],
        ['Run the tests for billing.', NULL],
        ['Good. What about the database column type?', 'The amount column is double precision; switch it to NUMERIC(12,2) in migration 0042.'],
        ['How long will the migration take on 40 GB?', 'About 25 min with a table rewrite; use a new column and backfill in batches of 10000 rows instead.'],
        ['Write the backfill plan.', 'Add amount_num NUMERIC(12,2), backfill by id ranges, then swap in a short transaction.'],
        ['Where is the backfill script?', 'Put it in scripts/backfill_amounts.py, with a --batch-size flag defaulting to 10000.'],
        ['Check the Stripe webhook handler too.', NULL],
        ['Do webhooks depend on to_cents()?', 'Yes, stripe_webhook.py converts amounts back with float division; use Decimal there as well.'],
        ['Any risk of double charging?', 'Retries are idempotent via the Idempotency-Key header; the key is the invoice id.'],
        ['What is our retry policy?', 'Exponential backoff from 2 s to 5 min, 8 attempts, as configured in config/stripe.yaml.'],
        ['Let us ship the rounding fix first, migration later.', 'Agreed: PR 1 is the Decimal change, PR 2 the migration and backfill.'],
        ['Which currencies have no minor unit?', 'JPY and KRW have zero decimals; quantize per currency using the currency table.'],
        ['Is the currency table complete?', 'It lacks ISK and CLP; add them with exponent 0.'],
        ['Run the tests again.', NULL],
        ['What does the PDF renderer do with amounts?', 'It formats with %.2f, which hides the bug; switch to the formatted Decimal string.'],
        ['How do we monitor this after release?', 'Add a metric billing_rounding_diff_cents and alert if it is non-zero for 15 min.'],
        ['Where do alerts go?', 'To the #billing-alerts channel through the existing Alertmanager route.'],
        ['Summarize the plan for the release notes.', 'Fix rounding with Decimal, per-currency exponents, PDF formatting, and a rounding metric.'],
        ['Who reviews PR 1?', 'The billing owners; the CODEOWNERS file lists team @acme/billing.'],
        ['When is the next release window?', 'Tuesday 14:00 UTC; the freeze starts Monday 18:00 UTC.'],
        ['Can we backport to 2.3?', 'Yes, cherry-pick onto release/2.3; the migration is not needed there.'],
        ['Anything else before we start?', 'Add a regression test with 10.045 EUR and 1,005 JPY.'],
        ['Write that test.', 'Added tests/test_rounding.py::test_half_up_eur and test_jpy_no_minor_unit.'],
        ['Run the full suite.', NULL],
        ['Great. Open the PR.', 'Opened PR 1287: Decimal rounding for invoices (BILL-412).'],
        ['Thanks. What is left?', 'The migration 0042 and backfill, the currency table additions, and the metric.']];
BEGIN
    FOR i IN 1 .. array_length(turns, 1) LOOP
        INSERT INTO ctxwin.messages (session_id, role, content)
        VALUES ('d0000000-0000-0000-0000-000000000001', 'user', turns[i][1]);
        IF turns[i][2] IS NULL THEN
            INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES
                ('d0000000-0000-0000-0000-000000000001', 'assistant',
                 jsonb_build_array(jsonb_build_object('id', 'call_' || i, 'type', 'function',
                     'function', jsonb_build_object('name', 'run_tests', 'arguments', '{"path": "tests/billing"}'))));
            INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES
                ('d0000000-0000-0000-0000-000000000001', 'tool',
                 format('%s passed, %s failed in 3.2 s', 180 + i, CASE WHEN i < 18 THEN 1 ELSE 0 END), 'call_' || i);
            INSERT INTO ctxwin.messages (session_id, role, content) VALUES
                ('d0000000-0000-0000-0000-000000000001', 'assistant',
                 CASE WHEN i < 18 THEN 'One failure: test_tax_rounding expects 10.05 and gets 10.04.' ELSE 'All tests pass.' END);
        ELSE
            INSERT INTO ctxwin.messages (session_id, role, content)
            VALUES ('d0000000-0000-0000-0000-000000000001', 'assistant', turns[i][2]);
        END IF;
    END LOOP;
END $$;

\echo 'The insert trigger counted each message''s tokens and queued the session for a summary:'
SELECT message_count, token_count, unsummarized_messages AS unsummarized,
       compaction_queued_at IS NOT NULL AS queued_for_summary
FROM ctxwin.sessions WHERE id = 'd0000000-0000-0000-0000-000000000001';

\echo 'Before a model call the app asks for the window: build_context(session, 400) returns the system'
\echo 'prompt and the newest messages that fit 400 tokens, a tool call and its result kept together:'
SELECT n, m ->> 'role' AS role,
       left(coalesce(m ->> 'content', 'tool call: ' || (m -> 'tool_calls' -> 0 -> 'function' ->> 'name')), 90) AS content
FROM jsonb_array_elements(ctxwin.build_context('d0000000-0000-0000-0000-000000000001', 400)) WITH ORDINALITY AS w(m, n);
\echo 'What that window costs, counted as OpenAI bills a request (o200k_base, 3 tokens for the list):'
SELECT ctxwin.messages_tokens(ctxwin.build_context('d0000000-0000-0000-0000-000000000001', 400), 'o200k_base') + 3
       AS tokens_sent, 400 AS budget;

\echo 'context_report says where the session stands:'
\pset format unaligned
\pset tuples_only on
SELECT ctxwin.context_report('d0000000-0000-0000-0000-000000000001');
\pset format aligned
\pset tuples_only off

\echo
\echo '== 3. A summary'
\echo 'The messages before: their number and ids, to compare after summarizing.'
SELECT count(*) AS rows_before, min(id) AS first_id, max(id) AS last_id,
       string_agg(id::text, ',' ORDER BY id) AS ids_before
FROM ctxwin.messages WHERE session_id = 'd0000000-0000-0000-0000-000000000001' \gset
\echo :rows_before 'message rows, ids' :first_id 'to' :last_id
\echo 'summarize_session writes a running summary of the oldest messages. Here with the extractive'
\echo 'strategy: the sentences that matter, chosen from the chat itself, offline, without an LLM'
\echo '(with one configured, the llm strategy asks the model to write it):'
SELECT version, from_id, through_id, token_count, strategy
FROM ctxwin.summarize_session('d0000000-0000-0000-0000-000000000001');
\pset format unaligned
\pset tuples_only on
SELECT conversation_summary FROM ctxwin.sessions WHERE id = 'd0000000-0000-0000-0000-000000000001';
\pset format aligned
\pset tuples_only off
\echo 'The window now starts with that summary, then the newest messages; the summarized messages stay'
\echo 'in ctxwin.messages (search and the app still read them), they are only left out of the window:'
\pset format unaligned
\pset tuples_only on
SELECT ctxwin.context_report('d0000000-0000-0000-0000-000000000001');
\pset format aligned
\pset tuples_only off
\echo 'Each summary also writes a row of the flush outbox, the range it newly covered (for an app that'
\echo 'extracts long-term memories from it):'
SELECT session_id, id, from_id, through_id FROM ctxwin.flush_events;

\echo
\echo '== 4. The background worker'
\echo 'With ctxwin in shared_preload_libraries, a worker serves the databases of ctxwin.databases (here'
\echo 'ctxwin_demo_worker). A session crosses its trigger; the commit wakes the worker, which summarizes'
\echo 'it: the app calls nothing and never waits.'
CREATE DATABASE ctxwin_demo_worker;
\c ctxwin_demo_worker
CREATE EXTENSION ctxwin;
\echo '(Its profile uses a sliding window here, so the summary is written at once. Under the default'
\echo 'stable window a due summary waits until the window nears its budget or the chat is idle for'
\echo 'cache_ttl, 5 minutes, so that it does not change the beginning of requests the provider has cached.)'
UPDATE ctxwin.profiles SET window_policy = 'sliding' WHERE name = 'default';
INSERT INTO ctxwin.sessions (id, system_prompt)
VALUES ('d0000000-0000-0000-0000-000000000002', 'You help with deployments.');
WITH ins AS (
    INSERT INTO ctxwin.messages (session_id, role, content)
    SELECT 'd0000000-0000-0000-0000-000000000002',
           CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
           CASE WHEN g % 2 = 1 THEN 'Step ' || g || ': deploy billing-api v2.' || g || ' to /srv/billing and check error E' || (4000 + g) || '.'
                ELSE 'Done: billing-api v2.' || (g - 1) || ' is live; E' || (3999 + g) || ' is gone.' END
    FROM generate_series(1, 30) g
    RETURNING id)
SELECT count(*) AS w_rows_before, string_agg(id::text, ',' ORDER BY id) AS w_ids_before FROM ins \gset
\echo :w_rows_before 'messages inserted. The session as the worker left it (waited for here, at most 30 s):'
DO $$
BEGIN
    FOR i IN 1 .. 300 LOOP
        EXIT WHEN (SELECT summary_version > 0 FROM ctxwin.sessions WHERE id = 'd0000000-0000-0000-0000-000000000002');
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
SELECT summary_through_id, summary_version, compaction_queued_at IS NULL AS left_the_queue,
       left(conversation_summary, 120) || '...' AS summary
FROM ctxwin.sessions;
SELECT database, state, done, failed, in_flight, lag_p50_ms AS queued_to_summary_ms
FROM ctxwin.worker_status;
SELECT count(*) AS w_rows_after, string_agg(id::text, ',' ORDER BY id) = :'w_ids_before' AS w_same_ids
FROM ctxwin.messages WHERE session_id = 'd0000000-0000-0000-0000-000000000002' \gset

\echo
\echo '== 5. The proof: summarizing deleted no message'
\echo 'The message rows of both sessions, counted before their summaries and now, and their ids compared:'
\c :demo_db
-- the demo stops with an error if a message row went missing
CREATE FUNCTION pg_temp.kept(before bigint, after bigint, same_ids bool) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN
    IF after <> before OR NOT same_ids THEN
        RAISE EXCEPTION 'message rows were lost: % before summarizing, % after', before, after;
    END IF;
    RETURN true;
END $$;
SELECT count(*) AS rows_after, string_agg(id::text, ',' ORDER BY id) = :'ids_before' AS same_ids
FROM ctxwin.messages WHERE session_id = 'd0000000-0000-0000-0000-000000000001' \gset
\pset format unaligned
\pset tuples_only on
SELECT format('summarized by summarize_session: %s message rows before, %s after, %s ids (%s to %s)',
              :rows_before, :rows_after, CASE WHEN :'same_ids' THEN 'the same' ELSE 'NOT the same' END,
              :first_id, :last_id);
SELECT format('summarized by the worker: %s message rows before, %s after, %s ids (1 to %s)',
              :w_rows_before, :w_rows_after, CASE WHEN :'w_same_ids' THEN 'the same' ELSE 'NOT the same' END,
              :w_rows_before);
SELECT pg_temp.kept(:rows_before, :rows_after, :'same_ids') AND pg_temp.kept(:w_rows_before, :w_rows_after, :'w_same_ids') AS kept \gset
\echo 'Every message row is still there: a summary only changes which messages the window sends.'

-- ctxwin demo: exact token counting.
\set QUIET 1
\pset footer off
CREATE EXTENSION IF NOT EXISTS ctxwin;
\echo
\echo '== Token counts, cl100k_base (GPT-4, GPT-3.5) and o200k_base (GPT-4o, GPT-4.1)'
SELECT t AS text,
       ctxwin.count_tokens(t, 'cl100k_base') AS cl100k,
       ctxwin.count_tokens(t, 'o200k_base') AS o200k,
       ctxwin.count_tokens(t, 'chars4') AS chars4
FROM (VALUES ('hello world'),
             ('The quick brown fox jumps over the lazy dog.'),
             ('日本語のテキストも数えます'),
             (E'def add(a, b):\n    return a + b'),
             ('<|endoftext|> is ordinary text here')) AS v(t);

\echo '== Token ids, and back'
SELECT ctxwin.tokenize('ctxwin counts tokens exactly') AS ids,
       ctxwin.detokenize(ctxwin.tokenize('ctxwin counts tokens exactly'), 'cl100k_base') AS text;

\echo '== Against tiktoken: corpus records and the counts tiktoken itself produced'
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

SELECT count(*) AS records,
       pg_size_pretty(sum(octet_length(txt))) AS text,
       count(*) FILTER (WHERE ctxwin.count_tokens(txt, 'cl100k_base') = tiktoken_cl100k) AS exact_cl100k,
       count(*) FILTER (WHERE ctxwin.count_tokens(txt, 'o200k_base') = tiktoken_o200k) AS exact_o200k
FROM corpus;

\echo
\echo '== A chat session: the app inserts messages with plain INSERTs'
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, response_reserve)
VALUES ('demo', 'gpt-4o', 40, 2000)
ON CONFLICT (name) DO NOTHING;
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
VALUES ('d0000000-0000-0000-0000-000000000001', 'demo',
        'You are a coding assistant for the Acme billing service. Be precise.')
ON CONFLICT (id) DO NOTHING;

-- 60 turns of a conversation, with a tool call every tenth turn
DO $$
DECLARE
    topics text[] := ARRAY['the invoice rounding bug', 'the Stripe webhook retries',
                           'the PostgreSQL migration 0042', 'the currency table', 'the PDF renderer'];
BEGIN
    FOR i IN 1 .. 60 LOOP
        INSERT INTO ctxwin.messages (session_id, role, content) VALUES
            ('d0000000-0000-0000-0000-000000000001', 'user',
             format('Question %s: what should we do about %s? We saw error E%s in /srv/billing/app.py.',
                    i, topics[1 + i % 5], 1000 + i));
        IF i % 10 = 0 THEN
            INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES
                ('d0000000-0000-0000-0000-000000000001', 'assistant',
                 jsonb_build_array(jsonb_build_object('id', 'call_' || i, 'type', 'function',
                     'function', jsonb_build_object('name', 'run_tests',
                                                    'arguments', '{"path": "tests/billing"}'))));
            INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES
                ('d0000000-0000-0000-0000-000000000001', 'tool',
                 format('%s passed, 1 failed: test_rounding (expected 10.05, got 10.04)', 100 + i), 'call_' || i);
        END IF;
        INSERT INTO ctxwin.messages (session_id, role, content) VALUES
            ('d0000000-0000-0000-0000-000000000001', 'assistant',
             format('For %s, change the rounding to ROUND_HALF_EVEN in billing/money.py line %s and add a test. ', topics[1 + i % 5], 40 + i)
             || repeat('Details follow. ', 1 + i % 7));
    END LOOP;
END $$;

SELECT message_count, token_count, unsummarized_messages AS unsummarized,
       compaction_queued_at IS NOT NULL AS queued_for_summary
FROM ctxwin.sessions WHERE id = 'd0000000-0000-0000-0000-000000000001';

\echo '== build_context with a 400-token budget: the newest messages that fit, tool groups whole'
SELECT n, m ->> 'role' AS role,
       left(coalesce(m ->> 'content', 'tool call: ' || (m -> 'tool_calls' -> 0 -> 'function' ->> 'name')), 90) AS content
FROM jsonb_array_elements(ctxwin.build_context('d0000000-0000-0000-0000-000000000001', 400)) WITH ORDINALITY AS w(m, n);
SELECT ctxwin.messages_tokens(ctxwin.build_context('d0000000-0000-0000-0000-000000000001', 400), 'o200k_base') + 3
       AS tokens_sent, 400 AS budget;

\echo '== context_report: where the session stands'
\pset format unaligned
\pset tuples_only on
SELECT ctxwin.context_report('d0000000-0000-0000-0000-000000000001');
\pset format aligned
\pset tuples_only off

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

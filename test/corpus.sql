-- Exactness through SQL: every corpus record that a text value can hold
-- counts as tiktoken counts it, in both encodings, and the records of
-- dev.ids.jsonl tokenize to tiktoken's ids.  Records holding NUL are checked
-- against the C core by test/core.pl.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

CREATE TEMP TABLE raw_text (n bigserial, line text);
CREATE TEMP TABLE raw_counts (n bigserial, line text);
CREATE TEMP TABLE raw_ids (n bigserial, line text);
-- one JSON document per line, read raw: no quote or delimiter byte occurs
\copy raw_text (line) FROM 'test/corpus/dev.jsonl' WITH (FORMAT csv, QUOTE E'\x01', DELIMITER E'\x02')
\copy raw_counts (line) FROM 'test/corpus/dev.counts.jsonl' WITH (FORMAT csv, QUOTE E'\x01', DELIMITER E'\x02')
\copy raw_ids (line) FROM 'test/corpus/dev.ids.jsonl' WITH (FORMAT csv, QUOTE E'\x01', DELIMITER E'\x02')

CREATE TEMP TABLE corpus AS
SELECT t.n - 1 AS idx,
       t.line::jsonb ->> 'text' AS txt,
       (c.line::jsonb ->> 'cl100k_base')::int AS cl100k,
       (c.line::jsonb ->> 'o200k_base')::int AS o200k
FROM raw_text t JOIN raw_counts c USING (n)
WHERE strpos(t.line, '\u0000') = 0;

SELECT cmp_ok((SELECT count(*) FROM corpus)::int, '>=', 3100,
              'the corpus was loaded (records without NUL)');
SELECT is((SELECT count(*) FROM raw_text)::int, (SELECT count(*) FROM raw_counts)::int,
          'texts and reference counts have the same number of records');

SELECT is((SELECT count(*) FROM corpus WHERE ctxwin.count_tokens(txt, 'cl100k_base') <> cl100k)::int, 0,
          'cl100k_base: every record counts exactly as tiktoken');
SELECT is((SELECT count(*) FROM corpus WHERE ctxwin.count_tokens(txt, 'o200k_base') <> o200k)::int, 0,
          'o200k_base: every record counts exactly as tiktoken');
SELECT is((SELECT sum(ctxwin.count_tokens(txt)) FROM corpus),
          (SELECT sum(cl100k) FROM corpus),
          'cl100k_base: corpus total equals the reference total');

CREATE TEMP TABLE ids AS
SELECT (i.line::jsonb ->> 'index')::int AS idx,
       ARRAY(SELECT jsonb_array_elements_text(i.line::jsonb -> 'cl100k_base')::int) AS cl100k,
       ARRAY(SELECT jsonb_array_elements_text(i.line::jsonb -> 'o200k_base')::int) AS o200k
FROM raw_ids i;

SELECT cmp_ok((SELECT count(*) FROM ids JOIN corpus USING (idx))::int, '>=', 190,
              'most id records are checkable through SQL');
SELECT is((SELECT count(*) FROM ids JOIN corpus USING (idx)
           WHERE ctxwin.tokenize(txt, 'cl100k_base') <> ids.cl100k)::int, 0,
          'cl100k_base: token ids equal tiktoken''s');
SELECT is((SELECT count(*) FROM ids JOIN corpus USING (idx)
           WHERE ctxwin.tokenize(txt, 'o200k_base') <> ids.o200k)::int, 0,
          'o200k_base: token ids equal tiktoken''s');

SELECT * FROM finish();
ROLLBACK;

-- Token counting behaviour: invariants that hold for any text.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

SELECT has_function('ctxwin', 'count_tokens', ARRAY['text', 'text'], 'count_tokens(text, text) exists');
SELECT has_function('ctxwin', 'tokenize', ARRAY['text', 'text'], 'tokenize(text, text) exists');
SELECT has_function('ctxwin', 'detokenize', ARRAY['integer[]', 'text'], 'detokenize(int[], text) exists');

-- count = length of tokenize, and round trip, on generated mixed text
CREATE TEMP TABLE samples AS
SELECT string_agg(w, '') AS t
FROM (SELECT g / 40 AS grp,
             (ARRAY['Hello', ' world', E'\n', '  ', 'naïve', ' 東京', '🙂', '42', '3.14159',
                    E'\t', '''s', 'CamelCase', 'x/y', E'\r\n', ' ', 'é', E'\u0301',
                    'ʰ', 'ǅ', '١٢٣'])[1 + (g * 7919) % 20] AS w
      FROM generate_series(0, 40 * 200 - 1) g) s
GROUP BY grp;

SELECT is((SELECT count(*) FROM samples s, (VALUES ('cl100k_base'), ('o200k_base')) e(enc)
           WHERE ctxwin.count_tokens(s.t, e.enc) <> cardinality(ctxwin.tokenize(s.t, e.enc)))::int, 0,
          'count_tokens equals the length of tokenize');
SELECT is((SELECT count(*) FROM samples s, (VALUES ('cl100k_base'), ('o200k_base')) e(enc)
           WHERE ctxwin.detokenize(ctxwin.tokenize(s.t, e.enc), e.enc) <> s.t)::int, 0,
          'detokenize(tokenize(t)) = t');

-- a single 1 MB word: linear-cost merge, exact round trip
CREATE TEMP TABLE word AS
SELECT string_agg(substr('abcdefghijklmnopqrstuvwxyz', 1 + (g * 7 + g / 26) % 26, 1), '') AS t
FROM generate_series(1, 1048576) g;
SELECT is((SELECT length(t) FROM word), 1048576, 'the 1 MB word has no space');
SELECT is((SELECT ctxwin.detokenize(ctxwin.tokenize(t), 'cl100k_base') = t FROM word), true,
          'a 1 MB word round-trips');
SELECT is((SELECT ctxwin.count_tokens(t) = cardinality(ctxwin.tokenize(t)) FROM word), true,
          'a 1 MB word counts as many tokens as it encodes to');

-- estimates
SELECT is(ctxwin.count_tokens(repeat('ü', 10), 'chars4'), 2, 'chars4 counts characters, not bytes');
SELECT is(ctxwin.count_tokens(repeat('a', 7), 'chars3.5'), 2, 'chars3.5 of 7 characters is 2');
SELECT is(ctxwin.count_tokens(repeat('a', 8), 'chars3.5'), 3, 'chars3.5 rounds up');

-- errors carry SQLSTATEs
SELECT throws_ok($$SELECT ctxwin.count_tokens('x', 'p50k_base')$$, '22023',
                 'unrecognized encoding or model "p50k_base"', 'an unknown encoding is an error');
SELECT throws_ok($$SELECT ctxwin.detokenize(ARRAY[1, NULL])$$, '22004',
                 'token ids must not be null', 'a NULL id is an error');
SELECT throws_ok($$SELECT ctxwin.detokenize(ARRAY[2000000000])$$, '22023',
                 'invalid token id 2000000000 for encoding "cl100k_base"', 'an id out of range is an error');

SELECT * FROM finish();
ROLLBACK;

-- Token counting: exact outputs and error texts.
-- Ids are tiktoken's (checked against the reference implementation).

SELECT ctxwin.count_tokens('hello world');
SELECT ctxwin.tokenize('hello world');
SELECT ctxwin.tokenize('hello world', 'o200k_base');
SELECT ctxwin.count_tokens('');
SELECT ctxwin.tokenize('');
SELECT ctxwin.detokenize('{}');

-- encode_ordinary: special-token text is ordinary text
SELECT ctxwin.tokenize('<|endoftext|>'), ctxwin.tokenize('<|endoftext|>', 'o200k_base');

-- contractions in any case, and the long s that folds to s
SELECT ctxwin.tokenize(E'don''t I''LL we''Re it''ſ');
SELECT ctxwin.tokenize(E'don''t I''LL we''Re it''ſ', 'o200k_base');

-- digits go in runs of at most three; whitespace runs give back their last space
SELECT ctxwin.tokenize('1234567 x  y', 'cl100k_base');
SELECT ctxwin.tokenize(E'a \r\n\r\n  b\t', 'o200k_base');

-- o200k splits CamelCase words and keeps '/' after punctuation
SELECT ctxwin.tokenize('HTTPServer getHTTPResponse', 'o200k_base');
SELECT ctxwin.tokenize('a.b// x', 'o200k_base');

-- White_Space: U+0085 and U+3000 are spaces, U+FEFF and U+200B are not
SELECT ctxwin.tokenize(E'a\u0085\u0085b a\u3000\u3000b a\uFEFF\uFEFFb a\u200B\u200Bb');

-- combining marks, CJK and emoji sequences
SELECT ctxwin.count_tokens(E'e\u0301te\u0301 日本語のテキスト 👩‍👩‍👧‍👦', 'cl100k_base'),
       ctxwin.count_tokens(E'e\u0301te\u0301 日本語のテキスト 👩‍👩‍👧‍👦', 'o200k_base');

-- round trips
SELECT ctxwin.detokenize(ctxwin.tokenize(t, e), e) = t AS round_trip
FROM (VALUES ('Grüße aus Köln! 🎉'), (E'line one\r\nline two\n\n\tindented')) AS v(t),
     (VALUES ('cl100k_base'), ('o200k_base')) AS w(e);

-- special ids decode to their text
SELECT ctxwin.detokenize('{100257, 15339}', 'cl100k_base');
SELECT ctxwin.detokenize('{199999}', 'o200k_base');

-- estimates: characters, not bytes
SELECT ctxwin.count_tokens('abcdefg', 'chars4'), ctxwin.count_tokens('abcdefg', 'chars3.5');
SELECT ctxwin.count_tokens('ééééééé', 'chars4'), ctxwin.count_tokens('ééééééé', 'chars3.5');
SELECT ctxwin.count_tokens('', 'chars3.5'), ctxwin.count_tokens('abcdefgh', 'chars3.5');

-- long pieces in which no two adjacent bytes form a token (the long-piece
-- merge with an empty heap); reference counts from tiktoken: 400 400 258 172
SELECT ctxwin.count_tokens(repeat(chr(129), 200)), ctxwin.count_tokens(repeat(chr(129), 200), 'o200k_base'),
       ctxwin.count_tokens(repeat(chr(52793), 86)), ctxwin.count_tokens(repeat(chr(52793), 86), 'o200k_base');

-- a model ctxwin ships names its encoding
SELECT ctxwin.tokenize('hello world', 'gpt-4o') = ctxwin.tokenize('hello world', 'o200k_base') AS gpt4o,
       ctxwin.tokenize('hello world', 'gpt-4') = ctxwin.tokenize('hello world', 'cl100k_base') AS gpt4;

-- a model added to ctxwin.models is not built in: its encoding comes from
-- model_encoding, which reads its row (the counting functions are IMMUTABLE)
INSERT INTO ctxwin.models (name, encoding, context_window) VALUES ('my-model', 'chars4', 8000);
SELECT ctxwin.count_tokens('x', 'my-model');
SELECT ctxwin.truncate_middle('x', 5, 'my-model');
SELECT ctxwin.model_encoding('my-model'), ctxwin.count_tokens('abcdefgh', ctxwin.model_encoding('my-model'));
SELECT ctxwin.model_encoding('gpt-4o'), ctxwin.model_encoding('chars3.5');
SELECT ctxwin.model_encoding('gpt2');
DELETE FROM ctxwin.models WHERE name = 'my-model';

-- NULLs: the functions are strict
SELECT ctxwin.count_tokens(NULL) IS NULL, ctxwin.count_tokens('x', NULL) IS NULL,
       ctxwin.tokenize(NULL) IS NULL, ctxwin.detokenize(NULL) IS NULL;

-- errors
SELECT ctxwin.count_tokens('x', 'gpt2');
SELECT ctxwin.count_tokens('x', '');
SELECT ctxwin.tokenize('x', 'chars4');
SELECT ctxwin.detokenize('{1,-5}');
SELECT ctxwin.detokenize('{100256}');
SELECT ctxwin.detokenize('{200019}', 'o200k_base');
SELECT ctxwin.detokenize('{1,NULL}');
SELECT ctxwin.detokenize('{9468}');
SELECT ctxwin.detokenize('{0}');
SELECT ctxwin.detokenize('{15339}', 'chars3.5');

-- multidimensional arrays are read in storage order
SELECT ctxwin.detokenize('{{15339},{1917}}');

-- Every function of the extension: volatility, strictness, parallel safety,
-- and whether it pins search_path.  Only C functions that run no SQL may go
-- without (see the install script), the C insert trigger _messages_insert,
-- which qualifies every name in its queries, and the C counting functions,
-- which read ctxwin.models only on their way to an error (to tell a model
-- added to it from a name of nothing) or under 0.1.0's declarations, with
-- search_path pinned around the query.
SELECT p.proname, l.lanname, p.provolatile, p.proisstrict, p.proparallel,
       coalesce(array_to_string(p.proconfig, ','), '') LIKE '%search_path=%' AS pins_search_path
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname = 'ctxwin'
ORDER BY 1;

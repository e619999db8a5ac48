-- ctxwin 0.1.0: token counting.
\echo Use "CREATE EXTENSION ctxwin" to load this file. \quit

-- search_path: every function that runs SQL or resolves a name pins it with
-- a SET clause.  The C functions count_tokens, tokenize and detokenize run no
-- SQL and resolve no name, except the encoding conversion of a database that
-- is neither UTF8 nor SQL_ASCII, which they pin internally; a SET clause would
-- triple their cost on short texts.

COMMENT ON SCHEMA ctxwin IS 'ctxwin: LLM context windows, token counting and running summaries';

CREATE FUNCTION ctxwin.count_tokens(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'count_tokens'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_tokens(text, text) IS
'Number of tokens of a text: exact with tiktoken''s encode_ordinary for cl100k_base and o200k_base; estimates for chars4 (characters / 4) and chars3.5 (characters / 3.5, rounded up)';

CREATE FUNCTION ctxwin.tokenize(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int[]
AS 'MODULE_PATHNAME', 'tokenize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.tokenize(text, text) IS
'Token ids of a text, as tiktoken''s encode_ordinary gives them (special-token text is ordinary text)';

CREATE FUNCTION ctxwin.detokenize(ids int[], encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'detokenize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.detokenize(int[], text) IS
'Text of a sequence of token ids; the inverse of tokenize';

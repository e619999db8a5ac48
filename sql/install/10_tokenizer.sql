-- The tokenizer functions are STABLE, not IMMUTABLE: an encoding argument may
-- name a model, whose encoding is read from ctxwin.models (a row a user can
-- change).  Functions that pass an encoding through are STABLE too.
CREATE FUNCTION ctxwin.count_tokens(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_tokens(text, text) IS
'Number of tokens of a text: exact with tiktoken''s encode_ordinary for cl100k_base and o200k_base; estimates for chars4 (characters / 4) and chars3.5 (characters / 3.5, rounded up)';

CREATE FUNCTION ctxwin.tokenize(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int[]
AS 'MODULE_PATHNAME', 'ctxwin_tokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.tokenize(text, text) IS
'Token ids of a text, as tiktoken''s encode_ordinary gives them (special-token text is ordinary text)';

CREATE FUNCTION ctxwin.detokenize(ids int[], encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_detokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.detokenize(int[], text) IS
'Text of a sequence of token ids; the inverse of tokenize';

CREATE FUNCTION ctxwin.count_message_tokens(message jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_message_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_message_tokens(jsonb, text) IS
'Tokens of one chat message in OpenAI form: 4 + the tokens of role, content, name and tool_call_id + the tokens of the tool_calls JSON text';

-- What tools cost a request (src/tools.c): OpenAI's published formula for an
-- encoding or a model of any provider but anthropic; Anthropic's tool-use
-- system prompt and the tools' JSON text for a model of provider anthropic.
CREATE FUNCTION ctxwin.count_tool_tokens(tools jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tool_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.count_tool_tokens(jsonb, text) IS
'Tokens that OpenAI function tools ([{"type": "function", "function": {...}}]) cost a request, in an encoding or for a model of ctxwin.models; build_context subtracts them from the budget';

CREATE FUNCTION ctxwin.message_tokens(role text, content text, name text, tool_call_id text,
                                      tool_calls jsonb, encoding text)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_message_tokens'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.message_tokens(text, text, text, text, jsonb, text) IS
'Tokens of one chat message given as fields (NULL: absent); equal to count_message_tokens of the same message as JSON';

CREATE FUNCTION ctxwin.truncate_middle(t text, max_tokens int, encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_truncate_middle'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.truncate_middle(text, int, text) IS
'The text itself if it has at most max_tokens tokens, else its beginning and end around "[... N tokens omitted ...]", within max_tokens';

CREATE FUNCTION ctxwin._fit_contents(contents text[], room int, encoding text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'ctxwin_fit_contents'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._fit_contents(text[], int, text) IS
'The contents of a window''s newest unit, the largest cut first, each cut one carrying its omission marker, within room tokens in all; NULL if not even the markers fit';

CREATE FUNCTION ctxwin._contents_least(contents text[], encoding text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ctxwin_contents_least'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._contents_least(text[], text) IS
'The fewest tokens _fit_contents can cut the contents to: each at most to its omission marker alone';


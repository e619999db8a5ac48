-- The counting functions are IMMUTABLE, so that a token count can define an
-- index expression or a stored generated column.  Their encoding argument
-- names an encoding or a model ctxwin ships (a built-in row of
-- ctxwin.models), both known to the library without reading a table
-- (src/tokenizer/tokenizer.c); a model a user adds to ctxwin.models is counted in the
-- encoding model_encoding(model) reads from its row.  A user's row that
-- replaces a built-in one changes what the session functions count with,
-- not what these do: they keep the model's published encoding.
CREATE FUNCTION ctxwin.count_tokens(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tokens'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_tokens(text, text) IS
'Number of tokens of a text: exact with tiktoken''s encode_ordinary for cl100k_base and o200k_base; estimates for chars4 (characters / 4) and chars3.5 (characters / 3.5, rounded up); a model ctxwin ships names its published encoding (for a model added to ctxwin.models, pass model_encoding(model))';

CREATE FUNCTION ctxwin.tokenize(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int[]
AS 'MODULE_PATHNAME', 'ctxwin_tokenize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.tokenize(text, text) IS
'Token ids of a text, as tiktoken''s encode_ordinary gives them (special-token text is ordinary text)';

CREATE FUNCTION ctxwin.detokenize(ids int[], encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_detokenize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.detokenize(int[], text) IS
'Text of a sequence of token ids; the inverse of tokenize';

-- The encoding of a model of ctxwin.models, read from its row as the
-- caller: STABLE, the way to count for a model the library does not know,
-- count_tokens(t, model_encoding('my-model')).
CREATE FUNCTION ctxwin.model_encoding(model text)
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_model_encoding'
LANGUAGE C STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.model_encoding(text) IS
'Encoding a model is counted with, from its row of ctxwin.models (a model ctxwin ships whose row is gone keeps its built-in encoding); an encoding''s name is its own';

CREATE FUNCTION ctxwin._builtin_models(OUT name text, OUT encoding text, OUT provider text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ctxwin_builtin_models'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._builtin_models() IS
'The models ctxwin ships, with the encoding and provider the counting functions take for them without reading ctxwin.models';

CREATE FUNCTION ctxwin.count_message_tokens(message jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_message_tokens'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_message_tokens(jsonb, text) IS
'Tokens of one chat message in OpenAI form: 4 + the tokens of role, content, name and tool_call_id + the tokens of the tool_calls JSON text; a content array of parts costs the text of its text parts (joined by a blank line) and its images by the rule of the model''s provider (an encoding: OpenAI''s at GPT-4o''s prices)';

-- What tools cost a request (src/window/tools.c): OpenAI's published formula for an
-- encoding or a model ctxwin ships of any provider but anthropic;
-- Anthropic's tool-use system prompt and the tools' JSON text for a built-in
-- model of provider anthropic.  (build_context takes the provider of the
-- session's model from its row, a user's model's too.)
CREATE FUNCTION ctxwin.count_tool_tokens(tools jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tool_tokens'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_tool_tokens(jsonb, text) IS
'Tokens that OpenAI function tools ([{"type": "function", "function": {...}}]) cost a request, in an encoding (OpenAI''s rule) or for a model ctxwin ships (the rule of its provider); build_context subtracts them from the budget';

CREATE FUNCTION ctxwin.message_tokens(role text, content text, name text, tool_call_id text,
                                      tool_calls jsonb, encoding text)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_message_tokens'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.message_tokens(text, text, text, text, jsonb, text) IS
'Tokens of one chat message given as fields (NULL: absent); equal to count_message_tokens of the same message as JSON';

CREATE FUNCTION ctxwin.truncate_middle(t text, max_tokens int, encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_truncate_middle'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

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


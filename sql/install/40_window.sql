------------------------------------------------------------------------------
-- The window
------------------------------------------------------------------------------

-- One message in OpenAI form, absent fields left out.
CREATE FUNCTION ctxwin._message_json(role text, content text, name text, tool_call_id text,
                                     tool_calls jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_message_json'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._message_json(text, text, text, text, jsonb) IS
'A message as an OpenAI chat message object, without the fields it does not have';

-- The window is made in C (src/window.c: the walk, the packing and the
-- middle cut; src/format.c: the two output formats).  Both run as the
-- caller: privileges and row-level security apply to what they read.

CREATE FUNCTION ctxwin._window(p_session uuid, p_budget int)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_window'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._window(uuid, int) IS
'The messages build_context returns for a session and budget, with their token total and what was dropped or cut';

CREATE FUNCTION ctxwin.build_context(session uuid, budget int DEFAULT NULL, format text DEFAULT 'openai')
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_build_context'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.build_context(uuid, int, text) IS
'The messages to send to the LLM: system prompt, summary and the newest messages within the budget (default: context window less response reserve); openai: an array of chat messages; anthropic: {"system", "messages"}. Never writes.';


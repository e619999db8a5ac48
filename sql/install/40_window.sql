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

-- The window is made in C (src/window/window.c: the walk, the packing and the
-- middle cut; src/window/format.c: the two output formats).  Both run as the
-- caller: privileges and row-level security apply to what they read.

CREATE FUNCTION ctxwin._window(p_session uuid, p_budget int, p_tools jsonb DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_window'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._window(uuid, int, jsonb) IS
'The messages build_context returns for a session, budget and tools, with their token total (tools included) and what was dropped or cut';

CREATE FUNCTION ctxwin.build_context(session uuid, budget int DEFAULT NULL, format text DEFAULT 'openai',
                                     tools jsonb DEFAULT NULL, cache boolean DEFAULT true)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_build_context'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.build_context(uuid, int, text, jsonb, boolean) IS
'The messages to send to the LLM: system prompt, summary and the newest messages within the budget (default: context window less response reserve) less what the tools sent with them cost; openai: an array of chat messages; anthropic: {"system", "messages"}, with prompt-cache breakpoints unless cache is false. Never writes.';

-- The whole request body (src/window/request.c), the window built as build_context
-- builds it; with recall, the tools have ctxwin's conversation_search too
-- (sql/install/86_recall.sql).
CREATE FUNCTION ctxwin.build_request(session uuid, budget int DEFAULT NULL, format text DEFAULT 'openai',
                                     tools jsonb DEFAULT NULL, cache boolean DEFAULT true,
                                     recall boolean DEFAULT false)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_build_request'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.build_request(uuid, int, text, jsonb, boolean, boolean) IS
'The request body to POST as it is: openai: {"model", "messages", "max_completion_tokens" or "max_tokens", "tools", "prompt_cache_key"}; anthropic: {"model", "system", "messages", "max_tokens", "tools"}, with prompt-cache breakpoints; the window is build_context''s; with recall, the tools end with conversation_search (recall_tool()), counted in the budget as the others. Never writes.';

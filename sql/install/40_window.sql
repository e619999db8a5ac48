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

-- One stored message whole, as the window's placeholders of cleared tool
-- results point to it: ctxwin.message(session, id).  Read as the caller
-- (privileges and row-level security apply).  content_parts, where the
-- table has that column, is read from the row as jsonb, so the function
-- does not depend on it.
CREATE FUNCTION ctxwin.message(session uuid, id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    result jsonb;
BEGIN
    IF message.session IS NULL THEN
        RAISE EXCEPTION 'session id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF message.id IS NULL THEN
        RAISE EXCEPTION 'message id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT ctxwin._message_json(m.role, m.content, m.name, m.tool_call_id, m.tool_calls)
           || jsonb_build_object('id', m.id, 'created_at', m.created_at)
           || CASE WHEN coalesce(to_jsonb(m) -> 'content_parts', 'null') = 'null' THEN '{}'
                   ELSE jsonb_build_object('content_parts', to_jsonb(m) -> 'content_parts') END
           || CASE WHEN m.retracted_at IS NULL THEN '{}'
                   ELSE jsonb_build_object('retracted_at', m.retracted_at) END
    INTO result
    FROM ctxwin.messages m
    WHERE m.session_id = message.session AND m.id = message.id;
    IF result IS NULL THEN
        IF NOT EXISTS (SELECT FROM ctxwin.sessions s WHERE s.id = message.session) THEN
            RAISE EXCEPTION 'session % does not exist', message.session USING ERRCODE = 'no_data_found';
        END IF;
        RAISE EXCEPTION 'message % of session % does not exist', message.id, message.session
            USING ERRCODE = 'no_data_found',
                  HINT = 'Message ids run from 1 to the session''s message_count.';
    END IF;
    RETURN result;
END $$;

COMMENT ON FUNCTION ctxwin.message(uuid, bigint) IS
'One stored message whole, as an OpenAI chat message object with its id and created_at (and retracted_at, if it was retracted): what a cleared tool result in a window stands for';

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

-- The window with the stored rows it shows (src/window/window.c and
-- format.c): build_context's result and, from the same walk, the ids,
-- client keys and roles of the messages in it, and the session's summary
-- fields, so a client needs no second query to know what the model sees.
CREATE FUNCTION ctxwin.build_window(session uuid, budget int DEFAULT NULL, format text DEFAULT 'openai',
                                    tools jsonb DEFAULT NULL, cache boolean DEFAULT true)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_build_window'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.build_window(uuid, int, text, jsonb, boolean) IS
'build_context''s window with what it shows: {"context": build_context''s result for the same arguments, "messages": [{"id", "client_key", "role"}, ...] (the stored rows in the window, oldest first, cleared or cut ones included), "summary", "summary_version", "summary_through_id" (null: none), "tokens"}. Never writes.';

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
'The request body to POST as it is: openai: {"model", "messages", "max_completion_tokens" or "max_tokens", "tools", "prompt_cache_key"}; anthropic: {"model", "system", "messages", "max_tokens", "tools"}, with prompt-cache breakpoints; responses: {"model", "input", "max_output_tokens", "tools", "prompt_cache_key"}; gemini: {"contents", "systemInstruction", "tools", "generationConfig"} (the model goes into the URL); the window is build_context''s; with recall, the tools end with conversation_search (recall_tool()), counted in the budget as the others. Never writes.';

-- build_request's body with the rows its window shows, as build_window
-- returns build_context's: for append_and_build (sql/install/85_clients.sql).
CREATE FUNCTION ctxwin._request_window(session uuid, budget int, format text, tools jsonb, cache boolean,
                                       recall boolean)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_request_window'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._request_window(uuid, int, text, jsonb, boolean, boolean) IS
'build_request''s body with the rows its window shows: {"request", "messages", "summary", "summary_version", "summary_through_id", "tokens"}, as build_window returns build_context''s';

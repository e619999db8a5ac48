-- pg_temp.add(session, role, content, tool_calls, tool_call_id): one
-- message appended, for the suites that build conversations row by row
-- (\ir lib/add.sql after CREATE EXTENSION).
CREATE FUNCTION pg_temp.add(s uuid, r text, c text, calls jsonb DEFAULT NULL, call_id text DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id)
    VALUES (s, r, c, calls, call_id) $$;

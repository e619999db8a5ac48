-- What the client packages (clients/python, clients/node) call, and any
-- application may: messages appended at most once per client key, and a
-- chat turn (append, then the window or the request body) in one call.

/*
 * The session with an id, created when missing (profile NULL: 'default',
 * metadata NULL: '{}'); an existing one is returned as it is stored, its
 * settings left alone.  So a client's first write to a session it names
 * itself is one statement, in the caller's transaction or not:
 *   SELECT ctxwin.append_messages((ctxwin.ensure_session($1)).id, $2, $3)
 * Two transactions that create the same id at once: INSERT ... ON CONFLICT
 * DO NOTHING makes the second wait for the first, and under READ COMMITTED
 * its next statement sees the row once the first commits; nothing is
 * raised or logged (REPEATABLE READ raises serialization_failure there, as
 * any write that meets a concurrent one does).  A session the caller may
 * not see (row-level security) is an error, never a second row.
 * SECURITY INVOKER: the caller's privileges and policies apply.
 */
CREATE FUNCTION ctxwin.ensure_session(id uuid, profile text DEFAULT NULL, system_prompt text DEFAULT NULL,
                                      metadata jsonb DEFAULT NULL)
RETURNS ctxwin.sessions
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    s ctxwin.sessions;
BEGIN
    IF ensure_session.id IS NULL THEN
        RAISE EXCEPTION 'session id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- twice at most: the second round sees a session that a transaction
    -- created and committed while the first round's INSERT waited for it
    FOR attempt IN 1 .. 2 LOOP
        SELECT * INTO s FROM ctxwin.sessions x WHERE x.id = ensure_session.id;
        IF FOUND THEN
            RETURN s;
        END IF;
        INSERT INTO ctxwin.sessions (id, profile, system_prompt, metadata)
        VALUES (ensure_session.id, coalesce(ensure_session.profile, 'default'), ensure_session.system_prompt,
                coalesce(ensure_session.metadata, '{}'))
        ON CONFLICT (id) DO NOTHING
        RETURNING * INTO s;
        IF FOUND THEN
            RETURN s;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'session % exists but is not visible to role %', ensure_session.id, current_user
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = 'Row-level security of ctxwin.sessions hides it from this role.',
              HINT = 'Use a new session id, or connect as a role that may see this session.';
END $$;

COMMENT ON FUNCTION ctxwin.ensure_session(uuid, text, text, jsonb) IS
'The session with this id, created (profile NULL: default, metadata NULL: {}) when missing; an existing one is returned unchanged. Safe when two transactions create the same id at once, and raises nothing on the normal path: a client''s first write is SELECT ctxwin.append_messages((ctxwin.ensure_session(id)).id, ...)';

/*
 * Appends chat messages (a JSON array in OpenAI's chat shape: role,
 * content, name, tool_call_id, tool_calls, metadata; a content that is an
 * array of parts is stored in content_parts) to a session, each
 * with its client key (keys[i], NULL: none), and returns their ids in
 * order.  A message whose key the session already has is not stored again:
 * the stored one's id is returned, so a request retried after a lost
 * answer never duplicates a message.  The session's row is locked first,
 * as an insert into the session locks it, so two appenders of one key
 * cannot both store it.  The insert trigger numbers and counts the
 * messages as any INSERT's.  SECURITY INVOKER: the caller's privileges and
 * row-level security apply.
 */
CREATE FUNCTION ctxwin.append_messages(session uuid, messages jsonb, keys text[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n int;
    ids bigint[] := '{}';
    m jsonb;
    k text;
    bad text;
    got bigint;
BEGIN
    IF session IS NULL THEN
        RAISE EXCEPTION 'session must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF messages IS NULL OR jsonb_typeof(messages) <> 'array' THEN
        RAISE EXCEPTION 'messages must be a JSON array of chat messages'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('It is %s.', coalesce(jsonb_typeof(messages), 'NULL')),
                  HINT = 'Pass [{"role": "user", "content": "..."}, ...].';
    END IF;
    n := jsonb_array_length(messages);
    IF keys IS NOT NULL AND coalesce(array_length(keys, 1), 0) <> n THEN
        RAISE EXCEPTION 'keys must have one element per message'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('There are %s messages and %s keys.', n, coalesce(array_length(keys, 1), 0)),
                  HINT = 'Give NULL for a message without a key, or no keys at all.';
    END IF;
    FOR i IN 1 .. n LOOP
        m := messages -> (i - 1);
        IF jsonb_typeof(m) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'message % is not a JSON object', i
                USING ERRCODE = 'invalid_parameter_value', DETAIL = 'Nothing was appended.';
        END IF;
        SELECT string_agg(x, ', ' ORDER BY x) INTO bad FROM jsonb_object_keys(m) x
        WHERE x NOT IN ('role', 'content', 'name', 'tool_call_id', 'tool_calls', 'metadata');
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'message % has keys ctxwin does not store: %', i, bad
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'A message has role, content, name, tool_call_id, tool_calls and metadata. Nothing was appended.',
                      HINT = 'Convert the message to OpenAI''s chat shape first, or keep the rest in metadata.';
        END IF;
        IF jsonb_typeof(m -> 'content') NOT IN ('string', 'array', 'null')
           OR jsonb_typeof(m -> 'name') NOT IN ('string', 'null')
           OR jsonb_typeof(m -> 'tool_call_id') NOT IN ('string', 'null')
           OR jsonb_typeof(m -> 'tool_calls') NOT IN ('array', 'null')
           OR jsonb_typeof(m -> 'metadata') NOT IN ('object', 'null') THEN
            RAISE EXCEPTION 'message % has a value of the wrong type', i
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'content is a string or an array of content parts, name and tool_call_id are strings, tool_calls an array and metadata an object, or null. Nothing was appended.';
        END IF;
    END LOOP;

    PERFORM FROM ctxwin.sessions s WHERE s.id = session FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % does not exist', session
            USING ERRCODE = 'no_data_found',
                  HINT = 'Create it first: INSERT INTO ctxwin.sessions DEFAULT VALUES RETURNING id.';
    END IF;
    FOR i IN 1 .. n LOOP
        m := messages -> (i - 1);
        k := keys[i];
        got := NULL;
        IF k IS NOT NULL THEN
            SELECT x.id INTO got FROM ctxwin.messages x WHERE x.session_id = session AND x.client_key = k;
        END IF;
        IF got IS NULL THEN
            INSERT INTO ctxwin.messages (session_id, role, content, name, tool_call_id, tool_calls, metadata,
                                         client_key, content_parts)
            VALUES (session, m ->> 'role',
                    CASE WHEN jsonb_typeof(m -> 'content') = 'string' THEN m ->> 'content' END,
                    m ->> 'name', m ->> 'tool_call_id',
                    nullif(m -> 'tool_calls', 'null'::jsonb), coalesce(nullif(m -> 'metadata', 'null'::jsonb), '{}'),
                    k, CASE WHEN jsonb_typeof(m -> 'content') = 'array' THEN m -> 'content' END)
            RETURNING id INTO got;
        END IF;
        ids := ids || got;
    END LOOP;
    RETURN ids;
END $$;

COMMENT ON FUNCTION ctxwin.append_messages(uuid, jsonb, text[]) IS
'Appends chat messages (OpenAI''s shape; a content array is stored as content parts) to a session, each stored once per client key; returns their ids in order (a key already stored: its message''s id)';

/*
 * One chat turn in one call: append_messages, then the window
 * (build_context) or, with request, the whole request body
 * (build_request, with recall: its tools end with conversation_search)
 * of the session with them.  Returns {"ids": [...], "context": ...,
 * "messages": [...]} or {"ids": [...], "request": ..., "messages": [...]}:
 * messages are the stored rows the window shows, as build_window gives
 * them (one walk).
 */
CREATE FUNCTION ctxwin.append_and_build(session uuid, messages jsonb, keys text[] DEFAULT NULL,
                                        budget int DEFAULT NULL, format text DEFAULT 'openai',
                                        tools jsonb DEFAULT NULL, cache boolean DEFAULT true,
                                        request boolean DEFAULT false, recall boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ids bigint[];
    w jsonb;
BEGIN
    IF request IS NULL THEN
        RAISE EXCEPTION 'request must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF recall IS NULL THEN
        RAISE EXCEPTION 'recall must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF recall AND NOT request THEN
        RAISE EXCEPTION 'recall needs request'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Only a request body carries the conversation_search tool.',
                  HINT = 'Pass request => true, or add ctxwin.recall_tool() to tools for the window.';
    END IF;
    ids := ctxwin.append_messages(session, messages, keys);
    IF request THEN
        w := ctxwin._request_window(session, budget, format, tools, cache, recall);
        RETURN jsonb_build_object('ids', to_jsonb(ids), 'request', w -> 'request', 'messages', w -> 'messages');
    END IF;
    w := ctxwin.build_window(session, budget, format, tools, cache);
    RETURN jsonb_build_object('ids', to_jsonb(ids), 'context', w -> 'context', 'messages', w -> 'messages');
END $$;

COMMENT ON FUNCTION ctxwin.append_and_build(uuid, jsonb, text[], int, text, jsonb, boolean, boolean, boolean) IS
'One chat turn: append_messages, then build_context (or, with request, build_request, with recall its tools ending with conversation_search) of the session; {"ids": [...], "context" or "request": ..., "messages": [{"id", "client_key", "role"}, ...] (the stored rows the window shows)}';

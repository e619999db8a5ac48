------------------------------------------------------------------------------
-- The window
------------------------------------------------------------------------------

-- One message in OpenAI form, absent fields left out.
CREATE FUNCTION ctxwin._message_json(role text, content text, name text, tool_call_id text,
                                     tool_calls jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN jsonb_build_object('role', role)
    || CASE WHEN content IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('content', content) END
    || CASE WHEN name IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('name', name) END
    || CASE WHEN tool_calls IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('tool_calls', tool_calls) END
    || CASE WHEN tool_call_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('tool_call_id', tool_call_id) END;

COMMENT ON FUNCTION ctxwin._message_json(text, text, text, text, jsonb) IS
'A message as an OpenAI chat message object, without the fields it does not have';

CREATE FUNCTION ctxwin._window_walk(session uuid, after_id bigint, room int, encoding text,
                                   OUT first_id bigint, OUT cut_from bigint, OUT tokens int,
                                   OUT messages jsonb)
AS 'MODULE_PATHNAME', 'ctxwin_window_walk'
LANGUAGE C STABLE STRICT
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._window_walk(uuid, bigint, int, text) IS
'Packs the newest whole units of messages after after_id into room tokens, newest first; reports where a cut is needed';

/*
 * The window of a session within a budget: the system messages, then the
 * newest unsummarized messages that fit, oldest first, as OpenAI messages,
 * with what context_status reports.  Walks the messages newest first and
 * stops at the first unit (a message, or an assistant message with its tool
 * results) that does not fit, so it reads O(window) rows, not O(history).
 * Only the newest unit is ever cut (largest contents first); older units that
 * do not fit are dropped whole.  Never writes.
 */
CREATE FUNCTION ctxwin._window(p_session uuid, p_budget int)
RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s ctxwin.sessions;
    st ctxwin.session_settings;
    enc text;
    b int;
    sys jsonb;
    used int;
    room int;
    r record;
    lo bigint;
    cut_from bigint;
    msgs jsonb := '[]';
    n_in bigint := 0;
    -- cutting the newest unit
    u_role text[];
    u_content text[];
    u_name text[];
    u_call_id text[];
    u_calls jsonb[];
    u_ct int[];
    u_content_all text[];
    fixed int;
    total int;
BEGIN
    PERFORM ctxwin._session_must_exist(p_session);
    SELECT * INTO s FROM ctxwin.sessions WHERE id = p_session;
    SELECT * INTO st FROM ctxwin.session_settings WHERE session_id = p_session;
    enc := st.encoding;
    b := coalesce(p_budget, st.context_window - st.response_reserve);
    IF b <= 0 THEN
        IF p_budget IS NULL THEN
            RAISE EXCEPTION 'token budget must be greater than zero'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('The context window (%s) less the response reserve (%s) of profile "%s" leaves none.',
                                      st.context_window, st.response_reserve, st.profile);
        END IF;
        RAISE EXCEPTION 'token budget must be greater than zero'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    sys := ctxwin.system_messages(s.system_prompt, s.conversation_summary, st.summary_placement);
    used := 3 + ctxwin.messages_tokens(sys, enc);
    IF used > b THEN
        RAISE EXCEPTION 'token budget % is too small for the system prompt and summary (% tokens)', b, used
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give a larger budget, or shorten the system prompt.';
    END IF;
    room := b - used;

    SELECT * INTO r FROM ctxwin._window_walk(p_session, s.summary_through_id, room, enc);
    lo := r.first_id;
    cut_from := r.cut_from;
    IF cut_from IS NULL THEN
        room := room - r.tokens;
        msgs := r.messages;
    END IF;

    IF cut_from IS NOT NULL THEN
        -- The newest unit alone is over the room left: shorten its largest
        -- contents, in the middle, until it fits.
        SELECT array_agg(m.role ORDER BY m.id), array_agg(m.content ORDER BY m.id),
               array_agg(m.name ORDER BY m.id), array_agg(m.tool_call_id ORDER BY m.id),
               array_agg(m.tool_calls ORDER BY m.id),
               array_agg(coalesce(ctxwin.count_tokens(m.content, enc), 0) ORDER BY m.id),
               sum(ctxwin.message_tokens(m.role, m.content, m.name, m.tool_call_id, m.tool_calls, enc))
        INTO u_role, u_content, u_name, u_call_id, u_calls, u_ct, total
        FROM ctxwin.messages m
        WHERE m.session_id = p_session AND m.id >= cut_from;
        u_content_all := u_content;
        -- Cut the largest contents first, each cut one with its marker
        -- (ctxwin._fit_contents); no cut at all if not even the markers fit.
        fixed := total - (SELECT sum(x) FROM unnest(u_ct) x);
        IF room - fixed >= 0 THEN
            u_content := ctxwin._fit_contents(u_content, room - fixed, enc);
        END IF;
        IF room - fixed < 0 OR u_content IS NULL THEN
            RAISE EXCEPTION 'token budget % is too small for the newest message', b
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Even with its contents cut to their omission markers it needs %s tokens besides the %s of the system prompt and summary.',
                                      fixed + ctxwin._contents_least(u_content_all, enc), used),
                      HINT = 'Give a larger budget.';
        END IF;
        total := fixed + (SELECT coalesce(sum(ctxwin.count_tokens(x, enc)), 0) FROM unnest(u_content) x);
        room := room - total;
        lo := cut_from;
        SELECT jsonb_agg(ctxwin._message_json(u_role[g.ix], u_content[g.ix], u_name[g.ix],
                                              u_call_id[g.ix], u_calls[g.ix]) ORDER BY g.ix)
        INTO msgs
        FROM generate_subscripts(u_role, 1) AS g(ix);
    END IF;
    IF lo IS NOT NULL THEN
        n_in := s.message_count - lo + 1;
    END IF;

    RETURN jsonb_build_object(
        'messages', sys || msgs,
        'tokens', b - room,
        'budget', b,
        'encoding', enc,
        'first_id', lo,
        'window_messages', n_in,
        'dropped_messages', s.message_count - s.summary_through_id - n_in,
        'cut', cut_from IS NOT NULL);
END $$;

COMMENT ON FUNCTION ctxwin._window(uuid, int) IS
'The messages build_context returns for a session and budget, with their token total and what was dropped or cut';

-- A tool call's arguments as the JSON object Anthropic's tool_use input wants.
CREATE FUNCTION ctxwin._arguments_object(arguments text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    j jsonb;
BEGIN
    BEGIN
        j := arguments::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        j := NULL;
    END;
    IF jsonb_typeof(j) = 'object' THEN
        RETURN j;
    END IF;
    RETURN jsonb_build_object('arguments', coalesce(j, to_jsonb(arguments)));
END $$;

COMMENT ON FUNCTION ctxwin._arguments_object(text) IS
'OpenAI tool call arguments (a JSON text) as a JSON object, wrapped when they are not one';

/*
 * OpenAI messages -> Anthropic Messages API body: system messages join the
 * top-level "system"; assistant tool calls become tool_use blocks and tool
 * results tool_result blocks in user turns; consecutive turns of one role
 * merge into one.
 */
CREATE FUNCTION ctxwin._to_anthropic(msgs jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m jsonb;
    c jsonb;
    sys text[] := '{}';
    turns jsonb := '[]';
    role text;
    blocks jsonb;
    last_role text;
    n int;
BEGIN
    FOR m IN SELECT * FROM jsonb_array_elements(msgs) LOOP
        IF m ->> 'role' = 'system' THEN
            sys := sys || (m ->> 'content');
            CONTINUE;
        ELSIF m ->> 'role' = 'tool' THEN
            role := 'user';
            blocks := jsonb_build_array(jsonb_build_object(
                'type', 'tool_result', 'tool_use_id', m ->> 'tool_call_id',
                'content', coalesce(m ->> 'content', '')));
        ELSE
            role := m ->> 'role';
            blocks := '[]';
            IF coalesce(m ->> 'content', '') <> '' THEN
                blocks := jsonb_build_array(jsonb_build_object('type', 'text', 'text', m ->> 'content'));
            END IF;
            FOR c IN SELECT * FROM jsonb_array_elements(coalesce(m -> 'tool_calls', '[]')) LOOP
                blocks := blocks || jsonb_build_array(jsonb_build_object(
                    'type', 'tool_use', 'id', c ->> 'id', 'name', c -> 'function' ->> 'name',
                    'input', ctxwin._arguments_object(c -> 'function' ->> 'arguments')));
            END LOOP;
            CONTINUE WHEN blocks = '[]';
        END IF;
        n := jsonb_array_length(turns);
        IF role = last_role THEN
            turns := jsonb_set(turns, ARRAY[(n - 1)::text, 'content'], (turns -> (n - 1) -> 'content') || blocks);
        ELSE
            turns := turns || jsonb_build_array(jsonb_build_object('role', role, 'content', blocks));
        END IF;
        last_role := role;
    END LOOP;
    IF cardinality(sys) > 0 THEN
        RETURN jsonb_build_object('system', array_to_string(sys, E'\n\n'), 'messages', turns);
    END IF;
    RETURN jsonb_build_object('messages', turns);
END $$;

COMMENT ON FUNCTION ctxwin._to_anthropic(jsonb) IS
'An OpenAI message list as an Anthropic Messages API body (system, messages)';

CREATE FUNCTION ctxwin.build_context(session uuid, budget int DEFAULT NULL, format text DEFAULT 'openai')
RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    w jsonb;
BEGIN
    IF format IS NULL OR format NOT IN ('openai', 'anthropic') THEN
        RAISE EXCEPTION 'unrecognized format "%"', coalesce(format, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Valid formats are openai and anthropic.';
    END IF;
    w := ctxwin._window(session, budget);
    IF format = 'anthropic' THEN
        RETURN ctxwin._to_anthropic(w -> 'messages');
    END IF;
    RETURN w -> 'messages';
END $$;

COMMENT ON FUNCTION ctxwin.build_context(uuid, int, text) IS
'The messages to send to the LLM: system prompt, summary and the newest messages within the budget (default: context window less response reserve); openai: an array of chat messages; anthropic: {"system", "messages"}. Never writes.';


-- ctxwin 0.1.0 to 0.2.0.
\echo Use "ALTER EXTENSION ctxwin UPDATE TO '0.2.0'" to load this file. \quit

-- Runs with search_path = pg_catalog, pg_temp (the control file's schema).
-- Every update script starts by asking the library this backend runs for
-- its version: a server that preloads ctxwin keeps the library it started
-- with, and a schema newer than that library would meet code that does not
-- know it.  ctxwin's 0.1.0 library has neither function: with it loaded,
-- the first CREATE FUNCTION below fails and nothing changes.

CREATE FUNCTION ctxwin._library_version()
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_library_version'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._library_version() IS
'Version of the ctxwin library this backend runs; it can differ from the extension''s version (pg_extension.extversion) until ALTER EXTENSION ctxwin UPDATE, or until a server that preloads ctxwin restarts';

CREATE FUNCTION ctxwin._require_library(version text)
RETURNS void
AS 'MODULE_PATHNAME', 'ctxwin_require_library'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._require_library(text) IS
'Raises an error unless the ctxwin library this backend runs is the given version or newer; each update script calls it first';

SELECT ctxwin._require_library('0.2.0');

-- The C functions carry the ctxwin_ prefix (the library's symbols are
-- global in the server); the old names stay in the library for databases
-- still at 0.1.0 (src/symbols_0_1.c).
CREATE OR REPLACE FUNCTION ctxwin.count_tokens(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.tokenize(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int[]
AS 'MODULE_PATHNAME', 'ctxwin_tokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.detokenize(ids int[], encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_detokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.count_message_tokens(message jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_message_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.message_tokens(role text, content text, name text, tool_call_id text,
                                      tool_calls jsonb, encoding text)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_message_tokens'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.truncate_middle(t text, max_tokens int, encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_truncate_middle'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._fit_contents(contents text[], room int, encoding text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'ctxwin_fit_contents'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._contents_least(contents text[], encoding text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ctxwin_contents_least'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._messages_insert() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_messages_insert'
LANGUAGE C;

CREATE OR REPLACE FUNCTION ctxwin._sessions_guard() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_sessions_guard'
LANGUAGE C;

CREATE OR REPLACE FUNCTION ctxwin._llm_post(body jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_post'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION ctxwin._compaction_failed(p_session uuid, p_error text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ctxwin_compaction_failed'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION ctxwin._compaction_settle(p_session uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'ctxwin_compaction_settle'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION ctxwin._session_claimed(p_session uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_session_claimed'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

-- The window and the status are C functions (src/window.c, src/format.c,
-- src/status.c); the PL/pgSQL walk, packing, cut and Anthropic conversion
-- they replace are gone.
CREATE OR REPLACE FUNCTION ctxwin._window(p_session uuid, p_budget int)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_window'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION ctxwin.build_context(session uuid, budget int DEFAULT NULL, format text DEFAULT 'openai')
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_build_context'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION ctxwin.context_status(
    session uuid,
    OUT session_id uuid,
    OUT profile text,
    OUT model text,
    OUT encoding text,
    OUT context_window int,
    OUT budget int,
    OUT message_count bigint,
    OUT summary_through_id bigint,
    OUT messages_since_summary bigint,
    OUT tokens_since_summary bigint,
    OUT max_messages_before_summary int,
    OUT messages_pct numeric,
    OUT max_tokens_before_summary int,
    OUT tokens_pct numeric,
    OUT trigger_ratio real,
    OUT context_tokens bigint,
    OUT context_pct numeric,
    OUT ratio_pct numeric,
    OUT will_trigger boolean,
    OUT triggers_firing text[],
    OUT summary_version int,
    OUT summary_tokens int,
    OUT summary_updated_at timestamptz,
    OUT summary_age interval,
    OUT window_messages bigint,
    OUT window_tokens int,
    OUT dropped_messages bigint,
    OUT queued_at timestamptz,
    OUT compaction_failures int,
    OUT last_error text,
    OUT last_error_at timestamptz,
    OUT note text)
AS 'MODULE_PATHNAME', 'ctxwin_context_status'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

DROP FUNCTION ctxwin._window_walk(uuid, bigint, int, text);
DROP FUNCTION ctxwin._to_anthropic(jsonb);
DROP FUNCTION ctxwin._arguments_object(text);

-- The summary trigger rule is one C function (src/rules.c), shared by the
-- insert trigger, context_status and this SQL face.
CREATE OR REPLACE FUNCTION ctxwin._should_queue(messages bigint, tokens bigint, prompt_tokens bigint,
                                                max_messages int, max_tokens int, ratio real,
                                                context_window int, min_recent int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_should_queue'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.messages_after(session uuid, after_id bigint DEFAULT NULL)
RETURNS SETOF ctxwin.messages
AS 'MODULE_PATHNAME', 'ctxwin_messages_after'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

-- The system messages and a message as OpenAI JSON are made by the C code
-- build_context uses (src/window.c, src/format.c), written once.
CREATE OR REPLACE FUNCTION ctxwin.system_messages(system_prompt text, summary text, placement text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_system_messages'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._message_json(role text, content text, name text, tool_call_id text,
                                                tool_calls jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_message_json'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- _bar is _progress_bar, a name that says what it draws; context_report
-- calls it by its new name.
CREATE FUNCTION ctxwin._progress_bar(pct numeric, width int DEFAULT 24)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN '[' || repeat('#', least(greatest(round(coalesce(pct, 0::numeric) * width::numeric / 100::numeric), 0), width)::int)
    || repeat('.', width - least(greatest(round(coalesce(pct, 0::numeric) * width::numeric / 100::numeric), 0), width)::int) || ']';

COMMENT ON FUNCTION ctxwin._progress_bar(numeric, int) IS 'A text progress bar for a percentage';

CREATE OR REPLACE FUNCTION ctxwin.context_report(session uuid)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    lines text[];
BEGIN
    SELECT * INTO c FROM ctxwin.context_status(session);
    lines := ARRAY[
        format('Session %s: profile %s, model %s (%s), window %s tokens',
               c.session_id, c.profile, c.model, c.encoding, to_char(c.context_window, 'FM999,999,999')),
        CASE WHEN c.trigger_ratio IS NULL
             THEN format('  context   %s %6s%%  %s of %s tokens; ratio trigger off',
                         ctxwin._progress_bar(c.context_pct), c.context_pct, to_char(c.context_tokens, 'FM999,999,999'),
                         to_char(c.context_window, 'FM999,999,999'))
             ELSE format('  context   %s %6s%%  %s of %s tokens; summary at %s%%',
                         ctxwin._progress_bar(c.context_pct), c.context_pct, to_char(c.context_tokens, 'FM999,999,999'),
                         to_char(c.context_window, 'FM999,999,999'), round(c.trigger_ratio::numeric * 100::numeric)) END,
        CASE WHEN c.max_messages_before_summary IS NULL THEN '  messages  trigger off'
             ELSE format('  messages  %s %6s%%  %s since the summary; summary at %s',
                         ctxwin._progress_bar(c.messages_pct), c.messages_pct, c.messages_since_summary,
                         c.max_messages_before_summary) END,
        CASE WHEN c.max_tokens_before_summary IS NULL THEN '  tokens    trigger off'
             ELSE format('  tokens    %s %6s%%  %s since the summary; summary at %s',
                         ctxwin._progress_bar(c.tokens_pct), c.tokens_pct, to_char(c.tokens_since_summary, 'FM999,999,999'),
                         to_char(c.max_tokens_before_summary, 'FM999,999,999')) END,
        CASE WHEN c.summary_version = 0 THEN '  summary   none yet'
             ELSE format('  summary   version %s, %s tokens, covers messages 1-%s, updated %s ago',
                         c.summary_version, c.summary_tokens, c.summary_through_id,
                         CASE WHEN c.summary_age < interval '1 minute' THEN extract(epoch FROM c.summary_age)::int || ' s'
                              WHEN c.summary_age < interval '1 hour' THEN extract(epoch FROM c.summary_age)::int / 60 || ' min'
                              WHEN c.summary_age < interval '2 days' THEN extract(epoch FROM c.summary_age)::int / 3600 || ' h'
                              ELSE extract(epoch FROM c.summary_age)::int / 86400 || ' days' END) END,
        format('  window    %s messages, %s tokens of a %s-token budget; %s dropped',
               coalesce(c.window_messages, 0), to_char(coalesce(c.window_tokens, 0), 'FM999,999,999'),
               to_char(c.budget, 'FM999,999,999'), coalesce(c.dropped_messages, 0)),
        format('  compaction %s%s',
               CASE WHEN c.will_trigger THEN 'due (' || array_to_string(c.triggers_firing, ', ') || ')'
                    ELSE 'not due' END,
               CASE WHEN c.queued_at IS NOT NULL THEN ', queued since ' || to_char(c.queued_at, 'YYYY-MM-DD HH24:MI:SS')
                    ELSE '' END),
        CASE WHEN c.last_error IS NOT NULL
             THEN format('  last error (%s failures): %s', c.compaction_failures, c.last_error) END,
        CASE WHEN c.note IS NOT NULL THEN '  note: ' || c.note END];
    RETURN array_to_string(lines, E'\n');
END $$;

DROP FUNCTION ctxwin._bar(numeric, int);

-- The summary plan and finish, summarize_session and compact in C
-- (src/summary.c, src/compact.c); the pieces without policy stay SQL.
CREATE OR REPLACE FUNCTION ctxwin._summary_plan(p_session uuid, p_force boolean, p_instructions text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_summary_plan'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION ctxwin._summary_finish(plan jsonb, answer jsonb)
RETURNS ctxwin.summaries
AS 'MODULE_PATHNAME', 'ctxwin_summary_finish'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION ctxwin.summarize_session(session uuid, force boolean DEFAULT false,
                                                    instructions text DEFAULT NULL)
RETURNS ctxwin.summaries
AS 'MODULE_PATHNAME', 'ctxwin_summarize_session'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION ctxwin.compact(max_sessions int DEFAULT 100)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_compact'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- The defaults of ctxwin.llm_max_retries and ctxwin.llm_model are the C
-- settings' own: these functions run only from the library's C code, which
-- defines the settings, so they no longer repeat the defaults.
CREATE OR REPLACE FUNCTION ctxwin._llm_summarize(plan jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sid uuid := (plan ->> 'session')::uuid;
    through bigint := (plan ->> 'through')::bigint;
    s record;
    req jsonb;
    body jsonb;
    r jsonb;
    status int;
    nxt jsonb;
    failures int := 0;
    rate_waits int := 0;
    requests int := 0;
    retries int := current_setting('ctxwin.llm_max_retries')::int;
    last_err text;
BEGIN
    IF sid IS NULL OR NOT ctxwin._caller_sees_session(sid) THEN
        RAISE EXCEPTION 'session % does not exist', coalesce(sid::text, 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    SELECT x.summary_through_id, x.message_count INTO s FROM ctxwin.sessions x
    WHERE x.id OPERATOR(pg_catalog.=) sid;
    IF (plan ->> 'after')::bigint IS DISTINCT FROM s.summary_through_id OR through IS NULL
       OR through <= s.summary_through_id OR through > s.message_count THEN
        RAISE EXCEPTION 'summary plan does not match session %', sid
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A plan covers messages after the session''s summary_through_id, up to its newest message.',
                  HINT = 'Summarize with ctxwin.summarize_session.';
    END IF;
    req := ctxwin._summary_request(sid, s.summary_through_id, through, left(plan ->> 'instructions', 2000));
    IF (req ->> 'through')::bigint IS DISTINCT FROM through THEN
        RAISE EXCEPTION 'summary plan does not match session %', sid
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The messages of the plan do not fit one summary request.',
                  HINT = 'Summarize with ctxwin.summarize_session.';
    END IF;
    body := ctxwin._llm_request(req ->> 'system_prompt', req ->> 'prompt', (req ->> 'answer_tokens')::int,
                                req ->> 'model');
    LOOP
        requests := requests + 1;
        BEGIN
            r := ctxwin._llm_post(body);
        EXCEPTION WHEN connection_failure THEN
            last_err := SQLERRM;
            r := NULL;
        END;
        status := (r ->> 'status')::int;
        IF status BETWEEN 200 AND 299 THEN
            RETURN r || jsonb_build_object('requests', requests);
        END IF;
        IF r IS NOT NULL THEN
            last_err := ctxwin._llm_error_text(r);
        END IF;
        nxt := ctxwin._llm_next_try(status, r ->> 'retry_after', failures, rate_waits, retries);
        IF (nxt ->> 'refused')::boolean THEN
            RAISE EXCEPTION 'LLM endpoint refused the summary request: %', last_err
                USING ERRCODE = 'external_routine_exception';
        END IF;
        IF NOT (nxt ->> 'retry')::boolean THEN
            RAISE EXCEPTION 'LLM request failed after % requests: %', requests, last_err
                USING ERRCODE = 'external_routine_exception';
        END IF;
        IF (nxt ->> 'charged')::boolean THEN
            failures := failures + 1;
        ELSE
            rate_waits := rate_waits + 1;
        END IF;
        PERFORM pg_sleep((nxt ->> 'wait')::float8);
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION ctxwin._summary_request(p_session uuid, p_after bigint, p_through bigint, p_instructions text)
RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s ctxwin.sessions;
    st ctxwin.session_settings;
    through bigint := p_through;
    strategy text;
    msgs jsonb;
    facts text[];
    facts_text text;
    room int;
    plan jsonb := '{}';
    sys text;
    prompt text;
    model text;
    summary_window int;
    summary_encoding text;
    previous text;
    fit jsonb;
BEGIN
    SELECT * INTO s FROM ctxwin.sessions x WHERE x.id OPERATOR(pg_catalog.=) p_session;
    SELECT * INTO st FROM ctxwin.session_settings x WHERE x.session_id OPERATOR(pg_catalog.=) p_session;
    strategy := coalesce(st.summary_strategy,
                         CASE WHEN current_setting('ctxwin.llm_provider', true) IN ('openai', 'anthropic')
                              THEN 'llm' ELSE 'extractive' END);
    -- the request must fit the summary model's window, which may be smaller
    -- than the session's (a model ctxwin.models does not know: the session's)
    model := coalesce(st.summary_model, current_setting('ctxwin.llm_model'));
    SELECT m.context_window, m.encoding INTO summary_window, summary_encoding
    FROM ctxwin.models m WHERE m.name OPERATOR(pg_catalog.=) model;
    summary_window := coalesce(summary_window, st.context_window);
    summary_encoding := coalesce(summary_encoding, st.encoding);
    previous := coalesce(nullif(regexp_replace(coalesce(s.conversation_summary, ''), '^Facts: [^\n]*\n*', ''), ''), '(none)');
    sys := coalesce(st.summary_prompt, ctxwin.default_summary_prompt())
           || format(' Write at most %s tokens.', st.max_summary_tokens)
           || coalesce(' Focus: ' || p_instructions, '');
    -- 2 messages of 4 tokens of overhead each, 3 for the list, and a margin
    fit := ctxwin._summary_fit(p_session, p_after, through,
                               summary_window - st.max_summary_tokens - 32
                               - ctxwin.count_tokens(sys, summary_encoding)
                               - ctxwin.count_tokens('Previous summary:' || E'\n' || previous || E'\n\nNew messages:\n',
                                                     summary_encoding),
                               summary_encoding);
    through := (fit ->> 'through')::bigint;
    plan := plan || jsonb_build_object('through', through, 'transcript_cut', (fit ->> 'cut')::boolean);
    msgs := ctxwin._summary_messages(p_session, p_after, through);
    IF strategy = 'hybrid' THEN
        -- facts found without the LLM, kept verbatim, take up to a quarter
        facts := ctxwin.extract_facts(coalesce(substring(s.conversation_summary FROM '^Facts: ([^\n]*)'), '')
                                      || E'\n' || ctxwin.transcript(msgs, st.encoding));
        facts_text := 'Facts: ' || array_to_string(facts, '; ');
        WHILE cardinality(facts) > 0 AND ctxwin.count_tokens(facts_text, st.encoding) > st.max_summary_tokens / 4 LOOP
            CHECK FOR INTERRUPTS;
            facts := facts[1:cardinality(facts) - 1];
            facts_text := 'Facts: ' || array_to_string(facts, '; ');
        END LOOP;
        IF cardinality(facts) = 0 THEN
            facts_text := NULL;
        END IF;
    END IF;
    room := st.max_summary_tokens - coalesce(ctxwin.count_tokens(facts_text, st.encoding) + 2, 0);
    sys := coalesce(st.summary_prompt, ctxwin.default_summary_prompt())
           || format(' Write at most %s tokens.', room)
           || coalesce(' Focus: ' || p_instructions, '');
    prompt := 'Previous summary:' || E'\n' || previous || E'\n\nNew messages:\n' || (fit ->> 'transcript');
    RETURN plan || jsonb_build_object('facts', facts_text, 'answer_tokens', room, 'system_prompt', sys,
                                      'prompt', prompt, 'model', model);
END $$;

-- Whether a session argument names a session is checked in C
-- (src/session.c), by every function that takes one.
DROP FUNCTION ctxwin._session_must_exist(uuid);

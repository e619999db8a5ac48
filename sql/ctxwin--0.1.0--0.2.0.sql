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

-- Whether a trigger fires for a session now is counted by context_status's
-- C code (src/status.c).
CREATE OR REPLACE FUNCTION ctxwin._session_due(p_session uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_session_due'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

-- Where a summary may end (never inside a tool group) is one rule,
-- SummaryMayEnd in src/rules.c, used by the sessions guard, the summary's
-- cut and its fit to the request (written three times before).
CREATE FUNCTION ctxwin._summary_may_end(has_tool_calls boolean, next_role text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_summary_may_end'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._summary_may_end(boolean, text) IS
'Whether a summary may end at a message with or without tool calls followed by a message of next_role (NULL: none)';

CREATE OR REPLACE FUNCTION ctxwin._sessions_maintain() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    st record;
    enc text;
    nxt record;
    cur record;
BEGIN
    SELECT p.*, m.encoding, coalesce(p.context_window, m.context_window) AS window INTO st
    FROM ctxwin.profiles p JOIN ctxwin.models m ON m.name = p.model
    WHERE p.name = NEW.profile;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'profile "%" does not exist', NEW.profile
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Profiles are rows of ctxwin.profiles; ''default'' always exists.';
    END IF;
    enc := st.encoding;

    IF TG_OP = 'UPDATE' AND NEW.summary_through_id IS DISTINCT FROM OLD.summary_through_id THEN
        IF NEW.summary_through_id < OLD.summary_through_id THEN
            RAISE EXCEPTION 'summary_through_id cannot move back from % to %',
                OLD.summary_through_id, NEW.summary_through_id
                USING ERRCODE = 'check_violation',
                      DETAIL = 'A summary covers every message up to summary_through_id; messages once summarized stay summarized.';
        END IF;
        IF NEW.summary_through_id > NEW.message_count THEN
            RAISE EXCEPTION 'summary_through_id % is past the newest message (%)',
                NEW.summary_through_id, NEW.message_count
                USING ERRCODE = 'check_violation';
        END IF;
        -- never inside a tool group (_summary_may_end)
        SELECT m.role INTO nxt FROM ctxwin.messages m
        WHERE m.session_id = NEW.id AND m.id = NEW.summary_through_id + 1;
        SELECT m.role, m.tool_calls IS NOT NULL AS has_calls INTO cur FROM ctxwin.messages m
        WHERE m.session_id = NEW.id AND m.id = NEW.summary_through_id;
        IF NOT ctxwin._summary_may_end(cur.has_calls, nxt.role) THEN
            RAISE EXCEPTION 'summary_through_id % would end inside a tool call group', NEW.summary_through_id
                USING ERRCODE = 'check_violation',
                      DETAIL = 'An assistant message with tool_calls and the tool results that answer it are summarized together.';
        END IF;
        NEW.unsummarized_messages := NEW.message_count - NEW.summary_through_id;
        NEW.unsummarized_tokens := ctxwin._unsummarized_tokens(NEW.id, NEW.summary_through_id, enc);
        NEW.count_encoding := enc;
        IF NEW.summary_through_id > OLD.summary_through_id THEN
            -- a new summary: the compaction circuit breaker starts afresh
            NEW.compaction_failures := 0;
            NEW.compaction_retry_at := NULL;
            NEW.last_error := NULL;
            NEW.last_error_at := NULL;
        END IF;
    ELSIF TG_OP = 'UPDATE' AND NEW.count_encoding IS DISTINCT FROM enc THEN
        -- the model changed: counters follow its encoding
        NEW.unsummarized_tokens := ctxwin._unsummarized_tokens(NEW.id, NEW.summary_through_id, enc);
        NEW.count_encoding := enc;
    ELSIF TG_OP = 'INSERT' THEN
        -- a new session counts in its model's encoding; a restored one keeps
        -- the counters it comes with (its messages are restored after it, and
        -- the insert trigger recounts when the encoding differs)
        NEW.count_encoding := coalesce(NEW.count_encoding, enc);
    END IF;

    IF TG_OP = 'UPDATE' AND (NEW.conversation_summary IS DISTINCT FROM OLD.conversation_summary
                             OR NEW.summary_through_id IS DISTINCT FROM OLD.summary_through_id) THEN
        IF NEW.summary_version = OLD.summary_version THEN
            NEW.summary_version := OLD.summary_version + 1;
        END IF;
        IF NEW.summary_updated_at IS NOT DISTINCT FROM OLD.summary_updated_at THEN
            NEW.summary_updated_at := now();
        END IF;
    END IF;
    -- in the encoding the counters are kept in (a restored session may
    -- still be in its model's previous one)
    NEW.summary_tokens := coalesce(ctxwin.count_tokens(NEW.conversation_summary, NEW.count_encoding), 0);
    NEW.prompt_tokens := ctxwin.messages_tokens(
        ctxwin.system_messages(NEW.system_prompt, NEW.conversation_summary, st.summary_placement),
        NEW.count_encoding);

    IF TG_OP = 'UPDATE' THEN
        -- a session below every trigger, or with nothing it may summarize,
        -- leaves the compaction queue (and one over a trigger enters it)
        IF ctxwin._should_queue(NEW.unsummarized_messages, NEW.unsummarized_tokens, NEW.prompt_tokens,
                                st.max_messages_before_summary, st.max_tokens_before_summary,
                                st.trigger_ratio, st.window, st.min_recent_messages) THEN
            IF NEW.compaction_queued_at IS NULL THEN
                PERFORM ctxwin._wake_worker();
            END IF;
            NEW.compaction_queued_at := coalesce(NEW.compaction_queued_at, now());
        ELSE
            NEW.compaction_queued_at := NULL;
        END IF;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION ctxwin._summary_cut(p_session uuid, p_after bigint, p_target bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (
    SELECT max(m.id) FROM ctxwin.messages m
    LEFT JOIN ctxwin.messages nx ON nx.session_id = m.session_id AND nx.id = m.id + 1
    WHERE m.session_id = p_session AND m.id > p_after AND m.id <= p_target
      AND ctxwin._summary_may_end(m.tool_calls IS NOT NULL, nx.role));

CREATE OR REPLACE FUNCTION ctxwin._summary_fit(p_session uuid, p_after bigint, p_through bigint, p_room int,
                                    p_encoding text)
RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    through bigint := p_through;
    first_cut bigint;
    guess bigint;
    t text;
BEGIN
    IF p_room < 1 THEN
        RAISE EXCEPTION 'the summary request leaves no room for messages'
            USING ERRCODE = 'program_limit_exceeded',
                  DETAIL = 'The summary prompt, the previous summary and max_summary_tokens fill the summary model''s context window.',
                  HINT = 'Choose a summary model with a larger context window, or lower max_summary_tokens.';
    END IF;
    -- the first place a summary may end: the end of the first whole tool group
    SELECT min(m.id) INTO first_cut FROM ctxwin.messages m
    LEFT JOIN ctxwin.messages nx ON nx.session_id OPERATOR(pg_catalog.=) m.session_id
                                 AND nx.id OPERATOR(pg_catalog.=) m.id + 1::bigint
    WHERE m.session_id OPERATOR(pg_catalog.=) p_session AND m.id > p_after AND m.id <= p_through
      AND ctxwin._summary_may_end(m.tool_calls IS NOT NULL, nx.role);
    IF first_cut IS NULL THEN
        RETURN NULL;
    END IF;
    -- a first guess from the stored token counts, then halve until it fits
    SELECT max(x.id) INTO guess
    FROM (SELECT m.id, sum(m.token_count) OVER (ORDER BY m.id) AS running
          FROM ctxwin.messages m
          WHERE m.session_id OPERATOR(pg_catalog.=) p_session AND m.id > p_after AND m.id <= p_through) x
    WHERE x.running <= p_room::bigint;
    IF guess IS NULL OR guess < through THEN
        through := greatest(coalesce(ctxwin._summary_cut(p_session, p_after, coalesce(guess, first_cut)), first_cut),
                            first_cut);
    END IF;
    LOOP
        t := ctxwin.transcript(ctxwin._summary_messages(p_session, p_after, through), p_encoding);
        IF ctxwin.count_tokens(t, p_encoding) <= p_room THEN
            RETURN jsonb_build_object('through', through, 'transcript', t, 'cut', false);
        END IF;
        IF through <= first_cut THEN
            RETURN jsonb_build_object('through', first_cut, 'cut', true,
                                      'transcript', ctxwin.truncate_middle(t, p_room, p_encoding));
        END IF;
        through := greatest(coalesce(ctxwin._summary_cut(p_session, p_after,
                                                         p_after + (through - p_after) / 2::bigint), first_cut),
                            first_cut);
    END LOOP;
END $$;

-- Cache-stable windows: a profile's window policy, its low-water mark and
-- how long the provider keeps a prompt cache.  The profiles a database has
-- keep the window they had (sliding): an update does not change what is
-- sent to the LLM.  New profiles are stable.
ALTER TABLE ctxwin.profiles
    ADD COLUMN window_policy text NOT NULL DEFAULT 'sliding' CHECK (window_policy IN ('stable', 'sliding')),
    ADD COLUMN window_low_water real NOT NULL DEFAULT 0.6
        CHECK (window_low_water > 0::real AND window_low_water < 1::real),
    ADD COLUMN cache_ttl interval NOT NULL DEFAULT '00:05:00' CHECK (cache_ttl >= '00:00:00'::interval);
ALTER TABLE ctxwin.profiles ALTER COLUMN window_policy SET DEFAULT 'stable';
COMMENT ON COLUMN ctxwin.profiles.window_policy IS
'stable: the window keeps its first message while the messages fit, then jumps to window_low_water of the budget (prompt caches hit); sliding: the newest messages that fit';
COMMENT ON COLUMN ctxwin.profiles.window_low_water IS
'Share of the budget a stable window fills after a jump';
COMMENT ON COLUMN ctxwin.profiles.cache_ttl IS
'How long the provider keeps a prompt cache: a summary due under a stable window waits for a jump, or for the session to be idle this long';
CREATE OR REPLACE VIEW ctxwin.session_settings WITH (security_invoker = true) AS
SELECT s.id AS session_id, s.profile, p.model, m.encoding,
       coalesce(p.context_window, m.context_window) AS context_window,
       p.trigger_ratio, p.max_messages_before_summary, p.max_tokens_before_summary,
       p.min_recent_messages, p.response_reserve, p.max_summary_tokens,
       p.summary_strategy, p.summary_model, p.summary_prompt, p.summary_placement,
       p.window_policy, p.window_low_water, p.cache_ttl
FROM ctxwin.sessions s
JOIN ctxwin.profiles p ON p.name = s.profile
JOIN ctxwin.models m ON m.name = p.model;


-- Whether a queued session's summary waits, under a stable window, for the
-- window to near its jump or for the session to be idle for cache_ttl, so
-- that it does not change the beginning of requests the provider has
-- cached.  The rule is SummaryWaits in src/rules.c; the worker and
-- compact() pass such sessions over until then.
CREATE FUNCTION ctxwin._summary_waits(context_tokens bigint, window_policy text, budget int,
                                      low_water real, idle interval, cache_ttl interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_summary_waits'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._summary_waits(bigint, text, int, real, interval, interval) IS
'Whether a due summary waits for the stable window to near its jump or for the session to be idle for cache_ttl';

-- Tools in the budget, prompt-cache breakpoints and the whole request body:
-- build_context and _window take the tools sent with the request (and
-- build_context a cache switch), build_request returns the whole body,
-- count_tool_tokens what tools cost (src/tools.c, src/request.c).
CREATE FUNCTION ctxwin.count_tool_tokens(tools jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tool_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.count_tool_tokens(jsonb, text) IS
'Tokens that OpenAI function tools ([{"type": "function", "function": {...}}]) cost a request, in an encoding or for a model of ctxwin.models; build_context subtracts them from the budget';

DROP FUNCTION ctxwin._window(uuid, int);
CREATE FUNCTION ctxwin._window(p_session uuid, p_budget int, p_tools jsonb DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_window'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._window(uuid, int, jsonb) IS
'The messages build_context returns for a session, budget and tools, with their token total (tools included) and what was dropped or cut';

DROP FUNCTION ctxwin.build_context(uuid, int, text);
CREATE FUNCTION ctxwin.build_context(session uuid, budget int DEFAULT NULL, format text DEFAULT 'openai',
                                     tools jsonb DEFAULT NULL, cache boolean DEFAULT true)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_build_context'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.build_context(uuid, int, text, jsonb, boolean) IS
'The messages to send to the LLM: system prompt, summary and the newest messages within the budget (default: context window less response reserve) less what the tools sent with them cost; openai: an array of chat messages; anthropic: {"system", "messages"}, with prompt-cache breakpoints unless cache is false. Never writes.';

CREATE FUNCTION ctxwin.build_request(session uuid, budget int DEFAULT NULL, format text DEFAULT 'openai',
                                     tools jsonb DEFAULT NULL, cache boolean DEFAULT true)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_build_request'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.build_request(uuid, int, text, jsonb, boolean) IS
'The request body to POST as it is: openai: {"model", "messages", "max_completion_tokens" or "max_tokens", "tools", "prompt_cache_key"}; anthropic: {"model", "system", "messages", "max_tokens", "tools"}, with prompt-cache breakpoints; the window is build_context''s. Never writes.';

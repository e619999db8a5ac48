-- ctxwin 0.1.0: token counting.
\echo Use "CREATE EXTENSION ctxwin" to load this file. \quit

-- search_path: every function that runs SQL or resolves a name pins it with
-- a SET clause.  The C functions count_tokens, tokenize and detokenize run no
-- SQL and resolve no name, except the encoding conversion of a database that
-- is neither UTF8 nor SQL_ASCII, which they pin internally; a SET clause would
-- triple their cost on short texts.  The C insert trigger of ctxwin.messages
-- runs SQL without one: every name in its queries is schema-qualified.  The
-- C guard of ctxwin.sessions runs no SQL.

-- The schema: ctxwin makes its own and refuses one that exists already.  A
-- schema made by someone else (a database owner, say) could hold operators,
-- functions or casts that outrank pg_catalog's for the argument types of a
-- call in the bodies below, and would run as whoever calls them: the
-- superuser in the background worker, among others.  The control file names
-- pg_catalog as the extension's schema, so this script runs with
-- search_path = pg_catalog, pg_temp.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'ctxwin') THEN
        RAISE EXCEPTION 'schema "ctxwin" already exists'
            USING ERRCODE = 'duplicate_schema',
                  DETAIL = 'ctxwin creates its own schema and does not install into one that another role may have prepared.',
                  HINT = 'Drop or rename the existing schema "ctxwin", then run CREATE EXTENSION ctxwin again.';
    END IF;
END $$;

CREATE SCHEMA ctxwin;
COMMENT ON SCHEMA ctxwin IS 'ctxwin: LLM context windows, token counting and running summaries';

-- The tokenizer functions are STABLE, not IMMUTABLE: an encoding argument may
-- name a model, whose encoding is read from ctxwin.models (a row a user can
-- change).  Functions that pass an encoding through are STABLE too.
CREATE FUNCTION ctxwin.count_tokens(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'count_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_tokens(text, text) IS
'Number of tokens of a text: exact with tiktoken''s encode_ordinary for cl100k_base and o200k_base; estimates for chars4 (characters / 4) and chars3.5 (characters / 3.5, rounded up)';

CREATE FUNCTION ctxwin.tokenize(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int[]
AS 'MODULE_PATHNAME', 'tokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.tokenize(text, text) IS
'Token ids of a text, as tiktoken''s encode_ordinary gives them (special-token text is ordinary text)';

CREATE FUNCTION ctxwin.detokenize(ids int[], encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'detokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.detokenize(int[], text) IS
'Text of a sequence of token ids; the inverse of tokenize';

CREATE FUNCTION ctxwin.count_message_tokens(message jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'count_message_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_message_tokens(jsonb, text) IS
'Tokens of one chat message in OpenAI form: 4 + the tokens of role, content, name and tool_call_id + the tokens of the tool_calls JSON text';

CREATE FUNCTION ctxwin.message_tokens(role text, content text, name text, tool_call_id text,
                                      tool_calls jsonb, encoding text)
RETURNS int
AS 'MODULE_PATHNAME', 'message_tokens'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.message_tokens(text, text, text, text, jsonb, text) IS
'Tokens of one chat message given as fields (NULL: absent); equal to count_message_tokens of the same message as JSON';

CREATE FUNCTION ctxwin.truncate_middle(t text, max_tokens int, encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'truncate_middle'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.truncate_middle(text, int, text) IS
'The text itself if it has at most max_tokens tokens, else its beginning and end around "[... N tokens omitted ...]", within max_tokens';

CREATE FUNCTION ctxwin._fit_contents(contents text[], room int, encoding text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'fit_contents'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._fit_contents(text[], int, text) IS
'The contents of a window''s newest unit, the largest cut first, each cut one carrying its omission marker, within room tokens in all; NULL if not even the markers fit';

CREATE FUNCTION ctxwin._contents_least(contents text[], encoding text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'contents_least'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._contents_least(text[], text) IS
'The fewest tokens _fit_contents can cut the contents to: each at most to its omission marker alone';

------------------------------------------------------------------------------
-- Models and profiles
--
-- Both ship rows (builtin = true) and take the user's.  pg_dump carries the
-- user's rows only (the extension recreates its own); a row a user inserts
-- under a built-in name replaces the built-in one, and a built-in row a
-- user updates becomes the user's, so a dump and restore keeps every change.
------------------------------------------------------------------------------

CREATE TABLE ctxwin.models (
    name text PRIMARY KEY,
    encoding text NOT NULL
        CHECK (encoding IN ('cl100k_base', 'o200k_base', 'chars4', 'chars3.5')),
    context_window int NOT NULL CHECK (context_window > 0),
    provider text,
    builtin boolean NOT NULL DEFAULT false
);

COMMENT ON TABLE ctxwin.models IS
'LLM models: the encoding their tokens are counted with and their context window';

CREATE TABLE ctxwin.profiles (
    name text PRIMARY KEY,
    model text NOT NULL DEFAULT 'gpt-4o' REFERENCES ctxwin.models (name) ON UPDATE CASCADE,
    context_window int CHECK (context_window > 0),
    trigger_ratio real DEFAULT 0.8 CHECK (trigger_ratio > 0::real AND trigger_ratio <= 1::real),
    max_messages_before_summary int DEFAULT 30 CHECK (max_messages_before_summary > 0),
    max_tokens_before_summary int DEFAULT 128000 CHECK (max_tokens_before_summary > 0),
    min_recent_messages int NOT NULL DEFAULT 6 CHECK (min_recent_messages >= 0),
    response_reserve int NOT NULL DEFAULT 4096 CHECK (response_reserve >= 0),
    max_summary_tokens int NOT NULL DEFAULT 1024 CHECK (max_summary_tokens > 0),
    summary_strategy text CHECK (summary_strategy IN ('llm', 'hybrid', 'extractive')),
    summary_model text,
    summary_prompt text,
    summary_placement text NOT NULL DEFAULT 'system'
        CHECK (summary_placement IN ('system', 'message')),
    builtin boolean NOT NULL DEFAULT false
);

COMMENT ON TABLE ctxwin.profiles IS
'Per-agent settings: model, window, summary triggers (NULL: off), recent messages kept, response reserve and summary settings';

CREATE FUNCTION ctxwin._builtin_row_replace() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A user's row under a built-in name takes over the built-in row in
        -- place (deleting it first would break the profiles and sessions
        -- that reference it); the insert itself is then skipped.
        IF NOT NEW.builtin AND TG_TABLE_NAME = 'models' THEN
            UPDATE ctxwin.models
            SET encoding = NEW.encoding, context_window = NEW.context_window,
                provider = NEW.provider, builtin = false
            WHERE name = NEW.name AND builtin;
            IF FOUND THEN
                RETURN NULL;
            END IF;
        ELSIF NOT NEW.builtin THEN
            UPDATE ctxwin.profiles
            SET model = NEW.model, context_window = NEW.context_window, trigger_ratio = NEW.trigger_ratio,
                max_messages_before_summary = NEW.max_messages_before_summary,
                max_tokens_before_summary = NEW.max_tokens_before_summary,
                min_recent_messages = NEW.min_recent_messages, response_reserve = NEW.response_reserve,
                max_summary_tokens = NEW.max_summary_tokens, summary_strategy = NEW.summary_strategy,
                summary_model = NEW.summary_model, summary_prompt = NEW.summary_prompt,
                summary_placement = NEW.summary_placement, builtin = false
            WHERE name = NEW.name AND builtin;
            IF FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
    ELSIF OLD.builtin AND NEW.builtin THEN
        -- a built-in row the user changes becomes the user's
        NEW.builtin := false;
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION ctxwin._builtin_row_replace() IS
'Trigger on models and profiles: user rows replace and take over built-in rows, so pg_dump keeps them';

CREATE TRIGGER builtin_row_replace BEFORE INSERT OR UPDATE ON ctxwin.models
    FOR EACH ROW EXECUTE FUNCTION ctxwin._builtin_row_replace();
CREATE TRIGGER builtin_row_replace BEFORE INSERT OR UPDATE ON ctxwin.profiles
    FOR EACH ROW EXECUTE FUNCTION ctxwin._builtin_row_replace();

-- Context windows as published by each provider.  Claude and Gemini have
-- their own tokenizers: their counts are approximated with the nearest
-- tiktoken vocabulary, which can undercount; keep a response_reserve.
INSERT INTO ctxwin.models (name, encoding, context_window, provider, builtin) VALUES
    ('gpt-5',              'o200k_base',  400000, 'openai', true),
    ('gpt-5-mini',         'o200k_base',  400000, 'openai', true),
    ('gpt-5-nano',         'o200k_base',  400000, 'openai', true),
    ('gpt-4.1',            'o200k_base', 1047576, 'openai', true),
    ('gpt-4.1-mini',       'o200k_base', 1047576, 'openai', true),
    ('gpt-4.1-nano',       'o200k_base', 1047576, 'openai', true),
    ('gpt-4o',             'o200k_base',  128000, 'openai', true),
    ('gpt-4o-mini',        'o200k_base',  128000, 'openai', true),
    ('o1',                 'o200k_base',  200000, 'openai', true),
    ('o3',                 'o200k_base',  200000, 'openai', true),
    ('o3-mini',            'o200k_base',  200000, 'openai', true),
    ('o4-mini',            'o200k_base',  200000, 'openai', true),
    ('gpt-4-turbo',        'cl100k_base', 128000, 'openai', true),
    ('gpt-4',              'cl100k_base',   8192, 'openai', true),
    ('gpt-4-32k',          'cl100k_base',  32768, 'openai', true),
    ('gpt-3.5-turbo',      'cl100k_base',  16385, 'openai', true),
    ('claude-opus-4-1',    'cl100k_base', 200000, 'anthropic', true),
    ('claude-opus-4',      'cl100k_base', 200000, 'anthropic', true),
    ('claude-sonnet-4-5',  'cl100k_base', 200000, 'anthropic', true),
    ('claude-sonnet-4',    'cl100k_base', 200000, 'anthropic', true),
    ('claude-haiku-4-5',   'cl100k_base', 200000, 'anthropic', true),
    ('claude-3-7-sonnet',  'cl100k_base', 200000, 'anthropic', true),
    ('claude-3-5-sonnet',  'cl100k_base', 200000, 'anthropic', true),
    ('claude-3-5-haiku',   'cl100k_base', 200000, 'anthropic', true),
    ('gemini-2.5-pro',     'o200k_base', 1048576, 'google', true),
    ('gemini-2.5-flash',   'o200k_base', 1048576, 'google', true),
    ('gemini-2.0-flash',   'o200k_base', 1048576, 'google', true),
    ('gemini-1.5-pro',     'o200k_base', 2097152, 'google', true),
    ('gemini-1.5-flash',   'o200k_base', 1048576, 'google', true);

INSERT INTO ctxwin.profiles (name, model, builtin) VALUES ('default', 'gpt-4o', true);

SELECT pg_catalog.pg_extension_config_dump('ctxwin.models', 'WHERE NOT builtin');
SELECT pg_catalog.pg_extension_config_dump('ctxwin.profiles', 'WHERE NOT builtin');

------------------------------------------------------------------------------
-- Sessions and messages
------------------------------------------------------------------------------

CREATE TABLE ctxwin.sessions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    profile text NOT NULL DEFAULT 'default' REFERENCES ctxwin.profiles (name) ON UPDATE CASCADE,
    system_prompt text,
    conversation_summary text,
    summary_through_id bigint NOT NULL DEFAULT 0 CHECK (summary_through_id >= 0),
    summary_tokens int NOT NULL DEFAULT 0,
    summary_version int NOT NULL DEFAULT 0,
    summary_updated_at timestamptz,
    message_count bigint NOT NULL DEFAULT 0 CHECK (message_count >= summary_through_id),
    token_count bigint NOT NULL DEFAULT 0,
    unsummarized_messages bigint NOT NULL DEFAULT 0,
    unsummarized_tokens bigint NOT NULL DEFAULT 0,
    prompt_tokens int NOT NULL DEFAULT 0,
    count_encoding text,
    pending_tool_calls text[],
    compaction_queued_at timestamptz,
    compaction_retry_at timestamptz,
    compaction_failures int NOT NULL DEFAULT 0,
    last_error text,
    last_error_at timestamptz,
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- the queue in the order compact() and the worker take it (id: among
-- sessions queued at one time, as by a profile change)
CREATE INDEX sessions_compaction_queue ON ctxwin.sessions (compaction_queued_at, id)
    WHERE compaction_queued_at IS NOT NULL;

COMMENT ON TABLE ctxwin.sessions IS
'Chat sessions: system prompt, running summary and the counters ctxwin maintains';
COMMENT ON COLUMN ctxwin.sessions.summary_through_id IS
'Id of the last message the summary covers (0: none); only moves forward';
COMMENT ON COLUMN ctxwin.sessions.message_count IS
'Messages in the session, which is also the id of the newest one';
COMMENT ON COLUMN ctxwin.sessions.prompt_tokens IS
'Tokens of the system prompt and summary as build_context sends them, in count_encoding';
COMMENT ON COLUMN ctxwin.sessions.count_encoding IS
'Encoding of unsummarized_tokens, summary_tokens and prompt_tokens';
COMMENT ON COLUMN ctxwin.sessions.pending_tool_calls IS
'Ids of the tool calls of the newest assistant message with tool_calls not yet answered';
COMMENT ON COLUMN ctxwin.sessions.compaction_queued_at IS
'When a summary trigger fired and the session was queued for compaction (NULL: not queued)';
COMMENT ON COLUMN ctxwin.sessions.compaction_retry_at IS
'After a failed compaction: when the worker may try again';
COMMENT ON COLUMN ctxwin.sessions.compaction_failures IS
'Failed compactions since the last success or new message; at ctxwin.max_failures the worker and compact() stop trying';

-- Who writes what: applications write profile, system_prompt, metadata,
-- conversation_summary and summary_through_id (checked by
-- _sessions_maintain); every other column is ctxwin's bookkeeping, written
-- by its triggers and C code, or by the table's owner (a restore, a
-- superuser).  The guard is in C (src/trigger.c): it runs on every update,
-- the insert trigger's writes of the counters included.
CREATE FUNCTION ctxwin._sessions_guard() RETURNS trigger
AS 'MODULE_PATHNAME', 'sessions_guard'
LANGUAGE C;

COMMENT ON FUNCTION ctxwin._sessions_guard() IS
'Trigger on sessions: refuses writes of the columns ctxwin maintains by roles that do not own the table';

-- (before sessions_maintain_*: triggers fire in the order of their names)
CREATE TRIGGER sessions_guard BEFORE INSERT OR UPDATE ON ctxwin.sessions
    FOR EACH ROW EXECUTE FUNCTION ctxwin._sessions_guard();

CREATE TABLE ctxwin.messages (
    session_id uuid NOT NULL REFERENCES ctxwin.sessions (id) ON DELETE CASCADE,
    id bigint NOT NULL,
    role text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content text,
    tool_calls jsonb,
    tool_call_id text,
    name text,
    token_count int NOT NULL CHECK (token_count >= 0),
    token_encoding text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, id)
);

COMMENT ON TABLE ctxwin.messages IS
'Chat messages, append-only; id is the position in the session (1, 2, 3 ... in commit order), set by ctxwin';
COMMENT ON COLUMN ctxwin.messages.token_count IS
'Tokens of the message with its overhead, counted with token_encoding when it was inserted';

CREATE TABLE ctxwin.summaries (
    session_id uuid NOT NULL REFERENCES ctxwin.sessions (id) ON DELETE CASCADE,
    version int NOT NULL,
    from_id bigint NOT NULL,
    through_id bigint NOT NULL,
    content text NOT NULL,
    token_count int NOT NULL,
    strategy text NOT NULL,
    model text,
    usage jsonb,
    latency_ms int,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, version),
    CHECK (from_id <= through_id)
);

COMMENT ON TABLE ctxwin.summaries IS
'Every summary made, append-only: the range it newly covers, its text, strategy, model, usage and latency';

CREATE TABLE ctxwin.flush_events (
    session_id uuid NOT NULL REFERENCES ctxwin.sessions (id) ON DELETE CASCADE,
    id bigint NOT NULL,
    from_id bigint NOT NULL,
    through_id bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, id)
);

COMMENT ON TABLE ctxwin.flush_events IS
'Outbox: one row per compaction with the message range it newly summarized, for long-term memory extraction';

SELECT pg_catalog.pg_extension_config_dump('ctxwin.sessions', '');
SELECT pg_catalog.pg_extension_config_dump('ctxwin.messages', '');
SELECT pg_catalog.pg_extension_config_dump('ctxwin.summaries', '');
SELECT pg_catalog.pg_extension_config_dump('ctxwin.flush_events', '');

-- The system messages build_context sends before the conversation.
CREATE FUNCTION ctxwin.system_messages(system_prompt text, summary text, placement text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE
    WHEN coalesce(summary, '') = '' THEN
        CASE WHEN coalesce(system_prompt, '') = '' THEN '[]'::jsonb
             ELSE jsonb_build_array(jsonb_build_object('role', 'system', 'content', system_prompt)) END
    WHEN placement = 'message' THEN
        CASE WHEN coalesce(system_prompt, '') = '' THEN '[]'::jsonb
             ELSE jsonb_build_array(jsonb_build_object('role', 'system', 'content', system_prompt)) END
        || jsonb_build_array(jsonb_build_object('role', 'system',
               'content', 'Summary of earlier conversation:' || E'\n' || summary))
    ELSE jsonb_build_array(jsonb_build_object('role', 'system',
             'content', concat_ws(E'\n\n', nullif(system_prompt, ''),
                                  'Summary of earlier conversation:' || E'\n' || summary)))
END;

COMMENT ON FUNCTION ctxwin.system_messages(text, text, text) IS
'The system messages that carry a session''s system prompt and summary, per summary_placement';

CREATE FUNCTION ctxwin.messages_tokens(messages jsonb, encoding text)
RETURNS int
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT coalesce(sum(ctxwin.count_message_tokens(m, encoding)), 0)
        FROM jsonb_array_elements(messages) m);

COMMENT ON FUNCTION ctxwin.messages_tokens(jsonb, text) IS
'Sum of count_message_tokens over a JSON array of messages (without the 3 tokens of a list)';

-- A session joined with its profile and model: what every function needs.
-- security_invoker: the view reads sessions, profiles and models with the
-- caller's privileges and row-level security, not its owner's.
CREATE VIEW ctxwin.session_settings WITH (security_invoker = true) AS
SELECT s.id AS session_id, s.profile, p.model, m.encoding,
       coalesce(p.context_window, m.context_window) AS context_window,
       p.trigger_ratio, p.max_messages_before_summary, p.max_tokens_before_summary,
       p.min_recent_messages, p.response_reserve, p.max_summary_tokens,
       p.summary_strategy, p.summary_model, p.summary_prompt, p.summary_placement
FROM ctxwin.sessions s
JOIN ctxwin.profiles p ON p.name = s.profile
JOIN ctxwin.models m ON m.name = p.model;

COMMENT ON VIEW ctxwin.session_settings IS
'Each session with the settings of its profile and model in effect now';

-- rows are those of sessions the caller may read (security_invoker)
GRANT SELECT ON ctxwin.session_settings TO PUBLIC;

-- Tokens of the unsummarized messages of a session, in an encoding.
CREATE FUNCTION ctxwin._unsummarized_tokens(p_session uuid, p_after bigint, p_encoding text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT coalesce(sum(CASE WHEN m.token_encoding = p_encoding THEN m.token_count
                                 ELSE ctxwin.message_tokens(m.role, m.content, m.name, m.tool_call_id,
                                                            m.tool_calls, p_encoding) END), 0)
        FROM ctxwin.messages m
        WHERE m.session_id = p_session AND m.id > p_after);

COMMENT ON FUNCTION ctxwin._unsummarized_tokens(uuid, bigint, text) IS
'Tokens of the messages of a session after an id, counted in an encoding';

-- Whether a session's counters put it in the compaction queue: a summary
-- trigger fires (N messages, K tokens, the ratio of the window; NULL = off)
-- and there is more than the newest min_recent_messages to summarize.
CREATE FUNCTION ctxwin._should_queue(messages bigint, tokens bigint, prompt_tokens bigint,
                                     max_messages int, max_tokens int, ratio real,
                                     context_window int, min_recent int)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN messages > min_recent
   AND (coalesce(messages >= max_messages, false)
        OR coalesce(tokens >= max_tokens, false)
        OR coalesce((prompt_tokens + tokens + 3)::float8 > ratio::float8 * context_window::float8, false));

COMMENT ON FUNCTION ctxwin._should_queue(bigint, bigint, bigint, int, int, real, int, int) IS
'Whether a session with these unsummarized messages and tokens belongs in the compaction queue under these settings';

-- Keeps a session's derived columns right when its prompt, summary, summary
-- point or profile change, and guards the summary point.
CREATE FUNCTION ctxwin._sessions_maintain() RETURNS trigger
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
        -- never inside a tool group: the next message is no tool result, and
        -- an assistant message with tool calls is summarized with its results
        SELECT m.role INTO nxt FROM ctxwin.messages m
        WHERE m.session_id = NEW.id AND m.id = NEW.summary_through_id + 1;
        SELECT m.role, m.tool_calls IS NOT NULL AS has_calls INTO cur FROM ctxwin.messages m
        WHERE m.session_id = NEW.id AND m.id = NEW.summary_through_id;
        IF nxt.role = 'tool' OR (coalesce(cur.has_calls, false) AND nxt.role IS NULL) THEN
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

COMMENT ON FUNCTION ctxwin._sessions_maintain() IS
'Trigger on sessions: recounts prompt and unsummarized tokens, checks that the summary point only moves forward and never splits a tool call group, clears the compaction errors when it moves';

CREATE TRIGGER sessions_maintain_insert BEFORE INSERT ON ctxwin.sessions
    FOR EACH ROW EXECUTE FUNCTION ctxwin._sessions_maintain();
CREATE TRIGGER sessions_maintain_update BEFORE UPDATE ON ctxwin.sessions
    FOR EACH ROW
    WHEN (OLD.summary_through_id IS DISTINCT FROM NEW.summary_through_id
          OR OLD.conversation_summary IS DISTINCT FROM NEW.conversation_summary
          OR OLD.system_prompt IS DISTINCT FROM NEW.system_prompt
          OR OLD.profile IS DISTINCT FROM NEW.profile)
    EXECUTE FUNCTION ctxwin._sessions_maintain();

-- A changed profile or model (lower triggers, a smaller window) can put
-- sessions over a trigger without a new message: queue them now, as their
-- next message would, and wake the worker.  SECURITY DEFINER: the queue is
-- ctxwin's bookkeeping, which its owner writes; a role that may change a
-- profile or model has it queue every session the change puts over a
-- trigger, whether that role may see the session or not.  It takes nothing
-- from its caller but which rows changed: it writes now(), on the stored
-- counters and settings.
CREATE FUNCTION ctxwin._settings_requeue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    UPDATE ctxwin.sessions s SET compaction_queued_at = now()
    FROM ctxwin.profiles p JOIN ctxwin.models m ON m.name = p.model
    WHERE s.profile = p.name AND s.compaction_queued_at IS NULL
      AND CASE TG_TABLE_NAME WHEN 'profiles' THEN p.name IN (SELECT r.name FROM new_rows r)
                             ELSE p.model IN (SELECT r.name FROM new_rows r) END
      AND ctxwin._should_queue(s.unsummarized_messages, s.unsummarized_tokens, s.prompt_tokens,
                               p.max_messages_before_summary, p.max_tokens_before_summary, p.trigger_ratio,
                               coalesce(p.context_window, m.context_window), p.min_recent_messages);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM ctxwin._wake_worker();
    END IF;
    RETURN NULL;
END $$;

COMMENT ON FUNCTION ctxwin._settings_requeue() IS
'Trigger on profiles and models: queues the sessions a changed setting puts over a summary trigger';

CREATE TRIGGER profiles_requeue AFTER UPDATE ON ctxwin.profiles
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ctxwin._settings_requeue();
CREATE TRIGGER models_requeue AFTER UPDATE ON ctxwin.models
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ctxwin._settings_requeue();

-- The insert trigger: validates, numbers and counts a message, keeps the
-- session's counters and queues the session when a summary trigger fires
-- (waking the worker when the session enters the queue, or is released by
-- the message from its failures).  It never calls the network.  In C
-- (src/trigger.c), it runs on every message insert; it pins no search_path
-- but resolves no name through it: every name in its queries is qualified.
-- The counters of a statement's messages are kept in memory and written
-- once per session at the end of the statement (so a load of n messages in
-- one statement costs O(n), not O(n^2)): the same function, as statement
-- triggers, marks the statement's start and end.  Ids, token counts and
-- token encodings are supplied only by the table's owner (a restore).
CREATE FUNCTION ctxwin._messages_insert() RETURNS trigger
AS 'MODULE_PATHNAME', 'messages_insert'
LANGUAGE C;

COMMENT ON FUNCTION ctxwin._messages_insert() IS
'Insert trigger on messages: numbers the message in its session, counts its tokens, keeps the session counters, queues the session when a summary trigger fires; as statement triggers, writes the counters once per statement';

CREATE TRIGGER messages_insert BEFORE INSERT ON ctxwin.messages
    FOR EACH ROW EXECUTE FUNCTION ctxwin._messages_insert();
CREATE TRIGGER messages_insert_begin BEFORE INSERT ON ctxwin.messages
    FOR EACH STATEMENT EXECUTE FUNCTION ctxwin._messages_insert();
CREATE TRIGGER messages_insert_end AFTER INSERT ON ctxwin.messages
    FOR EACH STATEMENT EXECUTE FUNCTION ctxwin._messages_insert();

-- Messages are append-only: their metadata may change, nothing else; one
-- message cannot be deleted, a whole session can (its messages go with it).
CREATE FUNCTION ctxwin._messages_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.session_id, NEW.id, NEW.role, NEW.content, NEW.tool_calls::text, NEW.tool_call_id,
            NEW.name, NEW.token_count, NEW.token_encoding, NEW.created_at)
           IS DISTINCT FROM
           (OLD.session_id, OLD.id, OLD.role, OLD.content, OLD.tool_calls::text, OLD.tool_call_id,
            OLD.name, OLD.token_count, OLD.token_encoding, OLD.created_at) THEN
            RAISE EXCEPTION 'messages cannot be changed'
                USING ERRCODE = 'integrity_constraint_violation',
                      DETAIL = 'ctxwin keeps every message as it was written, so summaries and token counts stay true; only metadata can change.',
                      HINT = 'Append a correction as a new message.';
        END IF;
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM ctxwin.sessions WHERE id = OLD.session_id) THEN
        RAISE EXCEPTION 'a single message cannot be deleted'
            USING ERRCODE = 'integrity_constraint_violation',
                  DETAIL = 'Its session''s ids, counters and summary would no longer match its messages.',
                  HINT = 'Delete the whole session (DELETE FROM ctxwin.sessions WHERE id = ...); its messages, summaries and flush events go with it.';
    END IF;
    RETURN OLD;
END $$;

COMMENT ON FUNCTION ctxwin._messages_guard() IS
'Update and delete trigger on messages: only metadata changes; messages go only with their whole session';

CREATE TRIGGER messages_guard BEFORE UPDATE OR DELETE ON ctxwin.messages
    FOR EACH ROW EXECUTE FUNCTION ctxwin._messages_guard();

CREATE FUNCTION ctxwin._session_must_exist(p_session uuid) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_session IS NULL THEN
        RAISE EXCEPTION 'session id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM ctxwin.sessions WHERE id = p_session) THEN
        RAISE EXCEPTION 'session % does not exist', p_session USING ERRCODE = 'no_data_found';
    END IF;
END $$;

COMMENT ON FUNCTION ctxwin._session_must_exist(uuid) IS
'Raises no_data_found for a session id that names no session';

CREATE FUNCTION ctxwin.messages_after(session uuid, after_id bigint DEFAULT NULL)
RETURNS SETOF ctxwin.messages
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM ctxwin._session_must_exist(session);
    RETURN QUERY SELECT * FROM ctxwin.messages m
                 WHERE m.session_id = session AND m.id > coalesce(after_id, 0)
                 ORDER BY m.id;
END $$;

COMMENT ON FUNCTION ctxwin.messages_after(uuid, bigint) IS
'Messages of a session with an id greater than after_id (all if NULL), oldest first';

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
AS 'MODULE_PATHNAME', 'window_walk'
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

CREATE FUNCTION ctxwin.context_status(
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
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s ctxwin.sessions;
    st ctxwin.session_settings;
    ut bigint;
    pt int;
    w jsonb;
    recent_tokens bigint;
    recent_n bigint;
BEGIN
    PERFORM ctxwin._session_must_exist(session);
    SELECT * INTO s FROM ctxwin.sessions x WHERE x.id = session;
    SELECT * INTO st FROM ctxwin.session_settings x WHERE x.session_id = session;

    session_id := s.id;
    profile := s.profile;
    model := st.model;
    encoding := st.encoding;
    context_window := st.context_window;
    message_count := s.message_count;
    summary_through_id := s.summary_through_id;
    messages_since_summary := s.message_count - s.summary_through_id;
    -- counters were kept in another encoding if the model changed since
    IF s.count_encoding = st.encoding THEN
        ut := s.unsummarized_tokens;
    ELSE
        ut := ctxwin._unsummarized_tokens(s.id, s.summary_through_id, st.encoding);
    END IF;
    pt := ctxwin.messages_tokens(ctxwin.system_messages(s.system_prompt, s.conversation_summary,
                                                        st.summary_placement), st.encoding);
    tokens_since_summary := ut;
    max_messages_before_summary := st.max_messages_before_summary;
    messages_pct := round(100.0 * messages_since_summary::numeric / st.max_messages_before_summary::numeric, 1);
    max_tokens_before_summary := st.max_tokens_before_summary;
    tokens_pct := round(100.0 * ut::numeric / st.max_tokens_before_summary::numeric, 1);
    trigger_ratio := st.trigger_ratio;
    context_tokens := pt + ut + 3;
    context_pct := round(100.0 * context_tokens::numeric / st.context_window::numeric, 1);
    ratio_pct := round(100.0 * context_tokens::numeric / (st.trigger_ratio::float8 * st.context_window::float8)::numeric, 1);
    triggers_firing := array_remove(ARRAY[
        CASE WHEN messages_since_summary >= st.max_messages_before_summary THEN 'messages' END,
        CASE WHEN ut >= st.max_tokens_before_summary THEN 'tokens' END,
        CASE WHEN context_tokens::float8 > st.trigger_ratio::float8 * st.context_window::float8 THEN 'ratio' END], NULL);
    will_trigger := cardinality(triggers_firing) > 0;
    summary_version := s.summary_version;
    summary_tokens := coalesce(ctxwin.count_tokens(s.conversation_summary, st.encoding), 0);
    summary_updated_at := s.summary_updated_at;
    summary_age := now() - s.summary_updated_at;
    queued_at := s.compaction_queued_at;
    compaction_failures := s.compaction_failures;
    last_error := s.last_error;
    last_error_at := s.last_error_at;

    BEGIN
        w := ctxwin._window(session, NULL);
        budget := (w ->> 'budget')::int;
        window_messages := (w ->> 'window_messages')::bigint;
        window_tokens := (w ->> 'tokens')::int;
        dropped_messages := (w ->> 'dropped_messages')::bigint;
        IF (w ->> 'cut')::boolean THEN
            note := 'The newest message is longer than the budget: build_context shortens it in the middle.';
        END IF;
    EXCEPTION WHEN invalid_parameter_value THEN
        GET STACKED DIAGNOSTICS note = MESSAGE_TEXT;
    END;

    IF will_trigger AND messages_since_summary <= st.min_recent_messages THEN
        note := concat_ws(' ', note, format(
            'The newest %s messages are never summarized (min_recent_messages), and they alone keep the %s trigger firing.',
            st.min_recent_messages, array_to_string(triggers_firing, ' and ')));
    ELSIF dropped_messages > 0 THEN
        note := concat_ws(' ', note, format(
            'The %s oldest unsummarized messages do not fit the budget and are left out until a summary covers them.',
            dropped_messages));
    END IF;
END $$;

COMMENT ON FUNCTION ctxwin.context_status(uuid) IS
'Where a session stands: messages and tokens since the summary against each trigger, will_trigger, summary, window, dropped messages and the last compaction error';

CREATE FUNCTION ctxwin._bar(pct numeric, width int DEFAULT 24)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN '[' || repeat('#', least(greatest(round(coalesce(pct, 0::numeric) * width::numeric / 100::numeric), 0), width)::int)
    || repeat('.', width - least(greatest(round(coalesce(pct, 0::numeric) * width::numeric / 100::numeric), 0), width)::int) || ']';

COMMENT ON FUNCTION ctxwin._bar(numeric, int) IS 'A text progress bar for a percentage';

CREATE FUNCTION ctxwin.context_report(session uuid)
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
                         ctxwin._bar(c.context_pct), c.context_pct, to_char(c.context_tokens, 'FM999,999,999'),
                         to_char(c.context_window, 'FM999,999,999'))
             ELSE format('  context   %s %6s%%  %s of %s tokens; summary at %s%%',
                         ctxwin._bar(c.context_pct), c.context_pct, to_char(c.context_tokens, 'FM999,999,999'),
                         to_char(c.context_window, 'FM999,999,999'), round(c.trigger_ratio::numeric * 100::numeric)) END,
        CASE WHEN c.max_messages_before_summary IS NULL THEN '  messages  trigger off'
             ELSE format('  messages  %s %6s%%  %s since the summary; summary at %s',
                         ctxwin._bar(c.messages_pct), c.messages_pct, c.messages_since_summary,
                         c.max_messages_before_summary) END,
        CASE WHEN c.max_tokens_before_summary IS NULL THEN '  tokens    trigger off'
             ELSE format('  tokens    %s %6s%%  %s since the summary; summary at %s',
                         ctxwin._bar(c.tokens_pct), c.tokens_pct, to_char(c.tokens_since_summary, 'FM999,999,999'),
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

COMMENT ON FUNCTION ctxwin.context_report(uuid) IS
'context_status as text for a person in psql, with progress bars';

------------------------------------------------------------------------------
-- Summaries
------------------------------------------------------------------------------

-- Facts a summary keeps verbatim, found without an LLM: paths, URLs,
-- commands, error lines, identifiers and numbers with units, in order of
-- appearance, each once.
CREATE FUNCTION ctxwin.extract_facts(t text)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY(
    SELECT f FROM (
        SELECT DISTINCT ON (f) f, min(o) OVER (PARTITION BY f) AS first_at
        FROM (
            SELECT btrim(m[1], '.,;:)(''"') AS f, n AS o
            FROM regexp_matches(t,
                '('
                || 'https?://[^\s<>()"'']+'                                   -- URLs
                || '|(?:~|\.{1,2})?/[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)+'   -- absolute and relative paths
                || '|\m[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_.\-]+)+'                 -- dir/file paths
                || '|\m[A-Za-z0-9_\-]+\.(?:py|js|ts|tsx|go|rs|c|h|cc|cpp|java|rb|php|sql|md|json|ya?ml|toml|txt|log|sh|conf|cfg|ini|csv|html|css)\M'
                || '|`[^`\n]{2,80}`'                                          -- inline code and commands
                || '|\m(?:[A-Z][A-Za-z]*(?:Error|Exception)|E[0-9]{3,}|[A-Z]{2,}-[0-9]+)\M'  -- errors, codes, tickets
                || '|\m[0-9]+(?:\.[0-9]+)?\s?(?:ms|s|sec|seconds|min|minutes|h|hours|days|weeks|KB|kB|MB|GB|TB|%|px|USD|EUR|GBP)(?![A-Za-z])'
                || '|[$€£][0-9][0-9,]*(?:\.[0-9]+)?'                           -- money
                || '|\m[a-z]+(?:_[a-z0-9]+)+\M'                               -- snake_case identifiers
                || '|\m[a-z]+(?:[A-Z][a-z0-9]+)+\M|\m[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\M'  -- camelCase, PascalCase
                || '|\m[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\M'     -- uuids
                || ')', 'g') WITH ORDINALITY AS x(m, n)
        ) raw
        WHERE length(f) > 2
        ORDER BY f, o
    ) d
    ORDER BY first_at);

COMMENT ON FUNCTION ctxwin.extract_facts(text) IS
'Paths, URLs, inline code, error names and codes, identifiers and numbers with units found in a text, each once, in order of appearance';

/*
 * The extractive strategy: no network, deterministic.  Keeps, within
 * max_tokens: what the user asked, decisions and conclusions, questions,
 * facts verbatim and the tools used, newest first within each section, merged
 * with the sections of the previous summary (newer facts first; a previous
 * summary of another kind is kept as "Earlier").  Sentences that mention a
 * word of instructions come first.
 */
CREATE FUNCTION ctxwin.extractive_summary(previous text, messages jsonb, max_tokens int,
                                          encoding text DEFAULT 'cl100k_base',
                                          instructions text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sections text[] := ARRAY['Focus', 'Requests', 'Decisions', 'Questions', 'Facts', 'Tools used', 'Earlier'];
    items jsonb := '{}';        -- section -> array of items, highest priority first
    sec text;
    m jsonb;
    sent text;
    focus_re text;
    prev_items jsonb := '{}';
    line text;
    cur text;
    earlier text;
    out_lines text[];
    result text;
    n int;
    k int;
    limits int[];
BEGIN
    IF max_tokens IS NULL OR max_tokens <= 0 THEN
        RAISE EXCEPTION 'max_tokens must be greater than zero' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH sec IN ARRAY sections LOOP
        items := jsonb_set(items, ARRAY[sec], '[]');
        prev_items := jsonb_set(prev_items, ARRAY[sec], '[]');
    END LOOP;
    -- words of the focus, 4 letters or more
    SELECT string_agg(DISTINCT regexp_replace(w, '([.^$*+?()\[\]{}|\\])', '\\\1', 'g'), '|')
    INTO focus_re
    FROM regexp_split_to_table(lower(coalesce(instructions, '')), '[^[:alnum:]_]+') w
    WHERE length(w) >= 4 AND w NOT IN ('keep', 'about', 'with', 'that', 'this', 'from', 'have', 'what', 'when', 'which', 'their', 'there', 'should');

    -- the newest messages first, so items are in priority order
    FOR m IN SELECT e FROM jsonb_array_elements(messages) WITH ORDINALITY AS x(e, o) ORDER BY o DESC LOOP
        IF m ? 'tool_calls' AND jsonb_typeof(m -> 'tool_calls') = 'array' THEN
            items := jsonb_set(items, '{Tools used}', (items -> 'Tools used') || (
                SELECT coalesce(jsonb_agg(c -> 'function' ->> 'name'), '[]') FROM jsonb_array_elements(m -> 'tool_calls') c
                WHERE c -> 'function' ->> 'name' IS NOT NULL));
        END IF;
        CONTINUE WHEN coalesce(m ->> 'content', '') = '';
        IF jsonb_array_length(items -> 'Facts') < max_tokens THEN
            items := jsonb_set(items, '{Facts}', (items -> 'Facts') || to_jsonb((ctxwin.extract_facts(
                CASE WHEN m ->> 'role' = 'tool' THEN left(m ->> 'content', 4000) ELSE m ->> 'content' END))[1:max_tokens]));
        END IF;
        CONTINUE WHEN m ->> 'role' = 'tool';
        k := 0;
        FOR sent IN
            SELECT btrim(regexp_replace(x, '\s+', ' ', 'g'))
            FROM regexp_split_to_table(m ->> 'content', '(?<=[.!?])\s+|\n+') x
        LOOP
            CONTINUE WHEN length(sent) < 8 OR length(sent) > 400;
            k := k + 1;
            -- no section shows more than max_tokens items: more would only
            -- make this loop quadratic on a huge message
            EXIT WHEN k > max_tokens;
            IF focus_re IS NOT NULL AND lower(sent) ~ ('\m(' || focus_re || ')') THEN
                items := jsonb_set(items, '{Focus}', (items -> 'Focus') || to_jsonb(sent));
            ELSIF m ->> 'role' = 'user' AND sent ~ '\?$' THEN
                items := jsonb_set(items, '{Questions}', (items -> 'Questions') || to_jsonb(sent));
            ELSIF lower(sent) ~ '\m(decided|decide|agreed|agree|we will|we''ll|let''s|going to|plan to|should|must|use|using|switch|chose|choose|prefer|fixed|fix|changed|change|set|root cause|because|so that|instead)\M' THEN
                items := jsonb_set(items, '{Decisions}', (items -> 'Decisions') || to_jsonb(
                    CASE WHEN m ->> 'role' = 'user' THEN 'User: ' ELSE '' END || sent));
            ELSIF m ->> 'role' = 'user' AND k = 1 THEN
                items := jsonb_set(items, '{Requests}', (items -> 'Requests') || to_jsonb(sent));
            END IF;
        END LOOP;
    END LOOP;

    -- the previous summary: its sections follow the new items; another
    -- kind of text is kept whole as Earlier
    IF coalesce(previous, '') <> '' THEN
        IF previous ~ '^(Focus|Requests|Decisions|Questions|Facts|Tools used|Earlier):' THEN
            FOR line IN SELECT l FROM regexp_split_to_table(previous, '\n') l LOOP
                IF line ~ '^(Focus|Requests|Decisions|Questions|Facts|Tools used|Earlier):' THEN
                    cur := substring(line FROM '^([^:]+):');
                    IF cur IN ('Facts', 'Tools used') THEN
                        prev_items := jsonb_set(prev_items, ARRAY[cur], (prev_items -> cur) || (
                            SELECT coalesce(jsonb_agg(btrim(v)), '[]')
                            FROM regexp_split_to_table(substring(line FROM '^[^:]+:\s*(.*)$'), ';\s*') v
                            WHERE btrim(v) <> ''));
                    END IF;
                ELSIF line ~ '^- ' AND cur IS NOT NULL THEN
                    prev_items := jsonb_set(prev_items, ARRAY[cur], (prev_items -> cur) || to_jsonb(substr(line, 3)));
                END IF;
            END LOOP;
        ELSE
            earlier := previous;
        END IF;
    END IF;

    -- merge: new first, each item once (tools are counted below)
    FOREACH sec IN ARRAY sections LOOP
        CONTINUE WHEN sec = 'Tools used';
        items := jsonb_set(items, ARRAY[sec], (
            SELECT coalesce(jsonb_agg(v ORDER BY first_o), '[]')
            FROM (SELECT v, min(o) AS first_o
                  FROM jsonb_array_elements_text((items -> sec) || (prev_items -> sec)) WITH ORDINALITY AS x(v, o)
                  GROUP BY v) d));
    END LOOP;
    -- tools: name (count)
    items := jsonb_set(items, '{Tools used}', (
        SELECT coalesce(jsonb_agg(name || CASE WHEN cnt > 1 THEN ' (' || cnt || ')' ELSE '' END ORDER BY first_o), '[]')
        FROM (SELECT regexp_replace(v, ' \(([0-9]+)\)$', '') AS name,
                     sum(coalesce(substring(v FROM ' \(([0-9]+)\)$')::int, 1)) AS cnt, min(o) AS first_o
              FROM jsonb_array_elements_text((items -> 'Tools used') || (prev_items -> 'Tools used'))
                   WITH ORDINALITY AS x(v, o)
              GROUP BY 1) t));

    -- fill the budget: take items round-robin over sections in priority
    -- order, so every section gets room, until the next one would not fit
    limits := ARRAY[0, 0, 0, 0, 0, 0, 0];
    IF earlier IS NOT NULL THEN
        -- a summary of another kind keeps up to half the room, cut in the middle
        earlier := ctxwin.truncate_middle(earlier, max_tokens / 2, encoding);
        limits[7] := 1;
    END IF;
    LOOP
        n := 0;
        FOR k IN 1 .. cardinality(sections) LOOP
            sec := sections[k];
            CONTINUE WHEN sec = 'Earlier' AND earlier IS NULL;
            CONTINUE WHEN sec <> 'Earlier' AND limits[k] >= jsonb_array_length(items -> sec);
            CONTINUE WHEN sec = 'Earlier' AND limits[k] >= 1;
            limits[k] := limits[k] + 1;
            result := ctxwin._render_summary(sections, items, limits, earlier, max_tokens, encoding);
            IF ctxwin.count_tokens(result, encoding) > max_tokens THEN
                limits[k] := limits[k] - 1;
            ELSE
                n := n + 1;
            END IF;
        END LOOP;
        EXIT WHEN n = 0;
    END LOOP;
    result := ctxwin._render_summary(sections, items, limits, earlier, max_tokens, encoding);
    IF btrim(result) = '' AND jsonb_array_length(messages) > 0 THEN
        -- nothing matched (small talk, bare identifiers, hashes, log lines):
        -- the messages' own text, shortened, so that a summary is never empty
        result := ctxwin._fallback_summary(messages, max_tokens, encoding);
    END IF;
    RETURN result;
END $$;

COMMENT ON FUNCTION ctxwin.extractive_summary(text, jsonb, int, text, text) IS
'The extractive summary (no LLM) of a previous summary and new messages: requests, decisions, questions, facts verbatim and tools used, within max_tokens';

/*
 * The extractive summary of last resort, for messages in which the
 * extractive strategy found nothing to keep: the newest messages' text, one
 * line each ("role: text", whitespace collapsed, long ones cut in the
 * middle), newest first, within max_tokens.  Never empty for a non-empty
 * list of messages and max_tokens >= 1.
 */
CREATE FUNCTION ctxwin._fallback_summary(messages jsonb, max_tokens int, encoding text)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m jsonb;
    line text;
    lines text[] := ARRAY['Messages:'];
    result text := NULL;
    candidate text;
    per_line int := greatest(max_tokens / 4, 16);
    roles text;
BEGIN
    FOR m IN SELECT e FROM jsonb_array_elements(messages) WITH ORDINALITY AS x(e, o) ORDER BY o DESC LOOP
        line := btrim(regexp_replace(coalesce(m ->> 'content', ''), '\s+', ' ', 'g'));
        CONTINUE WHEN line = '';
        line := ctxwin.truncate_middle(line, per_line, encoding);
        candidate := array_to_string(lines || ('- ' || coalesce(m ->> 'role', 'message') || ': ' || line), E'\n');
        EXIT WHEN ctxwin.count_tokens(candidate, encoding) > max_tokens;
        lines := lines || ('- ' || coalesce(m ->> 'role', 'message') || ': ' || line);
        result := candidate;
    END LOOP;
    IF result IS NULL THEN
        -- not even one line fits, or no message has text: say what there was
        SELECT string_agg(n::text || ' ' || r, ', ' ORDER BY r) INTO roles
        FROM (SELECT coalesce(e ->> 'role', 'message') AS r, count(*) AS n
              FROM jsonb_array_elements(messages) e GROUP BY 1) c;
        result := 'Messages: ' || roles;
        SELECT btrim(regexp_replace(coalesce(e ->> 'content', ''), '\s+', ' ', 'g')) INTO line
        FROM jsonb_array_elements(messages) WITH ORDINALITY AS x(e, o)
        WHERE coalesce(e ->> 'content', '') ~ '\S' ORDER BY o DESC LIMIT 1;
        IF line IS NOT NULL THEN
            candidate := result || E'\n- ' || ctxwin.truncate_middle(line,
                greatest(max_tokens - ctxwin.count_tokens(result, encoding) - 4, 1), encoding);
            IF ctxwin.count_tokens(candidate, encoding) <= max_tokens THEN
                result := candidate;
            END IF;
        END IF;
    END IF;
    -- a tiny max_tokens: the longest beginning that fits (one ASCII
    -- character always does)
    WHILE ctxwin.count_tokens(result, encoding) > max_tokens AND length(result) > 1 LOOP
        result := left(result, greatest(length(result) * 3 / 4, 1));
    END LOOP;
    RETURN result;
END $$;

COMMENT ON FUNCTION ctxwin._fallback_summary(jsonb, int, text) IS
'The newest messages'' text, shortened, within max_tokens: the extractive summary when nothing else was found';

CREATE FUNCTION ctxwin._render_summary(sections text[], items jsonb, limits int[], earlier text,
                                       max_tokens int, encoding text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    out_lines text[] := '{}';
    k int;
    sec text;
    vals text[];
BEGIN
    FOR k IN 1 .. cardinality(sections) LOOP
        sec := sections[k];
        CONTINUE WHEN limits[k] = 0;
        IF sec = 'Earlier' THEN
            out_lines := out_lines || ('Earlier: ' || earlier);
            CONTINUE;
        END IF;
        vals := ARRAY(SELECT v FROM jsonb_array_elements_text(items -> sec) WITH ORDINALITY AS x(v, o)
                      WHERE o <= limits[k] ORDER BY o);
        IF sec IN ('Facts', 'Tools used') THEN
            out_lines := out_lines || (sec || ': ' || array_to_string(vals, '; '));
        ELSE
            out_lines := out_lines || (sec || ':') || ARRAY(SELECT '- ' || v FROM unnest(vals) v);
        END IF;
    END LOOP;
    RETURN array_to_string(out_lines, E'\n');
END $$;

COMMENT ON FUNCTION ctxwin._render_summary(text[], jsonb, int[], text, int, text) IS
'Renders the first limits[k] items of each section of an extractive summary';


------------------------------------------------------------------------------
-- The LLM client
------------------------------------------------------------------------------

CREATE FUNCTION ctxwin._llm_post(body jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'llm_post'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_post(jsonb) IS
'POSTs a JSON body to the configured LLM endpoint with the server''s key; returns status, body, retry_after and latency. Not for PUBLIC.';

REVOKE ALL ON FUNCTION ctxwin._llm_post(jsonb) FROM PUBLIC;

-- The built-in summary prompt.
CREATE FUNCTION ctxwin.default_summary_prompt()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN 'You maintain the running summary of a conversation between a user and an AI assistant. '
    || 'You are given the previous summary (possibly empty) and the messages that came after it. '
    || 'Write one updated summary that merges both. '
    || 'Keep identifiers verbatim: names, ids, file paths, URLs, commands, numbers, amounts, dates and error messages. '
    || 'When two facts conflict, keep the newer one. '
    || 'Keep decisions, open tasks, constraints and the user''s preferences. '
    || 'Do not answer the user, do not continue the conversation, and add nothing that is not in the input. '
    || 'Output only the summary.';

COMMENT ON FUNCTION ctxwin.default_summary_prompt() IS 'The summary prompt used when a profile sets none';

-- Messages as a transcript for the summarizer: role labels, tool calls by
-- name, long tool results shortened.
CREATE FUNCTION ctxwin.transcript(messages jsonb, encoding text DEFAULT 'cl100k_base',
                                  max_tool_tokens int DEFAULT 400)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (
    SELECT string_agg(
        CASE
            WHEN m ->> 'role' = 'tool' THEN
                '[tool result ' || coalesce(m ->> 'tool_call_id', '') || '] '
                || ctxwin.truncate_middle(coalesce(m ->> 'content', ''), max_tool_tokens, encoding)
            WHEN m ? 'tool_calls' THEN
                '[' || (m ->> 'role') || '] ' || coalesce(nullif(m ->> 'content', '') || ' ', '')
                || '(calls ' || (SELECT string_agg((c -> 'function' ->> 'name') || ' ' || coalesce(c -> 'function' ->> 'arguments', '')
                                                   || ' [' || (c ->> 'id') || ']', ', ')
                                 FROM jsonb_array_elements(m -> 'tool_calls') c) || ')'
            ELSE '[' || (m ->> 'role') || coalesce(' ' || (m ->> 'name'), '') || '] ' || coalesce(m ->> 'content', '')
        END, E'\n' ORDER BY o)
    FROM jsonb_array_elements(messages) WITH ORDINALITY AS x(m, o));

COMMENT ON FUNCTION ctxwin.transcript(jsonb, text, int) IS
'Messages as a plain transcript with role labels, tool calls by name and arguments, tool results shortened in the middle';

-- The body of a summary request in the configured provider's wire format.
CREATE FUNCTION ctxwin._llm_request(system_prompt text, prompt text, max_tokens int, model text)
RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    provider text := current_setting('ctxwin.llm_provider', true);
BEGIN
    IF provider = 'anthropic' THEN
        RETURN jsonb_build_object('model', model, 'max_tokens', max_tokens, 'system', system_prompt,
                                  'messages', jsonb_build_array(jsonb_build_object('role', 'user', 'content', prompt)));
    ELSIF provider = 'openai' THEN
        RETURN jsonb_build_object('model', model, 'max_tokens', max_tokens, 'temperature', 0,
                                  'messages', jsonb_build_array(jsonb_build_object('role', 'system', 'content', system_prompt),
                                                                jsonb_build_object('role', 'user', 'content', prompt)));
    END IF;
    RAISE EXCEPTION 'no LLM provider is configured'
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Set "ctxwin.llm_provider" to openai or anthropic, or use the extractive strategy.';
END $$;

COMMENT ON FUNCTION ctxwin._llm_request(text, text, int, text) IS
'The JSON body of a summary request for the configured provider';

-- The summary in a successful (2xx) answer of _llm_post: a complete,
-- non-empty text, or an error.  Only an answer that ended with a complete
-- stop (finish_reason "stop", stop_reason "end_turn" or "stop_sequence") with
-- one choice, no refusal and no tool calls can become a summary: a
-- truncated, filtered, refused, paused or tool-calling answer, an answer with
-- no stop reason or several choices, an empty text or an error never does.
-- The errors name the stop reason (a sanitized word) but never quote the
-- model's text.  None is sent again at once (at temperature 0 the same
-- request gets the same answer): summarize_session raises, and the worker
-- and compact() record a failed compaction, retried later with its backoff
-- up to ctxwin.max_failures.
CREATE FUNCTION ctxwin._llm_answer(r jsonb, max_tokens int)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    b jsonb := r -> 'body';
    anthropic boolean := r ->> 'provider' = 'anthropic';
    msg jsonb;
    content text;
    finish text;
    field text := CASE WHEN r ->> 'provider' = 'anthropic' THEN 'stop_reason' ELSE 'finish_reason' END;
    said text;
    nchoices int;
BEGIN
    IF NOT coalesce((r ->> 'status')::int BETWEEN 200 AND 299, false) THEN
        RAISE EXCEPTION 'LLM answer has HTTP status %', coalesce(r ->> 'status', 'NULL')
            USING ERRCODE = 'external_routine_exception';
    END IF;
    IF jsonb_typeof(b) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'LLM answer is not a JSON object' USING ERRCODE = 'external_routine_exception';
    END IF;
    IF anthropic THEN
        IF jsonb_typeof(b -> 'content') = 'array' AND EXISTS (
               SELECT FROM jsonb_array_elements(b -> 'content') blk
               WHERE blk ->> 'type' IN ('tool_use', 'server_tool_use')) THEN
            RAISE EXCEPTION 'LLM answered with a tool call instead of a summary'
                USING ERRCODE = 'external_routine_exception', DETAIL = 'Such an answer is never stored.';
        END IF;
        SELECT string_agg(blk ->> 'text', '') INTO content
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(b -> 'content') = 'array' THEN b -> 'content' ELSE '[]' END) blk
        WHERE blk ->> 'type' = 'text';
        finish := b ->> 'stop_reason';
    ELSE
        nchoices := CASE WHEN jsonb_typeof(b -> 'choices') = 'array' THEN jsonb_array_length(b -> 'choices') ELSE 0 END;
        IF nchoices = 0 THEN
            RAISE EXCEPTION 'LLM answer has no choices'
                USING ERRCODE = 'external_routine_exception';
        END IF;
        IF nchoices > 1 THEN
            RAISE EXCEPTION 'LLM answer has % choices where one was asked for', nchoices
                USING ERRCODE = 'external_routine_exception', DETAIL = 'Such an answer is never stored.';
        END IF;
        msg := b -> 'choices' -> 0 -> 'message';
        IF jsonb_typeof(msg) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'LLM answer has no message' USING ERRCODE = 'external_routine_exception';
        END IF;
        IF jsonb_typeof(msg -> 'refusal') = 'string' AND btrim(msg ->> 'refusal') <> '' THEN
            RAISE EXCEPTION 'LLM refused to summarize the conversation (its answer holds a refusal)'
                USING ERRCODE = 'external_routine_exception', DETAIL = 'A refusal is never stored as a summary.';
        END IF;
        IF (jsonb_typeof(msg -> 'tool_calls') = 'array' AND jsonb_array_length(msg -> 'tool_calls') > 0)
           OR jsonb_typeof(msg -> 'function_call') = 'object' THEN
            RAISE EXCEPTION 'LLM answered with a tool call instead of a summary'
                USING ERRCODE = 'external_routine_exception', DETAIL = 'Such an answer is never stored.';
        END IF;
        IF jsonb_typeof(msg -> 'content') = 'array' THEN
            -- content parts, as some compatible servers send them
            SELECT string_agg(p ->> 'text', '') INTO content
            FROM jsonb_array_elements(msg -> 'content') p
            WHERE p ->> 'type' = 'text';
        ELSIF jsonb_typeof(msg -> 'content') = 'string' THEN
            content := msg ->> 'content';
        END IF;
        finish := b -> 'choices' -> 0 ->> 'finish_reason';
    END IF;
    -- the stop reason as it may be quoted: a word, else not at all
    said := CASE WHEN finish ~ '^[A-Za-z0-9_.-]{1,40}$' THEN format('%s "%s"', field, finish)
                 ELSE format('an unexpected %s', field) END;
    IF finish IS NULL THEN
        RAISE EXCEPTION 'LLM answer has no %, so it may be unfinished', field
            USING ERRCODE = 'external_routine_exception', DETAIL = 'Only an answer that ended with a complete stop is stored.';
    ELSIF finish IN ('length', 'max_tokens') THEN
        RAISE EXCEPTION 'LLM summary was cut off at % tokens', max_tokens
            USING ERRCODE = 'external_routine_exception', DETAIL = 'A truncated summary is never stored.';
    ELSIF finish = 'content_filter' THEN
        RAISE EXCEPTION 'LLM answer was stopped by the provider''s content filter (%)', said
            USING ERRCODE = 'external_routine_exception', DETAIL = 'A filtered answer is never stored as a summary.';
    ELSIF finish = 'refusal' THEN
        RAISE EXCEPTION 'LLM refused to summarize the conversation (%)', said
            USING ERRCODE = 'external_routine_exception', DETAIL = 'A refusal is never stored as a summary.';
    ELSIF finish IN ('tool_calls', 'function_call', 'tool_use') THEN
        RAISE EXCEPTION 'LLM answered with a tool call instead of a summary (%)', said
            USING ERRCODE = 'external_routine_exception', DETAIL = 'Such an answer is never stored.';
    ELSIF finish = 'pause_turn' THEN
        RAISE EXCEPTION 'LLM paused before finishing its answer (%)', said
            USING ERRCODE = 'external_routine_exception', DETAIL = 'An unfinished answer is never stored as a summary.';
    ELSIF finish = 'model_context_window_exceeded' THEN
        RAISE EXCEPTION 'LLM answer was cut off at the model''s context window (%)', said
            USING ERRCODE = 'external_routine_exception', DETAIL = 'A truncated summary is never stored.',
                  HINT = 'Use a model with a larger context window for summaries, or lower the profile''s summary triggers.';
    ELSIF finish NOT IN ('stop', 'end_turn', 'stop_sequence') THEN
        RAISE EXCEPTION 'LLM answer did not end with a complete stop (%)', said
            USING ERRCODE = 'external_routine_exception', DETAIL = 'Only an answer that ended with a complete stop is stored.';
    END IF;
    IF content IS NULL OR btrim(content) = '' THEN
        RAISE EXCEPTION 'LLM answer is empty' USING ERRCODE = 'external_routine_exception';
    END IF;
    RETURN jsonb_build_object('content', btrim(content), 'model', b ->> 'model',
                              'usage', b -> 'usage', 'latency_ms', (r ->> 'latency_ms')::int);
END $$;

COMMENT ON FUNCTION ctxwin._llm_answer(jsonb, int) IS
'The summary text, model and usage of a successful LLM answer; raises for an answer that must not become a summary';

/*
 * The summary request of a plan (of _summary_plan) to the configured
 * provider, with retries: connection failures, timeouts and 5xx back off
 * exponentially; 429 and 529 wait as Retry-After says without counting as a
 * failed attempt (up to 3 such waits).  Returns the successful answer of
 * _llm_post, with "requests" (how many were sent); _llm_answer reads the
 * summary out of it.
 *
 * SECURITY DEFINER, so that roles allowed to summarize (granted EXECUTE)
 * can use the server's key without seeing it; and so it sends nothing but a
 * summary of a session its caller may read: of the plan it takes only the
 * session, the range and the instructions, checks them against the stored
 * session, and makes the request itself from stored data (_summary_request:
 * the profile's prompt, model and max_summary_tokens).
 */
CREATE FUNCTION ctxwin._llm_summarize(plan jsonb)
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
    retries int := coalesce(current_setting('ctxwin.llm_max_retries', true), '3')::int;
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

COMMENT ON FUNCTION ctxwin._llm_summarize(jsonb) IS
'The summary request of a plan to the configured LLM, made from stored data only, with retries and backoff; returns the successful answer, or raises';

REVOKE ALL ON FUNCTION ctxwin._llm_summarize(jsonb) FROM PUBLIC;

CREATE FUNCTION ctxwin._caller_sees_session(session uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_caller_sees_session'
LANGUAGE C STABLE STRICT
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._caller_sees_session(uuid) IS
'Whether the role that called into SECURITY DEFINER code may read a session (its privileges and row-level security)';

/*
 * After a failed LLM request (status NULL: no HTTP answer, such as a
 * connection failure or a timeout), whether and when to send it again; the
 * one retry policy of summarize_session and the worker.  failures: the
 * charged failures before this one; rate_waits: the waits for 429/529 so far.
 *  - other 4xx are refusals: {"retry": false, "refused": true}
 *  - 429 and 529 wait as Retry-After says (seconds, at most 60; else 1, 2,
 *    4 s), up to 3 times, without counting as a failure: "charged": false
 *  - everything else (timeouts, 408, 409, 5xx, 429/529 after 3 waits) backs
 *    off 0.25, 0.5, 1 ... s (at most 30), up to max_retries times
 */
CREATE FUNCTION ctxwin._llm_next_try(status int, retry_after text, failures int, rate_waits int, max_retries int)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE
    WHEN status IS NOT NULL AND NOT (status IN (408, 409, 429, 529) OR status >= 500)
        THEN '{"retry": false, "refused": true}'::jsonb
    WHEN status IN (429, 529) AND rate_waits < 3
        THEN jsonb_build_object('retry', true, 'refused', false, 'charged', false, 'wait',
                                CASE WHEN retry_after ~ '^\s*[0-9]{1,6}(\.[0-9]+)?\s*$'
                                     THEN least(retry_after::numeric, 60::numeric)
                                     ELSE least(power(2::float8, rate_waits::float8), 30::float8) END)
    WHEN failures >= max_retries
        THEN '{"retry": false, "refused": false}'::jsonb
    ELSE jsonb_build_object('retry', true, 'refused', false, 'charged', true,
                            'wait', least(0.25::float8 * power(2::float8, failures::float8), 30::float8))
END;

COMMENT ON FUNCTION ctxwin._llm_next_try(int, text, int, int, int) IS
'Whether and after how many seconds to send a failed LLM request again, and whether the failure counts';

-- A short description of an LLM error answer: status and the provider's message.
CREATE FUNCTION ctxwin._llm_error_text(r jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('HTTP %s: %s', r ->> 'status',
              left(coalesce(r -> 'body' -> 'error' ->> 'message', r -> 'body' ->> 'error', (r -> 'body')::text), 300));

COMMENT ON FUNCTION ctxwin._llm_error_text(jsonb) IS
'Status and message of an LLM error answer, for errors and last_error';

-- The newest message id a summary may end at: at most target, after the
-- current summary point, and not inside a tool group (the next message is no
-- tool result; an assistant message with calls is followed by a message).
CREATE FUNCTION ctxwin._summary_cut(p_session uuid, p_after bigint, p_target bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (
    SELECT max(m.id) FROM ctxwin.messages m
    LEFT JOIN ctxwin.messages nx ON nx.session_id = m.session_id AND nx.id = m.id + 1
    WHERE m.session_id = p_session AND m.id > p_after AND m.id <= p_target
      AND coalesce(nx.role, '') <> 'tool'
      AND NOT (m.tool_calls IS NOT NULL AND nx.id IS NULL));

COMMENT ON FUNCTION ctxwin._summary_cut(uuid, bigint, bigint) IS
'The last message id at or before a target where a summary may end without splitting a tool group';

-- Whether a summary trigger fires for a session now: context_status's
-- will_trigger, without its walk of the window.  Counts in the encoding in
-- effect now (the counters' own if the model did not change since).
CREATE FUNCTION ctxwin._session_due(p_session uuid)
RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s ctxwin.sessions;
    st ctxwin.session_settings;
    ut bigint;
BEGIN
    SELECT * INTO s FROM ctxwin.sessions x WHERE x.id = p_session;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT * INTO st FROM ctxwin.session_settings x WHERE x.session_id = p_session;
    ut := CASE WHEN s.count_encoding = st.encoding THEN s.unsummarized_tokens
               ELSE ctxwin._unsummarized_tokens(s.id, s.summary_through_id, st.encoding) END;
    -- min_recent -1: whether a trigger fires, whatever the newest messages
    RETURN ctxwin._should_queue(s.message_count - s.summary_through_id, ut,
                                ctxwin.messages_tokens(ctxwin.system_messages(s.system_prompt, s.conversation_summary,
                                                                              st.summary_placement), st.encoding),
                                st.max_messages_before_summary, st.max_tokens_before_summary,
                                st.trigger_ratio, st.context_window, -1);
END $$;

COMMENT ON FUNCTION ctxwin._session_due(uuid) IS 'Whether a summary trigger fires for the session now';

-- The unsummarized messages of a session up to an id, as chat messages.
CREATE FUNCTION ctxwin._summary_messages(p_session uuid, p_after bigint, p_through bigint)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT jsonb_agg(ctxwin._message_json(m.role, m.content, m.name, m.tool_call_id, m.tool_calls) ORDER BY m.id)
        FROM ctxwin.messages m
        WHERE m.session_id = p_session AND m.id > p_after AND m.id <= p_through);

COMMENT ON FUNCTION ctxwin._summary_messages(uuid, bigint, bigint) IS
'Messages of a session after one id and up to another, as chat messages, oldest first';

/*
 * The part of the messages after p_after, up to p_through, that one summary
 * request can carry: the longest run of whole tool groups whose transcript
 * has at most p_room tokens in the summary model's encoding.  When even the
 * first such run is longer, it is taken alone and its transcript is cut in
 * the middle.  Returns {"through": id, "transcript": text, "cut": bool}.  A
 * session whose summary model has a smaller window than its own model is so
 * summarized in several steps: it stays over its trigger, and the next
 * summary takes the next part.
 */
CREATE FUNCTION ctxwin._summary_fit(p_session uuid, p_after bigint, p_through bigint, p_room int,
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
      AND coalesce(nx.role, '') <> 'tool'
      AND NOT (m.tool_calls IS NOT NULL AND nx.id IS NULL);
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

COMMENT ON FUNCTION ctxwin._summary_fit(uuid, bigint, bigint, int, text) IS
'The longest run of messages after an id whose transcript fits a summary request, cut in the middle when one tool group alone is too long';

/*
 * The LLM request of a summary of a session's messages after p_after up to
 * p_through (a place where a summary may end), made from stored data only:
 * the profile's summary prompt, model and max_summary_tokens, the previous
 * summary and the messages' transcript.  The request fits the summary
 * model's window, so it may cover fewer messages: "through" says up to
 * where (see _summary_fit).  Returns through, transcript_cut, facts (hybrid),
 * answer_tokens, system_prompt, prompt and model.
 */
CREATE FUNCTION ctxwin._summary_request(p_session uuid, p_after bigint, p_through bigint, p_instructions text)
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
    model := coalesce(st.summary_model, current_setting('ctxwin.llm_model', true), 'gpt-4o-mini');
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

COMMENT ON FUNCTION ctxwin._summary_request(uuid, bigint, bigint, text) IS
'The LLM request of a summary, made from stored data only, within the summary model''s window';

/*
 * What the next summary of a session covers and, for the llm and hybrid
 * strategies, the request that makes it: the first half of a summary, read
 * in one transaction; _summary_finish writes the result in another (the
 * worker calls the LLM in between, with no transaction open).  NULL when
 * there is nothing to do: no trigger fires (unless forced), or every
 * unsummarized message is among the newest min_recent_messages or in an
 * unfinished tool group.  Without force, such a session leaves the
 * compaction queue (the next message that fires a trigger queues it again).
 */
CREATE FUNCTION ctxwin._summary_plan(p_session uuid, p_force boolean, p_instructions text)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s ctxwin.sessions;
    st ctxwin.session_settings;
    strategy text;
    through bigint;
    msgs jsonb;
    plan jsonb;
BEGIN
    -- the session's row stays locked until this transaction ends: nobody
    -- else summarizes or writes the session meanwhile, so no request is
    -- paid for a summary whose write would wait.  A row another
    -- transaction holds is not waited for.
    BEGIN
        SELECT * INTO s FROM ctxwin.sessions x WHERE x.id = p_session FOR NO KEY UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'session % is locked by another transaction', p_session
            USING ERRCODE = 'lock_not_available',
                  DETAIL = 'A transaction that writes or summarizes the session holds its row; no summary was requested.',
                  HINT = 'Try again when that transaction ends.';
    END;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- the worker holds no row while its request is in flight, but a claim
    IF ctxwin._session_claimed(p_session) THEN
        RAISE EXCEPTION 'session % is being summarized by another backend', p_session
            USING ERRCODE = 'lock_not_available',
                  HINT = 'Try again when that summary is done.';
    END IF;
    SELECT * INTO st FROM ctxwin.session_settings x WHERE x.session_id = p_session;
    IF p_force THEN
        -- cover the oldest unsummarized messages, keeping the newest
        -- min_recent_messages and tool groups whole
        through := ctxwin._summary_cut(p_session, s.summary_through_id, s.message_count - st.min_recent_messages);
        IF through IS NULL THEN
            RAISE NOTICE 'session % has nothing to summarize', p_session
                USING DETAIL = format('Its %s unsummarized messages are the newest it keeps verbatim (min_recent_messages = %s).',
                                      s.message_count - s.summary_through_id, st.min_recent_messages);
            RETURN NULL;
        END IF;
    ELSE
        IF ctxwin._session_due(p_session) THEN
            through := ctxwin._summary_cut(p_session, s.summary_through_id, s.message_count - st.min_recent_messages);
        END IF;
        IF through IS NULL THEN
            -- off the queue, or, if its counters say it is due but its
            -- messages do not (yet), looked at again in a minute
            PERFORM ctxwin._compaction_settle(p_session);
            RETURN NULL;
        END IF;
    END IF;

    strategy := coalesce(st.summary_strategy,
                         CASE WHEN current_setting('ctxwin.llm_provider', true) IN ('openai', 'anthropic')
                              THEN 'llm' ELSE 'extractive' END);
    plan := jsonb_build_object('session', p_session, 'strategy', strategy,
                               'after', s.summary_through_id, 'through', through,
                               'version', s.summary_version, 'encoding', st.encoding,
                               'max_tokens', st.max_summary_tokens, 'instructions', p_instructions);
    IF strategy = 'extractive' THEN
        RETURN plan;
    END IF;
    IF coalesce(current_setting('ctxwin.llm_provider', true), 'extractive') = 'extractive' THEN
        RAISE EXCEPTION 'summary strategy "%" needs an LLM, and none is configured', strategy
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Set the profile''s summary_strategy to ''extractive'', or configure ctxwin.llm_provider.';
    END IF;

    RETURN plan || ctxwin._summary_request(p_session, s.summary_through_id, through, p_instructions);
END $$;

COMMENT ON FUNCTION ctxwin._summary_plan(uuid, boolean, text) IS
'What the next summary of a session covers and the LLM request that makes it; NULL when there is nothing to summarize';

/*
 * The second half of a summary: makes the extractive summary, or reads the
 * LLM's answer, checks it and writes it with a compare-and-set (only if the
 * session's summary did not change since the plan), with its summaries row,
 * flush event and NOTIFY.  Raises, leaving everything as it was, for an
 * answer that must not become a summary.
 */
CREATE FUNCTION ctxwin._summary_finish(plan jsonb, answer jsonb)
RETURNS ctxwin.summaries
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sid uuid := plan ->> 'session';
    strategy text := plan ->> 'strategy';
    after bigint := (plan ->> 'after')::bigint;
    through bigint := (plan ->> 'through')::bigint;
    enc text := plan ->> 'encoding';
    max_tokens int := (plan ->> 'max_tokens')::int;
    prev text;
    content text;
    tokens int;
    t0 timestamptz := clock_timestamp();
    latency int;
    v int;
    a jsonb;
    used_model text;
    usage jsonb;
    result ctxwin.summaries;
BEGIN
    -- locked since the plan, unless the LLM was called in between (the
    -- worker): then a row another transaction holds is not waited for
    SELECT x.conversation_summary INTO prev FROM ctxwin.sessions x
    WHERE x.id = sid AND x.summary_through_id = after AND x.summary_version = (plan ->> 'version')::int
    FOR NO KEY UPDATE NOWAIT;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the summary of session % changed while it was being summarized', sid
            USING ERRCODE = 'serialization_failure',
                  DETAIL = 'The new summary was discarded.',
                  HINT = 'Call summarize_session again.';
    END IF;
    IF strategy = 'extractive' THEN
        content := ctxwin.extractive_summary(prev, ctxwin._summary_messages(sid, after, through), max_tokens,
                                             enc, plan ->> 'instructions');
        latency := (extract(epoch FROM clock_timestamp() - t0) * 1000::numeric)::int;
    ELSE
        a := ctxwin._llm_answer(answer, (plan ->> 'answer_tokens')::int);
        content := concat_ws(E'\n\n', plan ->> 'facts', a ->> 'content');
        used_model := coalesce(a ->> 'model', plan ->> 'model');
        usage := a -> 'usage';
        latency := coalesce((answer ->> 'total_ms')::int, (a ->> 'latency_ms')::int);
    END IF;
    IF content IS NULL OR btrim(content) = '' THEN
        RAISE EXCEPTION 'the % summarizer returned an empty summary', strategy
            USING ERRCODE = 'data_exception', DETAIL = 'The session was left unchanged.';
    END IF;
    tokens := ctxwin.count_tokens(content, enc);
    IF tokens > max_tokens THEN
        RAISE EXCEPTION 'the % summarizer returned % tokens, over max_summary_tokens (%)', strategy, tokens, max_tokens
            USING ERRCODE = 'data_exception', DETAIL = 'The session was left unchanged.';
    END IF;

    -- compare-and-set: only if nobody moved the summary point meanwhile.
    -- The sessions trigger derives the rest: summary_version and
    -- summary_updated_at, and the failures, retry time and last error cleared.
    UPDATE ctxwin.sessions x
    SET conversation_summary = content,
        summary_through_id = through
    WHERE x.id = sid AND x.summary_through_id = after AND x.summary_version = (plan ->> 'version')::int
    RETURNING x.summary_version INTO v;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the summary of session % changed while it was being summarized', sid
            USING ERRCODE = 'serialization_failure',
                  DETAIL = 'The new summary was discarded.',
                  HINT = 'Call summarize_session again.';
    END IF;

    INSERT INTO ctxwin.summaries (session_id, version, from_id, through_id, content, token_count,
                                  strategy, model, usage, latency_ms)
    VALUES (sid, v, after + 1, through, content, tokens, strategy, used_model, usage, latency)
    RETURNING * INTO result;
    INSERT INTO ctxwin.flush_events (session_id, id, from_id, through_id)
    VALUES (sid, v, after + 1, through);
    IF coalesce(current_setting('ctxwin.flush_notify', true), 'on') NOT IN ('off', 'false', '0') THEN
        PERFORM pg_notify('ctxwin_flush', json_build_object('session_id', sid, 'id', v, 'from_id', after + 1,
                                                            'through_id', through)::text);
    END IF;
    RETURN result;
END $$;

COMMENT ON FUNCTION ctxwin._summary_finish(jsonb, jsonb) IS
'Makes or reads the summary a plan asks for and writes it with a compare-and-set, with its summaries row and flush event';

CREATE FUNCTION ctxwin.summarize_session(session uuid, force boolean DEFAULT false,
                                         instructions text DEFAULT NULL)
RETURNS ctxwin.summaries
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    plan jsonb;
    answer jsonb;
    t0 timestamptz;
BEGIN
    PERFORM ctxwin._session_must_exist(session);
    IF force IS NULL THEN
        RAISE EXCEPTION 'force must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- one summarizer per session at a time: _summary_plan locks the row
    -- (refusing at once a row another transaction holds, or a session the
    -- worker has a request in flight for) until this transaction ends
    plan := ctxwin._summary_plan(session, force, instructions);
    IF plan IS NULL THEN
        RETURN NULL;
    END IF;
    IF plan ->> 'strategy' <> 'extractive' THEN
        t0 := clock_timestamp();
        answer := ctxwin._llm_summarize(plan);
        answer := answer || jsonb_build_object('total_ms', (extract(epoch FROM clock_timestamp() - t0) * 1000::numeric)::int);
    END IF;
    RETURN ctxwin._summary_finish(plan, answer);
END $$;

COMMENT ON FUNCTION ctxwin.summarize_session(uuid, boolean, text) IS
'Summarizes the oldest unsummarized messages of a session now, in this backend (all but the newest min_recent_messages, tool groups whole); without force only when a trigger fires. Writes the session, a summaries row and a flush event in this transaction.';

-- A failed compaction attempt: counted (the circuit breaker), recorded, and
-- not retried by the worker for 1, 4, 16 ... seconds (at most an hour).
-- The session stays queued.  In C: it locks the row as the caller (its
-- privileges and row-level security apply; NULL if it cannot see it), then
-- writes the bookkeeping columns as ctxwin's own code, all but the error
-- text derived from the row.
CREATE FUNCTION ctxwin._compaction_failed(p_session uuid, p_error text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'compaction_failed'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._compaction_failed(uuid, text) IS
'Records a failed compaction of a session: failure count, error, and when the worker may try again (returned)';

-- A queued session with nothing to summarize now (every unsummarized
-- message among the newest min_recent_messages or in an unanswered tool
-- group, or no trigger firing): it leaves the queue, or, if its counters
-- say it is due, is looked at again in a minute (or at its next message).
-- In C, like _compaction_failed: the row locked as the caller, and nothing
-- done unless the session really has nothing to summarize.
CREATE FUNCTION ctxwin._compaction_settle(p_session uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'compaction_settle'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._compaction_settle(uuid) IS
'Takes a queued session with nothing to summarize off the queue, or looks at it again in a minute if its counters say it is due';

-- Whether the background worker has a request in flight for a session (it
-- holds no row then, but a lock that SQL cannot take).
CREATE FUNCTION ctxwin._session_claimed(p_session uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'session_claimed'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION ctxwin._session_claimed(uuid) IS
'Whether the background worker has an LLM request in flight for a session';

CREATE FUNCTION ctxwin.compact(max_sessions int DEFAULT 100)
RETURNS int
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sid uuid;
    done int := 0;
    taken int := 0;
    r ctxwin.summaries;
    max_failures int := coalesce(current_setting('ctxwin.max_failures', true), '3')::int;
    last_at timestamptz;
    last_id uuid;
BEGIN
    IF max_sessions IS NULL OR max_sessions <= 0 THEN
        RAISE EXCEPTION 'max_sessions must be greater than zero' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WHILE taken < max_sessions LOOP
        -- The oldest queued session after the last one taken that nobody
        -- else holds, locked until this transaction ends: a row another
        -- transaction holds is passed over, not waited for (SKIP LOCKED
        -- looks further down the queue), and so is a session the worker
        -- has a request in flight for.  One at a time: the rows not taken
        -- yet stay free for others meanwhile.
        SELECT x.id, x.compaction_queued_at INTO sid, last_at
        FROM ctxwin.sessions x
        WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures < max_failures
          AND (last_id IS NULL OR (x.compaction_queued_at, x.id) > (last_at, last_id))
          AND NOT ctxwin._session_claimed(x.id)
        ORDER BY x.compaction_queued_at, x.id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        last_id := sid;
        taken := taken + 1;
        -- claimed by the worker between the look and the lock
        CONTINUE WHEN ctxwin._session_claimed(sid);
        -- each session in a subtransaction of its own
        BEGIN
            r := ctxwin.summarize_session(sid, false);
            IF r.session_id IS NOT NULL THEN
                done := done + 1;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            -- recorded, and the session stays queued for a later attempt
            PERFORM ctxwin._compaction_failed(sid, SQLERRM);
        END;
    END LOOP;
    RETURN done;
END $$;

COMMENT ON FUNCTION ctxwin.compact(int) IS
'Summarizes up to max_sessions queued sessions in this backend, oldest queued first; sessions whose row another transaction holds, that the worker is summarizing, or whose last ctxwin.max_failures compactions failed, are skipped. Returns how many were summarized.';

------------------------------------------------------------------------------
-- The background worker (with ctxwin in shared_preload_libraries)
------------------------------------------------------------------------------

-- Wakes this database's worker when the current transaction commits; the
-- triggers call it when a session enters the compaction queue.  Does
-- nothing without the worker.  Resolves no names (pure C).
CREATE FUNCTION ctxwin._wake_worker()
RETURNS void
AS 'MODULE_PATHNAME', 'ctxwin_wake_worker'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION ctxwin._wake_worker() IS
'Wakes the background worker of this database when the transaction commits';

CREATE FUNCTION ctxwin._worker_status(
    OUT database text, OUT pid int, OUT state text, OUT started_at timestamptz, OUT restarts int,
    OUT queue_depth bigint, OUT held_back bigint, OUT in_flight int, OUT requests bigint,
    OUT done bigint, OUT failed bigint, OUT retries bigint, OUT rate_limited bigint,
    OUT latency_p50_ms int, OUT latency_p95_ms int, OUT latency_p99_ms int,
    OUT lag_p50_ms int, OUT lag_p95_ms int, OUT last_sweep_at timestamptz,
    OUT last_error text, OUT last_error_session uuid, OUT last_error_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ctxwin_worker_status'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._worker_status() IS
'The background workers, one row per database of ctxwin.databases (see the view ctxwin.worker_status)';

-- Whether the calling role may read a session: true for superusers and
-- members of pg_read_all_stats, else whether a query of ctxwin.sessions as
-- the caller (table privileges and row-level security) finds it.
CREATE FUNCTION ctxwin._session_visible(p_session uuid)
RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_session IS NULL THEN
        RETURN false;
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user)
       OR pg_has_role('pg_read_all_stats'::name, 'USAGE'::text) THEN
        RETURN true;
    END IF;
    IF NOT has_table_privilege('ctxwin.sessions'::text, 'SELECT'::text) THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT FROM ctxwin.sessions s WHERE s.id OPERATOR(pg_catalog.=) p_session);
END $$;

COMMENT ON FUNCTION ctxwin._session_visible(uuid) IS
'Whether the calling role may read a session (superusers and pg_read_all_stats: every one)';

-- The last error names a session and quotes an LLM's error answer: shown
-- only to a role that may read that session.
CREATE VIEW ctxwin.worker_status WITH (security_invoker = true) AS
SELECT w.database, w.pid, w.state, w.started_at, w.restarts, w.queue_depth, w.held_back,
       w.in_flight, w.requests, w.done, w.failed, w.retries, w.rate_limited,
       w.latency_p50_ms, w.latency_p95_ms, w.latency_p99_ms, w.lag_p50_ms, w.lag_p95_ms,
       w.last_sweep_at,
       CASE WHEN v.visible THEN w.last_error END AS last_error,
       CASE WHEN v.visible THEN w.last_error_session END AS last_error_session,
       CASE WHEN v.visible THEN w.last_error_at END AS last_error_at
FROM ctxwin._worker_status() w
CROSS JOIN LATERAL (SELECT ctxwin._session_visible(w.last_error_session) AS visible) v;

-- rows are filtered by the caller's privileges (see _worker_status and
-- _session_visible)
GRANT SELECT ON ctxwin.worker_status TO PUBLIC;

COMMENT ON VIEW ctxwin.worker_status IS
'The background workers: state, queue depth, requests in flight, done, failed, retries, request latency and queue-to-summary lag percentiles, last error. Other roles than superusers and pg_read_all_stats see their own database only; empty without shared_preload_libraries.';

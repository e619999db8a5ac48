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
    builtin boolean NOT NULL DEFAULT false,
    -- list prices per million tokens (NULL: unknown, never taken as 0)
    input_price numeric CHECK (input_price >= 0::numeric),
    cached_input_price numeric CHECK (cached_input_price >= 0::numeric),
    cache_write_price numeric CHECK (cache_write_price >= 0::numeric),
    output_price numeric CHECK (output_price >= 0::numeric)
);

COMMENT ON TABLE ctxwin.models IS
'LLM models: the encoding their tokens are counted with, their context window and their prices';
COMMENT ON COLUMN ctxwin.models.input_price IS
'Price per million input tokens that are neither cache reads nor cache writes (NULL: unknown)';
COMMENT ON COLUMN ctxwin.models.cached_input_price IS
'Price per million input tokens read from the provider''s prompt cache (NULL: unknown)';
COMMENT ON COLUMN ctxwin.models.cache_write_price IS
'Price per million input tokens written to the provider''s prompt cache (Anthropic''s 5-minute cache writes; NULL: unknown)';
COMMENT ON COLUMN ctxwin.models.output_price IS
'Price per million output tokens, reasoning tokens included (NULL: unknown)';

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
    summary_strategy text CHECK (summary_strategy IN ('llm', 'hybrid', 'extractive', 'app')),
    summary_model text,
    summary_prompt text,
    summary_placement text NOT NULL DEFAULT 'system'
        CHECK (summary_placement IN ('system', 'message')),
    builtin boolean NOT NULL DEFAULT false,
    window_policy text NOT NULL DEFAULT 'stable' CHECK (window_policy IN ('stable', 'sliding')),
    window_low_water real NOT NULL DEFAULT 0.6
        CHECK (window_low_water > 0::real AND window_low_water < 1::real),
    cache_ttl interval NOT NULL DEFAULT '00:05:00' CHECK (cache_ttl >= '00:00:00'::interval),
    keep_tool_results int CHECK (keep_tool_results >= 0),
    tool_result_max_tokens int CHECK (tool_result_max_tokens > 0),
    clear_tool_inputs boolean,
    exclude_tools text[] CHECK (array_position(exclude_tools, NULL) IS NULL),
    clear_at_least int CHECK (clear_at_least >= 0),
    search boolean NOT NULL DEFAULT true
);

COMMENT ON TABLE ctxwin.profiles IS
'Per-agent settings: model, window, summary triggers (NULL: off), recent messages kept, response reserve and summary settings';
COMMENT ON COLUMN ctxwin.profiles.window_policy IS
'stable: the window keeps its first message while the messages fit, then jumps to window_low_water of the budget (prompt caches hit); sliding: the newest messages that fit';
COMMENT ON COLUMN ctxwin.profiles.window_low_water IS
'Share of the budget a stable window fills after a jump';
COMMENT ON COLUMN ctxwin.profiles.cache_ttl IS
'How long the provider keeps a prompt cache: a summary due under a stable window waits for a jump, or for the session to be idle this long';
COMMENT ON COLUMN ctxwin.profiles.keep_tool_results IS
'The newest tool results a window sends whole; older ones are sent as a placeholder naming the tool, the call and the message (NULL: none cleared)';
COMMENT ON COLUMN ctxwin.profiles.tool_result_max_tokens IS
'A tool result longer than this is sent cut in the middle (NULL: never cut)';
COMMENT ON COLUMN ctxwin.profiles.clear_tool_inputs IS
'Whether the arguments of the calls whose results are cleared are sent as {} too';
COMMENT ON COLUMN ctxwin.profiles.exclude_tools IS
'Tools whose results are never cleared nor cut';
COMMENT ON COLUMN ctxwin.profiles.clear_at_least IS
'Tool results are cleared in batches of at least this many tokens (NULL or 0: as soon as they are older than keep_tool_results)';
COMMENT ON COLUMN ctxwin.profiles.search IS
'Whether the messages of its sessions go into the search index (ctxwin.search, conversation_search). Off: they cost an insert no index entries, and a search of such a session is an error; a change applies to the messages stored after it';

CREATE FUNCTION ctxwin._builtin_row_replace() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A user's row under a built-in name takes over the built-in row in
        -- place (deleting it first would break the profiles and sessions
        -- that reference it); the insert itself is then skipped.  The row
        -- is updated in the table the trigger fires on: under Citus that
        -- is each node's copy of the reference table (models_102008, say),
        -- where a query of ctxwin.models would be a distributed query,
        -- which Citus refuses on a shard.
        IF NOT NEW.builtin AND starts_with(TG_TABLE_NAME, 'models') THEN
            EXECUTE format('UPDATE %I.%I
                SET encoding = $1.encoding, context_window = $1.context_window,
                    provider = $1.provider, builtin = false,
                    input_price = $1.input_price, cached_input_price = $1.cached_input_price,
                    cache_write_price = $1.cache_write_price, output_price = $1.output_price
                WHERE name = $1.name AND builtin', TG_TABLE_SCHEMA, TG_TABLE_NAME) USING NEW;
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n > 0 THEN
                RETURN NULL;
            END IF;
        ELSIF NOT NEW.builtin THEN
            EXECUTE format('UPDATE %I.%I
                SET model = $1.model, context_window = $1.context_window, trigger_ratio = $1.trigger_ratio,
                    max_messages_before_summary = $1.max_messages_before_summary,
                    max_tokens_before_summary = $1.max_tokens_before_summary,
                    min_recent_messages = $1.min_recent_messages, response_reserve = $1.response_reserve,
                    max_summary_tokens = $1.max_summary_tokens, summary_strategy = $1.summary_strategy,
                    summary_model = $1.summary_model, summary_prompt = $1.summary_prompt,
                    summary_placement = $1.summary_placement, window_policy = $1.window_policy,
                    window_low_water = $1.window_low_water, cache_ttl = $1.cache_ttl,
                    keep_tool_results = $1.keep_tool_results,
                    tool_result_max_tokens = $1.tool_result_max_tokens,
                    clear_tool_inputs = $1.clear_tool_inputs, exclude_tools = $1.exclude_tools,
                    clear_at_least = $1.clear_at_least, builtin = false
                WHERE name = $1.name AND builtin', TG_TABLE_SCHEMA, TG_TABLE_NAME) USING NEW;
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n > 0 THEN
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
-- tiktoken vocabulary, which can undercount; keep a response_reserve (and
-- record_usage calibrates them: see 90_usage.sql).
--
-- Prices: the providers' public list prices in USD per million tokens for
-- standard (not batch, not priority) requests.  OpenAI bills no cache
-- writes and reports none; its older models have no prompt cache.  Gemini's
-- prices depend on the prompt's length (and its cache on storage time), which
-- one price per column cannot say: left NULL (unknown).
INSERT INTO ctxwin.models (name, encoding, context_window, provider, builtin,
                           input_price, cached_input_price, cache_write_price, output_price) VALUES
    ('gpt-5',             'o200k_base',   400000, 'openai',    true,  1.25, 0.125,  NULL,    10),
    ('gpt-5-mini',        'o200k_base',   400000, 'openai',    true,  0.25, 0.025,  NULL,     2),
    ('gpt-5-nano',        'o200k_base',   400000, 'openai',    true,  0.05, 0.005,  NULL,  0.40),
    ('gpt-4.1',           'o200k_base',  1047576, 'openai',    true,     2,  0.50,  NULL,     8),
    ('gpt-4.1-mini',      'o200k_base',  1047576, 'openai',    true,  0.40,  0.10,  NULL,  1.60),
    ('gpt-4.1-nano',      'o200k_base',  1047576, 'openai',    true,  0.10, 0.025,  NULL,  0.40),
    ('gpt-4o',            'o200k_base',   128000, 'openai',    true,  2.50,  1.25,  NULL,    10),
    ('gpt-4o-mini',       'o200k_base',   128000, 'openai',    true,  0.15, 0.075,  NULL,  0.60),
    ('o1',                'o200k_base',   200000, 'openai',    true,    15,  7.50,  NULL,    60),
    ('o3',                'o200k_base',   200000, 'openai',    true,     2,  0.50,  NULL,     8),
    ('o3-mini',           'o200k_base',   200000, 'openai',    true,  1.10,  0.55,  NULL,  4.40),
    ('o4-mini',           'o200k_base',   200000, 'openai',    true,  1.10, 0.275,  NULL,  4.40),
    ('gpt-4-turbo',       'cl100k_base',  128000, 'openai',    true,    10,  NULL,  NULL,    30),
    ('gpt-4',             'cl100k_base',    8192, 'openai',    true,    30,  NULL,  NULL,    60),
    ('gpt-4-32k',         'cl100k_base',   32768, 'openai',    true,    60,  NULL,  NULL,   120),
    ('gpt-3.5-turbo',     'cl100k_base',   16385, 'openai',    true,  0.50,  NULL,  NULL,  1.50),
    ('claude-opus-4-1',   'cl100k_base',  200000, 'anthropic', true,    15,  1.50, 18.75,    75),
    ('claude-opus-4',     'cl100k_base',  200000, 'anthropic', true,    15,  1.50, 18.75,    75),
    ('claude-sonnet-4-5', 'cl100k_base',  200000, 'anthropic', true,     3,  0.30,  3.75,    15),
    ('claude-sonnet-4',   'cl100k_base',  200000, 'anthropic', true,     3,  0.30,  3.75,    15),
    ('claude-haiku-4-5',  'cl100k_base',  200000, 'anthropic', true,     1,  0.10,  1.25,     5),
    ('claude-3-7-sonnet', 'cl100k_base',  200000, 'anthropic', true,     3,  0.30,  3.75,    15),
    ('claude-3-5-sonnet', 'cl100k_base',  200000, 'anthropic', true,     3,  0.30,  3.75,    15),
    ('claude-3-5-haiku',  'cl100k_base',  200000, 'anthropic', true,  0.80,  0.08,     1,     4),
    ('gemini-2.5-pro',    'o200k_base',  1048576, 'google',    true,  NULL,  NULL,  NULL,  NULL),
    ('gemini-2.5-flash',  'o200k_base',  1048576, 'google',    true,  NULL,  NULL,  NULL,  NULL),
    ('gemini-2.0-flash',  'o200k_base',  1048576, 'google',    true,  NULL,  NULL,  NULL,  NULL),
    ('gemini-1.5-pro',    'o200k_base',  2097152, 'google',    true,  NULL,  NULL,  NULL,  NULL),
    ('gemini-1.5-flash',  'o200k_base',  1048576, 'google',    true,  NULL,  NULL,  NULL,  NULL);

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
    updated_at timestamptz NOT NULL DEFAULT now(),
    summary_segments int[]
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
'Messages in the session, which is also the id of the newest one (retracted messages included: ids are never reused)';
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
COMMENT ON COLUMN ctxwin.sessions.summary_segments IS
'The length in characters of each segment of conversation_summary, oldest first, when it has more than one (joined by a blank line); NULL: one segment, or no summary';

-- Who writes what: applications write profile, system_prompt, metadata,
-- conversation_summary and summary_through_id (checked by
-- _sessions_maintain); every other column is ctxwin's bookkeeping, written
-- by its triggers and C code, or by the table's owner (a restore, a
-- superuser).  The guard is in C (src/ingest/sessions_guard.c): it runs on every
-- update through SQL, the insert trigger's UPDATE of the counters included;
-- where that write is made directly (src/ingest/session_write.c), it is ctxwin's
-- own and the guard would let it pass.
CREATE FUNCTION ctxwin._sessions_guard() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_sessions_guard'
LANGUAGE C;

COMMENT ON FUNCTION ctxwin._sessions_guard() IS
'Trigger on sessions: refuses writes of the columns ctxwin maintains by roles that do not own the table';

-- (before sessions_maintain_*: triggers fire in the order of their names)
CREATE TRIGGER sessions_guard BEFORE INSERT OR UPDATE ON ctxwin.sessions
    FOR EACH ROW EXECUTE FUNCTION ctxwin._sessions_guard();

-- Messages are a plain table, or, where ctxwin.messages_partitions is set
-- (to 2 .. 1024) when the extension is created, a table hash-partitioned
-- by session into that many partitions, ctxwin.messages_p0, _p1 ...: for a
-- very large table on one node (each partition vacuumed and indexed on its
-- own), with no change to the API.  Every partition's rows are dumped by
-- pg_dump as the table's are.
DO $$
DECLARE
    setting text := current_setting('ctxwin.messages_partitions', true);
    n int;
BEGIN
    IF coalesce(setting, '') !~ '^\s*[0-9]{1,4}\s*$' AND coalesce(setting, '') <> '' THEN
        RAISE EXCEPTION 'invalid value for ctxwin.messages_partitions: "%"', setting
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Set it to 0 (a plain table) or to a number of partitions from 2 to 1024.';
    END IF;
    n := coalesce(nullif(trim(setting), ''), '0')::int;
    IF n = 1 OR n > 1024 THEN
        RAISE EXCEPTION 'invalid value for ctxwin.messages_partitions: %', n
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Set it to 0 (a plain table) or to a number of partitions from 2 to 1024.';
    END IF;
    EXECUTE $sql$
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
    client_key text,
    content_parts jsonb,
    retracted_at timestamptz,
    searchable boolean NOT NULL DEFAULT true,
    PRIMARY KEY (session_id, id)
)$sql$ || CASE WHEN n > 0 THEN ' PARTITION BY HASH (session_id)' ELSE '' END;
    FOR i IN 0 .. n - 1 LOOP
        EXECUTE format('CREATE TABLE ctxwin.%I PARTITION OF ctxwin.messages FOR VALUES WITH (MODULUS %s, REMAINDER %s)',
                       'messages_p' || i, n, i);
        PERFORM pg_catalog.pg_extension_config_dump(format('ctxwin.%I', 'messages_p' || i)::regclass, '');
    END LOOP;
END $$;

COMMENT ON TABLE ctxwin.messages IS
'Chat messages, append-only; id is the position in the session (1, 2, 3 ... in commit order), set by ctxwin';
COMMENT ON COLUMN ctxwin.messages.token_count IS
'Tokens of the message with its overhead, counted with token_encoding when it was inserted';
COMMENT ON COLUMN ctxwin.messages.client_key IS
'The key the application gave the message (append_messages), unique in its session; NULL: none';
COMMENT ON COLUMN ctxwin.messages.content_parts IS
'The content as an array of parts (text and images, OpenAI''s or Anthropic''s shape), as given; content then holds the text of its text parts, joined by a blank line. NULL: a plain text';
COMMENT ON COLUMN ctxwin.messages.retracted_at IS
'When ctxwin.retract() took the message back: it stays stored, but leaves every later window, summary, search and count. NULL: not retracted';
COMMENT ON COLUMN ctxwin.messages.searchable IS
'Whether the search index holds the message: its profile''s search setting when it was stored (set by ctxwin)';
-- a client's own key of a message (a framework's message id, a hash of a
-- retried request's message): stored once per session
CREATE UNIQUE INDEX messages_client_key ON ctxwin.messages (session_id, client_key)
    WHERE client_key IS NOT NULL;

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
    segments int[],
    retracted_at timestamptz,
    PRIMARY KEY (session_id, version),
    CHECK (from_id <= through_id)
);

COMMENT ON TABLE ctxwin.summaries IS
'Every summary made, append-only: the range it newly covers, its text, strategy, model, usage and latency';
COMMENT ON COLUMN ctxwin.summaries.segments IS
'The segments of content as the session''s summary_segments holds them (NULL: one); its newest segment, the last, is what this summary newly wrote';
COMMENT ON COLUMN ctxwin.summaries.retracted_at IS
'When a retract took back a message this summary covers: it is never sent again. NULL: in effect';

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
AS 'MODULE_PATHNAME', 'ctxwin_system_messages'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.system_messages(text, text, text) IS
'The system messages that carry a session''s system prompt and summary, per summary_placement';

CREATE FUNCTION ctxwin.messages_tokens(messages jsonb, encoding text)
RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
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
       p.summary_strategy, p.summary_model, p.summary_prompt, p.summary_placement,
       p.window_policy, p.window_low_water, p.cache_ttl,
       p.keep_tool_results, p.tool_result_max_tokens, p.clear_tool_inputs, p.exclude_tools,
       p.clear_at_least
FROM ctxwin.sessions s
JOIN ctxwin.profiles p ON p.name = s.profile
JOIN ctxwin.models m ON m.name = p.model;

COMMENT ON VIEW ctxwin.session_settings IS
'Each session with the settings of its profile and model in effect now';

-- rows are those of sessions the caller may read (security_invoker)
GRANT SELECT ON ctxwin.session_settings TO PUBLIC;


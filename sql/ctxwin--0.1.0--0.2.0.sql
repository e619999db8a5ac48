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

-- The tables this update changes, and the view it replaces, locked before it
-- changes anything, all at once.  An update holds every lock it takes until
-- it commits: taken one by one as the statements below come to them, they
-- would meet the application's transactions, which take them in another
-- order, and PostgreSQL would end one side as a deadlock, sometimes the
-- application's insert.  Each lock waits at most 100 ms (and at most half
-- of deadlock_timeout, so that the update is always the one that gives way,
-- releasing what it took), then the whole attempt starts again, for up to a
-- minute.  The tables an insert only reads (models, profiles) and those the
-- worker writes come first: a long reader of one of them (a report, pg_dump)
-- makes the attempts wait while they hold nothing an insert needs.  Then the
-- messages and their sessions, in the order an insert takes them, and last
-- the view session_settings (whose tables are locked by then).  Once it holds
-- them the update takes about 0.1 s: that is how long an insert waits for it.
-- What is proportional to the data (the search index) is left to build after
-- it (pending_indexes() below).
DO $$
DECLARE
    tries int := 0;
    timeout text := current_setting('lock_timeout');
    wait_ms int := least(100, greatest(1, (extract(epoch FROM current_setting('deadlock_timeout')::interval) * 500)::int));
BEGIN
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
            LOCK TABLE ctxwin.models, ctxwin.profiles, ctxwin.summaries, ctxwin.flush_events,
                       ctxwin.messages, ctxwin.sessions, ctxwin.session_settings IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            tries := tries + 1;
            IF tries >= 500 THEN
                RAISE EXCEPTION 'could not lock ctxwin''s tables for the update'
                    USING ERRCODE = 'lock_not_available',
                          DETAIL = format('%s attempts found one of them held by another transaction.', tries),
                          HINT = 'Look for long transactions in pg_stat_activity, end them, and run ALTER EXTENSION ctxwin UPDATE again.';
            END IF;
            PERFORM pg_sleep(0.01 + 0.05 * random());
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', timeout, true);
END $$;

------------------------------------------------------------------------------
-- Functions 0.2.0 no longer has.  The window and the status are C
-- functions (src/window/window.c, src/window/format.c, src/window/status.c):
-- the PL/pgSQL walk and the Anthropic conversion they replace are gone.
-- Whether a session argument names a session is checked in C
-- (src/session/session.c), by every function that takes one.
------------------------------------------------------------------------------

DROP FUNCTION ctxwin._window_walk(uuid, bigint, int, text);

DROP FUNCTION ctxwin._to_anthropic(jsonb);

DROP FUNCTION ctxwin._arguments_object(text);

DROP FUNCTION ctxwin._session_must_exist(uuid);

------------------------------------------------------------------------------
-- Counting tokens (sql/install/10_tokenizer.sql)
--
-- The C functions carry the ctxwin_ prefix (the library's symbols are
-- global in the server); the old names stay in the library for databases
-- still at 0.1.0 (src/compat/symbols_0_1.c).  The counting functions become
-- IMMUTABLE (0.1.0 declared them STABLE); an index a user built on them
-- through a function of their own stays valid.
------------------------------------------------------------------------------

-- The counting functions are IMMUTABLE, so that a token count can define an
-- index expression or a stored generated column.  Their encoding argument
-- names an encoding or a model ctxwin ships (a built-in row of
-- ctxwin.models), both known to the library without reading a table
-- (src/tokenizer/tokenizer.c); a model a user adds to ctxwin.models is counted in the
-- encoding model_encoding(model) reads from its row.  A user's row that
-- replaces a built-in one changes what the session functions count with,
-- not what these do: they keep the model's published encoding.
CREATE OR REPLACE FUNCTION ctxwin.count_tokens(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tokens'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_tokens(text, text) IS
'Number of tokens of a text: exact with tiktoken''s encode_ordinary for cl100k_base and o200k_base; estimates for chars4 (characters / 4) and chars3.5 (characters / 3.5, rounded up); a model ctxwin ships names its published encoding (for a model added to ctxwin.models, pass model_encoding(model))';

CREATE OR REPLACE FUNCTION ctxwin.tokenize(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int[]
AS 'MODULE_PATHNAME', 'ctxwin_tokenize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.detokenize(ids int[], encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_detokenize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The encoding of a model of ctxwin.models, read from its row as the
-- caller: STABLE, the way to count for a model the library does not know,
-- count_tokens(t, model_encoding('my-model')).
CREATE FUNCTION ctxwin.model_encoding(model text)
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_model_encoding'
LANGUAGE C STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.model_encoding(text) IS
'Encoding a model is counted with, from its row of ctxwin.models (a model ctxwin ships whose row is gone keeps its built-in encoding); an encoding''s name is its own';

CREATE FUNCTION ctxwin._builtin_models(OUT name text, OUT encoding text, OUT provider text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ctxwin_builtin_models'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._builtin_models() IS
'The models ctxwin ships, with the encoding and provider the counting functions take for them without reading ctxwin.models';

CREATE OR REPLACE FUNCTION ctxwin.count_message_tokens(message jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_message_tokens'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_message_tokens(jsonb, text) IS
'Tokens of one chat message in OpenAI form: 4 + the tokens of role, content, name and tool_call_id + the tokens of the tool_calls JSON text; a content array of parts costs the text of its text parts (joined by a blank line) and its images by the rule of the model''s provider (an encoding: OpenAI''s at GPT-4o''s prices)';

-- What tools cost a request (src/window/tools.c): OpenAI's published formula for an
-- encoding or a model ctxwin ships of any provider but anthropic;
-- Anthropic's tool-use system prompt and the tools' JSON text for a built-in
-- model of provider anthropic.  (build_context takes the provider of the
-- session's model from its row, a user's model's too.)
CREATE FUNCTION ctxwin.count_tool_tokens(tools jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tool_tokens'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.count_tool_tokens(jsonb, text) IS
'Tokens that OpenAI function tools ([{"type": "function", "function": {...}}]) cost a request, in an encoding (OpenAI''s rule) or for a model ctxwin ships (the rule of its provider); build_context subtracts them from the budget';

CREATE OR REPLACE FUNCTION ctxwin.message_tokens(role text, content text, name text, tool_call_id text,
                                      tool_calls jsonb, encoding text)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_message_tokens'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.truncate_middle(t text, max_tokens int, encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_truncate_middle'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._fit_contents(contents text[], room int, encoding text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'ctxwin_fit_contents'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._contents_least(contents text[], encoding text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ctxwin_contents_least'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

------------------------------------------------------------------------------
-- Tables (sql/install/20_tables.sql)
--
-- The columns 0.2.0 adds, table by table, in the order a fresh install has
-- them (test/upgrade.pl compares the two schemas).  Each comes without a
-- default or with a constant one: a change of the catalog, no table
-- rewritten.  The profiles and sessions a database has keep what they sent
-- to the LLM.
------------------------------------------------------------------------------

-- Prices on ctxwin.models, per million tokens (NULL: unknown).
ALTER TABLE ctxwin.models
    ADD COLUMN input_price numeric CHECK (input_price >= 0::numeric),
    ADD COLUMN cached_input_price numeric CHECK (cached_input_price >= 0::numeric),
    ADD COLUMN cache_write_price numeric CHECK (cache_write_price >= 0::numeric),
    ADD COLUMN output_price numeric CHECK (output_price >= 0::numeric);

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

-- The built-in rows get their prices and stay built-in (the triggers would
-- make them the user's and requeue sessions); rows a user changed are theirs.
ALTER TABLE ctxwin.models DISABLE TRIGGER builtin_row_replace;
ALTER TABLE ctxwin.models DISABLE TRIGGER models_requeue;
UPDATE ctxwin.models m
SET input_price = p.input_price, cached_input_price = p.cached_input_price,
    cache_write_price = p.cache_write_price, output_price = p.output_price
FROM (VALUES
    ('gpt-5',              1.25, 0.125,  NULL,    10),
    ('gpt-5-mini',         0.25, 0.025,  NULL,     2),
    ('gpt-5-nano',         0.05, 0.005,  NULL,  0.40),
    ('gpt-4.1',               2,  0.50,  NULL,     8),
    ('gpt-4.1-mini',       0.40,  0.10,  NULL,  1.60),
    ('gpt-4.1-nano',       0.10, 0.025,  NULL,  0.40),
    ('gpt-4o',             2.50,  1.25,  NULL,    10),
    ('gpt-4o-mini',        0.15, 0.075,  NULL,  0.60),
    ('o1',                   15,  7.50,  NULL,    60),
    ('o3',                    2,  0.50,  NULL,     8),
    ('o3-mini',            1.10,  0.55,  NULL,  4.40),
    ('o4-mini',            1.10, 0.275,  NULL,  4.40),
    ('gpt-4-turbo',          10,  NULL,  NULL,    30),
    ('gpt-4',                30,  NULL,  NULL,    60),
    ('gpt-4-32k',            60,  NULL,  NULL,   120),
    ('gpt-3.5-turbo',      0.50,  NULL,  NULL,  1.50),
    ('claude-opus-4-1',      15,  1.50, 18.75,    75),
    ('claude-opus-4',        15,  1.50, 18.75,    75),
    ('claude-sonnet-4-5',     3,  0.30,  3.75,    15),
    ('claude-sonnet-4',       3,  0.30,  3.75,    15),
    ('claude-haiku-4-5',      1,  0.10,  1.25,     5),
    ('claude-3-7-sonnet',     3,  0.30,  3.75,    15),
    ('claude-3-5-sonnet',     3,  0.30,  3.75,    15),
    ('claude-3-5-haiku',   0.80,  0.08,     1,     4)
) p(name, input_price, cached_input_price, cache_write_price, output_price)
WHERE m.name = p.name AND m.builtin;
ALTER TABLE ctxwin.models ENABLE TRIGGER models_requeue;
ALTER TABLE ctxwin.models ENABLE TRIGGER builtin_row_replace;

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

-- The built-in profile keeps its sliding window too, which makes it the
-- database's own row, as a change by the user would: pg_dump leaves
-- built-in rows out, and a restore would have given it a fresh install's
-- stable window.  (Its sessions' settings are unchanged: no requeue.)
ALTER TABLE ctxwin.profiles DISABLE TRIGGER profiles_requeue;
UPDATE ctxwin.profiles SET builtin = false WHERE builtin;
ALTER TABLE ctxwin.profiles ENABLE TRIGGER profiles_requeue;

-- Tool results in the window (src/window/clear.c): profile columns, NULL
-- (the profiles a database has) is off, so an update changes nothing that
-- is sent.  The view and the built-in rows' trigger take them too.
ALTER TABLE ctxwin.profiles
    ADD COLUMN keep_tool_results int CHECK (keep_tool_results >= 0),
    ADD COLUMN tool_result_max_tokens int CHECK (tool_result_max_tokens > 0),
    ADD COLUMN clear_tool_inputs boolean,
    ADD COLUMN exclude_tools text[] CHECK (array_position(exclude_tools, NULL) IS NULL),
    ADD COLUMN clear_at_least int CHECK (clear_at_least >= 0);
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

-- The summary strategy app: summaries written by the application's own
-- model (summary jobs, sql/install/70_summaries.sql).
ALTER TABLE ctxwin.profiles DROP CONSTRAINT profiles_summary_strategy_check;
ALTER TABLE ctxwin.profiles ADD CONSTRAINT profiles_summary_strategy_check
    CHECK (summary_strategy IN ('llm', 'hybrid', 'extractive', 'app'));

-- Search per profile: off, its sessions' messages cost the search index
-- nothing.
ALTER TABLE ctxwin.profiles ADD COLUMN search boolean NOT NULL DEFAULT true;
COMMENT ON COLUMN ctxwin.profiles.search IS
'Whether the messages of its sessions go into the search index (ctxwin.search, conversation_search). Off: they cost an insert no index entries, and a search of such a session is an error; a change applies to the messages stored after it';

CREATE OR REPLACE FUNCTION ctxwin._builtin_row_replace() RETURNS trigger
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

-- Segmented summaries: under a stable window a compaction appends a
-- segment to the summary instead of rewriting it (sql/install/70_summaries.sql).
-- A summary of before is one segment (summary_segments NULL), the first of
-- those the next compactions append; the summaries of before keep NULL.
ALTER TABLE ctxwin.sessions ADD COLUMN summary_segments int[];
COMMENT ON COLUMN ctxwin.sessions.summary_segments IS
'The length in characters of each segment of conversation_summary, oldest first, when it has more than one (joined by a blank line); NULL: one segment, or no summary';

-- A session's message count includes its retracted messages.
COMMENT ON COLUMN ctxwin.sessions.message_count IS
'Messages in the session, which is also the id of the newest one (retracted messages included: ids are never reused)';

-- Who writes what: applications write profile, system_prompt, metadata,
-- conversation_summary and summary_through_id (checked by
-- _sessions_maintain); every other column is ctxwin's bookkeeping, written
-- by its triggers and C code, or by the table's owner (a restore, a
-- superuser).  The guard is in C (src/ingest/sessions_guard.c): it runs on every
-- update through SQL, the insert trigger's UPDATE of the counters included;
-- where that write is made directly (src/ingest/session_write.c), it is ctxwin's
-- own and the guard would let it pass.
CREATE OR REPLACE FUNCTION ctxwin._sessions_guard() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_sessions_guard'
LANGUAGE C;

-- The key the application gives a message: append_messages appends a
-- message at most once per key (the index messages_client_key, below).
ALTER TABLE ctxwin.messages ADD COLUMN client_key text;
COMMENT ON COLUMN ctxwin.messages.client_key IS
'The key the application gave the message (append_messages), unique in its session; NULL: none';

-- Content parts: a message's content may be an array of parts (text and
-- images, in OpenAI's or Anthropic's shape), kept in content_parts; content
-- holds the text of its text parts.  The insert trigger checks the parts and
-- counts images by the rule of the session's model's provider
-- (src/tokenizer/parts.c, src/tokenizer/image.c); the window sends them in
-- either format (src/window/format.c).  The counters' recount keeps an
-- image's cost, the guard keeps the parts unchanged, and append_messages
-- takes a content array.
ALTER TABLE ctxwin.messages ADD COLUMN content_parts jsonb;

COMMENT ON COLUMN ctxwin.messages.content_parts IS
'The content as an array of parts (text and images, OpenAI''s or Anthropic''s shape), as given; content then holds the text of its text parts, joined by a blank line. NULL: a plain text';

-- Retract, never delete (ctxwin.retract): messages from an id on leave
-- every later window, summary, search and count; the rows stay, marked with
-- retracted_at.  No index is added (the readers filter the rows they read
-- anyway).
ALTER TABLE ctxwin.messages ADD COLUMN retracted_at timestamptz;
COMMENT ON COLUMN ctxwin.messages.retracted_at IS
'When ctxwin.retract() took the message back: it stays stored, but leaves every later window, summary, search and count. NULL: not retracted';

-- Search per profile: off, a message costs the search index nothing.
ALTER TABLE ctxwin.messages ADD COLUMN searchable boolean NOT NULL DEFAULT true;
COMMENT ON COLUMN ctxwin.messages.searchable IS
'Whether the search index holds the message: its profile''s search setting when it was stored (set by ctxwin)';

-- Built here on a table of at most 10,000 rows and 16 MB, in a fraction
-- of a second; on a larger one after the update, concurrently (the search
-- index's block in the Recall section below says how; the same test
-- decides for both indexes).  (An updated ctxwin.messages is a plain
-- table: 0.1.0 had no partitions.)
DO $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'ctxwin.messages'::regclass) = 'r'
       AND (pg_relation_size('ctxwin.messages') > 16 * 1024 * 1024
            OR EXISTS (SELECT FROM ctxwin.messages OFFSET 10000)) THEN
        RETURN;
    END IF;
    CREATE UNIQUE INDEX messages_client_key ON ctxwin.messages (session_id, client_key)
        WHERE client_key IS NOT NULL;
END $$;

-- A summary's segments, as the session's summary_segments holds them.
ALTER TABLE ctxwin.summaries ADD COLUMN segments int[];
COMMENT ON COLUMN ctxwin.summaries.segments IS
'The segments of content as the session''s summary_segments holds them (NULL: one); its newest segment, the last, is what this summary newly wrote';

-- A summary that covers a retracted message is never sent again.
ALTER TABLE ctxwin.summaries ADD COLUMN retracted_at timestamptz;
COMMENT ON COLUMN ctxwin.summaries.retracted_at IS
'When a retract took back a message this summary covers: it is never sent again. NULL: in effect';

-- The system messages build_context sends before the conversation.
CREATE OR REPLACE FUNCTION ctxwin.system_messages(system_prompt text, summary text, placement text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_system_messages'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.messages_tokens(messages jsonb, encoding text)
RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT coalesce(sum(ctxwin.count_message_tokens(m, encoding)), 0)
        FROM jsonb_array_elements(messages) m);

-- A session joined with its profile and model: what every function needs.
-- security_invoker: the view reads sessions, profiles and models with the
-- caller's privileges and row-level security, not its owner's.
CREATE OR REPLACE VIEW ctxwin.session_settings WITH (security_invoker = true) AS
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

------------------------------------------------------------------------------
-- Counters, the summary trigger rule and the triggers
-- (sql/install/30_counters.sql)
------------------------------------------------------------------------------

-- Tokens of the unsummarized messages of a session, in an encoding.  A
-- message counted in another is counted again; of one with content parts,
-- the fields are, and its images keep what they cost when it was stored
-- (its stored count less its fields in the stored encoding): their rule is
-- the model's, not the encoding's (CtxwinRecountTokens, src/tokenizer/messages.c).
CREATE OR REPLACE FUNCTION ctxwin._unsummarized_tokens(p_session uuid, p_after bigint, p_encoding text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT coalesce(sum(CASE WHEN m.token_encoding = p_encoding THEN m.token_count
                                     ELSE ctxwin.message_tokens(m.role, m.content, m.name, m.tool_call_id,
                                                                m.tool_calls, p_encoding)
                                          + CASE WHEN m.content_parts IS NULL THEN 0
                                                 ELSE greatest(m.token_count - ctxwin.message_tokens(
                                                          m.role, m.content, m.name, m.tool_call_id,
                                                          m.tool_calls, m.token_encoding), 0) END
                                END), 0)
            FROM ctxwin.messages m
            WHERE m.session_id = p_session AND m.id > p_after AND m.retracted_at IS NULL);
END $$;

COMMENT ON FUNCTION ctxwin._unsummarized_tokens(uuid, bigint, text) IS
'Tokens of the messages of a session after an id (retracted ones left out), counted in an encoding';

-- Whether a session's counters put it in the compaction queue: a summary
-- trigger fires (N messages, K tokens, the ratio of the window; NULL = off)
-- and there is more than the newest min_recent_messages to summarize.  The
-- rule is SessionQueues in src/policy/rules.c, which the insert trigger and
-- context_status use too.
CREATE OR REPLACE FUNCTION ctxwin._should_queue(messages bigint, tokens bigint, prompt_tokens bigint,
                                                max_messages int, max_tokens int, ratio real,
                                                context_window int, min_recent int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_should_queue'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- Whether a queued session's summary waits, under a stable window, for the
-- window to near its jump or for the session to be idle for cache_ttl, so
-- that it does not change the beginning of requests the provider has
-- cached.  The rule is SummaryWaits in src/policy/rules.c, the budget the
-- context window less the response reserve (CtxwinBudget,
-- src/session/settings.c); the worker and compact() pass such sessions over
-- until then.
CREATE FUNCTION ctxwin._summary_waits(context_tokens bigint, window_policy text, context_window int,
                                      response_reserve int, low_water real, idle interval,
                                      cache_ttl interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_summary_waits'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._summary_waits(bigint, text, int, int, real, interval, interval) IS
'Whether a due summary waits for the stable window to near its jump or for the session to be idle for cache_ttl';

-- Whether a summary may end at a message, given whether it has tool calls
-- and the role of the message after it (NULL: none): never inside a tool
-- group.  The rule is SummaryMayEnd in src/policy/rules.c; the guard below, the
-- summary's cut and its fit to the request use it.
CREATE FUNCTION ctxwin._summary_may_end(has_tool_calls boolean, next_role text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_summary_may_end'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._summary_may_end(boolean, text) IS
'Whether a summary may end at a message with or without tool calls followed by a message of next_role (NULL: none)';

-- Keeps a session's derived columns right when its prompt, summary, summary
-- point or profile change, and guards the summary point.
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

    IF TG_OP = 'UPDATE' AND (NEW.summary_through_id IS DISTINCT FROM OLD.summary_through_id
                             OR NEW.summary_version IS DISTINCT FROM OLD.summary_version) THEN
        -- back only to before a retracted message it covered (ctxwin.retract)
        IF NEW.summary_through_id < OLD.summary_through_id
           AND NOT EXISTS (SELECT FROM ctxwin.messages m
                           WHERE m.session_id = NEW.id AND m.id > NEW.summary_through_id
                             AND m.id <= OLD.summary_through_id AND m.retracted_at IS NOT NULL) THEN
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
        -- never inside a tool group (_summary_may_end; the next message
        -- not retracted)
        SELECT m.role INTO nxt FROM ctxwin.messages m
        WHERE m.session_id = NEW.id AND m.id > NEW.summary_through_id AND m.retracted_at IS NULL
        ORDER BY m.id LIMIT 1;
        SELECT m.role, m.tool_calls IS NOT NULL AS has_calls INTO cur FROM ctxwin.messages m
        WHERE m.session_id = NEW.id AND m.id = NEW.summary_through_id;
        IF NOT ctxwin._summary_may_end(cur.has_calls, nxt.role) THEN
            RAISE EXCEPTION 'summary_through_id % would end inside a tool call group', NEW.summary_through_id
                USING ERRCODE = 'check_violation',
                      DETAIL = 'An assistant message with tool_calls and the tool results that answer it are summarized together.';
        END IF;
        NEW.unsummarized_messages := NEW.message_count - NEW.summary_through_id
            - (SELECT count(*) FROM ctxwin.messages m
               WHERE m.session_id = NEW.id AND m.id > NEW.summary_through_id AND m.retracted_at IS NOT NULL);
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
    -- the summary's segments (a stable window's): a summary written without
    -- them (an application's own) is one segment; given, they must add up
    IF TG_OP = 'UPDATE' AND NEW.summary_segments IS NOT DISTINCT FROM OLD.summary_segments
       AND NEW.conversation_summary IS DISTINCT FROM OLD.conversation_summary THEN
        NEW.summary_segments := NULL;
    END IF;
    NEW.summary_segments := ctxwin._segments_checked(NEW.conversation_summary, NEW.summary_segments);
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
'Trigger on sessions: recounts prompt and unsummarized tokens, checks that the summary point only moves forward and never splits a tool call group, clears the compaction errors when it moves, keeps the summary''s segments true';

-- The sessions trigger fires on a change of the summary's segments too,
-- and when a retract moves the summary version on.
DROP TRIGGER sessions_maintain_update ON ctxwin.sessions;
CREATE TRIGGER sessions_maintain_update BEFORE UPDATE ON ctxwin.sessions
    FOR EACH ROW
    WHEN (OLD.summary_through_id IS DISTINCT FROM NEW.summary_through_id
          OR OLD.conversation_summary IS DISTINCT FROM NEW.conversation_summary
          OR OLD.system_prompt IS DISTINCT FROM NEW.system_prompt
          OR OLD.profile IS DISTINCT FROM NEW.profile
          OR OLD.summary_segments IS DISTINCT FROM NEW.summary_segments
          OR OLD.summary_version IS DISTINCT FROM NEW.summary_version)
    EXECUTE FUNCTION ctxwin._sessions_maintain();

-- A changed profile or model (lower triggers, a smaller window) can put
-- sessions over a trigger without a new message: queue them now, as their
-- next message would, and wake the worker.  SECURITY DEFINER: the queue is
-- ctxwin's bookkeeping, which its owner writes; a role that may change a
-- profile or model has it queue every session the change puts over a
-- trigger, whether that role may see the session or not.  It takes nothing
-- from its caller but which rows changed: it writes now(), on the stored
-- counters and settings.
CREATE OR REPLACE FUNCTION ctxwin._settings_requeue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint := 0;
    k bigint;
    kind text := CASE WHEN starts_with(TG_TABLE_NAME, 'profiles') THEN 'profiles' ELSE 'models' END;
    targets text[];
    target text[];
BEGIN
    IF TG_TABLE_NAME IN ('profiles', 'models') THEN
        targets := ARRAY[['ctxwin.sessions', 'ctxwin.profiles', 'ctxwin.models']];
    ELSE
        -- Under Citus the trigger fires on each node's copy of the reference
        -- table (profiles_102009 ...), where a query of the distributed
        -- sessions is refused: it queues the sessions of this node's shards,
        -- each read with this node's copies of profiles and models, all by
        -- their names in Citus's catalog (read with EXECUTE: it exists only
        -- under Citus).
        EXECUTE $q$
            SELECT array_agg(ARRAY[format('ctxwin.%I', 'sessions_' || s.shardid),
                                   format('ctxwin.%I', 'profiles_' || rp.shardid),
                                   format('ctxwin.%I', 'models_' || rm.shardid)])
            FROM pg_catalog.pg_dist_shard s
            JOIN pg_catalog.pg_dist_placement pl ON pl.shardid = s.shardid
            CROSS JOIN (SELECT shardid FROM pg_catalog.pg_dist_shard
                        WHERE logicalrelid = 'ctxwin.profiles'::regclass) rp
            CROSS JOIN (SELECT shardid FROM pg_catalog.pg_dist_shard
                        WHERE logicalrelid = 'ctxwin.models'::regclass) rm
            WHERE s.logicalrelid = 'ctxwin.sessions'::regclass
              AND pl.groupid = (SELECT groupid FROM pg_catalog.pg_dist_local_group)$q$
        INTO targets;
    END IF;
    IF targets IS NULL THEN
        RETURN NULL;            -- a node that holds no session (the coordinator)
    END IF;
    FOREACH target SLICE 1 IN ARRAY targets LOOP
        EXECUTE format($q$
            UPDATE %s s SET compaction_queued_at = now()
            FROM %s p JOIN %s m ON m.name = p.model
            WHERE s.profile = p.name AND s.compaction_queued_at IS NULL
              AND CASE $1 WHEN 'profiles' THEN p.name IN (SELECT r.name FROM new_rows r)
                          ELSE p.model IN (SELECT r.name FROM new_rows r) END
              AND ctxwin._should_queue(s.unsummarized_messages, s.unsummarized_tokens, s.prompt_tokens,
                                       p.max_messages_before_summary, p.max_tokens_before_summary,
                                       p.trigger_ratio, coalesce(p.context_window, m.context_window),
                                       p.min_recent_messages)$q$,
            target[1], target[2], target[3]) USING kind;
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
    END LOOP;
    IF n > 0 THEN
        PERFORM ctxwin._wake_worker();
    END IF;
    RETURN NULL;
END $$;

-- The insert trigger: validates, numbers and counts a message, keeps the
-- session's counters and queues the session when a summary trigger fires
-- (waking the worker when the session enters the queue, or is released by
-- the message from its failures).  It never calls the network.  In C
-- (src/ingest/trigger.c), it runs on every message insert; it pins no search_path
-- but resolves no name through it: every name in its queries is qualified.
-- The counters of a statement's messages are kept in memory and written
-- once per session at the end of the statement (so a load of n messages in
-- one statement costs O(n), not O(n^2)): the same function, as statement
-- triggers, marks the statement's start and end.  Ids, token counts and
-- token encodings are supplied only by the table's owner (a restore).
CREATE OR REPLACE FUNCTION ctxwin._messages_insert() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_messages_insert'
LANGUAGE C;

-- Whether the statement running is ctxwin's own write of its bookkeeping
-- (src/base/spi.c): the guard below lets retract() mark messages, and no
-- one else.
CREATE FUNCTION ctxwin._own_write()
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_own_write'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION ctxwin._own_write() IS
'Whether the statement running is ctxwin''s own write of its bookkeeping (retract marking messages)';

-- Messages are append-only: their metadata may change, nothing else; one
-- message cannot be deleted, a whole session can (its messages go with it).
-- retract() marks messages retracted (retracted_at), once.
CREATE OR REPLACE FUNCTION ctxwin._messages_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.session_id, NEW.id, NEW.role, NEW.content, NEW.tool_calls::text, NEW.tool_call_id,
            NEW.name, NEW.token_count, NEW.token_encoding, NEW.created_at, NEW.content_parts::text)
           IS DISTINCT FROM
           (OLD.session_id, OLD.id, OLD.role, OLD.content, OLD.tool_calls::text, OLD.tool_call_id,
            OLD.name, OLD.token_count, OLD.token_encoding, OLD.created_at, OLD.content_parts::text)
           OR (NEW.retracted_at IS DISTINCT FROM OLD.retracted_at
               AND (OLD.retracted_at IS NOT NULL OR NOT ctxwin._own_write())) THEN
            RAISE EXCEPTION 'messages cannot be changed'
                USING ERRCODE = 'integrity_constraint_violation',
                      DETAIL = 'ctxwin keeps every message as it was written, so summaries and token counts stay true; only metadata can change.',
                      HINT = 'Append a correction as a new message, or take messages back with ctxwin.retract(session, from_id).';
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

CREATE OR REPLACE FUNCTION ctxwin.messages_after(session uuid, after_id bigint DEFAULT NULL)
RETURNS SETOF ctxwin.messages
AS 'MODULE_PATHNAME', 'ctxwin_messages_after'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.messages_after(uuid, bigint) IS
'Messages of a session with an id greater than after_id (all if NULL), oldest first; retracted ones left out';

-- Retract, never delete: the messages of a session from an id on leave
-- every later window, summary, search and count, and stay stored, marked
-- with retracted_at (src/summary/retract.c).  A summary that covers one of
-- them is never sent again: the session falls back to the newest summary
-- that ends before from_id, or to none, and is queued as an insert would
-- queue it.  Runs as the caller: it locks the session's row (as an insert
-- does) and updates its messages.
CREATE FUNCTION ctxwin.retract(session uuid, from_id bigint)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_retract'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.retract(uuid, bigint) IS
'Takes back the messages of a session with id >= from_id: they stay stored with retracted_at set, and leave every later window, summary, search and count; a summary covering one is replaced by the newest one ending before from_id. Returns the number of messages retracted (0: none, or all already were)';

------------------------------------------------------------------------------
-- The window (sql/install/40_window.sql)
--
-- build_context and _window take the tools sent with the request (a new
-- argument: dropped and made again), build_window the stored rows it shows,
-- build_request the whole request body.
------------------------------------------------------------------------------

-- One message in OpenAI form, absent fields left out.
CREATE OR REPLACE FUNCTION ctxwin._message_json(role text, content text, name text, tool_call_id text,
                                                tool_calls jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_message_json'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

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

DROP FUNCTION ctxwin._window(uuid, int);

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

DROP FUNCTION ctxwin.build_context(uuid, int, text);

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
'The request body to POST as it is: openai: {"model", "messages", "max_completion_tokens" or "max_tokens", "tools", "prompt_cache_key"}; anthropic: {"model", "system", "messages", "max_tokens", "tools"}, with prompt-cache breakpoints; the window is build_context''s; with recall, the tools end with conversation_search (recall_tool()), counted in the budget as the others. Never writes.';

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

------------------------------------------------------------------------------
-- Status and report (sql/install/50_status.sql)
--
-- context_status reports the budget margin, a new column at its end
-- (dropped and made again); _bar is _progress_bar, a name that says what it
-- draws.
------------------------------------------------------------------------------

DROP FUNCTION ctxwin.context_status(uuid);

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
    OUT note text,
    OUT budget_margin real)
AS 'MODULE_PATHNAME', 'ctxwin_context_status'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.context_status(uuid) IS
'Where a session stands: messages and tokens since the summary against each trigger, will_trigger, summary, window, dropped messages, the last compaction error and the budget margin of its model';

CREATE FUNCTION ctxwin._progress_bar(pct numeric, width int DEFAULT 24)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN '[' || repeat('#', least(greatest(round(coalesce(pct, 0::numeric) * width::numeric / 100::numeric), 0), width)::int)
    || repeat('.', width - least(greatest(round(coalesce(pct, 0::numeric) * width::numeric / 100::numeric), 0), width)::int) || ']';

COMMENT ON FUNCTION ctxwin._progress_bar(numeric, int) IS 'A text progress bar for a percentage';

DROP FUNCTION ctxwin._bar(numeric, int);

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
        CASE WHEN c.summary_version = 0 OR (c.summary_through_id = 0 AND c.summary_tokens = 0) THEN '  summary   none yet'
             ELSE format('  summary   version %s, %s tokens, covers messages 1-%s, updated %s ago',
                         c.summary_version, c.summary_tokens, c.summary_through_id,
                         CASE WHEN c.summary_age < interval '1 minute' THEN extract(epoch FROM c.summary_age)::int || ' s'
                              WHEN c.summary_age < interval '1 hour' THEN extract(epoch FROM c.summary_age)::int / 60 || ' min'
                              WHEN c.summary_age < interval '2 days' THEN extract(epoch FROM c.summary_age)::int / 3600 || ' h'
                              ELSE extract(epoch FROM c.summary_age)::int / 86400 || ' days' END) END,
        format('  window    %s messages, %s tokens of a %s-token budget%s; %s dropped',
               coalesce(c.window_messages, 0), to_char(coalesce(c.window_tokens, 0), 'FM999,999,999'),
               to_char(c.budget, 'FM999,999,999'),
               CASE WHEN c.budget_margin > 1::real
                    THEN format(' (provider margin %s)', round(c.budget_margin::numeric, 2)) ELSE '' END,
               coalesce(c.dropped_messages, 0)),
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
-- Summaries without an LLM (sql/install/60_extractive.sql)
------------------------------------------------------------------------------

/*
 * The extractive strategy: no network, deterministic.  Keeps, within
 * max_tokens, in the sections of the LLM's summary (default_summary_prompt):
 *   Goal and state  what the user asked (sentences that mention a word of
 *                   instructions first)
 *   Decisions       decisions and conclusions
 *   Identifiers     facts verbatim (extract_facts), on one line
 *   Open items      the user's questions
 *   Lookup hints    per summarized range, its message ids, the tools it
 *                   called and identifiers to search it by
 * newest first within each section, merged with the sections of the
 * previous summary (newer items first).  A previous summary in 0.1.0's
 * sections (Focus, Requests, Questions, Facts, Tools used) is read into
 * these; a previous summary of another kind is kept as "Earlier".
 */
CREATE OR REPLACE FUNCTION ctxwin.extractive_summary(previous text, messages jsonb, max_tokens int,
                                          encoding text DEFAULT 'cl100k_base',
                                          instructions text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sections text[] := ARRAY['Goal and state', 'Decisions', 'Identifiers', 'Open items', 'Lookup hints', 'Earlier'];
    -- the headings of a previous summary, 0.1.0's included, and the section each goes to
    headings CONSTANT jsonb := '{"Goal and state": "Goal and state", "Decisions": "Decisions",
        "Identifiers": "Identifiers", "Open items": "Open items", "Lookup hints": "Lookup hints",
        "Earlier": "Earlier", "Focus": "Goal and state", "Requests": "Goal and state",
        "Questions": "Open items", "Facts": "Identifiers", "Tools used": "Lookup hints"}';
    heading_re CONSTANT text := '^(Goal and state|Decisions|Identifiers|Open items|Lookup hints|Earlier|Focus|Requests|Questions|Facts|Tools used):';
    items jsonb := '{}';        -- section -> array of items, highest priority first
    focus jsonb := '[]';        -- sentences that mention a word of instructions
    sec text;
    m jsonb;
    sent text;
    focus_re text;
    prev_items jsonb := '{}';
    line text;
    cur text;
    earlier text;
    result text;
    tools text;
    ids text;
    terms text;
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
        CONTINUE WHEN coalesce(m ->> 'content', '') = '';
        IF jsonb_array_length(items -> 'Identifiers') < max_tokens THEN
            items := jsonb_set(items, '{Identifiers}', (items -> 'Identifiers') || to_jsonb((ctxwin.extract_facts(
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
                focus := focus || to_jsonb(sent);
            ELSIF m ->> 'role' = 'user' AND sent ~ '\?$' THEN
                items := jsonb_set(items, '{Open items}', (items -> 'Open items') || to_jsonb(sent));
            ELSIF lower(sent) ~ '\m(decided|decide|agreed|agree|we will|we''ll|let''s|going to|plan to|should|must|use|using|switch|chose|choose|prefer|fixed|fix|changed|change|set|root cause|because|so that|instead)\M' THEN
                items := jsonb_set(items, '{Decisions}', (items -> 'Decisions') || to_jsonb(
                    CASE WHEN m ->> 'role' = 'user' THEN 'User: ' ELSE '' END || sent));
            ELSIF m ->> 'role' = 'user' AND k = 1 THEN
                items := jsonb_set(items, '{Goal and state}', (items -> 'Goal and state') || to_jsonb(sent));
            END IF;
        END LOOP;
    END LOOP;
    items := jsonb_set(items, '{Goal and state}', focus || (items -> 'Goal and state'));

    -- the lookup hint of these messages: their ids, the tools they called
    -- (name and count, in order of first call) and identifiers to search for
    SELECT string_agg(t.name || CASE WHEN t.cnt > 1 THEN ' (' || t.cnt || ')' ELSE '' END, ', ' ORDER BY t.first_o)
    INTO tools
    FROM (SELECT c -> 'function' ->> 'name' AS name, count(*) AS cnt, min(x.o * 1000 + y.p) AS first_o
          FROM jsonb_array_elements(messages) WITH ORDINALITY AS x(e, o),
               jsonb_array_elements(CASE WHEN jsonb_typeof(x.e -> 'tool_calls') = 'array' THEN x.e -> 'tool_calls' ELSE '[]' END)
                   WITH ORDINALITY AS y(c, p)
          WHERE c -> 'function' ->> 'name' IS NOT NULL
          GROUP BY 1) t;
    SELECT '#' || min((e ->> 'id')::bigint) || CASE WHEN count(DISTINCT e ->> 'id') > 1 THEN '-#' || max((e ->> 'id')::bigint) ELSE '' END
    INTO ids
    FROM jsonb_array_elements(messages) e WHERE (e ->> 'id') ~ '^[0-9]+$';
    SELECT string_agg(f, ', ' ORDER BY o) INTO terms
    FROM jsonb_array_elements_text(items -> 'Identifiers') WITH ORDINALITY AS x(f, o) WHERE o <= 6;
    terms := nullif(concat_ws('; ', 'tools ' || tools, 'search ' || terms), '');
    IF ids IS NOT NULL OR terms IS NOT NULL THEN
        items := jsonb_set(items, '{Lookup hints}', to_jsonb(coalesce('Messages ' || ids, 'Messages') || coalesce(': ' || terms, '')));
    END IF;

    -- the previous summary: its sections follow the new items; another
    -- kind of text is kept whole as Earlier
    IF coalesce(previous, '') <> '' THEN
        IF previous ~ heading_re THEN
            FOR line IN SELECT l FROM regexp_split_to_table(previous, '\n') l LOOP
                IF line ~ heading_re THEN
                    cur := headings ->> substring(line FROM '^([^:]+):');
                    IF substring(line FROM '^([^:]+):') IN ('Identifiers', 'Facts') THEN
                        prev_items := jsonb_set(prev_items, ARRAY[cur], (prev_items -> cur) || (
                            SELECT coalesce(jsonb_agg(btrim(v)), '[]')
                            FROM regexp_split_to_table(substring(line FROM '^[^:]+:\s*(.*)$'), ';\s*') v
                            WHERE btrim(v) <> ''));
                    ELSIF substring(line FROM '^([^:]+):') = 'Tools used' THEN
                        prev_items := jsonb_set(prev_items, ARRAY[cur], (prev_items -> cur) || to_jsonb(line));
                    ELSIF cur = 'Earlier' AND btrim(substring(line FROM '^[^:]+:\s*(.*)$')) <> '' THEN
                        earlier := substring(line FROM '^[^:]+:\s*(.*)$');
                    END IF;
                ELSIF cur = 'Earlier' THEN
                    -- (the text of a summary of another kind, kept whole)
                    earlier := concat_ws(E'\n', earlier, line);
                ELSIF line ~ '^- ' AND cur IS NOT NULL THEN
                    prev_items := jsonb_set(prev_items, ARRAY[cur], (prev_items -> cur) || to_jsonb(substr(line, 3)));
                END IF;
            END LOOP;
        ELSE
            earlier := previous;
        END IF;
    END IF;

    -- merge: new first, each item once
    FOREACH sec IN ARRAY sections LOOP
        items := jsonb_set(items, ARRAY[sec], (
            SELECT coalesce(jsonb_agg(v ORDER BY first_o), '[]')
            FROM (SELECT v, min(o) AS first_o
                  FROM jsonb_array_elements_text((items -> sec) || (prev_items -> sec)) WITH ORDINALITY AS x(v, o)
                  GROUP BY v) d));
    END LOOP;

    -- fill the budget: take items round-robin over sections in priority
    -- order, so every section gets room, until the next one would not fit
    limits := ARRAY[0, 0, 0, 0, 0, 0];
    IF earlier IS NOT NULL THEN
        -- a summary of another kind keeps up to half the room, cut in the middle
        earlier := ctxwin.truncate_middle(earlier, max_tokens / 2, encoding);
        limits[6] := 1;
    END IF;
    LOOP
        n := 0;
        FOR k IN 1 .. cardinality(sections) LOOP
            sec := sections[k];
            CONTINUE WHEN sec = 'Earlier';
            CONTINUE WHEN limits[k] >= jsonb_array_length(items -> sec);
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
    IF (btrim(result) = '' OR limits[1] + limits[2] + limits[3] + limits[4] = 0) AND jsonb_array_length(messages) > 0 THEN
        -- nothing matched (small talk, bare identifiers, hashes, log lines):
        -- the messages' own text, shortened, so that a summary is never
        -- empty, nor only a lookup hint
        result := ctxwin._fallback_summary(messages, max_tokens, encoding);
    END IF;
    RETURN result;
END $$;

COMMENT ON FUNCTION ctxwin.extractive_summary(text, jsonb, int, text, text) IS
'The extractive summary (no LLM) of a previous summary and new messages, in the sections Goal and state, Decisions, Identifiers (verbatim), Open items and Lookup hints (message ids, tools called, search terms), within max_tokens';

CREATE OR REPLACE FUNCTION ctxwin._render_summary(sections text[], items jsonb, limits int[], earlier text,
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
        IF sec = 'Identifiers' THEN
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
-- Summaries (sql/install/70_summaries.sql)
--
-- The summary plan and finish, summarize_session and compact in C
-- (src/summary/summary.c, src/summary/compact.c); the pieces without policy
-- stay SQL.  Segmented summaries under a stable window, and summary jobs:
-- summaries written by the application's own model.
------------------------------------------------------------------------------

-- The LLM client
CREATE OR REPLACE FUNCTION ctxwin._llm_post(body jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_post'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

-- The built-in summary prompt.  The summary keeps fixed sections, the same
-- headings as the extractive strategy's (60_extractive.sql), so that a
-- model can find its way in it and to what it leaves out: the transcript
-- marks each message with its id (#12), which the lookup hints name, with
-- search terms for the conversation_search tool (86_recall.sql).
CREATE OR REPLACE FUNCTION ctxwin.default_summary_prompt()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN 'You maintain the running summary of a conversation between a user and an AI assistant. '
    || 'You are given the previous summary (possibly empty) and the messages that came after it, each marked with its id (#12). '
    || 'Write one updated summary that merges both, in these sections, each heading on a line of its own followed by short lines starting with "- ": '
    || '"Goal and state:" what the user wants and where things stand now; '
    || '"Decisions:" what was decided, and why; '
    || '"Identifiers:" names, ids, file paths, URLs, commands, numbers, amounts, dates and error messages, verbatim; '
    || '"Open items:" questions and tasks not yet done; '
    || '"Lookup hints:" where the details you leave out are: message ids (#12) and search terms to find them again. '
    || 'Keep identifiers verbatim. '
    || 'When two facts conflict, keep the newer one. '
    || 'Keep decisions, open tasks, constraints and the user''s preferences. '
    || 'Do not answer the user, do not continue the conversation, and add nothing that is not in the input. '
    || 'Output only the summary.';

COMMENT ON FUNCTION ctxwin.default_summary_prompt() IS 'The summary prompt used when a profile sets none: a summary in the sections Goal and state, Decisions, Identifiers, Open items and Lookup hints';

-- Messages as a transcript for the summarizer: role labels (with the
-- message's id where the message has one, "[user #12]"), tool calls by
-- name, long tool results shortened.
CREATE OR REPLACE FUNCTION ctxwin.transcript(messages jsonb, encoding text DEFAULT 'cl100k_base',
                                  max_tool_tokens int DEFAULT 400)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (
    SELECT string_agg(
        CASE
            WHEN m ->> 'role' = 'tool' THEN
                '[tool result ' || coalesce(m ->> 'tool_call_id', '') || coalesce(' #' || (m ->> 'id'), '') || '] '
                || ctxwin.truncate_middle(coalesce(m ->> 'content', ''), max_tool_tokens, encoding)
            WHEN m ? 'tool_calls' THEN
                '[' || (m ->> 'role') || coalesce(' #' || (m ->> 'id'), '') || '] ' || coalesce(nullif(m ->> 'content', '') || ' ', '')
                || '(calls ' || (SELECT string_agg((c -> 'function' ->> 'name') || ' ' || coalesce(c -> 'function' ->> 'arguments', '')
                                                   || ' [' || (c ->> 'id') || ']', ', ')
                                 FROM jsonb_array_elements(m -> 'tool_calls') c) || ')'
            ELSE '[' || (m ->> 'role') || coalesce(' ' || (m ->> 'name'), '') || coalesce(' #' || (m ->> 'id'), '') || '] '
                 || coalesce(m ->> 'content', '')
        END, E'\n' ORDER BY o)
    FROM jsonb_array_elements(messages) WITH ORDINALITY AS x(m, o));

COMMENT ON FUNCTION ctxwin.transcript(jsonb, text, int) IS
'Messages as a plain transcript with role labels (and message ids, "[user #12]", where the messages have an "id"), tool calls by name and arguments, tool results shortened in the middle';

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
    IF sid IS NULL THEN
        RAISE EXCEPTION 'session id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT ctxwin._caller_sees_session(sid) THEN
        RAISE EXCEPTION 'session % does not exist', sid USING ERRCODE = 'no_data_found';
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
    IF (req ->> 'segment')::boolean IS DISTINCT FROM coalesce((plan ->> 'segment')::boolean, false) THEN
        RAISE EXCEPTION 'summary plan does not match session %', sid
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The plan and the session''s settings now disagree on whether the summary is appended as a segment.',
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

-- The message ids after p_after, up to p_through, where a summary may end:
-- not inside a tool group (_summary_may_end, which reads the role of the
-- next message).  One ordered scan of the session's rows, the next role
-- read with lead(): a lateral "next message" per row made a plan of
-- O(n^2) before the table's first ANALYZE (22 s for 12,000 messages,
-- holding the rows of the sessions the worker had claimed with it).
CREATE FUNCTION ctxwin._summary_ends(p_session uuid, p_after bigint, p_through bigint)
RETURNS SETOF bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT x.id
    FROM (SELECT r.id, r.calls, lead(r.role) OVER (ORDER BY r.id) AS next_role
          FROM (SELECT m.id, m.tool_calls IS NOT NULL AS calls, m.role FROM ctxwin.messages m
                WHERE m.session_id = p_session AND m.id > p_after AND m.id <= p_through
                  AND m.retracted_at IS NULL
                UNION ALL
                (SELECT n.id, n.tool_calls IS NOT NULL, n.role FROM ctxwin.messages n
                 WHERE n.session_id = p_session AND n.id > p_through AND n.retracted_at IS NULL
                 ORDER BY n.id LIMIT 1)) r) x
    WHERE x.id <= p_through AND ctxwin._summary_may_end(x.calls, x.next_role)
$$;

COMMENT ON FUNCTION ctxwin._summary_ends(uuid, bigint, bigint) IS
'The message ids of a session after one id and up to another where a summary may end without splitting a tool group';

-- The newest message id a summary may end at: at most target, after the
-- current summary point, and not inside a tool group (_summary_ends).
CREATE OR REPLACE FUNCTION ctxwin._summary_cut(p_session uuid, p_after bigint, p_target bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT max(e) FROM ctxwin._summary_ends(p_session, p_after, p_target) e);
END $$;

COMMENT ON FUNCTION ctxwin._summary_cut(uuid, bigint, bigint) IS
'The last message id at or before a target where a summary may end without splitting a tool group';

-- Whether a summary trigger fires for a session now: context_status's
-- will_trigger, without the window (src/window/status.c).  Counts in the encoding
-- in effect now (the counters' own if the model did not change since).
CREATE OR REPLACE FUNCTION ctxwin._session_due(p_session uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_session_due'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

-- The unsummarized messages of a session up to an id, as chat messages.
CREATE OR REPLACE FUNCTION ctxwin._summary_messages(p_session uuid, p_after bigint, p_through bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT jsonb_agg(ctxwin._message_json(m.role, m.content, m.name, m.tool_call_id, m.tool_calls)
                             || jsonb_build_object('id', m.id) ORDER BY m.id)
            FROM ctxwin.messages m
            WHERE m.session_id = p_session AND m.id > p_after AND m.id <= p_through
              AND m.retracted_at IS NULL);
END $$;

COMMENT ON FUNCTION ctxwin._summary_messages(uuid, bigint, bigint) IS
'Messages of a session after one id and up to another, as chat messages with their "id", oldest first';

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
    SELECT min(e) INTO first_cut FROM ctxwin._summary_ends(p_session, p_after, p_through) e;
    IF first_cut IS NULL THEN
        RETURN NULL;
    END IF;
    -- a first guess from the stored token counts, then halve until it fits
    SELECT max(x.id) INTO guess
    FROM (SELECT m.id, sum(m.token_count) OVER (ORDER BY m.id) AS running
          FROM ctxwin.messages m
          WHERE m.session_id OPERATOR(pg_catalog.=) p_session AND m.id > p_after AND m.id <= p_through
            AND m.retracted_at IS NULL) x
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
 * where (see _summary_fit).  Under a stable window the answer may be a
 * segment appended to the summary (_summary_segment): the request then
 * holds the whole summary for context, and its system prompt ends with
 * segment_summary_prompt().  Returns through, transcript_cut, facts
 * (hybrid), answer_tokens (the hard cap of the answer, max_summary_tokens
 * less the facts, above the target "Write at most N tokens" of the prompt),
 * system_prompt, prompt, model, segment and budget.
 */
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
    shape record;
    cap int;
BEGIN
    SELECT * INTO s FROM ctxwin.sessions x WHERE x.id OPERATOR(pg_catalog.=) p_session;
    SELECT * INTO st FROM ctxwin.session_settings x WHERE x.session_id OPERATOR(pg_catalog.=) p_session;
    -- appended as a segment (a stable window's), or written whole, in budget tokens
    shape := ctxwin._summary_segment(st.window_policy, coalesce(ctxwin.count_tokens(s.conversation_summary, st.encoding), 0),
                                     st.max_summary_tokens);
    -- the answer's hard cap, the request's max_tokens: max_summary_tokens,
    -- above the target the prompt asks for, so that a model that answers
    -- longer than its target is not cut off (a cut-off answer is never
    -- stored, and the same request would be cut off again); a segment
    -- longer than the summary has room for is cut to fit when it is written
    cap := greatest(st.max_summary_tokens, shape.budget);
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
    IF shape.segment THEN
        -- the summary stays as it is: all of it, for context
        previous := s.conversation_summary;
    ELSIF s.summary_segments IS NOT NULL THEN
        -- segments consolidated: the Facts line of each is merged below
        previous := coalesce(nullif(regexp_replace(s.conversation_summary, '(^|\n\n)Facts: [^\n]*(\n\n|$)', '\1', 'g'), ''),
                             '(none)');
    END IF;
    sys := coalesce(st.summary_prompt, ctxwin.default_summary_prompt())
           || CASE WHEN shape.segment THEN ' ' || ctxwin.segment_summary_prompt() ELSE '' END
           || format(' Write at most %s tokens.', shape.budget)
           || coalesce(' Focus: ' || p_instructions, '');
    -- 2 messages of 4 tokens of overhead each, 3 for the list, and a margin
    fit := ctxwin._summary_fit(p_session, p_after, through,
                               summary_window - cap - 32
                               - ctxwin.count_tokens(sys, summary_encoding)
                               - ctxwin.count_tokens('Previous summary:' || E'\n' || previous || E'\n\nNew messages:\n',
                                                     summary_encoding),
                               summary_encoding);
    through := (fit ->> 'through')::bigint;
    plan := plan || jsonb_build_object('through', through, 'transcript_cut', (fit ->> 'cut')::boolean);
    msgs := ctxwin._summary_messages(p_session, p_after, through);
    IF strategy = 'hybrid' THEN
        -- facts found without the LLM, kept verbatim, take up to a quarter
        IF shape.segment THEN
            -- a segment's own: those of its messages that the summary does not hold yet
            facts := ARRAY(SELECT f FROM unnest(ctxwin.extract_facts(ctxwin.transcript(msgs, st.encoding)))
                                         WITH ORDINALITY AS u(f, o)
                           WHERE f <> ALL (ctxwin.extract_facts(s.conversation_summary)) ORDER BY o);
        ELSIF s.summary_segments IS NOT NULL THEN
            -- the facts of every segment, then the new messages'
            facts := ctxwin.extract_facts(coalesce((SELECT string_agg(m[1], '; ')
                                                    FROM regexp_matches(s.conversation_summary, '(?:^|\n\n)Facts: ([^\n]*)', 'g') m), '')
                                          || E'\n' || ctxwin.transcript(msgs, st.encoding));
        ELSE
            facts := ctxwin.extract_facts(coalesce(substring(s.conversation_summary FROM '^Facts: ([^\n]*)'), '')
                                          || E'\n' || ctxwin.transcript(msgs, st.encoding));
        END IF;
        facts_text := 'Facts: ' || array_to_string(facts, '; ');
        WHILE cardinality(facts) > 0 AND ctxwin.count_tokens(facts_text, st.encoding) > shape.budget / 4 LOOP
            facts := facts[1:cardinality(facts) - 1];
            facts_text := 'Facts: ' || array_to_string(facts, '; ');
        END LOOP;
        IF cardinality(facts) = 0 THEN
            facts_text := NULL;
        END IF;
    END IF;
    room := shape.budget - coalesce(ctxwin.count_tokens(facts_text, st.encoding) + 2, 0);
    sys := coalesce(st.summary_prompt, ctxwin.default_summary_prompt())
           || CASE WHEN shape.segment THEN ' ' || ctxwin.segment_summary_prompt() ELSE '' END
           || format(' Write at most %s tokens.', room)
           || coalesce(' Focus: ' || p_instructions, '');
    prompt := 'Previous summary:' || E'\n' || previous || E'\n\nNew messages:\n' || (fit ->> 'transcript');
    RETURN plan || jsonb_build_object('facts', facts_text,
                                      'answer_tokens', cap - coalesce(ctxwin.count_tokens(facts_text, st.encoding) + 2, 0),
                                      'system_prompt', sys,
                                      'prompt', prompt, 'model', model,
                                      'segment', shape.segment, 'budget', shape.budget);
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
 * In C (src/summary/summary.c), with the cut, the trigger check and the request in
 * SQL.
 */
CREATE OR REPLACE FUNCTION ctxwin._summary_plan(p_session uuid, p_force boolean, p_instructions text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_summary_plan'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

/*
 * The second half of a summary: makes the extractive summary, or reads the
 * LLM's answer, checks it and writes it with a compare-and-set (only if the
 * session's summary did not change since the plan), with its summaries row,
 * flush event and NOTIFY.  Raises, leaving everything as it was, for an
 * answer that must not become a summary.  In C (src/summary/summary.c), with the
 * extractive summarizer and the answer check (_llm_answer) in SQL.
 */
CREATE OR REPLACE FUNCTION ctxwin._summary_finish(plan jsonb, answer jsonb)
RETURNS ctxwin.summaries
AS 'MODULE_PATHNAME', 'ctxwin_summary_finish'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- The plan, the LLM request (_llm_summarize) and the finish, in this
-- backend and transaction.  In C (src/summary/compact.c).
CREATE OR REPLACE FUNCTION ctxwin.summarize_session(session uuid, force boolean DEFAULT false,
                                                    instructions text DEFAULT NULL)
RETURNS ctxwin.summaries
AS 'MODULE_PATHNAME', 'ctxwin_summarize_session'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- How the next summary of a session is written: appended as a segment
-- after its summary (which stays byte for byte), or whole, and in how many
-- tokens (SummarySegmentPlan in src/policy/rules.c).
CREATE FUNCTION ctxwin._summary_segment(window_policy text, summary_tokens int, max_summary_tokens int,
                                        OUT segment boolean, OUT budget int)
AS 'MODULE_PATHNAME', 'ctxwin_summary_segment'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._summary_segment(text, int, int) IS
'Whether the next summary is appended as a segment (a stable window''s) or written whole, and the tokens it may take';

-- What an LLM summary prompt is given besides when its answer is appended
-- as a segment: the summary prompt (the built-in or the profile's) asks
-- for one updated summary, and this asks for the next segment instead.
CREATE FUNCTION ctxwin.segment_summary_prompt()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN 'This time do not write an updated summary: the previous summary is kept exactly as it is, '
    || 'and your answer is appended after it as its next segment. '
    || 'Summarize only the new messages, in the same form, without repeating what the previous summary already says; '
    || 'where a new message changes a fact of the previous summary, state the new fact and that it replaces the earlier one.';

COMMENT ON FUNCTION ctxwin.segment_summary_prompt() IS
'Appended to the summary prompt when the LLM''s answer becomes a new segment of the summary (a stable window''s)';

-- A summary's segments as ctxwin.sessions.summary_segments keeps them:
-- NULL for one segment (or no summary), else the lengths in characters of
-- two or more segments that add up to the summary, with a blank line
-- between two; raises for lengths that do not.  _sessions_maintain calls it.
CREATE FUNCTION ctxwin._segments_checked(summary text, segments int[])
RETURNS int[]
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pos int := 1;
    k int;
BEGIN
    IF segments IS NULL THEN
        RETURN NULL;
    END IF;
    IF cardinality(segments) = 1 AND segments[1] = length(summary) THEN
        -- one segment: the whole summary
        RETURN NULL;
    END IF;
    IF array_ndims(segments) = 1 AND cardinality(segments) >= 2 AND array_position(segments, NULL) IS NULL
       AND summary IS NOT NULL THEN
        FOR k IN 1 .. cardinality(segments) LOOP
            EXIT WHEN segments[k] < 1;
            pos := pos + segments[k];
            IF k = cardinality(segments) THEN
                IF pos = length(summary) + 1 THEN
                    RETURN segments;
                END IF;
            ELSIF substr(summary, pos, 2) = E'\n\n' THEN
                pos := pos + 2;
            ELSE
                EXIT;
            END IF;
        END LOOP;
    END IF;
    RAISE EXCEPTION 'summary_segments % does not match conversation_summary', segments
        USING ERRCODE = 'check_violation',
              DETAIL = format('The summary has %s characters.', coalesce(length(summary), 0)),
              HINT = 'summary_segments holds the length in characters of each segment, oldest first, with a blank line (two newlines) between two, or NULL for a summary of one segment; leave it out when you write the summary yourself.';
END $$;

COMMENT ON FUNCTION ctxwin._segments_checked(text, int[]) IS
'A summary''s segment lengths as sessions.summary_segments keeps them (NULL: one segment); raises for lengths that do not add up to the summary';

------------------------------------------------------------------------------
-- Summary jobs: summaries made by the application's own model (sql/install/70_summaries.sql)
------------------------------------------------------------------------------

-- A session's summary job, claimed by claim_summary or claim_next_summary:
-- the plan the worker would have made (the range, the request), and who may
-- complete it (its token) until when.  One row per session, replaced by the
-- next claim once this one is completed, failed or expired.  While it is
-- claimed and not expired, no other summarizer takes the session (the
-- worker, compact(), summarize_session, another claim).
CREATE TABLE ctxwin.summary_jobs (
    session_id uuid PRIMARY KEY REFERENCES ctxwin.sessions (id) ON DELETE CASCADE,
    token text NOT NULL,
    plan jsonb NOT NULL,
    state text NOT NULL DEFAULT 'claimed' CHECK (state IN ('claimed', 'completed', 'failed', 'released')),
    claimed_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    finished_at timestamptz
);

COMMENT ON TABLE ctxwin.summary_jobs IS
'The last summary job claimed of each session (claim_summary, claim_next_summary): its plan, token, state and lease';

-- Until when an application's summary job holds a session (NULL: none
-- does), for the queue queries of the worker and compact(), the plan of
-- every summarizer and context_status, whose callers need no privilege on
-- ctxwin.summary_jobs (it holds the jobs' tokens).
CREATE FUNCTION ctxwin._summary_job_held(p_session uuid)
RETURNS timestamptz
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN (SELECT j.expires_at FROM ctxwin.summary_jobs j
        WHERE j.session_id OPERATOR(pg_catalog.=) p_session AND j.state OPERATOR(pg_catalog.=) 'claimed'
          AND j.expires_at OPERATOR(pg_catalog.>) clock_timestamp());

COMMENT ON FUNCTION ctxwin._summary_job_held(uuid) IS
'Until when an unexpired summary job (claim_summary) holds a session; NULL when none does';

/*
 * The job an application is given for a plan of the app strategy (see
 * claim_summary): the token, the range, the previous summary, the exact
 * messages the worker would send (the system and the user message of its
 * OpenAI request), the stored messages of the range, the answer's token
 * limit, the model, the strategy, whether the server's own LLM would do it,
 * and when the claim expires.
 */
CREATE FUNCTION ctxwin._summary_job(p_plan jsonb, p_token text, p_expires_at timestamptz, p_server_llm boolean)
RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sid uuid := (p_plan ->> 'session')::uuid;
    s record;
BEGIN
    SELECT x.conversation_summary, x.summary_version INTO s FROM ctxwin.sessions x
    WHERE x.id OPERATOR(pg_catalog.=) sid;
    RETURN jsonb_build_object(
        'token', p_token,
        'session_id', sid,
        'from_id', (p_plan ->> 'after')::bigint + 1,
        'through_id', (p_plan ->> 'through')::bigint,
        'previous_summary', s.conversation_summary,
        'previous_version', nullif(s.summary_version, 0),
        'messages', jsonb_build_array(jsonb_build_object('role', 'system', 'content', p_plan ->> 'system_prompt'),
                                      jsonb_build_object('role', 'user', 'content', p_plan ->> 'prompt')),
        'transcript', coalesce((SELECT jsonb_agg(jsonb_build_object('id', m.id, 'role', m.role, 'content', m.content,
                                                                    'name', m.name, 'tool_calls', m.tool_calls,
                                                                    'tool_call_id', m.tool_call_id) ORDER BY m.id)
                                FROM ctxwin.messages m
                                WHERE m.session_id OPERATOR(pg_catalog.=) sid
                                  AND m.id > (p_plan ->> 'after')::bigint
                                  AND m.id <= (p_plan ->> 'through')::bigint), '[]'::jsonb),
        'max_tokens', (p_plan ->> 'answer_tokens')::int,
        'model', p_plan ->> 'job_model',
        'strategy', p_plan ->> 'strategy',
        'server_llm', p_server_llm,
        'expires_at', p_expires_at);
END $$;

COMMENT ON FUNCTION ctxwin._summary_job(jsonb, text, timestamptz, boolean) IS
'The summary job given to an application for a plan: token, range, previous summary, the worker''s prompt as messages, the messages covered, max_tokens, model, strategy, server_llm, expires_at';

/*
 * The next summary of a session as a job for the application's own model:
 * the plan the worker would make (the same range, prompt and checks),
 * claimed for ctxwin.summary_job_lease_ms.  NULL when no summary is due
 * (without force: when the session is not queued, waits for its stable
 * window or for its failure backoff), or when another summarizer holds the
 * session (the worker, summarize_session, compact(), an unexpired job).
 * In C (src/summary/jobs.c).
 */
CREATE FUNCTION ctxwin.claim_summary(session uuid, force boolean DEFAULT false)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_claim_summary'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.claim_summary(uuid, boolean) IS
'Claims the next summary of a session as a job for the application''s own model (the exact prompt the worker would send, the range, a token); NULL when none is due or another summarizer holds the session';

-- claim_summary for the oldest queued session that nobody holds: the loop
-- of a summarizer outside the database.  In C (src/summary/jobs.c).
CREATE FUNCTION ctxwin.claim_next_summary()
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_claim_next_summary'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.claim_next_summary() IS
'Claims the summary of the oldest queued session nobody else holds, as claim_summary does; NULL when none';

-- The job of a token, locked, if it may still be completed or failed;
-- raises CW001 (summary job is stale) for any other token.
CREATE FUNCTION ctxwin._summary_job_live(p_token text)
RETURNS ctxwin.summary_jobs
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sid uuid;
    j ctxwin.summary_jobs;
    s record;
BEGIN
    IF p_token IS NULL THEN
        RAISE EXCEPTION 'token must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_token ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[0-9a-f]{32}$' THEN
        sid := split_part(p_token, '.', 1)::uuid;
        SELECT * INTO j FROM ctxwin.summary_jobs x WHERE x.session_id OPERATOR(pg_catalog.=) sid FOR UPDATE;
    END IF;
    IF j.session_id IS NULL THEN
        RAISE EXCEPTION 'summary job is stale: the token is unknown'
            USING ERRCODE = 'CW001',
                  DETAIL = 'No summary job was claimed with this token, or its session was deleted.',
                  HINT = 'Claim a new job with ctxwin.claim_summary or ctxwin.claim_next_summary.';
    END IF;
    IF j.token OPERATOR(pg_catalog.<>) p_token THEN
        RAISE EXCEPTION 'summary job is stale: a newer claim of session % superseded it', sid
            USING ERRCODE = 'CW001',
                  DETAIL = format('This job expired, and the session was claimed again at %s.', j.claimed_at),
                  HINT = 'Drop this job''s answer; the newer job covers the session.';
    END IF;
    IF j.state OPERATOR(pg_catalog.<>) 'claimed' THEN
        RAISE EXCEPTION 'summary job is stale: it was already %', j.state
            USING ERRCODE = 'CW001',
                  DETAIL = format('The job of session %s was %s at %s.', sid, j.state, j.finished_at),
                  HINT = 'A job is completed or failed once; claim a new one for the next summary.';
    END IF;
    IF j.expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'summary job is stale: it expired at %', j.expires_at
            USING ERRCODE = 'CW001',
                  DETAIL = format('The claim of session %s lasted ctxwin.summary_job_lease_ms; after it, another summarizer may take the session.', sid),
                  HINT = 'Claim the session again, or raise ctxwin.summary_job_lease_ms for a slow model.';
    END IF;
    SELECT x.summary_through_id, x.summary_version INTO s FROM ctxwin.sessions x
    WHERE x.id OPERATOR(pg_catalog.=) sid;
    IF s.summary_through_id IS DISTINCT FROM (j.plan ->> 'after')::bigint
       OR s.summary_version IS DISTINCT FROM (j.plan ->> 'version')::int THEN
        RAISE EXCEPTION 'summary job is stale: the summary of session % changed since it was claimed', sid
            USING ERRCODE = 'CW001',
                  DETAIL = format('The job was planned on summary version %s; the session has version %s.',
                                  j.plan ->> 'version', s.summary_version),
                  HINT = 'Claim a new job with ctxwin.claim_summary.';
    END IF;
    RETURN j;
END $$;

COMMENT ON FUNCTION ctxwin._summary_job_live(text) IS
'The summary job of a token, locked, if it may still be completed or failed; raises CW001 otherwise';

/*
 * Completes a summary job with the application's model's answer: applied
 * by the worker's own code and checks (_summary_finish: a segment appended
 * under a stable window, the compare-and-set, the summaries row with the
 * usage, the flush event).  A stale token is CW001; an empty answer is
 * 22023 and the job stays claimed; nothing is written on either.
 */
CREATE FUNCTION ctxwin.complete_summary(token text, summary text, usage jsonb DEFAULT NULL)
RETURNS ctxwin.summaries
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    j ctxwin.summary_jobs;
    r ctxwin.summaries;
BEGIN
    j := ctxwin._summary_job_live(token);
    IF summary IS NULL OR btrim(summary, E' \t\r\n') = '' THEN
        RAISE EXCEPTION 'the summary of a job must not be empty'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Nothing was written; the job stays claimed until it expires or is failed.',
                  HINT = 'Pass the model''s text, or call ctxwin.fail_summary with what went wrong.';
    END IF;
    IF usage IS NOT NULL THEN
        -- raises for anything but a provider's usage object
        PERFORM ctxwin.usage_tokens(usage);
    END IF;
    BEGIN
        r := ctxwin._summary_finish(j.plan, jsonb_build_object(
            'status', 200, 'provider', 'openai',
            'total_ms', (extract(epoch FROM clock_timestamp() - j.claimed_at) * 1000::numeric)::int,
            'body', jsonb_build_object(
                'choices', jsonb_build_array(jsonb_build_object(
                    'message', jsonb_build_object('role', 'assistant', 'content', summary),
                    'finish_reason', 'stop')))
                -- no usage: none stored, as for a provider's answer without one
                || CASE WHEN usage IS NOT NULL THEN jsonb_build_object('usage', usage) ELSE '{}'::jsonb END));
    EXCEPTION
        WHEN serialization_failure THEN
            RAISE EXCEPTION 'summary job is stale: the summary of session % changed since it was claimed', j.session_id
                USING ERRCODE = 'CW001', DETAIL = 'Nothing was written.',
                      HINT = 'Claim a new job with ctxwin.claim_summary.';
        WHEN data_exception THEN
            -- the worker's checks refused the answer (far over max_summary_tokens)
            RAISE EXCEPTION '%', SQLERRM
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Nothing was written; the job stays claimed until it expires or is failed.',
                      HINT = format('Ask the model for at most %s tokens (the job''s max_tokens).', j.plan ->> 'answer_tokens');
    END;
    UPDATE ctxwin.summary_jobs x SET state = 'completed', finished_at = clock_timestamp()
    WHERE x.session_id OPERATOR(pg_catalog.=) j.session_id;
    RETURN r;
END $$;

COMMENT ON FUNCTION ctxwin.complete_summary(text, text, jsonb) IS
'Writes the summary of a claimed job with the worker''s code and checks, its usage recorded as a summary call; CW001 for a stale token, 22023 for an empty summary, nothing written on either';

-- Ends a summary job without a summary: the failure is recorded on the
-- session as the worker records its own (compaction_failures, last_error,
-- the backoff before the next claim_next_summary or worker attempt).
CREATE FUNCTION ctxwin.fail_summary(token text, error text)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    j ctxwin.summary_jobs;
BEGIN
    j := ctxwin._summary_job_live(token);
    PERFORM ctxwin._compaction_failed(j.session_id,
                                      left(coalesce(nullif(error, ''), 'the application''s summarizer failed'), 2000));
    UPDATE ctxwin.summary_jobs x SET state = 'failed', finished_at = clock_timestamp()
    WHERE x.session_id OPERATOR(pg_catalog.=) j.session_id;
END $$;

COMMENT ON FUNCTION ctxwin.fail_summary(text, text) IS
'Releases a claimed summary job without a summary, recording the failure with the worker''s backoff; CW001 for a stale token';

-- Gives a claimed summary job back without a summary and without a
-- failure: the session is free for the next summarizer at once (a caller
-- that claimed a job it will not do: shutting down, or the session was
-- left to a later pass).  true when the token's job was claimed and is
-- released; false when it no longer holds the session (completed, failed,
-- released, expired or superseded), so a second call is harmless.
CREATE FUNCTION ctxwin.release_summary(token text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sid uuid;
BEGIN
    IF token IS NULL THEN
        RAISE EXCEPTION 'token must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF token !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[0-9a-f]{32}$' THEN
        RAISE EXCEPTION 'summary job is stale: the token is unknown'
            USING ERRCODE = 'CW001',
                  DETAIL = 'A job''s token is its session''s id, a dot and 32 hexadecimal digits.',
                  HINT = 'Pass the token of a job claim_summary or claim_next_summary returned.';
    END IF;
    sid := split_part(token, '.', 1)::uuid;
    UPDATE ctxwin.summary_jobs x SET state = 'released', finished_at = clock_timestamp()
    WHERE x.session_id OPERATOR(pg_catalog.=) sid AND x.token OPERATOR(pg_catalog.=) release_summary.token
      AND x.state OPERATOR(pg_catalog.=) 'claimed' AND x.expires_at OPERATOR(pg_catalog.>) clock_timestamp();
    RETURN FOUND;
END $$;

COMMENT ON FUNCTION ctxwin.release_summary(text) IS
'Gives a claimed summary job back, with no summary and no failure recorded: the session is free for the next summarizer at once; false when the token''s job no longer holds it';

------------------------------------------------------------------------------
-- The worker's bookkeeping (sql/install/80_worker.sql)
------------------------------------------------------------------------------

-- A failed compaction attempt: counted (the circuit breaker), recorded, and
-- not retried by the worker for 1, 4, 16 ... seconds (at most an hour).
-- The session stays queued.  In C: it locks the row as the caller (its
-- privileges and row-level security apply; NULL if it cannot see it), then
-- writes the bookkeeping columns as ctxwin's own code, all but the error
-- text derived from the row.
CREATE OR REPLACE FUNCTION ctxwin._compaction_failed(p_session uuid, p_error text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ctxwin_compaction_failed'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

-- A queued session with nothing to summarize now (every unsummarized
-- message among the newest min_recent_messages or in an unanswered tool
-- group, or no trigger firing): it leaves the queue, or, if its counters
-- say it is due, is looked at again in a minute (or at its next message).
-- In C, like _compaction_failed: the row locked as the caller, and nothing
-- done unless the session really has nothing to summarize.
CREATE OR REPLACE FUNCTION ctxwin._compaction_settle(p_session uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'ctxwin_compaction_settle'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

-- Whether the background worker has a request in flight for a session (it
-- holds no row then, but a lock that SQL cannot take).
CREATE OR REPLACE FUNCTION ctxwin._session_claimed(p_session uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_session_claimed'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

-- The queued sessions, oldest queued first, each summarized in a
-- subtransaction of its own; a failure is recorded with _compaction_failed.
-- In C (src/summary/compact.c).
CREATE OR REPLACE FUNCTION ctxwin.compact(max_sessions int DEFAULT 100)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_compact'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

------------------------------------------------------------------------------
-- What the client packages call (sql/install/85_clients.sql)
------------------------------------------------------------------------------

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

------------------------------------------------------------------------------
-- Recall: search over the whole history (sql/install/86_recall.sql)
------------------------------------------------------------------------------

-- A message's index entries: the full-text words (configuration simple) and
-- the trigrams of the identifiers of its content and tool calls, its
-- session and its session's buckets of 1024 and 32768 messages.  Its cost
-- tells the planner that a filter computing it per row is no match for
-- the index.  LEAKPROOF, as the operator below: under row-level security
-- an index condition must be leakproof through and through, and it raises
-- no error that depends on its arguments (src/recall/search.c says why).
CREATE FUNCTION ctxwin._search_vector(session uuid, id bigint, content text, tool_calls jsonb)
RETURNS tsvector
AS 'MODULE_PATHNAME', 'ctxwin_search_vector'
LANGUAGE C IMMUTABLE PARALLEL SAFE LEAKPROOF COST 1000;

COMMENT ON FUNCTION ctxwin._search_vector(uuid, bigint, text, jsonb) IS
'A message''s entries in the search index: the words (text search configuration simple) and the trigrams of the identifiers of its content and tool calls, its session and its buckets of 1024 and 32768 messages';

-- tsvector @@ tsquery, declared LEAKPROOF: under row-level security on
-- ctxwin.messages only a leakproof operator may be an index condition.
CREATE FUNCTION ctxwin._search_match(tsvector, tsquery)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_search_match'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;

COMMENT ON FUNCTION ctxwin._search_match(tsvector, tsquery) IS
'tsvector @@ tsquery (ts_match_vq), leakproof: the operator ctxwin.@@ of the search index';

CREATE OPERATOR ctxwin.@@ (LEFTARG = tsvector, RIGHTARG = tsquery, FUNCTION = ctxwin._search_match,
                           RESTRICT = tsmatchsel, JOIN = tsmatchjoinsel);

COMMENT ON OPERATOR ctxwin.@@ (tsvector, tsquery) IS
'Text search match, as pg_catalog.@@, usable by the search index under row-level security';

-- The GIN operator class of tsvector_ops, with the operator above.
CREATE OPERATOR CLASS ctxwin.search_ops FOR TYPE tsvector USING gin AS
    OPERATOR 1 ctxwin.@@ (tsvector, tsquery),
    FUNCTION 1 pg_catalog.gin_cmp_tslexeme(text, text),
    FUNCTION 2 pg_catalog.gin_extract_tsvector(tsvector, internal, internal),
    FUNCTION 3 pg_catalog.gin_extract_tsquery(tsvector, internal, int2, internal, internal, internal, internal),
    FUNCTION 4 pg_catalog.gin_tsquery_consistent(internal, int2, tsvector, int4, internal, internal, internal, internal),
    FUNCTION 5 pg_catalog.gin_cmp_prefix(text, text, int2, internal),
    FUNCTION 6 pg_catalog.gin_tsquery_triconsistent(internal, int2, tsvector, int4, internal, internal, internal),
    STORAGE text;

-- The search index (partial: WHERE searchable), with the rule of its build
-- on a large table.
--
-- On a ctxwin.messages of more than 10,000 rows or 16 MB the update does
-- not build it (nor messages_client_key above): a build holds off every
-- insert until it ends (84 s on 1.2 million messages), and the update holds
-- its locks until it commits.  The database's worker builds both concurrently
-- after the update (src/worker/indexes.c); without a worker, run the
-- statements of ctxwin.pending_indexes() (defined below).  Searches answer
-- correctly meanwhile, by reading the session's messages.
DO $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'ctxwin.messages'::regclass) = 'r'
       AND (pg_relation_size('ctxwin.messages') > 16 * 1024 * 1024
            OR EXISTS (SELECT FROM ctxwin.messages OFFSET 10000)) THEN
        RAISE WARNING 'the indexes messages_search and messages_client_key of ctxwin.messages are built after this update, concurrently'
            USING DETAIL = 'ctxwin.messages holds more than 10,000 rows or 16 MB: building them in the update would hold off every insert until it ends.',
                  HINT = 'The database''s ctxwin worker builds them. Without a worker, run at top level: SELECT statement FROM ctxwin.pending_indexes() WHERE state <> ''building'' \gexec';
        RETURN;
    END IF;
    CREATE INDEX messages_search ON ctxwin.messages
        USING gin (ctxwin._search_vector(session_id, id, content, tool_calls) ctxwin.search_ops)
        WITH (fastupdate = on, gin_pending_list_limit = 1024) WHERE searchable;
END $$;

CREATE FUNCTION ctxwin._search_query(session uuid, level int, below bigint, query text, any_term boolean)
RETURNS tsquery
AS 'MODULE_PATHNAME', 'ctxwin_search_query'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._search_query(uuid, int, bigint, text, boolean) IS
'The index query of a search: the scope (level 1 or 2: the bucket of 1024 or 32768 messages that holds the message below - 1; else the session) and every term of the query (any_term: one at least)';

CREATE FUNCTION ctxwin._search_terms(query text)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_search_terms'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._search_terms(text) IS
'How many terms (words and identifiers) a search query has; an error for a query with none or too many';

CREATE FUNCTION ctxwin._search_bucket_start(level int, id bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ctxwin_search_bucket_start'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._search_bucket_start(int, bigint) IS
'The first id of the bucket of a level (1: 1024 messages, 2: 32768) that holds a message id; 0 for the session';

CREATE FUNCTION ctxwin._search_rank(content text, tool_calls jsonb, query text, any_term boolean)
RETURNS real
AS 'MODULE_PATHNAME', 'ctxwin_search_rank'
LANGUAGE C IMMUTABLE PARALLEL SAFE COST 10;

COMMENT ON FUNCTION ctxwin._search_rank(text, jsonb, text, boolean) IS
'How well a message matches a search query (0: not at all; an identifier must be in the text as written)';

CREATE FUNCTION ctxwin._search_snippet(content text, tool_calls jsonb, query text)
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_search_snippet'
LANGUAGE C IMMUTABLE PARALLEL SAFE COST 10;

COMMENT ON FUNCTION ctxwin._search_snippet(text, jsonb, text) IS
'About 200 characters of a message around the place where most terms of a search query are found';

/*
 * search(session, query, roles, since, until, max_results): the messages of
 * a session's whole history, summarized or not, that match a query, best
 * first.  A message matches when it has every term of the query: each word
 * as a whole word, each identifier-like term (ORD-48213,
 * src/window/walk.c, E4031) as written, also inside a longer token, case
 * aside (_search_rank); when no message has every term, the messages with
 * some of them.
 *
 * Only the newest matches are ranked: at most 5 * max_results of them (50
 * to 500), so that a word that a hundred thousand messages have costs what
 * a rare one does.  They are found in the GIN index messages_search, which
 * holds each message's session and its buckets of 1024 and 32768 messages
 * (by id), newest bucket first, each probe reading at most 4 times that
 * many rows: first the newest 1024 messages; then, by the matches per
 * message found so far, the next bucket of 1024 (dense matches: 4 such
 * would hold those still wanted), of 32768 (sparser, or none in the
 * newest 1024), or the rest of the session at once (so sparse that 4
 * buckets of 32768 would not hold them, or none in one: a rare term); 16
 * probes at most.  Within a
 * probe whose matches are more than it reads, the rows read are those the
 * bitmap scan reaches first (in the table's order), not the newest.
 *
 * SECURITY INVOKER: the caller's privileges and row-level security apply
 * to every row read; a session the caller cannot see does not exist.
 * Custom plans: each probe's query is planned with its tsquery, which the
 * planner's estimates need to choose the index.
 */
CREATE FUNCTION ctxwin.search(session uuid, query text, roles text[] DEFAULT NULL,
                   since timestamptz DEFAULT NULL, until timestamptz DEFAULT NULL,
                   max_results int DEFAULT 10)
RETURNS TABLE (id bigint, role text, created_at timestamptz, snippet text, rank real)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    top bigint;
    terms int;
    want int;
    ids bigint[];
    ranks real[];
    got_ids bigint[];
    got_ranks real[];
    below bigint;
    lvl int;
    probes int;
    hits bigint;
    density float8;
    any_term boolean := false;
    bad text;
    profile_name text;
    search_on boolean;
BEGIN
    IF session IS NULL THEN
        RAISE EXCEPTION 'session id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF query IS NULL THEN
        RAISE EXCEPTION 'search query must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF max_results IS NULL OR max_results < 1 OR max_results > 100 THEN
        RAISE EXCEPTION 'max_results must be between 1 and 100'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('It is %s.', coalesce(max_results::text, 'NULL'));
    END IF;
    SELECT string_agg(coalesce(quote_literal(r), 'NULL'), ', ') INTO bad FROM unnest(roles) r
    WHERE r IS NULL OR r NOT IN ('system', 'user', 'assistant', 'tool');
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'roles has a value that is not a message role: %', bad
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The roles are system, user, assistant and tool.';
    END IF;
    SELECT s.message_count, p.name, p.search INTO top, profile_name, search_on
    FROM ctxwin.sessions s LEFT JOIN ctxwin.profiles p ON p.name = s.profile WHERE s.id = session;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % does not exist', session USING ERRCODE = 'no_data_found';
    END IF;
    IF NOT search_on THEN
        RAISE EXCEPTION 'search is off for the profile % of session %', quote_literal(profile_name), session
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The messages of its sessions are not in the search index.',
                  HINT = format('Turn it on with UPDATE ctxwin.profiles SET search = true WHERE name = %L; it applies to the messages stored after it.', profile_name);
    END IF;
    terms := ctxwin._search_terms(query);
    want := least(greatest(5 * max_results, 50), 500);

    LOOP
        ids := '{}';
        ranks := '{}';
        below := top + 1;
        lvl := 1;
        probes := 0;
        hits := 0;
        WHILE below > 1 AND cardinality(ids) < want AND probes < 16 LOOP
            -- the matches of a bucket (lvl 1, 2) or the rest of the session
            -- (3) below the messages searched, newest first
            SELECT coalesce(array_agg(x.id ORDER BY x.id DESC) FILTER (WHERE x.rank > 0), '{}'),
                   coalesce(array_agg(x.rank ORDER BY x.id DESC) FILTER (WHERE x.rank > 0), '{}')
            INTO got_ids, got_ranks
            FROM (SELECT m.id, ctxwin._search_rank(m.content, m.tool_calls, query, any_term) AS rank
                  FROM ctxwin.messages m
                  WHERE m.session_id = session AND m.id < below AND m.retracted_at IS NULL AND m.searchable
                    AND ctxwin._search_vector(m.session_id, m.id, m.content, m.tool_calls)
                        OPERATOR(ctxwin.@@) ctxwin._search_query(session, lvl, below, query, any_term)
                    AND (roles IS NULL OR m.role = ANY (roles))
                    AND (since IS NULL OR m.created_at >= since) AND (until IS NULL OR m.created_at < until)
                  LIMIT 4 * want) x;
            ids := ids || got_ids[1 : want - cardinality(ids)];
            ranks := ranks || got_ranks[1 : want - cardinality(ranks)];
            hits := hits + cardinality(got_ids);
            EXIT WHEN lvl = 3;
            below := ctxwin._search_bucket_start(lvl, below - 1);
            probes := probes + 1;
            -- the next probe, by the matches per message so far: a bucket
            -- of 1024 if 4 of them would hold the matches still wanted, or
            -- if one of 32768 would hold more than a probe reads; else one
            -- of 32768 (also after none in the newest 1024), unless 4 of
            -- those would not hold them (or one held none): then the rest
            -- of the session
            density := hits::float8 / (top + 1 - greatest(below, 1));
            IF hits = 0 AND lvl = 1 THEN
                lvl := 2;
            ELSIF density * 32768 * 4 < want - cardinality(ids) THEN
                lvl := 3;
            ELSIF density * 1024 * 4 >= want - cardinality(ids) OR density * 32768 > 4 * want THEN
                lvl := 1;
            ELSE
                lvl := 2;
            END IF;
        END LOOP;

        RETURN QUERY
        SELECT m.id, m.role, m.created_at, ctxwin._search_snippet(m.content, m.tool_calls, query), c.rank
        FROM (SELECT u.id, u.rank FROM unnest(ids, ranks) AS u(id, rank)
              ORDER BY u.rank DESC, u.id DESC LIMIT max_results) c
        JOIN ctxwin.messages m ON m.session_id = session AND m.id = c.id
        ORDER BY c.rank DESC, c.id DESC;
        -- no message has every term: those with some of them
        EXIT WHEN FOUND OR any_term OR terms < 2;
        any_term := true;
    END LOOP;
END $$;

COMMENT ON FUNCTION ctxwin.search(uuid, text, text[], timestamptz, timestamptz, int) IS
'The messages of a session''s whole history (summarized ones included) that best match a query: every word (as a whole word) and identifier (as written, also inside a longer one), else some of them, case aside; with their role, time, a snippet and a rank, best first. The newest 5 * max_results matches (50 to 500) are ranked.';

-- The conversation_search tool (src/recall/tool.c): what build_request adds
-- with recall, for an application that sends its own list of tools.
CREATE FUNCTION ctxwin.recall_tool()
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_recall_tool'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.recall_tool() IS
'The conversation_search tool (an OpenAI function tool) that build_request adds with recall; answer_tool_call answers its calls';

/*
 * answer_tool_call(session, tool_call): the tool message that answers a
 * model's call of conversation_search, to append to the session as it is
 * (append_messages, or an INSERT of its fields).  The call is an OpenAI
 * tool call ({"id", "type": "function", "function": {"name", "arguments":
 * a JSON text}}) or an Anthropic tool_use block ({"type": "tool_use",
 * "id", "name", "input"}); the answer is a message in OpenAI's shape
 * ({"role": "tool", "tool_call_id", "name", "content"}), which
 * build_context turns into a tool_result block for Anthropic.  Its content
 * is the search's results as compact text, one line each: "[#id role
 * time] snippet", time in UTC, so that the model can cite the ids.
 */
CREATE FUNCTION ctxwin.answer_tool_call(session uuid, tool_call jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    call_id text;
    tool_name text;
    args jsonb;
    bad text;
    q text;
    wanted_roles text[];
    t_since timestamptz;
    t_until timestamptz;
    n int := 10;
    lines text[] := '{}';
    r record;
    hint CONSTANT text := 'Pass an OpenAI tool call {"id": ..., "type": "function", "function": {"name": "conversation_search", "arguments": "{\"query\": ...}"}} or an Anthropic tool_use block {"type": "tool_use", "id": ..., "name": "conversation_search", "input": {"query": ...}}.';
BEGIN
    IF session IS NULL THEN
        RAISE EXCEPTION 'session id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF tool_call IS NULL THEN
        RAISE EXCEPTION 'tool_call must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF jsonb_typeof(tool_call) <> 'object' THEN
        RAISE EXCEPTION 'tool_call must be a JSON object' USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('It is %s.', jsonb_typeof(tool_call)), HINT = hint;
    END IF;
    IF tool_call ->> 'type' = 'tool_use' THEN
        call_id := tool_call ->> 'id';
        tool_name := tool_call ->> 'name';
        args := tool_call -> 'input';
        IF jsonb_typeof(args) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'the input of tool_use block % must be a JSON object', coalesce(call_id, '(no id)')
                USING ERRCODE = 'invalid_parameter_value', HINT = hint;
        END IF;
    ELSIF jsonb_typeof(tool_call -> 'function') = 'object'
          AND coalesce(tool_call ->> 'type', 'function') = 'function' THEN
        call_id := tool_call ->> 'id';
        tool_name := tool_call -> 'function' ->> 'name';
        args := tool_call -> 'function' -> 'arguments';
        IF jsonb_typeof(args) = 'string' THEN
            BEGIN
                args := (args #>> '{}')::jsonb;
            EXCEPTION WHEN invalid_text_representation THEN
                RAISE EXCEPTION 'the arguments of tool call % are not valid JSON', coalesce(call_id, '(no id)')
                    USING ERRCODE = 'invalid_parameter_value',
                          DETAIL = format('They are %s.', left(tool_call -> 'function' ->> 'arguments', 200));
            END;
        END IF;
        IF jsonb_typeof(args) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'the arguments of tool call % must be a JSON object', coalesce(call_id, '(no id)')
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('They are %s.', coalesce(left(args::text, 200), 'missing'));
        END IF;
    ELSE
        RAISE EXCEPTION 'tool_call is neither an OpenAI tool call nor an Anthropic tool_use block'
            USING ERRCODE = 'invalid_parameter_value', HINT = hint;
    END IF;
    IF coalesce(call_id, '') = '' THEN
        RAISE EXCEPTION 'tool_call has no id' USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'The tool message answers the call by its id.', HINT = hint;
    END IF;
    IF tool_name IS DISTINCT FROM 'conversation_search' THEN
        RAISE EXCEPTION 'ctxwin answers calls of conversation_search, not of %', coalesce(quote_ident(tool_name), 'a tool without a name')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Answer the calls of the application''s own tools in the application.';
    END IF;

    -- the tool's own parameters (recall_tool(), src/recall/tool.c)
    SELECT string_agg(k, ', ' ORDER BY k) INTO bad FROM jsonb_object_keys(args) k
    WHERE NOT ctxwin.recall_tool() -> 'function' -> 'parameters' -> 'properties' ? k;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'conversation_search has no argument %', bad
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Its arguments are query, roles, since, until and max_results.';
    END IF;
    IF jsonb_typeof(args -> 'query') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'the argument query of conversation_search must be a string'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('It is %s.', coalesce(left((args -> 'query')::text, 200), 'missing'));
    END IF;
    q := args ->> 'query';
    IF jsonb_typeof(args -> 'roles') = 'array' THEN
        IF EXISTS (SELECT FROM jsonb_array_elements(args -> 'roles') e WHERE jsonb_typeof(e) <> 'string') THEN
            RAISE EXCEPTION 'the argument roles of conversation_search must be an array of strings'
                USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', left((args -> 'roles')::text, 200));
        END IF;
        wanted_roles := ARRAY(SELECT jsonb_array_elements_text(args -> 'roles'));
    ELSIF coalesce(jsonb_typeof(args -> 'roles'), 'null') <> 'null' THEN
        RAISE EXCEPTION 'the argument roles of conversation_search must be an array of strings'
            USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', left((args -> 'roles')::text, 200));
    END IF;
    BEGIN
        t_since := CASE WHEN jsonb_typeof(args -> 'since') = 'string' THEN (args ->> 'since')::timestamptz END;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'the argument since of conversation_search is not a time: %', args ->> 'since'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Give an ISO 8601 time, e.g. 2025-06-01T12:00:00Z.';
    END;
    BEGIN
        t_until := CASE WHEN jsonb_typeof(args -> 'until') = 'string' THEN (args ->> 'until')::timestamptz END;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'the argument until of conversation_search is not a time: %', args ->> 'until'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Give an ISO 8601 time, e.g. 2025-06-01T12:00:00Z.';
    END;
    IF coalesce(jsonb_typeof(args -> 'since'), 'null') NOT IN ('string', 'null')
       OR coalesce(jsonb_typeof(args -> 'until'), 'null') NOT IN ('string', 'null') THEN
        RAISE EXCEPTION 'the arguments since and until of conversation_search must be strings'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Give an ISO 8601 time, e.g. 2025-06-01T12:00:00Z.';
    END IF;
    IF coalesce(jsonb_typeof(args -> 'max_results'), 'null') <> 'null' THEN
        IF jsonb_typeof(args -> 'max_results') <> 'number' OR (args ->> 'max_results') !~ '^[0-9]+$'
           OR (args ->> 'max_results')::numeric NOT BETWEEN 1 AND 50 THEN
            RAISE EXCEPTION 'the argument max_results of conversation_search must be an integer from 1 to 50'
                USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', left((args -> 'max_results')::text, 200));
        END IF;
        n := (args ->> 'max_results')::int;
    END IF;

    FOR r IN SELECT * FROM ctxwin.search(session, q, wanted_roles, t_since, t_until, n) LOOP
        lines := lines || format('[#%s %s %s] %s', r.id, r.role,
                                 to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), r.snippet);
    END LOOP;
    RETURN jsonb_build_object(
        'role', 'tool', 'tool_call_id', call_id, 'name', 'conversation_search',
        'content', CASE cardinality(lines)
                       WHEN 0 THEN format('No earlier message matches %s.', quote_literal(q))
                       ELSE format('%s %s %s, best first:', cardinality(lines),
                                   CASE cardinality(lines) WHEN 1 THEN 'message matches' ELSE 'messages match' END,
                                   quote_literal(q))
                            || E'\n' || array_to_string(lines, E'\n')
                   END);
END $$;

COMMENT ON FUNCTION ctxwin.answer_tool_call(uuid, jsonb) IS
'The tool message ({"role": "tool", "tool_call_id", "name", "content"}) answering a conversation_search call (an OpenAI tool call or an Anthropic tool_use block) of a session: the search''s results, one line each with the message''s id, role, time and snippet';

/*
 * pending_indexes(): the indexes of ctxwin.messages that ctxwin's schema has
 * but this database does not have valid yet.  A fresh install creates them
 * with the table; ALTER EXTENSION ctxwin UPDATE leaves them out of its
 * transaction on a table of more than 10,000 rows or 16 MB (building them there
 * would stop every insert for as long as the build takes), and they are
 * built afterwards, concurrently: by the background worker of the database
 * (ctxwin.databases), or by running the statements yourself at top level,
 * e.g. in psql:
 *
 *     SELECT statement FROM ctxwin.pending_indexes() WHERE state <> 'building' \gexec
 *
 * state: 'missing' (never built), 'building' (a build runs: phase and the
 * blocks done and to do are PostgreSQL's pg_stat_progress_create_index),
 * 'invalid' (a build that stopped: its statement is a REINDEX CONCURRENTLY).
 * Meanwhile searches answer as they would with the index, by reading the
 * session's messages (slower, never wrong).  Only for a ctxwin.messages that
 * is a plain table: the update builds a partitioned one's indexes in its
 * transaction.
 */
CREATE FUNCTION ctxwin.pending_indexes()
RETURNS TABLE (index_name text, state text, statement text,
               phase text, blocks_done bigint, blocks_total bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT d.name,
           CASE WHEN c.oid IS NULL THEN 'missing' WHEN p.pid IS NOT NULL THEN 'building' ELSE 'invalid' END,
           CASE WHEN c.oid IS NULL THEN d.ddl ELSE format('REINDEX INDEX CONCURRENTLY ctxwin.%I', d.name) END,
           p.phase, p.blocks_done, p.blocks_total
    FROM (VALUES
            (1, 'messages_client_key',
             'CREATE UNIQUE INDEX CONCURRENTLY messages_client_key ON ctxwin.messages (session_id, client_key) '
             'WHERE client_key IS NOT NULL'),
            (2, 'messages_search',
             'CREATE INDEX CONCURRENTLY messages_search ON ctxwin.messages USING gin '
             '(ctxwin._search_vector(session_id, id, content, tool_calls) ctxwin.search_ops) WITH (fastupdate = on, gin_pending_list_limit = 1024) '
             'WHERE searchable')
         ) AS d(ord, name, ddl)
    JOIN pg_class t ON t.oid = 'ctxwin.messages'::regclass AND t.relkind = 'r'
    LEFT JOIN pg_class c ON c.relname = d.name AND c.relnamespace = t.relnamespace
    LEFT JOIN pg_index i ON i.indexrelid = c.oid
    LEFT JOIN pg_stat_progress_create_index p ON p.index_relid = c.oid AND c.oid IS NOT NULL
    WHERE c.oid IS NULL OR NOT i.indisvalid
    ORDER BY d.ord
$$;

COMMENT ON FUNCTION ctxwin.pending_indexes() IS
'The indexes of ctxwin.messages an update left to build after it, concurrently (by the worker, or by running each statement at top level): name, state (missing, building, invalid), the statement that builds it, and a running build''s phase and blocks';

------------------------------------------------------------------------------
-- The bill: what the provider counted and charged, and calibration (sql/install/90_usage.sql)
--
-- An application passes the provider's usage object of each LLM answer to
-- record_usage(session, usage), which normalizes it (OpenAI Chat
-- Completions, OpenAI Responses, Anthropic Messages) into ctxwin.usage_log
-- with the window the request sent.  The summaries the worker and
-- summarize_session make keep their usage in ctxwin.summaries; the ledger
-- view puts both together, and the usage views sum them per session and per
-- profile, with costs at the prices of ctxwin.models.
--
-- Calibration: a model counted with another tokenizer than its own (Claude,
-- Gemini, any model not OpenAI's) may count fewer tokens than its provider
-- does.  Over the newest 50 requests of a model that carry the window they
-- sent, provider input tokens / window tokens is the model's budget margin,
-- kept between 1 and 1.5 in ctxwin.calibration; build_context's default
-- budget is the context window less the response reserve, divided by it.
------------------------------------------------------------------------------

-- One count of a usage object: the number at path, NULL if it is absent or
-- JSON null.  A value that is not a non-negative integer, or a required one
-- that is absent, raises invalid_parameter_value, or with quiet gives -1.
CREATE FUNCTION ctxwin._usage_count(usage jsonb, path text[], required boolean, quiet boolean)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v jsonb := usage #> path;
    n numeric;
BEGIN
    IF v IS NULL OR v = 'null'::jsonb THEN
        IF NOT required THEN
            RETURN NULL;
        ELSIF quiet THEN
            RETURN -1;
        END IF;
        RAISE EXCEPTION 'usage field "%" is missing', array_to_string(path, '.')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the usage object of the provider''s answer as it came.';
    END IF;
    IF jsonb_typeof(v) = 'number' THEN
        n := v::numeric;
    END IF;
    IF n IS NULL OR n < 0::numeric OR n <> trunc(n) OR n > 9223372036854775807::numeric THEN
        IF quiet THEN
            RETURN -1;
        END IF;
        RAISE EXCEPTION 'usage field "%" must be a non-negative integer', array_to_string(path, '.')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('It is %s.', left(v::text, 100));
    END IF;
    RETURN n::bigint;
END $$;

COMMENT ON FUNCTION ctxwin._usage_count(jsonb, text[], boolean, boolean) IS
'A token count of a usage object, checked to be a non-negative integer';

-- The usage object of an LLM answer, normalized.  The shapes:
--   OpenAI Chat Completions: prompt_tokens (cache reads included),
--     prompt_tokens_details.cached_tokens, completion_tokens;
--   OpenAI Responses: input_tokens (cache reads included),
--     input_tokens_details.cached_tokens, output_tokens, and total_tokens
--     or the *_details objects, which Anthropic never sends;
--   Anthropic Messages: input_tokens (neither cache reads nor cache writes),
--     cache_read_input_tokens, cache_creation_input_tokens, output_tokens.
-- input_tokens is every prompt token, cached or not; output_tokens includes
-- reasoning tokens, as both providers bill them.
CREATE FUNCTION ctxwin.usage_tokens(usage jsonb, quiet boolean DEFAULT false,
                                    OUT provider text, OUT input_tokens bigint, OUT cached_tokens bigint,
                                    OUT cache_write_tokens bigint, OUT output_tokens bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    chat boolean;
    io boolean;
    responses boolean;
    anthropic boolean;
    base bigint;
BEGIN
    IF usage IS NULL OR jsonb_typeof(usage) IS DISTINCT FROM 'object' THEN
        IF quiet THEN
            RETURN;
        ELSIF usage IS NULL THEN
            RAISE EXCEPTION 'usage must not be null' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        RAISE EXCEPTION 'usage must be a JSON object, not %', jsonb_typeof(usage)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the "usage" object of the provider''s answer.';
    END IF;
    chat := usage ? 'prompt_tokens' OR usage ? 'completion_tokens';
    io := usage ? 'input_tokens' OR usage ? 'output_tokens';
    responses := usage ? 'input_tokens_details' OR usage ? 'output_tokens_details' OR usage ? 'total_tokens';
    anthropic := usage ? 'cache_read_input_tokens' OR usage ? 'cache_creation_input_tokens';
    IF chat AND NOT io THEN
        provider := 'openai';
        input_tokens := ctxwin._usage_count(usage, '{prompt_tokens}', true, quiet);
        cached_tokens := coalesce(ctxwin._usage_count(usage, '{prompt_tokens_details,cached_tokens}', false, quiet), 0);
        cache_write_tokens := 0;
        output_tokens := ctxwin._usage_count(usage, '{completion_tokens}', true, quiet);
    ELSIF io AND NOT chat AND responses AND NOT anthropic THEN
        provider := 'openai';
        input_tokens := ctxwin._usage_count(usage, '{input_tokens}', true, quiet);
        cached_tokens := coalesce(ctxwin._usage_count(usage, '{input_tokens_details,cached_tokens}', false, quiet), 0);
        cache_write_tokens := 0;
        output_tokens := ctxwin._usage_count(usage, '{output_tokens}', true, quiet);
    ELSIF io AND NOT chat AND NOT responses THEN
        provider := 'anthropic';
        base := ctxwin._usage_count(usage, '{input_tokens}', true, quiet);
        cached_tokens := coalesce(ctxwin._usage_count(usage, '{cache_read_input_tokens}', false, quiet), 0);
        cache_write_tokens := coalesce(ctxwin._usage_count(usage, '{cache_creation_input_tokens}', false, quiet), 0);
        output_tokens := ctxwin._usage_count(usage, '{output_tokens}', true, quiet);
        IF base >= 0 AND cached_tokens >= 0 AND cache_write_tokens >= 0 THEN
            input_tokens := base + cached_tokens + cache_write_tokens;
        ELSE
            input_tokens := -1;
        END IF;
    ELSIF quiet THEN
        RETURN;
    ELSE
        RAISE EXCEPTION 'usage is neither an OpenAI nor an Anthropic usage object'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Its keys are: %s.',
                                  coalesce((SELECT string_agg(k, ', ' ORDER BY k) FROM jsonb_object_keys(usage) k), 'none')),
                  HINT = 'Pass the "usage" object of the answer as it came: OpenAI Chat Completions (prompt_tokens, completion_tokens ...), OpenAI Responses (input_tokens, output_tokens, input_tokens_details ...) or Anthropic Messages (input_tokens, output_tokens, cache_read_input_tokens ...).';
    END IF;
    IF least(input_tokens, cached_tokens, cache_write_tokens, output_tokens) < 0 THEN
        -- quiet, and a count it cannot read
        provider := NULL;
        input_tokens := NULL;
        cached_tokens := NULL;
        cache_write_tokens := NULL;
        output_tokens := NULL;
    ELSIF cached_tokens > input_tokens THEN
        IF quiet THEN
            provider := NULL;
            input_tokens := NULL;
            cached_tokens := NULL;
            cache_write_tokens := NULL;
            output_tokens := NULL;
            RETURN;
        END IF;
        RAISE EXCEPTION 'usage counts more cached tokens (%) than input tokens (%)', cached_tokens, input_tokens
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'OpenAI''s cached_tokens are a part of its prompt_tokens (input_tokens in the Responses API).';
    END IF;
END $$;

COMMENT ON FUNCTION ctxwin.usage_tokens(jsonb, boolean) IS
'A provider''s usage object (OpenAI Chat Completions or Responses, Anthropic Messages) normalized: provider, input tokens (all, cached or not), cache reads, cache writes, output tokens; raises for any other object, or with quiet gives NULLs';

-- The row of ctxwin.models whose prices a model name takes: the model of
-- that name, else the longest model name it starts with followed by "-"
-- (the dated names providers answer with: gpt-4o-mini-2024-07-18 is
-- gpt-4o-mini, claude-sonnet-4-5-20250929 is claude-sonnet-4-5).
CREATE FUNCTION ctxwin._price_model(model text)
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT m.name FROM ctxwin.models m
            WHERE m.name = _price_model.model OR starts_with(_price_model.model, m.name || '-')
            ORDER BY length(m.name) DESC, m.name
            LIMIT 1);
END $$;

COMMENT ON FUNCTION ctxwin._price_model(text) IS
'The ctxwin.models row a model name is priced as: the same name, or the longest name it starts with followed by a dash';

-- What tokens cost at given prices per million: uncached input, cache
-- reads, cache writes and output.  A price is needed only for tokens there
-- are: NULL when one of those is unknown (never counted as 0).  Reads no
-- table: the views below join the prices in themselves (under Citus a
-- function that read ctxwin.models inside a query of the distributed
-- usage_log would be a query within a query on a shard, which it refuses).
CREATE FUNCTION ctxwin._cost_at(input_tokens bigint, cached_tokens bigint, cache_write_tokens bigint,
                                output_tokens bigint, input_price numeric, cached_input_price numeric,
                                cache_write_price numeric, output_price numeric)
RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (CASE WHEN input_tokens - cached_tokens - cache_write_tokens = 0 THEN 0::numeric
             ELSE (input_tokens - cached_tokens - cache_write_tokens)::numeric * input_price END
        + CASE WHEN cached_tokens = 0 THEN 0::numeric ELSE cached_tokens::numeric * cached_input_price END
        + CASE WHEN cache_write_tokens = 0 THEN 0::numeric ELSE cache_write_tokens::numeric * cache_write_price END
        + CASE WHEN output_tokens = 0 THEN 0::numeric ELSE output_tokens::numeric * output_price END)
       * 0.000001;

COMMENT ON FUNCTION ctxwin._cost_at(bigint, bigint, bigint, bigint, numeric, numeric, numeric, numeric) IS
'Cost of input (all, cached or not), cache-read, cache-write and output tokens at prices per million tokens; NULL when a price needed is NULL';

-- What tokens cost at a model's prices in ctxwin.models: NULL when a price
-- needed is unknown, or the model is not in ctxwin.models.  (This one and
-- _price_model are PL/pgSQL: Citus fails to run an SQL function with a
-- standard body that reads one of its tables.)
CREATE FUNCTION ctxwin.usage_cost(model text, input_tokens bigint, cached_tokens bigint,
                       cache_write_tokens bigint, output_tokens bigint)
RETURNS numeric
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT ctxwin._cost_at(usage_cost.input_tokens, usage_cost.cached_tokens,
                                   usage_cost.cache_write_tokens, usage_cost.output_tokens, m.input_price,
                                   m.cached_input_price, m.cache_write_price, m.output_price)
            FROM ctxwin.models m
            WHERE m.name = ctxwin._price_model(usage_cost.model));
END $$;

COMMENT ON FUNCTION ctxwin.usage_cost(text, bigint, bigint, bigint, bigint) IS
'Cost of input (all, cached or not), cache-read, cache-write and output tokens at a model''s prices per million tokens in ctxwin.models; NULL when a price needed is unknown';

------------------------------------------------------------------------------
-- The ledger of requests
------------------------------------------------------------------------------

CREATE TABLE ctxwin.usage_log (
    session_id uuid NOT NULL REFERENCES ctxwin.sessions (id) ON DELETE CASCADE,
    id bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL DEFAULT 'request' CHECK (kind = 'request'),
    provider text NOT NULL CHECK (provider IN ('openai', 'anthropic')),
    model text NOT NULL,
    input_tokens bigint NOT NULL CHECK (input_tokens >= 0),
    cached_tokens bigint NOT NULL CHECK (cached_tokens >= 0),
    cache_write_tokens bigint NOT NULL CHECK (cache_write_tokens >= 0),
    output_tokens bigint NOT NULL CHECK (output_tokens >= 0),
    usage jsonb NOT NULL,
    window_first_id bigint CHECK (window_first_id >= 1),
    window_tokens int CHECK (window_tokens > 0),
    window_encoding text,
    PRIMARY KEY (session_id, id),
    CHECK (cached_tokens + cache_write_tokens <= input_tokens),
    CHECK ((window_tokens IS NULL) = (window_encoding IS NULL))
);

-- the newest requests of a model that carry their window: calibration
CREATE INDEX usage_log_calibration ON ctxwin.usage_log (model, created_at)
    WHERE window_tokens IS NOT NULL;

COMMENT ON TABLE ctxwin.usage_log IS
'One row per LLM request an application recorded with record_usage: the provider''s usage, normalized and as it came, and the window the request sent';
COMMENT ON COLUMN ctxwin.usage_log.id IS
'Position of the request in its session (1, 2, 3 ...)';
COMMENT ON COLUMN ctxwin.usage_log.provider IS
'Shape of the usage object: openai (Chat Completions or Responses) or anthropic (Messages)';
COMMENT ON COLUMN ctxwin.usage_log.model IS
'The model of the session''s profile when the usage was recorded';
COMMENT ON COLUMN ctxwin.usage_log.input_tokens IS
'Every prompt token the provider counted: uncached, cache reads and cache writes';
COMMENT ON COLUMN ctxwin.usage_log.cached_tokens IS
'Prompt tokens read from the provider''s cache';
COMMENT ON COLUMN ctxwin.usage_log.cache_write_tokens IS
'Prompt tokens written to the provider''s cache (Anthropic)';
COMMENT ON COLUMN ctxwin.usage_log.output_tokens IS
'Tokens of the answer, reasoning tokens included';
COMMENT ON COLUMN ctxwin.usage_log.usage IS
'The usage object as the provider returned it';
COMMENT ON COLUMN ctxwin.usage_log.window_first_id IS
'Id of the oldest message of the window the request sent (NULL: none, or not known)';
COMMENT ON COLUMN ctxwin.usage_log.window_tokens IS
'Tokens of the window the request sent, as ctxwin counted them in window_encoding';

-- Per model: how the provider's input tokens compare with ctxwin's count of
-- the windows sent, and the margin build_context's default budget takes.
CREATE TABLE ctxwin.calibration (
    model text PRIMARY KEY REFERENCES ctxwin.models (name) ON UPDATE CASCADE ON DELETE CASCADE,
    encoding text NOT NULL,
    requests int NOT NULL CHECK (requests >= 0),
    provider_tokens bigint NOT NULL CHECK (provider_tokens >= 0),
    counted_tokens bigint NOT NULL CHECK (counted_tokens >= 0),
    margin real NOT NULL CHECK (margin >= 1::real AND margin <= 1.5::real),
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE ctxwin.calibration IS
'Per model, over its newest 50 recorded requests with a window: the provider''s input tokens against ctxwin''s count, and the budget margin (1 to 1.5) build_context''s default budget is divided by; kept by record_usage';
COMMENT ON COLUMN ctxwin.calibration.encoding IS
'The encoding the windows were counted in; the margin applies while the model is counted in it';
COMMENT ON COLUMN ctxwin.calibration.margin IS
'provider_tokens / counted_tokens, at least 1 and at most 1.5; 1 for a model counted with its own tokenizer (an OpenAI model in cl100k_base or o200k_base)';

SELECT pg_catalog.pg_extension_config_dump('ctxwin.usage_log', '');
SELECT pg_catalog.pg_extension_config_dump('ctxwin.calibration', '');

-- build_context reads a session's margin as its caller: every role may
-- read the calibration.
GRANT SELECT ON ctxwin.calibration TO PUBLIC;

-- Recomputes a model's calibration from its newest 50 requests with a
-- window in the encoding the model is counted in now.  Runs as the
-- extension's owner: the margin is one per model, over every session's
-- requests, and no application role writes it.  A concurrent transaction
-- that is recomputing it already is not waited for (its result covers about
-- the same requests; the next request recomputes it again): returns NULL
-- then, else the margin.
CREATE FUNCTION ctxwin._calibrate(p_model text)
RETURNS real
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m record;
    n int;
    theirs bigint;
    ours bigint;
    v_margin real := 1;
BEGIN
    SELECT x.encoding, x.provider INTO m FROM ctxwin.models x WHERE x.name = p_model;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM FROM ctxwin.calibration c WHERE c.model = p_model FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        IF EXISTS (SELECT FROM ctxwin.calibration c WHERE c.model = p_model) THEN
            RETURN NULL;
        END IF;
        -- the model's first row: only then an INSERT ... ON CONFLICT,
        -- which waits for a transaction that has updated the row
        INSERT INTO ctxwin.calibration AS c (model, encoding, requests, provider_tokens, counted_tokens, margin)
        VALUES (p_model, m.encoding, 0, 0, 0, 1)
        ON CONFLICT (model) DO NOTHING;
        PERFORM FROM ctxwin.calibration c WHERE c.model = p_model FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    SELECT count(*)::int, coalesce(sum(r.input_tokens), 0::numeric)::bigint, coalesce(sum(r.window_tokens), 0::bigint)
    INTO n, theirs, ours
    FROM (SELECT l.input_tokens, l.window_tokens
          FROM ctxwin.usage_log l
          WHERE l.model = p_model AND l.window_tokens IS NOT NULL AND l.window_encoding = m.encoding
          ORDER BY l.created_at DESC
          LIMIT 50) r;
    -- an OpenAI model counted with its own vocabulary: exact, no margin
    IF NOT (coalesce(m.provider, '') = 'openai' AND m.encoding IN ('cl100k_base', 'o200k_base')) AND ours > 0 THEN
        v_margin := least(greatest(theirs::numeric / ours::numeric, 1::numeric), 1.5)::real;
    END IF;
    UPDATE ctxwin.calibration c
    SET encoding = m.encoding, requests = n, provider_tokens = theirs, counted_tokens = ours,
        margin = v_margin, updated_at = now()
    WHERE c.model = p_model;
    RETURN v_margin;
END $$;

COMMENT ON FUNCTION ctxwin._calibrate(text) IS
'Recomputes a model''s row of ctxwin.calibration from its newest 50 requests with a window; NULL if another transaction is at it';

-- record_usage: one request's usage, with the window it sent.
CREATE FUNCTION ctxwin.record_usage(session uuid, usage jsonb, window_first_id bigint DEFAULT NULL,
                         window_tokens int DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    p_session uuid := record_usage.session;
    p_usage jsonb := record_usage.usage;
    first_id bigint := record_usage.window_first_id;
    tokens int := record_usage.window_tokens;
    u record;
    newest bigint;
    st record;
    next_id bigint;
BEGIN
    IF p_session IS NULL THEN
        RAISE EXCEPTION 'session id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO u FROM ctxwin.usage_tokens(p_usage);
    -- the session row's lock numbers its requests, as it numbers messages
    SELECT x.message_count INTO newest FROM ctxwin.sessions x
    WHERE x.id = p_session
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % does not exist', p_session USING ERRCODE = 'no_data_found';
    END IF;
    SELECT x.model, x.encoding INTO st FROM ctxwin.session_settings x WHERE x.session_id = p_session;
    IF first_id IS NULL AND tokens IS NULL THEN
        -- the window build_context returns now
        SELECT c.window_tokens,
               CASE WHEN c.window_messages > 0 THEN
                   (SELECT min(w.id) FROM (SELECT m.id FROM ctxwin.messages m
                                           WHERE m.session_id = p_session AND m.retracted_at IS NULL
                                           ORDER BY m.id DESC LIMIT c.window_messages) w) END
        INTO tokens, first_id
        FROM ctxwin.context_status(p_session) c;
    ELSIF first_id IS NOT NULL AND (first_id < 1 OR first_id > newest) THEN
        RAISE EXCEPTION 'window_first_id % is not a message of session %', first_id, p_session
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('The session has %s messages.', newest);
    END IF;
    IF tokens IS NOT NULL AND tokens < 1 THEN
        RAISE EXCEPTION 'window_tokens must be greater than zero'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the tokens of the window the request sent, as ctxwin counts them (context_status''s window_tokens), or NULL.';
    END IF;
    SELECT coalesce(max(l.id), 0) + 1 INTO next_id FROM ctxwin.usage_log l WHERE l.session_id = p_session;
    -- the time of the call, not of the transaction: calibration takes the
    -- newest requests, and a transaction may record several
    INSERT INTO ctxwin.usage_log (session_id, id, created_at, kind, provider, model, input_tokens, cached_tokens,
                                  cache_write_tokens, output_tokens, usage, window_first_id, window_tokens,
                                  window_encoding)
    VALUES (p_session, next_id, clock_timestamp(), 'request', u.provider, st.model, u.input_tokens, u.cached_tokens,
            u.cache_write_tokens, u.output_tokens, p_usage, first_id, tokens,
            CASE WHEN tokens IS NOT NULL THEN st.encoding END);
    IF tokens IS NOT NULL THEN
        PERFORM ctxwin._calibrate(st.model);
    END IF;
    RETURN next_id;
END $$;

COMMENT ON FUNCTION ctxwin.record_usage(uuid, jsonb, bigint, int) IS
'Records the usage object of an LLM answer (OpenAI or Anthropic, as it came) for a session, with the window the request sent (default: the window build_context returns now); returns the request''s id in the session';

-- Every billed LLM call: the requests applications recorded, and the
-- summaries made with an LLM (strategies llm and hybrid, and app: the application's own model), whose usage is
-- normalized as record_usage does (NULL counts for a usage object it cannot
-- read, or none).
CREATE VIEW ctxwin.usage_ledger WITH (security_invoker = true) AS
SELECT l.session_id, l.kind, l.id, l.created_at, l.provider, l.model,
       l.input_tokens, l.cached_tokens, l.cache_write_tokens, l.output_tokens,
       CASE WHEN pm.name IS NOT NULL
            THEN ctxwin._cost_at(l.input_tokens, l.cached_tokens, l.cache_write_tokens, l.output_tokens,
                                 pm.input_price, pm.cached_input_price, pm.cache_write_price, pm.output_price)
       END AS cost,
       l.usage, l.window_first_id, l.window_tokens
FROM ctxwin.usage_log l
LEFT JOIN LATERAL (SELECT m.name, m.input_price, m.cached_input_price, m.cache_write_price, m.output_price
                   FROM ctxwin.models m
                   WHERE m.name = l.model OR starts_with(l.model, m.name || '-')
                   ORDER BY length(m.name) DESC, m.name
                   LIMIT 1) pm ON true
UNION ALL
SELECT x.session_id, 'summary'::text, x.version::bigint, x.created_at, t.provider, x.model,
       t.input_tokens, t.cached_tokens, t.cache_write_tokens, t.output_tokens,
       CASE WHEN pm.name IS NOT NULL
            THEN ctxwin._cost_at(t.input_tokens, t.cached_tokens, t.cache_write_tokens, t.output_tokens,
                                 pm.input_price, pm.cached_input_price, pm.cache_write_price, pm.output_price)
       END,
       x.usage, NULL::bigint, NULL::int
FROM ctxwin.summaries x
CROSS JOIN LATERAL ctxwin.usage_tokens(x.usage, true) t
LEFT JOIN LATERAL (SELECT m.name, m.input_price, m.cached_input_price, m.cache_write_price, m.output_price
                   FROM ctxwin.models m
                   WHERE m.name = x.model OR starts_with(x.model, m.name || '-')
                   ORDER BY length(m.name) DESC, m.name
                   LIMIT 1) pm ON true
WHERE x.strategy IN ('llm', 'hybrid', 'app');

COMMENT ON VIEW ctxwin.usage_ledger IS
'Every billed LLM call of a session: requests recorded with record_usage (kind request, id: the request''s) and LLM summaries (kind summary, id: the summary''s version), normalized, with their cost at the prices of ctxwin.models now';

-- Per session (with its profile now): its requests, then its summaries,
-- then the costs.  Tokens sum what the providers reported; a cost is NULL
-- when a price it needs or a call's usage is unknown.  Costs are computed
-- once per model, not per row.
CREATE VIEW ctxwin.usage WITH (security_invoker = true) AS
SELECT s.id AS session_id, s.profile,
       coalesce(sum(g.calls) FILTER (WHERE g.kind = 'request'), 0::numeric)::bigint AS requests,
       coalesce(sum(g.input_tokens) FILTER (WHERE g.kind = 'request'), 0::numeric)::bigint AS input_tokens,
       coalesce(sum(g.cached_tokens) FILTER (WHERE g.kind = 'request'), 0::numeric)::bigint AS cached_tokens,
       coalesce(sum(g.cache_write_tokens) FILTER (WHERE g.kind = 'request'), 0::numeric)::bigint AS cache_write_tokens,
       coalesce(sum(g.output_tokens) FILTER (WHERE g.kind = 'request'), 0::numeric)::bigint AS output_tokens,
       round(sum(g.cached_tokens) FILTER (WHERE g.kind = 'request')
             / nullif(sum(g.input_tokens) FILTER (WHERE g.kind = 'request'), 0::numeric), 4) AS cache_hit_ratio,
       coalesce(sum(g.calls) FILTER (WHERE g.kind = 'summary'), 0::numeric)::bigint AS summary_requests,
       coalesce(sum(g.input_tokens) FILTER (WHERE g.kind = 'summary'), 0::numeric)::bigint AS summary_input_tokens,
       coalesce(sum(g.output_tokens) FILTER (WHERE g.kind = 'summary'), 0::numeric)::bigint AS summary_output_tokens,
       CASE WHEN count(g.cost) FILTER (WHERE g.kind = 'request') = count(g.kind) FILTER (WHERE g.kind = 'request')
            THEN coalesce(sum(g.cost) FILTER (WHERE g.kind = 'request'), 0::numeric) END AS request_cost,
       CASE WHEN count(g.cost) FILTER (WHERE g.kind = 'summary') = count(g.kind) FILTER (WHERE g.kind = 'summary')
            THEN coalesce(sum(g.cost) FILTER (WHERE g.kind = 'summary'), 0::numeric) END AS summary_cost,
       CASE WHEN count(g.cost) = count(g.kind) THEN coalesce(sum(g.cost), 0::numeric) END AS cost
FROM ctxwin.sessions s
LEFT JOIN (
    SELECT a.session_id, a.kind, a.calls, a.input_tokens, a.cached_tokens, a.cache_write_tokens, a.output_tokens,
           CASE WHEN a.complete AND pm.name IS NOT NULL
                THEN ctxwin._cost_at(a.input_tokens::bigint, a.cached_tokens::bigint, a.cache_write_tokens::bigint,
                                     a.output_tokens::bigint, pm.input_price, pm.cached_input_price,
                                     pm.cache_write_price, pm.output_price) END AS cost
    FROM (SELECT l.session_id, l.kind, l.model, count(*) AS calls,
                 sum(l.input_tokens) AS input_tokens, sum(l.cached_tokens) AS cached_tokens,
                 sum(l.cache_write_tokens) AS cache_write_tokens, sum(l.output_tokens) AS output_tokens,
                 count(l.input_tokens) = count(*) AS complete
          FROM ctxwin.usage_ledger l
          GROUP BY l.session_id, l.kind, l.model) a
    LEFT JOIN LATERAL (SELECT m.name, m.input_price, m.cached_input_price, m.cache_write_price, m.output_price
                       FROM ctxwin.models m
                       WHERE m.name = a.model OR starts_with(a.model, m.name || '-')
                       ORDER BY length(m.name) DESC, m.name
                       LIMIT 1) pm ON true) g ON g.session_id = s.id
GROUP BY s.id;

COMMENT ON VIEW ctxwin.usage IS
'Per session: requests and their input, cached, cache-write and output tokens, cache hit ratio (cached / input), LLM summaries and their tokens, and costs at the prices of ctxwin.models (NULL when a price needed is unknown)';

-- The same per profile, summed over the sessions that have it now
-- (ctxwin.usage): a cost is NULL when one of theirs is.
CREATE VIEW ctxwin.profile_usage WITH (security_invoker = true) AS
SELECT p.name AS profile,
       count(u.session_id) AS sessions,
       coalesce(sum(u.requests), 0::numeric)::bigint AS requests,
       coalesce(sum(u.input_tokens), 0::numeric)::bigint AS input_tokens,
       coalesce(sum(u.cached_tokens), 0::numeric)::bigint AS cached_tokens,
       coalesce(sum(u.cache_write_tokens), 0::numeric)::bigint AS cache_write_tokens,
       coalesce(sum(u.output_tokens), 0::numeric)::bigint AS output_tokens,
       round(sum(u.cached_tokens) / nullif(sum(u.input_tokens), 0::numeric), 4) AS cache_hit_ratio,
       coalesce(sum(u.summary_requests), 0::numeric)::bigint AS summary_requests,
       coalesce(sum(u.summary_input_tokens), 0::numeric)::bigint AS summary_input_tokens,
       coalesce(sum(u.summary_output_tokens), 0::numeric)::bigint AS summary_output_tokens,
       CASE WHEN count(u.request_cost) = count(u.session_id) THEN coalesce(sum(u.request_cost), 0::numeric) END AS request_cost,
       CASE WHEN count(u.summary_cost) = count(u.session_id) THEN coalesce(sum(u.summary_cost), 0::numeric) END AS summary_cost,
       CASE WHEN count(u.cost) = count(u.session_id) THEN coalesce(sum(u.cost), 0::numeric) END AS cost
FROM ctxwin.profiles p
LEFT JOIN ctxwin.usage u ON u.profile = p.name
GROUP BY p.name;

COMMENT ON VIEW ctxwin.profile_usage IS
'ctxwin.usage summed per profile, over the sessions that have the profile now (sessions: how many)';

GRANT SELECT ON ctxwin.usage_ledger, ctxwin.usage, ctxwin.profile_usage TO PUBLIC;

------------------------------------------------------------------------------
-- Scaling out on Citus (sql/install/95_citus.sql)
--
-- ctxwin.distribute() turns the tables of a Citus coordinator's ctxwin into
-- Citus tables: sessions and the tables of each session's rows (messages,
-- summaries, flush_events, usage_log, summary_jobs) distributed by session id and
-- co-located, so a session and all its rows live on one node; models,
-- profiles and calibration reference tables, copied to every node.  The
-- functions that take one session are delegated to the node that holds it.
--
-- The foreign keys are dropped and added back around the conversion: with
-- them in place Citus would first turn the tables into Citus local tables,
-- which drops and recreates the views on them, and the extension's views
-- cannot be dropped.  The worker nodes' copies of ctxwin's tables (each
-- node has the extension) hold the same keys and lose them first, or Citus
-- could not add them back there.
------------------------------------------------------------------------------

-- The conversion itself, without Citus's notices of each table copied.
CREATE FUNCTION ctxwin._distribute(shard_count int)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning AS $$
DECLARE
    -- (table, constraint, definition): every foreign key between ctxwin's tables
    fkeys CONSTANT text[][] := ARRAY[
        ['ctxwin.profiles', 'profiles_model_fkey',
         'FOREIGN KEY (model) REFERENCES ctxwin.models (name) ON UPDATE CASCADE'],
        ['ctxwin.calibration', 'calibration_model_fkey',
         'FOREIGN KEY (model) REFERENCES ctxwin.models (name) ON UPDATE CASCADE ON DELETE CASCADE'],
        ['ctxwin.sessions', 'sessions_profile_fkey',
         'FOREIGN KEY (profile) REFERENCES ctxwin.profiles (name) ON UPDATE CASCADE'],
        ['ctxwin.messages', 'messages_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE'],
        ['ctxwin.summaries', 'summaries_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE'],
        ['ctxwin.flush_events', 'flush_events_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE'],
        ['ctxwin.usage_log', 'usage_log_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE'],
        ['ctxwin.summary_jobs', 'summary_jobs_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE']];
    drops text := '';
    failed text;
    i int;
    t text;
    f regprocedure;
BEGIN
    -- Citus creates the tables' triggers on their shards only with this on:
    -- ctxwin's insert trigger numbers and counts a message on the shard
    -- that holds its session (co-located with the session's row).
    PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
    -- reference tables are written after distributed ones in this transaction
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);

    FOR i IN 1 .. array_length(fkeys, 1) LOOP
        drops := drops || format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I; ',
                                 fkeys[i][1], fkeys[i][2]);
    END LOOP;
    SELECT string_agg(format('%s:%s: %s', w.nodename, w.nodeport, w.result), '; ')
    INTO failed
    FROM run_command_on_workers(drops) w
    WHERE NOT w.success;
    IF failed IS NOT NULL THEN
        RAISE EXCEPTION 'could not prepare the worker nodes'' copies of ctxwin''s tables'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Dropping their foreign keys failed: ' || failed || '.',
                  HINT = 'Make every worker node reachable, then run ctxwin.distribute() again.';
    END IF;
    EXECUTE drops;

    PERFORM create_reference_table('ctxwin.models');
    PERFORM create_reference_table('ctxwin.profiles');
    PERFORM create_reference_table('ctxwin.calibration');
    PERFORM create_distributed_table('ctxwin.sessions', 'id', shard_count => shard_count);
    FOREACH t IN ARRAY ARRAY['ctxwin.messages', 'ctxwin.summaries', 'ctxwin.flush_events',
                             'ctxwin.usage_log', 'ctxwin.summary_jobs'] LOOP
        PERFORM create_distributed_table(t::regclass, 'session_id', colocate_with => 'ctxwin.sessions');
    END LOOP;

    FOR i IN 1 .. array_length(fkeys, 1) LOOP
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', fkeys[i][1], fkeys[i][2], fkeys[i][3]);
    END LOOP;

    -- the coordinator's own copies of the rows, now in the shards
    FOREACH t IN ARRAY ARRAY['ctxwin.summary_jobs', 'ctxwin.usage_log', 'ctxwin.flush_events', 'ctxwin.summaries',
                             'ctxwin.messages', 'ctxwin.sessions', 'ctxwin.calibration',
                             'ctxwin.profiles', 'ctxwin.models'] LOOP
        PERFORM truncate_local_data_after_distributing_table(t::regclass);
    END LOOP;

    -- one call, one round trip to the node that holds the session.  Not
    -- the summary jobs: claim_summary and claim_next_summary take the
    -- session's claim, which lives on the coordinator with the worker's,
    -- and complete_summary and fail_summary take a token, not a session.
    FOREACH f IN ARRAY ARRAY['ctxwin.build_context(uuid,integer,text,jsonb,boolean)',
                             'ctxwin.build_window(uuid,integer,text,jsonb,boolean)',
                             'ctxwin.build_request(uuid,integer,text,jsonb,boolean,boolean)',
                             'ctxwin.context_status(uuid)',
                             'ctxwin.context_report(uuid)',
                             'ctxwin.messages_after(uuid,bigint)',
                             'ctxwin.search(uuid,text,text[],timestamp with time zone,timestamp with time zone,integer)',
                             'ctxwin.answer_tool_call(uuid,jsonb)',
                             'ctxwin.retract(uuid,bigint)']::regprocedure[] LOOP
        PERFORM create_distributed_function(f, 'session', colocate_with => 'ctxwin.sessions');
    END LOOP;
END $$;

COMMENT ON FUNCTION ctxwin._distribute(int) IS
'The conversion of ctxwin.distribute(): foreign keys dropped, tables made Citus tables, foreign keys added back, functions delegated';

REVOKE ALL ON FUNCTION ctxwin._distribute(int) FROM PUBLIC;

CREATE FUNCTION ctxwin.distribute(shard_count int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'ctxwin.distribute() needs the citus extension'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The extension citus is not installed in this database.',
                  HINT = 'On a Citus coordinator, run CREATE EXTENSION citus and add the worker nodes first.';
    END IF;
    IF NOT citus_is_coordinator() THEN
        RAISE EXCEPTION 'ctxwin.distribute() must run on the Citus coordinator'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Connect to the coordinator, or add this node as the coordinator with citus_set_coordinator_host().';
    END IF;
    IF EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = 'ctxwin.sessions'::regclass) THEN
        RAISE NOTICE 'ctxwin is distributed already';
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0) THEN
        RAISE EXCEPTION 'the Citus cluster has no worker nodes'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Add them with citus_add_node() first.';
    END IF;
    IF shard_count IS NOT NULL AND shard_count < 1 THEN
        RAISE EXCEPTION 'shard_count must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM ctxwin._distribute(shard_count);
END $$;

COMMENT ON FUNCTION ctxwin.distribute(int) IS
'On a Citus coordinator: distributes ctxwin''s tables by session (models, profiles and calibration as reference tables) and delegates the functions that take a session to the node that holds it';

REVOKE ALL ON FUNCTION ctxwin.distribute(int) FROM PUBLIC;

------------------------------------------------------------------------------
-- Recall: a session's whole history, summarized messages included,
-- searchable (search), and a tool for the model (build_request's recall,
-- recall_tool, answer_tool_call).  The text, the index entries, the
-- queries, the rank and the snippet are made in C (src/recall/search.c);
-- docs/recall.md says why it is built so.
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

-- One index for every session's search (on each partition of a
-- partitioned ctxwin.messages, and each shard under Citus).  fastupdate
-- on: an insert appends its entries to the index's pending list, which
-- costs about a third of inserting each into the tree (the search index
-- made an insert 4-8 times as costly as one into a plain table with
-- fastupdate off, bench/upgrade/RESULTS.md), and the database's worker
-- merges the list into the tree every second (src/worker/indexes.c), so
-- that a search reads a short list (every scan of a GIN index reads all of
-- it: GIN's 4 MB made a search of a rare word 4.6 times slower,
-- bench/recall/RESULTS.md).  The list's limit, 1 MB, bounds what a search
-- reads and what the insert that fills it merges where no worker serves
-- the database (autovacuum merges it too).
-- Partial: a message of a profile with search off (searchable false, set by
-- the insert trigger) has no entries, and costs an insert nothing here.
CREATE INDEX messages_search ON ctxwin.messages
    USING gin (ctxwin._search_vector(session_id, id, content, tool_calls) ctxwin.search_ops)
    WITH (fastupdate = on, gin_pending_list_limit = 1024) WHERE searchable;

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

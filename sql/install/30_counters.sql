-- Tokens of the unsummarized messages of a session, in an encoding.  A
-- message counted in another is counted again; of one with content parts,
-- the fields are, and its images keep what they cost when it was stored
-- (its stored count less its fields in the stored encoding): their rule is
-- the model's, not the encoding's (CtxwinRecountTokens, src/tokenizer/messages.c).
-- In C (src/ingest/sessions_maintain.c).
CREATE FUNCTION ctxwin._unsummarized_tokens(p_session uuid, p_after bigint, p_encoding text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ctxwin_unsummarized_tokens'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._unsummarized_tokens(uuid, bigint, text) IS
'Tokens of the messages of a session after an id (retracted ones left out), counted in an encoding';

-- Whether a session's counters put it in the compaction queue: a summary
-- trigger fires (N messages, K tokens, the ratio of the window; NULL = off)
-- and there is more than the newest min_recent_messages to summarize.  The
-- rule is SessionQueues in src/policy/rules.c, which the insert trigger and
-- context_status use too.
CREATE FUNCTION ctxwin._should_queue(messages bigint, tokens bigint, prompt_tokens bigint,
                                     max_messages int, max_tokens int, ratio real,
                                     context_window int, min_recent int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_should_queue'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._should_queue(bigint, bigint, bigint, int, int, real, int, int) IS
'Whether a session with these unsummarized messages and tokens belongs in the compaction queue under these settings';

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
-- point or profile change, and guards the summary point.  In C
-- (src/ingest/sessions_maintain.c).
CREATE FUNCTION ctxwin._sessions_maintain() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_sessions_maintain'
LANGUAGE C
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._sessions_maintain() IS
'Trigger on sessions: recounts prompt and unsummarized tokens, checks that the summary point only moves forward and never splits a tool call group, clears the compaction errors when it moves, keeps the summary''s segments true';

CREATE TRIGGER sessions_maintain_insert BEFORE INSERT ON ctxwin.sessions
    FOR EACH ROW EXECUTE FUNCTION ctxwin._sessions_maintain();
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
CREATE FUNCTION ctxwin._settings_requeue() RETURNS trigger
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
-- (src/ingest/trigger.c), it runs on every message insert; it pins no search_path
-- but resolves no name through it: every name in its queries is qualified.
-- The counters of a statement's messages are kept in memory and written
-- once per session at the end of the statement (so a load of n messages in
-- one statement costs O(n), not O(n^2)): the same function, as statement
-- triggers, marks the statement's start and end.  Ids, token counts and
-- token encodings are supplied only by the table's owner (a restore).
CREATE FUNCTION ctxwin._messages_insert() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_messages_insert'
LANGUAGE C;

COMMENT ON FUNCTION ctxwin._messages_insert() IS
'Insert trigger on messages: numbers the message in its session, counts its tokens, keeps the session counters, queues the session when a summary trigger fires; as statement triggers, writes the counters once per statement';

CREATE TRIGGER messages_insert BEFORE INSERT ON ctxwin.messages
    FOR EACH ROW EXECUTE FUNCTION ctxwin._messages_insert();
CREATE TRIGGER messages_insert_begin BEFORE INSERT ON ctxwin.messages
    FOR EACH STATEMENT EXECUTE FUNCTION ctxwin._messages_insert();
CREATE TRIGGER messages_insert_end AFTER INSERT ON ctxwin.messages
    FOR EACH STATEMENT EXECUTE FUNCTION ctxwin._messages_insert();

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
CREATE FUNCTION ctxwin._messages_guard() RETURNS trigger
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

CREATE TRIGGER messages_guard BEFORE UPDATE OR DELETE ON ctxwin.messages
    FOR EACH ROW EXECUTE FUNCTION ctxwin._messages_guard();

CREATE FUNCTION ctxwin.messages_after(session uuid, after_id bigint DEFAULT NULL)
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


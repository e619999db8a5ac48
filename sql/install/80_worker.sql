-- A failed compaction attempt: counted (the circuit breaker), recorded, and
-- not retried by the worker for 1, 4, 16 ... seconds (at most an hour).
-- The session stays queued.  In C: it locks the row as the caller (its
-- privileges and row-level security apply; NULL if it cannot see it), then
-- writes the bookkeeping columns as ctxwin's own code, all but the error
-- text derived from the row.
CREATE FUNCTION ctxwin._compaction_failed(p_session uuid, p_error text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'ctxwin_compaction_failed'
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
AS 'MODULE_PATHNAME', 'ctxwin_compaction_settle'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._compaction_settle(uuid) IS
'Takes a queued session with nothing to summarize off the queue, or looks at it again in a minute if its counters say it is due';

-- Whether the background worker has a request in flight for a session (it
-- holds no row then, but a lock that SQL cannot take).
CREATE FUNCTION ctxwin._session_claimed(p_session uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_session_claimed'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION ctxwin._session_claimed(uuid) IS
'Whether the background worker has an LLM request in flight for a session';

-- The queued sessions, oldest queued first, each summarized in a
-- subtransaction of its own; a failure is recorded with _compaction_failed.
-- In C (src/summary/compact.c).
CREATE FUNCTION ctxwin.compact(max_sessions int DEFAULT 100)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_compact'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

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

-- The LLM client
------------------------------------------------------------------------------

CREATE FUNCTION ctxwin._llm_post(body jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_post'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_post(jsonb) IS
'POSTs a JSON body to the configured LLM endpoint with the server''s key; returns status, body, retry_after and latency. Not for PUBLIC.';

REVOKE ALL ON FUNCTION ctxwin._llm_post(jsonb) FROM PUBLIC;

-- The built-in summary prompt.  The summary keeps fixed sections, the same
-- headings as the extractive strategy's (60_extractive.sql), so that a
-- model can find its way in it and to what it leaves out: the transcript
-- marks each message with its id (#12), which the lookup hints name, with
-- search terms for the conversation_search tool (86_recall.sql).
CREATE FUNCTION ctxwin.default_summary_prompt()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN 'You maintain the running summary of a conversation between a user and an AI assistant. '
    || 'You are given the previous summary (possibly empty) and the messages that came after it, each marked with its id (#12). '
    || 'Write one updated summary that merges both, in these sections, each heading on a line of its own followed by short lines starting with "- ": '
    || '"Goal and state:" the user''s current goal (the latest one: when the user changed it, say what it replaced), where things stand now and the next step; '
    || '"Decisions:" what was decided, and why, and what was changed (files, records, settings) and how; '
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
CREATE FUNCTION ctxwin.transcript(messages jsonb, encoding text DEFAULT 'cl100k_base',
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

-- The body of a summary request in the configured provider's wire format,
-- with the model as "model" (Gemini's goes into the URL).  Each provider is
-- a file of src/llm/ (openai.c, responses.c, anthropic.c, gemini.c).
CREATE FUNCTION ctxwin._llm_request(system_prompt text, prompt text, max_tokens int, model text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_request'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_request(text, text, int, text) IS
'The JSON body of a summary request for the configured provider';

-- The summary in a successful (2xx) answer of _llm_post, read as its
-- provider says: a complete, non-empty text, or an error.  Only an answer
-- that ended with a complete stop (each provider lists its stop reasons:
-- finish_reason "stop", stop_reason "end_turn", status "completed",
-- finishReason "STOP") with one choice, no refusal and no tool calls can
-- become a summary: a truncated, filtered, refused, paused or tool-calling
-- answer, an answer with no stop reason or several choices, an empty text
-- or an error never does.  The errors name the stop reason (a sanitized
-- word) but never quote the model's text.  None is sent again at once (at
-- temperature 0 the same request gets the same answer): summarize_session
-- raises, and the worker and compact() record a failed compaction, retried
-- later with its backoff up to ctxwin.max_failures.  In C
-- (src/llm/provider.c, with the provider's file).
CREATE FUNCTION ctxwin._llm_answer(r jsonb, max_tokens int)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_answer'
LANGUAGE C IMMUTABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_answer(jsonb, int) IS
'The summary text, model and usage of a successful LLM answer; raises for an answer that must not become a summary';

/*
 * The summary request of a plan (of _summary_plan) to the configured
 * provider, with retries as _llm_next_try says: connection failures,
 * timeouts and 5xx back off exponentially; 429 and 529 wait as Retry-After
 * says without counting as a failed attempt (up to 3 such waits).  Returns
 * the successful answer of _llm_post, with "requests" (how many were
 * sent); _llm_answer reads the summary out of it.
 *
 * SECURITY DEFINER, so that roles allowed to summarize (granted EXECUTE)
 * can use the server's key without seeing it; and so it sends nothing but a
 * summary of a session its caller may read: of the plan it takes only the
 * session, the range and the instructions, checks them against the stored
 * session, and makes the request itself from stored data (_summary_request:
 * the profile's prompt, model and max_summary_tokens).  In C
 * (src/llm/summarize.c).
 */
CREATE FUNCTION ctxwin._llm_summarize(plan jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_summarize'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

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
 * one retry policy of summarize_session and the worker (which calls it in
 * C, LlmNextTry in src/llm/provider.c).  failures: the charged failures
 * before this one; rate_waits: the waits for 429/529 so far.
 *  - other 4xx are refusals: {"retry": false, "refused": true}
 *  - 429 and 529 wait as Retry-After says (seconds, at most 60; else 1, 2,
 *    4 s), up to 3 times, without counting as a failure: "charged": false
 *  - everything else (timeouts, 408, 409, 5xx, 429/529 after 3 waits) backs
 *    off 0.25, 0.5, 1 ... s (at most 30), up to max_retries times
 * The Retry-After of an answer is its header's, or where a provider says
 * it in the body instead (Gemini's RetryInfo), that (_llm_post).
 */
CREATE FUNCTION ctxwin._llm_next_try(status int, retry_after text, failures int, rate_waits int, max_retries int)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_next_try'
LANGUAGE C IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_next_try(int, text, int, int, int) IS
'Whether and after how many seconds to send a failed LLM request again, and whether the failure counts';

-- A short description of an LLM error answer: status and the provider's
-- message (at most 300 characters of it).
CREATE FUNCTION ctxwin._llm_error_text(r jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_llm_error_text'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_error_text(jsonb) IS
'Status and message of an LLM error answer, for errors and last_error';

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
CREATE FUNCTION ctxwin._summary_cut(p_session uuid, p_after bigint, p_target bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT max(e) FROM ctxwin._summary_ends(p_session, p_after, p_target) e);

COMMENT ON FUNCTION ctxwin._summary_cut(uuid, bigint, bigint) IS
'The last message id at or before a target where a summary may end without splitting a tool group';

-- Whether a summary trigger fires for a session now: context_status's
-- will_trigger, without the window (src/window/status.c).  Counts in the encoding
-- in effect now (the counters' own if the model did not change since).
CREATE FUNCTION ctxwin._session_due(p_session uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_session_due'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._session_due(uuid) IS 'Whether a summary trigger fires for the session now';

-- The unsummarized messages of a session up to an id, as chat messages.
CREATE FUNCTION ctxwin._summary_messages(p_session uuid, p_after bigint, p_through bigint)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT jsonb_agg(ctxwin._message_json(m.role, m.content, m.name, m.tool_call_id, m.tool_calls)
                         || jsonb_build_object('id', m.id) ORDER BY m.id)
        FROM ctxwin.messages m
        WHERE m.session_id = p_session AND m.id > p_after AND m.id <= p_through
          AND m.retracted_at IS NULL);

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
 * summary takes the next part.  In C (src/summary/request.c).
 */
CREATE FUNCTION ctxwin._summary_fit(p_session uuid, p_after bigint, p_through bigint, p_room int,
                                    p_encoding text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_summary_fit'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

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
 * system_prompt, prompt, model, segment and budget.  In C
 * (src/summary/request.c), which the plan calls directly.
 */
CREATE FUNCTION ctxwin._summary_request(p_session uuid, p_after bigint, p_through bigint, p_instructions text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_summary_request'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

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
CREATE FUNCTION ctxwin._summary_plan(p_session uuid, p_force boolean, p_instructions text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_summary_plan'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._summary_plan(uuid, boolean, text) IS
'What the next summary of a session covers and the LLM request that makes it; NULL when there is nothing to summarize';

/*
 * The second half of a summary: makes the extractive summary, or reads the
 * LLM's answer, checks it and writes it with a compare-and-set (only if the
 * session's summary did not change since the plan), with its summaries row,
 * flush event and NOTIFY.  Raises, leaving everything as it was, for an
 * answer that must not become a summary.  In C (src/summary/summary.c), with the
 * extractive summarizer and the answer check (_llm_answer) in SQL.
 */
CREATE FUNCTION ctxwin._summary_finish(plan jsonb, answer jsonb)
RETURNS ctxwin.summaries
AS 'MODULE_PATHNAME', 'ctxwin_summary_finish'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._summary_finish(jsonb, jsonb) IS
'Makes or reads the summary a plan asks for and writes it with a compare-and-set, with its summaries row and flush event';

-- The plan, the LLM request (_llm_summarize) and the finish, in this
-- backend and transaction.  In C (src/summary/compact.c).
CREATE FUNCTION ctxwin.summarize_session(session uuid, force boolean DEFAULT false,
                                         instructions text DEFAULT NULL)
RETURNS ctxwin.summaries
AS 'MODULE_PATHNAME', 'ctxwin_summarize_session'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.summarize_session(uuid, boolean, text) IS
'Summarizes the oldest unsummarized messages of a session now, in this backend (all but the newest min_recent_messages, tool groups whole); without force only when a trigger fires. Writes the session, a summaries row and a flush event in this transaction.';

------------------------------------------------------------------------------
-- Segments: under a stable window a summary is appended to, not rewritten
------------------------------------------------------------------------------

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
-- In C (src/summary/segments.c).
CREATE FUNCTION ctxwin._segments_checked(summary text, segments int[])
RETURNS int[]
AS 'MODULE_PATHNAME', 'ctxwin_segments_checked'
LANGUAGE C IMMUTABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._segments_checked(text, int[]) IS
'A summary''s segment lengths as sessions.summary_segments keeps them (NULL: one segment); raises for lengths that do not add up to the summary';

------------------------------------------------------------------------------
-- Summary jobs: summaries made by the application's own model
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

/*
 * Completes a summary job with the application's model's answer: applied
 * by the worker's own code and checks (_summary_finish: a segment appended
 * under a stable window, the compare-and-set, the summaries row with the
 * usage, the flush event).  A stale token is CW001; an empty answer is
 * 22023 and the job stays claimed; nothing is written on either.  In C
 * (src/summary/job_finish.c), as are fail_summary and release_summary.
 */
CREATE FUNCTION ctxwin.complete_summary(token text, summary text, usage jsonb DEFAULT NULL)
RETURNS ctxwin.summaries
AS 'MODULE_PATHNAME', 'ctxwin_complete_summary'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.complete_summary(text, text, jsonb) IS
'Writes the summary of a claimed job with the worker''s code and checks, its usage recorded as a summary call; CW001 for a stale token, 22023 for an empty summary, nothing written on either';

-- Ends a summary job without a summary: the failure is recorded on the
-- session as the worker records its own (compaction_failures, last_error,
-- the backoff before the next claim_next_summary or worker attempt).
CREATE FUNCTION ctxwin.fail_summary(token text, error text)
RETURNS void
AS 'MODULE_PATHNAME', 'ctxwin_fail_summary'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

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
AS 'MODULE_PATHNAME', 'ctxwin_release_summary'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.release_summary(text) IS
'Gives a claimed summary job back, with no summary and no failure recorded: the session is free for the next summarizer at once; false when the token''s job no longer holds it';

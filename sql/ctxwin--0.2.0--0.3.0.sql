-- ctxwin 0.2.0 to 0.3.0.
\echo Use "ALTER EXTENSION ctxwin UPDATE TO '0.3.0'" to load this file. \quit

-- Runs with search_path = pg_catalog, pg_temp (the control file's schema).
-- The library this backend runs must be 0.3.0 or newer (a server that
-- preloads ctxwin keeps the library it started with until it restarts).
SELECT ctxwin._require_library('0.3.0');

-- The extractive summarizer keeps more of what a conversation planted: ids
-- of letters and digits, hex strings, dates, host names, counted numbers;
-- the latest goal first; no question a later answer took up as open; the
-- fact that stands out of a long tool result.  The LLM's built-in summary
-- prompt asks for the latest goal, what it replaced, the next step and
-- what was changed.  Functions only: no table is locked, and a writer never
-- waits on this update.

-- Facts a summary keeps verbatim, found without an LLM: URLs, e-mail
-- addresses, paths, commands, error names and codes, ids of letters and
-- digits (ORD-27611, BK-LHHGX2, INV-2026-1995, TP1821, build-7729), hex
-- strings, dates, host names, package@version, identifiers, amounts, and numbers with a unit or a
-- counted noun (87 line items), in order of appearance, each once.  Where
-- two patterns match at one place, the longest match wins (INV-2026-1995,
-- not INV-2026).  In C (src/summary/facts.c): one regular expression, run
-- as regexp_matches(t, pattern, 'g') runs it.
CREATE OR REPLACE FUNCTION ctxwin.extract_facts(t text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'ctxwin_extract_facts'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin.extract_facts(text) IS
'URLs, e-mail addresses, paths, inline code, error names, codes and ids, dates, host names, identifiers, amounts and counted numbers found in a text, each once, in order of appearance';


-- The content words of a text (4 characters or more, lower case, not the
-- commonest function words), each once, sorted, as |w1|w2|...| ("||" for
-- none): what _answered compares (src/summary/words.c).
CREATE FUNCTION ctxwin._content_words(t text)
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_content_words'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._content_words(text) IS
'The content words of a text (4 characters or more, not the commonest function words), each once, as |w1|w2|...|';


-- Whether a question is answered by one of the texts given (their
-- _content_words): one that holds at least 60 % of the question's content
-- words, and at least least_shared of them (by default two: a question of
-- one content word is then never taken as answered).  The reply to a
-- question's message is asked with least_shared 1: it answers when it
-- takes up one of the question's words (src/summary/words.c).
CREATE FUNCTION ctxwin._answered(question text, answers text[], least_shared int DEFAULT 2)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_answered'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._answered(text, text[], int) IS
'Whether one of the texts given (as _content_words) holds at least least_shared (2) and at least 60 % of the question''s content words; with least_shared 1, one word is enough';


-- The facts of a tool result, the rare ones first: those whose shape
-- (the fact with each run of digits as one 9) no other fact of the result
-- has, in order of appearance (at
-- most 8: the line of a log, a row of a query that stands out), then the
-- first 4 of the others.  A long result repeats one shape many times
-- (durations, row ids); what is planted in it is unlike the rest.  In C
-- (src/summary/facts.c).
CREATE FUNCTION ctxwin._tool_facts(t text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'ctxwin_tool_facts'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._tool_facts(text) IS
'The facts of a tool result, those of a shape no other fact of it has first (at most 8), then the first 4 others';


/*
 * The extractive strategy: no network, deterministic.  Keeps, within
 * max_tokens, in the sections of the LLM's summary (default_summary_prompt):
 *   Goal and state  what the user asks for now: sentences that mention a
 *                   word of instructions, the user's sentences that set or
 *                   change a goal ("I want", "instead", "first", ...), then
 *                   the next step the assistant named, then the first sentence
 *                   of the user's other messages; newest first, so the
 *                   latest goal leads, and a goal that a newer change of
 *                   goal replaced is marked "Earlier goal:"
 *   Decisions       decisions and conclusions, and what was changed
 *   Identifiers     facts verbatim (extract_facts), on one line: those the
 *                   user gave first, then the assistant's, then of tool
 *                   results those whose shape is rare in their result (the
 *                   line that stands out of a log), then a few more
 *   Open items      the user's questions that no later answer of the
 *                   assistant took up: neither the reply to their message
 *                   (the next message with text, the assistant's, a
 *                   statement that does not put the answer off: "I cannot",
 *                   "let me", "depends", "yet", ...; to a question of
 *                   what, when, who, how...: any such reply; to another: one
 *                   that starts with yes or no or takes up one of its words)
 *                   nor a later message of the assistant's (of the 64
 *                   nearest) that holds most of the question's words
 *                   (_answered)
 *   Lookup hints    per summarized range, its message ids, the tools it
 *                   called and identifiers to search it by
 * newest first within each section, merged with the sections of the
 * previous summary (newer items first; an open item of the previous
 * summary that the new messages answer is dropped).  A previous summary in
 * 0.1.0's sections (Focus, Requests, Questions, Facts, Tools used) is read
 * into these; a previous summary of another kind is kept as "Earlier".
 * In C: src/summary/extractive.c.
 */
CREATE OR REPLACE FUNCTION ctxwin.extractive_summary(previous text, messages jsonb, max_tokens int,
                                          encoding text DEFAULT 'cl100k_base',
                                          instructions text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_extractive_summary'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.extractive_summary(text, jsonb, int, text, text) IS
'The extractive summary (no LLM) of a previous summary and new messages, in the sections Goal and state (the latest goal first), Decisions, Identifiers (verbatim), Open items (the questions not answered later) and Lookup hints (message ids, tools called, search terms), within max_tokens';

-- The extractive summary's rendering and its summary of last resort are
-- part of its C (src/summary/extractive.c).
DROP FUNCTION ctxwin._fallback_summary(jsonb, int, text);
DROP FUNCTION ctxwin._render_summary(text[], jsonb, int[], text, int, text);


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

-- The providers' request and answer, in C (src/llm/): the same signatures,
-- with OpenAI Responses and Google Gemini beside OpenAI and Anthropic.
-- The body of a summary request in the configured provider's wire format,
-- with the model as "model" (Gemini's goes into the URL).  Each provider is
-- a file of src/llm/ (openai.c, responses.c, anthropic.c, gemini.c).
CREATE OR REPLACE FUNCTION ctxwin._llm_request(system_prompt text, prompt text, max_tokens int, model text)
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
CREATE OR REPLACE FUNCTION ctxwin._llm_answer(r jsonb, max_tokens int)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_answer'
LANGUAGE C IMMUTABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_answer(jsonb, int) IS
'The summary text, model and usage of a successful LLM answer; raises for an answer that must not become a summary';

-- The retry policy and the error text, in C (src/llm/provider.c): the worker
-- calls them without SQL.
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
CREATE OR REPLACE FUNCTION ctxwin._llm_next_try(status int, retry_after text, failures int, rate_waits int, max_retries int)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_next_try'
LANGUAGE C IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_next_try(int, text, int, int, int) IS
'Whether and after how many seconds to send a failed LLM request again, and whether the failure counts';

-- A short description of an LLM error answer: status and the provider's
-- message (at most 300 characters of it).
CREATE OR REPLACE FUNCTION ctxwin._llm_error_text(r jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_llm_error_text'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_error_text(jsonb) IS
'Status and message of an LLM error answer, for errors and last_error';

-- record_usage and the usage views read Gemini's usageMetadata too.
-- The usage object of an LLM answer, normalized.  The shapes:
--   OpenAI Chat Completions: prompt_tokens (cache reads included),
--     prompt_tokens_details.cached_tokens, completion_tokens;
--   OpenAI Responses: input_tokens (cache reads included),
--     input_tokens_details.cached_tokens, output_tokens, and total_tokens
--     or the *_details objects, which Anthropic never sends;
--   Anthropic Messages: input_tokens (neither cache reads nor cache writes),
--     cache_read_input_tokens, cache_creation_input_tokens, output_tokens;
--   Google Gemini (usageMetadata): promptTokenCount (cache reads included),
--     toolUsePromptTokenCount, cachedContentTokenCount,
--     candidatesTokenCount, thoughtsTokenCount.
-- input_tokens is every prompt token, cached or not; output_tokens includes
-- reasoning tokens (Gemini's thoughts), as the providers bill them.
CREATE OR REPLACE FUNCTION ctxwin.usage_tokens(usage jsonb, quiet boolean DEFAULT false,
                                    OUT provider text, OUT input_tokens bigint, OUT cached_tokens bigint,
                                    OUT cache_write_tokens bigint, OUT output_tokens bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    chat boolean;
    io boolean;
    responses boolean;
    anthropic boolean;
    gemini boolean;
    base bigint;
    extra bigint;
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
    gemini := usage ? 'promptTokenCount' OR usage ? 'candidatesTokenCount' OR usage ? 'totalTokenCount';
    IF gemini AND NOT chat AND NOT io THEN
        provider := 'gemini';
        base := ctxwin._usage_count(usage, '{promptTokenCount}', true, quiet);
        extra := coalesce(ctxwin._usage_count(usage, '{toolUsePromptTokenCount}', false, quiet), 0);
        input_tokens := CASE WHEN base >= 0 AND extra >= 0 THEN base + extra ELSE -1 END;
        cached_tokens := coalesce(ctxwin._usage_count(usage, '{cachedContentTokenCount}', false, quiet), 0);
        cache_write_tokens := 0;
        base := coalesce(ctxwin._usage_count(usage, '{candidatesTokenCount}', false, quiet), 0);
        extra := coalesce(ctxwin._usage_count(usage, '{thoughtsTokenCount}', false, quiet), 0);
        output_tokens := CASE WHEN base >= 0 AND extra >= 0 THEN base + extra ELSE -1 END;
    ELSIF chat AND NOT io AND NOT gemini THEN
        provider := 'openai';
        input_tokens := ctxwin._usage_count(usage, '{prompt_tokens}', true, quiet);
        cached_tokens := coalesce(ctxwin._usage_count(usage, '{prompt_tokens_details,cached_tokens}', false, quiet), 0);
        cache_write_tokens := 0;
        output_tokens := ctxwin._usage_count(usage, '{completion_tokens}', true, quiet);
    ELSIF io AND NOT chat AND responses AND NOT anthropic AND NOT gemini THEN
        provider := 'openai';
        input_tokens := ctxwin._usage_count(usage, '{input_tokens}', true, quiet);
        cached_tokens := coalesce(ctxwin._usage_count(usage, '{input_tokens_details,cached_tokens}', false, quiet), 0);
        cache_write_tokens := 0;
        output_tokens := ctxwin._usage_count(usage, '{output_tokens}', true, quiet);
    ELSIF io AND NOT chat AND NOT responses AND NOT gemini THEN
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
        RAISE EXCEPTION 'usage is not an OpenAI, Anthropic or Gemini usage object'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Its keys are: %s.',
                                  coalesce((SELECT string_agg(k, ', ' ORDER BY k) FROM jsonb_object_keys(usage) k), 'none')),
                  HINT = 'Pass the "usage" object of the answer as it came: OpenAI Chat Completions (prompt_tokens, completion_tokens ...), OpenAI Responses (input_tokens, output_tokens, input_tokens_details ...) Anthropic Messages (input_tokens, output_tokens, cache_read_input_tokens ...) or Gemini (its usageMetadata: promptTokenCount, candidatesTokenCount ...).';
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
'A provider''s usage object (OpenAI Chat Completions or Responses, Anthropic Messages, Gemini usageMetadata) normalized: provider, input tokens (all, cached or not), cache reads, cache writes, output tokens; raises for any other object, or with quiet gives NULLs';

-- build_request speaks the formats of the Responses API and of Gemini.
COMMENT ON FUNCTION ctxwin.build_request(uuid, int, text, jsonb, boolean, boolean) IS
'The request body to POST as it is: openai: {"model", "messages", "max_completion_tokens" or "max_tokens", "tools", "prompt_cache_key"}; anthropic: {"model", "system", "messages", "max_tokens", "tools"}, with prompt-cache breakpoints; responses: {"model", "input", "max_output_tokens", "tools", "prompt_cache_key"}; gemini: {"contents", "systemInstruction", "tools", "generationConfig"} (the model goes into the URL); the window is build_context''s; with recall, the tools end with conversation_search (recall_tool()), counted in the budget as the others. Never writes.';

-- The request loop of summarize_session and compact(), in C: the one retry
-- policy, no PL/pgSQL.
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
CREATE OR REPLACE FUNCTION ctxwin._llm_summarize(plan jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_summarize'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._llm_summarize(jsonb) IS
'The summary request of a plan to the configured LLM, made from stored data only, with retries and backoff; returns the successful answer, or raises';

-- The request of a summary in C (src/summary/request.c), and no PL/pgSQL
-- left in the path of a summary's plan.
-- The newest message id a summary may end at: at most target, after the
-- current summary point, and not inside a tool group (_summary_ends).
CREATE OR REPLACE FUNCTION ctxwin._summary_cut(p_session uuid, p_after bigint, p_target bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT max(e) FROM ctxwin._summary_ends(p_session, p_after, p_target) e);

COMMENT ON FUNCTION ctxwin._summary_cut(uuid, bigint, bigint) IS
'The last message id at or before a target where a summary may end without splitting a tool group';

-- The unsummarized messages of a session up to an id, as chat messages.
CREATE OR REPLACE FUNCTION ctxwin._summary_messages(p_session uuid, p_after bigint, p_through bigint)
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
CREATE OR REPLACE FUNCTION ctxwin._summary_fit(p_session uuid, p_after bigint, p_through bigint, p_room int,
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
CREATE OR REPLACE FUNCTION ctxwin._summary_request(p_session uuid, p_after bigint, p_through bigint, p_instructions text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_summary_request'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._summary_request(uuid, bigint, bigint, text) IS
'The LLM request of a summary, made from stored data only, within the summary model''s window';

-- The end of an application's summary job and the check of a summary's
-- segments in C (src/summary/job_finish.c, src/summary/segments.c): no
-- PL/pgSQL left in the path of a summary.  The job as the application sees
-- it and the check of a token are C helpers of claim_summary and
-- complete_summary, no longer SQL functions.
DROP FUNCTION ctxwin._summary_job(jsonb, text, timestamptz, boolean);
DROP FUNCTION ctxwin._summary_job_live(text);

-- A summary's segments as ctxwin.sessions.summary_segments keeps them:
-- NULL for one segment (or no summary), else the lengths in characters of
-- two or more segments that add up to the summary, with a blank line
-- between two; raises for lengths that do not.  _sessions_maintain calls it.
-- In C (src/summary/segments.c).
CREATE OR REPLACE FUNCTION ctxwin._segments_checked(summary text, segments int[])
RETURNS int[]
AS 'MODULE_PATHNAME', 'ctxwin_segments_checked'
LANGUAGE C IMMUTABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._segments_checked(text, int[]) IS
'A summary''s segment lengths as sessions.summary_segments keeps them (NULL: one segment); raises for lengths that do not add up to the summary';

/*
 * Completes a summary job with the application's model's answer: applied
 * by the worker's own code and checks (_summary_finish: a segment appended
 * under a stable window, the compare-and-set, the summaries row with the
 * usage, the flush event).  A stale token is CW001; an empty answer is
 * 22023 and the job stays claimed; nothing is written on either.  In C
 * (src/summary/job_finish.c), as are fail_summary and release_summary.
 */
CREATE OR REPLACE FUNCTION ctxwin.complete_summary(token text, summary text, usage jsonb DEFAULT NULL)
RETURNS ctxwin.summaries
AS 'MODULE_PATHNAME', 'ctxwin_complete_summary'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.complete_summary(text, text, jsonb) IS
'Writes the summary of a claimed job with the worker''s code and checks, its usage recorded as a summary call; CW001 for a stale token, 22023 for an empty summary, nothing written on either';

-- Ends a summary job without a summary: the failure is recorded on the
-- session as the worker records its own (compaction_failures, last_error,
-- the backoff before the next claim_next_summary or worker attempt).
CREATE OR REPLACE FUNCTION ctxwin.fail_summary(token text, error text)
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
CREATE OR REPLACE FUNCTION ctxwin.release_summary(token text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ctxwin_release_summary'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.release_summary(text) IS
'Gives a claimed summary job back, with no summary and no failure recorded: the session is free for the next summarizer at once; false when the token''s job no longer holds it';

-- The sessions trigger and the unsummarized tokens of a session in C
-- (src/ingest/sessions_maintain.c): the same checks, errors and derived
-- columns.
-- Tokens of the unsummarized messages of a session, in an encoding.  A
-- message counted in another is counted again; of one with content parts,
-- the fields are, and its images keep what they cost when it was stored
-- (its stored count less its fields in the stored encoding): their rule is
-- the model's, not the encoding's (CtxwinRecountTokens, src/tokenizer/messages.c).
-- In C (src/ingest/sessions_maintain.c).
CREATE OR REPLACE FUNCTION ctxwin._unsummarized_tokens(p_session uuid, p_after bigint, p_encoding text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ctxwin_unsummarized_tokens'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._unsummarized_tokens(uuid, bigint, text) IS
'Tokens of the messages of a session after an id (retracted ones left out), counted in an encoding';

-- Keeps a session's derived columns right when its prompt, summary, summary
-- point or profile change, and guards the summary point.  In C
-- (src/ingest/sessions_maintain.c).
CREATE OR REPLACE FUNCTION ctxwin._sessions_maintain() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_sessions_maintain'
LANGUAGE C
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin._sessions_maintain() IS
'Trigger on sessions: recounts prompt and unsummarized tokens, checks that the summary point only moves forward and never splits a tool call group, clears the compaction errors when it moves, keeps the summary''s segments true';

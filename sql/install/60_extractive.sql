------------------------------------------------------------------------------
-- Summaries
------------------------------------------------------------------------------

-- Facts a summary keeps verbatim, found without an LLM: URLs, e-mail
-- addresses, paths, commands, error names and codes, ids of letters and
-- digits (ORD-27611, BK-LHHGX2, INV-2026-1995, TP1821, build-7729), hex
-- strings, dates, host names, package@version, identifiers, amounts, and numbers with a unit or a
-- counted noun (87 line items), in order of appearance, each once.  Where
-- two patterns match at one place, the longest match wins (INV-2026-1995,
-- not INV-2026).  In C (src/summary/facts.c): one regular expression, run
-- as regexp_matches(t, pattern, 'g') runs it.
CREATE FUNCTION ctxwin.extract_facts(t text)
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
 *                   what, when, who, how... or any, anything...: any such
 *                   reply; to another: one that starts with yes or no, or
 *                   with it, they, there, that... or with "the" and a word
 *                   of the question (a statement of what the question asks
 *                   about), or takes up one of its words)
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
CREATE FUNCTION ctxwin.extractive_summary(previous text, messages jsonb, max_tokens int,
                                          encoding text DEFAULT 'cl100k_base',
                                          instructions text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_extractive_summary'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.extractive_summary(text, jsonb, int, text, text) IS
'The extractive summary (no LLM) of a previous summary and new messages, in the sections Goal and state (the latest goal first), Decisions, Identifiers (verbatim), Open items (the questions not answered later) and Lookup hints (message ids, tools called, search terms), within max_tokens';


------------------------------------------------------------------------------

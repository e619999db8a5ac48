------------------------------------------------------------------------------
-- Summaries
------------------------------------------------------------------------------

-- Facts a summary keeps verbatim, found without an LLM: URLs, e-mail
-- addresses, paths, commands, error names and codes, ids of letters and
-- digits (ORD-27611, BK-LHHGX2, INV-2026-1995, TP1821, build-7729), hex
-- strings, dates, host names, package@version, identifiers, amounts, and numbers with a unit or a
-- counted noun (87 line items), in order of appearance, each once.  Where
-- two patterns match at one place, the longest match wins (INV-2026-1995,
-- not INV-2026).
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
                || '|\m[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}\M'  -- e-mail addresses
                || '|(?:@[A-Za-z0-9_.\-]+/|\m)[A-Za-z0-9_.\-]+@[0-9][A-Za-z0-9.\-]*'  -- package@version, @scope/package@version
                || '|(?:~|\.{1,2})?/[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)+'   -- absolute and relative paths
                || '|\m[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_.\-]+)+'                 -- dir/file paths
                || '|\m[A-Za-z0-9_\-]+\.(?:py|js|ts|tsx|go|rs|c|h|cc|cpp|java|rb|php|sql|md|json|ya?ml|toml|txt|log|sh|conf|cfg|ini|csv|html|css)\M'
                || '|`[^`\n]{2,80}`'                                          -- inline code and commands
                || '|\m[A-Z][A-Za-z]*(?:Error|Exception)\M'                   -- error names
                || '|\m[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\M'                       -- ids with hyphens: ORD-27611, BK-LHHGX2, INV-2026-1995
                || '|\m[A-Z]{1,5}[0-9]{3,}[A-Z0-9]*\M'                        -- codes: E7386, TP1821, TRK719118826
                || '|\m[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*-[0-9][A-Za-z0-9]*\M'  -- names with a number: build-7729
                || '|\m(?:[0-9A-F]{12,}|[0-9a-f]{12,})\M'                    -- hex, long numbers: hashes, WAL segments
                || '|\m[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?Z?)?\M'  -- dates, times
                || '|\m[a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+){2,}\M'            -- host names, versions
                || '|\m[0-9]+(?:\.[0-9]+)?\s?(?:ms|s|sec|seconds|min|minutes|h|hours|days|weeks|KB|kB|MB|GB|TB|%|px|USD|EUR|GBP)(?![A-Za-z])'
                || '|[$€£][0-9][0-9,]*(?:\.[0-9]+)?'                           -- money
                || '|\m[0-9][0-9,]*(?:\.[0-9]+)? [a-z]{3,}(?: [a-z]+s\M)?'     -- counts: 87 line items, 152 passed
                || '|\m[a-z]+(?:_[a-z0-9]+)+\M'                               -- snake_case identifiers
                || '|\m[a-z]+(?:[A-Z][a-z0-9]+)+\M|\m[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\M'  -- camelCase, PascalCase
                || '|\m[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\M'     -- uuids
                || ')', 'g') WITH ORDINALITY AS x(m, n)
        ) raw
        WHERE length(f) > 2
          -- a number before a word that counts nothing (3 and, 12 of the)
          AND f !~ '^[0-9][0-9,.]* (and|are|but|for|from|the|than|that|then|this|was|were|with|into|over|per|out|off|times|more|less|fewer|left|ago|not)( |$)'
        ORDER BY f, o
    ) d
    ORDER BY first_at);

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
-- (durations, row ids); what is planted in it is unlike the rest.
CREATE FUNCTION ctxwin._tool_facts(t text)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY(
    SELECT f FROM (
        SELECT f, o, rare, row_number() OVER (PARTITION BY rare ORDER BY o) AS r
        FROM (SELECT f, o, count(*) OVER (PARTITION BY shape) = 1 AS rare
              FROM (SELECT f, o, regexp_replace(f, '[0-9]+', '9', 'g') AS shape
                    FROM unnest(ctxwin.extract_facts(t)) WITH ORDINALITY AS x(f, o)) s) c) d
    WHERE (rare AND r <= 8) OR (NOT rare AND r <= 4)
    ORDER BY rare DESC, o);

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
 */
CREATE FUNCTION ctxwin.extractive_summary(previous text, messages jsonb, max_tokens int,
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
    goals jsonb := '[]';        -- the user's sentences that set or change a goal
    steps jsonb := '[]';        -- the assistant's: the next step, the goal as it is now
    user_facts jsonb := '[]';   -- facts the user gave
    chat_facts jsonb := '[]';   -- facts of the assistant's messages
    tool_facts jsonb := '[]';   -- facts of tool results, the rare ones first
    answers text[] := '{}';     -- the content words of the assistant's messages seen (newer ones)
    changed boolean := false;   -- a newer message changed the goal
    msg_changes boolean;        -- this message changes the goal
    reply jsonb;                -- the next message with text (of the user or the assistant)
    replied boolean;            -- that message is a reply that does not put the answer off
    reply_words text;           -- its content words
    -- a reply that puts the answer off: the question stays open
    defer_re CONSTANT text := '\m(cannot|can''t|not sure|don''t know|do not know|no idea|unclear|let me|i will|i''ll|i need|we need|need to|needs?|depends|yet|later|possibly|maybe|perhaps|belongs to|owns|ask|approval|decision|i would not)\M';
    goal_re CONSTANT text := '\m(i want|i need|i would like|i''d like|i no longer|no longer|instead|change of plans|change of focus|the priority|first|forget|stop|pause|cancel|get that done|can wait|can''t wait|cannot wait|new plan|please)\M';
    change_re CONSTANT text := '\m(no longer|instead|change of plans|change of focus|new plan|first|forget|stop|pause|can wait|can''t wait|cannot wait)\M';
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
        IF m ->> 'role' = 'tool' THEN
            IF jsonb_array_length(tool_facts) < max_tokens THEN
                tool_facts := tool_facts || to_jsonb(ctxwin._tool_facts(left(m ->> 'content', 65536)));
            END IF;
            CONTINUE;
        END IF;
        IF m ->> 'role' = 'user' AND jsonb_array_length(user_facts) < max_tokens THEN
            user_facts := user_facts || to_jsonb((ctxwin.extract_facts(m ->> 'content'))[1:max_tokens]);
        ELSIF m ->> 'role' <> 'user' AND jsonb_array_length(chat_facts) < max_tokens THEN
            chat_facts := chat_facts || to_jsonb((ctxwin.extract_facts(m ->> 'content'))[1:max_tokens]);
        END IF;
        k := 0;
        msg_changes := false;
        -- the reply to this message: the next message with text, when it is
        -- the assistant's, a statement, and does not put the answer off
        -- (false, not NULL, for the newest message, which has no reply yet)
        replied := coalesce(m ->> 'role' = 'user' AND reply ->> 'role' = 'assistant'
                            AND btrim(reply ->> 'content') !~ '\?$' AND lower(reply ->> 'content') !~ defer_re, false);
        reply_words := CASE WHEN replied THEN ctxwin._content_words(reply ->> 'content') END;
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
                -- (the 64 messages of the assistant's nearest after it: a
                -- question answered much later is rare, and all would make
                -- a long segment quadratic)
                IF NOT ctxwin._answered(sent, answers[greatest(cardinality(answers) - 63, 1):])
                   AND NOT (replied AND (lower(sent) ~ '^(what|when|where|which|who|whom|whose|why|how|any|anything|anyone|anybody)\M'
                                         OR lower(reply ->> 'content') ~ '^(yes|no|yep|nope|sure|correct|right|it|it''s|its|they|they''re|there|there''s|that|that''s|this|both|neither|none|only)\M'
                                         -- a reply about the question's subject: "The tax module ..." to "... the tax ...?"
                                         OR lower(sent) ~ ('\m' || substring(lower(reply ->> 'content') FROM '^the (\w+)') || '\M')
                                         OR ctxwin._answered(sent, ARRAY[reply_words], 1))) THEN
                    items := jsonb_set(items, '{Open items}', (items -> 'Open items') || to_jsonb(sent));
                END IF;
            ELSIF m ->> 'role' = 'user' AND (lower(sent) ~ goal_re OR msg_changes) THEN
                -- (the sentences after a change of goal in its message are the new goal)
                goals := goals || to_jsonb(CASE WHEN changed THEN 'Earlier goal: ' ELSE '' END || sent);
                msg_changes := msg_changes OR lower(sent) ~ change_re;
            ELSIF m ->> 'role' = 'assistant' AND lower(sent) ~ '^next steps?\M|\mthe goal is now\M|\mis the priority now\M|\mcomes first\M' THEN
                steps := steps || to_jsonb(sent);
            ELSIF lower(sent) ~ '\m(decided|decide|agreed|agree|we will|we''ll|let''s|going to|plan to|should|must|use|using|switch|chose|choose|prefer|fixed|fix|changed|change|set|root cause|because|so that|instead|replaced|corrected|updated|renamed|removed|deleted|added|created|moved|merged|reverted|rotated|restarted|raised|lowered|pinned|marked)\M' THEN
                items := jsonb_set(items, '{Decisions}', (items -> 'Decisions') || to_jsonb(
                    CASE WHEN m ->> 'role' = 'user' THEN 'User: ' ELSE '' END || sent));
            ELSIF m ->> 'role' = 'user' AND k = 1 THEN
                items := jsonb_set(items, '{Goal and state}', (items -> 'Goal and state') || to_jsonb(sent));
            END IF;
        END LOOP;
        changed := changed OR msg_changes;
        IF m ->> 'role' = 'assistant' THEN
            -- what a question asked before this message may be answered by
            answers := answers || ctxwin._content_words(m ->> 'content');
        END IF;
        reply := m;
    END LOOP;
    items := jsonb_set(items, '{Goal and state}', focus || goals || steps || (items -> 'Goal and state'));
    items := jsonb_set(items, '{Identifiers}', user_facts || chat_facts || tool_facts);

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

    -- an open item of the previous summary that the new messages answer is no longer open
    prev_items := jsonb_set(prev_items, '{Open items}', (
        SELECT coalesce(jsonb_agg(v ORDER BY o), '[]')
        FROM jsonb_array_elements_text(prev_items -> 'Open items') WITH ORDINALITY AS x(v, o)
        WHERE NOT ctxwin._answered(v, answers)));

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
    -- (three identifiers a round, one item of each other section)
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
            -- (identifiers are short and what a model cannot guess: three a round)
            FOR r IN 1 .. CASE WHEN sec = 'Identifiers' THEN 3 ELSE 1 END LOOP
                EXIT WHEN limits[k] >= jsonb_array_length(items -> sec);
                limits[k] := limits[k] + 1;
                result := ctxwin._render_summary(sections, items, limits, earlier, max_tokens, encoding);
                IF ctxwin.count_tokens(result, encoding) > max_tokens THEN
                    limits[k] := limits[k] - 1;
                    EXIT;
                END IF;
                n := n + 1;
            END LOOP;
        END LOOP;
        EXIT WHEN n = 0;
    END LOOP;
    result := ctxwin._render_summary(sections, items, limits, earlier, max_tokens, encoding);
    IF (btrim(result) = '' OR limits[1] + limits[2] + limits[4] = 0) AND jsonb_array_length(messages) > 0 THEN
        -- no sentence matched (small talk, bare identifiers, hashes, log
        -- lines): the messages' own text, shortened, so that a summary is
        -- never empty, nor only identifiers and a lookup hint
        result := ctxwin._fallback_summary(messages, max_tokens, encoding);
    END IF;
    RETURN result;
END $$;

COMMENT ON FUNCTION ctxwin.extractive_summary(text, jsonb, int, text, text) IS
'The extractive summary (no LLM) of a previous summary and new messages, in the sections Goal and state (the latest goal first), Decisions, Identifiers (verbatim), Open items (the questions not answered later) and Lookup hints (message ids, tools called, search terms), within max_tokens';

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

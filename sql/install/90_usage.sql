------------------------------------------------------------------------------
-- The bill: what the provider counted and charged, and calibration
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
--     cache_read_input_tokens, cache_creation_input_tokens, output_tokens;
--   Google Gemini (usageMetadata): promptTokenCount (cache reads included),
--     toolUsePromptTokenCount, cachedContentTokenCount,
--     candidatesTokenCount, thoughtsTokenCount.
-- input_tokens is every prompt token, cached or not; output_tokens includes
-- reasoning tokens (Gemini's thoughts), as the providers bill them.
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

------------------------------------------------------------------------------
-- The ledger and the usage views
--
-- security_invoker: the caller's privileges and row-level security on
-- usage_log, summaries and sessions decide the rows.
------------------------------------------------------------------------------

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

-- rows are those the caller may read (security_invoker)
GRANT SELECT ON ctxwin.usage_ledger, ctxwin.usage, ctxwin.profile_usage TO PUBLIC;

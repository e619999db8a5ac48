-- bench/cache/cached.sql: what a provider's prompt cache serves of a
-- request, as the replays count it (bench/cache/replay.sql,
-- bench/agent/replay.sql); needs a schema named bench.
--
-- Cacheable: the whole leading messages of a request identical, byte for
-- byte, to those of the previous request (a provider caches a prefix it has
-- seen recently).  Billed input: uncached tokens + 0.1 x cached tokens
-- (Anthropic's cache-read price, OpenAI's on its newer models).

-- The tokens of the leading messages of body (an array of OpenAI chat
-- messages) that are those of prev, the previous request, counted in
-- encoding as build_context counts them.
CREATE FUNCTION bench.cached_tokens(body jsonb, prev jsonb, encoding text) RETURNS int
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    n int := jsonb_array_length(body);
    k int := 0;
BEGIN
    WHILE k < n AND k < jsonb_array_length(prev) AND body -> k = prev -> k LOOP
        k := k + 1;
    END LOOP;
    IF k = 0 THEN
        RETURN 0;
    END IF;
    RETURN ctxwin.messages_tokens((SELECT jsonb_agg(e ORDER BY i)
                                   FROM jsonb_array_elements(body) WITH ORDINALITY x(e, i)
                                   WHERE i <= k), encoding);
END $$;

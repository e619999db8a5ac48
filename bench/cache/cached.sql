-- bench/cache/cached.sql: what a provider's prompt cache serves of a
-- request, as the replays count it (bench/cache/replay.sql,
-- bench/agent/replay.sql); needs a schema named bench.
--
-- Cacheable: the whole leading messages of a request identical, byte for
-- byte, to those of the previous request (a provider caches a prefix it has
-- seen recently), and, when the next message is the previous request's
-- message at that place with text appended to its content (a summary that
-- grew by a segment), that message's old tokens too, less its end token.
-- Billed input: uncached tokens + 0.1 x cached tokens (Anthropic's
-- cache-read price, OpenAI's on its newer models).

-- Whether message m is message p with text appended to its content (and
-- nothing else changed).
CREATE FUNCTION bench.extends(m jsonb, p jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT m - 'content' = p - 'content' AND coalesce(p ->> 'content', '') <> ''
           AND length(m ->> 'content') > length(p ->> 'content')
           AND starts_with(m ->> 'content', p ->> 'content') $$;

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
    RETURN CASE WHEN k = 0 THEN 0
                ELSE ctxwin.messages_tokens((SELECT jsonb_agg(e ORDER BY i)
                                             FROM jsonb_array_elements(body) WITH ORDINALITY x(e, i)
                                             WHERE i <= k), encoding) END
           + CASE WHEN k < n AND k < jsonb_array_length(prev) AND bench.extends(body -> k, prev -> k)
                  THEN ctxwin.count_message_tokens(prev -> k, encoding) - 1 ELSE 0 END;
END $$;

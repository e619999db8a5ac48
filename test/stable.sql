-- Stable windows (window_policy 'stable', the default of a new profile): a
-- conversation replayed message by message, build_context before every
-- assistant turn, and each request checked against the previous one: the
-- budget is never exceeded; the window's first message stays while the
-- messages since it fit, so the new request begins with the previous one's
-- messages byte for byte; it moves only when they would not fit, forward,
-- to a window of about window_low_water of the budget; never inside a tool
-- group.  The same replay under 'sliding' shows what the policy saves.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

-- no summary triggers: the window alone decides what is sent
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, response_reserve)
VALUES ('st', 'gpt-4o', NULL, NULL, NULL, 2, 100);
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, response_reserve, window_policy)
VALUES ('sl', 'gpt-4o', NULL, NULL, NULL, 2, 100, 'sliding');

SELECT is((SELECT window_policy || ' ' || window_low_water || ' ' || cache_ttl FROM ctxwin.profiles WHERE name = 'st'),
          'stable 0.6 00:05:00', 'a new profile has a stable window, low water 0.6, cache_ttl 5 minutes');
SELECT throws_ok($$UPDATE ctxwin.profiles SET window_policy = 'fixed' WHERE name = 'st'$$, '23514', NULL,
                 'an unknown window policy is refused');
SELECT throws_ok($$UPDATE ctxwin.profiles SET window_low_water = 1 WHERE name = 'st'$$, '23514', NULL,
                 'a low-water mark of 1 is refused (it would never leave room to grow)');
SELECT throws_ok($$UPDATE ctxwin.profiles SET window_low_water = 0 WHERE name = 'st'$$, '23514', NULL,
                 'a low-water mark of 0 is refused');

INSERT INTO ctxwin.sessions (id, profile, system_prompt)
VALUES ('20000000-0000-0000-0000-000000000001', 'st', 'You are a patient tutor.'),
       ('20000000-0000-0000-0000-000000000002', 'sl', 'You are a patient tutor.');

-- One request per assistant turn, as the replay makes them.
CREATE TABLE pg_temp.requests (
    policy text, turn int, budget int, first_id bigint, tokens int, body jsonb, messages jsonb);

-- A conversation of 240 turns: a user message, then (before the assistant
-- answers) a request; every seventh turn the assistant calls a tool.
CREATE FUNCTION pg_temp.replay(sid uuid, policy text, budget int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    turn int;
    w jsonb;
BEGIN
    FOR turn IN 1 .. 240 LOOP
        INSERT INTO ctxwin.messages (session_id, role, content)
        VALUES (sid, 'user', format('Question %s: %s', turn, repeat('why does ' || turn || ' matter ', 2 + turn % 9)));
        w := ctxwin._window(sid, budget);
        INSERT INTO pg_temp.requests
        VALUES (policy, turn, budget, (w ->> 'first_id')::bigint, (w ->> 'tokens')::int,
                ctxwin.build_context(sid, budget), w -> 'messages');
        IF turn % 7 = 0 THEN
            INSERT INTO ctxwin.messages (session_id, role, content, tool_calls)
            VALUES (sid, 'assistant', NULL, jsonb_build_array(jsonb_build_object(
                        'id', 'call_' || turn, 'type', 'function',
                        'function', jsonb_build_object('name', 'lookup', 'arguments', '{"q": "' || turn || '"}'))));
            INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
            VALUES (sid, 'tool', repeat('result ' || turn || ' ', 20), 'call_' || turn);
        END IF;
        INSERT INTO ctxwin.messages (session_id, role, content)
        VALUES (sid, 'assistant', format('Answer %s: %s', turn, repeat('because of ' || turn || ' and more ', 3 + turn % 11)));
    END LOOP;
END $$;

SELECT pg_temp.replay('20000000-0000-0000-0000-000000000001', 'stable', 2000);
SELECT pg_temp.replay('20000000-0000-0000-0000-000000000002', 'sliding', 2000);

-- Each request beside the one before it.
CREATE VIEW pg_temp.pairs AS
SELECT r.policy, r.turn, r.budget, r.first_id, r.tokens, r.body, r.messages,
       p.first_id AS prev_first_id, p.tokens AS prev_tokens, p.body AS prev_body,
       -- what the request would be with the previous request's first message
       3 + ctxwin.message_tokens('system', 'You are a patient tutor.', NULL, NULL, NULL, 'o200k_base')
         + (SELECT sum(m.token_count)
            FROM ctxwin.messages m
            WHERE m.session_id = x.sid AND m.id >= p.first_id
              AND m.id <= (SELECT q.id FROM ctxwin.messages q
                           WHERE q.session_id = x.sid AND q.role = 'user'
                             AND q.content LIKE format('Question %s:%%', r.turn))) AS from_prev_start
FROM pg_temp.requests r
JOIN pg_temp.requests p ON p.policy = r.policy AND p.turn = r.turn - 1
CROSS JOIN LATERAL (SELECT CASE r.policy WHEN 'stable' THEN '20000000-0000-0000-0000-000000000001'::uuid
                                         ELSE '20000000-0000-0000-0000-000000000002'::uuid END AS sid) x;

SELECT is((SELECT count(*) FROM pg_temp.requests WHERE tokens > budget)::int, 0,
          'no request is over the budget, under either policy');
SELECT is((SELECT count(*) FROM pg_temp.requests r
           WHERE ctxwin.messages_tokens(r.body, 'o200k_base') + 3 > r.budget)::int, 0,
          'counted again from what build_context returned, none is over the budget');
SELECT is((SELECT count(*) FROM pg_temp.pairs WHERE policy = 'stable' AND first_id < prev_first_id)::int, 0,
          'the start of a stable window never moves back');
SELECT is((SELECT count(*) FROM pg_temp.pairs
           WHERE policy = 'stable' AND first_id <> prev_first_id AND from_prev_start <= budget - 200)::int, 0,
          'it moves only when the messages since it (nearly: within a unit) fill the budget');
SELECT is((SELECT count(*) FROM pg_temp.pairs
           WHERE policy = 'stable' AND first_id = prev_first_id
             AND (SELECT array_agg(e ORDER BY n) FROM jsonb_array_elements(prev_body) WITH ORDINALITY a(e, n))
                 <> (SELECT array_agg(e ORDER BY n) FROM jsonb_array_elements(body) WITH ORDINALITY a(e, n)
                     WHERE n <= jsonb_array_length(prev_body)))::int, 0,
          'while it stays, each request begins with every message of the previous one, unchanged');
SELECT cmp_ok((SELECT count(*) FROM pg_temp.pairs WHERE policy = 'stable' AND first_id <> prev_first_id)::int,
              '>=', 10, 'the window jumps (at least 10 times in 240 turns)');
SELECT cmp_ok((SELECT count(*) FROM pg_temp.pairs WHERE policy = 'stable' AND first_id <> prev_first_id)::int,
              '<=', 40, 'but not every turn (at most 40 times in 240)');
SELECT is((SELECT count(*) FROM pg_temp.pairs
           WHERE policy = 'stable' AND first_id <> prev_first_id
             AND tokens > floor(0.6 * budget) + 200)::int, 0,
          'after a jump the window holds about window_low_water of the budget (at most the newest unit more)');
SELECT cmp_ok((SELECT min(tokens) FROM pg_temp.requests WHERE policy = 'stable' AND turn > 60), '>=',
              (0.6 * 2000 - 200)::int, 'and never much less: it does not empty itself');
SELECT is((SELECT count(*) FROM pg_temp.requests r
           WHERE r.messages -> 1 ->> 'role' = 'tool')::int, 0,
          'no window starts with a tool result');
SELECT is((SELECT count(*) FROM pg_temp.requests r, jsonb_array_elements(r.messages) WITH ORDINALITY a(e, n)
           WHERE e ? 'tool_calls'
             AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(r.messages) f
                             WHERE f ->> 'tool_call_id' = e -> 'tool_calls' -> 0 ->> 'id'))::int, 0,
          'every tool call in a window has its result with it');
-- the sliding window moves nearly every turn once full: what stable saves
SELECT cmp_ok((SELECT count(*) FROM pg_temp.pairs WHERE policy = 'sliding' AND first_id <> prev_first_id)::int,
              '>', 3 * (SELECT count(*) FROM pg_temp.pairs WHERE policy = 'stable' AND first_id <> prev_first_id)::int,
              'a sliding window changes its start more than three times as often');
SELECT cmp_ok(
    (SELECT sum(CASE WHEN first_id = prev_first_id THEN prev_tokens ELSE 0 END)::numeric / sum(tokens)
     FROM pg_temp.pairs WHERE policy = 'stable' AND turn > 40), '>=', 0.75::numeric,
    'under the stable policy at least 75 % of the tokens sent repeat the previous request''s beginning');
SELECT cmp_ok(
    (SELECT sum(CASE WHEN first_id = prev_first_id THEN prev_tokens ELSE 0 END)::numeric / sum(tokens)
     FROM pg_temp.pairs WHERE policy = 'sliding' AND turn > 40), '<', 0.3::numeric,
    'under the sliding policy under 30 %');

-- The start is a function of the rows: the same calls again give the same bytes.
SELECT is(ctxwin.build_context('20000000-0000-0000-0000-000000000001', 2000)::text,
          ctxwin.build_context('20000000-0000-0000-0000-000000000001', 2000)::text,
          'two calls on the same rows give the same bytes');

-- A budget of another size is a window of its own, within that budget.
SELECT cmp_ok((ctxwin._window('20000000-0000-0000-0000-000000000001', 900) ->> 'tokens')::int, '<=', 900,
              'another budget gets a stable window within it');

-- Counters in another encoding (a model change not yet recounted): the
-- window is the sliding one until the next message recounts them.
UPDATE ctxwin.profiles SET model = 'gpt-4' WHERE name = 'st';
CREATE TEMP TABLE recounted AS SELECT ctxwin._window('20000000-0000-0000-0000-000000000001', 2000) AS w;
UPDATE ctxwin.profiles SET window_policy = 'sliding' WHERE name = 'st';
SELECT is((SELECT w FROM recounted), ctxwin._window('20000000-0000-0000-0000-000000000001', 2000),
          'while the counters are in another encoding (a model change not yet recounted) the window is the sliding one');
UPDATE ctxwin.profiles SET window_policy = 'stable' WHERE name = 'st';
SELECT cmp_ok((ctxwin._window('20000000-0000-0000-0000-000000000001', 2000) ->> 'tokens')::int, '<=', 2000,
              'and within the budget in the new encoding');
UPDATE ctxwin.profiles SET model = 'gpt-4o' WHERE name = 'st';

-- A summary starts a new epoch: the window starts at the summary point
-- while everything since it fits.
UPDATE ctxwin.sessions SET conversation_summary = 'Earlier: many questions answered.',
       summary_through_id = message_count - 2
WHERE id = '20000000-0000-0000-0000-000000000001';
SELECT is((ctxwin._window('20000000-0000-0000-0000-000000000001', 2000) ->> 'first_id')::bigint,
          (SELECT summary_through_id + 1 FROM ctxwin.sessions WHERE id = '20000000-0000-0000-0000-000000000001'),
          'after a summary the window starts right after the summary point');

-- Summary timing.  A summary changes the beginning of every request after
-- it: under a stable window a due summary waits until the window nears its
-- jump (halfway from the low-water mark to the budget) or until the session
-- has been idle for cache_ttl; a sliding window's never waits.
SELECT is(ARRAY[ctxwin._summary_waits(1200, 'stable', 2100, 100, 0.6, '1 minute', '5 minutes'),
                ctxwin._summary_waits(1599, 'stable', 2100, 100, 0.6, '1 minute', '5 minutes'),
                ctxwin._summary_waits(1199, 'stable', 2100, 100, 0.6, '1 minute', '5 minutes'),
                ctxwin._summary_waits(1600, 'stable', 2100, 100, 0.6, '1 minute', '5 minutes'),
                ctxwin._summary_waits(1300, 'stable', 2100, 100, 0.6, '5 minutes', '5 minutes'),
                ctxwin._summary_waits(1300, 'sliding', 2100, 100, 0.6, '1 minute', '5 minutes'),
                ctxwin._summary_waits(1300, 'stable', 2100, 100, 0.6, '0', '0')],
          ARRAY[true, true, false, false, false, false, false],
          '_summary_waits: from the low-water mark to halfway to the budget, within cache_ttl, it waits; below the mark, from halfway, idle, sliding or cache_ttl 0 it does not');
INSERT INTO ctxwin.profiles (name, model, context_window, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, response_reserve, summary_strategy, max_summary_tokens)
VALUES ('tm', 'gpt-4o', 2100, 4, NULL, NULL, 2, 100, 'extractive', 60);
INSERT INTO ctxwin.sessions (id, profile) VALUES ('20000000-0000-0000-0000-000000000003', 'tm');
-- messages lo .. hi of that session, user and assistant in turn, of `words` x 6 words
CREATE FUNCTION pg_temp.talk(lo int, hi int, words int) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content)
    SELECT '20000000-0000-0000-0000-000000000003', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
           'Message ' || i || ': ' || repeat('the deploy pipeline builds and tests ', words)
    FROM generate_series(lo, hi) i $$;
SELECT pg_temp.talk(1, 8, 0);
SELECT is(ctxwin.compact(), 1, 'a due summary of a small window (below the low-water mark) is written at once');
-- a window between the low-water mark (1,200) and halfway to the budget (1,600)
SELECT pg_temp.talk(9, 44, 5);
SELECT cmp_ok((SELECT context_tokens FROM ctxwin.context_status('20000000-0000-0000-0000-000000000003'))::int, '>=', 1200,
              'the context is at the low-water mark');
SELECT ok((SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '20000000-0000-0000-0000-000000000003'),
          'a stable session over a trigger is queued');
SELECT is(ctxwin.compact(), 0, 'but compact() passes it over: its window is far from its jump and the cache warm');
UPDATE ctxwin.profiles SET window_policy = 'sliding' WHERE name = 'tm';
SELECT is(ctxwin.compact(), 1, 'the same session under a sliding window is summarized at once');
UPDATE ctxwin.profiles SET window_policy = 'stable' WHERE name = 'tm';
SELECT pg_temp.talk(45, 80, 5);
SELECT cmp_ok((SELECT context_tokens FROM ctxwin.context_status('20000000-0000-0000-0000-000000000003'))::int, '<', 1600,
              '(below halfway to the budget)');
SELECT is(ctxwin.compact(), 0, 'queued again at the low-water mark, it waits again');
SELECT matches((SELECT note FROM ctxwin.context_status('20000000-0000-0000-0000-000000000003')),
               'A summary is due; under the stable window it waits',
               'context_status says that the summary waits, and why');
-- A cache_ttl of a year or more: a year is 365.25 days, as EXTRACT(epoch
-- ...) counts it, for context_status and for the queue alike (the queue once
-- counted 360 days, and took at 362 days idle what context_status said waits).
UPDATE ctxwin.profiles SET cache_ttl = '1 year' WHERE name = 'tm';
UPDATE ctxwin.sessions SET updated_at = now() - interval '362 days' WHERE id = '20000000-0000-0000-0000-000000000003';
SELECT matches((SELECT note FROM ctxwin.context_status('20000000-0000-0000-0000-000000000003')),
               'A summary is due; under the stable window it waits',
               'idle 362 days, with a cache_ttl of 1 year: context_status says that the summary waits');
SELECT is(ctxwin.compact(), 0, 'and compact() passes the session over as well');
SELECT is(ARRAY[ctxwin._summary_waits(1300, 'stable', 2100, 100, 0.6, '365 days 05:59:59.999', '1 year'),
                ctxwin._summary_waits(1300, 'stable', 2100, 100, 0.6, '365 days 06:00:00', '1 year'),
                ctxwin._summary_waits(1300, 'stable', 2100, 100, 0.6, '760 days 11:59:59.999', '2 years 1 month'),
                ctxwin._summary_waits(1300, 'stable', 2100, 100, 0.6, '760 days 12:00:00', '2 years 1 month')],
          ARRAY[true, false, true, false],
          '_summary_waits: a year of cache_ttl is 365.25 days and a month 30, as EXTRACT(epoch FROM cache_ttl) counts them');
UPDATE ctxwin.sessions SET updated_at = now() WHERE id = '20000000-0000-0000-0000-000000000003';
UPDATE ctxwin.profiles SET cache_ttl = '5 minutes' WHERE name = 'tm';
UPDATE ctxwin.profiles SET cache_ttl = '0' WHERE name = 'tm';
SELECT is(ctxwin.compact(), 1, 'with cache_ttl 0 (or once idle that long) it is summarized');
UPDATE ctxwin.profiles SET cache_ttl = '5 minutes' WHERE name = 'tm';
SELECT pg_temp.talk(17, 40, 12);
SELECT cmp_ok((SELECT context_tokens FROM ctxwin.context_status('20000000-0000-0000-0000-000000000003'))::int, '>=', 1600,
              'the context has reached halfway from the low-water mark to the budget');
SELECT is(ctxwin.compact(), 1, 'so the summary no longer waits: it is written now, where the window would jump anyway');

-- Sliding is the old behaviour: the window is as full as the budget allows.
SELECT cmp_ok((SELECT min(tokens) FROM pg_temp.requests WHERE policy = 'sliding' AND turn > 60), '>=',
              2000 - 400, 'a sliding window stays full (within a unit of the budget)');

SELECT * FROM finish();
ROLLBACK;

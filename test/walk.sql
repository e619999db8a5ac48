-- The walk has two sources of the same rows (src/window/walk.c): a direct backward
-- scan of the primary key where the caller may read ctxwin.messages
-- directly, and SPI queries where row-level security (or Citus) applies.
-- Both must give the same windows, byte for byte, for every budget and both
-- formats, with the cut of an oversized newest unit, tool groups, and
-- messages counted in another encoding than the session's (recounted).
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

CREATE ROLE ctxwin_walk_app;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_walk_app;
GRANT SELECT, INSERT ON ctxwin.sessions, ctxwin.messages TO ctxwin_walk_app;
GRANT SELECT ON ctxwin.models, ctxwin.profiles TO ctxwin_walk_app;

INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio)
VALUES ('walk', 'gpt-4o', NULL, NULL, NULL);
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
VALUES ('30000000-0000-4000-8000-000000000001', 'walk', 'You help with builds.');
-- user and assistant turns, a tool group every 7 messages, growing texts
INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id)
SELECT '30000000-0000-4000-8000-000000000001', x.role, x.content, x.tool_calls, x.tool_call_id
FROM generate_series(1, 60) g,
     LATERAL (VALUES
        (CASE WHEN g % 7 = 3 THEN 'assistant' WHEN g % 7 = 4 THEN 'tool'
              WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END)) r(role),
     LATERAL (SELECT r.role AS role,
                     CASE WHEN g % 7 = 3 THEN NULL
                          ELSE repeat(format('Message %s: the build of service-%s failed on host h%s. ', g, g, g), 1 + g % 5) END AS content,
                     CASE WHEN g % 7 = 3 THEN jsonb_build_array(jsonb_build_object(
                              'id', 'call_' || g, 'type', 'function',
                              'function', jsonb_build_object('name', 'run', 'arguments', format('{"step": %s}', g))))
                     END AS tool_calls,
                     CASE WHEN g % 7 = 4 THEN 'call_' || (g - 1) END AS tool_call_id) x
ORDER BY g;
-- the newest message alone is larger than the small budgets: it is cut
INSERT INTO ctxwin.messages (session_id, role, content)
VALUES ('30000000-0000-4000-8000-000000000001', 'user', repeat('A long paste of a build log line. ', 200));

CREATE TEMP TABLE budgets AS SELECT b FROM generate_series(5, 4000, 13) b;
GRANT SELECT ON budgets TO ctxwin_walk_app;
CREATE TEMP TABLE direct (b int, openai jsonb, anthropic jsonb, w jsonb);
CREATE TEMP TABLE viaspi (b int, openai jsonb, anthropic jsonb, w jsonb);
CREATE TEMP TABLE status (source text, s jsonb);
GRANT INSERT ON direct, viaspi, status TO ctxwin_walk_app;

-- the windows the application role gets; the budget too small for the
-- newest message's markers is an error, recorded as such
CREATE FUNCTION pg_temp.windows(b int, OUT openai jsonb, OUT anthropic jsonb, OUT w jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    openai := ctxwin.build_context('30000000-0000-4000-8000-000000000001', b);
    anthropic := ctxwin.build_context('30000000-0000-4000-8000-000000000001', b, 'anthropic');
    w := ctxwin._window('30000000-0000-4000-8000-000000000001', b);
EXCEPTION WHEN invalid_parameter_value THEN
    w := jsonb_build_object('error', SQLERRM);
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.windows(int) TO ctxwin_walk_app;

-- 1. read directly: no row-level security on the table
SET ROLE ctxwin_walk_app;
INSERT INTO direct SELECT b, x.* FROM budgets, pg_temp.windows(b) x;
INSERT INTO status SELECT 'direct', to_jsonb(s) - 'summary_age' FROM ctxwin.context_status('30000000-0000-4000-8000-000000000001') s;
RESET ROLE;

-- 2. through SPI: a policy that lets every row through turns row-level
-- security on, and with it the walk's queries
ALTER TABLE ctxwin.messages ENABLE ROW LEVEL SECURITY;
CREATE POLICY everything ON ctxwin.messages USING (true);
SET ROLE ctxwin_walk_app;
INSERT INTO viaspi SELECT b, x.* FROM budgets, pg_temp.windows(b) x;
INSERT INTO status SELECT 'spi', to_jsonb(s) - 'summary_age' FROM ctxwin.context_status('30000000-0000-4000-8000-000000000001') s;
RESET ROLE;

SELECT ok((SELECT count(*) FROM direct WHERE w ? 'error') > 0
          AND (SELECT count(*) FROM direct WHERE (w ->> 'cut')::boolean) > 0
          AND (SELECT count(DISTINCT w ->> 'first_id') FROM direct) > 10,
          'the budgets cover errors, cuts and many window starts');
SELECT is((SELECT count(*) FROM direct d JOIN viaspi v USING (b)
           WHERE d.openai IS NOT DISTINCT FROM v.openai
             AND d.anthropic IS NOT DISTINCT FROM v.anthropic
             AND d.w = v.w)::int,
          (SELECT count(*) FROM budgets)::int,
          'direct scan and SPI give the same windows for every budget, in both formats');
SELECT is((SELECT s FROM status WHERE source = 'direct'), (SELECT s FROM status WHERE source = 'spi'),
          'and the same context_status');

-- 3. the messages counted in another encoding: the profile's model changes
-- to one of another encoding, so every stored count must be made again
UPDATE ctxwin.profiles SET model = 'gpt-4' WHERE name = 'walk';
TRUNCATE direct, viaspi, status;
ALTER TABLE ctxwin.messages DISABLE ROW LEVEL SECURITY;
SET ROLE ctxwin_walk_app;
INSERT INTO direct SELECT b, x.* FROM budgets, pg_temp.windows(b) x;
INSERT INTO status SELECT 'direct', to_jsonb(s) - 'summary_age' FROM ctxwin.context_status('30000000-0000-4000-8000-000000000001') s;
RESET ROLE;
ALTER TABLE ctxwin.messages ENABLE ROW LEVEL SECURITY;
SET ROLE ctxwin_walk_app;
INSERT INTO viaspi SELECT b, x.* FROM budgets, pg_temp.windows(b) x;
INSERT INTO status SELECT 'spi', to_jsonb(s) - 'summary_age' FROM ctxwin.context_status('30000000-0000-4000-8000-000000000001') s;
RESET ROLE;

SELECT is((SELECT DISTINCT w ->> 'encoding' FROM direct WHERE NOT w ? 'error'), 'cl100k_base',
          'after the model change the windows are counted in cl100k_base');
SELECT is((SELECT count(*) FROM direct d JOIN viaspi v USING (b)
           WHERE d.openai IS NOT DISTINCT FROM v.openai
             AND d.anthropic IS NOT DISTINCT FROM v.anthropic
             AND d.w = v.w)::int,
          (SELECT count(*) FROM budgets)::int,
          'with every message recounted, direct scan and SPI still agree for every budget');
SELECT is((SELECT s FROM status WHERE source = 'direct'), (SELECT s FROM status WHERE source = 'spi'),
          'and on context_status');
-- the recount is real: the window's tokens are the messages' cl100k_base counts
SELECT is((SELECT count(*) FROM direct
           WHERE NOT w ? 'error'
             AND (w ->> 'tokens')::int <> ctxwin.messages_tokens(w -> 'messages', 'cl100k_base') + 3)::int, 0,
          'each window''s tokens are its messages counted in cl100k_base, plus the list''s 3');

SELECT * FROM finish();
ROLLBACK;

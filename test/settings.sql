-- A profile's settings in effect, with its model's and its calibration's,
-- are read by one reader (src/session/settings.c): directly from the tables
-- where it may, by a query where row-level security applies (or Citus).
-- Both ways give the same context_status and build_context; a row a policy
-- hides is missing as in a join; a calibration in another encoding than the
-- model's is no calibration.
\set ON_ERROR_STOP 1
\set QUIET 1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION ctxwin;

SELECT plan(9);

CREATE ROLE ctxwin_settings_r;
GRANT USAGE ON SCHEMA ctxwin TO ctxwin_settings_r;
GRANT SELECT, INSERT, UPDATE ON ctxwin.sessions, ctxwin.messages TO ctxwin_settings_r;
GRANT SELECT ON ctxwin.models, ctxwin.profiles TO ctxwin_settings_r;

-- every setting away from the model's and from the defaults
INSERT INTO ctxwin.profiles (name, model, context_window, response_reserve, trigger_ratio,
                             max_messages_before_summary, max_tokens_before_summary, min_recent_messages,
                             summary_placement, window_policy, window_low_water, cache_ttl)
VALUES ('sx', 'gpt-4o', 8000, 1000, 0.5, 4, NULL, 2, 'message', 'stable', 0.7, '1 year 2 months');
INSERT INTO ctxwin.calibration (model, encoding, requests, provider_tokens, counted_tokens, margin)
VALUES ('gpt-4o', (SELECT encoding FROM ctxwin.models WHERE name = 'gpt-4o'), 10, 12500, 10000, 1.25);
INSERT INTO ctxwin.sessions (id, profile, system_prompt, conversation_summary)
VALUES ('50000000-0000-4000-8000-000000000001', 'sx', 'You answer briefly.', 'Earlier: a question on builds.');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '50000000-0000-4000-8000-000000000001', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
       'Message ' || i || ': the deploy pipeline builds and tests the service.'
FROM generate_series(1, 6) i;

-- read directly (no row-level security on the settings' tables)
SET ROLE ctxwin_settings_r;
CREATE TEMP TABLE direct AS
SELECT to_jsonb(c) AS status,
       ctxwin.build_context('50000000-0000-4000-8000-000000000001') AS context
FROM ctxwin.context_status('50000000-0000-4000-8000-000000000001') c;
RESET ROLE;
SELECT is((SELECT format('%s %s %s %s %s', status ->> 'model', status ->> 'context_window',
                         status ->> 'budget_margin', status ->> 'budget', status ->> 'max_messages_before_summary')
           FROM direct),
          'gpt-4o 8000 1.25 5600 4',
          'read directly: the profile''s window, the model''s calibration, the budget (8000 - 1000) / 1.25');

-- the same by the query: row-level security on profiles, models and calibration
ALTER TABLE ctxwin.profiles ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.models ENABLE ROW LEVEL SECURITY;
ALTER TABLE ctxwin.calibration ENABLE ROW LEVEL SECURITY;
CREATE POLICY everything ON ctxwin.profiles USING (true);
CREATE POLICY everything ON ctxwin.models USING (true);
CREATE POLICY everything ON ctxwin.calibration USING (true);
SET ROLE ctxwin_settings_r;
SELECT is((SELECT to_jsonb(c) FROM ctxwin.context_status('50000000-0000-4000-8000-000000000001') c),
          (SELECT status FROM direct),
          'read by the query (row-level security), context_status is the same, column for column');
SELECT is(ctxwin.build_context('50000000-0000-4000-8000-000000000001'), (SELECT context FROM direct),
          'and so is build_context''s default window');

-- a calibration of the model in another encoding is none, both ways
RESET ROLE;
UPDATE ctxwin.calibration SET encoding = 'cl100k_base' WHERE model = 'gpt-4o';
SET ROLE ctxwin_settings_r;
SELECT is((SELECT format('%s %s', budget_margin, budget)
           FROM ctxwin.context_status('50000000-0000-4000-8000-000000000001')),
          '1 7000', 'a calibration in another encoding than the model''s is none (by the query)');
RESET ROLE;
ALTER TABLE ctxwin.calibration DISABLE ROW LEVEL SECURITY;
SET ROLE ctxwin_settings_r;
SELECT is((SELECT format('%s %s', budget_margin, budget)
           FROM ctxwin.context_status('50000000-0000-4000-8000-000000000001')),
          '1 7000', '(read directly)');

-- rows a policy hides: a calibration is none, a profile is no session
RESET ROLE;
UPDATE ctxwin.calibration SET encoding = (SELECT encoding FROM ctxwin.models WHERE name = 'gpt-4o')
WHERE model = 'gpt-4o';
ALTER TABLE ctxwin.calibration ENABLE ROW LEVEL SECURITY;
ALTER POLICY everything ON ctxwin.calibration USING (false);
SET ROLE ctxwin_settings_r;
SELECT is((SELECT format('%s %s', budget_margin, budget)
           FROM ctxwin.context_status('50000000-0000-4000-8000-000000000001')),
          '1 7000', 'a calibration a policy hides is none, as in a left join');
RESET ROLE;
ALTER POLICY everything ON ctxwin.calibration USING (true);
ALTER POLICY everything ON ctxwin.profiles USING (name <> 'sx');
SET ROLE ctxwin_settings_r;
SELECT throws_ok($$SELECT ctxwin.context_status('50000000-0000-4000-8000-000000000001')$$, 'P0002',
                 'session 50000000-0000-4000-8000-000000000001 does not exist',
                 'a session whose profile a policy hides does not exist, as in a join');
SELECT throws_ok($$SELECT ctxwin.build_context('50000000-0000-4000-8000-000000000001')$$, 'P0002',
                 'session 50000000-0000-4000-8000-000000000001 does not exist',
                 '(build_context)');
RESET ROLE;
ALTER POLICY everything ON ctxwin.profiles USING (true);
SET ROLE ctxwin_settings_r;
SELECT is((SELECT to_jsonb(c) FROM ctxwin.context_status('50000000-0000-4000-8000-000000000001') c),
          (SELECT status FROM direct),
          'shown again, the settings are as they were');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;

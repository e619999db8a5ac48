-- The start of every pgTAP suite (test/*.sql: \ir lib/begin.sql first):
-- psql stops at the first error, the suite runs in one transaction (it
-- ends with SELECT * FROM finish(); ROLLBACK;), and pgTAP counts the
-- checks: finish() prints the plan, so a suite that stops half-way prints
-- none and prove counts it failed (as it does psql's exit code, 3).
\set ON_ERROR_STOP 1
\set QUIET 1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
SELECT * FROM no_plan();

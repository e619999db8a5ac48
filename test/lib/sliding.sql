-- Compaction as it runs when no summary waits for a prompt cache: every
-- profile, and every new one, with the sliding window (test/stable.sql
-- checks the stable ones and their summary timing).  After CREATE
-- EXTENSION ctxwin: \ir lib/sliding.sql
ALTER TABLE ctxwin.profiles ALTER COLUMN window_policy SET DEFAULT 'sliding';
UPDATE ctxwin.profiles SET window_policy = 'sliding';

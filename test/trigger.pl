# The insert trigger of ctxwin.messages (C, src/trigger.c) in the cases its
# SQL cannot show by itself: it pins no search_path, so a hostile one must
# change nothing; its prepared statements outlive DROP and CREATE EXTENSION
# in one backend; the profile and model it reads by primary key honour
# table and column privileges and row-level security as a query would.
# Who may write what: an application role granted as the README says writes
# messages and the session columns that are the application's, and no
# column ctxwin maintains, no message id or token count; the tables' owner
# (a restore) may.
# Statements of many messages: the counters are kept in memory for the
# statement and each session's row is written once at its end, with the
# same ids, counts and queue state as one message per statement gives, also
# when the statement fails, is rolled back to a savepoint, nests other
# inserts, or has a trigger that writes the session meanwhile.
# Many checks run across commits (a commit the trigger refuses, a statement
# that aborts its transaction, VACUUM, DROP and CREATE EXTENSION in one
# backend), so the program has a cluster of its own, with a database for
# them and a second, new one whose ctxwin.profiles VACUUM shortens.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan tests => 42;

my $node = ctxwin_node('trigger');
my $db = 'ctxwin_trigger_t';
my $role = 'ctxwin_trigger_t_app';
my $app = 'ctxwin_trigger_t_readme';
my $owner = 'ctxwin_trigger_t_owner';
my $admin = 'ctxwin_trigger_t_settings';
my $s = '00000000-0000-4000-8000-0000000000a1';

# sq(SQL): what SQL printed in $db, errors included
sub sq { return sql($node, $db, @_); }

# the superuser the test runs as
my $su = sql_do($node, 'postgres', 'SELECT current_user');
chomp $su;

sql_do($node, 'postgres', "CREATE DATABASE $db; CREATE ROLE $role; CREATE ROLE $app; CREATE ROLE $owner; CREATE ROLE $admin;");
sql_do($node, $db, "CREATE EXTENSION ctxwin; INSERT INTO ctxwin.sessions (id) VALUES ('$s');");

# A search_path whose first schema has its own uuid =, bigint + int and now().
my $tokens = sq("SELECT ctxwin.message_tokens('user', 'Hello there.', NULL, NULL, NULL, 'o200k_base') "
	  . "+ ctxwin.message_tokens('assistant', 'Hi!', NULL, NULL, NULL, 'o200k_base')");
is(sq(<<"SQL"), "2|$tokens|t\n0|0|t", 'a hostile search_path changes neither which session is updated, nor its counters, nor its timestamps');
CREATE SCHEMA evil;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS \$\$ SELECT '2000-01-01'::timestamptz \$\$;
CREATE FUNCTION evil.uuid_eq(uuid, uuid) RETURNS boolean LANGUAGE sql AS \$\$ SELECT true \$\$;
CREATE OPERATOR evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = evil.uuid_eq);
CREATE FUNCTION evil.plus(bigint, int) RETURNS bigint LANGUAGE sql AS \$\$ SELECT 1000000::bigint \$\$;
CREATE OPERATOR evil.+ (LEFTARG = bigint, RIGHTARG = int, FUNCTION = evil.plus);
INSERT INTO ctxwin.sessions (id) VALUES ('00000000-0000-4000-8000-0000000000a2');
SET search_path = evil, pg_catalog, ctxwin;
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'Hello there.');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'assistant', 'Hi!');
RESET search_path;
SELECT message_count, token_count, updated_at > '2001-01-01' FROM ctxwin.sessions ORDER BY id;
SQL

# DROP and CREATE EXTENSION in one backend: the kept statements are replanned.
is(sq(<<"SQL"), "1|o200k_base\n1|o200k_base|t", 'DROP and CREATE EXTENSION in one backend: inserts and recounts go on working');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'Before.');
DROP EXTENSION ctxwin;
CREATE EXTENSION ctxwin;
INSERT INTO ctxwin.sessions (id) VALUES ('$s');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'After.');
-- the recount statement too: the model of the default profile changes
UPDATE ctxwin.profiles SET model = 'gpt-4' WHERE name = 'default';
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'assistant', 'Recounted.');
DROP EXTENSION ctxwin;
CREATE EXTENSION ctxwin;
INSERT INTO ctxwin.sessions (id, profile) VALUES ('$s', 'default');
UPDATE ctxwin.sessions SET count_encoding = 'cl100k_base';
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'Once more.');
SELECT id, token_encoding FROM ctxwin.messages;
SELECT message_count, count_encoding, unsummarized_tokens = token_count FROM ctxwin.sessions;
SQL

# The profile and model rows are fetched where they were found last while
# that version is the visible one: in one backend, a message is counted
# with the model its profile has now, and a place beyond the end of a
# table VACUUM truncated is not read.
sql_do($node, 'postgres', "CREATE DATABASE ${db}_hints");
is(sql($node, "${db}_hints", <<'SQL'), "o200k_base cl100k_base o200k_base\nt\nt\nNear. o200k_base",
CREATE EXTENSION ctxwin;
INSERT INTO ctxwin.sessions (id) VALUES ('00000000-0000-4000-8000-0000000000f1');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-0000000000f1', 'user', 'One.');
UPDATE ctxwin.profiles SET model = 'gpt-4' WHERE name = 'default';
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-0000000000f1', 'user', 'Two.');
UPDATE ctxwin.profiles SET model = 'gpt-4o' WHERE name = 'default';
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-0000000000f1', 'user', 'Three.');
SELECT string_agg(token_encoding, ' ' ORDER BY id) FROM ctxwin.messages WHERE session_id = '00000000-0000-4000-8000-0000000000f1';
INSERT INTO ctxwin.profiles (name, model) SELECT 'pad ' || i, 'gpt-4o' FROM generate_series(1, 400) i;
INSERT INTO ctxwin.profiles (name, model) VALUES ('last', 'gpt-4');
INSERT INTO ctxwin.sessions (id, profile) VALUES ('00000000-0000-4000-8000-0000000000f2', 'last');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-0000000000f2', 'user', 'Far.');
SELECT (ctid::text::point)[0] > 0 FROM ctxwin.profiles WHERE name = 'last';
DELETE FROM ctxwin.sessions WHERE id = '00000000-0000-4000-8000-0000000000f2';
DELETE FROM ctxwin.profiles WHERE name LIKE 'pad %' OR name = 'last';
VACUUM ctxwin.profiles;
SELECT pg_relation_size('ctxwin.profiles') = current_setting('block_size')::int;
INSERT INTO ctxwin.profiles (name, model) VALUES ('last', 'gpt-4o');
INSERT INTO ctxwin.sessions (id, profile) VALUES ('00000000-0000-4000-8000-0000000000f2', 'last');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-0000000000f2', 'user', 'Near.');
SELECT string_agg(content || ' ' || token_encoding, ', ' ORDER BY id) FROM ctxwin.messages WHERE session_id = '00000000-0000-4000-8000-0000000000f2';
SQL
	"in one backend each message is counted with its profile's model as it is now, also after VACUUM shortened ctxwin.profiles");

# Privileges: what the trigger reads of profiles and models needs SELECT on
# them (or on the columns it reads), as the query it replaces did.
sql_do($node, $db, <<"SQL");
INSERT INTO ctxwin.sessions (id) VALUES ('00000000-0000-4000-8000-0000000000a3');
GRANT USAGE ON SCHEMA ctxwin TO $role;
GRANT SELECT, INSERT, UPDATE ON ctxwin.sessions, ctxwin.messages TO $role;
SQL
sub ins
{
	my ($content) = @_;
	return sq("SET ROLE $role;\nINSERT INTO ctxwin.messages (session_id, role, content) "
		  . "VALUES ('00000000-0000-4000-8000-0000000000a3', 'user', '$content')");
}
like(ins('one'), qr/permission denied for table profiles/, 'without SELECT on ctxwin.profiles an insert is refused');
sql_do($node, $db, "GRANT SELECT (name, model, context_window, trigger_ratio, max_messages_before_summary,
	max_tokens_before_summary, min_recent_messages) ON ctxwin.profiles TO $role;
	GRANT SELECT ON ctxwin.models TO $role;");
like(ins('two'), qr/permission denied for table profiles/, 'nor without SELECT on profiles.summary_placement');
sql_do($node, $db, "GRANT SELECT (summary_placement, response_reserve, window_policy, window_low_water, search) ON ctxwin.profiles TO $role;
	REVOKE SELECT ON ctxwin.models FROM $role;
	GRANT SELECT (name, context_window) ON ctxwin.models TO $role;");
like(ins('three'), qr/permission denied for table models/, 'nor without SELECT on models.encoding');
sql_do($node, $db, "GRANT SELECT (encoding) ON ctxwin.models TO $role");
is(ins('four'), '', 'SELECT on the columns it reads is enough');
sql_do($node, $db, "GRANT SELECT ON ctxwin.profiles, ctxwin.models TO $role");
is(ins('five'), '', 'and SELECT on the tables');

# Row-level security on profiles applies as to a query.
sql_do($node, $db, "ALTER TABLE ctxwin.profiles ENABLE ROW LEVEL SECURITY;
	CREATE POLICY hide ON ctxwin.profiles USING (name <> 'default');");
like(ins('six'), qr/session 00000000-0000-4000-8000-0000000000a3 does not exist/,
	'a profile a policy hides is no profile, as in a join');
sql_do($node, $db, "DROP POLICY hide ON ctxwin.profiles; CREATE POLICY show ON ctxwin.profiles USING (true);");
is(ins('seven'), '', 'a policy that shows it lets the insert through');
sql_do($node, $db, "DROP POLICY show ON ctxwin.profiles; ALTER TABLE ctxwin.profiles DISABLE ROW LEVEL SECURITY;
	ALTER TABLE ctxwin.models ENABLE ROW LEVEL SECURITY;
	CREATE POLICY show ON ctxwin.models USING (true);");
is(ins('eight'), '', 'as does one on models');
is(sq("SELECT string_agg(content, ',' ORDER BY id) FROM ctxwin.messages WHERE session_id = '00000000-0000-4000-8000-0000000000a3'"),
	'four,five,seven,eight', 'the refused inserts left nothing');
is(sq("SELECT message_count, unsummarized_messages FROM ctxwin.sessions WHERE id = '00000000-0000-4000-8000-0000000000a3'"),
	'4|4', 'and the session counts the ones that went in');

sql_do($node, $db, "DROP POLICY show ON ctxwin.models; ALTER TABLE ctxwin.models DISABLE ROW LEVEL SECURITY;");

# --- who writes what ---------------------------------------------------------
# The README's grants to an application role.
my $b1 = '00000000-0000-4000-8000-0000000000f1';
sql_do($node, $db, <<"SQL");
GRANT USAGE ON SCHEMA ctxwin TO $app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO $app;
GRANT SELECT ON ctxwin.models, ctxwin.profiles TO $app;
INSERT INTO ctxwin.profiles (name, model) VALUES ('other', 'gpt-4');
INSERT INTO ctxwin.sessions (id, system_prompt) VALUES ('$b1', 'You help.'),
  ('00000000-0000-4000-8000-0000000000b3', NULL);
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '$b1', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END, 'Message ' || i FROM generate_series(1, 10) i;
-- runs a statement; its SQLSTATE, or ok
CREATE FUNCTION public.try(cmd text, sid uuid) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    EXECUTE cmd USING sid;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END \$\$;
-- every column ctxwin maintains, with another value than it has
CREATE TABLE public.protected (o int, col text, val text);
INSERT INTO public.protected VALUES
  (1, 'message_count', 'message_count + 5'), (2, 'token_count', '7'), (3, 'unsummarized_messages', '7'),
  (4, 'unsummarized_tokens', '7'), (5, 'prompt_tokens', '7'), (6, 'summary_tokens', '7'),
  (7, 'summary_version', '7'), (8, 'summary_updated_at', 'now()'), (9, 'count_encoding', quote_literal('cl100k_base')),
  (10, 'pending_tool_calls', quote_literal('{x}')), (11, 'compaction_queued_at', 'now()'),
  (12, 'compaction_retry_at', 'now()'), (13, 'compaction_failures', '7'), (14, 'last_error', quote_literal('boom')),
  (15, 'last_error_at', 'now()'), (16, 'created_at', quote_literal('2000-01-01')),
  (17, 'updated_at', quote_literal('2000-01-01'));
GRANT SELECT ON public.protected TO PUBLIC;
SQL

# writes(ROLE, update|insert, [SESSION]): each protected column and what writing it gave
sub writes
{
	my ($who, $how, $sid) = @_;
	$sid //= $b1;
	return sq("SET ROLE $who;\n" . <<"SQL");
SELECT string_agg(col || '=' || public.try(
	CASE '$how' WHEN 'update' THEN format('UPDATE ctxwin.sessions SET %I = %s WHERE id = \$1', col, val)
	          ELSE format('INSERT INTO ctxwin.sessions (%I) VALUES (%s)', col, replace(val, 'message_count + 5', '5')) END,
	'$sid'), ' ' ORDER BY o)
	FROM public.protected
SQL
}
sub all { my ($what) = @_; return sq("SELECT string_agg(col || '=$what', ' ' ORDER BY o) FROM public.protected"); }
is(writes($app, 'update'), all('42501'),
	'an application role may UPDATE none of the columns ctxwin maintains (insufficient_privilege for each)');
is(writes($app, 'insert'), all('42501'),
	'nor INSERT a session with another value than the default in any of them');
like(sq("SET ROLE $app; UPDATE ctxwin.sessions SET message_count = 1000 WHERE id = '$b1'"),
	qr/permission denied to write column "message_count" of ctxwin.sessions/, 'the error names the column');
is(sq("SELECT message_count, token_count > 0, unsummarized_messages, compaction_failures FROM ctxwin.sessions WHERE id = '$b1'"),
	'10|t|10|0', 'and the session is as it was');

# what an application does write
is(sq(<<"SQL"), "9\nother|y|4|12|8|cl100k_base|1",
SET ROLE $app;
INSERT INTO ctxwin.sessions (id, profile, system_prompt, conversation_summary, metadata, summary_through_id,
                             message_count, created_at)
VALUES ('00000000-0000-4000-8000-0000000000f2', 'other', 'Be brief.', 'Nothing yet.', '{"user": 7}', 0, 0, now());
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$b1', 'user', 'Eleven'), ('$b1', 'assistant', 'Twelve');
UPDATE ctxwin.sessions SET profile = 'other', system_prompt = 'You help more.', metadata = '{"tag": "x"}' WHERE id = '$b1';
UPDATE ctxwin.sessions SET conversation_summary = 'The first four.', summary_through_id = 4 WHERE id = '$b1';
-- an ORM writes back every column as it read them: unchanged ones are no write
UPDATE ctxwin.sessions s SET metadata = '{"tag": "y"}', message_count = s.message_count, token_count = s.token_count,
    compaction_failures = s.compaction_failures, updated_at = s.updated_at, last_error = s.last_error WHERE id = '$b1';
UPDATE ctxwin.messages SET metadata = '{"starred": true}' WHERE session_id = '$b1' AND id = 12;
SELECT count(*) + 1 FROM ctxwin.messages_after('$b1', 4);
RESET ROLE;
SELECT profile, metadata ->> 'tag', summary_through_id, message_count, unsummarized_messages, count_encoding, summary_version
FROM ctxwin.sessions WHERE id = '$b1';
SQL
	'an application role inserts sessions and messages, writes profile, system_prompt, metadata, the summary and its point, and ctxwin keeps the rest');

# Ids and token counts: a role that could raise message_count and then
# insert rows with ids and any token_count made build_context exceed its budget.
is(sq("SET ROLE $app;\n" . <<"SQL"), '42501 42501 42501 42501 42501',
SELECT string_agg(x, ' ' ORDER BY o) FROM (VALUES
	(1, public.try('INSERT INTO ctxwin.messages (session_id, id, role, content) VALUES (\$1, 13, ''user'', ''x'')', '$b1')),
	(2, public.try('INSERT INTO ctxwin.messages (session_id, id, role, content, token_count, token_encoding) VALUES (\$1, 3, ''user'', ''x'', 0, ''o200k_base'')', '$b1')),
	(3, public.try('INSERT INTO ctxwin.messages (session_id, role, content, token_count) VALUES (\$1, ''user'', ''x'', -100000)', '$b1')),
	(4, public.try('INSERT INTO ctxwin.messages (session_id, role, content, token_encoding) VALUES (\$1, ''user'', ''x'', ''chars4'')', '$b1')),
	(5, public.try('UPDATE ctxwin.sessions SET message_count = message_count + 100 WHERE id = \$1', '$b1'))) t(o, x)
SQL
	'an application role supplies no message id (not even the next one), token_count or token_encoding, and cannot raise message_count');
like(sq("SET ROLE $app; INSERT INTO ctxwin.messages (session_id, id, role, content, token_count, token_encoding) VALUES ('$b1', 5, 'user', 'x', 0, 'o200k_base')"),
	qr/permission denied to write column "id" of ctxwin.messages/, 'the refusal names the column');
like(sq("INSERT INTO ctxwin.messages (session_id, id, role, content, token_count, token_encoding) VALUES ('$b1', 5, 'user', 'x', -3, 'o200k_base')"),
	qr/violates check constraint/, 'a negative token_count is refused by a CHECK, even from the owner');
is(sq("SELECT count(*), max(id), sum(token_count) = (SELECT token_count FROM ctxwin.sessions WHERE id = '$b1') FROM ctxwin.messages WHERE session_id = '$b1'"),
	'12|12|t', 'nothing of it went in');

# The owner: a superuser, and a role that owns the tables.
my $cols = sq("SELECT string_agg(col || '=ok', ' ' ORDER BY o) FROM public.protected");
is(writes($su, 'update', '00000000-0000-4000-8000-0000000000b3'), $cols, 'a superuser may write every one of them');
sql_do($node, $db, "GRANT USAGE ON SCHEMA ctxwin TO $owner; GRANT SELECT ON ctxwin.models, ctxwin.profiles TO $owner;
	ALTER TABLE ctxwin.sessions OWNER TO $owner; ALTER TABLE ctxwin.messages OWNER TO $owner;");
is(writes($owner, 'insert'), $cols, 'so may the role that owns ctxwin.sessions');
is(sq(<<"SQL"), '3', 'and may restore a session with its counters and messages with their ids and counts');
SET ROLE $owner;
INSERT INTO ctxwin.sessions (id, message_count, token_count, unsummarized_messages,
	unsummarized_tokens, count_encoding) VALUES ('00000000-0000-4000-8000-0000000000b5', 2, 20, 2, 20, 'o200k_base');
INSERT INTO ctxwin.messages (session_id, id, role, content, token_count, token_encoding)
	VALUES ('00000000-0000-4000-8000-0000000000b5', 1, 'user', 'a', 10, 'o200k_base'),
	       ('00000000-0000-4000-8000-0000000000b5', 2, 'assistant', 'b', 10, 'o200k_base');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-0000000000b5', 'user', 'c') RETURNING id;
SQL
sql_do($node, $db, "ALTER TABLE ctxwin.sessions OWNER TO $su; ALTER TABLE ctxwin.messages OWNER TO $su;");

# Derived: a summary point moving forward clears the compaction errors.
sql_do($node, $db, "UPDATE ctxwin.sessions SET compaction_failures = 3, compaction_retry_at = now() + interval '1 hour',
	last_error = 'HTTP 500', last_error_at = now() WHERE id = '$b1'");
is(sq("SET ROLE $app;
	UPDATE ctxwin.sessions SET conversation_summary = 'The first eight.', summary_through_id = 8 WHERE id = '$b1';
	SELECT compaction_failures, compaction_retry_at IS NULL, last_error IS NULL, last_error_at IS NULL FROM ctxwin.sessions WHERE id = '$b1';"),
	'0|t|t|t', 'a new summary point clears failures, retry time and last error (derived, not written by the caller)');

# A changed profile queues the sessions it puts over a trigger, whoever changes it.
sql_do($node, $db, "GRANT USAGE ON SCHEMA ctxwin TO $admin; GRANT SELECT, UPDATE ON ctxwin.profiles TO $admin;
	GRANT SELECT ON ctxwin.models TO $admin;");
is(sq("SET ROLE $admin;
	UPDATE ctxwin.profiles SET max_messages_before_summary = 3, min_recent_messages = 1 WHERE name = 'other';
	RESET ROLE;
	SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$b1';"),
	't', 'a role that may update profiles but not sessions lowers a trigger: the session is queued');

# --- statements of many messages ---------------------------------------------
# The same messages into sessions in the same state: one INSERT per message
# (sessions a*), one INSERT ... SELECT into several sessions at once
# (sessions b*), one INSERT ... SELECT per session (sessions c*).  Session 1
# starts empty, session 2 queued with failed compactions and a retry time
# (the messages reset them), session 3 with counters in another encoding
# than its model's (recounted); a profile with low triggers queues them
# mid-statement; tool call groups open and close.
sql_do($node, $db, <<'SQL');
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
                             min_recent_messages)
VALUES ('low', 'gpt-4o', 25, NULL, NULL, 3);
CREATE TABLE public.src (k int, n int, role text, content text, tool_calls jsonb, tool_call_id text, name text);
INSERT INTO public.src
SELECT k, n,
       CASE WHEN n % 10 = 7 THEN 'assistant' WHEN n % 10 IN (8, 9) THEN 'tool'
            WHEN n % 2 = 0 THEN 'user' ELSE 'assistant' END,
       CASE WHEN n % 10 = 7 THEN NULL ELSE format('Message %s of %s: %s', n, k, repeat('naïve café ', n % 13)) END,
       CASE WHEN n % 10 = 7 THEN jsonb_build_array(
                jsonb_build_object('id', 'c' || n || 'a', 'type', 'function',
                                   'function', jsonb_build_object('name', 'f', 'arguments', '{}')),
                jsonb_build_object('id', 'c' || n || 'b', 'type', 'function',
                                   'function', jsonb_build_object('name', 'g', 'arguments', '{"x": 1}'))) END,
       CASE WHEN n % 10 = 8 THEN 'c' || (n - 1) || 'a' WHEN n % 10 = 9 THEN 'c' || (n - 2) || 'b' END,
       CASE WHEN n % 5 = 0 THEN 'ana' END
FROM generate_series(1, 3) k, generate_series(1, 58) n;
CREATE FUNCTION public.sid(t text, k int) RETURNS uuid LANGUAGE sql IMMUTABLE
RETURN ('00000000-0000-4000-8000-' || lpad((ascii(t) * 10 + k)::text, 12, '0'))::uuid;
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
SELECT public.sid(t, k), 'low', 'You are session ' || k FROM unnest(ARRAY['a', 'b', 'c']) t, generate_series(1, 3) k;
-- session 3: three messages, then counters in another encoding
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT public.sid(t, 3), 'user', 'Earlier ' || i FROM unnest(ARRAY['a', 'b', 'c']) t, generate_series(1, 3) i;
UPDATE ctxwin.sessions SET count_encoding = 'cl100k_base', unsummarized_tokens = 1, prompt_tokens = 1
WHERE id IN (public.sid('a', 3), public.sid('b', 3), public.sid('c', 3));
-- session 2: queued, failing
UPDATE ctxwin.sessions SET compaction_queued_at = now(), compaction_failures = 2,
    compaction_retry_at = now() + interval '1 hour', last_error = 'HTTP 503'
WHERE id IN (public.sid('a', 2), public.sid('b', 2), public.sid('c', 2));
-- what a session and its messages are, without its id and times
CREATE FUNCTION public.state(s uuid) RETURNS text LANGUAGE sql STABLE RETURN (
    SELECT format('%s %s %s %s %s %s %s %s %s %s %s %s %s', x.message_count, x.token_count, x.unsummarized_messages,
                  x.unsummarized_tokens, x.prompt_tokens, x.count_encoding, x.pending_tool_calls,
                  x.compaction_queued_at IS NOT NULL, x.compaction_failures, x.compaction_retry_at IS NULL,
                  x.last_error, x.summary_through_id,
                     (SELECT md5(string_agg(concat_ws('|', m.id, m.role, m.content, m.tool_calls, m.tool_call_id, m.name,
                                                      m.token_count, m.token_encoding), E'\n' ORDER BY m.id))
                      FROM ctxwin.messages m WHERE m.session_id = s))
    FROM ctxwin.sessions x WHERE x.id = s);
SQL
sql_do($node, $db, <<'SQL');
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM public.src ORDER BY n, k LOOP
        INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id, name)
        VALUES (public.sid('a', r.k), r.role, r.content, r.tool_calls, r.tool_call_id, r.name);
    END LOOP;
END $$;
SQL
my $upd = sq(<<'SQL');
BEGIN;
INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id, name)
	SELECT public.sid('b', k), role, content, tool_calls, tool_call_id, name FROM public.src ORDER BY n, k;
SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = 'ctxwin.sessions'::regclass;
COMMIT;
SQL
for my $k (1 .. 3)
{
	sql_do($node, $db, "INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, tool_call_id, name)
		SELECT public.sid('c', k), role, content, tool_calls, tool_call_id, name FROM public.src WHERE k = $k ORDER BY n");
}
sub states
{
	my ($t) = @_;
	return sq("SELECT string_agg(public.state(public.sid('$t', k)), E'\\n' ORDER BY k) FROM generate_series(1, 3) k");
}
my $want = states('a');
is(states('b'), $want,
	'one INSERT ... SELECT into three sessions: the same ids, token counts, counters, tool calls pending and queue state as one INSERT per message');
is(states('c'), $want, 'one INSERT ... SELECT per session: the same');
# the encodings of the three (the sixth word of each state), each once
my %enc = map { ((split / /)[5] => 1) } split /\n/, $want;
is(sq("SELECT count(*) FROM ctxwin.sessions WHERE id IN (public.sid('a', 1), public.sid('a', 2), public.sid('a', 3))
	AND compaction_queued_at IS NOT NULL AND compaction_failures = 0 AND compaction_retry_at IS NULL")
	  . '|' . join('', map { "$_ " } sort keys %enc),
	'3|o200k_base ', '(the three got queued, their failures and retry time reset, and session 3 recounted)');
is($upd, '6',
	"the statement wrote each session's row twice, not once per message (174 messages: its first message's write, and the statement's end)");

# Errors: a statement that fails halfway, alone or rolled back to a
# savepoint, leaves no trace; the next message takes the next id.
my $e = '00000000-0000-4000-8000-0000000000e1';
sql_do($node, $db, "INSERT INTO ctxwin.sessions (id) VALUES ('$e');
	INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$e', 'user', 'First ' || i FROM generate_series(1, 10) i;");
my $before = sq("SELECT public.state('$e')");
my $bad = "INSERT INTO ctxwin.messages (session_id, role, content)
	SELECT '$e', CASE WHEN i = 500 THEN 'robot' ELSE 'user' END, 'Message ' || i FROM generate_series(1, 1000) i";
like(sq($bad), qr/invalid message role "robot"/, 'a bad role in message 500 of 1,000 fails the statement');
is(sq("SELECT public.state('$e')"), $before, 'and leaves no trace');
# psql goes on after the error (ON_ERROR_STOP off); what it printed, not its errors
my (undef, $ids) = $node->psql($db, <<"SQL", on_error_stop => 0);
BEGIN;
INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$e', 'user', 'Second ' || i FROM generate_series(1, 5) i;
SAVEPOINT s;
$bad;
ROLLBACK TO SAVEPOINT s;
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$e', 'assistant', 'After the savepoint') RETURNING id;
SAVEPOINT t;
INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$e', 'user', 'Gone ' || i FROM generate_series(1, 7) i;
ROLLBACK TO SAVEPOINT t;
INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$e', 'user', 'Third ' || i FROM generate_series(1, 3) i RETURNING id;
COMMIT;
SQL
is(join(' ', split /\s+/, $ids), '16 17 18 19',
	'in a transaction, the statement rolled back to a savepoint leaves no counters behind: the next ids follow');

# consistent(SESSION): the counters of the session match its messages (ids 1..n, sums)
sub consistent
{
	my ($id) = @_;
	return sq("SELECT count(*) = x.message_count AND coalesce(max(m.id), 0) = x.message_count
		AND coalesce(sum(m.token_count), 0) = x.token_count
		AND count(*) FILTER (WHERE m.id > x.summary_through_id) = x.unsummarized_messages
		AND coalesce(sum(m.token_count) FILTER (WHERE m.id > x.summary_through_id), 0) = x.unsummarized_tokens
		FROM ctxwin.sessions x LEFT JOIN ctxwin.messages m ON m.session_id = x.id WHERE x.id = '$id' GROUP BY x.id");
}
is(consistent($e), 't', 'and its counters match its messages');

# Nested statements: a function the statement calls inserts into the same
# session, in a subtransaction that rolls back one time in three.
my $n = '00000000-0000-4000-8000-0000000000e2';
sql_do($node, $db, <<"SQL");
INSERT INTO ctxwin.sessions (id) VALUES ('$n');
CREATE FUNCTION public.nested(s uuid, i int) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    BEGIN
        INSERT INTO ctxwin.messages (session_id, role, content) VALUES (s, 'assistant', 'nested ' || i);
        IF i % 3 = 0 THEN
            RAISE EXCEPTION 'undo';
        END IF;
    EXCEPTION WHEN raise_exception THEN
        NULL;
    END;
    RETURN 'outer ' || i;
END \$\$;
SQL
sql_do($node, $db, "INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$n', 'user', public.nested('$n', i) FROM generate_series(1, 30) i");
is(sq("SELECT count(*), max(id), count(*) FILTER (WHERE content LIKE 'nested%') FROM ctxwin.messages WHERE session_id = '$n'")
	  . '|' . consistent($n),
	'50|50|20|t', 'inserts nested in a statement, some rolled back: ids 1..50 without gaps and counters that match');

# A trigger that writes the session while the statement runs: its metadata
# each message, and a summary point once.
my $t = '00000000-0000-4000-8000-0000000000e3';
sql_do($node, $db, <<"SQL");
INSERT INTO ctxwin.sessions (id) VALUES ('$t');
CREATE FUNCTION public.touch() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    UPDATE ctxwin.sessions SET metadata = jsonb_build_object('last', NEW.id) WHERE id = NEW.session_id;
    IF NEW.id = 60 THEN
        UPDATE ctxwin.sessions SET conversation_summary = 'The first 40.', summary_through_id = 40 WHERE id = NEW.session_id;
    END IF;
    RETURN NULL;
END \$\$;
CREATE TRIGGER touch AFTER INSERT ON ctxwin.messages FOR EACH ROW WHEN (NEW.session_id = '$t')
    EXECUTE FUNCTION public.touch();
INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$t', 'user', 'Message ' || i FROM generate_series(1, 100) i;
INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$t', 'assistant', 'One more.');
DROP TRIGGER touch ON ctxwin.messages;
SQL
is(sq("SELECT message_count, unsummarized_messages, metadata ->> 'last', summary_through_id FROM ctxwin.sessions WHERE id = '$t'")
	  . '|' . consistent($t),
	'101|61|101|40|t', 'a trigger that updates the session meanwhile keeps its change, and the counters stay right');

# Two inserts in one statement (a data-modifying WITH), and inserts made by
# another table's trigger, row by row.
my $w = '00000000-0000-4000-8000-0000000000e4';
sql_do($node, $db, <<"SQL");
INSERT INTO ctxwin.sessions (id) VALUES ('$w');
WITH a AS (INSERT INTO ctxwin.messages (session_id, role, content)
           SELECT '$w', 'user', 'Question ' || i FROM generate_series(1, 20) i RETURNING id, content)
INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$w', 'assistant', 'Answer to ' || content FROM a;
CREATE TABLE public.chat_log (session_id uuid, line text);
CREATE FUNCTION public.log_to_ctxwin() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO ctxwin.messages (session_id, role, content) VALUES (NEW.session_id, 'user', NEW.line);
    RETURN NULL;
END \$\$;
CREATE TRIGGER to_ctxwin AFTER INSERT ON public.chat_log FOR EACH ROW EXECUTE FUNCTION public.log_to_ctxwin();
INSERT INTO public.chat_log SELECT '$w', 'Logged ' || i FROM generate_series(1, 30) i;
SQL
is(sq("SELECT count(*), count(*) FILTER (WHERE content LIKE 'Logged%' AND id > 40) FROM ctxwin.messages WHERE session_id = '$w'")
	  . '|' . consistent($w),
	'70|30|t', "two inserts in one WITH statement, then inserts by another table's trigger: counted right");

# The statement triggers: without the one that opens the statement, each
# row writes its session at once; without the one that writes the
# counters, a statement whose counters are not all written (its first
# message of a session writes them at once) cannot commit (rather than
# lose them).
sql_do($node, $db, "ALTER TABLE ctxwin.messages DISABLE TRIGGER messages_insert_begin;
	INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$w', 'user', 'Row by row ' || i FROM generate_series(1, 10) i;
	ALTER TABLE ctxwin.messages ENABLE TRIGGER messages_insert_begin;");
is(consistent($w), 't', 'without messages_insert_begin the rows write their session one by one');
like(sq("ALTER TABLE ctxwin.messages DISABLE TRIGGER messages_insert_end;
	INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$w', 'user', 'Lost?'), ('$w', 'user', 'Lost too?');"),
	qr/the counters of session \Q$w\E were not written/, "without messages_insert_end a statement's second message cannot commit");
is(sq("SELECT message_count FROM ctxwin.sessions WHERE id = '$w'") . '|' . consistent($w), '80|t', 'and nothing was lost');
sql_do($node, $db, "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$w', 'user', 'Kept')");
sql_do($node, $db, 'ALTER TABLE ctxwin.messages ENABLE TRIGGER messages_insert_end');
is(sq("SELECT message_count FROM ctxwin.sessions WHERE id = '$w'") . '|' . consistent($w), '81|t',
	'a statement of one message wrote its counters with it: it commits, counted');

#!/usr/bin/env bash
# The insert trigger of ctxwin.messages (C, src/trigger.c) in the cases its
# SQL cannot show by itself: it pins no search_path, so a hostile one must
# change nothing; its prepared statements outlive DROP and CREATE EXTENSION
# in one backend; the profile and model it reads by primary key honour
# table and column privileges and row-level security as a query would.
# Who may write what: an application role granted as the README says writes
# messages and the session columns that are the application's, and no
# column ctxwin maintains, no message id or token count; the tables' owner
# (a restore) may.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

export PGCLIENTENCODING=UTF8
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
db=ctxwin_trigger_t
role=ctxwin_trigger_t_app
app=ctxwin_trigger_t_readme
owner=ctxwin_trigger_t_owner
admin=ctxwin_trigger_t_settings
s=00000000-0000-4000-8000-0000000000a1
cleanup() {
	q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" \
		-c "DROP ROLE IF EXISTS $role" -c "DROP ROLE IF EXISTS $app" -c "DROP ROLE IF EXISTS $owner" \
		-c "DROP ROLE IF EXISTS $admin" >/dev/null 2>&1
}
trap cleanup EXIT

plan 26
cleanup
q -d postgres -c "CREATE DATABASE $db" -c "CREATE ROLE $role" -c "CREATE ROLE $app" -c "CREATE ROLE $owner" \
	-c "CREATE ROLE $admin" >/dev/null
q -d "$db" -c "CREATE EXTENSION ctxwin" -c "INSERT INTO ctxwin.sessions (id) VALUES ('$s')" >/dev/null

# A search_path whose first schema has its own uuid =, bigint + int and now().
out=$(q -d "$db" 2>&1 <<SQL
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
)
is "$out" "2|$(q -d "$db" -c "SELECT ctxwin.message_tokens('user', 'Hello there.', NULL, NULL, NULL, 'o200k_base') + ctxwin.message_tokens('assistant', 'Hi!', NULL, NULL, NULL, 'o200k_base')")|t
0|0|t" "a hostile search_path changes neither which session is updated, nor its counters, nor its timestamps"

# DROP and CREATE EXTENSION in one backend: the kept statements are replanned.
out=$(q -d "$db" 2>&1 <<SQL
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
)
is "$out" "1|o200k_base
1|o200k_base|t" "DROP and CREATE EXTENSION in one backend: inserts and recounts go on working"

# Privileges: what the trigger reads of profiles and models needs SELECT on
# them (or on the columns it reads), as the query it replaces did.
q -d "$db" >/dev/null <<SQL
INSERT INTO ctxwin.sessions (id) VALUES ('00000000-0000-4000-8000-0000000000a3');
GRANT USAGE ON SCHEMA ctxwin TO $role;
GRANT SELECT, INSERT, UPDATE ON ctxwin.sessions, ctxwin.messages TO $role;
SQL
ins() { q -d "$db" -c "SET ROLE $role" -c "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-0000000000a3', 'user', '$1')" 2>&1; }
like "$(ins one)" "permission denied for table profiles" "without SELECT on ctxwin.profiles an insert is refused"
q -d "$db" -c "GRANT SELECT (name, model, context_window, trigger_ratio, max_messages_before_summary,
	max_tokens_before_summary, min_recent_messages) ON ctxwin.profiles TO $role" -c "GRANT SELECT ON ctxwin.models TO $role"
like "$(ins two)" "permission denied for table profiles" "nor without SELECT on profiles.summary_placement"
q -d "$db" -c "GRANT SELECT (summary_placement) ON ctxwin.profiles TO $role" -c "REVOKE SELECT ON ctxwin.models FROM $role" \
	-c "GRANT SELECT (name, context_window) ON ctxwin.models TO $role"
like "$(ins three)" "permission denied for table models" "nor without SELECT on models.encoding"
q -d "$db" -c "GRANT SELECT (encoding) ON ctxwin.models TO $role"
is "$(ins four)" "" "SELECT on the columns it reads is enough"
q -d "$db" -c "GRANT SELECT ON ctxwin.profiles, ctxwin.models TO $role"
is "$(ins five)" "" "and SELECT on the tables"

# Row-level security on profiles applies as to a query.
q -d "$db" -c "ALTER TABLE ctxwin.profiles ENABLE ROW LEVEL SECURITY" \
	-c "CREATE POLICY hide ON ctxwin.profiles USING (name <> 'default')"
like "$(ins six)" "session 00000000-0000-4000-8000-0000000000a3 does not exist" \
	"a profile a policy hides is no profile, as in a join"
q -d "$db" -c "DROP POLICY hide ON ctxwin.profiles" -c "CREATE POLICY show ON ctxwin.profiles USING (true)"
is "$(ins seven)" "" "a policy that shows it lets the insert through"
q -d "$db" -c "DROP POLICY show ON ctxwin.profiles" -c "ALTER TABLE ctxwin.profiles DISABLE ROW LEVEL SECURITY" \
	-c "ALTER TABLE ctxwin.models ENABLE ROW LEVEL SECURITY" \
	-c "CREATE POLICY show ON ctxwin.models USING (true)"
is "$(ins eight)" "" "as does one on models"
is "$(q -d "$db" -c "SELECT string_agg(content, ',' ORDER BY id) FROM ctxwin.messages WHERE session_id = '00000000-0000-4000-8000-0000000000a3'")" \
	"four,five,seven,eight" "the refused inserts left nothing"
is "$(q -d "$db" -c "SELECT message_count, unsummarized_messages FROM ctxwin.sessions WHERE id = '00000000-0000-4000-8000-0000000000a3'")" \
	"4|4" "and the session counts the ones that went in"

q -d "$db" -c "DROP POLICY show ON ctxwin.models" -c "ALTER TABLE ctxwin.models DISABLE ROW LEVEL SECURITY" >/dev/null

# --- who writes what ---------------------------------------------------------
# The README's grants to an application role.
b1=00000000-0000-4000-8000-0000000000b1
q -d "$db" >/dev/null <<SQL
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
writes() {
	# writes ROLE update|insert [SESSION]: each protected column and what writing it gave
	q -d "$db" -c "SET ROLE $1" -c "SELECT string_agg(col || '=' || public.try(
		CASE '$2' WHEN 'update' THEN format('UPDATE ctxwin.sessions SET %I = %s WHERE id = \$1', col, val)
		          ELSE format('INSERT INTO ctxwin.sessions (%I) VALUES (%s)', col, replace(val, 'message_count + 5', '5')) END,
		'${3:-$b1}'), ' ' ORDER BY o)
		FROM public.protected"
}
all() { q -d "$db" -c "SELECT string_agg(col || '=$1', ' ' ORDER BY o) FROM public.protected"; }
is "$(writes "$app" update)" "$(all 42501)" \
	"an application role may UPDATE none of the columns ctxwin maintains (insufficient_privilege for each)"
is "$(writes "$app" insert)" "$(all 42501)" \
	"nor INSERT a session with another value than the default in any of them"
like "$(q -d "$db" -c "SET ROLE $app" -c "UPDATE ctxwin.sessions SET message_count = 1000 WHERE id = '$b1'" 2>&1)" \
	'permission denied to write column "message_count" of ctxwin.sessions' "the error names the column"
is "$(q -d "$db" -c "SELECT message_count, token_count > 0, unsummarized_messages, compaction_failures FROM ctxwin.sessions WHERE id = '$b1'")" \
	"10|t|10|0" "and the session is as it was"

# what an application does write
out=$(q -d "$db" 2>&1 <<SQL
SET ROLE $app;
INSERT INTO ctxwin.sessions (id, profile, system_prompt, conversation_summary, metadata, summary_through_id,
                             message_count, created_at)
VALUES ('00000000-0000-4000-8000-0000000000b2', 'other', 'Be brief.', 'Nothing yet.', '{"user": 7}', 0, 0, now());
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
)
is "$out" "9
other|y|4|12|8|cl100k_base|1" \
	"an application role inserts sessions and messages, writes profile, system_prompt, metadata, the summary and its point, and ctxwin keeps the rest"

# Ids and token counts: a role that could raise message_count and then
# insert rows with ids and any token_count made build_context exceed its budget.
out=$(q -d "$db" -c "SET ROLE $app" -c "SELECT string_agg(x, ' ' ORDER BY o) FROM (VALUES
	(1, public.try('INSERT INTO ctxwin.messages (session_id, id, role, content) VALUES (\$1, 13, ''user'', ''x'')', '$b1')),
	(2, public.try('INSERT INTO ctxwin.messages (session_id, id, role, content, token_count, token_encoding) VALUES (\$1, 3, ''user'', ''x'', 0, ''o200k_base'')', '$b1')),
	(3, public.try('INSERT INTO ctxwin.messages (session_id, role, content, token_count) VALUES (\$1, ''user'', ''x'', -100000)', '$b1')),
	(4, public.try('INSERT INTO ctxwin.messages (session_id, role, content, token_encoding) VALUES (\$1, ''user'', ''x'', ''chars4'')', '$b1')),
	(5, public.try('UPDATE ctxwin.sessions SET message_count = message_count + 100 WHERE id = \$1', '$b1'))) t(o, x)" 2>&1)
is "$out" "42501 42501 42501 42501 42501" \
	"an application role supplies no message id (not even the next one), token_count or token_encoding, and cannot raise message_count"
like "$(q -d "$db" -c "SET ROLE $app" -c "INSERT INTO ctxwin.messages (session_id, id, role, content, token_count, token_encoding) VALUES ('$b1', 5, 'user', 'x', 0, 'o200k_base')" 2>&1)" \
	'permission denied to write column "id" of ctxwin.messages' "the refusal names the column"
like "$(q -d "$db" -c "INSERT INTO ctxwin.messages (session_id, id, role, content, token_count, token_encoding) VALUES ('$b1', 5, 'user', 'x', -3, 'o200k_base')" 2>&1)" \
	'violates check constraint' "a negative token_count is refused by a CHECK, even from the owner"
is "$(q -d "$db" -c "SELECT count(*), max(id), sum(token_count) = (SELECT token_count FROM ctxwin.sessions WHERE id = '$b1') FROM ctxwin.messages WHERE session_id = '$b1'")" \
	"12|12|t" "nothing of it went in"

# The owner: a superuser, and a role that owns the tables.
cols=$(q -d "$db" -c "SELECT string_agg(col || '=ok', ' ' ORDER BY o) FROM public.protected")
is "$(writes postgres update 00000000-0000-4000-8000-0000000000b3)" "$cols" "a superuser may write every one of them"
q -d "$db" -c "GRANT USAGE ON SCHEMA ctxwin TO $owner" -c "GRANT SELECT ON ctxwin.models, ctxwin.profiles TO $owner" \
	-c "ALTER TABLE ctxwin.sessions OWNER TO $owner" -c "ALTER TABLE ctxwin.messages OWNER TO $owner" >/dev/null
is "$(writes "$owner" insert)" "$cols" "so may the role that owns ctxwin.sessions"
is "$(q -d "$db" -c "SET ROLE $owner" -c "INSERT INTO ctxwin.sessions (id, message_count, token_count, unsummarized_messages,
	unsummarized_tokens, count_encoding) VALUES ('00000000-0000-4000-8000-0000000000b5', 2, 20, 2, 20, 'o200k_base')" \
	-c "INSERT INTO ctxwin.messages (session_id, id, role, content, token_count, token_encoding)
	VALUES ('00000000-0000-4000-8000-0000000000b5', 1, 'user', 'a', 10, 'o200k_base'),
	       ('00000000-0000-4000-8000-0000000000b5', 2, 'assistant', 'b', 10, 'o200k_base')" \
	-c "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-0000000000b5', 'user', 'c') RETURNING id" 2>&1)" \
	"3" "and may restore a session with its counters and messages with their ids and counts"
q -d "$db" -c "ALTER TABLE ctxwin.sessions OWNER TO postgres" -c "ALTER TABLE ctxwin.messages OWNER TO postgres" >/dev/null

# Derived: a summary point moving forward clears the compaction errors.
q -d "$db" -c "UPDATE ctxwin.sessions SET compaction_failures = 3, compaction_retry_at = now() + interval '1 hour',
	last_error = 'HTTP 500', last_error_at = now() WHERE id = '$b1'" >/dev/null
is "$(q -d "$db" -c "SET ROLE $app" -c "UPDATE ctxwin.sessions SET conversation_summary = 'The first eight.', summary_through_id = 8 WHERE id = '$b1'" \
	-c "SELECT compaction_failures, compaction_retry_at IS NULL, last_error IS NULL, last_error_at IS NULL FROM ctxwin.sessions WHERE id = '$b1'" 2>&1)" \
	"0|t|t|t" "a new summary point clears failures, retry time and last error (derived, not written by the caller)"

# A changed profile queues the sessions it puts over a trigger, whoever changes it.
q -d "$db" -c "GRANT USAGE ON SCHEMA ctxwin TO $admin" -c "GRANT SELECT, UPDATE ON ctxwin.profiles TO $admin" \
	-c "GRANT SELECT ON ctxwin.models TO $admin" >/dev/null
is "$(q -d "$db" -c "SET ROLE $admin" -c "UPDATE ctxwin.profiles SET max_messages_before_summary = 3, min_recent_messages = 1 WHERE name = 'other'" \
	-c "RESET ROLE" -c "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$b1'" 2>&1)" "t" \
	"a role that may update profiles but not sessions lowers a trigger: the session is queued"

done_testing

#!/usr/bin/env bash
# The insert trigger of ctxwin.messages (C, src/trigger.c) in the cases its
# SQL cannot show by itself: it pins no search_path, so a hostile one must
# change nothing; its prepared statements outlive DROP and CREATE EXTENSION
# in one backend; the profile and model it reads by primary key honour
# table and column privileges and row-level security as a query would.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

export PGCLIENTENCODING=UTF8
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
db=ctxwin_trigger_t
role=ctxwin_trigger_t_app
s=00000000-0000-4000-8000-0000000000a1
cleanup() {
	q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" \
		-c "DROP ROLE IF EXISTS $role" >/dev/null 2>&1
}
trap cleanup EXIT

plan 12
cleanup
q -d postgres -c "CREATE DATABASE $db" -c "CREATE ROLE $role" >/dev/null
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

done_testing

#!/usr/bin/env bash
# A database owner who is not a superuser prepares the database before a
# superuser installs ctxwin: a schema "ctxwin" of their own, and operators
# and functions for every operator name, built-in function name and type
# pair the install script uses, in that schema and in public.  CREATE
# EXTENSION must refuse the schema, and once it is gone nothing planted may
# ever run: not at install, not for the superuser or an application role
# whose search_path puts public first.  A second database plants, in
# pg_catalog itself, the operators and functions pg_catalog lacks for the
# numeric type pairs: a call in ctxwin that relies on an implicit cast
# would pick one of them, so this checks that every call has exact types.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

export PGCLIENTENCODING=UTF8
# the test's own queries run with a clean search_path; the workflow sets a hostile one
export PGOPTIONS="-c search_path=pg_catalog"
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
db=ctxwin_hostile_t
db2=ctxwin_exact_t
owner=ctxwin_hostile_owner
app=ctxwin_hostile_app
s1=00000000-0000-4000-8000-0000000000b1
s2=00000000-0000-4000-8000-0000000000b2
s3=00000000-0000-4000-8000-0000000000b3
cleanup() {
	q -d postgres -c "SET client_min_messages = warning" \
		-c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "DROP DATABASE IF EXISTS $db2 WITH (FORCE)" \
		-c "DROP ROLE IF EXISTS $app" -c "DROP ROLE IF EXISTS $owner" >/dev/null 2>&1
}
trap cleanup EXIT
# the other roles log in with a password (pg_virtualenv's clusters want one over TCP)
qas() { local u=$1; shift; PGPASSWORD=ctxwin-hostile-t q -U "$u" "$@"; }
pwned() { q -d "$1" -c "SELECT count(*) || coalesce(': ' || string_agg(DISTINCT what, ', '), '') FROM public.pwned"; }

plan 13
want_msg=7
want_msg2=6
cleanup
q -d postgres -c "CREATE ROLE $owner LOGIN PASSWORD 'ctxwin-hostile-t'" \
	-c "CREATE ROLE $app LOGIN PASSWORD 'ctxwin-hostile-t'" \
	-c "CREATE DATABASE $db OWNER $owner" -c "CREATE DATABASE $db2" >/dev/null

# The database owner's preparations.
qas "$owner" -d "$db" -c "CREATE SCHEMA ctxwin" >/dev/null
n1=$(qas "$owner" -d "$db" -v schema=ctxwin -v full=false -f test/hostile/plant.sql 2>&1 | tail -1)
n2=$(qas "$owner" -d "$db" -v schema=public -v full=true -f test/hostile/plant.sql 2>&1 | tail -1)
diag "planted $n1 objects in ctxwin and $n2 in public"
[ "${n1:-0}" -gt 1000 ] && [ "${n2:-0}" -gt 20000 ]
ok $? "the owner planted thousands of hostile operators and functions in ctxwin and public"

out=$(PGOPTIONS="-c search_path=public,ctxwin,pg_catalog" q -d "$db" -c "CREATE EXTENSION ctxwin" 2>&1)
like "$out" 'schema "ctxwin" already exists' "CREATE EXTENSION refuses a schema ctxwin it did not create"
is "$(q -d "$db" -c "SELECT count(*) FROM pg_extension WHERE extname = 'ctxwin'")" "0" "... and installs nothing"
is "$(pwned "$db")" "0" "... and nothing planted ran"

qas "$owner" -d "$db" -c "SET client_min_messages = warning" -c "DROP SCHEMA ctxwin CASCADE" >/dev/null
out=$(PGOPTIONS="-c search_path=public,pg_catalog" q -d "$db" -c "CREATE EXTENSION ctxwin" 2>&1)
is "$out" "" "once the schema is gone, CREATE EXTENSION with public first on search_path succeeds"
is "$(q -d "$db" -c "SELECT nspowner::regrole FROM pg_namespace WHERE nspname = 'ctxwin'")" \
	"$(q -d "$db" -c "SELECT current_user")" "the schema ctxwin belongs to the role that created the extension"

# The README's grants for an application role, and a profile that
# summarizes early, of a model record_usage calibrates.
q -d "$db" >/dev/null <<SQL
GRANT USAGE ON SCHEMA ctxwin TO $app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO $app;
GRANT SELECT ON ctxwin.models, ctxwin.profiles, ctxwin.summaries, ctxwin.flush_events TO $app;
GRANT INSERT ON ctxwin.summaries, ctxwin.flush_events TO $app;
GRANT SELECT, INSERT ON ctxwin.usage_log TO $app;
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages, summary_strategy)
VALUES ('hostile', 'claude-haiku-4-5', 6, 2, 'extractive');
SQL

out=$(PGOPTIONS="-c search_path=public,pg_catalog" q -d "$db" -v sid=$s1 -v profile=hostile \
	-f test/hostile/workflow.sql 2>&1); rc=$?
ok $rc "every function runs for the superuser with public first on search_path"
[ $rc -eq 0 ] || diag "$out"
is "$(echo "$out" | head -1)" "2|2|2|4|hello world|$want_msg|$want_msg2|t" \
	"... and the token counts are right"
is "$(pwned "$db")" "0" "... and nothing planted ran"

out=$(PGOPTIONS="-c search_path=public,pg_catalog" qas "$app" -d "$db" -v sid=$s2 -v profile=hostile \
	-f test/hostile/workflow.sql 2>&1); rc=$?
ok $rc "every function runs for an application role with public first on search_path"
[ $rc -eq 0 ] || diag "$out"
is "$(pwned "$db")" "0" "... and nothing planted ran"

# Exact types: pg_catalog gets the operators and functions it lacks for
# mixed numeric types (a throwaway database; only a superuser can do this).
n3=$(q -d "$db2" -c "SET allow_system_table_mods = on" -v schema=pg_catalog -v full=false \
	-f test/hostile/plant.sql 2>&1 | tail -1)
diag "planted $n3 objects in pg_catalog"
out=$(q -d "$db2" -c "CREATE EXTENSION ctxwin" -c "INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages, summary_strategy) VALUES ('hostile', 'claude-haiku-4-5', 6, 2, 'extractive')" 2>&1 &&
	q -d "$db2" -v sid=$s3 -v profile=hostile -f test/hostile/workflow.sql 2>&1)
ok $? "with pg_catalog's missing numeric type pairs planted, every function still runs"
[ -z "$(echo "$out" | grep -E 'WARNING|ERROR')" ] || diag "$out"
is "$(pwned "$db2")" "0" "... and no call in ctxwin resolved to one of them (every call has exact types)"

done_testing

#!/usr/bin/env bash
# record_usage from several connections at once (pgbench), into shared
# sessions, between message inserts of the same sessions:
#  - the requests of a session are numbered 1, 2, 3 ... without a gap or a
#    duplicate (the session row's lock numbers them, as it numbers messages);
#  - every call commits: none deadlocks with a message insert, and none
#    fails on the model's calibration row, which every call updates;
#  - the calibration ends as its definition says (the newest 50 requests).
# Then, step by step: a transaction that holds a model's calibration row
# (it recorded usage and has not committed) does not make record_usage in
# another session of that model wait.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

export PGCLIENTENCODING=UTF8
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
db=ctxwin_usage_t
tmp=$(mktemp -d)
pgbench=$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)
cleanup() {
	[ -n "${holder:-}" ] && kill "$holder" 2>/dev/null
	q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

plan 10

q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
q -d "$db" >/dev/null <<'SQL'
CREATE EXTENSION ctxwin;
CREATE FUNCTION sess(i int) RETURNS uuid LANGUAGE sql IMMUTABLE
RETURN ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid;
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary) VALUES ('claude', 'claude-sonnet-4-5', NULL);
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
SELECT sess(i), 'claude', 'You answer for shop ' || i FROM generate_series(1, 6) i;
SQL

# a turn: the user's message, the answer's usage (with its window, counted
# 20 % higher by the provider), the answer; or the usage after the answer
cat >"$tmp/turn.sql" <<'EOF'
\set s random(1, 4)
BEGIN;
INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(:s), 'user', 'Where is order ' || :client_id || '?');
SELECT ctxwin.record_usage(sess(:s), '{"input_tokens": 200, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 0, "output_tokens": 9}', 1, 1000);
INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(:s), 'assistant', 'It ships today.');
COMMIT;
EOF
cat >"$tmp/after.sql" <<'EOF'
\set s random(1, 4)
BEGIN;
INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(:s), 'assistant', 'Anything else?');
SELECT ctxwin.record_usage(sess(:s), '{"input_tokens": 1200, "output_tokens": 4}', NULL, 1000);
COMMIT;
EOF
cat >"$tmp/read.sql" <<'EOF'
\set s random(1, 4)
SELECT requests, cost FROM ctxwin.usage WHERE session_id = sess(:s);
SELECT budget, budget_margin FROM ctxwin.context_status(sess(:s));
EOF

start=$(date +%s)
out=$("$pgbench" -n -c 6 -j 2 -t 300 -f "$tmp/turn.sql@6" -f "$tmp/after.sql@2" -f "$tmp/read.sql@2" "$db" 2>&1)
rc=$?
diag "pgbench: $(echo "$out" | grep -E '^(number of transactions actually processed|number of failed|tps)' | tr '\n' ';') $(( $(date +%s) - start )) s"
ok $rc "pgbench ran 6 clients x 300 transactions without an error"
[ $rc -eq 0 ] || echo "$out" | grep -iE 'error|abort' | head -5 | sed 's/^/#   /'
is "$(echo "$out" | sed -n 's/^number of transactions actually processed: //p')" "1800/1800" "every transaction committed"

is "$(q -d "$db" -c "SELECT count(*) FROM (SELECT session_id FROM ctxwin.usage_log GROUP BY session_id
                      HAVING count(*) <> max(id) OR count(DISTINCT id) <> count(*) OR min(id) <> 1) x")" "0" \
	"every session's requests are numbered 1..n, without a gap or a duplicate"
n=$(q -d "$db" -c "SELECT count(*) FROM ctxwin.usage_log")
ok $([ "$n" -gt 1000 ] && echo 0 || echo 1) "(the run recorded $n requests in 4 sessions)"
is "$(q -d "$db" -c "SELECT format('%s %s %s %s', requests, provider_tokens, counted_tokens, margin) FROM ctxwin.calibration")" \
	"50 60000 50000 1.2" "the calibration is that of the newest 50 requests"

# A transaction holds the calibration row of claude-sonnet-4-5 ...
q -d "$db" -c "BEGIN" \
	-c "SELECT ctxwin.record_usage(sess(5), '{\"input_tokens\": 1500, \"output_tokens\": 1}', NULL, 1000)" \
	-c "SELECT pg_sleep(30)" -c "COMMIT" >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1 50); do
	[ "$(q -d "$db" -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db' AND query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()")" = 1 ] && break
	sleep 0.1
done
is "$(q -d "$db" -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db' AND query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()")" "1" \
	"(a transaction recorded usage of the model and sleeps, holding its calibration row)"
# ... and another records usage of the same model, with no time to wait
got=$(q -d "$db" -c "SET lock_timeout = '500ms'" \
	-c "SELECT ctxwin.record_usage(sess(6), '{\"input_tokens\": 1100, \"output_tokens\": 1}', NULL, 1000)" 2>&1)
is "$got" "1" "record_usage does not wait for another transaction's update of the model's calibration"
is "$(q -d "$db" -c "SELECT count(*) FROM ctxwin.usage_log WHERE session_id = sess(6)")" "1" "... and its request is recorded"
is "$(q -d "$db" -c "SELECT margin FROM ctxwin.calibration")" "1.2" \
	"... and leaves the calibration to the transaction that holds it"
q -d postgres -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE datname = '$db' AND query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()" >/dev/null
wait "$holder" 2>/dev/null
holder=
is "$(q -d "$db" -c "SELECT count(*) FROM ctxwin.usage_log WHERE session_id = sess(5)")" "0" \
	"(the holder was cancelled: its request is not recorded)"

done_testing

#!/usr/bin/env bash
# A stable window is a function of the rows, not of the connection that
# asks: two app servers (here two connections, one with other session
# settings) that insert a chat's turns in turn and each call build_context
# after every insert get the same bytes, also across the window's jumps.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

export PGCLIENTENCODING=UTF8
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
db=ctxwin_stable_servers_t
s=00000000-0000-4000-8000-0000000000c1
cleanup() { q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1; }
trap cleanup EXIT

plan 4
cleanup
q -d postgres -c "CREATE DATABASE $db" >/dev/null
q -d "$db" >/dev/null <<SQL
CREATE EXTENSION ctxwin;
INSERT INTO ctxwin.profiles (name, model, context_window, response_reserve, max_messages_before_summary,
                             max_tokens_before_summary, trigger_ratio)
VALUES ('two', 'gpt-4o', 900, 100, NULL, NULL, NULL);
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES ('$s', 'two', 'You help two servers.');
SQL
# one turn: a message from server A or B, then each asks for the window
turn() {
	local who=$1 i=$2 opts=$3
	PGOPTIONS="$opts" q -d "$db" -c "INSERT INTO ctxwin.messages (session_id, role, content)
		VALUES ('$s', CASE WHEN $i % 2 = 1 THEN 'user' ELSE 'assistant' END,
		        'Turn $i from server $who: ' || repeat('the order ships on Tuesday ', 1 + $i % 7))"
}
other="-c search_path=ctxwin,public -c extra_float_digits=3 -c DateStyle=SQL,DMY -c TimeZone=Asia/Tokyo -c lc_numeric=C"
differ=0
starts=""
for i in $(seq 1 80); do
	if [ $((i % 2)) = 1 ]; then turn A "$i" ""; else turn B "$i" "$other"; fi
	a=$(q -d "$db" -c "SELECT ctxwin.build_context('$s')::text || ctxwin.build_context('$s', format => 'anthropic')::text")
	b=$(PGOPTIONS="$other" q -d "$db" -c "SELECT ctxwin.build_context('$s')::text || ctxwin.build_context('$s', format => 'anthropic')::text")
	[ "$a" = "$b" ] || differ=$((differ + 1))
	starts="$starts $(q -d "$db" -c "SELECT ctxwin._window('$s', NULL) ->> 'first_id'")"
done
is "$differ" "0" "after each of 80 inserts, from two connections in turn, both get the same bytes in both formats"
jumps=$(echo "$starts" | tr ' ' '\n' | grep -v '^$' | uniq | wc -l)
ok $([ "$jumps" -ge 4 ] && echo 0 || echo 1) "the window jumped meanwhile ($((jumps - 1)) times)"
ok $([ "$jumps" -le 30 ] && echo 0 || echo 1) "and kept its start in between (not every turn)"
is "$(q -d "$db" -c "SELECT (ctxwin._window('$s', NULL) ->> 'tokens')::int <= 800")" "t" "within the budget"
done_testing

#!/usr/bin/env bash
# ctxwin's read functions on a hot standby: build_context, context_status,
# context_report, messages_after and the token counters run on a streaming
# replica (where no function may write, take a row lock or need a new xid)
# and answer exactly as on the primary, for data that arrived both by the
# base backup and by streaming; writes are refused there as on any standby.
# Builds its own primary and standby in a temporary directory (Unix sockets
# only, so the ports cannot clash); as root it runs the servers as postgres.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

export PGCLIENTENCODING=UTF8
bin=$(pg_config --bindir 2>/dev/null)
[ -x "$bin/initdb" ] || bin=/usr/lib/postgresql/15/bin
p1=55432
p2=55433
dir=$(mktemp -d /tmp/ctxwin_standby.XXXXXX)
db=ctxwin_standby_t
# the servers of this test only, whatever the environment points at
unset PGDATABASE PGPASSWORD PGSERVICE PGSERVICEFILE PGOPTIONS
export PGHOST=$dir PGUSER=postgres

as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		(cd "$dir" && runuser -u postgres -- "$@")
	else
		(cd "$dir" && "$@")
	fi
}
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
cleanup() {
	for d in standby primary; do
		[ -f "$dir/$d/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$dir/$d" -m immediate -w stop >/dev/null 2>&1
	done
	rm -rf "$dir"
}
trap cleanup EXIT
fail_setup() {
	echo "Bail out! $1"
	for f in "$dir"/*.log; do [ -f "$f" ] && tail -5 "$f" | sed 's/^/# /'; done
	exit 1
}
on1() { psql -X -q -A -t -v ON_ERROR_STOP=1 -p $p1 -d "$db" "$@"; }
on2() { psql -X -q -A -t -v ON_ERROR_STOP=1 -p $p2 -d "$db" "$@"; }

plan 16

# the primary
as_pg "$bin/initdb" -D "$dir/primary" -A trust -U postgres -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
	fail_setup "initdb failed"
cat >>"$dir/primary/postgresql.conf" <<EOF
port = $p1
listen_addresses = ''
unix_socket_directories = '$dir'
fsync = off
shared_buffers = 16MB
wal_level = replica
max_wal_senders = 4
hot_standby = on
EOF
as_pg "$bin/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w start >/dev/null || fail_setup "the primary did not start"

psql -X -q -p $p1 -d postgres -c "CREATE DATABASE $db" >/dev/null || fail_setup "CREATE DATABASE failed"
on1 >/dev/null <<'SQL' || fail_setup "the fixture failed"
CREATE EXTENSION ctxwin;
INSERT INTO ctxwin.profiles (name, model, summary_placement) VALUES ('replica', 'gpt-4o', 'message');
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
  ('00000000-0000-4000-8000-000000000001', 'replica', 'You answer questions about orders.'),
  ('00000000-0000-4000-8000-000000000002', 'default', NULL);
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '00000000-0000-4000-8000-000000000001', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
       format('Turn %s about order #%s: Grüße, 日本語, %s', i, 4000 + i, repeat('details ', i))
FROM generate_series(1, 10) i;
INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES
  ('00000000-0000-4000-8000-000000000001', 'assistant',
   '[{"id": "call_1", "type": "function", "function": {"name": "order_status", "arguments": "{\"order\": 4011}"}}]');
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES
  ('00000000-0000-4000-8000-000000000001', 'tool', '{"order": 4011, "status": "shipped"}', 'call_1');
UPDATE ctxwin.sessions SET conversation_summary = 'The user asked about orders #4001 to #4004.', summary_through_id = 4
WHERE id = '00000000-0000-4000-8000-000000000001';
SQL

# the standby, from a base backup, streaming from the primary
as_pg "$bin/pg_basebackup" -h "$dir" -p $p1 -U postgres -D "$dir/standby" -R -X stream -c fast --no-sync \
	>"$dir/basebackup.log" 2>&1 || fail_setup "pg_basebackup failed"
echo "port = $p2" >>"$dir/standby/postgresql.conf"
as_pg "$bin/pg_ctl" -D "$dir/standby" -l "$dir/standby.log" -w start >/dev/null || fail_setup "the standby did not start"

# more on the primary, which reaches the standby by streaming replication
on1 >/dev/null <<'SQL' || fail_setup "the streamed changes failed"
INSERT INTO ctxwin.messages (session_id, role, content) VALUES
  ('00000000-0000-4000-8000-000000000001', 'assistant', 'Order #4011 has shipped.'),
  ('00000000-0000-4000-8000-000000000001', 'user', 'Thanks! Now read this log: ' || repeat('ERROR at line 42: null pointer; ', 400)),
  ('00000000-0000-4000-8000-000000000002', 'user', 'Hello from the second session.');
UPDATE ctxwin.sessions SET conversation_summary = 'The user asked about orders #4001 to #4008.', summary_through_id = 8
WHERE id = '00000000-0000-4000-8000-000000000001';
SQL
lsn=$(on1 -c "SELECT pg_current_wal_lsn()")
replayed=f
for _ in $(seq 1 300); do
	replayed=$(on2 -c "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn" 2>/dev/null)
	[ "$replayed" = t ] && break
	sleep 0.1
done

is "$(on2 -c "SELECT pg_is_in_recovery()")" "t" "the standby is in recovery (a hot standby)"
is "$(on2 -c "SELECT status FROM pg_stat_wal_receiver")" "streaming" "the standby streams from the primary"
is "$replayed" "t" "the standby replayed the primary's WAL"
is "$(on2 -c "SELECT string_agg(message_count || '/' || summary_through_id, ' ' ORDER BY id) FROM ctxwin.sessions")" \
	"14/8 1/0" "the standby has the streamed messages and summary"

# Every read function answers on the standby exactly as on the primary.
s1="'00000000-0000-4000-8000-000000000001'"
s2="'00000000-0000-4000-8000-000000000002'"
same() {
	# same SQL DESCRIPTION: the query runs without error on the standby and
	# gives the primary's answer
	local want got
	want=$(on1 -c "$1" 2>/dev/null)
	got=$(on2 -c "$1" 2>&1)
	if [ -n "$want" ] && [ "$got" = "$want" ]; then ok 0 "$2"; else
		ok 1 "$2"; echo "#   primary: '${want:0:300}'"; echo "#   standby: '${got:0:300}'"; fi
}
same "SELECT ctxwin.build_context($s1)" "build_context on the standby = on the primary"
same "SELECT ctxwin.build_context($s1, NULL, 'anthropic'), ctxwin.build_context($s2, 500, 'anthropic')" \
	"build_context in anthropic format on the standby = on the primary"
# a budget smaller than the newest message: it is cut in the middle
cut=$(on2 -c "SELECT ctxwin.build_context($s1, 600)")
like "$cut" "tokens omitted ...]" "on the standby a small budget cuts the newest message"
same "SELECT ctxwin.build_context($s1, 600)" "the cut window on the standby = on the primary"
is "$(on2 -c "SELECT ctxwin.messages_tokens(ctxwin.build_context($s1, 600), 'o200k_base') + 3 <= 600")" "t" \
	"the cut window fits its budget"
same "SELECT to_jsonb(c) - 'summary_age' FROM ctxwin.context_status($s1) c" "context_status on the standby = on the primary"
same "SELECT regexp_replace(ctxwin.context_report($s1), 'updated .* ago', 'updated ... ago')" \
	"context_report on the standby = on the primary"
same "SELECT jsonb_agg(to_jsonb(m) ORDER BY m.id) FROM ctxwin.messages_after($s1, 6) m" \
	"messages_after on the standby = on the primary"
same "SELECT ctxwin.count_tokens('Grüße aus Köln, 日本語', 'o200k_base'), ctxwin.count_tokens('hello world'),
             ctxwin.tokenize('hello world'), ctxwin.detokenize(ctxwin.tokenize('Grüße', 'o200k_base'), 'o200k_base'),
             ctxwin.count_message_tokens('{\"role\": \"user\", \"content\": \"hi\"}', 'o200k_base')" \
	"the token counters on the standby = on the primary"
is "$(on2 -c "SELECT ctxwin.count_tokens('hello world')")" "2" "count_tokens('hello world') is 2 on the standby"

# Writes are refused on the standby.
out=$(on2 -c "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ($s1, 'user', 'on the standby')" 2>&1)
like "$out" "cannot execute INSERT in a read-only transaction" "an INSERT into ctxwin.messages fails on the standby"
is "$(on1 -c "SELECT message_count FROM ctxwin.sessions WHERE id = $s1")" "14" "and the primary is unchanged"

done_testing

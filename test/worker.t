#!/usr/bin/env bash
# The background worker, on a cluster of its own with ctxwin in
# shared_preload_libraries, over real loopback HTTP to test/mockllm.py:
# automatic compaction woken at commit (not by polling), two databases at
# once, a database that does not exist or lacks the extension, faults at a
# 20 % rate, Retry-After, the circuit breaker, SIGHUP, SIGTERM with a hanging
# LLM, kill -9 of the worker and a server restart mid-run (nothing lost,
# nothing summarized twice), DROP DATABASE and DROP EXTENSION not blocked,
# no two summarizers of one session, and the status view.
# Builds its own cluster in a temporary directory (Unix socket only); as root
# it runs the server as postgres.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

export PGCLIENTENCODING=UTF8
bin=$(pg_config --bindir 2>/dev/null)
[ -x "$bin/initdb" ] || bin=/usr/lib/postgresql/15/bin
port=55441
dir=$(mktemp -d /tmp/ctxwin_worker.XXXXXX)
unset PGDATABASE PGPASSWORD PGSERVICE PGSERVICEFILE PGOPTIONS
export PGHOST=$dir PGPORT=$port PGUSER=postgres
key="sk-ctxwin-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"

as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		(cd "$dir" && runuser -u postgres -- "$@")
	else
		(cd "$dir" && "$@")
	fi
}
chmod 755 "$dir"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
mock=""
cleanup() {
	[ -n "$mock" ] && kill "$mock" 2>/dev/null && wait "$mock" 2>/dev/null
	[ -f "$dir/data/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
	rm -rf "$dir"
}
trap cleanup EXIT
fail_setup() {
	echo "Bail out! $1"
	[ -f "$dir/server.log" ] && tail -20 "$dir/server.log" | sed 's/^/# /'
	exit 1
}

# q DB SQL: one statement, unaligned, errors included
q() { local d=$1; shift; psql -X -q -A -t -d "$d" -c "$*" 2>&1; }
# wait_for DB SQL SECONDS: until SQL returns t; 0 if it did
wait_for() {
	local i n=$(($3 * 10))
	for ((i = 0; i < n; i++)); do
		[ "$(q "$1" "$2")" = "t" ] && return 0
		sleep 0.1
	done
	return 1
}
set_conf() {
	# set_conf name value ...: ALTER SYSTEM and reload
	while [ $# -gt 1 ]; do
		q postgres "ALTER SYSTEM SET $1 = '$2'" >/dev/null
		shift 2
	done
	q postgres "SELECT pg_reload_conf()" >/dev/null
	sleep 0.5
}
worker_pid() { q postgres "SELECT pid FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = '$1'"; }
nreq() { wc -l <"$dir/requests.jsonl" | tr -d ' '; }
# sessions DB N [PROFILE]: N new sessions, printed; then fill DB: 31 messages
# each (N = 30 fires), in one transaction
sessions() {
	q "$1" "INSERT INTO ctxwin.sessions (profile) SELECT '${3:-default}' FROM generate_series(1, $2) RETURNING id"
}
fill() {
	# fill DB WHERE: 31 messages to each session matching WHERE
	q "$1" "INSERT INTO ctxwin.messages (session_id, role, content)
	        SELECT s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	               'turn ' || g || ': deploy service billing-' || g || ' to /srv/app/v' || g || ' and check E' || (4000 + g)
	        FROM ctxwin.sessions s, generate_series(1, 31) g WHERE $2 ORDER BY g, s.id" >/dev/null
}

# fillm DB ID: 31 messages to one session, each naming it (so the mock's
# log tells whose request a prompt is)
fillm() {
	q "$1" "INSERT INTO ctxwin.messages (session_id, role, content)
	        SELECT '$2', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	               'session $2, turn ' || g || ': deploy billing-' || g || ' and check E' || (4000 + g)
	        FROM generate_series(1, 31) g" >/dev/null
}
# the number of requests after the first N whose prompt names one of the ids
reqs_for() {
	python3 - "$dir/requests.jsonl" "$@" <<'PY'
import json, sys
log, start, ids = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
n = 0
for l in list(open(log, encoding="utf-8"))[start:]:
    p = json.loads(l).get("prompt") or ""
    n += any(i in p for i in ids)
print(n)
PY
}
# pause_worker / resume_worker: take w1 out of ctxwin.databases (the launcher
# stops its worker) and put it back (a new worker sweeps the queue at start)
pause_worker() {
	set_conf ctxwin.databases nodb
	wait_for postgres "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = 'w1'" 10
}
resume_worker() { set_conf ctxwin.databases "w1, nodb"; }
# queue12: with the worker paused, 12 new sessions queued one after the
# other (distinct compaction_queued_at), ids printed oldest first
queue12() {
	local i s
	for i in $(seq 1 12); do
		s=$(sessions w1 1)
		fillm w1 "$s"
		echo "$s"
	done
}
# ticks PID: user + system CPU time of a process, in clock ticks
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# jobmem PID: the bytes of the worker's "ctxwin job" memory contexts (the
# job and its attempt), as pg_log_backend_memory_contexts logs them now
jobmem() {
	local from
	from=$(wc -l <"$dir/server.log")
	q postgres "SELECT pg_log_backend_memory_contexts($1)" >/dev/null
	sleep 0.5
	tail -n +"$((from + 1))" "$dir/server.log" | grep "\[$1\]" |
		sed -n 's/.*level: [0-9]*; ctxwin job[^:]*: \([0-9]*\) total.*/\1/p' | awk '{ s += $1 } END { print s + 0 }'
}

plan 85

# --- the mock LLM and the cluster --------------------------------------------
printf '%s\n' "$key" >"$dir/key"
chmod 644 "$dir/key"
: >"$dir/requests.jsonl"
chmod 666 "$dir/requests.jsonl"
python3 test/mockllm.py --port 0 --key "$key" --log "$dir/requests.jsonl" --port-file "$dir/mockport" \
	--slow 60 --seed 7 >/dev/null 2>&1 &
mock=$!
for _ in $(seq 1 50); do [ -s "$dir/mockport" ] && break; sleep 0.1; done
[ -s "$dir/mockport" ] || fail_setup "the mock LLM server did not start"
mport=$(cat "$dir/mockport")

as_pg "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
	fail_setup "initdb failed"
cat >>"$dir/data/postgresql.conf" <<EOF
port = $port
listen_addresses = ''
unix_socket_directories = '$dir'
fsync = off
shared_buffers = 32MB
shared_preload_libraries = 'ctxwin'
ctxwin.databases = 'w1, w2, nodb, template0'
ctxwin.naptime_ms = 60000
ctxwin.llm_provider = 'openai'
ctxwin.llm_base_url = 'http://127.0.0.1:$mport/v1'
ctxwin.llm_api_key_file = '$dir/key'
ctxwin.llm_model = 'mock'
ctxwin.llm_timeout_ms = 60000
EOF
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null || fail_setup "the server did not start"
for d in w1 w2; do q postgres "CREATE DATABASE $d" >/dev/null || fail_setup "CREATE DATABASE $d failed"; done
q w1 "CREATE EXTENSION ctxwin" >/dev/null || fail_setup "CREATE EXTENSION failed"

# --- start-up -----------------------------------------------------------------
wait_for postgres "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker'" 10
ok $? "the launcher starts a worker for each existing database of ctxwin.databases"
is "$(q postgres "SELECT string_agg(coalesce(datname, '-') || ':' || application_name, ',' ORDER BY backend_type, datname)
                 FROM pg_stat_activity WHERE backend_type LIKE 'ctxwin%'")" \
	"-:ctxwin launcher,w1:ctxwin worker,w2:ctxwin worker" "launcher and workers show in pg_stat_activity with clear names"
st="SELECT string_agg(database || ':' || state, ',' ORDER BY database) FROM ctxwin.worker_status"
want="nodb:no such database,template0:not accepting connections,w1:idle,w2:no extension"
wait_for w1 "$st = '$want'" 10
is "$(q w1 "$st")" "$want" "worker_status: w1 idle, w2 without the extension, nodb does not exist, template0 takes no connections"
sleep 2
is "$(q w1 "SELECT string_agg(restarts::text, ',' ORDER BY database) FROM ctxwin.worker_status")" "0,0,0,0" \
	"no crash loop: neither the missing database, the closed one nor the missing extension restarts anything"
is "$(grep -c 'FATAL' "$dir/server.log")" "0" "and the server log holds no FATAL"

# --- woken at commit, not by polling -----------------------------------------
w1pid=$(worker_pid w1)
x0=$(q postgres "SELECT xact_commit FROM pg_stat_database WHERE datname = 'w1'")
t0=$(awk '{print $14 + $15}' "/proc/$w1pid/stat")
sleep 3
x1=$(q postgres "SELECT xact_commit FROM pg_stat_database WHERE datname = 'w1'")
t1=$(awk '{print $14 + $15}' "/proc/$w1pid/stat")
ok $((x1 - x0 <= 2 ? 0 : 1)) "an idle worker runs no transactions (commits in w1 over 3 s: $((x1 - x0)), the check's own included)"
ok $((t1 - t0 <= 1 ? 0 : 1)) "and uses no CPU (clock ticks over 3 s: $((t1 - t0)))"

s1=$(sessions w1 1)
q w1 "BEGIN; INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$s1', 'user', 'hello ' || g FROM generate_series(1, 31) g; ROLLBACK" >/dev/null
sleep 1
is "$(nreq)" "0" "a rolled-back transaction that queued a session wakes nothing and sends nothing"
start=$(date +%s%N)
fill w1 "id = '$s1'"
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s1'" 10
ok $? "a session over its trigger is summarized without any call (naptime is 60 s: the commit woke the worker)"
ms=$((($(date +%s%N) - start) / 1000000))
ok $((ms < 5000 ? 0 : 1)) "within ${ms} ms of the commit"
is "$(q w1 "SELECT version || ':' || from_id || '-' || through_id || ':' || strategy || ':' || (model IS NOT NULL) || ':' || (usage IS NOT NULL)
            FROM ctxwin.summaries WHERE session_id = '$s1'")" "1:1-25:llm:true:true" \
	"one summaries row: version 1 of messages 1-25 by the LLM, with model and usage"
is "$(q w1 "SELECT compaction_queued_at IS NULL AND compaction_failures = 0 AND last_error IS NULL FROM ctxwin.sessions WHERE id = '$s1'")" "t" \
	"the session left the queue"
is "$(q w1 "SELECT count(*) FROM ctxwin.flush_events WHERE session_id = '$s1' AND from_id = 1 AND through_id = 25")" "1" \
	"and its flush event is written"

# --- two databases at once, and CREATE EXTENSION noticed -----------------------
q w2 "CREATE EXTENSION ctxwin" >/dev/null
wait_for w2 "SELECT state = 'idle' FROM ctxwin.worker_status WHERE database = 'w2'" 5
ok $? "after CREATE EXTENSION in w2 its worker serves it at once"
sessions w1 20 >/dev/null
sessions w2 20 >/dev/null
set_conf ctxwin.llm_model slow-300
fill w1 "summary_through_id = 0 AND message_count = 0" &
bg=$!
fill w2 "message_count = 0"
wait $bg
wait_for w1 "SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL" 20 &&
	wait_for w2 "SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL" 20
ok $? "both databases' sessions are compacted at once (LLM answering in 300 ms)"
is "$(q w1 "SELECT count(*) FROM ctxwin.summaries")|$(q w2 "SELECT count(*) FROM ctxwin.summaries")" "21|20" \
	"one summary per session in each database"
is "$(python3 -c "
import json
print(sorted({json.loads(l)['model'] for l in open('$dir/requests.jsonl')}))")" "['mock', 'slow-300']" \
	"SIGHUP: the worker sends the model set by ALTER SYSTEM and reload"
inflight_max=$(q w1 "SELECT max(in_flight) FROM ctxwin.worker_status")
like "$(q w1 "SELECT done >= 21 AND failed = 0 AND requests >= 21 AND latency_p50_ms >= 250 AND lag_p50_ms IS NOT NULL
              FROM ctxwin.worker_status WHERE database = 'w1'")" "t" \
	"worker_status counts requests and summaries and reports latency percentiles"

# --- a changed profile queues what it puts over a trigger -----------------------
q w1 "INSERT INTO ctxwin.profiles (name, max_messages_before_summary) VALUES ('lazy', 200)" >/dev/null
s=$(sessions w1 1 lazy)
fill w1 "id = '$s'"
sleep 0.5
is "$(q w1 "SELECT compaction_queued_at IS NULL AND summary_through_id = 0 FROM ctxwin.sessions WHERE id = '$s'")" "t" \
	"31 messages under a profile that fires at 200: not queued"
q w1 "UPDATE ctxwin.profiles SET max_messages_before_summary = 20 WHERE name = 'lazy'" >/dev/null
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'" 10
ok $? "lowering the profile's trigger queues the session and wakes the worker, which compacts it"

# --- the Anthropic wire format, and the hybrid strategy --------------------------
set_conf ctxwin.llm_provider anthropic ctxwin.llm_base_url "http://127.0.0.1:$mport"
before=$(nreq)
s=$(sessions w1 1)
fill w1 "id = '$s'"
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'" 10
ok $? "with llm_provider = anthropic the worker compacts through the Messages API"
is "$(python3 -c "
import json
L = [json.loads(l) for l in open('$dir/requests.jsonl')][$before:]
print(','.join(sorted({e['path'] + ':' + e['headers'].get('anthropic-version', '-') + ':' + e['auth'] for e in L})))")" \
	"/v1/messages:2023-06-01:ok" "its requests went to /v1/messages with anthropic-version and the key"
q w1 "INSERT INTO ctxwin.profiles (name, summary_strategy) VALUES ('hy', 'hybrid')" >/dev/null
s=$(sessions w1 1 hy)
fill w1 "id = '$s'"
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'" 10
like "$(q w1 "SELECT strategy || ' ' || left(content, 40) FROM ctxwin.summaries WHERE session_id = '$s'")" "hybrid Facts: " \
	"a hybrid profile's summary made by the worker starts with the facts found without the LLM"
set_conf ctxwin.llm_provider openai ctxwin.llm_base_url "http://127.0.0.1:$mport/v1"

# --- who sees what ----------------------------------------------------------------
q postgres "CREATE ROLE ctxwin_worker_t_user LOGIN" >/dev/null
q w1 "GRANT USAGE ON SCHEMA ctxwin TO ctxwin_worker_t_user" >/dev/null
is "$(psql -X -A -t -U ctxwin_worker_t_user -d w1 -c "SELECT string_agg(database, ',') FROM ctxwin.worker_status" 2>&1)" "w1" \
	"a plain role sees its own database's row of worker_status only"
is "$(q w1 "SELECT count(*) FROM ctxwin.worker_status")" "4" "a superuser sees every database's"

# --- faults at a 20 % rate ----------------------------------------------------
set_conf ctxwin.llm_model flaky-20 ctxwin.llm_max_retries 4
before=$(nreq)
sessions w1 100 >/dev/null
fill w1 "message_count = 0"
wait_for w1 "SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL" 60
ok $? "with 20 % of the requests failing (500, 503, 429, 502 HTML, closed, malformed, half a body) every session is compacted"
faults=$(python3 -c "
import json
L = [json.loads(l) for l in open('$dir/requests.jsonl')][$before:]
print(sum(1 for e in L if e.get('fault')))")
ok $((faults >= 5 ? 0 : 1)) "the mock injected $faults faults in $(($(nreq) - before)) requests"
n=$(q w1 "SELECT count(*) FROM ctxwin.sessions")
is "$(q w1 "SELECT count(*) || ':' || count(DISTINCT session_id) || ':' || max(version) FROM ctxwin.summaries")" "$n:$n:1" \
	"each of the $n sessions has exactly one summary (version 1): none lost, none twice"
is "$(q w1 "SELECT count(*) FROM ctxwin.flush_events")" "$n" "and one flush event each"
is "$(q w1 "SELECT retries > 0 FROM ctxwin.worker_status WHERE database = 'w1'")" "t" "worker_status counts the retries"

# --- Retry-After --------------------------------------------------------------
set_conf ctxwin.llm_model fault-429 ctxwin.llm_max_retries 0
s=$(sessions w1 1)
start=$(date +%s%N)
fill w1 "id = '$s'"
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'" 10
ok $? "a 429 with Retry-After is waited out, not failed (even with llm_max_retries = 0)"
ms=$((($(date +%s%N) - start) / 1000000))
ok $((ms >= 900 ? 0 : 1)) "after the 1 s it asked for (${ms} ms)"
is "$(q w1 "SELECT compaction_failures FROM ctxwin.sessions WHERE id = '$s'")|$(q w1 "SELECT rate_limited > 0 FROM ctxwin.worker_status WHERE database = 'w1'")" \
	"0|t" "no failure charged; worker_status counts the rate-limited answer"

# --- the circuit breaker ------------------------------------------------------
set_conf ctxwin.llm_model fault-400
s=$(sessions w1 1)
before=$(nreq)
fill w1 "id = '$s'"
wait_for w1 "SELECT compaction_failures = 3 FROM ctxwin.sessions WHERE id = '$s'" 15
ok $? "a refused request is a failed compaction, retried after 1 s and 4 s, three in all"
like "$(q w1 "SELECT last_error FROM ctxwin.sessions WHERE id = '$s'")" "LLM endpoint refused the summary request: HTTP 400" \
	"the session's last_error says why"
sleep 2
is "$(($(nreq) - before))" "3" "then the breaker holds: no more requests for it"
is "$(q w1 "SELECT held_back FROM ctxwin.worker_status WHERE database = 'w1'")|$(q w1 "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$s'")" \
	"1|t" "it stays queued, counted as held back"
like "$(q w1 "SELECT last_error_session || ' ' || last_error FROM ctxwin.worker_status WHERE database = 'w1'")" "$s LLM endpoint refused" \
	"worker_status shows the last error and its session"
set_conf ctxwin.llm_model mock
q w1 "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'one more')" >/dev/null
wait_for w1 "SELECT summary_through_id > 0 AND compaction_failures = 0 AND last_error IS NULL FROM ctxwin.sessions WHERE id = '$s'" 10
ok $? "a new message resets the breaker and the session is compacted"

# --- no two summarizers of one session ----------------------------------------
set_conf ctxwin.llm_model slow-3000
s=$(sessions w1 1)
fill w1 "id = '$s'"
wait_for w1 "SELECT in_flight = 1 FROM ctxwin.worker_status WHERE database = 'w1'" 5
like "$(q w1 "SELECT ctxwin.summarize_session('$s', true)")" "is being summarized by another backend" \
	"summarize_session refuses a session the worker is summarizing"
is "$(q w1 "SELECT ctxwin.compact()")" "0" "compact() skips it"
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'" 10
ok $? "and the worker's summary lands"
is "$(q w1 "SELECT count(*) FROM ctxwin.summaries WHERE session_id = '$s'")" "1" "once"

# --- an application transaction holding a session's row ----------------------
set_conf ctxwin.llm_model slow-1000
a=$(sessions w1 1)
b=$(sessions w1 1)
before=$(nreq)
fillm w1 "$a"
wait_for w1 "SELECT in_flight = 1 FROM ctxwin.worker_status WHERE database = 'w1'" 5
# while the request for a is in flight, the app holds a's row for 6 s
q w1 "BEGIN; INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$a', 'user', 'slow app'); SELECT pg_sleep(6); COMMIT" >/dev/null &
bg=$!
sleep 0.3
start=$(date +%s%N)
fillm w1 "$b"
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$b'" 10
ms=$((($(date +%s%N) - start) / 1000000))
ok $((ms < 4500 ? 0 : 1)) "another session is compacted meanwhile in ${ms} ms: the worker does not wait out the app's transaction"
wait $bg
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$a'" 15
ok $? "the held session is compacted once the app commits"
is "$(q w1 "SELECT compaction_failures || ':' || (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id) FROM ctxwin.sessions s WHERE id = '$a'")" "0:1" \
	"with no failure charged, and one summary"
is "$(reqs_for "$before" "$a")" "1" \
	"and one LLM request: its answer waited for the row (backing off), no new request was paid for"

# --- SIGTERM with a hanging LLM -----------------------------------------------
set_conf ctxwin.llm_model fault-timeout
sessions w1 5 >/dev/null
fill w1 "message_count = 0"
wait_for w1 "SELECT in_flight = 5 FROM ctxwin.worker_status WHERE database = 'w1'" 5
ok $? "five requests hang in flight"
pid=$(worker_pid w1)
start=$(date +%s%N)
kill -TERM "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
ms=$((($(date +%s%N) - start) / 1000000))
kill -0 "$pid" 2>/dev/null
ok $((($? != 0 && ms < 3000) ? 0 : 1)) "SIGTERM stops the worker with requests in flight in ${ms} ms"
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = 'w1' AND pid <> $pid" 10
ok $? "the launcher starts it again"
is "$(q w1 "SELECT count(*) FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL AND summary_through_id = 0")" "5" \
	"the five sessions are still queued, unsummarized"
pid=$(worker_pid w1)
start=$(date +%s%N)
kill -TERM "$pid"
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = 'w1' AND pid <> $pid" 10
ms=$((($(date +%s%N) - start) / 1000000))
ok $((ms >= 1800 ? 0 : 1)) "stopped again soon after its start, it is restarted after a longer backoff (${ms} ms)"
is "$(q w1 "SELECT restarts FROM ctxwin.worker_status WHERE database = 'w1'")" "2" "worker_status counts the restarts"

# --- kill -9 and a server restart mid-run lose nothing --------------------------
set_conf ctxwin.llm_model slow-1500
wait_for w1 "SELECT in_flight = 5 FROM ctxwin.worker_status WHERE database = 'w1'" 10
sessions w1 30 >/dev/null
fill w1 "message_count = 0"
wait_for w1 "SELECT in_flight >= 20 FROM ctxwin.worker_status WHERE database = 'w1'" 10
kill -KILL "$(worker_pid w1)"
wait_for postgres "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker'" 30
ok $? "after kill -9 of the worker the server recovers and the workers are back"
sessions w1 30 >/dev/null
fill w1 "message_count = 0"
sleep 1
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w restart >/dev/null
ok $? "a server restart in the middle of the run"
wait_for w1 "SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL" 60
ok $? "afterwards every queued session is compacted"
n=$(q w1 "SELECT count(*) FROM ctxwin.sessions")
is "$(q w1 "SELECT count(*) || ':' || count(DISTINCT session_id) || ':' || max(version) FROM ctxwin.summaries")|$(q w1 "SELECT count(*) FROM ctxwin.sessions WHERE summary_through_id = 0")" \
	"$n:$n:1|0" "no summary lost, none made twice (one version-1 summary for each of the $n sessions)"
is "$(q w1 "SELECT count(*) FROM ctxwin.sessions s WHERE summary_version <> (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id)")" "0" \
	"every session's summary_version matches its summaries rows"

# --- DROP EXTENSION and DROP DATABASE are not blocked ---------------------------
set_conf ctxwin.llm_model slow-3000
sessions w1 5 >/dev/null
fill w1 "message_count = 0"
wait_for w2 "SELECT in_flight = 5 FROM ctxwin.worker_status WHERE database = 'w1'" 5
start=$(date +%s%N)
q w1 "DROP EXTENSION ctxwin CASCADE" >/dev/null
ok $? "DROP EXTENSION with the worker running and 5 requests in flight"
ms=$((($(date +%s%N) - start) / 1000000))
ok $((ms < 2000 ? 0 : 1)) "not blocked by it (${ms} ms)"
wait_for w2 "SELECT state = 'no extension' AND in_flight = 0 FROM ctxwin.worker_status WHERE database = 'w1'" 5
ok $? "the worker drops what it had in flight and waits for the extension"
set_conf ctxwin.llm_model mock
q w1 "CREATE EXTENSION ctxwin" >/dev/null
s=$(sessions w1 1)
fill w1 "id = '$s'"
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'" 10
ok $? "after CREATE EXTENSION again the worker compacts sessions again"
start=$(date +%s%N)
out=$(q postgres "DROP DATABASE w2")
ms=$((($(date +%s%N) - start) / 1000000))
is "$out" "" "DROP DATABASE of a served database succeeds (${ms} ms)"
ok $((ms < 6000 ? 0 : 1)) "without waiting for a timeout"
wait_for w1 "SELECT state IN ('paused', 'no such database') FROM ctxwin.worker_status WHERE database = 'w2'" 5
ok $? "its worker is gone and not restarted into the dropped database"

# --- another transaction holds the oldest queued rows ---------------------------
# 12 queued, the 5 oldest held FOR UPDATE by another connection: the worker
# sends no request for them, summarizes the 7 free ones at once, and the 5
# once they are free.
set_conf ctxwin.llm_model slow-200 ctxwin.naptime_ms 60000
pause_worker
mapfile -t ids < <(queue12)
held="'${ids[0]}', '${ids[1]}', '${ids[2]}', '${ids[3]}', '${ids[4]}'"
all="'$(IFS=,; echo "${ids[*]}" | sed "s/,/', '/g")'"
psql -X -q -v ON_ERROR_STOP=1 -d w1 -c "SET application_name = 'ctxwin_t_holder'" -c "BEGIN" \
	-c "SELECT count(*) FROM (SELECT FROM ctxwin.sessions WHERE id IN ($held) FOR UPDATE) x" -c "SELECT pg_sleep(60)" -c "COMMIT" >/dev/null 2>&1 &
holder=$!
wait_for w1 "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'ctxwin_t_holder' AND query LIKE '%pg_sleep%'" 10
ok $? "another connection holds the rows of the 5 oldest"
before=$(nreq)
start=$(date +%s%N)
resume_worker
wait_for w1 "SELECT count(*) = 7 FROM ctxwin.sessions WHERE id IN ($all) AND summary_through_id > 0" 20
ok $? "with the 5 oldest of 12 queued sessions held FOR UPDATE, the worker summarizes the 7 free ones"
ms=$((($(date +%s%N) - start) / 1000000))
ok $((ms < 5000 ? 0 : 1)) "at once: ${ms} ms from its start (5 x lock_timeout would be 10 s)"
sleep 2.5
is "$(reqs_for "$before" "${ids[@]:0:5}")|$(reqs_for "$before" "${ids[@]:5}")|$(q w1 "SELECT count(*) FROM ctxwin.sessions WHERE id IN ($held) AND summary_through_id > 0")" \
	"0|7|0" "no LLM request for a held session (one each for the 7 free), and the held ones untouched"
q postgres "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'ctxwin_t_holder'" >/dev/null
wait $holder
wait_for w1 "SELECT count(*) = 12 FROM ctxwin.sessions WHERE id IN ($all) AND summary_through_id > 0" 20
ok $? "once the other transaction ends, the 5 are summarized too (the sweep finds them)"
is "$(reqs_for "$before" "${ids[@]}")|$(q w1 "SELECT count(*) FROM ctxwin.summaries WHERE session_id IN ($all)")" "12|12" \
	"one request and one summary per session in all"

# --- a role that holds advisory locks and rows cannot stop the worker ----------
# An application role (granted as the README says) holds the advisory locks
# that summarize_session used to take for every queued session, and the rows
# of the 5 oldest; the worker, with room for 3 requests, still finds the 7
# others (it fetches past the rows it skips).
q postgres "CREATE ROLE ctxwin_t_hostile LOGIN" >/dev/null
q w1 "GRANT USAGE ON SCHEMA ctxwin TO ctxwin_t_hostile;
      GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO ctxwin_t_hostile;
      GRANT SELECT ON ctxwin.models, ctxwin.profiles TO ctxwin_t_hostile" >/dev/null
set_conf ctxwin.max_concurrent_requests 3
pause_worker
mapfile -t ids < <(queue12)
held="'${ids[0]}', '${ids[1]}', '${ids[2]}', '${ids[3]}', '${ids[4]}'"
all="'$(IFS=,; echo "${ids[*]}" | sed "s/,/', '/g")'"
psql -X -q -v ON_ERROR_STOP=1 -U ctxwin_t_hostile -d w1 -c "SET application_name = 'ctxwin_t_hostile'" \
	-c "SELECT count(pg_advisory_lock(2026112101, hashtext(id::text))) FROM ctxwin.sessions WHERE id IN ($all)" \
	-c "BEGIN" -c "SELECT count(*) FROM (SELECT FROM ctxwin.sessions WHERE id IN ($held) FOR UPDATE) x" \
	-c "SELECT pg_sleep(60)" -c "COMMIT" >/dev/null 2>&1 &
hostile=$!
wait_for w1 "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'ctxwin_t_hostile' AND query LIKE '%pg_sleep%'" 10
ok $? "the plain role holds them"
before=$(nreq)
start=$(date +%s%N)
resume_worker
wait_for w1 "SELECT count(*) = 7 FROM ctxwin.sessions WHERE id IN ($all) AND summary_through_id > 0" 20
ok $? "a plain role holding advisory locks on every queued session and the rows of the 5 oldest does not stop the worker"
ms=$((($(date +%s%N) - start) / 1000000))
ok $((ms < 6000 ? 0 : 1)) "the 7 others are summarized in ${ms} ms, 3 requests at a time"
is "$(reqs_for "$before" "${ids[@]:0:5}")" "0" "and no request went out for the held ones"
q postgres "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'ctxwin_t_hostile'" >/dev/null
wait $hostile
wait_for w1 "SELECT count(*) = 12 FROM ctxwin.sessions WHERE id IN ($all) AND summary_through_id > 0" 20
ok $? "once it lets go, the held sessions are summarized too"

# --- a full job table waiting on Retry-After: no busy loop ---------------------
# Room for 2 requests, every answer 529 with Retry-After: 1, a sweep due
# every 200 ms: the worker sleeps until a job's time comes.
set_conf ctxwin.llm_model fault-529 ctxwin.llm_max_retries 0 ctxwin.max_concurrent_requests 2 ctxwin.naptime_ms 200
pause_worker
resume_worker
wait_for postgres "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = 'w1'" 10
sleep 0.5
wpid=$(worker_pid w1)
before=$(nreq)
sessions w1 4 >/dev/null
fill w1 "message_count = 0"
for _ in $(seq 1 50); do [ "$(nreq)" -ge $((before + 2)) ] && break; sleep 0.1; done
sleep 0.5
t0=$(ticks "$wpid")
sleep 2
t1=$(ticks "$wpid")
ok $((t1 - t0 <= 20 ? 0 : 1)) "with every job waiting on Retry-After the worker uses next to no CPU ($((t1 - t0)) clock ticks in 2 s)"
set_conf ctxwin.llm_model mock ctxwin.llm_max_retries 3 ctxwin.max_concurrent_requests 100 ctxwin.naptime_ms 60000
wait_for w1 "SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL" 30
ok $? "and afterwards those sessions are compacted"

# --- retries do not pile up memory -------------------------------------------------
# A request of about 400 kB answered 529 again and again: each attempt's
# transfer and answer are freed when the next attempt starts.
set_conf ctxwin.llm_model fault-529 ctxwin.llm_max_retries 3
wpid=$(worker_pid w1)
s=$(sessions w1 1)
before=$(nreq)
q w1 "INSERT INTO ctxwin.messages (session_id, role, content)
      SELECT '$s', 'user', string_agg('word' || g || ' ', '') FROM generate_series(1, 50000) g" >/dev/null
fill w1 "id = '$s'"
for _ in $(seq 1 50); do [ "$(nreq)" -ge $((before + 1)) ] && break; sleep 0.1; done
sleep 0.3
m1=$(jobmem "$wpid")
for _ in $(seq 1 60); do [ "$(nreq)" -ge $((before + 4)) ] && break; sleep 0.1; done
sleep 0.3
m4=$(jobmem "$wpid")
ok $((m1 > 0 && m4 - m1 < 300000 ? 0 : 1)) "the job's memory after 4 attempts is what it was after 1 ($m1 -> $m4 bytes)"
set_conf ctxwin.llm_model mock
wait_for w1 "SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL" 30

# --- a slow statement does not wedge the worker ----------------------------------
# A trigger makes the summary write of one session take 30 s: the worker's
# statement_timeout (ctxwin.worker_statement_timeout) cancels it, records
# the error and goes on with the others.
q w1 "CREATE TABLE public.slow_sessions (id uuid);
      CREATE FUNCTION public.slow_summary() RETURNS trigger LANGUAGE plpgsql AS \$\$
      BEGIN
          IF EXISTS (SELECT FROM public.slow_sessions x WHERE x.id = NEW.session_id) THEN
              PERFORM pg_catalog.pg_sleep(30);
          END IF;
          RETURN NEW;
      END \$\$;
      CREATE TRIGGER slow BEFORE INSERT ON ctxwin.summaries FOR EACH ROW EXECUTE FUNCTION public.slow_summary()" >/dev/null
set_conf ctxwin.worker_statement_timeout 1000
wpid=$(worker_pid w1)
slow=$(sessions w1 1)
fast=$(sessions w1 1)
q w1 "INSERT INTO public.slow_sessions VALUES ('$slow')" >/dev/null
start=$(date +%s%N)
fill w1 "id IN ('$slow', '$fast')"
wait_for w1 "SELECT last_error LIKE '%statement timeout%' FROM ctxwin.sessions WHERE id = '$slow'" 10
ok $? "a summary write that takes too long is canceled by the worker's statement timeout and recorded"
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$fast'" 10
ok $? "the other session is compacted meanwhile"
ms=$((($(date +%s%N) - start) / 1000000))
ok $((ms < 6000 ? 0 : 1)) "both within ${ms} ms"
is "$(worker_pid w1)" "$wpid" "by the same worker: the timeout did not stop it"
q w1 "DROP TRIGGER slow ON ctxwin.summaries" >/dev/null
wait_for w1 "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$slow'" 15
ok $? "once the write is fast again, the session is compacted at its retry"

is "$(grep -c -- "$key" "$dir/server.log")" "0" "the API key is nowhere in the server log"

done_testing

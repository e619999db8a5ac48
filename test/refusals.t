#!/usr/bin/env bash
# Refused and unfinished LLM answers never become a summary.  Against
# test/mockllm.py over loopback, both wire formats: an answer stopped by a
# content filter, a refusal (OpenAI's message field, Anthropic's stop_reason),
# a paused turn, the model's context window reached, tool calls instead of a
# text, no stop reason at all, several choices, an unknown stop reason.
# Through summarize_session (an error, one request, the session unchanged),
# compact() (a recorded failure whose last_error says why) and the background
# worker (retried with the compaction backoff up to the circuit breaker, the
# old summary kept).  A complete stop ("stop", "end_turn", "stop_sequence")
# is accepted.
# Builds its own cluster in a temporary directory (Unix socket only, ctxwin
# in shared_preload_libraries); as root it runs the server as postgres.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

export PGCLIENTENCODING=UTF8
bin=$(pg_config --bindir 2>/dev/null)
[ -x "$bin/initdb" ] || bin=/usr/lib/postgresql/15/bin
port=55443
dir=$(mktemp -d /tmp/ctxwin_refusals.XXXXXX)
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

# q DB SQL...: unaligned, errors included
q() { local d=$1; shift; psql -X -q -A -t -d "$d" "$@" 2>&1; }
# ql PROVIDER MODEL SQL: in r0 (no worker there) with that provider and model
ql() {
	local base=http://127.0.0.1:$mport
	[ "$1" = openai ] && base=$base/v1
	PGOPTIONS="-c ctxwin.llm_provider=$1 -c ctxwin.llm_base_url=$base -c ctxwin.llm_model=$2 -c ctxwin.llm_max_retries=2" \
		q r0 -c "$3"
}
wait_for() {
	# wait_for DB SQL SECONDS: until SQL returns t; 0 if it did
	local i n=$(($3 * 10))
	for ((i = 0; i < n; i++)); do
		[ "$(q "$1" -c "$2")" = "t" ] && return 0
		sleep 0.1
	done
	return 1
}
set_conf() {
	while [ $# -gt 1 ]; do
		q postgres -c "ALTER SYSTEM SET $1 = '$2'" >/dev/null
		shift 2
	done
	q postgres -c "SELECT pg_reload_conf()" >/dev/null
	sleep 0.5
}
nreq() { wc -l <"$dir/requests.jsonl" | tr -d ' '; }
contains_none() {	# contains_none TEXT WORD...: the first word found, or nothing
	local t=$1 w
	shift
	for w in "$@"; do case $t in *"$w"*) echo "$w"; return ;; esac; done
}
# what a failure must not change
state() {
	q "$1" -c "SELECT s.summary_through_id, s.summary_version, md5(coalesce(s.conversation_summary, '')),
	                  (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id),
	                  (SELECT count(*) FROM ctxwin.flush_events f WHERE f.session_id = s.id)
	           FROM ctxwin.sessions s WHERE s.id = '$2'"
}
# add DB WHERE N: N messages to each session matching WHERE, in one statement
add() {
	q "$1" -c "INSERT INTO ctxwin.messages (session_id, role, content)
	           SELECT s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	                  'turn ' || g || ': deploy billing-api ' || g || ' to /srv/app/v' || g || ' and check E' || (4000 + g)
	           FROM ctxwin.sessions s, generate_series(1, $3) g WHERE $2 ORDER BY g, s.id" >/dev/null
}

# The answers: model | error wanted with OpenAI | with Anthropic ("-": not
# that provider).  The errors say why in a sentence and quote no model text.
faults=(
	'fault-stop-content_filter|stopped by the provider'"'"'s content filter (finish_reason "content_filter")|stopped by the provider'"'"'s content filter (stop_reason "content_filter")'
	'fault-content-filter|stopped by the provider'"'"'s content filter (finish_reason "content_filter")|LLM refused to summarize the conversation (stop_reason "refusal")'
	'fault-refusal|LLM refused to summarize the conversation (its answer holds a refusal)|LLM refused to summarize the conversation (stop_reason "refusal")'
	'fault-stop-refusal|LLM refused to summarize the conversation (finish_reason "refusal")|LLM refused to summarize the conversation (stop_reason "refusal")'
	'fault-stop-pause_turn|LLM paused before finishing its answer (finish_reason "pause_turn")|LLM paused before finishing its answer (stop_reason "pause_turn")'
	'fault-stop-model_context_window_exceeded|cut off at the model'"'"'s context window (finish_reason|cut off at the model'"'"'s context window (stop_reason "model_context_window_exceeded")'
	'fault-tool-calls|LLM answered with a tool call instead of a summary|LLM answered with a tool call instead of a summary'
	'fault-tool-calls-stop|LLM answered with a tool call instead of a summary|LLM answered with a tool call instead of a summary'
	'fault-no-finish|LLM answer has no finish_reason|LLM answer has no stop_reason'
	'fault-stop-null|LLM answer has no finish_reason|LLM answer has no stop_reason'
	'fault-choices-2|LLM answer has 2 choices where one was asked for|-'
	'fault-stop-eos_token|LLM answer did not end with a complete stop (finish_reason "eos_token")|LLM answer did not end with a complete stop (stop_reason "eos_token")'
)
want_of() {	# want_of PROVIDER ENTRY
	local rest=${2#*|}
	[ "$1" = openai ] && echo "${rest%%|*}" || echo "${rest#*|}"
}
# text of the mock's refusals and tool-calling answers, never to be quoted
mocktexts=("I'm sorry" "Let me look that up")

plan 92

# --- the mock LLM and the cluster ---------------------------------------------
printf '%s\n' "$key" >"$dir/key"
chmod 644 "$dir/key"
: >"$dir/requests.jsonl"
chmod 666 "$dir/requests.jsonl"
python3 test/mockllm.py --port 0 --key "$key" --log "$dir/requests.jsonl" --port-file "$dir/mockport" \
	>/dev/null 2>&1 &
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
ctxwin.databases = 'r1'
ctxwin.naptime_ms = 60000
ctxwin.llm_provider = 'openai'
ctxwin.llm_base_url = 'http://127.0.0.1:$mport/v1'
ctxwin.llm_api_key_file = '$dir/key'
ctxwin.llm_model = 'mock'
ctxwin.llm_timeout_ms = 10000
EOF
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null || fail_setup "the server did not start"
for d in r0 r1; do
	q postgres -c "CREATE DATABASE $d" >/dev/null || fail_setup "CREATE DATABASE $d failed"
	q $d -v ON_ERROR_STOP=1 -c "CREATE EXTENSION ctxwin" \
		-c "INSERT INTO ctxwin.profiles (name, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
		                                 min_recent_messages, summary_strategy)
		    VALUES ('r', 8, NULL, NULL, 2, 'llm')" >/dev/null || fail_setup "CREATE EXTENSION in $d failed"
done
wait_for r1 "SELECT state = 'idle' FROM ctxwin.worker_status WHERE database = 'r1'" 10 ||
	fail_setup "the worker of r1 did not start"

# ---------------------------------------------------------------------------
# summarize_session: an error saying why, one request (not sent again at
# once, though llm_max_retries is 2), the session unchanged
# ---------------------------------------------------------------------------
for p in openai anthropic; do
	f=$(q r0 -c "INSERT INTO ctxwin.sessions (profile) VALUES ('r') RETURNING id")
	add r0 "id = '$f'" 8
	ql $p mock "SELECT ctxwin.summarize_session('$f')" >/dev/null
	add r0 "id = '$f'" 8
	before=$(state r0 "$f")
	like "$before" "6|1|" "$p: a session with a summary of messages 1-6 and 10 new messages"
	for fe in "${faults[@]}"; do
		m=${fe%%|*}
		want=$(want_of $p "$fe")
		[ "$want" = - ] && continue
		n0=$(nreq)
		out=$(ql $p "$m" "SELECT version FROM ctxwin.summarize_session('$f')")
		bad=""
		case $out in *"ERROR:  "*"$want"*) ;; *) bad="$bad error" ;; esac
		[ "$(state r0 "$f")" = "$before" ] || bad="$bad session-changed"
		[ "$(($(nreq) - n0))" = 1 ] || bad="$bad requests=$(($(nreq) - n0))"
		[ -z "$(contains_none "$out" "${mocktexts[@]}")" ] || bad="$bad quotes-the-answer"
		is "$bad" "" "$p: $m fails with \"$want\" after one request, the session unchanged"
		[ -n "$bad" ] && diag "$out"
	done

	# compact(): the same answers end as a recorded failure that says why
	for fe in "${faults[@]}"; do
		m=${fe%%|*}
		want=$(want_of $p "$fe")
		[ "$want" = - ] && continue
		add r0 "id = '$f'" 1		# a new message: the circuit breaker starts again
		n0=$(nreq)
		out=$(ql $p "$m" "SELECT ctxwin.compact()")
		err=$(q r0 -c "SELECT compaction_failures || '|' || last_error FROM ctxwin.sessions WHERE id = '$f'")
		bad=""
		[ "$out" = 0 ] || bad="$bad compact=$out"
		[ "$err" = "1|$want" ] || case $err in "1|"*"$want"*) ;; *) bad="$bad last_error" ;; esac
		[ "$(state r0 "$f")" = "$before" ] || bad="$bad session-changed"
		[ "$(($(nreq) - n0))" = 1 ] || bad="$bad requests=$(($(nreq) - n0))"
		[ -z "$(contains_none "$err" "${mocktexts[@]}" "$key")" ] || bad="$bad quotes-the-answer"
		is "$bad" "" "$p: compact() with $m: one failure recorded, last_error says why, the session's summary unchanged"
		[ -n "$bad" ] && diag "$out" "$err"
	done
	is "$(q r0 -c "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$f'")" "t" \
		"$p: the session stays queued for a later attempt"

	# a complete stop is accepted: stop_sequence (Anthropic), and the
	# provider's usual stop
	out=$(ql $p fault-stop-stop_sequence "SELECT version FROM ctxwin.summarize_session('$f')")
	is "$out|$(q r0 -c "SELECT conversation_summary = (SELECT content FROM ctxwin.summaries WHERE session_id = '$f' AND version = 2)
	                          AND last_error IS NULL AND compaction_failures = 0 FROM ctxwin.sessions WHERE id = '$f'")" "2|t" \
		"$p: an answer ended by a stop sequence becomes version 2 and clears last_error"
done

# ---------------------------------------------------------------------------
# The worker: a session per answer, each with a summary made by the mock;
# then its profile's summary_model answers so and 9 more messages queue it.
# Each attempt is one request, recorded as a failed compaction and tried
# again after the compaction backoff (1 s, 4 s) up to the circuit breaker
# (ctxwin.max_failures, 3); the summary made before stays.
# ---------------------------------------------------------------------------
for p in openai anthropic; do
	if [ $p = openai ]; then
		set_conf ctxwin.llm_provider openai ctxwin.llm_base_url "http://127.0.0.1:$mport/v1"
	else
		set_conf ctxwin.llm_provider anthropic ctxwin.llm_base_url "http://127.0.0.1:$mport"
	fi
	models=()
	for fe in "${faults[@]}"; do
		[ "$(want_of $p "$fe")" = - ] || models+=("${fe%%|*}")
	done
	n=${#models[@]}
	for m in "${models[@]}"; do
		q r1 -c "INSERT INTO ctxwin.profiles (name, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
		                                       min_recent_messages, summary_strategy, summary_model)
		         VALUES ('$p-$m', 8, NULL, NULL, 2, 'llm', 'mock')" \
			-c "INSERT INTO ctxwin.sessions (profile, metadata) VALUES ('$p-$m', '{\"fault\": \"$m\"}')" >/dev/null
	done
	where="profile LIKE '$p-%'"
	add r1 "$where" 9
	wait_for r1 "SELECT count(*) = $n FROM ctxwin.sessions WHERE $where AND summary_version = 1 AND compaction_queued_at IS NULL" 20
	ok $? "$p: the worker summarizes the $n sessions with the mock first"
	sums=$(q r1 -c "SELECT string_agg(id || ':' || md5(conversation_summary), ',' ORDER BY id) FROM ctxwin.sessions WHERE $where")
	failed0=$(q r1 -c "SELECT failed FROM ctxwin.worker_status WHERE database = 'r1'")
	q r1 -c "UPDATE ctxwin.profiles SET summary_model = substr(name, length('$p-') + 1) WHERE name LIKE '$p-%'" >/dev/null
	n0=$(nreq)
	start=$(date +%s)
	add r1 "$where" 9
	wait_for r1 "SELECT count(*) = $n FROM ctxwin.sessions WHERE $where AND compaction_failures = 3" 40
	ok $? "$p: every one of the $n answers is a failed compaction, three times (the circuit breaker), in $(($(date +%s) - start)) s"
	sleep 2
	is "$(q r1 -c "SELECT string_agg(id || ':' || md5(conversation_summary), ',' ORDER BY id) FROM ctxwin.sessions WHERE $where")" "$sums" \
		"$p: each session still holds the summary made before"
	is "$(q r1 -c "SELECT count(*) FILTER (WHERE summary_version = 1 AND summary_through_id = 7 AND compaction_queued_at IS NOT NULL)
	                      || ':' || (SELECT count(*) FROM ctxwin.summaries x JOIN ctxwin.sessions s ON s.id = x.session_id WHERE s.$where)
	                      || ':' || (SELECT count(*) FROM ctxwin.flush_events x JOIN ctxwin.sessions s ON s.id = x.session_id WHERE s.$where)
	               FROM ctxwin.sessions WHERE $where")" "$n:$n:$n" \
		"$p: still version 1 through message 7, one summaries row and one flush event each, still queued"
	for m in "${models[@]}"; do
		want=""
		for fe in "${faults[@]}"; do [ "${fe%%|*}" = "$m" ] && want=$(want_of $p "$fe"); done
		err=$(q r1 -c "SELECT last_error FROM ctxwin.sessions WHERE profile = '$p-$m'")
		bad=""
		case $err in *"$want"*) ;; *) bad="$bad last_error" ;; esac
		[ -z "$(contains_none "$err" "${mocktexts[@]}" "$key")" ] || bad="$bad quotes-the-answer"
		is "$bad" "" "$p: worker, $m: last_error says \"$want\""
		[ -n "$bad" ] && diag "$err"
	done
	# the requests: three per session, 1 s then 4 s apart at least
	is "$(python3 - "$dir/requests.jsonl" "$n0" <<'PY'
import json, sys
from collections import defaultdict
t = defaultdict(list)
for e in [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]:
    t[e["model"]].append(e["time"])
bad = [m for m, v in t.items() if len(v) != 3 or v[1] - v[0] < 0.9 or v[2] - v[1] < 3.9]
print("%d models, %s" % (len(t), "ok" if not bad else "wrong: " + ", ".join(
    "%s %s" % (m, [round(x - t[m][0], 1) for x in t[m]]) for m in bad)))
PY
)" "$n models, ok" "$p: one request per attempt, three attempts each, after the backoff of 1 s and 4 s; none since (the breaker holds)"
	is "$(q r1 -c "SELECT failed - $failed0 FROM ctxwin.worker_status WHERE database = 'r1'")" "$((3 * n))" \
		"$p: worker_status counts the $((3 * n)) failed compactions"
	like "$(q r1 -c "SELECT count(*) FROM ctxwin.summaries x JOIN ctxwin.sessions s ON s.id = x.session_id
	                  WHERE s.$where AND (x.content LIKE '%sorry%' OR x.content LIKE '%look that up%' OR x.content NOT LIKE 'Summary (mock)%')")" \
		"0" "$p: no summary holds a refusal, a tool-calling text or anything but a complete mock summary"

	# the same sessions, once the model answers well again
	q r1 -c "UPDATE ctxwin.profiles SET summary_model = 'mock' WHERE name LIKE '$p-%'" >/dev/null
	add r1 "$where" 1
	wait_for r1 "SELECT count(*) = $n FROM ctxwin.sessions WHERE $where AND summary_version = 2 AND compaction_failures = 0
	             AND last_error IS NULL AND compaction_queued_at IS NULL" 20
	ok $? "$p: with a model that answers, a new message resets the breaker and every session gets version 2"
done

is "$(grep -c -- "$key" "$dir/server.log")" "0" "the API key is nowhere in the server log"

done_testing

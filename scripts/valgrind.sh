#!/usr/bin/env bash
# Run the SQL test suites against a PostgreSQL server running under
# valgrind memcheck, and report every error whose stack passes through
# ctxwin.  Slow (minutes); not part of scripts/test.sh.  Run as root;
# --with-llm also runs test/llm.t (the libcurl client); --with-worker also
# preloads ctxwin and has its background worker compact 60 sessions against
# the mock LLM with 20 % faults (launcher, claim, multi handle, retries,
# writes, status).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ctxwin_deps
command -v valgrind >/dev/null || apt-get install -y -qq valgrind
make -j"$(nproc)" >/dev/null && make install >/dev/null

bindir=$(pg_config --bindir)
work=$(mktemp -d /tmp/ctxwin-valgrind.XXXXXX)
chown postgres "$work"
port=54329
log="$work/valgrind.%p.log"
as_pg() { runuser -u postgres -- "$@"; }

as_pg "$bindir/initdb" -D "$work/data" -A trust >/dev/null
as_pg valgrind --quiet --trace-children=yes --track-origins=yes --num-callers=30 \
	--error-limit=no --log-file="$log" \
	"$bindir/postgres" -D "$work/data" -p $port -k "$work" -c fsync=off \
	-c max_connections=20 -c shared_buffers=64MB \
	-c shared_preload_libraries=ctxwin -c ctxwin.databases=ctxwin_vg_worker \
	>"$work/server.log" 2>&1 &
for _ in $(seq 1 120); do
	as_pg "$bindir/pg_isready" -q -h "$work" -p $port && break
	sleep 1
done

export PGHOST="$work" PGPORT=$port PGUSER=postgres PGDATABASE=postgres
rc=0
make installcheck || rc=1
psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
prove --source pgTAP --pgtap-option dbname=postgres test/*.sql || rc=1
if [ "${1:-}" = "--with-llm" ] || [ "${2:-}" = "--with-llm" ]; then
	# the LLM client against the mock server; slow under valgrind, so time
	# limits can make single checks fail: only valgrind's verdict counts here
	prove test/llm.t || echo "(test/llm.t under valgrind: see above; its verdict is not counted)"
fi
if [ "${1:-}" = "--with-worker" ] || [ "${2:-}" = "--with-worker" ]; then
	key=$work/key
	echo "sk-valgrind-key" >"$key"
	chmod 644 "$key"
	python3 test/mockllm.py --port 0 --key sk-valgrind-key --log "$work/requests.jsonl" \
		--port-file "$work/mockport" --seed 1 >/dev/null 2>&1 &
	mock=$!
	for _ in $(seq 1 50); do [ -s "$work/mockport" ] && break; sleep 0.1; done
	psql -X -q -c "ALTER SYSTEM SET ctxwin.llm_provider = 'openai'" \
		-c "ALTER SYSTEM SET ctxwin.llm_base_url = 'http://127.0.0.1:$(cat "$work/mockport")/v1'" \
		-c "ALTER SYSTEM SET ctxwin.llm_api_key_file = '$key'" \
		-c "ALTER SYSTEM SET ctxwin.llm_model = 'flaky-20'" \
		-c "ALTER SYSTEM SET ctxwin.llm_max_retries = 5" -c "SELECT pg_reload_conf()" \
		-c "CREATE DATABASE ctxwin_vg_worker" >/dev/null
	psql -X -q -d ctxwin_vg_worker -c "CREATE EXTENSION ctxwin" \
		-c "INSERT INTO ctxwin.sessions (profile) SELECT 'default' FROM generate_series(1, 60)" \
		-c "INSERT INTO ctxwin.messages (session_id, role, content)
		    SELECT s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, 'turn ' || g || ' of /srv/app/x' || g
		    FROM ctxwin.sessions s, generate_series(1, 31) g ORDER BY g, s.id" >/dev/null
	left=60
	for _ in $(seq 1 300); do
		left=$(psql -X -At -d ctxwin_vg_worker -c "SELECT count(*) FROM ctxwin.sessions WHERE summary_through_id = 0")
		[ "$left" = 0 ] && break
		sleep 1
	done
	psql -X -d ctxwin_vg_worker -c "SELECT database, state, requests, done, failed, retries FROM ctxwin.worker_status"
	if [ "$left" = 0 ]; then echo "worker under valgrind: all 60 sessions compacted"; else echo "worker under valgrind: $left sessions left"; rc=1; fi
	# SIGTERM with requests in flight, under valgrind too
	psql -X -q -c "ALTER SYSTEM SET ctxwin.llm_model = 'fault-timeout'" -c "SELECT pg_reload_conf()" >/dev/null
	psql -X -q -d ctxwin_vg_worker -c "INSERT INTO ctxwin.messages (session_id, role, content)
		SELECT s.id, 'user', 'more ' || g FROM ctxwin.sessions s, generate_series(1, 30) g ORDER BY g, s.id" >/dev/null
	sleep 5
	psql -X -q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'ctxwin worker'" >/dev/null
	sleep 5
	kill "$mock" 2>/dev/null || true
fi

as_pg "$bindir/pg_ctl" -D "$work/data" -m fast stop >/dev/null || true
sleep 2
# Keep only the reports whose stack names ctxwin, less PostgreSQL's own
# known one: the padding of the relcache init file it writes while a
# background worker (ours) connects.
errors=$(awk '/^==[0-9]+== [A-Z]/ { blk = $0; next }
	/^==[0-9]+== *$/ { if (blk ~ /ctxwin/ && blk !~ /RelationCacheInitializePhase3/) n++; blk = ""; next }
	{ blk = blk "\n" $0 }
	END { print n + 0 }' "$work"/valgrind.*.log)
echo "valgrind logs: $work/valgrind.*.log"
echo "error stacks through ctxwin: $errors"
if [ "$errors" -gt 0 ]; then
	grep -B5 -A30 'ctxwin' "$work"/valgrind.*.log | head -200
	rc=1
fi
exit $rc

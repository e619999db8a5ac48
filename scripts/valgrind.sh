#!/usr/bin/env bash
# Run the SQL test suites against a PostgreSQL server running under
# valgrind memcheck, and report every error whose stack passes through
# ctxwin.  Slow (minutes); not part of scripts/test.sh.  Run as root;
# --with-llm also runs test/llm.pl (the libcurl client) on a cluster of its
# own, under valgrind as well; --with-worker also
# preloads ctxwin and has its background worker compact 60 sessions against
# the mock LLM with 20 % faults (launcher, claim, multi handle, retries,
# writes, status); --with-citus (where the citus extension is installed)
# also runs a Citus coordinator and a worker node under valgrind, and on
# them ctxwin.distribute(), inserts, delegated build_context calls (the
# walk of a local shard), compact() and the bill.
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

as_pg "$bindir/initdb" -D "$work/data" -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
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
make installcheck PGTAP=no || rc=1   # pg_regress's tests: the pgTAP suites are prove's, below
psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
prove --source pgTAP --pgtap-option dbname=postgres test/*.sql || rc=1
if [[ " $* " == *" --with-llm "* ]]; then
	# The LLM client against the mock server.  test/llm.pl makes a cluster of
	# its own with PostgreSQL's Perl test framework, whose pg_ctl starts the
	# "postgres" found next to itself: a directory first on PATH holds a copy
	# of pg_ctl and a "postgres" that runs the real one under valgrind, as the
	# server above (initdb, found after it, bootstraps with the real one).  The
	# test runs as the server's OS user (initdb refuses root), from a copy it
	# can read.  Slow under valgrind, so time limits can make single checks
	# fail: only valgrind's verdict counts here.
	vgbin=$work/vgbin
	mkdir "$vgbin"
	cp "$bindir/pg_ctl" "$vgbin/pg_ctl"
	cat >"$vgbin/postgres" <<VG
#!/bin/sh
for a in "\$@"; do
	case \$a in -V | --version | -C | --describe-config | --check | --boot | --single) exec "$bindir/postgres" "\$@" ;; esac
done
exec valgrind --quiet --trace-children=yes --track-origins=yes --num-callers=30 \\
	--error-limit=no --log-file="$log" "$bindir/postgres" "\$@"
VG
	chmod 755 "$vgbin/postgres"
	mkdir -p "$work/tap/test"
	cp -r test/llm.pl test/lib test/mockllm.py "$work/tap/test/"
	chmod -R a+rX "$work/tap" "$vgbin"
	chown postgres "$work/tap"
	# PostgreSQL::Test::Cluster: in the server's PGXS tree when it was built
	# with its TAP modules, else (Debian's 15) from its source
	tap_lib=$(pg_config --pkglibdir)/pgxs/src/test/perl
	if [ ! -f "$tap_lib/PostgreSQL/Test/Cluster.pm" ]; then
		. scripts/pg.sh
		_ctxwin_pg15_perl
		tap_lib=$(ctxwin_pg_perl 15)
	fi
	(cd "$work/tap" && as_pg env PATH="$vgbin:$bindir:$PATH" PERL5LIB="$work/tap/test/lib:$tap_lib" \
		PG_REGRESS="$(dirname "$(pg_config --pgxs)")/../test/regress/pg_regress" \
		TESTDATADIR="$work/tap/data" TESTLOGDIR="$work/tap/log" HOME="$work/tap" \
		PG_TEST_TIMEOUT_DEFAULT=600 prove test/llm.pl) ||
		echo "(test/llm.pl under valgrind: see above; its verdict is not counted; its logs: $work/tap/log)"
fi
if [[ " $* " == *" --with-worker "* ]]; then
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

if [[ " $* " == *" --with-citus "* ]]; then
	if [ ! -f "$(pg_config --sharedir)/extension/citus.control" ]; then
		echo "--with-citus: the citus extension is not installed for this server; skipped"
	else
		for n in 0 1; do
			as_pg "$bindir/initdb" -D "$work/citus$n" -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
			as_pg valgrind --quiet --trace-children=yes --track-origins=yes --num-callers=30 \
				--error-limit=no --log-file="$log" \
				"$bindir/postgres" -D "$work/citus$n" -p $((port + 1 + n)) -k "$work" -c fsync=off \
				-c listen_addresses=127.0.0.1 -c max_connections=40 -c shared_buffers=64MB \
				-c shared_preload_libraries=citus,ctxwin >"$work/citus$n.log" 2>&1 &
		done
		for n in 0 1; do
			for _ in $(seq 1 180); do
				as_pg "$bindir/pg_isready" -q -h "$work" -p $((port + 1 + n)) && break
				sleep 1
			done
			psql -X -q -p $((port + 1 + n)) -c "CREATE EXTENSION citus"
		done
		c() { psql -X -q -At -v ON_ERROR_STOP=1 -p $((port + 1)) "$@"; }
		c -c "SELECT citus_set_coordinator_host('127.0.0.1', $((port + 1)))" \
			-c "SELECT citus_add_node('127.0.0.1', $((port + 2)))" >/dev/null
		c -c "CREATE EXTENSION ctxwin" -c "SELECT ctxwin.distribute(shard_count => 4)" >/dev/null
		c -c "INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, summary_strategy,
		          min_recent_messages, window_policy) VALUES ('vg', 'gpt-4o', 8, 'extractive', 2, 'sliding')" \
			-c "INSERT INTO ctxwin.sessions (id, profile) SELECT ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, 'vg'
			    FROM generate_series(1, 6) g" \
			-c "INSERT INTO ctxwin.messages (session_id, role, content)
			    SELECT s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, 'turn ' || g || ' of /srv/app/x' || g
			    FROM ctxwin.sessions s, generate_series(1, 12) g ORDER BY g, s.id" >/dev/null
		for g in 1 2 3 4 5 6; do
			c -c "SELECT ctxwin.build_context('00000000-0000-4000-8000-00000000000$g')" \
				-c "SELECT note FROM ctxwin.context_status('00000000-0000-4000-8000-00000000000$g')" >/dev/null
		done
		# (the coordinator's worker serves database postgres too: it and compact() share the queue)
		c -c "SELECT ctxwin.compact()" >/dev/null
		for _ in $(seq 1 120); do
			[ "$(c -c "SELECT count(*) FROM ctxwin.sessions WHERE summary_version = 0")" = 0 ] && break
			sleep 1
		done
		echo "Citus under valgrind: $(c -c "SELECT count(*) FROM ctxwin.sessions WHERE summary_version > 0") of 6 sessions summarized by compact() and the worker"
		c -c "SELECT ctxwin.record_usage('00000000-0000-4000-8000-000000000001', '{\"prompt_tokens\": 90, \"completion_tokens\": 9}', 5, 80)" \
			-c "SELECT count(*) FROM ctxwin.usage" -c "SELECT ctxwin.build_context('00000000-0000-4000-8000-000000000002', 200)" >/dev/null
		for n in 1 0; do as_pg "$bindir/pg_ctl" -D "$work/citus$n" -m fast stop >/dev/null || true; done
	fi
fi

as_pg "$bindir/pg_ctl" -D "$work/data" -m fast stop >/dev/null || true
sleep 2
# Keep only the reports whose stack names ctxwin, less PostgreSQL's own
# known ones: the padding of the relcache init file it writes while a
# background worker (ours) connects, and the memmove of its regular
# expression cache (RE_compile_and_cache), which this build's fortified
# memmove reports as an overlapping memcpy_chk, and the alignment padding of
# WAL records written at commit (PostgreSQL's own src/tools/valgrind.supp
# suppresses it as padding_XLogRecData_write: a jsonb the summary carries
# was built where ctxwin called it).
errors=$(awk '/^==[0-9]+== [A-Z]/ { blk = $0; next }
	/^==[0-9]+== *$/ { if (blk ~ /ctxwin/ && blk !~ /RelationCacheInitializePhase3/ &&
		blk !~ /^==[0-9]+== Syscall param pwrite64\(buf\) points to uninitialised byte\(s\)\n[^\n]*pwrite[^\n]*\n[^\n]*\n[^\n]*XLog(Flush|Write)/ &&
		blk !~ /overlap in memcpy_chk[^\n]*\n[^\n]*\n[^\n]*RE_compile_and_cache/) n++; blk = ""; next }
	{ blk = blk "\n" $0 }
	END { print n + 0 }' "$work"/valgrind.*.log)
echo "valgrind logs: $work/valgrind.*.log"
echo "error stacks through ctxwin: $errors"
if [ "$errors" -gt 0 ]; then
	grep -B5 -A30 'ctxwin' "$work"/valgrind.*.log | head -200
	rc=1
fi
exit $rc

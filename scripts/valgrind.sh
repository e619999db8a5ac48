#!/usr/bin/env bash
# Run the SQL test suites against a PostgreSQL server running under
# valgrind memcheck, and report every error whose stack passes through
# ctxwin.  Slow (minutes); not part of scripts/test.sh.  Run as root;
# --with-llm also runs test/llm.t (the libcurl client).
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
	-c max_connections=20 -c shared_buffers=64MB >"$work/server.log" 2>&1 &
for _ in $(seq 1 120); do
	as_pg "$bindir/pg_isready" -q -h "$work" -p $port && break
	sleep 1
done

export PGHOST="$work" PGPORT=$port PGUSER=postgres PGDATABASE=postgres
rc=0
make installcheck || rc=1
psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
prove --source pgTAP --pgtap-option dbname=postgres test/*.sql || rc=1
if [ "${1:-}" = "--with-llm" ]; then
	# the LLM client against the mock server; slow under valgrind, so time
	# limits can make single checks fail: only valgrind's verdict counts here
	prove test/llm.t || echo "(test/llm.t under valgrind: see above; its verdict is not counted)"
fi

as_pg "$bindir/pg_ctl" -D "$work/data" -m fast stop >/dev/null || true
sleep 2
# Keep only the reports whose stack names ctxwin.
errors=$(cat "$work"/valgrind.*.log | grep -c 'ctxwin' || true)
echo "valgrind logs: $work/valgrind.*.log"
echo "error stacks through ctxwin: $errors"
if [ "$errors" -gt 0 ]; then
	grep -B5 -A30 'ctxwin' "$work"/valgrind.*.log | head -200
	rc=1
fi
exit $rc

# bench/window/lib.sh: the pieces of the window benchmarks that
# bench/window/run and bench/window/compare share (sourced by both): the
# throwaway cluster, the data, and the measurements of build_context's
# latency (measurement 1) and of the insert rate (measurement 3).
#
# The caller sets, before using them: HERE (bench/window), OUT (the
# directory of the raw output), PORT, RUNS, BUDGET, PGBIN (the server's bin
# directory) and, for say, BENCH (the prefix of its messages).

say()
{
	echo "${BENCH:-window}: $*" >&2
}

# --- the throwaway cluster ---------------------------------------------------
# Default settings, except that it listens only on its own socket directory.
# bench_cluster_start makes it in a mktemp directory ($WORK) and exports
# PGHOST, PGPORT, PGUSER, PGDATABASE; bench_cluster_stop (the caller's
# EXIT trap) stops it, keeps its log in $OUT/server.log and removes it.
bench_cluster_start()
{
	WORK=$(mktemp -d /tmp/ctxwin-window.XXXXXX)
	chown postgres: "$WORK"
	SOCK=$WORK/sock
	DATA=$WORK/data
	LOG=$WORK/server.log
	say "initdb and start a cluster in $WORK, port $PORT"
	runuser -u postgres -- mkdir "$SOCK"
	runuser -u postgres -- "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 \
		--locale=C.UTF-8 --no-sync >"$OUT/initdb.log"
	bench_pg_ctl start
	export PGHOST=$SOCK PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
}

# bench_pg_ctl start|stop|restart: the server, waiting until it is done.
bench_pg_ctl()
{
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DATA" -w -l "$LOG" -m fast -t 60 \
		-o "-p $PORT -k $SOCK -c listen_addresses=''" "$1" >/dev/null
}

bench_cluster_stop()
{
	[ -n "${WORK:-}" ] || return 0
	if [ -f "$DATA/postmaster.pid" ]; then
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DATA" -m fast -t 60 stop >/dev/null 2>&1 ||
			runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
	fi
	[ -f "$LOG" ] && cp "$LOG" "$OUT/server.log" 2>/dev/null
	rm -rf "$WORK"
}

q()
{
	"$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"
}

# The 1-minute load average; waits up to $1 seconds for it to fall below 1.5.
load_now()
{
	local waited=0 l
	l=$(cut -d' ' -f1 /proc/loadavg)
	while awk -v l="$l" 'BEGIN { exit !(l >= 1.5) }' && [ "$waited" -lt "${1:-0}" ]; do
		sleep 5
		waited=$((waited + 5))
		l=$(cut -d' ' -f1 /proc/loadavg)
	done
	echo "$l"
}

# 100000 -> 100,000
thousands()
{
	echo "$1" | sed ':a; s/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/; ta'
}

median()
{
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
		END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

pgbench_field()
{
	# $1: tps | lat; rest: files
	local what=$1
	shift
	if [ "$what" = tps ]; then
		sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$@"
	else
		sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$@"
	fi
}

# --- the data ----------------------------------------------------------------
# bench_load_sessions N: bench/window/setup.sql, then its two sessions of
# ~500-byte messages (user and assistant alternate, a tool call group every
# 20 messages), '1k' of 1,000 messages and '100k' of N (bench/window/run:
# 100,000), loaded with INSERT ... SELECT through the insert trigger, 1,000
# messages per transaction.  Sets SID_1K, SID_100K and LOAD_SECONDS; the
# sessions' counts go to $OUT/sessions.txt.
bench_setup()
{
	q -f "$HERE/setup.sql"
}
sid()
{
	q -c "SELECT id FROM bench.sessions WHERE name = '$1'"
}
bench_load_sessions()
{
	say "loading: 1,000 and $(thousands "$1") messages"
	local t0
	t0=$(date +%s.%N)
	q -c "CALL bench.load('1k', 1000)"
	q -c "CALL bench.load('100k', $1)"
	LOAD_SECONDS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	SID_1K=$(sid 1k)
	SID_100K=$(sid 100k)
	q -c "SELECT name, message_count, token_count FROM bench.sessions JOIN ctxwin.sessions USING (id) ORDER BY message_count" \
		>"$OUT/sessions.txt"
}

# --- measurement 1: build_context's latency, server side -----------------------
# latency_once FILE WARM N RUN NAME...: `warm` calls, then `n` timed ones
# (each stopping after 15 s), in a new connection per session named;
# appends "name run median p90 p99 messages tokens calls" to $OUT/FILE.tsv.
# LAT_DB and LAT_FN choose the database and the function (build_context).
latency_once()
{
	local file=$1 warm=$2 n=$3 r=$4 name
	shift 4
	for name in "$@"; do
		echo "$name $r $(q -d "${LAT_DB:-postgres}" -F ' ' -c "SELECT * FROM bench.latency('$name', $BUDGET, $warm, $n, 15, '${LAT_FN:-build_context}')")" >>"$OUT/$file.tsv"
	done
}
# latency_runs FILE WARM N NAME...: RUNS runs of latency_once.
latency_runs()
{
	local file=$1 warm=$2 n=$3 r
	shift 3
	for r in $(seq "$RUNS"); do
		latency_once "$file" "$warm" "$n" "$r" "$@"
	done
}
# tsv_median FILE NAME COLUMN: the median of a column over NAME's rows in $OUT/FILE.tsv.
tsv_median()
{
	median $(awk -v n="$2" -v c="$3" '$1 == n { print $c }' "$OUT/$1.tsv")
}
latency_row()
{
	local file=$1 name=$2 label=$3
	local med p90 p99 msgs calls
	med=$(tsv_median "$file" "$name" 3)
	p90=$(tsv_median "$file" "$name" 4)
	p99=$(tsv_median "$file" "$name" 5)
	msgs=$(awk -v n="$name" '$1 == n { m = $6 " messages, " $7 " tokens" } END { print m }' "$OUT/$file.tsv")
	calls=$(awk -v n="$name" '$1 == n { c = c sep $8; sep = "/" } END { print c }' "$OUT/$file.tsv")
	printf '| %s | %.3f | %.3f | %.3f | %s | %s |\n' "$label" "$med" "$p90" "$p99" "$calls" "$msgs"
}

# --- measurement 3: the insert rate --------------------------------------------
# insert_once SCRIPT SYNC FILE: a checkpoint (so that no run pays for the
# previous one's writes), then pgbench -c 4 -j 2 for INSERT_SECONDS (15) of
# bench/window/insert_SCRIPT.sql with synchronous_commit = SYNC, its output
# into FILE.
INSERT_SECONDS=${INSERT_SECONDS:-15}
insert_once()
{
	q -c "CHECKPOINT"
	PGOPTIONS="-c synchronous_commit=$2" "$PGBIN/pgbench" -n -f "$HERE/insert_$1.sql" \
		-c 4 -j 2 -T "$INSERT_SECONDS" >"$3" 2>&1
}
# ins_tps KEY: the median TPS of the runs in $OUT/pgbench_insert_KEY_*.txt.
ins_tps()
{
	median $(pgbench_field tps "$OUT"/pgbench_insert_"$1"_*.txt)
}

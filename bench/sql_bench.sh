#!/bin/bash
# sql_bench.sh: time SELECT sum(ctxwin.count_tokens(t, ENC)) on a loaded table.
#
# Usage: bench/sql_bench.sh CORPUS.csv REPEATS
#
# Run inside a throwaway cluster (bench/run uses pg_virtualenv, which sets the
# PG* connection variables), with ctxwin installed.  Creates the database
# ctxwin_bench, loads the CSV written by bench/make_corpus_csv.mjs, then for
# each encoding and input runs the query once to warm up and 3 * REPEATS
# more times, timed by psql's \timing; prints the median as
#
#	RESULT ctxwin_sql ENCODING INPUT BYTES TOKENS SECONDS
#
# Parallel query is off: the figure is single-thread, like the others.
# For information it also times
#	pg_scan		SELECT sum(length(t)): reading and detoasting the texts alone
set -euo pipefail

csv=$1
# the queries are short: three times as many samples as the other benchmarks
repeats=$(($2 * 3))

export PGOPTIONS="-c max_parallel_workers_per_gather=0"
psql -X -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS ctxwin_bench" \
	-c "CREATE DATABASE ctxwin_bench ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
export PGDATABASE=ctxwin_bench

psql -X -q -v ON_ERROR_STOP=1 <<SQL
CREATE EXTENSION ctxwin;
CREATE TABLE corpus (id int PRIMARY KEY, kind text NOT NULL, t text NOT NULL);
\\copy corpus FROM '$csv' WITH (FORMAT csv)
VACUUM ANALYZE corpus;
SQL

echo "# PostgreSQL $(psql -X -At -c 'SHOW server_version'), $(psql -X -At -c 'SELECT count(*) FROM corpus') rows loaded"

where_prose="kind = 'prose_en'"
where_code="kind IN ('code_c', 'code_py', 'code_js', 'code_sql')"
where_all="true"

# time_query IMPL ENC INPUT EXPR WHERE
time_query()
{
	local impl=$1 enc=$2 input=$3 expr=$4 where=$5
	local bytes script out value med

	bytes=$(psql -X -At -c "SELECT sum(octet_length(t)) FROM corpus WHERE $where")
	script="\\timing on"
	for i in $(seq 0 "$repeats"); do
		script+=$'\n'"SELECT sum($expr) FROM corpus WHERE $where;"
	done
	out=$(printf '%s\n' "$script" | psql -X -At -q -v ON_ERROR_STOP=1)
	value=$(printf '%s\n' "$out" | grep -v '^Time:' | head -n 1)
	med=$(printf '%s\n' "$out" | awk '/^Time:/ { print $2 }' | tail -n +2 | sort -g |
		awk '{ t[NR] = $1 } END { m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2; printf "%.6f", m / 1000 }')
	echo "RESULT $impl $enc $input $bytes $value $med"
	awk -v i="$impl" -v e="$enc" -v n="$input" -v b="$bytes" -v v="$value" -v s="$med" \
		'BEGIN { printf "# %-16s %-11s %-6s %9d bytes %8d %9.4f s %8.2f MB/s\n", i, e, n, b, v, s, b / s / 1e6 }'
}

for input in prose code all; do
	where_var=where_$input
	time_query pg_scan - "$input" "length(t)" "${!where_var}"
done
for enc in cl100k_base o200k_base; do
	for input in prose code all; do
		where_var=where_$input
		time_query ctxwin_sql "$enc" "$input" "ctxwin.count_tokens(t, '$enc')" "${!where_var}"
	done
done

#!/usr/bin/env bash
# Token counting inside a running server: huge texts are exact, cancellable
# by statement_timeout and by pg_cancel_backend from another connection,
# counted in bounded memory; non-UTF8 databases count as UTF-8 ones do.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

# scripts are not terminals, so psql would take the database's encoding
export PGCLIENTENCODING=UTF8
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
db=ctxwin_server_t
reps=2300000			# 45 bytes each: a 103.5 MB text

plan 16
q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
q -d "$db" -c "CREATE EXTENSION ctxwin" \
	-c "CREATE TABLE big AS SELECT repeat('The quick brown fox jumps over the lazy dog. ', $reps) AS t" >/dev/null

is "$(q -d "$db" -c "SELECT octet_length(t) FROM big")" "$((45 * reps))" "the big text is $((45 * reps)) bytes"
# each repetition is 10 tokens; the final space is one more
is "$(q -d "$db" -c "SELECT ctxwin.count_tokens(t) FROM big")" "$((10 * reps + 1))" \
	"a 100 MB text counts exactly"

out=$(q -d "$db" -c "SET statement_timeout = '150ms'" -c "SELECT ctxwin.count_tokens(t) FROM big, generate_series(1, 20)" 2>&1)
like "$out" "canceling statement due to statement timeout" "statement_timeout interrupts counting"

# pg_cancel_backend from a second connection
PGAPPNAME=ctxwin_cancel_me q -d "$db" -c "SELECT ctxwin.count_tokens(t) FROM big, generate_series(1, 50)" \
	>/tmp/ctxwin_cancel.$$ 2>&1 &
bg=$!
pid=""
for _ in $(seq 1 100); do
	pid=$(q -d "$db" -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'ctxwin_cancel_me' AND state = 'active'")
	[ -n "$pid" ] && break
	sleep 0.1
done
is "$(q -d "$db" -c "SELECT pg_cancel_backend($pid)")" "t" "the counting backend was signalled"
wait $bg
like "$(cat /tmp/ctxwin_cancel.$$)" "canceling statement due to user request" "pg_cancel_backend interrupts counting"
r=0
grep -q '^[0-9]' /tmp/ctxwin_cancel.$$ && r=1
ok $r "the cancel took effect before the query could finish (no count came back)"
rm -f /tmp/ctxwin_cancel.$$

# Peak RSS of a backend counting the text grows by the detoasted text, not
# by anything proportional to its tokens (ids, pieces).
hwm() { echo "$1" | sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p'; }
res=$(q -d "$db" -c "SELECT pg_read_file('/proc/self/status')" \
	-c "SELECT ctxwin.count_tokens(t) FROM big" \
	-c "SELECT '---'" -c "SELECT pg_read_file('/proc/self/status')")
before=$(hwm "${res%%---*}")
after=$(hwm "${res##*---}")
grow=$(( after - before ))
diag "peak RSS before ${before} kB, after ${after} kB: +${grow} kB for a $((45 * reps / 1024)) kB text"
ok $(( grow < 45 * reps / 1024 + 32768 ? 0 : 1 )) "counting a 100 MB text needs no memory beyond the text itself (+32 MB)"

# One piece of 64 MiB (a single letter repeated: no space, so the
# pre-tokenizer cannot split it).  Counting and tokenizing it take memory
# that does not grow with the piece (the merge used to take 20 bytes per
# byte of it: 1.3 GB here); it counts as every run of 8 letters is one token.
piece=$((64 * 1024 * 1024))
q -d "$db" -c "CREATE TABLE huge AS SELECT repeat('a', $piece) AS t" >/dev/null
# one call per statement: each detoasts its own copy of the text
res=$(q -d "$db" -c "SELECT pg_read_file('/proc/self/status')" \
	-c "SELECT 'n ' || ctxwin.count_tokens(t) FROM huge" -c "SELECT 'n ' || ctxwin.count_tokens(t, 'o200k_base') FROM huge" \
	-c "SELECT 'n ' || cardinality(ctxwin.tokenize(t)) FROM huge" \
	-c "SELECT '---'" -c "SELECT pg_read_file('/proc/self/status')" 2>&1)
counts=$(echo "$res" | sed -n 's/^n //p' | paste -sd' ')
before=$(hwm "${res%%---*}")
after=$(hwm "${res##*---}")
grow=$(( after - before ))
is "$counts" "$((piece / 8)) $((piece / 8)) $((piece / 8))" "a 64 MiB single piece counts and tokenizes exactly"
diag "peak RSS before ${before} kB, after ${after} kB: +${grow} kB for a $((piece / 1024)) kB piece and $((piece / 8 * 4 / 1024)) kB of ids"
ok $(( grow < piece / 1024 + piece / 8 * 4 / 1024 * 2 + 65536 ? 0 : 1 )) \
	"merging a 64 MiB piece takes no memory in proportion to it (text + ids and their array + 64 MB)"

# More tokens than an int[] holds: tokenize fails cleanly, having counted
# them first, instead of growing its array to gigabytes.
reps=270000000			# " a" is one token: 270 million of them, 540 MB
q -d "$db" -c "DROP TABLE huge" -c "CREATE TABLE huge AS SELECT repeat(' a', $reps) AS t" >/dev/null
res=$(q -d "$db" -v ON_ERROR_STOP=0 -c "SELECT pg_read_file('/proc/self/status')" \
	-c "SELECT cardinality(ctxwin.tokenize(t)) FROM huge" \
	-c "SELECT '---'" -c "SELECT pg_read_file('/proc/self/status')" 2>&1)
like "$res" "text has too many tokens for an array: $reps" "tokenize refuses a result over the int[] limit"
before=$(hwm "${res%%---*}")
after=$(hwm "${res##*---}")
grow=$(( after - before ))
diag "peak RSS before ${before} kB, after ${after} kB: +${grow} kB for a $((2 * reps / 1024)) kB text"
ok $(( grow < 2 * reps / 1024 + 65536 ? 0 : 1 )) "and needs no memory beyond the text itself (+64 MB)"
is "$(q -d "$db" -c "SELECT 'alive'")" "alive" "the server is still up"

# A SQL_ASCII database holds any bytes; every byte string gets a count.
q -d postgres -c "DROP DATABASE IF EXISTS ${db}_ascii" \
	-c "CREATE DATABASE ${db}_ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0" >/dev/null
q -d "${db}_ascii" -c "CREATE EXTENSION ctxwin" >/dev/null
bad="E'ab\\xff\\xfe\\x80 \\xc3 caf\\xc3\\xa9 \\xed\\xa0\\x80 \\xf4\\x90\\x80\\x80 z\\xe9ro'"
out=$(q -d "${db}_ascii" -c "SELECT bool_and(ctxwin.count_tokens($bad, e) = cardinality(ctxwin.tokenize($bad, e))
	AND ctxwin.detokenize(ctxwin.tokenize($bad, e), e) = $bad) FROM (VALUES ('cl100k_base'), ('o200k_base')) v(e)" 2>&1)
is "$out" "t" "invalid UTF-8 in SQL_ASCII is counted and round-trips"
is "$(q -d "${db}_ascii" -c "SELECT ctxwin.tokenize('café über', 'o200k_base')")" \
	"$(q -d "$db" -c "SELECT ctxwin.tokenize('café über', 'o200k_base')")" \
	"valid UTF-8 in SQL_ASCII tokenizes as in a UTF8 database"

# LATIN1: text is converted to UTF-8 first, so counts equal the UTF8 database's
q -d postgres -c "DROP DATABASE IF EXISTS ${db}_latin1" \
	-c "CREATE DATABASE ${db}_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0" >/dev/null
q -d "${db}_latin1" -c "CREATE EXTENSION ctxwin" >/dev/null
sample="Grüße aus Köln, naïve café: ½ × ¼ ÿ"
in_utf8=$(q -d "$db" -c "SELECT ctxwin.tokenize('$sample', 'o200k_base')")
in_latin1=$(q -d "${db}_latin1" -c "SELECT ctxwin.tokenize('$sample', 'o200k_base')")
is "$in_latin1" "$in_utf8" "a LATIN1 database tokenizes as a UTF8 one does"
is "$(q -d "${db}_latin1" -c "SELECT ctxwin.detokenize(ctxwin.tokenize('$sample', 'cl100k_base'), 'cl100k_base') = '$sample'")" \
	"t" "detokenize converts back to LATIN1"

q -d postgres -c "DROP DATABASE $db" -c "DROP DATABASE ${db}_ascii" -c "DROP DATABASE ${db}_latin1" >/dev/null
done_testing

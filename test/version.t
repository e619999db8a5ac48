#!/usr/bin/env bash
# The library as the server sees it: built for this server's major version,
# installed with the version ctxwin.control gives, and on PostgreSQL 18 and
# later its magic block (PG_MODULE_MAGIC_EXT) names it and gives that
# version, which pg_get_loaded_modules() reports.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
db=ctxwin_version_t
want=$(sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)

plan 4
q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
q -d "$db" -c "CREATE EXTENSION ctxwin" >/dev/null
num=$(q -d "$db" -c "SHOW server_version_num")

# scripts/test.sh names the major version it set up; a run on another
# server than the one asked for would prove nothing about that one
if [ -n "${CTXWIN_PG_MAJOR:-}" ]; then
	is "$((num / 10000))" "$CTXWIN_PG_MAJOR" "the server is PostgreSQL $CTXWIN_PG_MAJOR, as asked"
else
	_tap_n=$((_tap_n + 1))
	echo "ok $_tap_n # skip CTXWIN_PG_MAJOR is not set: no major version was asked for"
fi
is "$(q -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'")" "$want" \
	"the extension is version $want, as ctxwin.control says"
is "$(q -d "$db" -c "SELECT ctxwin.count_tokens('hello world')")" "2" "the library loads and counts"

if [ "$num" -ge 180000 ]; then
	# the module's own name and version, from its magic block (NULL
	# without PG_MODULE_MAGIC_EXT)
	is "$(q -d "$db" -c "LOAD 'ctxwin'" \
		-c "SELECT coalesce(module_name, '(none)') || ' ' || coalesce(version, '(none)')
		    FROM pg_get_loaded_modules() WHERE file_name LIKE 'ctxwin%'")" \
		"ctxwin $want" "pg_get_loaded_modules() reports ctxwin $want"
else
	# TAP skip: pg_get_loaded_modules() and PG_MODULE_MAGIC_EXT are new in 18
	_tap_n=$((_tap_n + 1))
	echo "ok $_tap_n # skip pg_get_loaded_modules() needs PostgreSQL 18 (this server is $num)"
fi

q -d postgres -c "DROP DATABASE $db" >/dev/null
done_testing

#!/usr/bin/env bash
# The layout stays true: the committed install script of the current
# version is what the build makes from sql/install/ (scripts/build-sql.sh),
# and src/MAP.md, the map of every SQL function and trigger to the C symbol
# and file behind it, is what scripts/sql-map.sh reads from an installed
# ctxwin.  Every C symbol the map names is defined in src/.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

db=ctxwin_layout_t
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@" 2>&1; }
cleanup() { q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null; }
trap cleanup EXIT
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)

plan 4
diff -u "sql/ctxwin--$version.sql" <(scripts/build-sql.sh "$version" $(ls sql/install/*.sql | sort)) > /tmp/layout.$$.diff
ok $? "sql/ctxwin--$version.sql is what scripts/build-sql.sh makes of sql/install/"
[ -s /tmp/layout.$$.diff ] && sed 's/^/# /' /tmp/layout.$$.diff | head -40
rm -f /tmp/layout.$$.diff

cleanup
q -d postgres -c "CREATE DATABASE $db" >/dev/null
q -d "$db" -c "CREATE EXTENSION ctxwin" >/dev/null
map=$(scripts/sql-map.sh "$db")
diff -u src/MAP.md <(echo "$map") > /tmp/layout.$$.diff
ok $? "src/MAP.md is the map of the installed extension (scripts/sql-map.sh)"
[ -s /tmp/layout.$$.diff ] && sed 's/^/# /' /tmp/layout.$$.diff | head -40
rm -f /tmp/layout.$$.diff

missing=$(echo "$map" | grep -c '(not found)')
is "$missing" 0 "every C symbol of the map is defined in src/"
# and every symbol the library exports to SQL carries the ctxwin_ prefix
unprefixed=$(echo "$map" | sed -n 's/^| `[^`]*` | c | `\([^`]*\)`.*/\1/p' | grep -v '^ctxwin_' | tr '\n' ' ')
is "$unprefixed" "" "every C symbol called from SQL carries the ctxwin_ prefix"
done_testing

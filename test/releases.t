#!/usr/bin/env bash
# Every released version stays installable and updatable: its scripts are
# byte for byte what was released (sql/released.sha256 lists each release's
# install or update scripts and their sha256; a released script is never
# edited, changes go into new update scripts), PostgreSQL finds a chain of update scripts from it to the
# control file's default version, and installing it then running ALTER
# EXTENSION ctxwin UPDATE ends at that version.  Adding a version without
# its update script fails here.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets up.
cd "$(dirname "$0")/.." || exit 1
. test/tap.sh

q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$@" 2>&1; }
db=ctxwin_releases_t
current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)
# a released version: the target of a listed script (ctxwin--V.sql, ctxwin--U--V.sql)
mapfile -t released < <(sed -n 's/^[0-9a-f]\{64\}  ctxwin--\(.*--\)\{0,1\}\([^-]*\)\.sql$/\2/p' sql/released.sha256 | sort -uV)
mapfile -t scripts < <(sed -n 's/^[0-9a-f]\{64\}  \(ctxwin--.*\.sql\)$/\1/p' sql/released.sha256)
cleanup() { q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null; }
trap cleanup EXIT

plan $((2 + ${#scripts[@]} + 3 * ${#released[@]}))
[ "${#released[@]}" -gt 0 ]
ok $? "sql/released.sha256 lists the released versions (${released[*]})"
is "$(q -d postgres -c "SELECT default_version FROM pg_available_extensions WHERE name = 'ctxwin'")" "$current" \
	"the installed control file's default version is the tree's ($current)"

for f in "${scripts[@]}"; do
	(cd sql && grep "  $f\$" released.sha256 | sha256sum --check --strict --quiet) >/dev/null 2>&1
	ok $? "sql/$f is the released script (sha256)"
done
for v in "${released[@]}"; do
	path=$(q -d postgres -c "SELECT coalesce(path, '(none)') FROM pg_extension_update_paths('ctxwin')
	                         WHERE source = '$v' AND target = '$current'")
	[ "$v" = "$current" ] || [ -n "$path" ] && [ "$path" != "(none)" ]
	ok $? "an update path leads from $v to $current${path:+ ($path)}"
	cleanup
	q -d postgres -c "CREATE DATABASE $db" >/dev/null
	is "$(q -d "$db" -c "CREATE EXTENSION ctxwin VERSION '$v'" -c "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'")" \
		"$v" "CREATE EXTENSION ctxwin VERSION '$v'"
	is "$(q -d "$db" -c "ALTER EXTENSION ctxwin UPDATE" -c "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'")" \
		"$current" "ALTER EXTENSION ctxwin UPDATE from $v ends at $current"
done
done_testing

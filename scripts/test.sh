#!/usr/bin/env bash
# Install what ctxwin needs, build it, and run every test on a throwaway
# cluster: the core's corpus checks, pg_regress (make installcheck) and the
# pgTAP and TAP suites (prove).  Run as root or with sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ctxwin_deps
scripts/check-version.sh
ctxwin_build_install all tools/corpus_check tools/corpus_check_heap

# pg_virtualenv -t: a temporary cluster, dropped afterwards; PG* variables
# point the commands at it.
$(ctxwin_sudo) pg_virtualenv -t bash -c '
	set -e
	rc=0
	make installcheck || { cat regression.diffs 2>/dev/null; rc=1; }
	psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
	prove --timer --source pgTAP --pgtap-option "dbname=$PGDATABASE" \
		--source Perl --ext .t --ext .sql test/ || rc=1
	exit $rc
'

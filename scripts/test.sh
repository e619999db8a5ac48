#!/usr/bin/env bash
# Install what ctxwin needs, build it, and run every test on a throwaway
# cluster: the core's corpus checks, pg_regress (make installcheck) and the
# pgTAP and TAP suites (prove), then the window, summary and bill suites
# again with ctxwin.messages hash-partitioned.  Run as root or with sudo.
#
#   bash scripts/test.sh                  everything, on PostgreSQL 15
#   bash scripts/test.sh --pg 18          everything, on PostgreSQL 18 (built
#                                         from source and cached on first use)
#   bash scripts/test.sh test/worker.pl   one test file (or several)
# CTXWIN_PG=18 works as --pg 18 does.
set -euo pipefail
cd "$(dirname "$0")/.."
major=${CTXWIN_PG:-15}
files=()
while [ $# -gt 0 ]; do
	case $1 in
	--pg) major=$2; shift 2 ;;
	--pg=*) major=${1#--pg=}; shift ;;
	-h | --help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) files+=("$1"); shift ;;
	esac
done
. scripts/deps.sh
. scripts/pg.sh
. scripts/cluster.sh
ctxwin_deps
ctxwin_pg_use "$major"
echo "PostgreSQL: $(pg_config --version) ($PG_CONFIG)"
scripts/check-version.sh
# the test programs too: the TAP tests run as another OS user, who cannot
# write into the tree
ctxwin_build_install all tools/corpus_check tools/corpus_check_heap tools/corpus_check_huge tools/rules_check

# Where PostgreSQL's Perl test framework keeps its clusters and logs; pg_regress
# writes its pg_hba.conf for them.
testdir=$(mktemp -d /tmp/ctxwin-tap.XXXXXX)
chmod 755 "$testdir"
[ "$(id -u)" -eq 0 ] && chown postgres: "$testdir"
trap 'ctxwin_cluster_stop; rm -rf "$testdir"' EXIT
ctxwin_cluster_start

rc=0
verbose=-v # chosen files: every line of their output
if [ ${#files[@]} -eq 0 ]; then
	files=(test/)
	verbose=
	make installcheck PG_CONFIG="$PG_CONFIG" || { cat regression.diffs 2>/dev/null; rc=1; }
fi
psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
# The TAP tests run as the server's OS user: PostgreSQL's test framework
# refuses to run initdb as root.
ctxwin_as_pg env PATH="$PATH" PERL5LIB="$PERL5LIB" PG_CONFIG="$PG_CONFIG" \
	PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER" PGDATABASE="$PGDATABASE" \
	PG_REGRESS="$(dirname "$(pg_config --pgxs)")/../test/regress/pg_regress" \
	TESTDIR="$testdir" TESTDATADIR="$testdir/data" TESTLOGDIR="$testdir/log" \
	CTXWIN_PG_MAJOR="$CTXWIN_PG_MAJOR" HOME="$testdir" \
	prove $verbose --timer --source pgTAP --pgtap-option "dbname=$PGDATABASE" \
	--source Perl --ext .t --ext .sql --ext .pl "${files[@]}" || rc=1

# The whole run also runs the suites of the window, the summaries and the
# bill again with ctxwin.messages hash-partitioned by session (each file
# creates the extension itself, with the setting its connection carries).
if [ "$verbose" = "" ]; then
	echo "=== again, with ctxwin.messages hash-partitioned (ctxwin.messages_partitions = 8)"
	kind=$(PGOPTIONS="-c ctxwin.messages_partitions=8" psql -X -q -At -c "BEGIN" -c "CREATE EXTENSION ctxwin" \
		-c "SELECT relkind FROM pg_class WHERE oid = 'ctxwin.messages'::regclass" -c "ROLLBACK")
	if [ "$kind" != p ]; then
		echo "ctxwin.messages_partitions = 8 did not make ctxwin.messages partitioned (relkind: $kind)"
		rc=1
	fi
	PGOPTIONS="-c ctxwin.messages_partitions=8" prove --timer --source pgTAP --pgtap-option "dbname=$PGDATABASE" \
		test/window.sql test/walk.sql test/stable.sql test/summary_window.sql test/summarize.sql \
		test/extractive.sql test/request.sql test/usage.sql test/rls.sql || rc=1
fi
exit $rc

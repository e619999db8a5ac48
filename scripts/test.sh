#!/usr/bin/env bash
# Install what ctxwin needs, build it, and run every test on a throwaway
# cluster: pg_regress (make installcheck), the pgTAP and TAP suites (prove;
# the core's corpus checks are among them), then the window, summary and
# bill suites again with ctxwin.messages hash-partitioned, and beside all
# those the tests of the client packages (clients/python, clients/node),
# whose output follows theirs; last, the packages (on 15 the client
# packages from their files, on 18 the extension image).  Run as root or
# with sudo, from wherever the tree is.  It ends with a line per stage and
# the line "N passed, M failed"; the exit code is non-zero if anything failed.
#
#   bash scripts/test.sh                  everything, on PostgreSQL 15
#   bash scripts/test.sh --pg 18          everything, on PostgreSQL 18 (built
#                                         from source and cached on first use)
#   bash scripts/test.sh test/worker.pl   one test file (or several)
#   bash scripts/test.sh clients/python   the Python client's tests (or
#                                         clients/node: the TypeScript one's)
# CTXWIN_PG=18 works as --pg 18 does.  CTXWIN_PG_COPY=DIR tests against a
# private copy of the server's installation in DIR (scripts/pg.sh), for two
# trees tested side by side on one machine.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(pwd -P)
major=${CTXWIN_PG:-15}
files=()
while [ $# -gt 0 ]; do
	case $1 in
	--pg) major=$2; shift 2 ;;
	--pg=*) major=${1#--pg=}; shift ;;
	-h | --help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) files+=("$1"); shift ;;
	esac
done

# The files asked for, as paths in the tree (relative to its top; the TAP
# tests run from a copy of it, below).
tap_files=()
for f in "${files[@]}"; do
	[ -e "$f" ] || { echo "no such test file: $f (paths are relative to $tree)" >&2; exit 2; }
	r=$(realpath "$f")
	case $r in
	"$tree") r=. ;;
	"$tree"/*) r=${r#"$tree"/} ;;
	*) echo "not a file of this tree ($tree): $f" >&2; exit 2 ;;
	esac
	tap_files+=("$r")
done

# --- the outcome: a line per stage, then "N passed, M failed" ---------------
# A stage that stops before it reports its counts (a build that fails, a
# prove that dies) counts as one failed test, never as none.
n_passed=0
n_failed=0
outcome=()
stage= # the stage under way: failed if the script stops in it
# stage_done NAME PASSED FAILED [DETAIL]
stage_done() {
	local word=passed
	[ "$3" -gt 0 ] && word=failed
	outcome+=("$1: $word ($2 passed, $3 failed${4:+; $4})")
	n_passed=$((n_passed + $2))
	n_failed=$((n_failed + $3))
	stage=
}
testdir=
clients_beside= # the client tests' process, while they run beside the others
# kill_tree PID: a process and everything it started
kill_tree() {
	local c
	for c in $(pgrep -P "$1"); do kill_tree "$c"; done
	kill "$1" 2>/dev/null
}
finish() {
	local rc=$?
	set +e
	[ -n "$clients_beside" ] && { kill_tree "$clients_beside"; wait "$clients_beside"; }
	[ -n "$stage" ] && stage_done "$stage" 0 1 "it stopped before its end, exit code $rc"
	type ctxwin_cluster_stop >/dev/null 2>&1 && ctxwin_cluster_stop
	[ -n "$testdir" ] && rm -rf "$testdir"
	echo
	echo "=== the outcome on PostgreSQL $major"
	local l
	for l in "${outcome[@]}"; do echo "$l"; done
	[ "$rc" -ne 0 ] && [ "$n_failed" -eq 0 ] && n_failed=1 # never a silent pass
	echo "$n_passed passed, $n_failed failed"
	[ "$n_failed" -eq 0 ] && exit 0
	exit 1
}
trap finish EXIT
trap 'exit 130' INT TERM

# --- build, install, the throwaway cluster -----------------------------------
stage=setup
. scripts/deps.sh
. scripts/pg.sh
. scripts/cluster.sh
ctxwin_deps
ctxwin_cache
ctxwin_pg_use "$major"
echo "PostgreSQL: $(pg_config --version) ($PG_CONFIG)"
scripts/check-version.sh
# the test programs too (tools/)
ctxwin_build_install all tools/corpus_check tools/corpus_check_heap tools/corpus_check_huge tools/rules_check tools/image_check

# Where PostgreSQL's Perl test framework keeps its clusters and logs
# (pg_regress writes its pg_hba.conf for them), and the copy of the tree the
# TAP tests run from.
testdir=$(mktemp -d /tmp/ctxwin-tap.XXXXXX)
chmod 755 "$testdir"
[ "$(id -u)" -eq 0 ] && chown postgres: "$testdir"
# The TAP tests run as the server's OS user (PostgreSQL's test framework
# refuses to run initdb as root), who may not be able to read the tree: a
# clone in root's home (/root is mode 700), under any private directory, or
# made with umask 077.  So they run from a copy of the tree, with the test
# programs and the objects just built (test/build.pl reads them, and make
# -n must find them up to date: tar keeps their times), that every user can
# read.  Nothing writes into it.
copy=$testdir/tree
mkdir "$copy"
tar -C "$tree" -cf - --exclude=./.git --exclude=node_modules --exclude=./fuzz/build \
	--exclude=./results --exclude=./tmp_check --exclude=./log --exclude='./regression.*' \
	. | tar -C "$copy" -xf -
chmod -R a+rX "$copy"

ctxwin_cluster_start
stage=

# read_tally FILE: a prove run's counts (test/lib/CtxwinTally.pm) into
# t_passed, t_failed and t_detail; a prove that stopped before its summary
# counts as one failed test.
read_tally() {
	local skipped nfiles skipped_files bad
	if [ ! -s "$1" ]; then
		t_passed=0 t_failed=1 t_detail="prove stopped before its summary"
		return 0
	fi
	read -r t_passed t_failed skipped nfiles skipped_files bad <"$1"
	t_detail="$nfiles files"
	[ "$skipped_files" -gt 0 ] && t_detail="$t_detail ($skipped_files skipped whole)"
	[ "$skipped" -eq 1 ] && t_detail="$t_detail, 1 test skipped"
	[ "$skipped" -gt 1 ] && t_detail="$t_detail, $skipped tests skipped"
	[ -n "$bad" ] && t_detail="$t_detail; failed: $bad"
	return 0
}

# The client packages' tests, asked for by their directory.
clients=()
rest=()
for f in ${tap_files[@]+"${tap_files[@]}"}; do
	case $f in
	clients/python | clients/python/*) clients+=(clients/python) ;;
	clients/node | clients/node/*) clients+=(clients/node) ;;
	*) rest+=("$f") ;;
	esac
done
tap_files=(${rest[@]+"${rest[@]}"})
only_clients=
[ ${#clients[@]} -gt 0 ] && [ ${#tap_files[@]} -eq 0 ] && only_clients=1

verbose=-v # chosen files: every line of their output
# The client packages, against this cluster (each test makes a database of
# its own there), run as root from the tree: their tool chains (a virtualenv
# and node_modules) are installed by their own runners, from pinned versions.
# A runner that stops before its test runner's summary counts as failed.
# run_client C: C's runner, its output into $testdir/C.out (slashes made
# dashes) and its exit code into the .rc beside it.
client_out() { echo "$testdir/${1//\//-}"; }
# With a second argument, the output is also shown as it comes.
run_client() {
	local o
	o=$(client_out "$1")
	set +e
	if [ -n "${2:-}" ]; then
		bash "$tree/$1/run-tests.sh" 2>&1 | tee "$o.out"
		echo "${PIPESTATUS[0]}" >"$o.rc"
	else
		bash "$tree/$1/run-tests.sh" >"$o.out" 2>&1
		echo $? >"$o.rc"
	fi
	set -e
}
# client_done C: C's counts, from its output, as a stage.
client_done() {
	local c=$1 o line cp cf crc
	o=$(client_out "$c")
	crc=$(cat "$o.rc" 2>/dev/null || echo 1)
	if [ "$c" = clients/python ]; then
		# pytest's last line: "=== 35 passed, 7 warnings in 25.89s ===", "=== 1 failed, 34 passed ..."
		line=$(grep -E '^=+ .*[0-9]+ (passed|failed|errors?)\b.* in [0-9.]+s' "$o.out" | tail -n 1) || true
		cp=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+') || cp=0
		cf=$({ grep -oE '[0-9]+ (failed|errors?)' <<<"$line" || true; } | awk '{ n += $1 } END { print n + 0 }')
	else
		# node --test: "# pass 30", "# fail 0"
		line=$(grep -E '^# (pass|fail) [0-9]+$' "$o.out" | paste -sd' ') || true
		cp=$(grep -oE '# pass [0-9]+' <<<"$line" | grep -oE '[0-9]+') || cp=0
		cf=$(grep -oE '# fail [0-9]+' <<<"$line" | grep -oE '[0-9]+') || cf=0
	fi
	if [ -z "$line" ]; then
		stage_done "$c" 0 1 "its runner stopped before the tests' summary, exit code $crc"
	elif [ "$crc" -ne 0 ] && [ "${cf:-0}" -eq 0 ]; then
		stage_done "$c" "${cp:-0}" 1 "the runner exited $crc"
	else
		stage_done "$c" "${cp:-0}" "${cf:-0}"
	fi
}

# A whole run runs the client packages' tests beside pg_regress, prove and
# the partitioned pass (they make databases of their own in the cluster and
# mostly wait: on their frameworks, the mock LLM, the worker), and shows
# their output after those.
if [ -n "$only_clients" ]; then
	verbose=-v
elif [ ${#tap_files[@]} -eq 0 ]; then
	clients=(clients/python clients/node)
	tap_files=(test/)
	verbose=
	ctxwin_node_deps
	( for c in "${clients[@]}"; do run_client "$c"; done ) &
	clients_beside=$!
	echo "=== ${clients[*]}: their tests run beside the stages that follow; their output comes after them"
	stage=pg_regress
	set +e
	# pg_regress only: the pgTAP suites make installcheck would run too are prove's, below
	make installcheck PG_CONFIG="$PG_CONFIG" PGTAP=no 2>&1 | tee "$testdir/regress.out"
	rrc=${PIPESTATUS[0]}
	set -e
	[ "$rrc" -ne 0 ] && cat regression.diffs 2>/dev/null
	# pg_regress's last words: "All N tests passed." or "F of N tests failed."
	if all=$(grep -oE 'All [0-9]+ tests passed' "$testdir/regress.out" | grep -oE '[0-9]+') && [ "$rrc" -eq 0 ]; then
		stage_done pg_regress "$all" 0
	elif some=$(grep -oE '[0-9]+ of [0-9]+ tests failed' "$testdir/regress.out"); then
		read -r f _ n _ <<<"$some"
		stage_done pg_regress $((n - f)) "$f"
	else
		stage_done pg_regress 0 1 "make installcheck stopped before pg_regress's summary, exit code $rrc"
	fi
fi

if [ -z "$only_clients" ]; then
stage=prove
psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
(
	cd "$copy"
	ctxwin_as_pg env PATH="$PATH" PERL5LIB="$copy/test/lib:$PERL5LIB" PG_CONFIG="$PG_CONFIG" \
		PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER" PGDATABASE="$PGDATABASE" \
		PG_REGRESS="$(dirname "$(pg_config --pgxs)")/../test/regress/pg_regress" \
		TESTDIR="$testdir" TESTDATADIR="$testdir/data" TESTLOGDIR="$testdir/log" \
		CTXWIN_PG_MAJOR="$CTXWIN_PG_MAJOR" HOME="$testdir" CTXWIN_TALLY="$testdir/prove.tally" \
		prove $verbose --timer --formatter CtxwinTally --source pgTAP --pgtap-option "dbname=$PGDATABASE" \
		--source Perl --ext .sql --ext .pl "${tap_files[@]}"
) || true
read_tally "$testdir/prove.tally"
stage_done prove "$t_passed" "$t_failed" "$t_detail"
fi

# The whole run also runs the suites of the window, the summaries, the
# bill, content parts and recall again with ctxwin.messages hash-partitioned
# by session (each file creates the extension itself, with the setting its
# connection carries).
if [ "$verbose" = "" ] && [ -z "$only_clients" ]; then
	stage=partitioned
	echo "=== again, with ctxwin.messages hash-partitioned (ctxwin.messages_partitions = 8)"
	kind=$(PGOPTIONS="-c ctxwin.messages_partitions=8" psql -X -q -At -c "BEGIN" -c "CREATE EXTENSION ctxwin" \
		-c "SELECT relkind FROM pg_class WHERE oid = 'ctxwin.messages'::regclass" -c "ROLLBACK") || true
	[ "$kind" = p ] ||
		echo "ctxwin.messages_partitions = 8 did not make ctxwin.messages partitioned (relkind: $kind)"
	(
		cd "$copy"
		PGOPTIONS="-c ctxwin.messages_partitions=8" PERL5LIB="$copy/test/lib:$PERL5LIB" \
			CTXWIN_TALLY="$testdir/partitioned.tally" \
			prove --timer --formatter CtxwinTally --source pgTAP --pgtap-option "dbname=$PGDATABASE" \
			test/window.sql test/walk.sql test/stable.sql test/summary_window.sql test/summarize.sql \
			test/extractive.sql test/request.sql test/usage.sql test/rls.sql test/parts.sql \
			test/recall.sql test/window_ids.sql test/sessions_ensure.sql test/retract.sql
	) || true
	read_tally "$testdir/partitioned.tally"
	# the relkind check is one more test of this stage
	if [ "$kind" = p ]; then
		stage_done partitioned $((t_passed + 1)) "$t_failed" "$t_detail, and the relkind check"
	else
		stage_done partitioned "$t_passed" $((t_failed + 1)) "$t_detail; failed: the relkind check"
	fi
fi

if [ -n "$clients_beside" ]; then
	# they ran beside prove (above): their output now, one after the other
	stage=clients
	wait "$clients_beside" || true
	clients_beside=
	for c in "${clients[@]}"; do
		echo "=== $c (run beside the stages above)"
		cat "$(client_out "$c").out"
		client_done "$c"
	done
else
	for c in ${clients[@]+"${clients[@]}"}; do
		stage=$c
		echo "=== $c"
		[ "$c" = clients/node ] && ctxwin_node_deps
		run_client "$c" show
		client_done "$c"
	done
fi

# The packages, built and tested once, in a full run: on PostgreSQL 18 the
# extension image loaded through extension_control_path (scripts/oci.sh
# --test), on 15 the client packages installed from their files
# (scripts/dist.sh --clients).  Each counts as one test.  The Debian
# packages' test builds Debian roots and takes longer: scripts/deb.sh
# --test, run on its own.
if [ ${#files[@]} -eq 0 ]; then
	pkg=
	case $major in
	18) pkg="scripts/oci.sh --test" ;;
	15) pkg="scripts/dist.sh --clients" ;;
	esac
	if [ -n "$pkg" ]; then
		stage=packages
		echo "=== $pkg"
		if bash $pkg; then
			stage_done "$pkg" 1 0
		else
			stage_done "$pkg" 0 1
		fi
		stage=
	fi
fi


#!/usr/bin/env bash
# Install what ctxwin needs, build and install it, and run the demo
# (demo/demo.sql) on a throwaway PostgreSQL 15 cluster, removed at the end.
# Offline once the packages are installed; run as root or with sudo.  The
# setup's output goes to a log file, shown only if the setup fails.
# CTXWIN_PG_COPY=DIR installs into and runs a private copy of the server
# (scripts/pg.sh), as scripts/test.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
. scripts/pg.sh
. scripts/cluster.sh

log=$(mktemp /tmp/ctxwin-demo-setup.XXXXXX.log)
setup_ok=
exec 3>&1 # the terminal, for what the trap says while the setup's output goes to the log
finish() {
	local rc=$?
	set +e
	ctxwin_cluster_stop >>"$log" 2>&1
	if [ -z "$setup_ok" ]; then
		{
			echo "failed (exit code $rc). The last lines of the setup's log, $log:"
			tail -n 25 "$log"
		} >&3
	else
		rm -f "$log"
	fi
	exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

cat <<'BANNER'
ctxwin demo: an LLM conversation kept in PostgreSQL, and the context window
ctxwin gives back before each model call.  It installs PostgreSQL 15 and the
build tools if they are missing, builds and installs ctxwin, and starts a
throwaway cluster (removed at the end).  Then, offline, with no LLM:
  1. token counts, exact as OpenAI's tiktoken counts them, checked against
     tiktoken's own counts on more than 3,000 texts;
  2. a chat of 30 turns stored as plain rows, and the window that fits a
     budget of 400 tokens;
  3. a summary of the oldest messages (extractive: sentences chosen from
     the chat itself, no network), and the window after it;
  4. the background worker summarizing another session by itself;
  5. the proof that summarizing deleted no message: the rows before and after.

BANNER
printf 'Setting up (packages, build, cluster; the log is %s) ... ' "$log"
t0=$SECONDS
{
	ctxwin_deps
	ctxwin_pg_server 15
	ctxwin_build_install
	ctxwin_cluster_start "shared_preload_libraries = 'ctxwin'" "ctxwin.databases = 'ctxwin_demo_worker'"
} >"$log" 2>&1
setup_ok=1
echo "done in $((SECONDS - t0)) s."

# psql's client encoding: UTF8 whatever the terminal's locale (without LANG,
# psql would take SQL_ASCII and misalign the columns of non-ASCII text).
PGCLIENTENCODING=UTF8 psql -X -v ON_ERROR_STOP=1 -f demo/demo.sql

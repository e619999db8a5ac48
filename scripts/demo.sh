#!/usr/bin/env bash
# Install what ctxwin needs, build and install it, and run the demo on a
# throwaway PostgreSQL cluster.  Offline; run as root or with sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ctxwin_deps
ctxwin_build_install
$(ctxwin_sudo) env PGCLIENTENCODING=UTF8 pg_virtualenv -t \
	-o shared_preload_libraries=ctxwin -o ctxwin.databases=ctxwin_demo_worker \
	psql -X -v ON_ERROR_STOP=1 -f demo/demo.sql

#!/usr/bin/env bash
# The tests of the TypeScript client (clients/node), against a running
# PostgreSQL with ctxwin installed, named by libpq's environment variables
# (PGHOST, PGPORT, PGUSER, PGDATABASE): each test file creates a database of
# its own there, with CREATE EXTENSION ctxwin, and drops it.  The chat model
# is test/mockllm.py, which the tests start on a free loopback port.
#
#   bash clients/node/run-tests.sh [test/NAME.test.ts ...]
#
# Steps: npm ci (node_modules here, git-ignored), the READMEs' ts blocks made
# modules in .snippets/ (test/snippets.mjs; git-ignored), tsc --noEmit
# (strict: sources, tests and those modules), the build of them into
# .test-build/, then node --test, whose closing lines ("# pass N",
# "# fail M") are the summary.
set -euo pipefail
cd "$(dirname "$0")"

command -v python3 >/dev/null || { echo "python3 is needed for test/mockllm.py" >&2; exit 1; }
: "${PGHOST:?set PGHOST (and PGPORT, PGUSER) to a cluster with ctxwin installed}"

npm ci --no-audit --no-fund --loglevel=error
node test/snippets.mjs
npx tsc --noEmit -p .
rm -rf .test-build
npx tsc -p .

files=()
if [ $# -gt 0 ]; then
	for f in "$@"; do
		f=${f#clients/node/}
		f=${f%.ts}
		files+=(".test-build/${f}.js")
	done
else
	files=(.test-build/test/*.test.js)
fi
exec node --test --test-concurrency=1 "${files[@]}"

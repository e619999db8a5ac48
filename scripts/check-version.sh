#!/usr/bin/env bash
# The version is set once, in ctxwin.control; META.json and the install
# script's name must agree with it.
set -euo pipefail
cd "$(dirname "$0")/.."
v=$(sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)
fail=0
grep -q "\"version\": \"$v\"" META.json || { echo "META.json does not give version $v"; fail=1; }
grep -q "\"file\": \"sql/ctxwin--$v.sql\"" META.json || { echo "META.json does not point at sql/ctxwin--$v.sql"; fail=1; }
[ -f "sql/ctxwin--$v.sql" ] || { echo "sql/ctxwin--$v.sql is missing"; fail=1; }
exit $fail

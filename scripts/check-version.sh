#!/usr/bin/env bash
# The version is set once, in ctxwin.control; META.json must agree with it,
# and an install script or a chain of update scripts must reach it.
set -euo pipefail
cd "$(dirname "$0")/.."
v=$(sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)
fail=0
grep -q "\"version\": \"$v\"" META.json || { echo "META.json does not give version $v"; fail=1; }
reach() {
	[ -f "sql/ctxwin--$1.sql" ] && return 0
	local f
	for f in sql/ctxwin--*--"$1".sql; do
		[ -f "$f" ] || continue
		f=${f#sql/ctxwin--}
		reach "${f%%--*}" && return 0
	done
	return 1
}
reach "$v" || { echo "no install script or chain of update scripts in sql/ reaches version $v"; fail=1; }
exit $fail

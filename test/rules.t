#!/usr/bin/env bash
# The policy's pure functions (src/rules.c: the summary triggers, the
# packing of a window, the water-filling cut) outside the server, on
# boundary cases and on generated cases against brute-force references.
cd "$(dirname "$0")/.." || exit 1
[ -x tools/rules_check ] || make -s tools/rules_check >/dev/null ||
	{ echo "Bail out! could not build tools/rules_check"; exit 1; }
exec tools/rules_check

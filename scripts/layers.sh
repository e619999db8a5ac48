#!/usr/bin/env bash
# The graph of src/'s folders, from the built objects' symbols (nm): an edge
# A -> B where an object of folder A uses a symbol an object of folder B
# defines; src/ctxwin.c, the module's entry, is "(module)".  Prints each
# folder, lowest layer first, with the folders it uses, and fails (exit 1,
# naming the folders of the cycle) if the graph has a cycle.  `make layers`
# runs it after the build.
#
#   scripts/layers.sh [OBJECT ...]     (default: every src/**/*.o)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
	mapfile -t objs < <(find src -name '*.o' | sort)
else
	objs=("$@")
fi
[ ${#objs[@]} -gt 0 ] || { echo "no objects under src/: build first (make)" >&2; exit 2; }

# "folder kind symbol" for every defined (D) and undefined (U) symbol
syms=$(for o in "${objs[@]}"; do
	f=${o##*src/}
	case $f in */*) f=${f%%/*} ;; *) f="(module)" ;; esac
	nm "$o" | awk -v f="$f" '$1 == "U" { print f, "U", $2 } $2 ~ /^[TDBRC]$/ { print f, "D", $3 }'
done)
# folder -> folder edges, each once
edges=$(awk '$2 == "D" { def[$3] = $1 } $2 == "U" { use[NR] = $1 " " $3 }
	END { for (i in use) { split(use[i], a, " "); if ((a[2] in def) && def[a[2]] != a[1]) print a[1], def[a[2]] } }' <<<"$syms" | sort -u)
folders=$(awk '{ print $1 }' <<<"$syms" | sort -u)

# tsort orders the pairs "user used" used-first when reversed; it reports a loop on stderr
order=$( { awk '{ print $2, $1 }' <<<"$edges"; for f in $folders; do echo "$f $f"; done; } | tsort 2>/tmp/layers.$$ ) || true
loop=$(grep -v '^tsort: -: input contains a loop:$' /tmp/layers.$$ | sed 's/^tsort: //' | tr '\n' ' ' || true)
rm -f /tmp/layers.$$
echo "src/ folders, lowest layer first: each uses only folders listed before it"
for f in $order; do
	uses=$(awk -v f="$f" '$1 == f { printf "%s%s", sep, $2; sep = ", " }' <<<"$edges")
	printf '  %-10s -> %s\n' "$f" "${uses:-(none)}"
done
if [ -n "$loop" ]; then
	echo "cycle between the folders: $loop" >&2
	exit 1
fi

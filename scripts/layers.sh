#!/usr/bin/env bash
# The graph of src/'s folders, from the built objects' symbols (nm): an edge
# A -> B where an object of folder A uses a symbol an object of folder B
# defines; src/ctxwin.c, the module's entry, is "(module)".  Prints each
# folder, lowest layer first, with the folders it uses, and fails (exit 1,
# naming the folders of the cycle) if the graph has a cycle.  The files of
# the folders named in file_graphs (below) are held to the same rule among
# themselves: the graph of their objects, read the same way, is printed
# after the folders', and a cycle in it fails too (naming its files).
# `make layers` runs it after the build.
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

# The folders whose files may not use each other in a circle either.
file_graphs="worker"

# "folder file kind symbol" for every defined (D) and undefined (U) symbol
# (file: the source's name, x.c for x.o)
syms=$(for o in "${objs[@]}"; do
	f=${o##*src/}
	case $f in */*) f=${f%%/*} ;; *) f="(module)" ;; esac
	c=$(basename "$o" .o).c
	nm "$o" | awk -v f="$f" -v c="$c" '$1 == "U" { print f, c, "U", $2 } $2 ~ /^[TDBRC]$/ { print f, c, "D", $3 }'
done)

# edges FIELD: "user used" edges, each once, between the nodes that field
# of syms names (1: folders, 2: files) where one uses a symbol the other defines
edges() {
	awk -v k="$1" '$3 == "D" { def[$4] = $k } $3 == "U" { use[NR] = $k " " $4 }
		END { for (i in use) { split(use[i], a, " "); if ((a[2] in def) && def[a[2]] != a[1]) print a[1], def[a[2]] } }' | sort -u
}

# graph TITLE EDGES NODES: prints TITLE, then the nodes lowest first, each
# with the nodes it uses; the nodes of a cycle go into $loop ('' if none)
graph() {
	local order uses n err
	err=$(mktemp)
	# tsort orders the pairs "user used" used-first when reversed; it reports a loop on stderr
	order=$( { awk '{ print $2, $1 }' <<<"$2"; for n in $3; do echo "$n $n"; done; } | tsort 2>"$err" ) || true
	loop=$(grep -v '^tsort: -: input contains a loop:$' "$err" | sed 's/^tsort: //' | awk '!seen[$0]++' | tr '\n' ' ' || true)
	rm -f "$err"
	echo "$1"
	for n in $order; do
		uses=$(awk -v n="$n" '$1 == n { printf "%s%s", sep, $2; sep = ", " }' <<<"$2")
		printf '  %-10s -> %s\n' "$n" "${uses:-(none)}"
	done
}

failed=0
graph "src/ folders, lowest layer first: each uses only folders listed before it" \
	"$(edges 1 <<<"$syms")" "$(awk '{ print $1 }' <<<"$syms" | sort -u)"
if [ -n "$loop" ]; then
	echo "cycle between the folders: $loop" >&2
	failed=1
fi
for d in $file_graphs; do
	in_d=$(awk -v d="$d" '$1 == d' <<<"$syms")
	[ -n "$in_d" ] || continue
	echo
	graph "src/$d/ files, lowest first: each uses only files listed before it" \
		"$(edges 2 <<<"$in_d")" "$(awk '{ print $2 }' <<<"$in_d" | sort -u)"
	if [ -n "$loop" ]; then
		echo "cycle between the files of src/$d/: $loop" >&2
		failed=1
	fi
done
exit $failed

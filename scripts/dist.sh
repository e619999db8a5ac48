#!/usr/bin/env bash
# The release archive for PGXN: ctxwin-VERSION.zip, made by git archive from
# a commit (HEAD unless --ref), every file under the directory ctxwin-VERSION/,
# VERSION being default_version in that commit's ctxwin.control.  Files marked
# export-ignore in .gitattributes are left out.  Then the archive is checked:
# unpacked into a scratch directory, it must hold what a build needs (the
# vocabularies, the install scripts, the tests), pass scripts/check-version.sh,
# and build with make against PG_CONFIG (nothing is installed).  An archive
# that fails its check is deleted.
#
#   scripts/dist.sh                 make the archive of HEAD and check it
#   scripts/dist.sh --ref v0.2.0    of another commit or tag
#   scripts/dist.sh --no-check      make it only
#   scripts/dist.sh --check [ZIP]   check an archive made before (default:
#                                   the one of HEAD's version)
#
# PG_CONFIG=/path/to/pg_config picks the server to build against (default:
# pg_config on PATH).  `make dist` runs the first form with the Makefile's
# PG_CONFIG.
set -euo pipefail
cd "$(dirname "$0")/.."

ref=HEAD make_zip=1 check=1 zip=
while [ $# -gt 0 ]; do
	case $1 in
	--ref) ref=$2; shift 2 ;;
	--ref=*) ref=${1#--ref=}; shift ;;
	--no-check) check=0; shift ;;
	--check)
		make_zip=0; shift
		if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then zip=$1; shift; fi ;;
	-h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "dist.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
	esac
done

die() {
	echo "dist.sh: $*" >&2
	exit 1
}

if [ -z "$zip" ]; then
	git rev-parse --git-dir >/dev/null 2>&1 ||
		die "not in a git repository: the archive is made from git (or give --check ZIP)"
	version=$(git show "$ref:ctxwin.control" | sed -n "s/^default_version = '\(.*\)'/\1/p")
	[ -n "$version" ] || die "no default_version in $ref:ctxwin.control"
	zip=ctxwin-$version.zip
fi

if [ "$make_zip" = 1 ]; then
	commit=$(git rev-parse --verify "$ref^{commit}")
	if [ "$ref" = HEAD ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
		echo "dist.sh: warning: the working tree has uncommitted changes; the archive is made from HEAD without them" >&2
	fi
	rm -f "$zip"
	git archive --format zip --prefix "ctxwin-$version/" -o "$zip" "$commit"
	echo "made $zip from $(git rev-parse --short "$commit") ($(du -h "$zip" | cut -f1), $(unzip -Z1 "$zip" | grep -vc '/$') files)"
fi
[ "$check" = 1 ] || exit 0

# --- the check ---------------------------------------------------------------
[ -f "$zip" ] || die "no archive $zip"
name=$(basename "$zip" .zip)
[[ $name =~ ^ctxwin-[0-9]+\.[0-9]+\.[0-9]+ ]] || die "$zip: not named ctxwin-VERSION.zip"
version=${name#ctxwin-}
pgc=${PG_CONFIG:-pg_config}
case $pgc in
*/*) pgc=$(realpath "$pgc") ;;
*) pgc=$(command -v "$pgc") || die "pg_config not found: set PG_CONFIG=/path/to/pg_config" ;;
esac
[ -x "$pgc" ] || die "PG_CONFIG $pgc is not an executable"

failed() {
	echo "dist check FAILED for $zip: $*" >&2
	if [ "$make_zip" = 1 ]; then
		rm -f "$zip"
		echo "(deleted $zip; scripts/dist.sh --no-check makes it without the check)" >&2
	fi
	exit 1
}

scratch=$(mktemp -d /tmp/ctxwin-dist.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

unzip -tq "$zip" >/dev/null || failed "the zip archive is corrupt"
outside=$(unzip -Z1 "$zip" | grep -v "^$name/" || true)
[ -z "$outside" ] || failed "entries outside $name/: $(echo "$outside" | head -3 | tr '\n' ' ')"
unzip -q "$zip" -d "$scratch"
tree=$scratch/$name

# What a build, an install and the tests need, and what must not be there.
missing=()
for f in META.json ctxwin.control Makefile LICENSE README.md 'docs/*.md' CHANGELOG.md \
	vocab/SHA256SUMS 'sql/ctxwin--*.sql' src/tokenizer/bpe.c tools/gen_vocab.c \
	test/corpus scripts/test.sh scripts/check-version.sh; do
	# a pattern (quoted above), expanded in the unpacked tree
	compgen -G "$tree/$f" >/dev/null || missing+=("$f")
done
while read -r _ file; do
	[ -n "$file" ] && { [ -f "$tree/vocab/$file" ] || missing+=("vocab/$file"); }
done <"$tree/vocab/SHA256SUMS"
# pg_regress's tests (REGRESS in the Makefile, under test/) and their expected output
regress=$(sed -n 's/^REGRESS = //p' "$tree/Makefile")
[ -n "$regress" ] || missing+=("the Makefile's REGRESS")
for t in $regress; do
	for f in "test/sql/$t.sql" "test/expected/$t.out"; do
		[ -f "$tree/$f" ] || missing+=("$f")
	done
done
[ ${#missing[@]} -eq 0 ] || failed "missing from the archive: ${missing[*]}"
for f in .ci .gitattributes .gitignore bench fuzz; do
	[ ! -e "$tree/$f" ] || failed "$f is in the archive (export-ignore in .gitattributes)"
done
for f in scripts/test.sh scripts/check-version.sh scripts/demo.sh; do
	[ -x "$tree/$f" ] || failed "$f is not executable in the archive"
done

echo "checking the versions in $name"
bash "$tree/scripts/check-version.sh" "$tree" || failed "scripts/check-version.sh fails in the archive"
[ "$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$tree/ctxwin.control")" = "$version" ] ||
	failed "the archive's ctxwin.control does not give version $version"

echo "building $name in $scratch with $("$pgc" --version) ($pgc)"
# The build runs on its own, not as part of the make that called this script.
if ! env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -C "$tree" PG_CONFIG="$pgc" >"$scratch/build.log" 2>&1; then
	tail -n 40 "$scratch/build.log" >&2
	failed "make PG_CONFIG=$pgc does not build the archive (the log's end is above)"
fi
[ -f "$tree/ctxwin.so" ] || failed "make succeeded but built no ctxwin.so"
grep -i 'warning:' "$scratch/build.log" >&2 && echo "dist.sh: the build above has warnings" >&2
echo "dist check passed: $zip builds against PostgreSQL $("$pgc" --version | sed 's/^PostgreSQL //')"

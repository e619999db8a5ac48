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
#   scripts/dist.sh --clients       the client packages instead, from HEAD:
#                                   the Python client's wheel and sdist
#                                   (python -m build, pinned, in a virtualenv
#                                   of its own) in dist/python/, the Node
#                                   client's npm pack tarball in dist/node/,
#                                   each checked (below)
#
# PG_CONFIG=/path/to/pg_config picks the server to build against (default:
# pg_config on PATH).  `make dist` runs the first form with the Makefile's
# PG_CONFIG.
#
# The client packages' check: the version in each is default_version; the
# wheel and the sdist hold the package's modules, py.typed and the ctxwin
# command, the sdist builds the same wheel again; installed from the wheel
# into a fresh virtualenv (with its dependency psycopg), `import ctxwin`
# gives the version and `ctxwin --help` runs.  The npm tarball holds
# package.json, the READMEs and the built dist/ of every export, nothing
# else; installed with npm into an empty project, each export imports.
# CTXWIN_PY_PACKAGE=dist/python/ctxwin-VERSION-py3-none-any.whl
# bash clients/python/run-tests.sh tests the client from the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

ref=HEAD make_zip=1 check=1 zip= clients=0
while [ $# -gt 0 ]; do
	case $1 in
	--ref) ref=$2; shift 2 ;;
	--ref=*) ref=${1#--ref=}; shift ;;
	--no-check) check=0; shift ;;
	--check)
		make_zip=0; shift
		if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then zip=$1; shift; fi ;;
	--clients) clients=1; shift ;;
	-h | --help) sed -n '2,39s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "dist.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
	esac
done

die() {
	echo "dist.sh: $*" >&2
	exit 1
}

# --- the client packages (--clients) -----------------------------------------
# pinned: the build frontend and the backend pyproject.toml asks for
PY_BUILD_PINS="build==1.2.2.post1 setuptools==80.9.0 wheel==0.45.1"
clients_dist() {
	local version commit py node venv out=dist
	version=$(git show "$ref:ctxwin.control" | sed -n "s/^default_version = '\(.*\)'/\1/p")
	commit=$(git rev-parse --verify "$ref^{commit}")
	scratch=$(mktemp -d /tmp/ctxwin-dist.XXXXXX)
	trap 'rm -rf "$scratch"' EXIT
	git archive "$commit" clients | tar -x -C "$scratch"
	py=$scratch/clients/python node=$scratch/clients/node
	mkdir -p "$out/python" "$out/node"
	rm -f "$out"/python/* "$out"/node/*

	# the Python client: python -m build (no isolation: the pinned backend)
	venv=${CTXWIN_CACHE:-/var/cache/ctxwin}/py-build-$(echo "$PY_BUILD_PINS" | sha256sum | cut -c1-16)
	if [ ! -f "$venv/.complete" ]; then
		rm -rf "$venv"
		python3 -m venv "$venv"
		"$venv/bin/python" -m pip install -q $PY_BUILD_PINS
		touch "$venv/.complete"
	fi
	"$venv/bin/python" -m build --no-isolation --outdir "$scratch/py-out" "$py" >"$scratch/py-build.log" 2>&1 ||
		{ cat "$scratch/py-build.log" >&2; die "python -m build failed"; }
	grep -i 'warning' "$scratch/py-build.log" | grep -v 'byte-compiling is disabled' | sort -u |
		sed 's/^/python -m build: /' >&2 || true
	local whl sdist
	whl=$scratch/py-out/ctxwin-$version-py3-none-any.whl
	sdist=$scratch/py-out/ctxwin-$version.tar.gz
	[ -f "$whl" ] && [ -f "$sdist" ] || die "python -m build made $(ls "$scratch/py-out" | paste -sd' '), not ctxwin-$version's wheel and sdist"
	"$venv/bin/python" - "$whl" "$sdist" "$version" <<'PY' || die "the Python packages fail their check"
import sys, tarfile, zipfile
whl, sdist, version = sys.argv[1:]
names = set(zipfile.ZipFile(whl).namelist())
for need in ("ctxwin/__init__.py", "ctxwin/py.typed", "ctxwin/cli.py", "ctxwin/client.py",
             "ctxwin-%s.dist-info/METADATA" % version, "ctxwin-%s.dist-info/entry_points.txt" % version):
    assert need in names, "the wheel lacks " + need
meta = zipfile.ZipFile(whl).read("ctxwin-%s.dist-info/METADATA" % version).decode()
assert "\nVersion: %s\n" % version in meta, "the wheel's METADATA is not version " + version
assert "ctxwin = ctxwin.cli:main" in zipfile.ZipFile(whl).read("ctxwin-%s.dist-info/entry_points.txt" % version).decode()
bad = [n for n in names if "/tests/" in n or n.startswith("tests/") or n.endswith(".pyc")]
assert not bad, "the wheel holds " + " ".join(bad[:3])
snames = set(tarfile.open(sdist).getnames())
top = "ctxwin-%s/" % version
for need in ("pyproject.toml", "README.md", "PKG-INFO", "src/ctxwin/__init__.py", "src/ctxwin/py.typed"):
    assert top + need in snames, "the sdist lacks " + need
print("python: %s (%d files), %s (%d files)" % (whl.rsplit("/", 1)[1], len(names), sdist.rsplit("/", 1)[1], len(snames)))
PY
	# the sdist builds the same wheel (its files; zip times aside)
	mkdir "$scratch/resdist"
	tar -xzf "$sdist" -C "$scratch/resdist"
	"$venv/bin/python" -m build --no-isolation --wheel --outdir "$scratch/py-again" "$scratch/resdist/ctxwin-$version" \
		>>"$scratch/py-build.log" 2>&1 || die "the sdist does not build a wheel"
	# (the names read with Python's zipfile: unzip may not be installed, and
	# a listing that failed would compare equal)
	names_of() { (cd "$scratch" && "$venv/bin/python" -c 'import sys, zipfile; print("\n".join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))' "$1"); }
	a=$(names_of "$whl") && b=$(names_of "$scratch/py-again/$(basename "$whl")") && [ -n "$a" ] && [ "$a" = "$b" ] ||
		die "the wheel built from the sdist has other files than the wheel"
	# installed from the wheel, with its dependency, into a fresh virtualenv
	python3 -m venv "$scratch/try-py"
	"$scratch/try-py/bin/python" -m pip install -q "$whl" >"$scratch/try-py.log" 2>&1 ||
		{ cat "$scratch/try-py.log" >&2; die "pip cannot install the wheel"; }
	[ "$(cd / && "$scratch/try-py/bin/python" -c 'import ctxwin; print(ctxwin.__version__)')" = "$version" ] ||
		die "the installed wheel's ctxwin.__version__ is not $version"
	"$scratch/try-py/bin/ctxwin" --help >/dev/null || die "the installed wheel's ctxwin command fails"
	cp "$whl" "$sdist" "$out/python/"

	# the Node client: npm pack of the committed build (dist/)
	command -v npm >/dev/null || die "npm is needed for the Node client's package"
	local tgz
	tgz=$(cd "$node" && npm pack --silent --pack-destination "$scratch" 2>"$scratch/npm.log" | tail -1) ||
		{ cat "$scratch/npm.log" >&2; die "npm pack failed"; }
	tgz=$scratch/$tgz
	[ "$(basename "$tgz")" = "ctxwin-$version.tgz" ] || die "npm pack made $(basename "$tgz"), not ctxwin-$version.tgz"
	tar -tzf "$tgz" | sort >"$scratch/npm-files"
	local f
	for f in package/package.json package/README.md package/CHANGELOG.md \
		package/dist/index.js package/dist/index.d.ts package/dist/ai.js package/dist/langgraph.js package/dist/langchain.js; do
		grep -qx "$f" "$scratch/npm-files" || die "the npm package lacks ${f#package/}"
	done
	! grep -vE '^package/(package\.json|README\.md|CHANGELOG\.md|LICENSE|dist/.*)$' "$scratch/npm-files" ||
		die "the npm package holds files other than package.json, the READMEs and dist/ (above)"
	[ "$(tar -xzOf "$tgz" package/package.json | node -p 'JSON.parse(require("fs").readFileSync(0)).version')" = "$version" ] ||
		die "the npm package's version is not $version"
	# installed into an empty project: every export imports (its optional
	# peers absent: the exports that need them load them only when used)
	mkdir "$scratch/try-node"
	(cd "$scratch/try-node" && echo '{"name":"try","private":true,"type":"module"}' >package.json &&
		npm install --no-audit --no-fund --loglevel=error "$tgz" >"$scratch/npm-install.log" 2>&1) ||
		{ cat "$scratch/npm-install.log" >&2; die "npm cannot install the tarball"; }
	(cd "$scratch/try-node" && node --input-type=module -e "
		const m = await import('ctxwin');
		if (typeof m !== 'object' || Object.keys(m).length === 0) throw new Error('ctxwin exports nothing');
		console.log('node: ctxwin-$version.tgz ($(grep -c . "$scratch/npm-files") files), exports ' + Object.keys(m).length + ' names');
	") || die "the installed npm package does not import"
	cp "$tgz" "$out/node/"
	echo "client packages of $(git rev-parse --short "$commit") in $out/python and $out/node"
}

if [ "$clients" = 1 ]; then
	clients_dist
	exit 0
fi

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

#!/usr/bin/env bash
# Tests of the Python client (clients/python): a virtualenv outside the tree
# with the pinned frameworks of requirements-test.txt and the package
# installed from this directory, then mypy --strict on the package, then
# pytest against the PostgreSQL cluster libpq's environment names (PGHOST,
# PGPORT, PGUSER, PGDATABASE), which must have ctxwin installed and
# available.  The tests create a database of their own there and start the
# mock LLM (test/mockllm.py) themselves.
#
#   bash clients/python/run-tests.sh [pytest arguments]
#
# The virtualenv is $CTXWIN_CACHE/py-venv-<hash of requirements-test.txt and
# pyproject.toml> (CTXWIN_CACHE: /var/cache/ctxwin; for a user other than
# root who cannot write there, $CTXWIN_CACHE/USER), made once and reused.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${CTXWIN_CACHE:-/var/cache/ctxwin}
python=${PYTHON:-python3}

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
	echo "run-tests.sh: Python 3.10 or later is needed ($python is $("$python" --version 2>&1))" >&2
	exit 1
fi
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
	echo "run-tests.sh: installing python3-venv"
	if [ "$(id -u)" -eq 0 ]; then
		apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
	else
		sudo apt-get update -qq && sudo apt-get install -y -qq python3-venv >/dev/null
	fi
fi

hash=$(cat "$here/requirements-test.txt" "$here/pyproject.toml" | sha256sum | cut -c1-16)
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# as a user with sudo, a directory of the user's own in root's cache
. "$here/../../scripts/deps.sh"
export CTXWIN_CACHE=$cache
ctxwin_cache
cache=$CTXWIN_CACHE
venv=$cache/py-venv-$pyver-$hash
mkdir -p "$cache"
if [ ! -f "$venv/.complete" ]; then
	echo "run-tests.sh: making the virtualenv $venv"
	rm -rf "$venv"
	"$python" -m venv "$venv"
	"$venv/bin/python" -m pip install -q --upgrade pip
	"$venv/bin/python" -m pip install -q -r "$here/requirements-test.txt"
	touch "$venv/.complete"
fi
"$venv/bin/python" -m pip check >/dev/null || { "$venv/bin/python" -m pip check; exit 1; }
# the package itself, from this tree, every run (not editable: what users
# install), into a directory of this run put first on the module path and
# PATH (its `ctxwin` command): never into the shared virtualenv, where the
# run of another tree beside this one would replace it mid-run
site=$(mktemp -d /tmp/ctxwin-py-site.XXXXXX)
trap 'rm -rf "$site"' EXIT
# (CTXWIN_PY_PACKAGE=a wheel or sdist: that package instead, as scripts/dist.sh
# --clients made it)
pkg=${CTXWIN_PY_PACKAGE:-$here}
[ -e "$pkg" ] || { echo "run-tests.sh: no package $pkg" >&2; exit 1; }
[ "$pkg" = "$here" ] || echo "run-tests.sh: the client from $pkg"
"$venv/bin/python" -m pip install -q --no-deps --no-compile --target "$site" "$(realpath "$pkg")" >/dev/null
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
# the tests import the package just installed, never the tree's src/
(cd / && "$venv/bin/python" -c 'import ctxwin, sys; sys.exit(not ctxwin.__file__.startswith(sys.argv[1] + "/"))' "$site") ||
	{ echo "run-tests.sh: ctxwin is not imported from $site" >&2; exit 1; }
export PATH=$site/bin:$venv/bin:$PATH

echo "run-tests.sh: mypy --strict"
(cd "$here" && "$venv/bin/python" -m mypy --strict --cache-dir "$venv/.mypy_cache" src/ctxwin)

echo "run-tests.sh: pytest"
cd "$here"
# pytest's tmp_path directories in this run's directory, removed with it
"$venv/bin/python" -m pytest -p no:cacheprovider -o console_output_style=classic --basetemp "$site/pytest" "$@"

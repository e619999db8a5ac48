# Install the Debian packages ctxwin needs to build and test, and build and
# install ctxwin (sourced by scripts/demo.sh and scripts/test.sh).  Does nothing for packages already
# installed, so a second run is quick and works offline.
ctxwin_deps() {
	# bison, flex, zlib and IPC::Run: to build PostgreSQL 17 and 18 from
	# source with its TAP test modules (scripts/pg.sh)
	local want="build-essential postgresql-15 postgresql-server-dev-15 libcurl4-openssl-dev
		postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl postgresql-common python3
		libipc-run-perl bison flex zlib1g-dev curl ca-certificates"
	local missing=""
	local p
	for p in $want; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	local sudo=""
	[ "$(id -u)" -ne 0 ] && sudo="sudo"
	echo "Installing:$missing"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
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

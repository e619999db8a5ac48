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
# pg_config on PATH).  Objects built for another major version are removed
# first: a tree switches between servers with scripts/test.sh --pg N.
ctxwin_build_install() {
	local pgc=${PG_CONFIG:-pg_config} stamp=.ctxwin-built-for
	local want
	want=$("$pgc" --version)
	if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
		rm -f src/*.o src/*.bc ctxwin.so
		echo "$want" >"$stamp"
	fi
	make -j"$(nproc)" PG_CONFIG="$pgc" "$@" >/dev/null
	$(ctxwin_sudo) make PG_CONFIG="$pgc" install >/dev/null
}

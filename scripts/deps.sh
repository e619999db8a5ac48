# Install the Debian packages ctxwin needs to build and test, and build and
# install ctxwin (sourced by scripts/demo.sh and scripts/test.sh).  Does nothing for packages already
# installed, so a second run is quick and works offline.
ctxwin_deps() {
	local want="build-essential postgresql-15 postgresql-server-dev-15 libcurl4-openssl-dev
		postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl postgresql-common python3"
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

# Build ctxwin and install it into the PostgreSQL found by pg_config.
ctxwin_build_install() {
	make -j"$(nproc)" "$@" >/dev/null
	$(ctxwin_sudo) make install >/dev/null
}

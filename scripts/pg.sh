# The PostgreSQL server ctxwin is built and tested against (sourced by
# scripts/test.sh and scripts/demo.sh).
#
#   ctxwin_pg_use MAJOR   makes MAJOR the server of this shell: PG_CONFIG,
#                         PATH (initdb, pg_ctl, psql of that version) and
#                         PERL5LIB (PostgreSQL::Test::Cluster of that version).
#
# 15 is Debian 12's own packages.  17 and 18 are built from Debian's source
# packages (trixie's postgresql-17, sid's postgresql-18) into a cache directory
# outside the repository, $CTXWIN_CACHE (default /var/cache/ctxwin), on first
# use; later runs reuse the build.  Their binary packages need a newer libc
# than Debian 12's, so the server is built, never installed from them.
# PostgreSQL's Perl test modules come from the same source: Debian's
# postgresql-server-dev packages do not ship them.
CTXWIN_CACHE=${CTXWIN_CACHE:-/var/cache/ctxwin}

# The Debian suite that carries each major version's source package, and the
# version and sha256 of its upstream tarball to fall back on when the suite's
# newest upload has not reached the mirror yet (seen for trixie's 17.12).
ctxwin_pg_suite() {
	case $1 in
	15) echo bookworm ;;
	17) echo trixie ;;
	18) echo sid ;;
	*) echo "" ;;
	esac
}
ctxwin_pg_pinned() {
	case $1 in
	15) echo "15.18-0+deb12u1 11df0df97fe3ea4ba9a791faaf39cee1d2fe571e78885b5b55d8517d27c323b4" ;;
	17) echo "17.11-0+deb13u1 dd27f2b3c59e73ed14aa3324901242bf69a032a6347805f274e6260322d42979" ;;
	18) echo "18.6-3 555610c24d53e4316da5b7d3fc25c279d96856d5e0e23ee308c328c5fa881d9f" ;;
	esac
}
_ctxwin_root() {
	if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi
}

# A deb-src entry for SUITE in a sources file of its own.
_ctxwin_deb_src() {
	local suite=$1 f=/etc/apt/sources.list.d/ctxwin-src-$1.sources
	[ -f "$f" ] && return 0
	_ctxwin_root tee "$f" >/dev/null <<EOF
# Source packages only, for ctxwin's tests against PostgreSQL built from source.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	_ctxwin_root apt-get update -qq
}

# _ctxwin_orig PACKAGE SUITE PINNED-VERSION [SHA256]: the upstream tarball of a
# Debian source package, in $CTXWIN_CACHE/src; prints its path.  apt-get
# source checks it against the suite's signed index; the pinned fallback is
# checked against the sha256 recorded above.
_ctxwin_orig() {
	local pkg=$1 suite=$2 pinned=$3 sum=${4:-} src=$CTXWIN_CACHE/src
	local f
	f=$(ls "$src/$pkg"_*.orig.tar.* 2>/dev/null | sort -V | tail -1)
	if [ -n "$f" ]; then echo "$f"; return 0; fi
	_ctxwin_root mkdir -p "$src"
	_ctxwin_deb_src "$suite" >&2
	local tmp
	tmp=$(mktemp -d /tmp/ctxwin-src.XXXXXX)
	chmod 755 "$tmp" # apt downloads as its own user
	if ! (cd "$tmp" && apt-get source --download-only -qq "$pkg/$suite" >&2); then
		echo "apt-get source $pkg/$suite failed; fetching $pkg $pinned from the pool" >&2
		local up=${pinned%-*} base=http://deb.debian.org/debian/pool/main/${pkg:0:1}/$pkg
		local dsc="$tmp/${pkg}_$pinned.dsc"
		curl -fsS -o "$dsc" "$base/${pkg}_$pinned.dsc" || { rm -rf "$tmp"; return 1; }
		local orig
		orig=$(sed -n '/^Checksums-Sha256:/,/^[A-Z]/p' "$dsc" | awk '/orig\.tar/ {print $3; exit}')
		curl -fsS -o "$tmp/$orig" "$base/$orig" || { rm -rf "$tmp"; return 1; }
		if [ -n "$sum" ]; then
			echo "$sum  $tmp/$orig" | sha256sum --check --quiet >&2 || { rm -rf "$tmp"; return 1; }
		else
			(cd "$tmp" && sed -n '/^Checksums-Sha256:/,/^[A-Z]/p' "$dsc" | awk '/orig\.tar/ {print $1 "  " $3}' |
				sha256sum --check --quiet >&2) || { rm -rf "$tmp"; return 1; }
		fi
	fi
	f=$(ls "$tmp/$pkg"_*.orig.tar.* | head -1)
	_ctxwin_root mv "$f" "$src/" || { rm -rf "$tmp"; return 1; }
	rm -rf "$tmp"
	echo "$src/$(basename "$f")"
}

# The install prefix of a server built from source, or of Debian's package.
ctxwin_pg_prefix() {
	if [ "$1" = 15 ]; then echo /usr/lib/postgresql/15; else echo "$CTXWIN_CACHE/pg$1"; fi
}

# Build PostgreSQL MAJOR from source into $CTXWIN_CACHE/pgMAJOR, once, with
# assertions on (cassert: the server checks our memory contexts, locks and
# catalog use as it checks its own) and the TAP test modules.
_ctxwin_pg_build() {
	local major=$1 prefix
	prefix=$(ctxwin_pg_prefix "$major")
	[ -f "$prefix/.ctxwin-built" ] && return 0
	local pin sum orig
	read -r pin sum <<<"$(ctxwin_pg_pinned "$major")"
	orig=$(_ctxwin_orig "postgresql-$major" "$(ctxwin_pg_suite "$major")" "$pin" "$sum") || return 1
	echo "Building PostgreSQL from $(basename "$orig") into $prefix (first use only)"
	local t0=$SECONDS build
	build=$(mktemp -d /tmp/ctxwin-pgbuild.XXXXXX)
	tar -xf "$orig" -C "$build" --strip-components=1
	(
		cd "$build" &&
			./configure --prefix="$prefix" --enable-debug --enable-cassert --enable-tap-tests \
				--without-icu --without-readline --with-zlib CFLAGS="-O2" >"$build/configure.log" 2>&1 &&
			make -j"$(nproc)" >"$build/make.log" 2>&1 &&
			_ctxwin_root make install >"$build/install.log" 2>&1 &&
			_ctxwin_root make -C src/test/perl install >>"$build/install.log" 2>&1 &&
			_ctxwin_root make -C contrib -j"$(nproc)" install >>"$build/install.log" 2>&1
	) || {
		echo "building PostgreSQL $major failed; the logs are in $build" >&2
		tail -20 "$build"/*.log >&2
		return 1
	}
	rm -rf "$build"
	_ctxwin_pgtap_build "$prefix" || return 1
	_ctxwin_root touch "$prefix/.ctxwin-built"
	echo "PostgreSQL $major built in $((SECONDS - t0)) s"
}

# pgTAP into a server built from source.  pgTAP is SQL only, and its
# source packages are not on the mirror (only their .dsc files are): the SQL
# Debian 12 installs for PostgreSQL 15 (postgresql-15-pgtap, pgTAP 1.2.0,
# which supports 9.1 and later) goes into the other server's extension
# directory.
_ctxwin_pgtap_build() {
	local prefix=$1 ext
	ext=$("$prefix/bin/pg_config" --sharedir)/extension
	local f
	for f in $(dpkg-query -L postgresql-15-pgtap | grep -E '/extension/pgtap.*\.(sql|control)$'); do
		_ctxwin_root cp "$f" "$ext/" || return 1
	done
	[ -f "$ext/pgtap.control" ] || { echo "pgTAP was not installed into $ext" >&2; return 1; }
}

# PostgreSQL 15's Perl test modules, from the source of the packaged version.
_ctxwin_pg15_perl() {
	local dir=$CTXWIN_CACHE/pg15-perl
	[ -f "$dir/PostgreSQL/Test/Cluster.pm" ] && return 0
	local pin sum orig
	read -r pin sum <<<"$(ctxwin_pg_pinned 15)"
	orig=$(_ctxwin_orig postgresql-15 "$(ctxwin_pg_suite 15)" "$pin" "$sum") || return 1
	local tmp
	tmp=$(mktemp -d /tmp/ctxwin-pg15-perl.XXXXXX)
	tar -xf "$orig" -C "$tmp" --strip-components=1 --wildcards '*/src/test/perl/*' &&
		_ctxwin_root mkdir -p "$dir" &&
		_ctxwin_root cp -r "$tmp/src/test/perl/." "$dir/" || { rm -rf "$tmp"; return 1; }
	rm -rf "$tmp"
}

# The directory holding PostgreSQL::Test::Cluster for MAJOR.
ctxwin_pg_perl() {
	if [ "$1" = 15 ]; then
		echo "$CTXWIN_CACHE/pg15-perl"
	else
		echo "$("$(ctxwin_pg_prefix "$1")/bin/pg_config" --pkglibdir)/pgxs/src/test/perl"
	fi
}

# CTXWIN_PG_COPY=DIR: the server is a private copy of the installation in
# DIR/pgMAJOR (made on first use), so that two trees built and tested side
# by side on one machine never install their ctxwin.so over each other's.
# Each directory a build or the server reads is copied at its own path
# under the copy, where the copy's pg_config and server find it; prints the
# copy's bin directory's parent as the prefix to use.
_ctxwin_pg_copy() {
	local prefix=$1 dir=$2 d
	if [ ! -f "$dir/.ctxwin-copy" ]; then
		rm -rf "$dir"
		for d in $("$prefix/bin/pg_config" --bindir --pkglibdir --sharedir --includedir-server); do
			mkdir -p "$dir/root$(dirname "$d")"
			cp -a "$d" "$dir/root$d" || return 1
		done
		touch "$dir/.ctxwin-copy"
	fi
	local copy=$dir/root$prefix
	case $("$copy/bin/pg_config" --pkglibdir) in
	"$dir/root"/*) ;;
	*) echo "the copy of $prefix in $dir is not used by its own pg_config" >&2; return 1 ;;
	esac
	echo "$copy"
}

ctxwin_pg_use() {
	local major=$1
	case $major in
	15) _ctxwin_pg15_perl || return 1 ;;
	17 | 18) _ctxwin_pg_build "$major" || return 1 ;;
	16)
		echo "PostgreSQL 16 is in no Debian suite reachable here; ctxwin compiles for it by construction (src/compat/compat.h)" >&2
		return 1
		;;
	*)
		echo "unsupported PostgreSQL major version: $major (ctxwin supports 15 to 18)" >&2
		return 1
		;;
	esac
	ctxwin_pg_server "$major" || return 1
	export PERL5LIB=$(ctxwin_pg_perl "$major")${PERL5LIB:+:$PERL5LIB}
}

# ctxwin_pg_server MAJOR: PG_CONFIG and PATH of an installed server (or of
# its private copy, with CTXWIN_PG_COPY), without the test modules: what
# scripts/demo.sh needs.
ctxwin_pg_server() {
	local major=$1 prefix
	prefix=$(ctxwin_pg_prefix "$major")
	if [ -n "${CTXWIN_PG_COPY:-}" ]; then
		prefix=$(_ctxwin_pg_copy "$prefix" "$CTXWIN_PG_COPY/pg$major") || return 1
	fi
	export PG_CONFIG=$prefix/bin/pg_config
	export PATH=$prefix/bin:$PATH
	export CTXWIN_PG_MAJOR=$major
}

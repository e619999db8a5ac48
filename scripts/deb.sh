#!/usr/bin/env bash
# Debian packages of ctxwin, built as PostgreSQL's Debian repository
# (apt.postgresql.org) builds extensions: debian/ with pg_buildext, one binary
# package postgresql-NN-ctxwin for each PostgreSQL version NN.  The source is
# HEAD's (git archive, as scripts/dist.sh makes the PGXN archive); the
# packages, the .dsc and the build logs go to dist/deb/.
#
#   scripts/deb.sh               build the source package and the binary
#                                packages for PostgreSQL 15, 17 and 18
#   scripts/deb.sh --pg "15 18"  for those versions only
#   scripts/deb.sh --test        build them, then test each binary package
#                                in a clean Debian root (below)
#   scripts/deb.sh --test-only   test the packages already in dist/deb/
#
# A version whose Debian packages are installed here (15, Debian 12's own:
# postgresql-server-dev-15) is built here, with the source package.  17 and
# 18 exist here only as servers built from source into /var/cache/ctxwin
# (scripts/pg.sh): not Debian packages, under their own prefix, so
# pg_buildext does not see them (it looks for /usr/lib/postgresql/NN), and a
# package built against them would install under /var/cache and depend on
# no server package.  Their packages are built where Debian ships those
# servers, in a build root of trixie (17) or sid (18) made by mmdebstrap
# from deb.debian.org, from the same source with the same debian/:
# packages for those suites (Debian 12 cannot install trixie's or sid's
# PostgreSQL: their libc is newer).
#
# The test: for each package, mmdebstrap makes a minimal root of its suite
# (with the suite's security updates: pg_buildext makes the package depend
# on the server's newest minor version, /etc/postgresql-common/minor_versions),
# apt installs the .deb there with the server it depends on, and
# debian/tests/installcheck, the package's autopkgtest, runs
# `pg_buildext installcheck` in the unpacked source package: make
# installcheck (pg_regress's tests and the pgTAP suites) in a throwaway
# cluster (pg_virtualenv) against the installed package, no build tree
# anywhere in the root.  The packages the roots download are kept in
# $CTXWIN_CACHE/deb-apt/ for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(pwd -P)
build=1 test=0 pg_list="15 17 18"
while [ $# -gt 0 ]; do
	case $1 in
	--test) test=1; shift ;;
	--test-only) build=0 test=1; shift ;;
	--pg) pg_list=$2; shift 2 ;;
	--pg=*) pg_list=${1#--pg=}; shift ;;
	-h | --help) sed -n '2,37s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "deb.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
	esac
done
die() { echo "deb.sh: $*" >&2; exit 1; }
root() { if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi; }
out=$tree/dist/deb
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)
debversion=$(sed -n "1s/^ctxwin (\([^)]*\)).*/\1/p" debian/changelog)
[ "${debversion%-*}" = "$version" ] ||
	die "debian/changelog is at $debversion, ctxwin.control at $version"
scratch=$(mktemp -d /tmp/ctxwin-deb.XXXXXX)
chmod 755 "$scratch" # the build-time tests' server (user postgres) reads it
cleanup() { root rm -rf "$scratch"; }
trap cleanup EXIT

need() {
	local p missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "Installing: ${missing[*]}"
	root apt-get update -qq
	DEBIAN_FRONTEND=noninteractive root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The Debian suite whose own packages carry PostgreSQL MAJOR (scripts/pg.sh
# builds 17 and 18 from these suites' source packages).
suite_of() { ctxwin_pg_suite "$1"; }
. scripts/pg.sh
# mirrors SUITE: the suite's sources, with its security updates where it has some
mirrors() {
	local suite=$1
	echo "deb http://deb.debian.org/debian $suite main"
	[ "$suite" = sid ] || echo "deb http://deb.debian.org/debian-security $suite-security main"
}

# The roots' apt takes the host's word on the mirror's dates: a host whose
# apt accepts Release files past their Valid-Until (a mirror that lags, as
# sid's week-long validity makes likely) has its roots accept them too.
aptopts=()
eval "$(apt-config shell cvu Acquire::Check-Valid-Until cdate Acquire::Check-Date)"
[ "${cvu:-}" = false ] && aptopts+=(--aptopt='Acquire::Check-Valid-Until "false"')
[ "${cdate:-}" = false ] && aptopts+=(--aptopt='Acquire::Check-Date "false"')

# apt_cache_for SUITE: mmdebstrap options that keep the packages a root
# downloads in $CTXWIN_CACHE/deb-apt/SUITE for the next one (apt_cache)
apt_cache_for() {
	local c=$CTXWIN_CACHE/deb-apt/$1
	root mkdir -p "$c"
	apt_cache=(--skip=essential/unlink
		--setup-hook="mkdir -p \"\$1/var/cache/apt/archives/\""
		--setup-hook="sync-in $c /var/cache/apt/archives/"
		--customize-hook="sync-out /var/cache/apt/archives $c")
}

if [ "$build" = 1 ]; then
	t0=$SECONDS
	need build-essential debhelper dpkg-dev postgresql-all postgresql-server-dev-all libcurl4-openssl-dev git
	[ -z "$(git status --porcelain --untracked-files=no)" ] ||
		echo "deb.sh: warning: uncommitted changes are not in the packages (they are built from HEAD)" >&2
	# versions with Debian's packages here, built here; the others in a root
	host_versions=$(PG_SUPPORTED_VERSIONS=installed pg_buildext supported-versions | paste -sd' ')
	root_versions=
	for v in $pg_list; do
		case " $host_versions " in *" $v "*) continue ;; esac
		[ -n "$(suite_of "$v")" ] || die "no Debian suite known for PostgreSQL $v"
		root_versions="$root_versions $v"
	done
	[ -n "$host_versions" ] || die "no PostgreSQL version of debian/pgversions ($(cat debian/pgversions)) has its postgresql-server-dev installed"
	echo "building postgresql-NN-ctxwin $debversion from $(git rev-parse --short HEAD): PostgreSQL $host_versions here${root_versions:+, and$root_versions each in a root of its Debian suite}"
	git archive --format tar.gz --prefix "ctxwin-$version/" -o "$scratch/ctxwin_$version.orig.tar.gz" HEAD
	tar -xzf "$scratch/ctxwin_$version.orig.tar.gz" -C "$scratch"
	src=$scratch/ctxwin-$version
	# debian/control for the versions built (pg_buildext's checkcontrol
	# fails a build whose control file lists others)
	(cd "$src" && PG_SUPPORTED_VERSIONS="$host_versions" pg_buildext updatecontrol)
	mkdir -p "$out"
	rm -f "$out"/*
	# the source package and the binary packages of the versions here
	if ! (cd "$src" && PG_SUPPORTED_VERSIONS="$host_versions" dpkg-buildpackage -us -uc >"$out/build.log" 2>&1); then
		tail -n 40 "$out/build.log" >&2
		die "dpkg-buildpackage failed (the whole log: $out/build.log)"
	fi
	# the build-time tests (pg_regress's, against debian/postgresql-NN-ctxwin)
	grep -E 'tests passed|tests failed' "$out/build.log" || die "the build ran no pg_regress test"
	cp "$scratch"/*.deb "$scratch"/*.dsc "$scratch"/*.tar.* "$scratch"/*.changes "$scratch"/*.buildinfo "$out/"
	# the others: the same source, in a build root of the suite that ships
	# postgresql-server-dev-NN (binary packages only)
	for v in $root_versions; do
		t1=$SECONDS suite=$(suite_of "$v")
		need mmdebstrap
		mapfile -t mirror_lines < <(mirrors "$suite")
		apt_cache_for "$suite"
		echo "building postgresql-$v-ctxwin in a $suite build root (mmdebstrap)"
		rm -rf "$scratch/out-$v"
		mkdir "$scratch/out-$v"
		if ! root mmdebstrap --variant=buildd --mode=root "${aptopts[@]}" \
			--include="debhelper,libcurl4-openssl-dev,postgresql-server-dev-all,postgresql-server-dev-$v,postgresql-$v" \
			--customize-hook='mkdir -p "$1/build"' \
			--customize-hook="copy-in $scratch/ctxwin_$version.orig.tar.gz /build" \
			--customize-hook="chroot \"\$1\" sh -c 'cd /build && tar -xzf ctxwin_$version.orig.tar.gz && cd ctxwin-$version && PG_SUPPORTED_VERSIONS=$v pg_buildext updatecontrol && PG_SUPPORTED_VERSIONS=$v dpkg-buildpackage -b -d -us -uc'" \
			--customize-hook="sync-out /build $scratch/out-$v" \
			"${apt_cache[@]}" "$suite" /dev/null "${mirror_lines[@]}" >"$out/build-$v.log" 2>&1; then
			tail -n 40 "$out/build-$v.log" >&2
			die "building postgresql-$v-ctxwin in $suite failed (the whole log: $out/build-$v.log)"
		fi
		grep -E 'tests passed|tests failed' "$out/build-$v.log" || die "the $suite build ran no pg_regress test"
		cp "$scratch/out-$v"/*.deb "$out/"
		echo "(postgresql-$v-ctxwin built in $((SECONDS - t1)) s)"
	done
	for v in $host_versions $root_versions; do
		deb=$(ls "$out"/postgresql-"$v"-ctxwin_"$debversion"_*.deb 2>/dev/null) || die "no package postgresql-$v-ctxwin was built"
		# what a PostgreSQL user's server needs, where it looks for it
		dpkg-deb -c "$deb" >"$scratch/contents"
		for f in /usr/lib/postgresql/$v/lib/ctxwin.so /usr/share/postgresql/$v/extension/ctxwin.control \
			/usr/share/postgresql/$v/extension/ctxwin--$version.sql \
			/usr/share/postgresql/$v/extension/ctxwin--0.1.0--$version.sql; do
			grep -q " \.$f\$" "$scratch/contents" || die "$(basename "$deb") lacks $f"
		done
		echo "built $(basename "$deb") ($(du -h "$deb" | cut -f1)): $(dpkg-deb -f "$deb" Depends)"
	done
	echo "packages in $out (built in $((SECONDS - t0)) s)"
fi

[ "$test" = 1 ] || exit 0

# --- the test: each package in a clean Debian root -------------------------
need mmdebstrap
mapfile -t debs < <(ls "$out"/postgresql-*-ctxwin_*.deb 2>/dev/null)
[ ${#debs[@]} -gt 0 ] || die "no package in $out: run scripts/deb.sh first"
# the unpacked source the autopkgtest runs in (the .dsc's, not this tree)
dsc=$(ls "$out"/ctxwin_*.dsc | head -1)
(cd "$scratch" && dpkg-source -x "$dsc" testsrc >/dev/null)
failed=0
for deb in "${debs[@]}"; do
	t0=$SECONDS
	pkg=$(dpkg-deb -f "$deb" Package)
	v=$(sed 's/^postgresql-\([0-9]*\)-ctxwin$/\1/' <<<"$pkg")
	case " $pg_list " in *" $v "*) ;; *) continue ;; esac
	suite=$(suite_of "$v")
	[ -n "$suite" ] || { echo "$pkg: no Debian suite known for PostgreSQL $v" >&2; failed=1; continue; }
	echo "=== $pkg: a clean $suite root, the package installed with apt, its autopkgtest (make installcheck)"
	cp "$deb" "$scratch/"
	# the autopkgtest's dependencies (debian/tests/control.in, for this
	# version: the control file is made for the versions built here), then the
	# package by its file: apt brings the server it depends on
	deps=$(sed -n '/^Depends:/,/^[A-Z]/p' "$scratch/testsrc/debian/tests/control.in" | grep -E '^ [a-z]' |
		tr -d ' ,' | grep -v '^@$' | sed "s/PGVERSION/$v/" | paste -sd,)
	log=$out/test-$pkg.log
	mapfile -t mirror_lines < <(mirrors "$suite")
	apt_cache_for "$suite"
	if root mmdebstrap --variant=minbase --mode=root "${aptopts[@]}" "${apt_cache[@]}" \
		--include="ca-certificates,$deps" \
		--customize-hook="copy-in $scratch/$(basename "$deb") /tmp" \
		--customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/$(basename "$deb")" \
		--customize-hook="copy-in $scratch/testsrc /root" \
		--customize-hook="chroot \"\$1\" sh -c 'dpkg-query -W $pkg && dpkg -S /usr/lib/postgresql/$v/lib/ctxwin.so && test ! -e /root/testsrc/ctxwin.so'" \
		--customize-hook="chroot \"\$1\" sh -c 'cd /root/testsrc && debian/tests/installcheck'" \
		"$suite" /dev/null "${mirror_lines[@]}" >"$log" 2>&1; then
		grep -E 'All [0-9]+ tests passed|^Files=|^Result' "$log" | sed 's/^/  /'
		echo "$pkg: installcheck passed against the installed package ($((SECONDS - t0)) s; log: $log)"
	else
		tail -n 40 "$log" >&2
		echo "$pkg: FAILED (log: $log)" >&2
		failed=1
	fi
done
exit $failed

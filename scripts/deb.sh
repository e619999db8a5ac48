#!/usr/bin/env bash
# Debian packages of ctxwin, built as PostgreSQL's Debian repository
# (apt.postgresql.org) builds extensions: debian/ with pg_buildext, one binary
# package postgresql-NN-ctxwin for each PostgreSQL version NN of
# debian/pgversions whose Debian packages (postgresql-server-dev-NN) are
# installed.  The source is HEAD's (git archive, as scripts/dist.sh makes
# the PGXN archive); the packages, the .dsc and the build log go to dist/deb/.
#
#   scripts/deb.sh           build the source and binary packages
#   scripts/deb.sh --test    build them, then test each binary package in a
#                            clean Debian root (below); slow: about N min
#   scripts/deb.sh --test-only   test the packages already in dist/deb/
#
# The test: mmdebstrap makes a minimal root of the package's Debian suite
# from deb.debian.org (with its security updates: pg_buildext makes the
# package depend on the server's newest minor version,
# /etc/postgresql-common/minor_versions), apt installs the .deb there (with the server it
# depends on), and debian/tests/installcheck, the package's autopkgtest,
# runs `pg_buildext installcheck` in the unpacked source: make installcheck
# (pg_regress's tests and the pgTAP suites) in a throwaway cluster
# (pg_virtualenv) against the installed package, the build tree nowhere.
#
# Only PostgreSQL 15 has Debian packages on Debian 12.  17 and 18 exist here
# as servers built from source into /var/cache/ctxwin (scripts/pg.sh): not
# packages, with their own prefix, so pg_buildext does not see them and a
# package built against them would install under /var/cache.
# postgresql-17-ctxwin and postgresql-18-ctxwin are built where Debian ships
# those servers (trixie, sid) or on apt.postgresql.org's build daemons from
# this same debian/ directory.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(pwd -P)
build=1 test=0
while [ $# -gt 0 ]; do
	case $1 in
	--test) test=1; shift ;;
	--test-only) build=0 test=1; shift ;;
	-h | --help) sed -n '2,27s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "deb.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
	esac
done
die() { echo "deb.sh: $*" >&2; exit 1; }
root() { if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi; }
out=$tree/dist/deb
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)
debversion=$(dpkg-parsechangelog -S Version)
[ "${debversion%-*}" = "$version" ] ||
	die "debian/changelog is at $debversion, ctxwin.control at $version"
scratch=$(mktemp -d /tmp/ctxwin-deb.XXXXXX)
chmod 755 "$scratch" # the build-time tests' server (user postgres) reads it
cleanup() {
	local d
	for d in "$scratch"/root-*; do
		[ -d "$d" ] || continue
		# a root left by a test that stopped: its mounts first
		grep -o " $d/[^ ]*" /proc/mounts | sort -r | while read -r m; do root umount -l "$m" || true; done
	done
	root rm -rf "$scratch"
}
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

if [ "$build" = 1 ]; then
	t0=$SECONDS
	need build-essential debhelper dpkg-dev postgresql-all postgresql-server-dev-all libcurl4-openssl-dev git
	[ -z "$(git status --porcelain --untracked-files=no)" ] ||
		echo "deb.sh: warning: uncommitted changes are not in the packages (they are built from HEAD)" >&2
	versions=$(PG_SUPPORTED_VERSIONS=installed pg_buildext supported-versions)
	[ -n "$versions" ] || die "no PostgreSQL version of debian/pgversions ($(cat debian/pgversions)) has its postgresql-server-dev installed"
	echo "building postgresql-NN-ctxwin $debversion for PostgreSQL $(echo $versions) from $(git rev-parse --short HEAD)"
	git archive --format tar.gz --prefix "ctxwin-$version/" -o "$scratch/ctxwin_$version.orig.tar.gz" HEAD
	tar -xzf "$scratch/ctxwin_$version.orig.tar.gz" -C "$scratch"
	src=$scratch/ctxwin-$version
	# debian/control for the versions installed (pg_buildext's checkcontrol
	# fails a build whose control file lists others)
	(cd "$src" && PG_SUPPORTED_VERSIONS=installed pg_buildext updatecontrol)
	mkdir -p "$out"
	if ! (cd "$src" && PG_SUPPORTED_VERSIONS=installed dpkg-buildpackage -us -uc >"$scratch/build.log" 2>&1); then
		cp "$scratch/build.log" "$out/build.log"
		tail -n 40 "$scratch/build.log" >&2
		die "dpkg-buildpackage failed (the whole log: $out/build.log)"
	fi
	rm -f "$out"/*
	cp "$scratch/build.log" "$out/build.log"
	cp "$scratch"/*.deb "$scratch"/*.dsc "$scratch"/*.tar.* "$scratch"/*.changes "$scratch"/*.buildinfo "$out/"
	# the build-time tests (pg_regress's, against debian/postgresql-NN-ctxwin)
	grep -E 'tests passed|tests failed' "$scratch/build.log" || die "the build ran no pg_regress test"
	for v in $versions; do
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
	case $v in
	15) suite=bookworm ;;
	*) echo "$pkg: no Debian suite known for PostgreSQL $v here" >&2; failed=1; continue ;;
	esac
	r=$scratch/root-$v
	echo "=== $pkg: a clean $suite root, the package installed with apt, its autopkgtest (make installcheck)"
	cp "$deb" "$scratch/"
	# the autopkgtest's dependencies (debian/tests/control), then the
	# package by its file: apt brings the server it depends on
	deps=$(sed -n '/^Depends:/,/^[A-Z]/p' "$scratch/testsrc/debian/tests/control" | grep -E '^ [a-z]' |
		tr -d ' ,' | grep -v '^@$' | sed "s/PGVERSION/$v/" | paste -sd,)
	log=$out/test-$pkg.log
	if root mmdebstrap --variant=minbase --mode=root --quiet \
		--include="ca-certificates,$deps" \
		--customize-hook="copy-in $scratch/$(basename "$deb") /tmp" \
		--customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/$(basename "$deb")" \
		--customize-hook="copy-in $scratch/testsrc /root" \
		--customize-hook="chroot \"\$1\" sh -c 'dpkg-query -W $pkg && dpkg -S /usr/lib/postgresql/$v/lib/ctxwin.so && test ! -e /root/testsrc/ctxwin.so'" \
		--customize-hook="chroot \"\$1\" sh -c 'cd /root/testsrc && debian/tests/installcheck'" \
		"$suite" "$r" "deb http://deb.debian.org/debian $suite main" \
		"deb http://deb.debian.org/debian-security $suite-security main" >"$log" 2>&1; then
		grep -E 'All [0-9]+ tests passed|^Files=|^Result' "$log" | sed 's/^/  /'
		echo "$pkg: installcheck passed against the installed package ($((SECONDS - t0)) s; log: $log)"
	else
		tail -n 40 "$log" >&2
		echo "$pkg: FAILED (log: $log)" >&2
		failed=1
	fi
	root rm -rf "$r"
done
exit $failed

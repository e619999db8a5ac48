#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12, as a newcomer runs them:
# mmdebstrap makes a minimal bookworm root (minbase and the CA certificates;
# sudo too with --user), a clone of the tree (its HEAD) is copied in, and
# the command runs there with an empty environment (no LANG, no LC_*, a
# plain PATH), as root or as an ordinary user with sudo.  Nothing is kept
# but what the command printed.
#
#   scripts/fresh.sh [--user] demo|test
#
#   demo    bash scripts/demo.sh   (installs PostgreSQL 15 and the build
#                                   tools, about 3 minutes)
#   test    bash scripts/test.sh   (every test on PostgreSQL 15, the
#                                   clients' too: about 20 minutes)
#   --user  as the user dev, who has sudo without a password (without it:
#           as root, in a root that has no sudo)
#
# The output goes to dist/fresh/COMMAND-root.out or COMMAND-user.out; the
# exit code is the command's.  Needs root, mmdebstrap and the network
# (deb.debian.org, PyPI, npm).  The local CA certificates of this machine
# (/usr/local/share/ca-certificates, as a network behind a TLS-inspecting
# proxy needs) are added to the root's, and Node pointed at them
# (NODE_EXTRA_CA_CERTS: the Node that npm installs has its own list).  Not
# part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
as=root
if [ "${1:-}" = --user ]; then as=user; shift; fi
case ${1:-} in
demo | test) what=$1 ;;
*) sed -n '2,21p' "$0"; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || { echo "scripts/fresh.sh: run as root (mmdebstrap --mode=root)" >&2; exit 2; }
command -v mmdebstrap >/dev/null || { echo "scripts/fresh.sh: needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }

out=$PWD/dist/fresh
mkdir -p "$out"
scratch=$(mktemp -d /var/tmp/ctxwin-fresh.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
git clone -q "$PWD" "$scratch/ctxwin"
mkdir "$scratch/ca"
cp /usr/local/share/ca-certificates/*.crt "$scratch/ca/" 2>/dev/null || true

# what runs inside the root: the user (with sudo) or root, the clone in its
# home, the command with an empty environment
cat >"$scratch/inside.sh" <<EOF
set -e
echo "127.0.1.1 \$(hostname)" >>/etc/hosts
extra=
if ls /tmp/ca/*.crt >/dev/null 2>&1; then
	cp /tmp/ca/*.crt /usr/local/share/ca-certificates/
	update-ca-certificates >/dev/null
	extra=NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
fi
if [ $as = user ]; then
	useradd -m -s /bin/bash dev
	echo 'dev ALL=(ALL) NOPASSWD:ALL' >/etc/sudoers.d/dev
	chmod 440 /etc/sudoers.d/dev
	home=/home/dev
else
	home=/root
fi
cp -r /tmp/ctxwin "\$home/ctxwin"
[ $as = user ] && chown -R dev: "\$home/ctxwin"
set +e
if [ $as = user ]; then
	su dev -c "cd \$home/ctxwin && env -i \$extra HOME=\$home USER=dev PATH=/usr/local/bin:/usr/bin:/bin bash scripts/$what.sh" >/tmp/out 2>&1
else
	(cd "\$home/ctxwin" && env -i \$extra HOME=\$home USER=root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash scripts/$what.sh) >/tmp/out 2>&1
fi
echo "exit code \$?" >>/tmp/out
EOF

echo "scripts/fresh.sh: bash scripts/$what.sh as $as in a fresh Debian 12 root (output: dist/fresh/$what-$as.out)"
include=ca-certificates
[ $as = user ] && include=$include,sudo
mmdebstrap --variant=minbase --mode=root --include=$include bookworm /dev/null \
	--customize-hook="copy-in $scratch/ctxwin /tmp" \
	--customize-hook="copy-in $scratch/inside.sh /tmp" \
	--customize-hook="copy-in $scratch/ca /tmp" \
	--customize-hook='chroot "$1" bash /tmp/inside.sh' \
	--customize-hook="download /tmp/out $out/$what-$as.out" >"$scratch/mmdebstrap.log" 2>&1 ||
	{ tail -20 "$scratch/mmdebstrap.log"; exit 1; }
tail -3 "$out/$what-$as.out"
rc=$(sed -n 's/^exit code //p' "$out/$what-$as.out" | tail -1)
exit "${rc:-1}"

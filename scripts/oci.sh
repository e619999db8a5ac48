#!/usr/bin/env bash
# An extension-only OCI image of ctxwin for PostgreSQL 18, for CloudNativePG's
# image volume extensions: from scratch, one layer holding
#
#   /lib/ctxwin.so                      (dynamic_library_path)
#   /share/extension/ctxwin.control     (extension_control_path: .../share)
#   /share/extension/ctxwin--*.sql
#
# the layout CloudNativePG mounts at /extensions/ctxwin and appends to the
# server's extension_control_path and dynamic_library_path, so that the
# project's official minimal PostgreSQL 18 images load ctxwin unchanged.
# Built without a container daemon: ctxwin is built from HEAD (git archive)
# against PostgreSQL 18 (scripts/pg.sh), installed into a staging directory,
# and the image is written as an OCI image layout (oci-layout, index.json,
# blobs/sha256/: the layer's tar.gz, its config and its manifest, each named
# by its sha256), in dist/oci/ctxwin-VERSION-pg18/ and as one tar of that
# layout (skopeo copy oci-archive:FILE docker://REGISTRY/ctxwin:TAG pushes it).
#
#   scripts/oci.sh           build the image
#   scripts/oci.sh --test    build it, then unpack it as a runtime does (the
#                            digests and sizes checked, the layers extracted)
#                            and run make installcheck on a PostgreSQL 18
#                            cluster whose extension_control_path and
#                            dynamic_library_path point into the unpacked
#                            image, its own directories holding no ctxwin
#   scripts/oci.sh --test-only   test the image already built
#
# The library is built on this machine's Debian (12): the image must match
# the operating system of the PostgreSQL image it goes with (CloudNativePG's
# -bookworm images), its CPU architecture and PostgreSQL major version.  It
# needs libcurl (libcurl.so.4), as every build of ctxwin does.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(pwd -P)
build=1 test=0
while [ $# -gt 0 ]; do
	case $1 in
	--test) test=1; shift ;;
	--test-only) build=0 test=1; shift ;;
	-h | --help) sed -n '2,31s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "oci.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
	esac
done
die() { echo "oci.sh: $*" >&2; exit 1; }
major=18
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)
name=ctxwin-$version-pg$major
out=$tree/dist/oci
layout=$out/$name

. scripts/pg.sh
. scripts/cluster.sh
scratch=$(mktemp -d /tmp/ctxwin-oci.XXXXXX)
chmod 755 "$scratch"
cleanup() {
	type ctxwin_cluster_stop >/dev/null 2>&1 && ctxwin_cluster_stop
	rm -rf "$scratch"
}
trap cleanup EXIT

if [ "$build" = 1 ]; then
	t0=$SECONDS
	# the server of PostgreSQL 18 (built once into /var/cache/ctxwin), in a
	# copy of the scratch directory's own: this build installs into nothing
	CTXWIN_PG_COPY=$scratch/pg ctxwin_pg_use $major
	[ -z "$(git -C "$tree" status --porcelain --untracked-files=no)" ] ||
		echo "oci.sh: warning: uncommitted changes are not in the image (it is built from HEAD)" >&2
	src=$scratch/src
	mkdir "$src"
	git -C "$tree" archive HEAD | tar -x -C "$src"
	echo "building ctxwin $version from $(git -C "$tree" rev-parse --short HEAD) against $(pg_config --version)"
	make -C "$src" -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >"$scratch/build.log" 2>&1 ||
		{ tail -n 30 "$scratch/build.log" >&2; die "the build failed"; }
	make -C "$src" install PG_CONFIG="$PG_CONFIG" DESTDIR="$scratch/stage" >>"$scratch/build.log" 2>&1 ||
		{ tail -n 30 "$scratch/build.log" >&2; die "make install failed"; }
	# the image's tree: CloudNativePG's layout, from what make install wrote
	img=$scratch/image
	mkdir -p "$img/lib" "$img/share/extension"
	cp "$scratch/stage$(pg_config --pkglibdir)/ctxwin.so" "$img/lib/"
	cp "$scratch/stage$(pg_config --sharedir)"/extension/ctxwin* "$img/share/extension/"
	# (the JIT's bitcode, where the server was built with LLVM)
	if [ -d "$scratch/stage$(pg_config --pkglibdir)/bitcode" ]; then
		cp -r "$scratch/stage$(pg_config --pkglibdir)/bitcode" "$img/lib/"
	fi
	rm -rf "$layout" "$out/$name.tar"
	mkdir -p "$out"
	python3 - "$img" "$layout" "$version" "$major" "$(git -C "$tree" rev-parse HEAD)" \
		"$(git -C "$tree" log -1 --format=%ct HEAD)" "$(dpkg --print-architecture)" <<'PY'
import gzip, hashlib, io, json, os, sys, tarfile

img, layout, version, major, commit, epoch, debarch = sys.argv[1:]
epoch = int(epoch)
arch = {"amd64": "amd64", "arm64": "arm64"}.get(debarch, debarch)
os.makedirs(os.path.join(layout, "blobs", "sha256"))

def blob(data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d, len(data)

# The layer: a reproducible tar (sorted names, the commit's time, root's
# ownership, modes 755 and 644), then gzip without a name or time.
raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
    paths = []
    for d, dirs, files in os.walk(img):
        dirs.sort()
        for n in dirs + sorted(files):
            paths.append(os.path.join(d, n))
    for p in sorted(paths, key=lambda p: os.path.relpath(p, img)):
        ti = tar.gettarinfo(p, arcname=os.path.relpath(p, img))
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        ti.mtime = epoch
        ti.mode = 0o755 if ti.isdir() or p.endswith(".so") else 0o644
        if ti.isfile():
            with open(p, "rb") as f:
                tar.addfile(ti, f)
        else:
            tar.addfile(ti)
raw = raw.getvalue()
diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
gz = io.BytesIO()
with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="") as g:
    g.write(raw)
layer_digest, layer_size = blob(gz.getvalue())

created = __import__("datetime").datetime.fromtimestamp(epoch, __import__("datetime").timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
labels = {
    "org.opencontainers.image.title": "ctxwin",
    "org.opencontainers.image.description": "ctxwin %s for PostgreSQL %s: CloudNativePG image volume extension (lib/, share/extension/)" % (version, major),
    "org.opencontainers.image.version": version,
    "org.opencontainers.image.revision": commit,
    "org.opencontainers.image.licenses": "PostgreSQL",
    "org.opencontainers.image.source": "https://github.com/ctxwin/ctxwin",
    "org.opencontainers.image.created": created,
}
config = {
    "created": created,
    "architecture": arch,
    "os": "linux",
    "config": {"Labels": labels},
    "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    "history": [{"created": created, "created_by": "scripts/oci.sh (ctxwin %s, PostgreSQL %s)" % (version, major)}],
}
cfg = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
cfg_digest, cfg_size = blob(cfg)
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": cfg_size},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}],
    "annotations": labels,
}
man = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
man_digest, man_size = blob(man)
tag = "%s-%s" % (major, version)
index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": man_digest, "size": man_size,
        "platform": {"architecture": arch, "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }],
}
with open(os.path.join(layout, "index.json"), "w") as f:
    json.dump(index, f, sort_keys=True, indent=2)
with open(os.path.join(layout, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
print("image %s (tag %s): manifest %s, one layer of %d bytes" % (layout, tag, man_digest, layer_size))
PY
	# the layout as one file, for skopeo's oci-archive: and podman load
	tar -C "$layout" --sort=name --owner=0 --group=0 --numeric-owner \
		--mtime="@$(git -C "$tree" log -1 --format=%ct HEAD)" -cf "$out/$name.tar" .
	echo "made $out/$name.tar in $((SECONDS - t0)) s: $(tar -tzf "$(ls "$layout"/blobs/sha256/* | xargs ls -S | head -1)" | paste -sd' ')"
fi

[ "$test" = 1 ] || exit 0

# --- the test ----------------------------------------------------------------
t0=$SECONDS
[ -f "$layout/index.json" ] || die "no image in $layout: run scripts/oci.sh first"
# Unpack it as a runtime does: index -> manifest -> config and layers, every
# blob's digest and size checked, the layers extracted in order.
unpacked=$scratch/extensions/ctxwin
mkdir -p "$unpacked"
python3 - "$layout" "$unpacked" <<'PY'
import hashlib, json, os, sys, tarfile
layout, dest = sys.argv[1:]
def read(desc):
    p = os.path.join(layout, "blobs", *desc["digest"].split(":", 1))
    data = open(p, "rb").read()
    assert len(data) == desc["size"], "%s: size %d, the descriptor says %d" % (desc["digest"], len(data), desc["size"])
    assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"], "%s: digest mismatch" % desc["digest"]
    return data
assert json.load(open(os.path.join(layout, "oci-layout"))) == {"imageLayoutVersion": "1.0.0"}
index = json.load(open(os.path.join(layout, "index.json")))
assert index["schemaVersion"] == 2 and len(index["manifests"]) == 1
md = index["manifests"][0]
assert md["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
man = json.loads(read(md))
cfg = json.loads(read(man["config"]))
assert man["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
assert cfg["os"] == "linux" and cfg["rootfs"]["type"] == "layers"
assert len(cfg["rootfs"]["diff_ids"]) == len(man["layers"])
import gzip
for layer, diff_id in zip(man["layers"], cfg["rootfs"]["diff_ids"]):
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    raw = gzip.decompress(read(layer))
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == diff_id, "a layer's diff_id does not match"
    import io
    with tarfile.open(fileobj=io.BytesIO(raw)) as t:
        for m in t.getmembers():
            assert not m.name.startswith("/") and ".." not in m.name.split("/"), m.name
        t.extractall(dest)
names = sorted(os.path.relpath(os.path.join(d, f), dest) for d, _, fs in os.walk(dest) for f in fs)
print("unpacked %s (%s): %s" % (md["annotations"]["org.opencontainers.image.ref.name"], md["digest"][:19], " ".join(names)))
for need in ("lib/ctxwin.so", "share/extension/ctxwin.control"):
    assert need in names, "the image lacks " + need
PY
chmod -R a+rX "$scratch/extensions"

# A PostgreSQL 18 of the scratch directory's own, without ctxwin: the
# extension can only come from the image.
CTXWIN_PG_COPY=$scratch/pgtest ctxwin_pg_use $major
rm -f "$(pg_config --pkglibdir)"/ctxwin.so "$(pg_config --sharedir)"/extension/ctxwin*
ls "$(pg_config --sharedir)"/extension/pgtap.control >/dev/null || die "PostgreSQL $major has no pgTAP"
ctxwin_cluster_start
# as CloudNativePG sets them for an extension mounted at /extensions/ctxwin
psql -X -q -v ON_ERROR_STOP=1 \
	-c "ALTER SYSTEM SET extension_control_path = '\$system:$unpacked/share'" \
	-c "ALTER SYSTEM SET dynamic_library_path = '\$libdir:$unpacked/lib'" \
	-c "SELECT pg_reload_conf()" >/dev/null
sleep 1
# CREATE EXTENSION finds the control file and the scripts in the image, and
# the library a backend loads for its functions is the image's (the
# backend's own memory map says which file)
loaded=$(psql -X -q -At -v ON_ERROR_STOP=1 -c "CREATE EXTENSION ctxwin" \
	-c "SELECT ctxwin.count_tokens('hello world')" \
	-c "SELECT DISTINCT regexp_replace(l, '^.* ', '') FROM regexp_split_to_table(pg_read_file('/proc/self/maps'), E'\\n') l WHERE l LIKE '%/ctxwin.so'" \
	-c "DROP EXTENSION ctxwin")
echo "a backend's ctxwin: $(echo $loaded)"
[ "$(sed -n 2p <<<"$loaded")" = "$unpacked/lib/ctxwin.so" ] || die "the library loaded is not the image's: $loaded"
src=$scratch/testsrc
mkdir "$src"
git -C "$tree" archive HEAD | tar -x -C "$src"
chmod -R a+rX "$src"
# pg_regress and the pgTAP suites against the image's ctxwin
set +e
(cd "$src" && make installcheck PG_CONFIG="$PG_CONFIG") 2>&1 | tee "$scratch/installcheck.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { cat "$src/regression.diffs" 2>/dev/null; die "make installcheck failed against the image"; }
echo "installcheck passed on $(pg_config --version) with ctxwin from the unpacked image ($((SECONDS - t0)) s)"

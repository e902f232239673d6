#!/usr/bin/env bash
# Build the softrdma kernel-interop lab: the Debian 12 kernel + a busybox/rdma-core initramfs for
# QEMU (TCG) guests that run Linux Soft-RoCE (rdma_rxe).
#
#   lab/build.sh            (FORCE=1 rebuilds even if up to date)
#
# Everything is downloaded from the Debian archive with `apt-get download` and unpacked with
# `dpkg-deb -x` (nothing is installed on the host). Outputs, under $LAB (default /var/cache/softrdma-lab):
#   vmlinuz               guest kernel (linux-image-$KVER), as shipped (bzImage)
#   vmlinux               the same kernel uncompressed, booted through its PVH entry (much faster under TCG)
#   initrd.cpio           cpio initramfs (busybox, rdma-core tools, modules, lab/init as /init)
#   modules.order.txt     module load order used by /init
#   debs/                 the downloaded .debs (kept: a rerun downloads nothing)
#   build.stamp           what the outputs were built from; a rerun with the same inputs exits at once
# Needs: apt-get/apt-cache (Debian bookworm sources), dpkg-deb, cpio, gzip, readelf (binutils),
# depmod (kmod), python3, ldconfig. Env: LAB, KVER, FORCE, SKIP_APT_UPDATE.
set -euo pipefail
LAB=${LAB:-/var/cache/softrdma-lab}
# The kernel the fixtures/captures came from. If Debian drops this ABI from the archive we fall
# back to bookworm's current kernel (see below): the wire behaviour has not changed in 6.1.y.
KVER=${KVER:-6.1.0-57-amd64}
HERE=$(cd "$(dirname "$0")" && pwd)
ARCH=x86_64-linux-gnu
T0=$(date +%s.%N)

PKGS_USER=(
  busybox-static libc6 libgcc-s1
  libibverbs1 ibverbs-providers librdmacm1 rdmacm-utils ibverbs-utils libibumad3 perftest
  libnl-3-200 libnl-route-3-200 libpci3 libudev1 zlib1g
  iproute2 libbpf1 libelf1 libbsd0 libmd0 libcap2 libdb5.3 libmnl0 libselinux1 libpcre2-8-0
  libtirpc3 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 libssl3
  libxtables12 libzstd1
  sg3-utils libsgutils2-1.46-2
  e2fsprogs libext2fs2 libblkid1 libuuid1
)

mkdir -p "$LAB/debs"
cd "$LAB/debs"
missing_debs() { for p in "$@"; do ls "${p}"_*.deb >/dev/null 2>&1 || echo "$p"; done; }

# --- up to date? ------------------------------------------------------------------------------
# The stamp names the inputs: this script, /init, the kernel and the .debs present.
stamp_of() {
  { sha256sum "$HERE/build.sh" "$HERE/init" | cut -d' ' -f1; echo "$1"; ls "$LAB/debs"; } | sha256sum | cut -d' ' -f1
}
if [ -z "${FORCE:-}" ] && [ -f "$LAB/build.stamp" ] && [ -f "$LAB/vmlinuz" ] && [ -f "$LAB/initrd.cpio" ]; then
  read -r SKVER _ < "$LAB/build.stamp"
  if [ -z "$(missing_debs "linux-image-$SKVER" "${PKGS_USER[@]}")" ] &&
     [ "$(cut -d' ' -f2 "$LAB/build.stamp")" = "$(stamp_of "$SKVER")" ] &&
     { [ "$SKVER" = "$KVER" ] || ! ls "linux-image-${KVER}"_*.deb >/dev/null 2>&1; }; then
    echo "== lab build up to date in $LAB (kernel $SKVER)"
    exit 0
  fi
fi

# --- download ----------------------------------------------------------------------------------
need=($(missing_debs "linux-image-$KVER" "${PKGS_USER[@]}"))
if [ ${#need[@]} -gt 0 ]; then
  if [ -z "${SKIP_APT_UPDATE:-}" ]; then apt-get update -qq || echo "== apt-get update failed (continuing)"; fi
  # If Debian has dropped the pinned kernel ABI from the archive, fall back to bookworm's current one.
  if ! ls "linux-image-${KVER}"_*.deb >/dev/null 2>&1 && ! apt-cache show "linux-image-$KVER" >/dev/null 2>&1; then
    NEW=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-\(.*\)/\1/p' | head -1)
    [ -n "$NEW" ] || { echo "== linux-image-$KVER is not in the archive and no fallback found"; exit 1; }
    echo "== linux-image-$KVER is not in the archive any more; using linux-image-$NEW"
    KVER=$NEW
  fi
  need=($(missing_debs "linux-image-$KVER" "${PKGS_USER[@]}"))
  if [ ${#need[@]} -gt 0 ]; then
    echo "== apt-get download ${need[*]}"
    apt-get download "${need[@]}" 2>&1 | grep -v 'Download is performed unsandboxed' || true
  fi
  left=$(missing_debs "linux-image-$KVER" "${PKGS_USER[@]}")
  [ -z "$left" ] || { echo "== could not download: $left"; exit 1; }
fi

# --- extract ------------------------------------------------------------------------------------
W="$LAB/work"
rm -rf "$W"; mkdir -p "$W/stage" "$W/kernel"
dpkg-deb -x "$(ls "linux-image-${KVER}"_*.deb | head -1)" "$W/kernel"
for p in "${PKGS_USER[@]}"; do dpkg-deb -x "$(ls "${p}"_*.deb | head -1)" "$W/stage"; done
cp "$W/kernel/boot/vmlinuz-$KVER" "$LAB/vmlinuz.tmp"
# Under TCG, SeaBIOS + the bzImage's real-mode setup + XZ decompression cost ~5 s per boot. The
# uncompressed ELF vmlinux carries a PVH entry point (Xen ELF note 18), which QEMU boots directly:
# a guest is up in ~4 s instead of ~10 s. Fall back to the bzImage when that does not apply.
rm -f "$LAB/vmlinux.tmp"
python3 - "$W/kernel/boot/vmlinuz-$KVER" "$LAB/vmlinux.tmp" <<'PY' || rm -f "$LAB/vmlinux.tmp"
import lzma, struct, sys
src, dst = sys.argv[1:3]
d = open(src, "rb").read()
off = d.find(b"\xfd7zXZ\x00")                     # the XZ payload inside the bzImage
if off < 0:
    sys.exit("no XZ payload in the bzImage; booting it as is")
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(d[off:])
if elf[:4] != b"\x7fELF":
    sys.exit("the XZ payload is not an ELF vmlinux")
# look for the PVH entry note: an ELF note named "Xen" of type 18 (XEN_ELFNOTE_PHYS32_ENTRY)
i, pvh = elf.find(b"Xen\x00"), False
while i >= 12 and not pvh:
    namesz, _descsz, ntype = struct.unpack_from("<III", elf, i - 12)
    pvh = namesz == 4 and ntype == 18
    i = elf.find(b"Xen\x00", i + 1)
if not pvh:
    sys.exit("vmlinux has no PVH entry point; booting the bzImage")
open(dst, "wb").write(elf)
print("== vmlinux with a PVH entry point: %d bytes" % len(elf))
PY
depmod -b "$W/kernel" "$KVER"          # modules.dep is not shipped in the .deb
MODDIR="$W/kernel/lib/modules/$KVER"

# --- module closure in dependency order (from modules.dep) --------------------------------------
WANT=(
  virtio_pci virtio_net 9pnet_virtio 9p configfs crc32_generic
  ib_core ib_uverbs ib_umad ib_cm iw_cm rdma_cm rdma_ucm udp_tunnel ip6_udp_tunnel rdma_rxe
  target_core_mod target_core_file target_core_iblock brd null_blk
  scsi_mod sd_mod scsi_transport_srp ib_srp ib_srpt crc32c_generic ext4
)
python3 - "$MODDIR" "${WANT[@]}" > "$LAB/modules.order.txt" <<'PY'
import os, sys
moddir, want = sys.argv[1], sys.argv[2:]
deps = {}
with open(os.path.join(moddir, "modules.dep")) as f:
    for line in f:
        k, _, v = line.partition(":")
        deps[k.strip()] = v.split()
byname = {os.path.basename(k).split(".ko")[0].replace("-", "_"): k for k in deps}
order, seen = [], set()
def visit(k):
    if k in seen:
        return
    seen.add(k)
    for d in reversed(deps[k]):   # modprobe loads a module's dependency list back to front
        visit(d)
    order.append(k)
for w in want:
    k = byname.get(w.replace("-", "_"))
    if k is None:
        print("missing (builtin?): " + w, file=sys.stderr)
        continue
    visit(k)
print("\n".join(order))
PY
echo "== modules ($(wc -l < "$LAB/modules.order.txt")): $(sed 's#.*/##' "$LAB/modules.order.txt" | tr '\n' ' ')"

# --- rootfs ---------------------------------------------------------------------------------------
R="$W/rootfs"
mkdir -p "$R"/{bin,sbin,etc,proc,sys,dev,tmp,run,mnt/lab,root,lib/$ARCH,usr/lib/$ARCH,usr/bin,usr/sbin,usr/local/bin,var/tmp,lib64}
ln -s /lib/$ARCH/ld-linux-x86-64.so.2 "$R/lib64/ld-linux-x86-64.so.2"   # else every dynamic binary is "not found"
cp "$W/stage/bin/busybox" "$R/bin/busybox"
for b in "$W"/stage/usr/bin/{rping,ucmatose,cmtime,udaddy,mckey,rdma_server,rdma_client,rdma_xserver,rdma_xclient,rstream,riostream,ibv_*,ib_send_*,ib_write_*,ib_read_*,ib_atomic_*} \
         "$W"/stage/{sbin,bin,usr/sbin,usr/bin}/{rdma,ip,bridge}; do
  [ -f "$b" ] && cp "$b" "$R/usr/local/bin/"
done
# SCSI tools for the SRP scenarios (sg_persist, sg_rtpg, sg_raw, ...: all of sg3-utils, small) and
# e2fsprogs' mke2fs as mkfs.ext4 (busybox's mke2fs makes ext2 only): into /usr/local/bin, so the
# library closure below follows their NEEDED entries too. mke2fs picks the filesystem type from
# its argv[0], so mkfs.ext4 is a copy under that name; its mke2fs.conf comes along.
cp "$W"/stage/usr/bin/sg_* "$R/usr/local/bin/"
cp "$W/stage/sbin/mke2fs" "$R/usr/local/bin/mkfs.ext4"
cp "$W/stage/etc/mke2fs.conf" "$R/etc/"
echo "== binaries: $(ls "$R/usr/local/bin" | tr '\n' ' ')"
mkdir -p "$R/etc/libibverbs.d" "$R/usr/lib/$ARCH/libibverbs"
cp "$W/stage/etc/libibverbs.d/rxe.driver" "$R/etc/libibverbs.d/"
cp -a "$W"/stage/usr/lib/$ARCH/libibverbs/librxe-rdmav*.so "$R/usr/lib/$ARCH/libibverbs/"

# shared-library closure: NEEDED entries (readelf -d) resolved inside the unpacked packages
python3 - "$W/stage" "$R" "$ARCH" <<'PY'
import glob, os, shutil, subprocess, sys
stage, root, arch = sys.argv[1:4]
libdirs = [f"lib/{arch}", f"usr/lib/{arch}", "lib64", "lib"]
def find(soname):
    for d in libdirs:
        p = os.path.join(stage, d, soname)
        if os.path.lexists(p):
            return d, p
    return None, None
def copy(d, p, soname):
    dst = os.path.join(root, d, soname)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(os.path.realpath(p), dst)
    return dst
def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return [l.split("[")[1].split("]")[0] for l in out.splitlines() if "(NEEDED)" in l]
todo = glob.glob(os.path.join(root, "usr/local/bin/*")) + glob.glob(os.path.join(root, f"usr/lib/{arch}/libibverbs/*.so"))
# dlopen()ed, so in no NEEDED list: glibc loads libgcc_s for pthread_exit (rping aborts without it)
for extra in ("libgcc_s.so.1", "ld-linux-x86-64.so.2"):
    d, p = find(extra)
    if p is None:
        sys.exit("missing " + extra)
    todo.append(copy(d, p, extra))
seen, missing = set(), set()
while todo:
    for so in needed(todo.pop()):
        if so in seen:
            continue
        seen.add(so)
        d, p = find(so)
        if p is None:
            missing.add(so)
            continue
        todo.append(copy(d, p, so))
print("== libs:", len(seen), "missing:", sorted(missing))
if missing:
    sys.exit(1)
PY
printf '/lib/%s\n/usr/lib/%s\n/usr/lib/%s/libibverbs\n' $ARCH $ARCH $ARCH > "$R/etc/ld.so.conf"
ldconfig -r "$R" 2>/dev/null || true
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$R/etc/passwd"
printf 'root:x:0:\n' > "$R/etc/group"
printf 'hosts: files\n' > "$R/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n10.77.0.1 host\n10.77.0.10 guesta\n10.77.0.11 guestb\n' > "$R/etc/hosts"

# modules, keeping the tree layout so busybox modprobe (request_module()) can use modules.dep
mkdir -p "$R/lib/modules/$KVER"
while read -r m; do
  mkdir -p "$R/lib/modules/$KVER/$(dirname "$m")"
  cp "$MODDIR/$m" "$R/lib/modules/$KVER/$m"
done < "$LAB/modules.order.txt"
cp "$LAB/modules.order.txt" "$R/etc/modules.order"
cp "$MODDIR"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KVER/"
depmod -b "$R" "$KVER"
cp "$HERE/init" "$R/init"; chmod 755 "$R/init"

# uncompressed: unpacking a gzip'd initramfs costs ~1 s of TCG per boot, loading 20 MB costs nothing
( cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet ) > "$LAB/initrd.cpio.tmp"
# rename last, so that a run starting meanwhile never boots a half-written file
mv -f "$LAB/vmlinuz.tmp" "$LAB/vmlinuz"
if [ -f "$LAB/vmlinux.tmp" ]; then mv -f "$LAB/vmlinux.tmp" "$LAB/vmlinux"; else rm -f "$LAB/vmlinux"; fi
mv -f "$LAB/initrd.cpio.tmp" "$LAB/initrd.cpio"
rm -f "$LAB/initrd.gz"
echo "$KVER $(stamp_of "$KVER")" > "$LAB/build.stamp"
rm -rf "$W"
ls -la "$LAB"/vmlinu[xz] "$LAB/initrd.cpio"
echo "== lab build done in $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s (kernel $KVER, $LAB)"

#!/usr/bin/env bash
# Run one lab scenario: a private netns with a bridge and taps, 1 or 2 QEMU/TCG guests running
# Linux Soft-RoCE, an optional host-side program inside the netns, a capture on the bridge, and
# a verdict from the scenario's check.sh.
#
#   lab/run.sh SCENARIO [OUTDIR]
#
# SCENARIO is a folder (or the name of one under lab/scenarios/) holding:
#   A.sh        guest A's script (required); B.sh: guest B's (then two guests are booted)
#   host.sh     optional; runs on the host inside the netns (cwd = the share), started before the
#               guests, in its own process group that is killed after them (HOST_GRACE s later)
#   require.sh  optional preflight, runs first: exit 77 = SKIP (its output says why), other != 0 = FAIL
#   check.sh    decides the verdict after teardown (cwd = OUTDIR): exit 0 PASS, 77 SKIP, else FAIL
#   conf        optional, sourced: TIMEOUT, MEM, IPV6=1, HOST_GRACE, GUESTS
# Guest scripts run from the 9p share (/mnt/lab in the guest, OUTDIR/share on the host) with
# cwd = the share, so guests and host.sh sequence themselves with flag files (lib.sh: wait_flag).
#
# Exit status: 0 PASS, 1 FAIL, 77 SKIP, 2 the harness itself failed (no verdict).
# Results in OUTDIR (default $LAB/out/<scenario>): verdict, check.log, capture.pcap (Ethernet, the
# bridge), A.serial/B.serial (guest consoles), share/A.out, share/A.rc, host.log, timing.txt.
#
# Network (all inside netns $NS, created here and deleted on exit, whatever happens):
#   bridge br0 10.77.0.1/24 (+ fd77::1/64 with IPV6=1), guest A 10.77.0.10 / fd77::10,
#   guest B 10.77.0.11 / fd77::11. Host-side programs bind 10.77.0.1 (RoCEv2: UDP 4791).
# Env: LAB (/var/cache/softrdma-lab) NS (softrdma-lab) LOCK (/run/lock/$NS.lock) TIMEOUT (wall limit per guest, s, default 60)
#      MEM (MiB, 768) CAPIF (capture interface, br0; "any" = Linux cooked) KAPPEND (extra kernel args)
#      SOFTRDMA (the project's binary, default <repo>/target/release/softrdma; exported absolute)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
LAB=${LAB:-/var/cache/softrdma-lab}
NS=${NS:-softrdma-lab}
[ $# -ge 1 ] || { sed -n '2,30p' "$0"; exit 2; }
if [ -d "$1" ]; then SCEN=$(cd "$1" && pwd); elif [ -d "$HERE/scenarios/$1" ]; then SCEN=$HERE/scenarios/$1; else echo "no scenario $1"; exit 2; fi
NAME=$(basename "$SCEN")
OUT=${2:-$LAB/out/$NAME}
SOFTRDMA=${SOFTRDMA:-$REPO/target/release/softrdma}
case "$SOFTRDMA" in /*) ;; *) SOFTRDMA=$PWD/$SOFTRDMA ;; esac
TIMEOUT=${TIMEOUT:-60}; MEM=${MEM:-768}; IPV6=${IPV6:-}; HOST_GRACE=${HOST_GRACE:-5}
GUESTS=${GUESTS:-}
[ -f "$SCEN/conf" ] && . "$SCEN/conf"
if [ -z "$GUESTS" ]; then GUESTS="A"; [ -f "$SCEN/B.sh" ] && GUESTS="A B"; fi
export SOFTRDMA LABDIR=$HERE LAB NS SCEN OUT
declare -A IP=([A]=10.77.0.10 [B]=10.77.0.11)
declare -A IP6=([A]=fd77::10 [B]=fd77::11)
declare -A MAC=([A]=52:54:00:77:00:0a [B]=52:54:00:77:00:0b)
KERNEL=$LAB/vmlinux; [ -f "$KERNEL" ] || KERNEL=$LAB/vmlinuz   # PVH ELF if build.sh could make it
[ -f "$KERNEL" ] && [ -f "$LAB/initrd.cpio" ] || { echo "no $LAB/vmlinu[xz] or initrd.cpio: run lab/build.sh"; exit 2; }

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
T_START=$(now)

# One run at a time: every run uses the same netns, bridge and tap names, whatever its $LAB.
LOCK=${LOCK:-/run/lock/$NS.lock}; [ -d "$(dirname "$LOCK")" ] || LOCK=/tmp/$NS.lock
exec 9>"$LOCK"
flock -w 600 9 || { echo "another lab run holds $LOCK"; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT/share"
cp -r "$SCEN"/. "$OUT/share/"
cp "$HERE/scenarios/lib.sh" "$OUT/share/"
cp "$HERE/scenarios/srpt_lio.sh" "$OUT/share/"   # the kernel SRP target recipe (srp_kernel)
chmod -R a+rwX "$OUT"

verdict() { # verdict CODE TEXT: record and exit
  echo "$2" > "$OUT/verdict"
  printf '%s: %s (%ss)\n' "$NAME" "$2" "$(secs "$T_START" "$(now)")" | tee -a "$OUT/timing.txt"
  exit "$1"
}

if [ -f "$SCEN/require.sh" ]; then
  set +e; (cd "$OUT/share" && bash ./require.sh) > "$OUT/require.log" 2>&1; rc=$?; set -e
  case $rc in
    0) ;;
    77) verdict 77 "SKIP: $(tail -1 "$OUT/require.log")" ;;
    *) verdict 1 "FAIL: require.sh exit $rc: $(tail -1 "$OUT/require.log")" ;;
  esac
fi

PIDS=(); DUMPCAP_PID=""; HOST_PID=""
cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$HOST_PID" ] && { kill -- -"$HOST_PID" 2>/dev/null || kill "$HOST_PID" 2>/dev/null; }
  if [ -n "$DUMPCAP_PID" ]; then sleep 1; kill -INT "$DUMPCAP_PID" 2>/dev/null; wait "$DUMPCAP_PID" 2>/dev/null; DUMPCAP_PID=""; fi
  ip netns del "$NS" 2>/dev/null
  PIDS=(); HOST_PID=""
}
trap cleanup EXIT
trap 'exit 2' INT TERM

if ip netns list | grep -qw "$NS"; then echo "netns $NS exists already (stale run?); deleting"; ip netns del "$NS"; fi
ip netns add "$NS"
nsx() { ip netns exec "$NS" "$@"; }
if [ -n "$IPV6" ]; then
  # IPv6 on the bridge only (the taps are bridge ports and stay silent); no DAD, no RS
  nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=1 \
    net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
    net.ipv6.conf.all.router_solicitations=0 net.ipv6.conf.default.router_solicitations=0
else
  nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
fi
nsx ip link set lo up
nsx ip link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0
nsx ip addr add 10.77.0.1/24 dev br0
if [ -n "$IPV6" ]; then
  nsx sysctl -qw net.ipv6.conf.br0.accept_dad=0 net.ipv6.conf.br0.router_solicitations=0 net.ipv6.conf.br0.disable_ipv6=0
  nsx ip -6 addr add fd77::1/64 dev br0 nodad
fi
nsx ip link set br0 up
for g in $GUESTS; do
  nsx ip tuntap add "tap$g" mode tap
  nsx ip link set "tap$g" master br0
  nsx ip link set "tap$g" up
done

# started directly (not through a function) so that $! is dumpcap's own PID
ip netns exec "$NS" dumpcap -q -i "${CAPIF:-br0}" -w "$OUT/capture.pcap" -P >"$OUT/dumpcap.log" 2>&1 &
DUMPCAP_PID=$!
for _ in $(seq 50); do [ -s "$OUT/capture.pcap" ] && break; sleep 0.1; done
sleep 0.3

T0=$(now)
if [ -f "$SCEN/host.sh" ]; then
  # its own process group (setsid), so that teardown ends host.sh and everything it started
  ( cd "$OUT/share" && exec setsid ip netns exec "$NS" bash ./host.sh ) >"$OUT/host.log" 2>&1 &
  HOST_PID=$!
fi
for g in $GUESTS; do
  a6=""; [ -n "$IPV6" ] && a6="labip6=${IP6[$g]}/64"
  ip netns exec "$NS" timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -nodefaults -no-user-config -machine pc \
    -accel tcg -smp "${SMP:-1}" -m "$MEM" -display none -no-reboot -serial "file:$OUT/$g.serial" \
    -kernel "$KERNEL" -initrd "$LAB/initrd.cpio" \
    -append "console=ttyS0 panic=-1 quiet labname=$g labip=${IP[$g]}/24 $a6 ${KAPPEND:-}" \
    -netdev "tap,id=n0,ifname=tap$g,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=${MAC[$g]}" \
    -virtfs "local,path=$OUT/share,mount_tag=lab,security_model=none,id=fs0" \
    >"$OUT/$g.qemu.log" 2>&1 &
  PIDS+=($!)
done
TIMED_OUT=""
i=0
for g in $GUESTS; do
  rc=0; wait "${PIDS[$i]}" || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then TIMED_OUT="$TIMED_OUT $g"; fi
  echo "guest $g: qemu exit $rc" >> "$OUT/timing.txt"
  i=$((i + 1))
done
PIDS=()
T1=$(now)
if [ -n "$HOST_PID" ]; then
  for _ in $(seq $((HOST_GRACE * 10))); do kill -0 "$HOST_PID" 2>/dev/null || break; sleep 0.1; done
  kill -- -"$HOST_PID" 2>/dev/null || kill "$HOST_PID" 2>/dev/null || true
  wait "$HOST_PID" 2>/dev/null || true
  HOST_PID=""
fi
cleanup; trap - EXIT
T2=$(now)
echo "setup $(secs "$T_START" "$T0")s, guests $GUESTS $(secs "$T0" "$T1")s, teardown $(secs "$T1" "$T2")s" >> "$OUT/timing.txt"

[ -z "$TIMED_OUT" ] || verdict 1 "FAIL: guest(s)$TIMED_OUT hit the ${TIMEOUT}s timeout"
[ -f "$SCEN/check.sh" ] || verdict 1 "FAIL: no check.sh"
set +e; (cd "$OUT" && bash "$SCEN/check.sh") > "$OUT/check.log" 2>&1; rc=$?; set -e
echo "check $(secs "$T2" "$(now)")s" >> "$OUT/timing.txt"
sed 's/^/  check: /' "$OUT/check.log"
case $rc in
  0) verdict 0 "PASS" ;;
  77) verdict 77 "SKIP: $(tail -1 "$OUT/check.log")" ;;
  *) verdict 1 "FAIL: $(grep -m1 '^FAIL' "$OUT/check.log" || tail -1 "$OUT/check.log")" ;;
esac

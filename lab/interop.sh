#!/usr/bin/env bash
# softrdma kernel-interop tier: build the lab if needed, run scenarios, print a PASS/FAIL table.
#
#   lab/interop.sh [scenario ...]      (default: the CI list below; "all" = every scenario folder)
#
# Exit status: 0 if no scenario FAILed (SKIP is fine), 1 otherwise.
# Env: LAB (cache, /var/cache/softrdma-lab), OUTROOT (run outputs, $LAB/out),
#      SOFTRDMA (the project's binary; default target/release/softrdma, built with
#      `cargo build --release -p softrdma` when missing and NO_CARGO is unset).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
export LAB=${LAB:-/var/cache/softrdma-lab}
OUTROOT=${OUTROOT:-$LAB/out}
CI_SCENARIOS="smoke kernel_rping ipv6_rping host_udp_rx pingpong_rc_kernel pingpong_ud_kernel
  pingpong_rc_host_server pingpong_rc_guest_server pingpong_ud_host_server pingpong_ud_guest_server
  pingpong_rc_ipv6_host_server pingpong_rc_ipv6_guest_server rping_host_server rping_guest_server
  rping_ipv6_host_server rping_ipv6_guest_server rping_host_server_mra rej_no_listener rej_consumer
  ucmatose_host_server ucmatose_guest_server ucmatose_no_listener cmtime_host_server cmtime_guest_server
  srp_kernel srp_host_target srp_host_multichannel srp_host_login_rejects srp_lio_initiator
  srp_host_persist srp_host_fstrim srp_host_alua srp_host_acl_ctl
  udaddy_host_server udaddy_guest_server udaddy_no_listener ucmatose_options_host_server
  ucmatose_options_guest_server verbs_rc_pingpong verbs_ud_pingpong verbs_ib_write_bw verbs_ib_read_bw
  verbs_ib_send_lat librdmacm_rping_host_server librdmacm_rping_guest_server
  librdmacm_ucmatose_host_server librdmacm_ucmatose_guest_server librdmacm_udaddy_host_server
  librdmacm_udaddy_guest_server librdmacm_cmtime_host_server librdmacm_cmtime_guest_server
  librdmacm_send_bw_host_server librdmacm_send_bw_guest_server mckey_kernel librdmacm_mckey_host_receiver librdmacm_mckey_host_sender"
if [ $# -eq 0 ]; then set -- $CI_SCENARIOS
elif [ "$1" = all ]; then set -- $(cd "$HERE/scenarios" && for d in */; do echo "${d%/}"; done)
fi
T0=$(date +%s)

bash "$HERE/build.sh" || { echo "interop: lab build failed"; exit 1; }

export SOFTRDMA=${SOFTRDMA:-$REPO/target/release/softrdma}
# (the verbs_* scenarios also need softrdma's libibverbs.so.1 beside the binary: `softrdma run`)
if { [ ! -x "$SOFTRDMA" ] || { [ ! -e "$(dirname "$SOFTRDMA")/libsoftrdma_verbs.so" ] &&
     [ ! -e "$(dirname "$SOFTRDMA")/deps/libsoftrdma_verbs.so" ]; }; } &&
   [ -z "${NO_CARGO:-}" ] && command -v cargo >/dev/null; then
  echo "== cargo build --release -p softrdma -p softrdma-verbs"
  TB=$(date +%s)
  (cd "$REPO" && cargo build --release -p softrdma -p softrdma-verbs) || echo "interop: cargo build failed; scenarios that need the binary will SKIP"
  echo "== cargo build took $(( $(date +%s) - TB ))s"
fi
[ -x "$SOFTRDMA" ] && echo "== softrdma: $SOFTRDMA" || echo "== softrdma: none at $SOFTRDMA"

mkdir -p "$OUTROOT"
SUM=$OUTROOT/summary.txt
: > "$SUM"
nfail=0
for s in "$@"; do
  echo
  echo "======== $s"
  ts=$(date +%s.%N)
  bash "$HERE/run.sh" "$s" "$OUTROOT/$s"; rc=$?
  dt=$(awk -v a="$ts" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}')
  case $rc in
    0) v=PASS ;;
    77) v=SKIP ;;
    1) v=FAIL; nfail=$((nfail + 1)) ;;
    *) v=ERROR; nfail=$((nfail + 1)) ;;
  esac
  why=$(cat "$OUTROOT/$s/verdict" 2>/dev/null | sed 's/^\(PASS\|FAIL\|SKIP\):\{0,1\} *//')
  printf '%-28s %-5s %4ss  %s\n' "$s" "$v" "$dt" "$why" >> "$SUM"
  if [ "$v" = FAIL ] || [ "$v" = ERROR ]; then
    # enough to diagnose from a CI log: the checks and the end of each guest's console
    for f in "$OUTROOT/$s"/{A,B}.serial "$OUTROOT/$s/host.log"; do
      [ -f "$f" ] && { echo "--- tail $f"; tail -25 "$f"; }
    done
  fi
done
echo
echo "======== kernel interop ($(( $(date +%s) - T0 ))s, outputs in $OUTROOT)"
printf '%-28s %-5s %5s  %s\n' scenario result time detail
cat "$SUM"
[ "$nfail" = 0 ] || { echo "== $nfail scenario(s) failed"; exit 1; }

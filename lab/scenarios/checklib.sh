# Helpers sourced by check.sh (bash, on the host, cwd = the run's OUTDIR; the share is ./share).
# A check accumulates failures with `fail` and ends with `finish`: exit 0 = PASS, 1 = FAIL.
FAILS=0
ok()   { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
# expect NAME CONDITION...: ok/fail on a shell test
expect() { _n=$1; shift; if "$@"; then ok "$_n"; else fail "$_n"; fi; }
# rc_is FILE WANT: an exit status file (A.rc, server.rc, ...) holds WANT
rc_is() { [ -f "$1" ] && [ "$(tr -d ' \n' < "$1")" = "$2" ]; }
# has FILE REGEX [COUNT]: FILE has at least COUNT (1) lines matching REGEX
has() { [ -f "$1" ] && [ "$(grep -cE "$2" "$1")" -ge "${3:-1}" ]; }
# mad_attrs [PCAP]: the CM attribute names of the MADs in the capture, in order
mad_attrs() {
  tshark -r "${1:-capture.pcap}" -Y infiniband.mad -T fields -e infiniband.mad.attributeid 2>/dev/null |
    while read -r a; do
      case $((a)) in
        16) echo REQ ;; 17) echo MRA ;; 18) echo REJ ;; 19) echo REP ;; 20) echo RTU ;;
        21) echo DREQ ;; 22) echo DREP ;; 23) echo SIDR_REQ ;; 24) echo SIDR_REP ;; *) echo "$a" ;;
      esac
    done
}
# count_frames FILTER [PCAP]: frames matching a display filter
count_frames() { tshark -r "${2:-capture.pcap}" -Y "$1" 2>/dev/null | wc -l; }
# softrdma_decode [PCAP]: decode the capture with the project's own decoder when it has one.
# Returns 0 (decoded, or skipped because `softrdma decode` does not exist yet), 1 on a decode failure.
softrdma_decode() {
  _p=${1:-capture.pcap}
  if [ ! -x "${SOFTRDMA:-}" ]; then ok "softrdma decode: skipped (no binary at ${SOFTRDMA:-?})"; return 0; fi
  if ! "$SOFTRDMA" decode --help >/dev/null 2>&1; then ok "softrdma decode: skipped (binary has no decode yet)"; return 0; fi
  if "$SOFTRDMA" decode "$_p" > softrdma-decode.txt 2> softrdma-decode.err && [ -s softrdma-decode.txt ]; then
    ok "softrdma decode $_p: $(wc -l < softrdma-decode.txt) lines (softrdma-decode.txt)"
    # our decoder checks every ICRC too: it must agree with the kernel on every packet
    _bad=$(grep -c 'Invariant CRC.*\[incorrect' softrdma-decode.txt)
    _good=$(grep -c 'Invariant CRC.*\[correct\]' softrdma-decode.txt)
    if [ "$_bad" = 0 ]; then ok "softrdma decode: $_good ICRCs [correct], none [incorrect]"; else fail "softrdma decode: $_bad ICRCs [incorrect]"; return 1; fi
  else
    fail "softrdma decode $_p failed: $(tail -1 softrdma-decode.err)"
    return 1
  fi
}
# pp_check_ipv6: a pingpong scenario run over RoCEv2/IPv6 (conf IPV6=1, PP_*_GIDX on the
# fd77:: GIDs): every RoCEv2 frame is IPv6, both ends sent some, and the guest's (rxe's)
# datagrams carry UDP checksum 0 — which the host side only receives because its socket set
# UDP_NO_CHECK6_RX, so a passing pingpong plus this check keeps that path covered.
pp_check_ipv6() {
  _v6=$(count_frames 'ipv6 && udp.port == 4791'); _v4=$(count_frames 'ip && udp.port == 4791')
  expect "all RoCEv2 traffic is IPv6 ($_v6 frames, $_v4 IPv4)" test "$_v6" -gt 0 -a "$_v4" = 0
  _g=$(count_frames 'ipv6.src == fd77::10 && udp.dstport == 4791')
  _g0=$(count_frames 'ipv6.src == fd77::10 && udp.dstport == 4791 && udp.checksum == 0')
  _h=$(count_frames 'ipv6.src == fd77::1 && udp.dstport == 4791')
  expect "guest (rxe) -> host RoCEv2/IPv6 frames all with UDP checksum 0 ($_g0 of $_g)" test "$_g" -gt 0 -a "$_g0" = "$_g"
  expect "host -> guest RoCEv2/IPv6 frames ($_h)" test "$_h" -gt 0
}
finish() { if [ "$FAILS" = 0 ]; then echo "PASS"; exit 0; else echo "FAIL ($FAILS checks failed)"; exit 1; fi; }
# pp_check: the verdict of a pingpong scenario (PP_KIND PP_SIZES PP_N PP_HOST from its pp.env;
# PP_HOST = server|client|none says which side, if any, is `softrdma pingpong` on the host).
pp_check() {
  _want=0
  for _s in $PP_SIZES; do
    for _r in server client; do
      _f=share/pp-$PP_KIND-$_s.$_r
      expect "$PP_KIND size $_s $_r exit 0" rc_is "$_f.rc" 0
      # the rdma-core tools print "N iters in T seconds = U usec/iter" when all went through
      [ "$_r" = "$PP_HOST" ] || expect "$PP_KIND size $_s $_r did $PP_N iterations" has "$_f.txt" "^$PP_N iters in"
    done
    # packets per message at path MTU 1024; each side sends PP_N messages
    _want=$((_want + 2 * PP_N * ((_s + 1023) / 1024)))
  done
  if [ "$PP_KIND" = rc ]; then
    _got=$(count_frames 'infiniband.bth.opcode <= 5')   # RC SEND first/middle/last/only (+imm)
  else
    _got=$(count_frames 'infiniband.bth.opcode == 100 && infiniband.bth.destqp != 1')
  fi
  echo "$PP_KIND SEND packets on the wire: $_got (at least $_want expected)"
  expect "all the $PP_KIND SEND packets are on the wire" [ "$_got" -ge "$_want" ]
  _tcp=$(count_frames 'tcp.port == 18515 && tcp.len > 0')
  expect "TCP 18515 side channel carried the address exchange ($_tcp segments)" [ "$_tcp" -ge 2 ]
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
}

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

# --- ucmatose / cmtime / udaddy (rdma-core v44's librdmacm examples; spec: docs/tools.md) ------
# out_is FILE LINE...: FILE holds exactly these lines in this order (a tool's stdout); on a
# mismatch the difference is shown (- expected, + got)
out_is() {
  _f=$1; shift
  [ -f "$_f" ] && [ "$(cat "$_f")" = "$(printf '%s\n' "$@")" ] && return 0
  diff -u <(printf '%s\n' "$@") "$_f" 2>&1 | sed -n '4,40s/^/      /p'
  return 1
}
# cm_attr NAME: the CM attribute ID of a MAD name
cm_attr() {
  case $1 in
    REQ) echo 0x0010 ;; MRA) echo 0x0011 ;; REJ) echo 0x0012 ;; REP) echo 0x0013 ;; RTU) echo 0x0014 ;;
    DREQ) echo 0x0015 ;; DREP) echo 0x0016 ;; SIDR_REQ) echo 0x0017 ;; SIDR_REP) echo 0x0018 ;;
  esac
}
# cm_count NAME SRC [EXTRA]: CM MADs NAME sent by IP address SRC (and matching filter EXTRA)
cm_count() {
  count_frames "infiniband.mad.mgmtclass == 0x07 && infiniband.mad.attributeid == $(cm_attr "$1") && ip.src == $2${3:+ && ($3)}"
}
# distinct FIELD [FILTER]: how many different values FIELD takes (in the frames matching FILTER)
distinct() { tshark -r capture.pcap -Y "${2:-$1}" -T fields -e "$1" 2>/dev/null | sort -u | grep -c .; }
# frame_no first|last FILTER: the number of the first / last frame matching FILTER (0: none)
frame_no() {
  _x=$(tshark -r capture.pcap -Y "$2" -T fields -e frame.number 2>/dev/null | if [ "$1" = first ]; then head -1; else tail -1; fi)
  echo "${_x:-0}"
}
# rc_sends SRC SIZE: "QPS FEWEST" for the RC SEND-only packets with SIZE payload bytes sent by
# SRC: to how many destination QPs they went, and the fewest that any of those QPs got
rc_sends() {
  tshark -r capture.pcap -Y "infiniband.bth.opcode == 4 && ip.src == $1 && udp.length == $(($2 + 24))" \
    -T fields -e infiniband.bth.destqp 2>/dev/null | sort | uniq -c |
    awk '{ n++; if (m == "" || $1 < m) m = $1 } END { print n + 0, m + 0 }'
}
# The stdout of v44's ucmatose (cmatose.c) after a clean run with messages (-C > 0)
UCM_CLIENT_OK=("cmatose: starting client" "cmatose: connecting" "receiving data transfers"
  "sending replies" "data transfers complete" "test complete" "return status 0")
UCM_SERVER_OK=("cmatose: starting server" "initiating data transfers" "completing sends"
  "receiving data transfers" "data transfers complete" "cmatose: disconnecting" "disconnected"
  "test complete" "return status 0")
# ... and of a client whose REQ was rejected with reason 8 (no listener for the service ID)
UCM_CLIENT_REJ8=("cmatose: starting client" "cmatose: connecting"
  "cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8" "test complete" "return status 8")
# ucm_wire SERVER CLIENT CONNS COUNT SIZE: the wire of a ucmatose run (-c CONNS -C COUNT -S SIZE)
# between two addresses: per connection REQ REP RTU (client, server, client), COUNT SENDs of
# SIZE bytes each way (the server's first), RC ACKs both ways, then the server's DREQ after the
# last SEND and the client's DREP; nothing else on the CM (no REJ, MRA, retransmission)
ucm_wire() {
  uw_s=$1 uw_c=$2 uw_n=$3 uw_k=$4 uw_z=$5
  uw_a=$(mad_attrs | sort | uniq -c | awk '{ printf "%s%s=%s", s, $2, $1; s = " " }')
  echo "CM MADs: $uw_a"
  expect "$uw_n REQs from the client $uw_c" [ "$(cm_count REQ "$uw_c")" = "$uw_n" ]
  expect "$uw_n REPs from the server $uw_s" [ "$(cm_count REP "$uw_s")" = "$uw_n" ]
  expect "$uw_n RTUs from the client" [ "$(cm_count RTU "$uw_c")" = "$uw_n" ]
  expect "$uw_n DREQs from the server (the ucmatose server disconnects)" [ "$(cm_count DREQ "$uw_s")" = "$uw_n" ]
  expect "$uw_n DREPs from the client" [ "$(cm_count DREP "$uw_c")" = "$uw_n" ]
  expect "nothing else on the CM ($((5 * uw_n)) MADs)" [ "$(count_frames infiniband.mad)" = $((5 * uw_n)) ]
  expect "$uw_n distinct connections (REP remote comm IDs)" [ "$(distinct infiniband.cm.rep.remotecommid)" = "$uw_n" ]
  expect "$uw_n distinct connections disconnected (DREQ local comm IDs)" [ "$(distinct infiniband.cm.dreq.localcommid)" = "$uw_n" ]
  read -r uw_q uw_m <<< "$(rc_sends "$uw_s" "$uw_z")"
  expect "server SENDs of $uw_z bytes: to $uw_n QPs ($uw_q), >= $uw_k each (fewest $uw_m)" [ "$uw_q" = "$uw_n" -a "$uw_m" -ge "$uw_k" ]
  read -r uw_q uw_m <<< "$(rc_sends "$uw_c" "$uw_z")"
  expect "client SENDs of $uw_z bytes: to $uw_n QPs ($uw_q), >= $uw_k each (fewest $uw_m)" [ "$uw_q" = "$uw_n" -a "$uw_m" -ge "$uw_k" ]
  expect "RC ACKs from both sides" [ "$(count_frames "infiniband.bth.opcode == 17 && ip.src == $uw_s")" -ge 1 -a \
    "$(count_frames "infiniband.bth.opcode == 17 && ip.src == $uw_c")" -ge 1 ]
  uw_fs=$(frame_no first 'infiniband.bth.opcode == 4'); uw_ls=$(frame_no last 'infiniband.bth.opcode == 4')
  uw_fd=$(frame_no first "infiniband.mad.attributeid == 0x0015")
  expect "the server SENDs first (frame $uw_fs)" [ "$(count_frames "frame.number == $uw_fs && ip.src == $uw_s")" = 1 ]
  expect "the first DREQ (frame $uw_fd) follows the last SEND (frame $uw_ls)" [ "$uw_fd" -gt "$uw_ls" -a "$uw_ls" -gt 0 ]
}
# cmtime_is FILE [bind]: FILE is the stdout of v44's cmtime client after a run: the step
# progress lines, the table header and one row per step ("bind addr" only with -b): the step
# name left-justified in 13 columns, ":", four %11.2f numbers (total ms, max ms, min us,
# us / conn); and every step timed on at least one connection (min us is not its 999999999 start)
cmtime_is() {
  ct_f=$1; uw_b=${2:-}
  uw_want=("creating id") ; [ -n "$uw_b" ] && uw_want+=("binding source address")
  uw_want+=("resolving address" "resolving route" "creating qp" "connecting" "disconnecting" "destroying id"
    "step              total ms     max ms     min us  us / conn" "create id    : N")
  [ -n "$uw_b" ] && uw_want+=("bind addr    : N")
  uw_want+=("resolve addr : N" "resolve route: N" "create qp    : N" "connect      : N" "disconnect   : N" "destroy      : N")
  [ -f "$ct_f" ] || return 1
  sed -E 's/^([a-z ]{13}):( *-?[0-9]+\.[0-9]{2}){4}$/\1: N/' "$ct_f" > "$ct_f.shape"
  out_is "$ct_f.shape" "${uw_want[@]}" && ! grep -q '999999999\.00' "$ct_f"
}
# cmtime_wire SERVER CLIENT CONNS: the CM of a cmtime run with -c CONNS: at least CONNS REQ,
# RTU, DREQ from the client and REP, DREP from the server (retransmissions allowed), CONNS
# distinct connections set up and torn down, no REJ
cmtime_wire() {
  uw_s=$1 uw_c=$2 uw_n=$3
  uw_a=$(mad_attrs | sort | uniq -c | awk '{ printf "%s%s=%s", s, $2, $1; s = " " }')
  echo "CM MADs: $uw_a"
  for uw_m in REQ RTU DREQ; do expect ">= $uw_n ${uw_m}s from the client $uw_c" [ "$(cm_count $uw_m "$uw_c")" -ge "$uw_n" ]; done
  for uw_m in REP DREP; do expect ">= $uw_n ${uw_m}s from the server $uw_s" [ "$(cm_count $uw_m "$uw_s")" -ge "$uw_n" ]; done
  expect "no REJ" [ "$(count_frames 'infiniband.mad.attributeid == 0x0012')" = 0 ]
  expect "$uw_n distinct connections answered (REP remote comm IDs)" [ "$(distinct infiniband.cm.rep.remotecommid)" = "$uw_n" ]
  expect "$uw_n distinct connections established (RTU local comm IDs)" [ "$(distinct infiniband.cm.rtu.localcommid)" = "$uw_n" ]
  expect "$uw_n distinct connections disconnected (DREQ local comm IDs)" [ "$(distinct infiniband.cm.dreq.localcommid)" = "$uw_n" ]
  expect "$uw_n distinct DREPs (DREP remote comm IDs)" [ "$(distinct infiniband.cm.drsp.remotecommid)" = "$uw_n" ]
}

# --- udaddy (rdma-core v44's udaddy.c; spec: docs/tools.md) ----------------------------------
UDA_CLIENT_OK=("udaddy: starting client" "udaddy: connecting" "initiating data transfers"
  "receiving data transfers" "data transfers complete" "test complete" "return status 0")
UDA_SERVER_OK=("udaddy: starting server" "receiving data transfers" "sending replies"
  "data transfers complete" "test complete" "return status 0")
# ... and of a client whose SIDR REQ got SIDR REP status 1 (no listener for the service ID)
UDA_CLIENT_UNREACH1=("udaddy: starting client" "udaddy: connecting"
  "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1" "test complete" "return status 1")
# sidr_msgs [PCAP]: the SIDR MADs (tshark has no SIDR fields; `softrdma decode --json` does),
# one line each: "REQ SRC SERVICE_ID TOS" or "REP SRC SERVICE_ID STATUS QPN QKEY"
sidr_msgs() {
  [ -x "${SOFTRDMA:-}" ] || return 0
  "$SOFTRDMA" decode --json "${1:-capture.pcap}" 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l)
    ib, ip = d.get("infiniband") or {}, d.get("ip") or {}
    ds = ip.get("dsfield") or {}
    tos = (ds.get("dscp", 0) << 2) | ds.get("ecn", 0)
    if "cm_sidr_req" in ib:
        print("REQ", ip.get("src"), ib["cm_sidr_req"]["service_id"], "0x%02x" % tos)
    elif "cm_sidr_rep" in ib:
        r = ib["cm_sidr_rep"]
        print("REP", ip.get("src"), r["service_id"], r["status"], r["qpn"], "0x%08x" % r["qkey"])
'
}
# ud_sends SRC SIZE: "QPS FEWEST" for the UD SEND-with-immediate packets of SIZE payload bytes
# sent by SRC (BTH 12 + DETH 8 + ImmDt 4 + ICRC 4 + UDP 8 = SIZE + 36 bytes of UDP)
ud_sends() {
  tshark -r capture.pcap -Y "infiniband.bth.opcode == 101 && ip.src == $1 && udp.length == $(($2 + 36))" \
    -T fields -e infiniband.bth.destqp 2>/dev/null | sort | uniq -c |
    awk '{ n++; if (m == "" || $1 < m) m = $1 } END { print n + 0, m + 0 }'
}
# ud_wire SERVER CLIENT CONNS COUNT SIZE: the wire of a udaddy run (-c CONNS -C COUNT -S SIZE):
# per connection one SIDR REQ (client, service ID 0x1111c06) and one SIDR REP (server, status 0,
# Q_Key 0x01234567) and nothing else on the CM; COUNT SENDs with immediate of SIZE bytes to each
# of the CONNS server QPs named in the SIDR REPs (Q_Key 0x01234567, the immediate being the
# sender's QPN), then COUNT back to the client QPs; the client's first
ud_wire() {
  uw_s=$1 uw_c=$2 uw_n=$3 uw_k=$4 uw_z=$5
  echo "CM MADs: $(mad_attrs | tr '\n' ' ')"
  expect "$uw_n SIDR REQs from the client $uw_c" [ "$(cm_count SIDR_REQ "$uw_c")" = "$uw_n" ]
  expect "$uw_n SIDR REPs from the server $uw_s" [ "$(cm_count SIDR_REP "$uw_s")" = "$uw_n" ]
  expect "nothing else on the CM ($((2 * uw_n)) MADs)" [ "$(count_frames infiniband.mad)" = $((2 * uw_n)) ]
  sidr_msgs > sidr.txt
  cat sidr.txt
  if [ -s sidr.txt ]; then
    expect "every SIDR REQ for service ID 0x1111c06 (UDP, port 7174)" \
      [ "$(awk '$1 == "REQ" && $3 != "0x0000000001111c06"' sidr.txt | wc -l)" = 0 ]
    expect "every SIDR REP status 0, Q_Key 0x01234567, service ID 0x1111c06" \
      [ "$(awk '$1 == "REP" && !($4 == 0 && $6 == "0x01234567" && $3 == "0x0000000001111c06")' sidr.txt | wc -l)" = 0 ]
    uw_q=$(awk '$1 == "REP" { print $5 }' sidr.txt | sort -un | tr '\n' ' ')
    uw_d=$(tshark -r capture.pcap -Y "infiniband.bth.opcode == 101 && ip.src == $uw_c" -T fields -e infiniband.bth.destqp 2>/dev/null |
      while read -r q; do echo $((q)); done | sort -un | tr '\n' ' ')
    expect "the client sends to the QPNs of the SIDR REPs ($uw_q) and no other ($uw_d)" [ "$uw_q" = "$uw_d" -a -n "$uw_q" ]
  fi
  read -r uw_q uw_m <<< "$(ud_sends "$uw_c" "$uw_z")"
  expect "client SENDs with immediate of $uw_z bytes: to $uw_n QPs ($uw_q), >= $uw_k each (fewest $uw_m)" [ "$uw_q" = "$uw_n" -a "$uw_m" -ge "$uw_k" ]
  read -r uw_q uw_m <<< "$(ud_sends "$uw_s" "$uw_z")"
  expect "server SENDs with immediate of $uw_z bytes: to $uw_n QPs ($uw_q), >= $uw_k each (fewest $uw_m)" [ "$uw_q" = "$uw_n" -a "$uw_m" -ge "$uw_k" ]
  expect "every UD SEND's Q_Key 0x01234567" [ "$(count_frames 'infiniband.bth.opcode == 101 && infiniband.deth.q_key != 0x01234567')" = 0 ]
  uw_bad=$(tshark -r capture.pcap -Y "infiniband.bth.opcode == 101" -T fields -e infiniband.deth.srcqp -e infiniband.immdt 2>/dev/null |
    while IFS=$'\t' read -r q imm; do [ $((q)) = $((16#${imm%%,*})) ] || echo bad; done | wc -l)
  expect "every immediate is the sender's QPN" [ "$uw_bad" = 0 ]
  uw_fc=$(frame_no first "infiniband.bth.opcode == 101 && ip.src == $uw_c")
  uw_fs=$(frame_no first "infiniband.bth.opcode == 101 && ip.src == $uw_s")
  expect "the client SENDs first (frame $uw_fc, the server's first $uw_fs)" [ "$uw_fc" -gt 0 -a "$uw_fs" -gt "$uw_fc" ]
}

# --- Debian's verbs programs over softrdma's libibverbs (scenarios verbs_*, helpers in lib.sh) --
# dv_check: both phases' server and client exited 0 and printed their results (DV_RESULT: a
# regex of the line a successful run prints, from the scenario's dv.env); RoCEv2 went both ways
# between the host and the guest; every ICRC is right.
dv_check() {
  for _ph in 1 2; do
    for _r in server client; do
      _f=share/dv-$_ph.$_r
      expect "phase $_ph $_r ($DV_TOOL) exit 0" rc_is "$_f.rc" 0
      expect "phase $_ph $_r ($DV_TOOL) printed its results" has "$_f.txt" "$DV_RESULT"
      expect "phase $_ph $_r: no error on stderr" bash -c "! grep -qiE 'error|fail|invalid|couldn' '$_f.err'"
    done
  done
  _h=$(count_frames 'ip.src == 10.77.0.1 && udp.dstport == 4791')
  _g=$(count_frames 'ip.src == 10.77.0.10 && udp.dstport == 4791')
  expect "RoCEv2 host -> guest ($_h frames) and guest -> host ($_g frames)" test "$_h" -gt 0 -a "$_g" -gt 0
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
}

# rping_check CLIENT SERVER: the verdict of an rping scenario (3 pings, -v), either direction,
# CLIENT and SERVER naming the two programs: both exit 0, the same 3 ping lines on both sides,
# the CM exchange REQ REP RTU DREQ DREP, the RC data traffic, every ICRC right. Used by
# rping_{guest,host}_server and librdmacm_rping_{guest,host}_server.
rping_check() {
  expect "client ($1) exit 0" rc_is share/client.rc 0
  expect "server ($2) exit 0" rc_is share/server.rc 0
  expect "client printed 3 pings" has share/rping-client.txt '^ping data: rdma-ping-[0-9]+: ' 3
  expect "server printed 3 pings" has share/rping-server.txt '^server ping data: rdma-ping-[0-9]+: ' 3
  _c=$(grep -E '^ping data: ' share/rping-client.txt 2>/dev/null | sed 's/^ping data: //')
  _s=$(grep -E '^server ping data: ' share/rping-server.txt 2>/dev/null | sed 's/^server ping data: //')
  expect "ping data lines match on both sides" [ -n "$_c" -a "$_c" = "$_s" ]
  attrs=$(mad_attrs | tr '\n' ' ')
  echo "CM MADs: $attrs"
  expect "CM sequence REQ REP RTU DREQ DREP" [ "$attrs" = "REQ REP RTU DREQ DREP " ]
  expect "RC data packets (RDMA READ/WRITE, SEND, ACK)" [ "$(count_frames 'infiniband.bth.opcode < 0x20')" -ge 12 ]
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
}
# ucmatose_guest_server_check OURS: the checks of ucmatose_guest_server and librdmacm_ucmatose_guest_server
# (see their check.sh); OURS names the host-side program: `softrdma ucmatose`, or
# Debian's ucmatose over softrdma's librdmacm.
ucmatose_guest_server_check() {
  expect "client ($1) exit 0" rc_is share/host-client.rc 0
  expect "client stdout is v44's, line for line" out_is share/host-client.txt "${UCM_CLIENT_OK[@]}"
  expect "server (guest ucmatose) exited by itself" [ "$(cat share/guest-server.end 2>/dev/null)" = exited ]
  expect "server exit 0" rc_is share/guest-server.rc 0
  expect "server stdout is v44's, line for line" out_is share/guest-server.txt "${UCM_SERVER_OK[@]}"
  expect "server stderr empty" [ -f share/guest-server.err -a ! -s share/guest-server.err ]
  ucm_wire 10.77.0.10 10.77.0.1 4 10 100
  expect "our 4 REQs as cmatose's rdma_connect: port 7471 (service ID 0x1061d2f), responder resources 1, initiator depth 1, retry count 5, RNR retry 0" \
    [ "$(cm_count REQ 10.77.0.1 'infiniband.cm.req.serviceid == 0x1061d2f && infiniband.cm.req.responderres == 1 && infiniband.cm.req.initdepth == 1 && infiniband.cm.req.retrcount == 5 && infiniband.cm.req.rnrretrcount == 0')" = 4 ]
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
}
# ucmatose_host_server_check OURS: the checks of ucmatose_host_server and librdmacm_ucmatose_host_server
# (see their check.sh); OURS names the host-side program: `softrdma ucmatose`, or
# Debian's ucmatose over softrdma's librdmacm.
ucmatose_host_server_check() {
  expect "client (guest ucmatose) exit 0" rc_is share/guest-client.rc 0
  expect "client stdout is v44's, line for line" out_is share/guest-client.txt "${UCM_CLIENT_OK[@]}"
  expect "client stderr empty" [ -f share/guest-client.err -a ! -s share/guest-client.err ]
  expect "server ($1) exited by itself" [ "$(cat share/host-server.end 2>/dev/null)" = exited ]
  expect "server exit 0" rc_is share/host-server.rc 0
  expect "server stdout is v44's, line for line" out_is share/host-server.txt "${UCM_SERVER_OK[@]}"
  ucm_wire 10.77.0.1 10.77.0.10 4 10 100
  expect "our 4 REPs as librdmacm's rdma_accept(id, NULL): responder resources 1, initiator depth 1, RNR retry 7" \
    [ "$(cm_count REP 10.77.0.1 'infiniband.cm.rep.respres == 1 && infiniband.cm.rep.initdepth == 1 && infiniband.cm.rep.rnrretrcount == 7')" = 4 ]
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
}
# cmtime_guest_server_check OURS: the checks of cmtime_guest_server and librdmacm_cmtime_guest_server
# (see their check.sh); OURS names the host-side program: `softrdma cmtime`, or
# Debian's cmtime over softrdma's librdmacm.
cmtime_guest_server_check() {
  expect "client ($1) exit 0" rc_is share/host-client.rc 0
  expect "client stdout: progress lines and the step table with bind addr, every step timed" cmtime_is share/host-client.txt bind
  expect "server (guest cmtime) still running when stopped" [ "$(cat share/guest-server.end 2>/dev/null)" = killed ]
  expect "server died of the SIGTERM (143)" rc_is share/guest-server.rc 143
  # v44's server prints only on errors; its stdout is lost when it is killed, stderr (perror) is not
  expect "server printed no error (stderr)" [ -f share/guest-server.err -a ! -s share/guest-server.err ]
  cmtime_wire 10.77.0.10 10.77.0.1 200
  expect "our REQs as cmtime's rdma_connect: port 7471 (service ID 0x1061d2f), responder resources 1, initiator depth 1, retry count 2 (-r default), RNR retry 0" \
    [ "$(cm_count REQ 10.77.0.1 '!(infiniband.cm.req.serviceid == 0x1061d2f && infiniband.cm.req.responderres == 1 && infiniband.cm.req.initdepth == 1 && infiniband.cm.req.retrcount == 2 && infiniband.cm.req.rnrretrcount == 0)')" = 0 ]
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
}
# cmtime_host_server_check OURS: the checks of cmtime_host_server and librdmacm_cmtime_host_server
# (see their check.sh); OURS names the host-side program: `softrdma cmtime`, or
# Debian's cmtime over softrdma's librdmacm.
cmtime_host_server_check() {
  expect "client (guest cmtime) exit 0" rc_is share/guest-client.rc 0
  expect "client stdout: progress lines and the step table, every step timed" cmtime_is share/guest-client.txt
  expect "client stderr empty" [ -f share/guest-client.err -a ! -s share/guest-client.err ]
  expect "server ($1) still running when stopped" [ "$(cat share/host-server.end 2>/dev/null)" = killed ]
  # SIGTERM: v44 dies of it (143); a softrdma server may instead stop cleanly (0)
  expect "server exit on SIGTERM 0 or 143 ($(cat share/host-server.rc 2>/dev/null))" \
    [ "$(cat share/host-server.rc 2>/dev/null)" = 0 -o "$(cat share/host-server.rc 2>/dev/null)" = 143 ]
  expect "server printed no error" [ -f share/host-server.txt -a ! -s share/host-server.txt ]
  cmtime_wire 10.77.0.1 10.77.0.10 200
  expect "our REPs as rdma_accept(id, NULL): responder resources 1, initiator depth 1, RNR retry 7" \
    [ "$(cm_count REP 10.77.0.1 '!(infiniband.cm.rep.respres == 1 && infiniband.cm.rep.initdepth == 1 && infiniband.cm.rep.rnrretrcount == 7)')" = 0 ]
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
}
# udaddy_guest_server_check OURS: the checks of udaddy_guest_server and librdmacm_udaddy_guest_server
# (see their check.sh); OURS names the host-side program: `softrdma udaddy`, or
# Debian's udaddy over softrdma's librdmacm.
udaddy_guest_server_check() {
  expect "client ($1) exit 0" rc_is share/host-client.rc 0
  expect "client stdout is v44's, line for line" out_is share/host-client.txt "${UDA_CLIENT_OK[@]}"
  expect "server (guest udaddy) exited by itself" [ "$(cat share/guest-server.end 2>/dev/null)" = exited ]
  expect "server exit 0" rc_is share/guest-server.rc 0
  expect "server stdout is v44's, line for line" out_is share/guest-server.txt "${UDA_SERVER_OK[@]}"
  expect "server stderr empty" [ -f share/guest-server.err -a ! -s share/guest-server.err ]
  ud_wire 10.77.0.10 10.77.0.1 2 10 100
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
}
# udaddy_host_server_check OURS: the checks of udaddy_host_server and librdmacm_udaddy_host_server
# (see their check.sh); OURS names the host-side program: `softrdma udaddy`, or
# Debian's udaddy over softrdma's librdmacm.
udaddy_host_server_check() {
  expect "client (guest udaddy) exit 0" rc_is share/guest-client.rc 0
  expect "client stdout is v44's, line for line" out_is share/guest-client.txt "${UDA_CLIENT_OK[@]}"
  expect "client stderr empty" [ -f share/guest-client.err -a ! -s share/guest-client.err ]
  expect "server ($1) exited by itself" [ "$(cat share/host-server.end 2>/dev/null)" = exited ]
  expect "server exit 0" rc_is share/host-server.rc 0
  expect "server stdout is v44's, line for line" out_is share/host-server.txt "${UDA_SERVER_OK[@]}"
  ud_wire 10.77.0.1 10.77.0.10 2 10 100
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
  softrdma_decode capture.pcap
  if [ -s softrdma-decode.txt ]; then
    expect "softrdma decode reads the SIDR REQs and REPs" has softrdma-decode.txt 'CM ServiceIDResReqResp' 2
  fi
}
# mckey_check RX TX RX_IP TX_IP GROUP: an mckey run (-C 10 -S 100), RX and TX the receiver's
# and sender's output prefixes (RX.txt, RX.rc...): both exit 0 and print mckey's lines with
# the joined MGID ::ffff:GROUP; no CM MAD (RoCE has no SA: the join is local); an IGMP
# membership report for GROUP from the receiver's address (the full member's join: rxe's
# cma_igmp_send, our group socket's IP_ADD_MEMBERSHIP); the sender's 10 UD SENDs with
# immediate of 100 bytes to IP GROUP on its multicast MAC, BTH destination QP 0xffffff, DETH
# Q_Key 0x01234567; every ICRC right.
mckey_check() {
  mk_r=$1 mk_t=$2 mk_ri=$3 mk_ti=$4 mk_g=$5
  _j="mckey: joined dgid: ::ffff:$mk_g mlid 0x0 sl 0"
  expect "receiver exit 0" rc_is "$mk_r.rc" 0
  expect "sender exit 0" rc_is "$mk_t.rc" 0
  expect "receiver joined ($_j)" has "$mk_r.txt" "^$_j\$"
  expect "sender joined" has "$mk_t.txt" "^$_j\$"
  expect "receiver: receiving data transfers, data transfers complete, return status 0" \
    bash -c "grep -qx 'receiving data transfers' '$mk_r.txt' && grep -qx 'data transfers complete' '$mk_r.txt' && grep -qx 'return status 0' '$mk_r.txt'"
  expect "sender: initiating data transfers, data transfers complete, return status 0" \
    bash -c "grep -qx 'initiating data transfers' '$mk_t.txt' && grep -qx 'data transfers complete' '$mk_t.txt' && grep -qx 'return status 0' '$mk_t.txt'"
  expect "no CM MAD on the wire" [ "$(count_frames infiniband.mad)" = 0 ]
  _ig=$(count_frames "igmp && ip.src == $mk_ri && igmp.maddr == $mk_g")
  expect "IGMP membership report for $mk_g from the receiver $mk_ri ($_ig)" [ "$_ig" -ge 1 ]
  _o=$(printf '01:00:5e:%02x:%02x:%02x' $(( $(echo "$mk_g" | cut -d. -f2) & 127 )) "$(echo "$mk_g" | cut -d. -f3)" "$(echo "$mk_g" | cut -d. -f4)")
  _s=$(count_frames "infiniband.bth.opcode == 101 && ip.src == $mk_ti && ip.dst == $mk_g && eth.dst == $_o && infiniband.bth.destqp == 0xffffff && infiniband.deth.q_key == 0x01234567 && udp.length == 136")
  expect "10 UD SENDs with immediate of 100 bytes from $mk_ti to $mk_g ($_o), QPN 0xffffff, Q_Key 0x01234567 ($_s)" [ "$_s" = 10 ]
  expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
}

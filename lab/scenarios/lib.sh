# Helpers sourced by scenario scripts: the guests' A.sh/B.sh (busybox sh) and host.sh (bash).
# cwd is the share (9p in the guests), visible to both guests and the host: flag files live there.
A_IP=10.77.0.10; B_IP=10.77.0.11; HOST_IP=10.77.0.1
A_IP6=fd77::10; B_IP6=fd77::11; HOST_IP6=fd77::1
# wait_flag FILE [SECONDS]: wait for a flag file (another side's "ready"/"done")
wait_flag() {
  _t=$(( ${2:-45} * 5 )); _i=0
  while [ ! -e "$1" ]; do
    sleep 0.2; _i=$((_i + 1))
    [ $_i -gt $_t ] && { echo "timeout waiting for $1"; return 1; }
  done
  return 0
}
# stamp TEXT: a timestamped marker in the output (guest uptime, or host clock)
stamp() { echo "=== [$(cut -d' ' -f1 /proc/uptime)] $*"; }
# run_rc NAME CMD...: run CMD, print and save its exit status as NAME.rc (for check.sh)
run_rc() { _n=$1; shift; "$@"; _rc=$?; echo "$_n rc=$_rc"; echo $_rc > "$_n.rc"; return $_rc; }
# run_to NAME CMD...: run CMD with stdout in NAME.txt and stderr in NAME.err (kept apart, so a
# check can hold a tool's stdout to the exact lines rdma-core prints); save the exit status as
# NAME.rc; show both files and "NAME rc=N"
run_to() {
  _n=$1; shift
  "$@" > "$_n.txt" 2> "$_n.err"; _rc=$?
  echo $_rc > "$_n.rc"; cat "$_n.txt" "$_n.err"; echo "$_n rc=$_rc"; return $_rc
}
# alive PID: the process exists and has not exited (a zombie, i.e. exited but not yet reaped
# by the shell, counts as gone: `kill -0` alone would say it is there)
alive() { [ -r "/proc/$1/stat" ] && ! grep -qE '^[0-9]+ \(.*\) [ZX] ' "/proc/$1/stat" 2>/dev/null; }
# stop_bg NAME PID [SECONDS]: give a background program (started with `> NAME.txt 2> NAME.err &`)
# SECONDS (default 5; 0 = none) to exit by itself, then SIGTERM it. Saves NAME.end ("exited": it
# ended by itself, "killed": it was still running) and NAME.rc; shows its output
stop_bg() {
  _n=$1; _p=$2; _t=$(( ${3:-5} * 5 )); _i=0
  while alive "$_p" && [ $_i -lt $_t ]; do sleep 0.2; _i=$((_i + 1)); done
  if alive "$_p"; then echo killed > "$_n.end"; kill "$_p" 2>/dev/null; else echo exited > "$_n.end"; fi
  wait "$_p"; _rc=$?
  echo $_rc > "$_n.rc"; cat "$_n.txt" "$_n.err" 2>/dev/null; echo "$_n rc=$_rc ($(cat "$_n.end"))"
}
# wait_listen PORT [SECONDS [PID]]: wait until a TCP listener on PORT exists (in this netns /
# guest); gives up early when process PID (the one supposed to listen) has exited
wait_listen() {
  _h=$(printf '%04X' "$1"); _t=$(( ${2:-30} * 5 )); _i=0
  while ! grep -qE ":$_h [0-9A-F]+:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
    if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then echo "process $3 exited before listening on TCP $1"; return 1; fi
    sleep 0.2; _i=$((_i + 1))
    [ $_i -gt $_t ] && { echo "timeout waiting for a listener on TCP $1"; return 1; }
  done
  return 0
}

# wait_udp PORT [SECONDS [PID]]: wait until a UDP socket is bound to PORT (in this netns), e.g. a
# softrdma device's 4791 before a program over it is told ready; gives up early when PID exits
wait_udp() {
  _h=$(printf '%04X' "$1"); _t=$(( ${2:-30} * 5 )); _i=0
  while ! grep -qE ":$_h 00000000:0000 07" /proc/net/udp /proc/net/udp6 2>/dev/null; do
    if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then echo "process $3 exited before binding UDP $1"; return 1; fi
    sleep 0.2; _i=$((_i + 1))
    [ $_i -gt $_t ] && { echo "timeout waiting for a socket on UDP $1"; return 1; }
  done
  return 0
}

# --- pingpong (ibv_rc_pingpong / ibv_ud_pingpong and `softrdma pingpong`) ------------------------
# Parameters (a scenario's pp.env): PP_KIND rc|ud, PP_SIZES "8 4096 ...", PP_N iterations.
# One exchange per size, in turn; both sides leave pp-KIND-SIZE.{server,client}.{txt,rc} in the share.
# The side channel is TCP 18515 (the tools' default): LID:QPN:PSN:GID, GID index 1 = ::ffff:IPv4.
# pp_run SIDE SIZE [PEER]: one pingpong run; SIDE guest = the rdma-core tool, host = $SOFTRDMA
# Each run is limited to PP_TIMEOUT (15) s: a healthy one takes < 1 s, and a kernel RC QP with
# the tools' retry_cnt 7 retransmits forever (rxe treats 7 as "infinite") when the peer is silent.
# RoCEv2 addressing (pp.env may override): the host's device PP_HOST_DEV ($HOST_IP) with GID
# index PP_HOST_GIDX (1: its address), the guest's GID index PP_GUEST_GIDX (1: ::ffff:IPv4;
# 2: the IPv6 address, with IPV6=1). PEER is always an IPv4 address: the tools' TCP side
# channel is IPv4-only in the guest whatever GIDs the QPs use.
pp_run() {
  _side=$1; _s=$2; shift 2
  if [ "$_side" = host ]; then
    timeout "${PP_TIMEOUT:-15}" "$SOFTRDMA" pingpong "$PP_KIND" -d "${PP_HOST_DEV:-$HOST_IP}" -g "${PP_HOST_GIDX:-1}" -s "$_s" -n "$PP_N" -c "$@"
  else
    timeout "${PP_TIMEOUT:-15}" "ibv_${PP_KIND}_pingpong" -g "${PP_GUEST_GIDX:-1}" -s "$_s" -n "$PP_N" -c "$@"
  fi
}
# pp_server SIDE: for each size start a server, announce it (srv.ready.SIZE) once it listens,
# and stop it at the latest 5 s after the client is done (cli.done.SIZE); pp.abort = stop
pp_server() {
  for _s in $PP_SIZES; do
    _f=pp-$PP_KIND-$_s.server
    [ -e pp.abort ] && { echo "server size $_s: not run (an earlier size failed)"; continue; }
    stamp "pingpong $PP_KIND server ($1) size $_s"
    pp_run "$1" "$_s" > "$_f.txt" 2>&1 &
    _p=$!
    if wait_listen 18515 30 $_p; then
      touch "srv.ready.$_s"
      wait_flag "cli.done.$_s" 45
    else
      touch pp.abort "srv.failed.$_s"   # the client stops instead of waiting for nothing
    fi
    _i=0; while kill -0 $_p 2>/dev/null && [ $_i -lt 25 ]; do sleep 0.2; _i=$((_i + 1)); done
    kill $_p 2>/dev/null; wait $_p; _rc=$?
    echo $_rc > "$_f.rc"; cat "$_f.txt"; echo "server size $_s rc=$_rc"
  done
}
# pp_client SIDE PEER: for each size wait for the server, run the client, announce cli.done.SIZE
pp_client() {
  for _s in $PP_SIZES; do
    _f=pp-$PP_KIND-$_s.client
    _i=0; while [ ! -e "srv.ready.$_s" ] && [ ! -e "srv.failed.$_s" ] && [ $_i -lt 225 ]; do sleep 0.2; _i=$((_i + 1)); done
    if [ -e "srv.ready.$_s" ]; then
      stamp "pingpong $PP_KIND client ($1) size $_s -> $2"
      pp_run "$1" "$_s" "$2" > "$_f.txt" 2>&1; _rc=$?
    else
      _rc=125; echo "the server never listened on TCP 18515; not run" > "$_f.txt"
    fi
    echo $_rc > "$_f.rc"; cat "$_f.txt"; echo "client size $_s rc=$_rc"
    # fail fast: after a failure the remaining sizes are not run (pp.abort before cli.done, so
    # that the server, which waits for cli.done, sees it before it starts the next size)
    [ $_rc = 0 ] || touch pp.abort
    touch "cli.done.$_s"
    [ -e pp.abort ] && { echo "client: stopping after size $_s"; break; }
  done
}

# --- Debian's verbs programs over softrdma's libibverbs.so.1 (scenarios verbs_*) ----------------
# Debian's own verbs programs (ibverbs-utils, perftest) on the host over softrdma's
# libibverbs.so.1 (`softrdma run -- TOOL`, device softrdma_br0 = 10.77.0.1) against the same
# programs on guest A's kernel rxe (rxe0), both directions in one scenario:
#   phase 1: server on the host  <- client in guest A
#   phase 2: server in guest A   <- client on the host
# Sourced after lib.sh by A.sh (busybox sh) and host.sh (bash); the scenario's dv.env sets
#   DV_TOOL  the program (ibv_rc_pingpong, ib_write_bw, ...)
#   DV_GIDX  its GID-index option (-g for the pingpongs, -x for perftest); index 1 on both
#            ends = ::ffff:IPv4 (rxe's table, and ours: docs in crates/softrdma-verbs/src/devices.rs)
#   DV_ARGS  the options both ends take (sizes, iterations)
# Each run leaves dv-PHASE.{server,client}.{txt,err,rc} in the share; the side channel is TCP
# 18515 (-p); every run is limited to DV_TIMEOUT (30) s.
DV_PORT=18515
# dv_cmd SIDE: the command line of SIDE (host | guest), without the peer
dv_cmd() {
  if [ "$1" = host ]; then
    echo "$SOFTRDMA run -- $DV_TOOL -d softrdma_br0 $DV_GIDX 1 -p $DV_PORT $DV_ARGS"
  else
    echo "$DV_TOOL -d rxe0 $DV_GIDX 1 -p $DV_PORT $DV_ARGS"
  fi
}
# dv_server SIDE PHASE: run SIDE's server, announce dv-PHASE.ready once it listens, wait for
# the client (dv-PHASE.done), then give the server 5 s to finish by itself
dv_server() {
  stamp "phase $2: $DV_TOOL server ($1)"
  timeout "${DV_TIMEOUT:-30}" $(dv_cmd "$1") > "dv-$2.server.txt" 2> "dv-$2.server.err" &
  _p=$!
  if wait_listen $DV_PORT 30 $_p; then touch "dv-$2.ready"; else touch "dv-$2.failed"; fi
  wait_flag "dv-$2.done" 60
  stop_bg "dv-$2.server" $_p 5
}
# dv_client SIDE PHASE PEER: wait for the other side's server, run SIDE's client to PEER
dv_client() {
  _i=0; while [ ! -e "dv-$2.ready" ] && [ ! -e "dv-$2.failed" ] && [ $_i -lt 300 ]; do sleep 0.2; _i=$((_i + 1)); done
  if [ -e "dv-$2.ready" ]; then
    stamp "phase $2: $DV_TOOL client ($1) -> $3"
    run_to "dv-$2.client" timeout "${DV_TIMEOUT:-30}" $(dv_cmd "$1") "$3"
  else
    echo "the server never listened on TCP $DV_PORT; not run" > "dv-$2.client.txt"; echo 125 > "dv-$2.client.rc"
  fi
  touch "dv-$2.done"
}

# --- SRP (ib_srp in a guest -> `softrdma srpt` on the host) --------------------------------------
SRP_ADD=/sys/class/infiniband_srp/srp-rxe0-1/add_target
# srp_disks: the SCSI disks present, one line each
srp_disks() { ls /sys/block | grep '^sd'; }
# srp_login OPTS: an add_target with OPTS (the line srpt printed, plus initiator_ext= etc.),
# then wait for the disk it brings; SRP_DEV = that disk's name (empty if none came). ib_srp
# removes a logged-out target port in the background: until it is gone, the same add_target
# is refused ("Already connected"), so a refusal is tried again for a few seconds.
srp_login() {
  _before=" $(srp_disks | tr '\n' ' ') "; SRP_DEV=
  stamp "add_target $1"
  for _t in $(seq 25); do echo "$1" > $SRP_ADD 2>/dev/null && break; sleep 0.2; done
  echo "add_target rc=$? (try $_t)"
  for _i in $(seq 100); do
    for _d in $(srp_disks); do
      case "$_before" in *" $_d "*) ;; *) [ -b /dev/$_d ] && SRP_DEV=$_d ;; esac
    done
    [ -n "$SRP_DEV" ] && break; sleep 0.2
  done
  echo "disk: $SRP_DEV"
}
# srp_logout_all: delete every SRP remote port, wait for the disks to go
srp_logout_all() {
  stamp "logout"
  for h in /sys/class/srp_remote_ports/*; do [ -e "$h/delete" ] && echo 1 > "$h/delete"; done
  for _i in $(seq 100); do [ -z "$(srp_disks)" ] && break; sleep 0.2; done
  echo "disks after logout: [$(srp_disks | tr '\n' ' ')]"
}
# srpt_start NAME ARGS... (host.sh): `softrdma srpt ARGS` in the background, stdout NAME.txt,
# stderr NAME.err; waits for its add_target line; SRPT_PID = its PID
srpt_start() {
  _n=$1; shift
  RUST_LOG=${RUST_LOG:-debug} "$SOFTRDMA" srpt "$@" > "$_n.txt" 2> "$_n.err" &
  SRPT_PID=$!
  for _i in $(seq 50); do grep -q '^add_target: ' "$_n.txt" 2>/dev/null && break; sleep 0.1; done
  cat "$_n.txt"
}

# wait_mcast GROUP [SECONDS]: wait until an interface here (guest, or the host's netns) joined
# the IPv4 multicast group GROUP (/proc/net/igmp: rxe's cma_igmp_send, or a softrdma device's
# group socket). mckey's own "joined" line cannot serve: its stdout is a file, fully buffered.
wait_mcast() {
  _g=$(echo "$1" | awk -F. '{ printf "%02X%02X%02X%02X", $4, $3, $2, $1 }'); _t=$(( ${2:-30} * 5 )); _i=0
  while ! grep -q "$_g" /proc/net/igmp 2>/dev/null; do
    sleep 0.2; _i=$((_i + 1))
    [ $_i -gt $_t ] && { echo "timeout waiting for a join of $1"; return 1; }
  done
  return 0
}

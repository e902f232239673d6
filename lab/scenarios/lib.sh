# Helpers sourced by scenario scripts: the guests' A.sh/B.sh (busybox sh) and host.sh (bash).
# cwd is the share (9p in the guests), visible to both guests and the host: flag files live there.
A_IP=10.77.0.10; B_IP=10.77.0.11; HOST_IP=10.77.0.1
A_IP6=fd77::10; B_IP6=fd77::11; HOST_IP6=fd77::1
# wait_flag FILE [SECONDS]: wait for a flag file (another side's "ready"/"done")
wait_flag() {
  _t=$(( ${2:-60} * 5 )); _i=0
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

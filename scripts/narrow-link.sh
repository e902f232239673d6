#!/usr/bin/env bash
# The narrow link of issue 21, for commands run by hand and for the SRP benchmark: two
# network namespaces of our own ("${NAME}a", "${NAME}b") joined by a veth pair (MTU 1500),
# each direction shaped by htb to RATE over a tail-drop bfifo of QUEUE bytes. Side A has
# 10.221.0.1, side B 10.221.0.2; these addresses exist only inside the two namespaces.
# Needs root and iproute2 (ip, tc). `softrdma perf write bw --link 2gbit` builds the same
# link by itself.
#
#   scripts/narrow-link.sh up [RATE] [QUEUE]     build it (default 2gbit, 262144 bytes)
#   scripts/narrow-link.sh down                  delete it
#   scripts/narrow-link.sh exec a|b CMD...       run CMD in side A's or B's namespace
#   scripts/narrow-link.sh stats                 the two queues' sent/dropped counters
#   scripts/narrow-link.sh srp-bench [RATE] [RUNTIME] [BIN]
#       builds the link, runs `softrdma srpt` (memory LUN) in A and
#       `softrdma srp bench --bs 1M --iodepth 8` (read, then write) in B, then the same
#       workloads with fio --ioengine=nbd against nbdkit memory over TCP through the same
#       link, prints both, and deletes the link (also when interrupted). Ours runs with
#       SOFTRDMA_CC=1 (congestion control on); CC=0 in the environment turns it off.
#
# LOSS=1% (and SEED=N) in the environment puts the frame relay in the middle: a third
# namespace "${NAME}r" joined to A's veth by r0 and to B's by r1, GSO/TSO/GRO off on the
# four veths (needs ethtool), and `softrdma relay` (BIN, default target/release/softrdma)
# forwarding frames unchanged between r0 and r1, losing LOSS of the IP frames each way.
# srp-bench then also runs a verified random read/write workload (srp bench --verify).
set -euo pipefail

NAME=${NARROW_LINK_NAME:-srlsh}
A=${NAME}a
B=${NAME}b
R=${NAME}r
BIN=${BIN:-target/release/softrdma}
RELAY_PID=/run/${NAME}-relay.pid
ADDR_A=10.221.0.1
ADDR_B=10.221.0.2

need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "narrow-link: skipped: needs root (network namespaces, tc)" >&2
        exit 77
    fi
    command -v ip >/dev/null && command -v tc >/dev/null || {
        echo "narrow-link: skipped: needs iproute2 (ip, tc)" >&2
        exit 77
    }
}

down() {
    if [ -f "$RELAY_PID" ]; then
        kill "$(cat "$RELAY_PID")" 2>/dev/null || true
        rm -f "$RELAY_PID"
    fi
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    ip netns del "$R" 2>/dev/null || true
}

up() {
    local rate=${1:-2gbit} queue=${2:-262144}
    down
    ip netns add "$A"
    ip netns add "$B"
    if [ -n "${LOSS:-}" ]; then
        command -v ethtool >/dev/null || { echo "narrow-link: LOSS needs ethtool" >&2; exit 1; }
        [ -x "$BIN" ] || { echo "narrow-link: $BIN not found (cargo build --release -p softrdma)" >&2; exit 1; }
        ip netns add "$R"
        ip link add "${A}v" netns "$A" mtu 1500 type veth peer name r0 netns "$R" mtu 1500
        ip link add "${B}v" netns "$B" mtu 1500 type veth peer name r1 netns "$R" mtu 1500
        for nd in "$A:${A}v" "$B:${B}v" "$R:r0" "$R:r1"; do
            ip netns exec "${nd%%:*}" ethtool -K "${nd#*:}" tso off gso off gro off tx-udp-segmentation off >/dev/null
        done
        ip -n "$R" link set lo up
        ip -n "$R" link set r0 up
        ip -n "$R" link set r1 up
        "$BIN" relay --netns "$R" r0 r1 --loss "$LOSS" --seed "${SEED:-1}" &
        echo $! >"$RELAY_PID"
    else
        ip link add "${A}v" netns "$A" mtu 1500 type veth peer name "${B}v" netns "$B" mtu 1500
    fi
    local ns dev addr
    for side in "$A:${A}v:$ADDR_A" "$B:${B}v:$ADDR_B"; do
        IFS=: read -r ns dev addr <<<"$side"
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$addr/24" dev "$dev"
        ip -n "$ns" link set "$dev" up
        tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 1
        tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" quantum 60000
        tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: bfifo limit "${queue}b"
    done
    echo "narrow link up: $A ($ADDR_A) <-> $B ($ADDR_B), $rate each way, ${queue} B bfifo${LOSS:+, relay in $R losing $LOSS}"
}

stats() {
    for ns in "$A" "$B"; do
        echo "$ns egress:"
        tc -n "$ns" -s qdisc show dev "${ns}v" | sed -n '/bfifo/,/backlog/p'
    done
}

srp_bench() {
    local rate=${1:-2gbit} runtime=${2:-10} bin=${3:-$BIN}
    BIN=$bin
    [ -x "$bin" ] || { echo "narrow-link: $bin not found (cargo build --release -p softrdma)" >&2; exit 1; }
    # A link of this run's own unless NARROW_LINK_NAME names one: the default names are
    # shared, and `up` deletes what has them (one engineer's benchmark once removed
    # another's link in the middle of its run).
    if [ -z "${NARROW_LINK_NAME:-}" ]; then
        A=srlsh$$a
        B=srlsh$$b
    fi
    local pids=()
    cleanup() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        wait 2>/dev/null || true
        down
    }
    trap cleanup EXIT INT TERM
    up "$rate"
    local log
    log=$(mktemp)
    # Congestion control on (off by default: docs/congestion-control.md); CC=0 to compare.
    export SOFTRDMA_CC=${CC:-1}
    echo "SOFTRDMA_CC=$SOFTRDMA_CC"
    ip netns exec "$A" "$bin" srpt -a "$ADDR_A" --lun mem:256m --allow "$ADDR_B" >"$log" 2>&1 &
    pids+=($!)
    local line=""
    for _ in $(seq 100); do
        line=$(sed -n 's/^add_target: //p' "$log" | head -1)
        [ -n "$line" ] && break
        sleep 0.1
    done
    [ -n "$line" ] || { echo "srpt did not come up:"; cat "$log"; exit 1; }
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    for rw in read write; do
        echo "== softrdma SRP 1 MiB $rw QD8 through $rate =="
        ip netns exec "$B" "$bin" srp bench --rw "$rw" --bs 1M --iodepth 8 --runtime "$runtime" --size 256m "$line" | grep -vE "^Jobs:"
        stats | grep -E 'egress|dropped'
    done
    if [ -n "${LOSS:-}" ]; then
        echo "== softrdma SRP 1 MiB randrw QD8, verified, through $rate with $LOSS loss =="
        ip netns exec "$B" "$bin" srp bench --rw randrw --bs 1M --iodepth 8 --runtime "$runtime" --size 256m --verify "$line" | grep -vE "^Jobs:"
    fi
    if command -v fio >/dev/null && command -v nbdkit >/dev/null; then
        ip netns exec "$A" nbdkit --foreground --exit-with-parent --ipaddr="$ADDR_A" --port=10809 memory 256M &
        pids+=($!)
        sleep 1
        for rw in read write; do
            echo "== fio+nbdkit (TCP) 1 MiB $rw QD8 through $rate =="
            ip netns exec "$B" fio --name=nbd --ioengine=nbd --uri="nbd://$ADDR_A:10809/" --rw="$rw" \
                --bs=1M --iodepth=8 --time_based --runtime="${runtime}s" --size=256M \
                | grep -E 'IOPS=|BW=|bw=' | head -3
        done
    else
        echo "fio and nbdkit not found: ours only (apt-get install -y fio nbdkit)"
    fi
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
}

cmd=${1:-}
shift || true
case "$cmd" in
    up) need_root; up "$@" ;;
    down) need_root; down ;;
    stats) need_root; stats ;;
    exec)
        need_root
        side=${1:?a or b}; shift
        case "$side" in a) ip netns exec "$A" "$@" ;; b) ip netns exec "$B" "$@" ;; *) echo "a or b" >&2; exit 2 ;; esac
        ;;
    srp-bench) need_root; srp_bench "$@" ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
esac

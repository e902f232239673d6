#!/usr/bin/env bash
# Measures what the kernel puts in the IPv4 ID of our datagrams (docs/measurements.md, "Wire facts").
# Needs root (dumpcap on lo, a network namespace), dumpcap and tshark. Loopback only: the second
# half runs in a private network namespace whose lo has gso_max_segs 1, so the kernel segments
# GSO sends in software before the capture point, as it does for a device without UDP
# segmentation offload (a tap into a guest without USO, a veth with tx-udp-segmentation off).
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build -q -p softrdma-driver --example wire_facts
bin=target/debug/examples/wire_facts
out=$(mktemp -d)
ns=softrdma-wf-$$
fields=(-T fields -e udp.srcport -e ip.id -e ip.flags.df -e ip.len)

capture() { # capture FILE CMD... : runs CMD while dumpcap writes FILE
    local file=$1; shift
    "$@" dumpcap -q -i lo -f 'udp and src portrange 47901-47906' -w "$file" 2>/dev/null &
    local pid=$!
    sleep 1.5
    "$@" "$bin" send
    sleep 0.5
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "== host lo (GSO passes lo unsegmented) =="
capture "$out/lo.pcapng"
tshark -r "$out/lo.pcapng" "${fields[@]}" 2>/dev/null

echo "== netns lo with gso_max_segs 1 (software segmentation) =="
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null || true; rm -rf "$out"' EXIT
ip -n "$ns" link set lo up
ip -n "$ns" link set dev lo gso_max_segs 1
capture "$out/ns.pcapng" ip netns exec "$ns"
tshark -r "$out/ns.pcapng" "${fields[@]}" 2>/dev/null

echo "== GRO on loopback =="
"$bin" gro

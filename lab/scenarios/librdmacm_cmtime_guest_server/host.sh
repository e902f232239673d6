# `Debian cmtime over softrdma run` client on the host (inside the netns, 10.77.0.1) -> the guest kernel's
# cmtime server, as rdma-core's `cmtime -s SERVER -b SOURCE -c 200`: bind, resolve address,
# resolve route, create QP, connect, disconnect, destroy, each step for all 200 connections
# before the next, then the per-step table (with its "bind addr" row: -b) (docs/tools.md)
. ./lib.sh
wait_flag A.ready 45
stamp "Debian cmtime over softrdma run client -c 200 -> A"
run_to host-client timeout 40 "$SOFTRDMA" run -- cmtime -s $A_IP -b $HOST_IP -c 200
stamp done; touch host.done

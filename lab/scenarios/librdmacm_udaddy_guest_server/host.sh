# `Debian udaddy over softrdma run` client on the host (inside the netns, 10.77.0.1) -> the guest kernel's
# udaddy server, as rdma-core's `udaddy -s SERVER -b SOURCE -c 2 -C 10 -S 100`: 2 SIDR REQs,
# 10 SENDs with immediate on each to the QPN and Q_Key of the SIDR REP, 10 replies received,
# exit 0 (docs/tools.md)
. ./lib.sh
wait_flag A.ready 45
stamp "Debian udaddy over softrdma run client -c 2 -C 10 -S 100 -> A"
run_to host-client timeout 30 "$SOFTRDMA" run -- udaddy -s $A_IP -b $HOST_IP -c 2 -C 10 -S 100
stamp done; touch host.done

# `Debian ucmatose over softrdma run` client on the host (inside the netns, 10.77.0.1) -> the guest kernel's
# ucmatose server, as rdma-core's `ucmatose -s SERVER -b SOURCE -c 4 -C 10 -S 100`: 4
# connections, on each receive the server's 10 messages of 100 bytes, SEND 10 replies, answer
# the server's DREQ, exit 0 (docs/tools.md)
. ./lib.sh
wait_flag A.ready 45
stamp "Debian ucmatose over softrdma run client -c 4 -C 10 -S 100 -> A"
run_to host-client timeout 30 "$SOFTRDMA" run -- ucmatose -s $A_IP -b $HOST_IP -c 4 -C 10 -S 100
stamp done; touch host.done

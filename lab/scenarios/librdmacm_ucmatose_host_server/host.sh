# `Debian ucmatose over softrdma run` server on the host (inside the netns, 10.77.0.1), as rdma-core's
# `ucmatose -b ADDR -c 4 -C 10 -S 100`: accept 4 connections, then on each SEND 10 messages of
# 100 bytes, take the client's 10 replies, disconnect (DREQ) and exit 0 (docs/tools.md)
. ./lib.sh
stamp "Debian ucmatose over softrdma run server -c 4 -C 10 -S 100"
timeout 40 "$SOFTRDMA" run -- ucmatose -b $HOST_IP -c 4 -C 10 -S 100 > host-server.txt 2> host-server.err &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
# it exits by itself once its DREQs are answered: allow 5 s, then stop it
stop_bg host-server $P 5
stamp done

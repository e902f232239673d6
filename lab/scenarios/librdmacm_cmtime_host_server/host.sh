# `Debian cmtime over softrdma run` server on the host (inside the netns, 10.77.0.1), as rdma-core's
# `cmtime -b ADDR`: accept every connection request (QP with 1 send/1 recv WR, rdma_accept
# defaults), answer each DREQ with a DREP; like v44 it never exits by itself and prints
# nothing on success, so it is stopped with SIGTERM once the client is done (docs/tools.md)
. ./lib.sh
stamp "Debian cmtime over softrdma run server"
timeout 50 "$SOFTRDMA" run -- cmtime -b $HOST_IP > host-server.txt 2> host-server.err &
P=$!; sleep 1; touch host.ready
wait_flag A.done 50
stop_bg host-server $P 1
stamp done

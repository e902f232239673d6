# cmtime server (rdma-core v44, kernel rdma_cm + rxe) on guest A <- softrdma cmtime client.
# v44's server never exits: it is stopped (SIGTERM) once the host's client is done.
. ./lib.sh
stamp "cmtime server"
timeout 50 cmtime -b $A_IP > guest-server.txt 2> guest-server.err &
P=$!; sleep 1; touch A.ready
wait_flag host.done 50
stop_bg guest-server $P 1
stamp done

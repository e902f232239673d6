# udaddy server (rdma-core v44, kernel rdma_cm + rxe) on guest A <- softrdma udaddy client
. ./lib.sh
stamp "udaddy server -c 2 -C 10 -S 100"
timeout 40 udaddy -b $A_IP -c 2 -C 10 -S 100 > guest-server.txt 2> guest-server.err &
P=$!; sleep 1; touch A.ready
wait_flag host.done 45
# v44's server exits by itself once its replies completed: allow 5 s, then stop it
stop_bg guest-server $P 5
stamp done

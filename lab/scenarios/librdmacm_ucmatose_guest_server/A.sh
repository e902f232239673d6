# ucmatose server (rdma-core v44, kernel rdma_cm + rxe) on guest A <- softrdma ucmatose client
. ./lib.sh
stamp "ucmatose server -c 4 -C 10 -S 100"
timeout 40 ucmatose -b $A_IP -c 4 -C 10 -S 100 > guest-server.txt 2> guest-server.err &
P=$!; sleep 1; touch A.ready
wait_flag host.done 45
# v44's server exits by itself once its DREQs are answered: allow 5 s, then stop it
stop_bg guest-server $P 5
stamp done

# ucmatose client (rdma-core v44, kernel rdma_cm + rxe) on guest A -> softrdma ucmatose server
. ./lib.sh
wait_flag host.ready 45
stamp "ucmatose client -c 4 -C 10 -S 100 -> host"
run_to guest-client timeout 30 ucmatose -s $HOST_IP -c 4 -C 10 -S 100
stamp done; touch A.done

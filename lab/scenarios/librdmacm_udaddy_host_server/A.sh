# udaddy client (rdma-core v44, kernel rdma_cm + rxe) on guest A -> softrdma udaddy server
. ./lib.sh
wait_flag host.ready 45
stamp "udaddy client -c 2 -C 10 -S 100 -> host"
run_to guest-client timeout 30 udaddy -s $HOST_IP -c 2 -C 10 -S 100
stamp done; touch A.done

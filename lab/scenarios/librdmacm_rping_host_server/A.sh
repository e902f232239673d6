# rping client (kernel rdma_cm + rxe) on guest A -> Debian rping -s over softrdma's librdmacm on the host
. ./lib.sh
wait_flag host.ready 45
stamp "rping client -C 3 -v -> host"
run_rc client timeout 30 rping -c -a $HOST_IP -v -C 3 > rping-client.txt 2>&1
cat rping-client.txt client.rc
stamp done; touch A.done

# perftest ib_send_bw -R client (kernel rdma_cm + rxe) on guest A -> Debian's ib_send_bw -R
# server over softrdma's librdmacm on the host
. ./lib.sh
wait_flag host.ready 45
stamp "ib_send_bw -R client -> host"
run_rc client timeout 50 ib_send_bw -R -d rxe0 -n 200 -s 4096 $HOST_IP > bw-client.txt 2>&1
cat bw-client.txt client.rc
stamp done; touch A.done

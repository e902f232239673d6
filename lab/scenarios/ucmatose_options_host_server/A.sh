# ucmatose client (rdma-core v44) with TOS and ACK timeout on guest A -> softrdma ucmatose
# server (which sets its own ACK timeout before accepting)
. ./lib.sh
wait_flag host.ready 45
stamp "ucmatose client -c 2 -C 10 -S 100 -t 0x48 -a 14 -> host"
run_to guest-client timeout 30 ucmatose -s $HOST_IP -c 2 -C 10 -S 100 -t 0x48 -a 14
stamp done; touch A.done

# ucmatose server (rdma-core v44) on guest A, ACK timeout 16 <- softrdma ucmatose client with
# -t 0x48 -a 14
. ./lib.sh
stamp "ucmatose server -c 2 -C 10 -S 100 -a 16"
timeout 40 ucmatose -b $A_IP -c 2 -C 10 -S 100 -a 16 > guest-server.txt 2> guest-server.err &
P=$!; sleep 1; touch A.ready
wait_flag host.done 45
stop_bg guest-server $P 5
stamp done

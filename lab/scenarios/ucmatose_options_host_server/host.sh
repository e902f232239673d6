# `softrdma ucmatose -b 10.77.0.1 -c 2 -C 10 -S 100 -a 16` (the ACK timeout set on each new id
# before rdma_accept, as cmatose does) <- the guest's client with -t 0x48 -a 14
. ./lib.sh
stamp "softrdma ucmatose server -c 2 -C 10 -S 100 -a 16"
timeout 40 "$SOFTRDMA" ucmatose -b $HOST_IP -c 2 -C 10 -S 100 -a 16 > host-server.txt 2> host-server.err &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
stop_bg host-server $P 5
stamp done

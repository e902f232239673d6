# guest A: rping client towards the host; nobody answers in RoCE, the host program just receives
. ./lib.sh
wait_flag host.listening 30
stamp "rping -c -a $HOST_IP (no RoCE peer there: the CM REQ is sent, then retried)"
rping -c -a $HOST_IP -p 7471 -C 1 > rping.txt 2>&1 &
P=$!
wait_flag host.got 30; sleep 1
kill $P 2>/dev/null; wait $P; cat rping.txt
stamp done

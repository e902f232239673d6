# rping client (kernel rdma_cm + rxe) on guest A -> the host, whose softrdma rping server
# listens on port 7471 only: the REQ targets port 9999 (no listener)
. ./lib.sh
wait_flag host.ready 45
stamp "rping client to port 9999 (no listener there)"
_t0=$(cut -d' ' -f1 /proc/uptime)
run_rc client timeout 30 rping -c -a $HOST_IP -p 9999 -C 1 -v > rping-client.txt 2>&1
_t1=$(cut -d' ' -f1 /proc/uptime)
# whole seconds the client took to fail
echo $(( ${_t1%.*} - ${_t0%.*} )) > client.secs
cat rping-client.txt client.rc client.secs
stamp done; touch A.done

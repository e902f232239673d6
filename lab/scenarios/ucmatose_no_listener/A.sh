# ucmatose client (rdma-core v44) on guest A -> port 9999 on the host, where softrdma's
# ucmatose server listens on 7471 only; then A stays up (rxe answering, nothing listening)
# while the host's softrdma ucmatose client tries port 9999 here.
. ./lib.sh
wait_flag host.ready 45
stamp "ucmatose client to port 9999 on the host (no listener there)"
_t0=$(cut -d' ' -f1 /proc/uptime)
run_to guest-client timeout 20 ucmatose -s $HOST_IP -p 9999
_t1=$(cut -d' ' -f1 /proc/uptime)
# whole seconds the client took to fail
echo $(( ${_t1%.*} - ${_t0%.*} )) > guest-client.secs
touch A.done
wait_flag host.done 40
stamp done

# udaddy client (rdma-core v44) on guest A -> the host, where softrdma runs a ucmatose server
# (an RC listener on 7471, no UD listener: SIDR REP status 1); then A stays up (rxe answering,
# nothing listening) while the host's softrdma udaddy client tries A.
. ./lib.sh
wait_flag host.ready 45
stamp "udaddy client to the host (no UD listener there)"
_t0=$(cut -d' ' -f1 /proc/uptime)
run_to guest-client timeout 20 udaddy -s $HOST_IP
_t1=$(cut -d' ' -f1 /proc/uptime)
echo $(( ${_t1%.*} - ${_t0%.*} )) > guest-client.secs
touch A.done
wait_flag host.done 40
stamp done
